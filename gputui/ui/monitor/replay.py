"""The monitor driven by a recording (``gputui replay FILE``): the live app, its panels, process
table, sparklines and health drawn from the recorded frames instead of the samplers.

A :class:`~gputui.recording.player.Player` reads the frames; this app moves it (play, pause,
step, seek, speed, loop) and paints each frame it lands on as the live app paints a beat. The
sparklines hold the frames of the window before the frame shown, one value a frame, as the
live monitor held one a sample: after a seek they are filled again from the recording, and
so is each process's history (the process screen).
Nothing here sends a signal or starts a run.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterable
from dataclasses import replace
from functools import partial
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingsMap, BindingType
from textual.geometry import Size
from textual.screen import Screen
from textual.widgets import Input, Static

from gputui.format import for_screen, one_line
from gputui.recording.player import Player, Shown, faster, goto_time
from gputui.recording.render import fmt_offset, fmt_utc
from gputui.telemetry.history import History, record_cpu, record_gpus
from gputui.telemetry.polling import SOURCES
from gputui.ui.monitor.app import FOOTER_FULL_FROM, FOOTER_PALETTE_FROM, Clock, MonitorApp
from gputui.ui.widgets.footer import FittingFooter
from gputui.ui.widgets.runner.setup import RunnerSetup
from gputui.ui.widgets.steady import SteadyHorizontal

TICK_MIN_S = 0.1
"""The shortest wait between two painted frames while playing: faster, a tick moves on
several frames (each still goes into the sparklines)."""
MINUTE_S = 60.0
"""How far ``[`` and ``]`` seek."""
STEP_GROUP = Binding.Group("Step", compact=True)
MINUTE_GROUP = Binding.Group("Min", compact=True)
SPEED_GROUP = Binding.Group("Speed", compact=True)
RUNNER_REFUSAL = "A replay shows a recording: the runner cannot start or stop runs here."
"""What the runner's keys say in a replay."""
SIGNAL_REFUSAL = "A replay shows a recording: its processes are not this machine's to signal."
"""What ``k``, ``K`` and ``i`` say in a replay."""


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
_REFUSED_ACTIONS = (
    "action_runner_",
    "action_process_terminate",
    "action_process_kill",
    "action_process_interrupt",
)
"""The palette's monitor entries a replay leaves out (what it refuses), by their actions."""


