"""The live monitor: a Textual app that paints each beat of the sampling engine
(:class:`~gputui.telemetry.polling.Poller`), whose samples run off the event loop.

Over 600 lines: this is where the keys, the panes and the beats meet; each action is a few
lines handing over to a widget or screen, found here by its key.

A hung NVML call holds only its own thread: the NVIDIA panels are marked stale and name the
call, and ``q`` still quits. Quitting closes the samplers on their own threads (NVML is shut
down there, with no call inside it); SIGHUP, SIGTERM and a lost terminal quit the same way
(:mod:`gputui.ui.monitor.hangup`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingsMap, BindingType
from textual.driver import Driver
from textual.events import Resize
from textual.geometry import Size
from textual.screen import Screen
from textual.widget import Widget

from gputui.format import fmt_percent, for_screen, one_line
from gputui.jobs.runner import RunnerSetup
from gputui.telemetry.history import History, record_cpu, record_gpus
from gputui.telemetry.nvml import describe_hung_call, is_stale
from gputui.telemetry.polling import SOURCES, Beat, Poller, Reply, Samplers, read_topology
from gputui.telemetry.process_history import ProcessHistory, ProcessTrack
from gputui.telemetry.readings import (
    CpuReading,
    DriverCall,
    DrmReading,
    MpsReading,
    NvmlReading,
    shown_pid,
)
from gputui.telemetry.selection import GpuSelection
from gputui.telemetry.signals import HOST_PIDS_REFUSAL, refusal, signal_process
from gputui.ui.colours import TerminalColours
from gputui.ui.keys import CTRL_C, HELP, QUIT, skip_if_copying
from gputui.ui.monitor.hangup import (
    HANGUP_EXIT_CODE,
    StopSignals,
    input_terminal,
    start_watchdog,
    terminal_gone,
)
from gputui.ui.monitor.layout import Panes, plan_panes
from gputui.ui.monitor.messages import Sampled
from gputui.ui.monitor.palette import MONITOR_COMMANDS
from gputui.ui.topology.screen import TopologyScreen
from gputui.ui.widgets.footer import FittingFooter
from gputui.ui.widgets.keys_help import KeyArea, KeysHelp, action_name, key_rows
from gputui.ui.widgets.monitor import Monitor
from gputui.ui.widgets.process_screen import ProcessScreen
from gputui.ui.widgets.process_table import ProcessTable
from gputui.ui.widgets.quit_dialog import QuitDialog
from gputui.ui.widgets.runner.pane import RunnerPane
from gputui.ui.widgets.signal_dialog import SignalDialog
from gputui.ui.widgets.steady import SteadyHorizontal, SteadyScreen

if TYPE_CHECKING:  # the Doctor screen (and the doctor) loads when it is first opened
    from gputui.doctor.checks import DoctorReport
    from gputui.recording.recorder import Recorder
    from gputui.ui.doctor.screen import DoctorRunner

Clock = Callable[[], float]
"""Seconds on a monotonic clock."""

CLOSE_WAIT_S = 0.5
"""How long quitting waits for the samplers to shut down (NVML) before leaving them."""


READONLY_REFUSAL = "Read-only (--readonly or GPUTUI_READONLY=1): gputui sends no signals."
"""What ``T``, ``K`` and ``I`` say in a read-only monitor."""
NO_SELECTION = "Select a process first: the arrow keys move through the GPU process table."
"""What ``T``, ``K``, ``I`` and Enter say while no process is selected."""
SORT_GROUP = Binding.Group("Sort", compact=True)
"""``o`` and ``O``, one entry in the footer."""
KILL_GROUP = Binding.Group("Kill", compact=True)
"""``T``, ``K`` and ``I`` (nvitop's), one entry in the footer (not in a read-only monitor's)."""
KEY_AREAS = {"runner_": "Runner", "process_": "GPU processes"}
"""The help screen's areas, by the prefix of their actions; the rest are the monitor's."""
MONITOR_KEYS_HELP = {
    "quit": "Quit; during a run, ask first (y, Enter or Ctrl+C again quits and stops it)",
    "command_palette": "The command palette: every command by name",
}
"""What the help screen says of the keys the palette does not describe."""
FOOTER_FULL_FROM = 96
"""Columns the footer's keys need laid out in full; narrower, it turns compact."""
FOOTER_PALETTE_FROM = 90
"""Columns the compact footer needs with the palette's hint; narrower, it drops the hint."""


