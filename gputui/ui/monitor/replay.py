"""The monitor driven by a recording (``gputui replay FILE``): the live app painting each
recorded frame the replay's keys (:class:`~gputui.ui.replay.ReplayControls`) land on as a
beat. The sparklines and each process's history hold the frames of the window before the one
shown (filled again after a seek); the runner pane shows the recorded jobs (``gputui
--record``) as they stood then. Nothing here sends a signal or starts a run.
"""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import ClassVar

from textual.binding import BindingsMap
from textual.geometry import Size

from gputui.format import for_screen
from gputui.jobs.runner import RunnerSetup
from gputui.recording.player import Player, Shown
from gputui.telemetry.history import History, record_cpu, record_gpus
from gputui.telemetry.polling import SOURCES, Beat
from gputui.telemetry.readings import Snapshot
from gputui.ui.monitor.app import Clock, MonitorApp
from gputui.ui.replay import STATUS_CSS, ReplayControls

RUNNER_REFUSAL = "A replay shows a recording: the runner cannot start or stop runs here."
"""What the runner's keys say in a replay."""
SIGNAL_REFUSAL = "A replay shows a recording: its processes are not this machine's to signal."
"""What ``k``, ``K`` and ``i`` say in a replay."""
HERE_REFUSAL = (
    "A replay shows a recording: the Doctor and the topology read this machine, not the "
    "recorded one; run gputui doctor or gputui topo there."
)
"""What ``d`` and ``n`` say in a replay (their screens would show this machine's GPUs)."""
_REFUSED_ACTIONS = (
    "action_runner_",
    "action_process_terminate",
    "action_process_kill",
    "action_process_interrupt",
    "action_doctor",
    "action_topology",
)
"""The palette's monitor entries a replay leaves out (what it refuses), by their actions."""


class ReplayApp(ReplayControls, MonitorApp):
    """The monitor, driven by a recording (the replay's keys: :class:`ReplayControls`)."""

    KEY_AREAS: ClassVar[dict[str, str]] = {"replay_": "Replay", "process_": "GPU processes"}
    CSS = STATUS_CSS

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
        """Show the player's frame (at ``speed`` recorded seconds a second, ``loop``: again
        after the last); nothing moves until the app runs. The runner pane starts nothing,
        and stays hidden where no job was recorded."""
        clock: Clock = lambda: player.t  # noqa: E731  (staleness in recorded time)
        super().__init__(
            player.samplers(),
            interval=player.header.interval_s,
            clock=clock,
            history=history,
            runner=runner,
            readonly=True,
        )
        self.player: Player = player
        self._start_replay(player, playing=playing, speed=speed, loop=loop)
        self.runner.recorded = True
        if not player.has_runs:
            self._runner_wanted = False  # the runner pane stays hidden: nothing to show
        self._bindings = BindingsMap(
            replace(binding, show=False)
            if binding.action.startswith("runner_") or binding.action == "doctor"
            else binding
            for _, binding in self._bindings
        )

    def on_mount(self) -> None:
        """The monitor shows the first frame (its own mount); then the replay starts."""
        self.runner.replay(self.player.runner_entries())
        self._begin_replay()

    def first_beat(self) -> Beat:
        """The frame shown (nothing is sampled: frames come as the replay moves)."""
        return self._beat_of(self.player.snapshot)

    @staticmethod
    def _beat_of(snapshot: Snapshot) -> Beat:
        return Beat({source: getattr(snapshot, source) for source in SOURCES})

    def _expected_monitor_size(self) -> Size:
        """The live monitor's, less the status line."""
        width, height = super()._expected_monitor_size()
        return Size(width, max(height - 1, 0))

    # -- moving through the recording -------------------------------------------------------

    def _window_s(self) -> float:
        """How far back the sparklines reach."""
        return self.history.maxlen * self.player.header.interval_s

    def _show(self, played: list[Shown[Snapshot]], *, again: bool = False) -> None:
        """Paint the last of ``played`` as a beat, the frames before it into the sparklines
        and the processes' histories (``again``: both start over, after a seek)."""
        if played:
            if again:
                self.history.clear()
                self.process_history.clear()
            for shown in played[:-1]:
                snapshot = shown.readings
                record_cpu(self.history, snapshot.cpu)
                record_gpus(self.history, snapshot.gpus)
                for reading in (snapshot.nvml, snapshot.drm):
                    self.process_history.record(reading.taken_at, reading.gpus)
            self.show_beat(for_screen(self._beat_of(played[-1].readings)))
            self.runner.replay(self.player.runner_entries())
        self._say_status()

    def offers(self, action: str) -> bool:
        """The help and the palette leave out what a replay refuses."""
        return not f"action_{action}".startswith(_REFUSED_ACTIONS)

    # -- what a replay refuses -------------------------------------------------------------

    def _refuse_runner(self) -> None:
        self.notify(RUNNER_REFUSAL, severity="warning", markup=False)

    async def action_runner_start(self) -> None:
        """Refused: a replay starts no run (nor compares, experiments or scales)."""
        self._refuse_runner()

    action_runner_compare = action_runner_experiment = action_runner_scale = action_runner_start

    def action_runner_stop(self) -> None:
        """Refused: a replay has no run to stop."""
        self._refuse_runner()

    def action_runner_toggle(self) -> None:
        """Show or hide the recorded runs (refused where there are none)."""
        if self.player.has_runs:
            super().action_runner_toggle()
        else:
            self._refuse_runner()

    def action_runner_detail(self) -> None:
        """Show or hide a recorded failed run's detail (refused where there are no runs)."""
        if self.player.has_runs:
            super().action_runner_detail()
        else:
            self._refuse_runner()

    def action_doctor(self) -> None:
        """Refused: the Doctor examines this machine, not the recorded one."""
        self.notify(HERE_REFUSAL, severity="warning", markup=False)

    def action_topology(self) -> None:
        """Refused: the topology is read from this machine's NVML, not the recording."""
        self.notify(HERE_REFUSAL, severity="warning", markup=False)

    def _run_going(self) -> str | None:
        """None: a recorded run is not running here, so quitting stops nothing."""
        return None

    def _ask_to_signal(self, signum: signal.Signals) -> None:
        """Refused: the recorded processes are not this machine's now."""
        self.notify(SIGNAL_REFUSAL, severity="warning", markup=False)
