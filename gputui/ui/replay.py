"""The replay's keys, shared by the monitor and the fleet view when a recording drives them
(``gputui replay FILE``): pause, step, seek, speed and loop, the status line under the view,
and the palette's entries. :class:`ReplayControls` moves a
:class:`~gputui.recording.player.FramePlayer`; each app paints what it lands on (``_show``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from gputui.format import one_line
from gputui.recording.frames import FLEET
from gputui.recording.player import FramePlayer, Shown, faster, goto_time
from gputui.recording.render import fmt_offset, fmt_utc
from gputui.ui.colours import TerminalColours

TICK_MIN_S = 0.1
"""The shortest wait between two painted frames while playing: faster, a tick moves on
several frames (each still goes into the sparklines)."""
MINUTE_S = 60.0
"""How far ``[`` and ``]`` seek."""
STEP_GROUP = Binding.Group("Step", compact=True)
MINUTE_GROUP = Binding.Group("Min", compact=True)
SPEED_GROUP = Binding.Group("Speed", compact=True)
STATUS_CSS = "#replay-status { height: 1; padding: 0 1; background: $panel; }"
"""The status line's style, in each replay app's CSS."""

REPLAY_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("Pause or play", "Pause the replay, or play it on", "replay_pause"),
    ("Next frame", "Show the next recorded frame", "replay_step(1)"),
    ("Frame before", "Show the recorded frame before", "replay_step(-1)"),
    ("A minute on", "Seek a minute on in the recording", "replay_jump(1)"),
    ("A minute back", "Seek a minute back in the recording", "replay_jump(-1)"),
    ("Go to a time", "Go to an offset, a UTC time (03:00:00 UTC), start or end", "replay_goto"),
    ("Faster", "Play faster, up to 16x", "replay_speed(1)"),
    ("Slower", "Play slower, down to 0.25x", "replay_speed(-1)"),
    ("Loop", "Start again after the last frame, or stop there", "replay_loop"),
)
"""The palette's entries for the replay's keys: title, help, action."""


class ReplayControls(TerminalColours):
    """The replay's keys and status line, mixed in before an app (the monitor, the fleet
    view) that paints a frame in ``_show``; call :meth:`_start_replay` in ``__init__``."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "replay_pause", "Pause"),
        # (priority: a table scrolls on them otherwise; see check_action)
        Binding("left", "replay_step(-1)", "The frame before", group=STEP_GROUP, priority=True),
        Binding("right", "replay_step(1)", "The next frame", group=STEP_GROUP, priority=True),
        Binding("left_square_bracket", "replay_jump(-1)", "A minute back", group=MINUTE_GROUP),
        Binding("right_square_bracket", "replay_jump(1)", "A minute on", group=MINUTE_GROUP),
        Binding("g", "replay_goto", "Go to"),
        Binding("minus", "replay_speed(-1)", "Slower", group=SPEED_GROUP),
        Binding("plus,equals_sign", "replay_speed(1)", "Faster", group=SPEED_GROUP),
        Binding("l", "replay_loop", "Loop", show=False),  # the status line says loop; ? lists l
    ]

    if TYPE_CHECKING:  # the app's own, under the mixin in the order of classes

        @property
        def _showing(self) -> bool:
            """False once the app is closing."""

    def _start_replay(
        self, player: FramePlayer[Any], *, playing: bool, speed: float, loop: bool
    ) -> None:
        """Take ``player``, at its first frame; nothing moves until the app runs."""
        self.player = player
        player.window_s = self._window_s()  # (kept as it plays: stepping back reads nothing)
        self.playing = playing
        """Whether the frames move on by themselves."""
        self.speed = faster(speed, 0)
        """Recorded seconds a second."""
        self.loop = loop
        """Whether the replay starts again after the last frame."""
        self.loops = 0
        """Times the replay started again after the last frame (tests wait on it)."""
        self._target_t = player.t
        self._tick: asyncio.TimerHandle | None = None
        self._said_problem = False
        self._status = Static(id="replay-status", markup=False)

    def compose(self) -> ComposeResult:
        """The app's widgets, with the status line above its footer."""
        for widget in super().compose():
            if isinstance(widget, Footer):
                yield self._status
            yield widget

    def _show(self, played: list[Shown[Any]], *, again: bool = False) -> None:
        """Paint the last of ``played``, the frames before it into the sparklines
        (``again``: the sparklines start over, after a seek); the app's own."""
        raise NotImplementedError

    def _window_s(self) -> float:
        """How far back the sparklines reach, in recorded seconds; the app's own."""
        raise NotImplementedError

    def _begin_replay(self) -> None:
        """Say the status, and play if asked (from the app's ``on_mount``)."""
        self._say_status()
        if self.playing:
            self._later(0.0, self._schedule)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The replay's keys work on the view's own screen (not over a dialog), and leave
        the arrows to a text field that has the focus (a filter)."""
        if action.startswith("replay_") and (
            self.screen is not self.screen_stack[0] or isinstance(self.focused, Input)
        ):
            return False
        return super().check_action(action, parameters)

    # -- moving through the recording -------------------------------------------------------

    def seek(self, t: float) -> None:
        """Show the last frame at or before ``t`` (seconds since the recording started)."""
        self._show(self.player.seek(t, self._window_s()), again=True)
        self._target_t = self.player.t

    def _schedule(self) -> None:
        """Play on: the next tick after the frame interval at this speed."""
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        if self.playing and self._showing:
            self._tick = self._later(self._tick_s(), self._on_tick)

    def _tick_s(self) -> float:
        return max(self.player.header.interval_s / self.speed, TICK_MIN_S)

    def _on_tick(self) -> None:
        """Move on by a tick's worth of recorded time; at the end, loop or pause."""
        self._tick = None
        if not self.playing or not self._showing:
            return
        self._target_t += self._tick_s() * self.speed
        played = self.player.forward(self._target_t)
        if played:
            self._show(played)
        elif self.player.finished:
            if self.loop:
                self.loops += 1
                self.seek(0.0)
            else:
                self.playing = False
                self._say_status()
                return
        self._schedule()

    # -- keys ------------------------------------------------------------------------------

    def action_replay_pause(self) -> None:
        """Pause, or play on (from the start again once the end was reached)."""
        self.playing = not self.playing
        if self.playing and self.player.finished and self.player.step() is None:
            self.seek(0.0)
        self._target_t = self.player.t
        self._schedule()
        self._say_status()

    def action_replay_step(self, frames: int) -> None:
        """Show the next frame, or the one before (one recorded interval)."""
        if frames > 0:
            shown = self.player.step()
            self._show([shown] if shown is not None else [])
        else:
            self._show(self.player.back(self._window_s()), again=True)
        self._target_t = self.player.t

    def action_replay_jump(self, minutes: int) -> None:
        """Seek a minute on, or back."""
        self.seek(max(self.player.t + minutes * MINUTE_S, 0.0))

    def action_replay_goto(self) -> None:
        """Ask for a time, then go there."""
        from gputui.ui.widgets.goto_dialog import GotoDialog  # (loads when first opened)

        def parse(text: str) -> float:
            return goto_time(text, self.player.header)

        def chosen(t: float | None) -> None:
            if t is not None:
                self.seek(min(max(t, 0.0), self.player.last_t))

        self.push_screen(GotoDialog(parse, f"+{fmt_offset(self.player.t)}"), chosen)

    def action_replay_speed(self, steps: int) -> None:
        """Play faster, or slower, within :data:`~gputui.recording.player.SPEEDS`."""
        self.speed = faster(self.speed, steps)
        self._target_t = self.player.t
        self._schedule()
        self._say_status()

    def action_replay_loop(self) -> None:
        """Start again from the first frame after the last, or stop there."""
        self.loop = not self.loop
        self._say_status()

    def _say_status(self) -> None:
        """The status line: playing or paused, the frame's time, the host (for a fleet, the
        machine that recorded it), speed and loop, and the first damaged line met (said once
        as a notice too)."""
        player = self.player
        header = player.header
        state = "▶ playing" if self.playing else "❚❚ paused"
        parts = [state, f"+{fmt_offset(player.t)} of {fmt_offset(player.last_t)}"]
        problem = player.problem
        if problem is not None:  # before what a narrow screen may cut
            parts.append(f"line {problem.line} {'cut short' if problem.cut else 'damaged'}")
            if not self._said_problem:
                self._said_problem = True
                self.notify(one_line(str(problem)), severity="warning", timeout=30, markup=False)
        host = f"fleet, recorded on {header.host}" if header.kind == FLEET else header.host
        parts += [fmt_utc(header.started_unix + player.t), one_line(host)]
        parts.append(f"{self.speed:g}x" + ("  loop" if self.loop else ""))
        self._status.update(Text(one_line("  ".join(parts)), no_wrap=True, overflow="ellipsis"))

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """The app's palette, then the replay's keys on the view's own screen."""
        yield from super().get_system_commands(screen)
        if screen is self.screen_stack[0]:
            for title, help_text, action in REPLAY_COMMANDS:
                name, _, argument = action.partition("(")
                callback = getattr(self, f"action_{name}")
                if argument:
                    callback = partial(callback, int(argument.rstrip(")")))
                keys = ", ".join(
                    self.get_key_display(binding)
                    for _, binding in self._bindings
                    if binding.action == action
                )
                yield SystemCommand(title, f"{help_text} ({keys})", callback)
