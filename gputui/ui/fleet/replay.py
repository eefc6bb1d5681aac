"""The fleet view driven by a fleet recording (``gputui replay FILE`` of ``gputui record
--hosts``): every host and GPU as the live view showed them, with the replay's keys and status
line (:class:`~gputui.ui.replay.ReplayControls`).

A :class:`~gputui.recording.player.FleetPlayer` reads the frames and stands in for the fleet's
source; each frame it lands on is shown as the live view shows a new read, and the frames of
the sparklines' window before it go into the sparklines, one value a frame.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from gputui.fleet.hosts import HostReading
from gputui.recording.player import FleetFrame, FleetPlayer, Shown
from gputui.ui.fleet.app import FLEET_KEYS_HELP, HISTORY_LENGTH, FleetApp, FleetView
from gputui.ui.replay import STATUS_CSS, ReplayControls
from gputui.ui.widgets.keys_help import KeyArea, action_name, key_rows


class PlayedFleet:
    """The fleet's source in a replay: the hosts of the frame shown."""

    def __init__(self, player: FleetPlayer) -> None:
        self._player = player
        self.generation = 0
        """Unused: the replay paints when it moves."""
        self.error: str | None = None
        """Why the recorded source did not answer, in the frame last given."""

    def start(self) -> None:
        """Nothing: the replay moves the frames."""

    def stop(self) -> None:
        """Nothing to stop."""

    def latest(self) -> list[HostReading]:
        """The hosts of the frame shown (and its :attr:`error`)."""
        frame = self._player.readings
        self.error = frame.error
        return frame.hosts


class FleetReplayApp(ReplayControls, FleetApp):
    """The fleet view, driven by a recording."""

    TITLE = "gputui fleet replay"
    CSS = FleetApp.CSS + STATUS_CSS

    def __init__(
        self, player: FleetPlayer, *, playing: bool = True, speed: float = 1.0, loop: bool = False
    ) -> None:
        """Show the player's frame; nothing moves until the app runs.

        Args:
            player: The recording, at its first frame.
            playing: Play from the start (else paused).
            speed: Recorded seconds a second, one of the player's speeds.
            loop: Start again from the first frame after the last.
        """
        super().__init__(PlayedFleet(player), clock=lambda: player.t)  # ages in recorded time
        self.player: FleetPlayer = player
        self._start_replay(player, playing=playing, speed=speed, loop=loop)

    def compose(self) -> ComposeResult:
        """The fleet view, the replay's status line under it, the footer."""
        yield Static(id="fleet-title", markup=False)
        yield FleetView(self._clock)
        yield Input(placeholder="filter: host, exporter, GPU name or 'down'", id="filter")
        yield self._status
        yield Footer()

    def on_mount(self) -> None:
        """The view shows the first frame (its own mount); then the replay starts."""
        self._begin_replay()

    def _later(self, delay_s: float, callback: Callable[[], object]) -> asyncio.TimerHandle:
        """Call ``callback`` after ``delay_s`` from the event loop (an error ends the app
        with its traceback, as from a Textual timer)."""

        def guarded() -> None:
            try:
                callback()
            except Exception as error:
                self._handle_exception(error)

        return asyncio.get_running_loop().call_later(delay_s, guarded)

    @property
    def _showing(self) -> bool:
        """False once the app is closing and its widgets are going away."""
        return bool(self.query(FleetView)) and self.query_one(FleetView).is_attached

    def _window_s(self) -> float:
        """How far back the sparklines reach."""
        return HISTORY_LENGTH * self.player.header.interval_s

    def _show(self, played: list[Shown[FleetFrame]], *, again: bool = False) -> None:
        """Show the last of ``played``, the frames before it into the sparklines (``again``:
        the sparklines start over, after a seek)."""
        if played and self._showing:
            view = self.query_one(FleetView)
            if again:
                view.forget()
            for shown in played[:-1]:
                view.show(shown.readings.hosts, self.order)
            self.update_view()
        self._say_status()

    def key_areas(self) -> list[KeyArea]:
        """The fleet view's keys, and the replay's."""
        explain = FLEET_KEYS_HELP | self.replay_explained()
        areas: dict[str, list[Binding]] = {"Fleet": [], "Replay": []}
        for _, binding in self._bindings:
            area = "Replay" if action_name(binding).startswith("replay_") else "Fleet"
            areas[area].append(binding)
        return [
            (area, key_rows(bindings, self.get_key_display, explain))
            for area, bindings in areas.items()
        ]

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """The fleet view's palette, with the replay's keys."""
        yield from super().get_system_commands(screen)
        yield from self.replay_commands(screen)


def run_fleet_replay(player: FleetPlayer, *, playing: bool, speed: float, loop: bool) -> int:
    """Replay a fleet recording in the fleet view until the user quits; the exit code."""
    app = FleetReplayApp(player, playing=playing, speed=speed, loop=loop)
    app.run()
    return app.return_code or 0
