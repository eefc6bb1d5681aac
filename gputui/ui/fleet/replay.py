"""The fleet view driven by a fleet recording (``gputui replay FILE`` of ``gputui record
--hosts``), with the replay's keys and status line (:class:`~gputui.ui.replay.ReplayControls`).
The player stands in for the fleet's source; the frames of the sparklines' window before the
one shown go into the sparklines, one value a frame.
"""

from __future__ import annotations

from textual.binding import Binding

from gputui.fleet.hosts import HostReading
from gputui.recording.player import FleetFrame, FleetPlayer, Shown
from gputui.ui.fleet.app import FLEET_KEYS_HELP, HISTORY_LENGTH, FleetApp, FleetView
from gputui.ui.replay import REPLAY_COMMANDS, STATUS_CSS, ReplayControls
from gputui.ui.widgets.keys_help import KeyArea, action_name, key_rows


class PlayedFleet:
    """The fleet's source in a replay: the hosts of the frame shown."""

    def __init__(self, player: FleetPlayer) -> None:
        self._player = player
        self.generation = 0  # (unused: the replay paints when it moves)
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
        """Show the player's frame (at ``speed`` recorded seconds a second, ``loop``: again
        after the last); nothing moves until the app runs."""
        super().__init__(PlayedFleet(player), clock=lambda: player.t)  # ages in recorded time
        self.player: FleetPlayer = player
        self._start_replay(player, playing=playing, speed=speed, loop=loop)

    def on_mount(self) -> None:
        """The view shows the first frame (its own mount); then the replay starts."""
        self._begin_replay()

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
        explain = FLEET_KEYS_HELP | {action: text for _, text, action in REPLAY_COMMANDS}
        areas: dict[str, list[Binding]] = {"Fleet": [], "Replay": []}
        for _, binding in self._bindings:
            area = "Replay" if action_name(binding).startswith("replay_") else "Fleet"
            areas[area].append(binding)
        return [
            (area, key_rows(bindings, self.get_key_display, explain))
            for area, bindings in areas.items()
        ]


def run_fleet_replay(player: FleetPlayer, *, playing: bool, speed: float, loop: bool) -> int:
    """Replay a fleet recording in the fleet view until the user quits; the exit code."""
    app = FleetReplayApp(player, playing=playing, speed=speed, loop=loop)
    app.run()
    return app.return_code or 0