def _run_real_doctor(nvml: NvmlReading | None) -> DoctorReport:
    """The Doctor screen's default runner (the doctor loads when its screen first runs it)."""
    from gputui.ui.doctor.screen import run_real_doctor

    return run_real_doctor(nvml)


def nvml_hang(call: DriverCall | None, now: float, interval: float) -> str | None:
    """The sentence naming the NVML call in flight once it is as old as stale readings are,
    with what to check; ``None`` while there is none, or it is younger."""
    if call is None or not is_stale(call.started_at, now, interval):
        return None
    return describe_hung_call(call, now)


class MonitorApp(TerminalColours):
    """gputui's live monitor."""

    TITLE = "gputui"
    KEY_AREAS: ClassVar[dict[str, str]] = KEY_AREAS
    CSS_PATH = Path(__file__).with_name("monitor.tcss")  # absolute: subclasses live elsewhere
    BINDINGS: ClassVar[list[BindingType]] = [
        QUIT,
        CTRL_C,
        Binding("d", "doctor", "Doctor"),
        Binding("n", "topology", "Topology", show=False),  # the footer has no room left
        HELP,
        # runner pane
        Binding("r", "runner_start", "Train"),
        Binding("c", "runner_compare", "Compare"),
        Binding("s", "runner_stop", "Stop", show=False),  # its button shows s (room for ?)
        Binding("x", "runner_experiment", "Experiment", show=False),  # its button shows x
        Binding("w", "runner_scale", "Scale", show=False),
        Binding("t", "runner_toggle", "Runner"),
        Binding("e", "runner_detail", "Error detail", show=False),
        # GPU process table
        Binding("o", "process_sort", "Sort", group=SORT_GROUP),
        Binding("O", "process_reverse", "Reverse", group=SORT_GROUP),
        Binding("slash", "process_filter", "Filter", key_display="/"),
        Binding("escape", "process_clear_filter", "Clear filter", show=False),
        Binding("enter", "process_history", "History", show=False),  # the footer is full
        Binding("T", "process_terminate", "Terminate", group=KILL_GROUP),
        Binding("K", "process_kill", "Kill", group=KILL_GROUP),
        Binding("I", "process_interrupt", "Interrupt", group=KILL_GROUP),
    ]

    def __init__(
        self,
        samplers: Samplers | Poller | None = None,
        *,
        interval: float = 1.0,
        clock: Clock = time.monotonic,
        history: History | None = None,
        process_history: ProcessHistory | None = None,
        stale_check_s: float | None = None,
        runner: RunnerSetup | None = None,
        doctor: DoctorRunner | None = None,
        readonly: bool = False,
        only: GpuSelection | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        """Build the app; nothing is sampled until it runs.

        Args:
            samplers: Where readings come from, or the engine that samples them, perhaps
                started already (default: the real sources, built lazily in their
                threads). Tests pass fakes, a clock and a pre-filled history.
            interval: Seconds between the start of one poll of a source and the next.
            clock: Gives "now" for staleness; compare with readings' ``taken_at``.
            history: Holds the GPU sparklines' values (default: five minutes' worth).
            process_history: Holds each GPU process's history (default: as far back).
            stale_check_s: How often to check for stale NVIDIA readings, and that the
                terminal is still there (default: ``interval``, at most once a second).
            runner: The runner pane's trainers, device list and defaults (default: real).
            doctor: Runs the doctor for the Doctor screen (default: the real one).
            readonly: Send no signal to any process (``T``, ``K`` and ``I`` say why not).
            only: Show these GPUs alone (``--only``; default: every GPU).
            recorder: Records what is shown (``--record``); the caller closes it.
        """
        super().__init__()
        self.recorder = recorder
        self.readonly = readonly
        self.only = only
        self._not_offered = frozenset(
            binding.action
            for _, binding in self._bindings
            if readonly and binding.group is KILL_GROUP
        )
        """The actions the help, the palette and the footer leave out (:meth:`offers`)."""
        if readonly:  # this app's own copy of its bindings: the keys stay, to say why not
            self._bindings = BindingsMap(
                replace(binding, show=False) if binding.group is KILL_GROUP else binding
                for _, binding in self._bindings
            )
        if isinstance(samplers, Poller):
            self.poller = samplers
        elif samplers is None:
            self.poller = Poller.real(interval)
        else:
            self.poller = Poller(samplers, interval)
        self.samplers = self.poller.samplers
        self.doctor: DoctorRunner = doctor or _run_real_doctor
        self.interval = interval
        self.clock = clock
        self.history = history if history is not None else History.for_window(interval)
        if process_history is None:  # as far back as the sparklines
            window_s = self.history.maxlen * interval
            process_history = ProcessHistory(self.history.maxlen, keep_ended_s=window_s)
        self.process_history = process_history
        self._process_screen: ProcessScreen | None = None
        self.stale_check_s = stale_check_s or min(interval, 1.0)
        self.handled: dict[str, int] = dict.fromkeys(SOURCES, 0)
        """Readings painted per source (tests wait on it)."""
        self.paints = 0
        """Batches of readings painted (one a beat)."""
        self.failures: dict[str, str] = {}
        """The last error of each source whose sampler raised."""
        self._started_at = clock()
        self._epoch = time.monotonic()
        self._nvml_taken_at: float | None = None
        self._terminal: int | None = None
        self._gpus_seen: tuple[NvmlReading | None, DrmReading | None] = (None, None)
        """The latest GPU readings, all GPUs (``--only`` or not): the devices torch may use."""
        self.runner = RunnerPane(
            runner,
            nvml=lambda: self._gpus_seen[0],
            drm=lambda: self._gpus_seen[1],
            cpu=lambda: self.monitor.cpu,
            id="runner",
        )
        self.monitor = Monitor(self.history, brief=self.runner.brief, id="monitor")
        """The monitor column, held: ``query_one`` would search the active screen (the
        command palette, while it is open)."""
        if recorder is not None:
            self.runner.tap = recorder.runner  # the runner's jobs go into the recording too
        self._runner_wanted: bool | None = None
        """Whether the user asked for the runner pane or hid it; None until they do."""
        self._panes: Panes | None = None
        self._hung_up = False
        self._stop_signals = StopSignals()

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver, but on Linux and macOS one whose input thread sleeps until a key
        comes (:mod:`gputui.ui.monitor.driver`) instead of waking ten times a second."""
        driver = super().get_driver_class()
        if sys.platform != "win32":  # (termios: not on Windows)
            from textual.drivers.linux_driver import LinuxDriver

            if driver is LinuxDriver:  # not one named by TEXTUAL_DRIVER
                from gputui.ui.monitor.driver import QuietLinuxDriver

                return QuietLinuxDriver
        return driver

    def get_default_screen(self) -> Screen[object]:
        return SteadyScreen(id="_default")

    def compose(self) -> ComposeResult:
        """Monitor and runner side by side, footer below."""
        with SteadyHorizontal(id="body"):
            yield self.monitor
            yield self.runner
        yield FittingFooter(FOOTER_FULL_FROM, FOOTER_PALETTE_FROM)

    @property
    def _showing(self) -> bool:
        """False once the app is closing and its widgets are going away."""
        return self.monitor.is_attached

    def on_mount(self) -> None:
        """Paint what is in hand (:meth:`first_beat`); the rest comes beat by beat."""
        self.follow_terminal_colours()
        self._epoch = time.monotonic()
        self._lay_out_runner()
        self.show_beat(for_screen(self.first_beat()))
        self.monitor.apply_layout(self._expected_monitor_size())  # plan the first frame
        self._terminal = None if self.is_headless else input_terminal()
        self._check_stale_later()
        self._stop_signals.install(asyncio.get_running_loop(), self._quit_after_hang_up)

    def first_beat(self) -> Beat:
        """Start the engine if the command line has not, and take its beats from now on;
        returns the readings it has in hand (a replay: the frame shown)."""
        if not self.poller.started:
            self.poller.start()
        if self.recorder is not None:  # the recorder keeps the readings as they came
            self.recorder.hang = self.poller.latest
            self.recorder.take(self.poller.subscribe(self.recorder.take))
        return self.poller.subscribe(self._beat_came)

    def on_unmount(self) -> None:
        """Stop the samplers (each is closed on its own thread once its sample has ended)."""
        self.runner.shutdown()
        self._stop_signals.restore()
        self.poller.stop()

    # -- runner pane ------------------------------------------------------------------------

    def _quit_after_hang_up(self, code: int) -> None:
        """Stop the trainer and quit with ``code``, once (SIGHUP, SIGTERM, a lost terminal)."""
        if self._hung_up:
            return
        self._hung_up = True
        self.runner.shutdown()
        self.exit(return_code=code)

    def _check_stale_later(self) -> None:
        """Check for stale readings and a lost terminal on the next multiple of
        ``stale_check_s`` from the beats' start: on the beat's timer where the interval is
        a multiple of it, so the check does not wake the app again."""
        now = time.monotonic()
        step, epoch = self.stale_check_s, self._epoch
        later = epoch + (round((now - epoch) / step) + 1) * step  # (a timer may come early)
        self._later(later - now, self._check_stale_and_terminal)

    def _check_stale_and_terminal(self) -> None:
        """The app's one steady timer, every ``stale_check_s`` until the app closes."""
        if not self._showing:
            return
        self._check_stale_later()
        self._check_stale()
        if self._terminal is not None and not self._hung_up and terminal_gone(self._terminal):
            # quit as after SIGHUP; the exit may block on the lost terminal: a watchdog ends it
            start_watchdog(HANGUP_EXIT_CODE)
            self._quit_after_hang_up(HANGUP_EXIT_CODE)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The runner's and the process table's keys work only on the monitor's own screen
        (not the doctor's, nor over a dialog), the process table's only while it is shown;
        Escape clears the process filter only while there is one."""
        if action.startswith(("runner_", "process_")) and self.screen is not self.screen_stack[0]:
            return False
        if action.startswith("process_") and not self.monitor.process_table.display:
            return False
        if action == "process_clear_filter" and not self.monitor.filtering:
            return False
        return super().check_action(action, parameters)

    def on_resize(self, event: Resize) -> None:
        """Lay the panes out again; the event's size, as ``self.size`` is recorded after this
        handler (by ``App._on_resize``)."""
        self._lay_out_runner(event.size.width)

    def _lay_out_runner(self, width: int | None = None) -> None:
        """Show the monitor and/or the runner for ``width`` (default: the app's)
        (:func:`plan_panes`). Sets ``display`` and inline styles on the widgets only:
        toggling a class on the screen would restyle every widget (a tenth of a second)."""
        width = self.size.width if width is None else width
        panes = plan_panes(width, self._runner_wanted, gpu_less=self.monitor.gpu_less)
        if panes == self._panes:
            return
        self._panes = panes
        monitor, body = self.monitor, self.monitor.parent
        self.runner.display, monitor.display = panes.runner, panes.monitor
        monitor.show_brief(panes.brief)
        monitor.styles.height = "auto" if panes.under else "1fr"  # the pane takes the rest
        if isinstance(body, Widget):
            body.styles.layout = "vertical" if panes.under else "horizontal"

    @property
    def _under(self) -> bool:
        """The runner pane sits under the monitor (a narrow screen of a GPU-less box)."""
        return self._panes is not None and self._panes.under

    def _expected_monitor_size(self) -> Size:
        """The monitor's size once laid out: the screen less the footer, halved when the
        runner sits beside it."""
        width, height = self.size
        if self.runner.display and self.monitor.display and not self._under:
            width //= 2
        return Size(width, max(height - 1, 0))

    async def _show_runner(self) -> None:
        """Put the runner on screen (a narrow one: in the monitor's place), built."""
        if not self.runner.display:
            self._runner_wanted = True
            self._lay_out_runner()
        await self.runner.build()

    def on_monitor_laid_out(self) -> None:
        """The monitor has its first layout: once that frame is out, the runner may build."""
        self.call_after_refresh(self._first_frame_out)

    def _first_frame_out(self) -> None:
        self.runner.allow_build()
        if not gc.isenabled():  # the command line turned collection off for start-up
            gc.collect()  # start-up's garbage (about 5,000 objects), once the frame is out
            gc.freeze()  # what is left lives as long as the app: never scan it again
            gc.enable()

    def on_runner_pane_trainer_changed(self, message: RunnerPane.TrainerChanged) -> None:
        """A trainer started or ended: highlight it in the GPU process table."""
        self.monitor.process_table.highlight(
            message.pid, message.gpu_uuid, message.ranks, message.gpu_bus_id
        )
        if message.pid is None:
            self.monitor.cpu_panel.border_subtitle = None

    def on_runner_pane_devices_changed(self, _: RunnerPane.DevicesChanged) -> None:
        self._note_unusable_gpus()

    def _note_unusable_gpus(self) -> None:
        """Say in the GPU panel where torch cannot use the GPUs it shows, once the runner
        offers its devices."""
        if devices := self.runner.devices:
            from gputui.ui.render.runner import unusable_gpus_note  # (loaded with the devices)

            self.monitor.gpu_area.set_note(unusable_gpus_note(devices, len(self.monitor.gpus)))

    def on_runner_pane_trainer_sampled(self, message: RunnerPane.TrainerSampled) -> None:
        """The trainer's CPU use: shown under the CPU panel."""
        reading = message.reading
        if not reading.alive or self.runner.trainer_pid != reading.pid:
            return
        cpu = fmt_percent(reading.cpu_percent)
        self.monitor.cpu_panel.border_subtitle = f"trainer pid {reading.pid} · CPU {cpu}"

    async def action_runner_start(self) -> None:
        """Train the chosen configuration."""
        await self._show_runner()
        self.runner.start()

    async def action_runner_compare(self) -> None:
        """Train the chosen configuration on the baseline device, then on the chosen one."""
        await self._show_runner()
        self.runner.start(compare=True)

    async def action_runner_experiment(self) -> None:
        """Run the chosen experiment in the runner pane."""
        await self._show_runner()
        self.runner.start_experiment()

    async def action_runner_scale(self) -> None:
        """Ask for world sizes, then train on each in turn (torch.distributed)."""
        await self._show_runner()
        offered = self.runner.world_sizes()
        if offered is None:
            return
        from gputui.ui.widgets.scale_dialog import ScaleDialog  # (the runner's, with its pane)

        sizes, device = offered

        def chosen(answer: tuple[tuple[int, ...], str] | None) -> None:
            if answer is not None:
                self.runner.start_scaling(*answer)

        self.push_screen(ScaleDialog(sizes, device), chosen)

    def action_runner_stop(self) -> None:
        """Stop the run."""
        self.runner.stop()

    def action_runner_toggle(self) -> None:
        """Narrow screens: swap the monitor and the runner. Wide: show or hide the runner."""
        self._runner_wanted = not self.runner.display or self._under
        self.runner.allow_build()  # asked for: build it even if the monitor never laid out
        self._lay_out_runner()

    def action_runner_detail(self) -> None:
        """Show or hide the failed run's detail."""
        self.runner.toggle_detail()

    # -- GPU process table ------------------------------------------------------------------

    def action_process_sort(self) -> None:
        """Sort the GPU processes by the next key."""
        table = self.monitor.process_table
        table.set_order(table.order.next_key())

    def action_process_reverse(self) -> None:
        """Turn the GPU processes' order round."""
        table = self.monitor.process_table
        table.set_order(table.order.reversed())

    async def action_process_filter(self) -> None:
        """Open the filter line under the GPU process table."""
        await self.monitor.open_filter()

    def action_process_clear_filter(self) -> None:
        """Close the filter line and show every GPU process again."""
        self.monitor.close_filter()

    def action_process_history(self) -> None:
        """Open the selected GPU process's screen: its memory and SM % over time."""
        row = self.monitor.process_table.selected
        track = None if row is None else self.process_history.of(row.process)
        if track is None:
            self.notify(NO_SELECTION, severity="warning", markup=False)
            return
        screen = ProcessScreen(track, self.process_history, self._trainer_note)
        self._process_screen = screen

        def closed(_: None) -> None:
            if self._process_screen is screen:
                self._process_screen = None

        self.push_screen(screen, closed)

    def _trainer_note(self, track: ProcessTrack) -> str | None:
        """The runner's status line while ``track`` is its trainer (or one of its ranks)
        and its run goes on; ``None`` otherwise (the screen keeps what it last said)."""
        from gputui.jobs.results import Phase  # (39 ms to import: not on the start path)

        table, process, session = self.monitor.process_table, track.process, self.runner.session
        if process is None or table.trainer_pid is None or session is None:
            return None
        if shown_pid(process) not in (table.trainer_pid, *table.rank_pids):
            return None
        if session.phase is not Phase.RUNNING:
            return None
        from gputui.ui.render.runner import status_line  # (with the runner pane's build)

        return status_line(session).plain

    def action_process_terminate(self) -> None:
        """Ask, then send SIGTERM to the selected GPU process."""
        self._ask_to_signal(signal.SIGTERM)

    def action_process_kill(self) -> None:
        """Ask, then send SIGKILL to the selected GPU process."""
        self._ask_to_signal(signal.SIGKILL)

    def action_process_interrupt(self) -> None:
        """Ask, then send SIGINT to the selected GPU process (as Ctrl+C in its terminal)."""
        self._ask_to_signal(signal.SIGINT)

    def _ask_to_signal(self, signum: signal.Signals) -> None:
        """Ask whether to send ``signum`` to the selected process; send it on ``y``. Refused
        at once, in one line, when read-only, the pids are the host's, no process is selected,
        or its start time is unknown (so its pid cannot be checked)."""
        table = self.monitor.process_table
        row, host_pids = table.selected, table.host_pids
        if self.readonly:
            refused: str | None = READONLY_REFUSAL
        elif row is None:
            refused = HOST_PIDS_REFUSAL if host_pids else NO_SELECTION
        else:
            refused = refusal(row.process, host_pids=host_pids)
        if refused is not None or row is None:  # (row is None only where refused is set)
            self.notify(refused or NO_SELECTION, severity="warning", markup=False)
            return
        process = row.process

        def answered(send: bool | None) -> None:
            if send:
                result = signal_process(process, signum, host_pids=host_pids)
                self.notify(
                    result.message,
                    severity="information" if result.sent else "error",
                    markup=False,
                )

        self.push_screen(SignalDialog(process, signum), answered)

    # -- quitting and the help ------------------------------------------------------------

    async def action_quit(self, ctrl_c: bool = False) -> None:
        """Quit (``q``, Ctrl+C, ``^q``, the palette); while a run is going, ask first
        (:class:`QuitDialog`), and quit when asked again.

        Args:
            ctrl_c: Ctrl+C asked; while text is selected, it copies that instead.
        """
        if ctrl_c:
            skip_if_copying(self.screen)
        run = self._run_going()
        if run is None or isinstance(self.screen, QuitDialog):
            self.exit()
            return

        def answered(leave: bool | None) -> None:
            if leave:
                self.exit()

        self.push_screen(QuitDialog(run), answered)

    def _run_going(self) -> str | None:
        """The run quitting would stop, in a few words; None while none is going."""
        runner = self.runner
        if not runner.busy:
            return None
        if runner.runner.checking:
            return "a job (torch is asked which devices it can use)"
        if runner.experiment_running:
            return "an experiment"
        if runner.session is not None and runner.session.scaling:
            return "a scaling run"
        return "a training run"

    def action_help(self) -> None:
        """List every key, by area."""
        self.push_screen(KeysHelp("gputui: every key", self.key_areas()))

    def key_areas(self) -> list[KeyArea]:
        """Every key of the monitor, read from its bindings (the process table's too), by
        area (:data:`KEY_AREAS`)."""
        from gputui.ui.doctor.screen import DOCTOR_COMMAND  # (the doctor loads when first asked)

        explain = {action: help_text for _, help_text, action in MONITOR_COMMANDS}
        explain |= MONITOR_KEYS_HELP | {"doctor": DOCTOR_COMMAND}
        key_areas = self.KEY_AREAS
        areas: dict[str, list[Binding]] = {area: [] for area in ("Monitor", *key_areas.values())}
        for _, binding in self._bindings:
            action = action_name(binding)
            if not self.offers(action):
                continue
            area = next((a for p, a in key_areas.items() if action.startswith(p)), "Monitor")
            areas[area].append(binding)
        areas["GPU processes"].extend(Binding.make_bindings(ProcessTable.BINDINGS))
        return [
            (area, key_rows(bindings, self.get_key_display, explain))
            for area, bindings in areas.items()
        ]

    def offers(self, action: str) -> bool:
        """Whether the help and the palette list ``action``: all but a read-only monitor's
        signals (their keys only say why not)."""
        return action not in self._not_offered

    def keys_of(self, action: str) -> str:
        """The keys bound to ``action`` (``process_sort``: ``o``), as the footer shows them."""
        return ", ".join(
            self.get_key_display(binding)
            for _, binding in self._bindings
            if binding.action == action
        )

    def action_doctor(self) -> None:
        """Open the Doctor screen (not over itself), with the latest NVML reading."""
        from gputui.ui.doctor.screen import DoctorScreen  # (the doctor loads when first asked)

        if not isinstance(self.screen, DoctorScreen):
            self.push_screen(DoctorScreen(self.doctor, lambda: self.monitor.nvml))

    def action_topology(self) -> None:
        """Open the GPU topology screen (not over itself)."""
        if not isinstance(self.screen, TopologyScreen):
            drm = self.monitor.drm
            self.push_screen(TopologyScreen(self._read_topology, len(drm.gpus) if drm else 0))

    def _read_topology(self, reply: Reply) -> None:
        """Read the topology after what the NVML thread has queued, then ``reply``."""
        self.poller.call("nvml", partial(read_topology, self.samplers.nvml), reply)

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """Textual's commands, then the Doctor screen's keys on it, else each the monitor
        offers (:meth:`offers`); every key in the footer is here (a test holds it)."""
        yield from super().get_system_commands(screen)
        from gputui.ui.doctor.screen import (  # (the doctor loads when first asked)
            DOCTOR_COMMAND,
            DOCTOR_HELP,
            DoctorScreen,
        )

        if isinstance(screen, DoctorScreen):
            yield from screen.system_commands()
            return
        if self.offers("doctor"):
            yield SystemCommand(
                DOCTOR_COMMAND, f"{DOCTOR_HELP} ({self.keys_of('doctor')})", self.action_doctor
            )
        for title, help_text, action in MONITOR_COMMANDS:
            if self.offers(action):
                command = getattr(self, f"action_{action}")
                yield SystemCommand(title, f"{help_text} ({self.keys_of(action)})", command)

    def wait_for_samplers(self, timeout_s: float) -> bool:
        """After the app has run: wait up to ``timeout_s`` for the samplers to close (one
        stuck in a driver call is left behind: its thread is a daemon)."""
        return self.poller.join(timeout_s)

    def _beat_came(self, beat: Beat) -> None:
        """Post a beat to the app, its text made printable here, on the poller's thread
        (:func:`for_screen`: a process's command line cannot write to the terminal)."""
        with contextlib.suppress(RuntimeError):  # the app has closed its event loop
            self.post_message(Sampled(for_screen(beat)))

    def on_sampled(self, message: Sampled) -> None:
        self.show_beat(message.beat)

    def show_beat(self, beat: Beat) -> None:
        """Paint a beat's readings in one batch (the engine's, or a replayed frame's), and
        say once that a source failed."""
        if not self._showing or not (beat.readings or beat.errors):
            return
        readings = beat.readings
        self.paints += 1
        with self.batch_update():
            cpu = readings.get("cpu")
            if isinstance(cpu, CpuReading):
                record_cpu(self.history, cpu)
                self.monitor.show_cpu(cpu)
                self.handled["cpu"] += 1
            nvml = readings.get("nvml")
            drm = readings.get("drm")
            nvml = nvml if isinstance(nvml, NvmlReading) else None
            drm = drm if isinstance(drm, DrmReading) else None
            if nvml is not None or drm is not None:
                seen = self._gpus_seen
                self._gpus_seen = (nvml or seen[0], drm or seen[1])
            if self.only is not None:
                nvml, drm = nvml and self.only.of(nvml), drm and self.only.of(drm)
            for reading in (nvml, drm):
                if reading is not None:
                    record_gpus(self.history, reading.gpus)
                    self.process_history.record(reading.taken_at, reading.gpus)
            if nvml is not None or drm is not None:
                self.monitor.show_gpus(nvml, drm)  # one paint of the GPU area for both
            if nvml is not None:
                self._nvml_taken_at = nvml.taken_at
                self._check_stale()
                self.handled["nvml"] += 1
            if drm is not None:
                self.handled["drm"] += 1
            mps = readings.get("mps")
            if isinstance(mps, MpsReading) and (mps.supported_platform or not self.handled["mps"]):
                # (off macOS it says once that MPS cannot be here)
                self.monitor.show_mps(mps)
                self.handled["mps"] += 1
            if nvml is not None or drm is not None:
                self.runner.readings_came()
                self._lay_out_runner()  # a GPU-less box's runner goes under the monitor
                self._note_unusable_gpus()
                if self._process_screen is not None:
                    self._process_screen.update()
        for source, error in beat.errors.items():
            self._failed(source, error)
        if self.recorder is not None:  # say once that frames were dropped, or it stopped
            for line, severity in self.recorder.news():
                self.notify(one_line(line), severity=severity, timeout=30, markup=False)

    def _failed(self, source: str, error: str) -> None:
        """A sampler raised: say so once; its last reading stays, and it is asked again."""
        if source not in self.failures:
            self.notify(
                f"The {source} sampler failed ({error}); retrying.",
                severity="error",
                timeout=10,
                markup=False,
            )
        self.failures[source] = error
        self.log.error(f"{source} sampler failed: {error}")

    def _check_stale(self) -> None:
        """Mark the NVIDIA panels stale while NVML has not answered for too long, and name
        the call it is stuck in once that call is as old."""
        if not self._showing:
            return
        now = self.clock()
        since = self._nvml_taken_at if self._nvml_taken_at is not None else self._started_at
        stale = is_stale(since, now, self.interval)
        self.monitor.set_nvml_stale(now - since if stale else None)
        hang = nvml_hang(self.poller.pending_call(), now, self.interval)
        self.monitor.set_nvml_hang(hang)


def run_app(
    interval: float,
    poller: Poller | None = None,
    runner: RunnerSetup | None = None,
    *,
    readonly: bool = False,
    only: GpuSelection | None = None,
    recorder: Recorder | None = None,
) -> int:
    """Run the monitor until the user quits; returns the exit code. ``poller`` is the real
    sources' engine, started before Textual was imported so that the first readings are under
    way while it loads (default: started now); the rest as :class:`MonitorApp`'s."""
    app = MonitorApp(
        poller,
        interval=interval,
        runner=runner,
        readonly=readonly,
        only=only,
        recorder=recorder,
    )
    app.run()  # on its way out: the trainer stopped, each sampler stopped and closing
    app.wait_for_samplers(CLOSE_WAIT_S)  # NVML shut down on its thread, with no call in flight
    return app.return_code or 0  # then gputui.commands.exit_process ends the process