class ReplayApp(MonitorApp):
    """The monitor, driven by a recording."""

    KEY_AREAS: ClassVar[dict[str, str]] = {"replay_": "Replay", "process_": "GPU processes"}
    CSS = "#replay-status { height: 1; padding: 0 1; background: $panel; }"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "replay_pause", "Pause"),
        # (priority: the process table scrolls on them otherwise; see check_action)
        Binding("left", "replay_step(-1)", "The frame before", group=STEP_GROUP, priority=True),
        Binding("right", "replay_step(1)", "The next frame", group=STEP_GROUP, priority=True),
        Binding("left_square_bracket", "replay_jump(-1)", "A minute back", group=MINUTE_GROUP),
        Binding("right_square_bracket", "replay_jump(1)", "A minute on", group=MINUTE_GROUP),
        Binding("g", "replay_goto", "Go to"),
        Binding("minus", "replay_speed(-1)", "Slower", group=SPEED_GROUP),
        Binding("plus,equals_sign", "replay_speed(1)", "Faster", group=SPEED_GROUP),
        Binding("l", "replay_loop", "Loop"),
    ]

    def __init__(
        self,
        player: Player,
        *,
        playing: bool = True,
        speed: float = 1.0,
        loop: bool = False,
        history: History | None = None,
        runner: RunnerSetup | None = None,
    ) -> None:
        """Show the player's frame; nothing moves until the app runs.

        Args:
            player: The recording, at its first frame.
            playing: Play from the start (else paused).
            speed: Recorded seconds a second, one of :data:`SPEEDS`.
            loop: Start again from the first frame after the last.
            history: Holds the sparklines' values (default: five minutes' worth).
            runner: The runner pane's setup; the pane stays hidden and starts nothing.
        """
        clock: Clock = lambda: player.t  # noqa: E731  (staleness in recorded time)
        super().__init__(
            player.samplers(),
            interval=player.header.interval_s,
            clock=clock,
            history=history,
            runner=runner,
            readonly=True,
        )
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
        self._runner_wanted = False  # the runner pane stays hidden: it shows no recording
        self._status = Static(id="replay-status", markup=False)
        self._bindings = BindingsMap(
            replace(binding, show=False)
            if binding.action.startswith("runner_") or binding.action == "doctor"
            else binding
            for _, binding in self._bindings
        )

    def compose(self) -> ComposeResult:
        """The monitor, the replay's status line under it, the footer."""
        with SteadyHorizontal(id="body"):
            yield self.monitor
            yield self.runner
        yield self._status
        yield FittingFooter(FOOTER_FULL_FROM, FOOTER_PALETTE_FROM)

    def on_mount(self) -> None:
        """The monitor shows the first frame (its own mount); then the replay starts."""
        self._say_status()
        if self.playing:
            self._later(0.0, self._schedule)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The replay's keys work on the monitor's own screen (not over a dialog), and leave
        the arrows to a text field that has the focus (the process filter)."""
        if action.startswith("replay_") and (
            self.screen is not self.screen_stack[0] or isinstance(self.focused, Input)
        ):
            return False
        return super().check_action(action, parameters)

    def _poll(self, source: str) -> None:
        """The shown frame's reading, at once (a recorded frame needs no thread)."""
        self._arrived(source, for_screen(getattr(self.samplers, source).sample()))

    def _poll_again(self, source: str) -> None:
        """Nothing: frames come when the replay moves (:meth:`_show`)."""

    def _expected_monitor_size(self) -> Size:
        """The live monitor's, less the status line."""
        width, height = super()._expected_monitor_size()
        return Size(width, max(height - 1, 0))

    # -- moving through the recording -------------------------------------------------------

    def _window_s(self) -> float:
        """How far back the sparklines reach."""
        return self.history.maxlen * self.player.header.interval_s

    def _show(self, played: list[Shown], *, again: bool = False) -> None:
        """Paint the last of ``played`` as a beat, the frames before it into the sparklines
        and the processes' histories (``again``: both start over, after a seek)."""
        if played:
            if again:
                self.history.clear()
                self.process_history.clear()
            for shown in played[:-1]:
                snapshot = shown.snapshot
                record_cpu(self.history, snapshot.cpu)
                record_gpus(self.history, snapshot.gpus)
                for reading in (snapshot.nvml, snapshot.drm):
                    self.process_history.record(reading.taken_at, reading.gpus)
            last = for_screen(played[-1].snapshot)
            for source in SOURCES:
                self._beat.arrived(source, getattr(last, source))
            self._paint()
        self._say_status()

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
            delay = max(self.player.header.interval_s / self.speed, TICK_MIN_S)
            self._tick = self._later(delay, self._on_tick)

    def _on_tick(self) -> None:
        """Move on by a tick's worth of recorded time; at the end, loop or pause."""
        self._tick = None
        if not self.playing or not self._showing:
            return
        step = max(self.player.header.interval_s / self.speed, TICK_MIN_S) * self.speed
        self._target_t += step
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
        from gputui.ui.widgets.goto_dialog import GotoDialog

        def parse(text: str) -> float:
            return goto_time(text, self.player.header)

        def chosen(t: float | None) -> None:
            if t is not None:
                self.seek(min(max(t, 0.0), self.player.last_t))

        self.push_screen(GotoDialog(parse, f"+{fmt_offset(self.player.t)}"), chosen)

    def action_replay_speed(self, steps: int) -> None:
        """Play faster, or slower, within :data:`SPEEDS`."""
        self.speed = faster(self.speed, steps)
        self._target_t = self.player.t
        self._schedule()
        self._say_status()

    def action_replay_loop(self) -> None:
        """Start again from the first frame after the last, or stop there."""
        self.loop = not self.loop
        self._say_status()

    def _say_status(self) -> None:
        """The status line: playing or paused, the frame's time, the host, speed and loop,
        and the first damaged line met (said once as a notice too)."""
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
        parts += [fmt_utc(header.started_unix + player.t), one_line(header.host)]
        parts.append(f"{self.speed:g}x" + ("  loop" if self.loop else ""))
        self._status.update(Text(one_line("  ".join(parts)), no_wrap=True, overflow="ellipsis"))

    def offers(self, action: str) -> bool:
        """The help leaves out what a replay refuses."""
        return not f"action_{action}".startswith(_REFUSED_ACTIONS)

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """The monitor's palette less what a replay refuses, with the replay's keys."""
        for command in super().get_system_commands(screen):
            name = getattr(command.callback, "__name__", "")
            if self.offers(name.removeprefix("action_")):
                yield command
        if screen is self.screen_stack[0]:
            for title, help_text, action in REPLAY_COMMANDS:
                name, _, argument = action.partition("(")
                callback = getattr(self, f"action_{name}")
                if argument:
                    callback = partial(callback, int(argument.rstrip(")")))
                yield SystemCommand(title, f"{help_text} ({self.keys_of(action)})", callback)

    # -- what a replay refuses -------------------------------------------------------------

    def _refuse_runner(self) -> None:
        self.notify(RUNNER_REFUSAL, severity="warning", markup=False)

    async def action_runner_start(self) -> None:
        """Refused: a replay starts no run."""
        self._refuse_runner()

    async def action_runner_compare(self) -> None:
        """Refused: a replay starts no run."""
        self._refuse_runner()

    async def action_runner_experiment(self) -> None:
        """Refused: a replay starts no run."""
        self._refuse_runner()

    async def action_runner_scale(self) -> None:
        """Refused: a replay starts no run."""
        self._refuse_runner()

    def action_runner_stop(self) -> None:
        """Refused: a replay has no run to stop."""
        self._refuse_runner()

    def action_runner_toggle(self) -> None:
        """Refused: the runner pane shows no recording."""
        self._refuse_runner()

    def action_runner_detail(self) -> None:
        """Refused: the runner pane shows no recording."""
        self._refuse_runner()

    def _ask_to_signal(self, signum: signal.Signals) -> None:
        """Refused: the recorded processes are not this machine's now."""
        self.notify(SIGNAL_REFUSAL, severity="warning", markup=False)
