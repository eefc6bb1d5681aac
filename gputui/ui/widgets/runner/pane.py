"""The runner pane: the choices, a status line and the last job's tables and charts, painted
from the :class:`~gputui.jobs.runner.Runner` that does the work (a timer drains it while it
is busy); and its brief, which the monitor shows while the pane is not on screen. It offers
the devices the monitor's readings show, as the installed torch's files say it can use them
(torch is first imported, in a child, when a job needs it).

What the pane receives goes to its ``tap`` as it comes (``gputui --record``); a replay's pane
is ``recorded``: :meth:`RunnerPane.replay` takes its runner through the recorded steps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static

from gputui.format import fmt_bytes, fmt_percent
from gputui.jobs.config import JobConfig
from gputui.jobs.runner import Choices, JobHandle, Runner, RunnerSetup
from gputui.ui.widgets.steady import SteadyRender

if TYPE_CHECKING:  # loaded once the pane is built (see the module's docstring)
    from textual.timer import Timer

    from gputui.jobs.devices import DeviceInventory
    from gputui.jobs.events import DeviceOption, DevicesListed, Event
    from gputui.jobs.results import Session
    from gputui.recording.runs import RunnerEntry
    from gputui.telemetry.readings import CpuReading, DrmReading, NvmlReading
    from gputui.telemetry.watched import ProcessReading, ProcessSampler
    from gputui.ui.widgets.runner.controls import RunnerControls
    from gputui.ui.widgets.runner.status import RunStatus

READINGS_WAIT_S = 2.0
"""How long the pane's build waits for the monitor's first host and NVML readings."""


class RunnerBrief(Widget):
    """The runner in brief, from its pane's runner: its state and last figure in a line, or in
    a box its status, progress and last figures (:func:`~.status.job_brief`)."""

    def __init__(self, pane: RunnerPane, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.pane = pane

    def on_mount(self) -> None:
        self.border_title = "Runner"

    def render(self) -> Text:
        """Blank until the monitor's first frame is out (the runner's modules load then)."""
        pane, size = self.pane, self.content_size
        if not pane.build_allowed:
            return Text()
        from gputui.ui.widgets.runner.status import job_brief  # (as the pane's)

        return job_brief(pane.runner, pane._status_line(), size.width, size.height)


class RunnerPane(Vertical, SteadyRender):
    """Device and settings, start/compare/stop, progress, epochs, speedup and placement."""

    @dataclass
    class TrainerChanged(Message):
        """The trainer process changed (started, or ended: ``pid`` is ``None``)."""

        pid: int | None
        gpu_uuid: str | None = None
        """The UUID of the GPU it trains on (``None``: not a CUDA device, or unknown)."""
        ranks: tuple[int, ...] = ()
        """A scaling run's rank processes (rank 0 is ``pid``); empty otherwise."""
        gpu_bus_id: str | None = None
        """The PCI bus id of the GPU it trains on (``None``: not a GPU, or unknown)."""

    class DevicesChanged(Message):
        """The devices on offer changed (as the readings show them, or as torch listed them)."""

    @dataclass
    class TrainerSampled(Message):
        """A reading of the trainer process's CPU use and memory."""

        reading: ProcessReading

    def __init__(
        self,
        setup: RunnerSetup | None = None,
        *,
        nvml: Callable[[], NvmlReading | None] = lambda: None,
        drm: Callable[[], DrmReading | None] = lambda: None,
        cpu: Callable[[], CpuReading | None] = lambda: None,
        id: str | None = None,
    ) -> None:
        """An idle pane with ``setup`` (default: the real one); ``nvml``, ``drm`` and ``cpu``
        give the monitor's latest readings, if any: the GPUs and the CPU to offer, and the
        driver's CUDA (whether this torch is a CUDA build it cannot run)."""
        super().__init__(id=id)
        self.setup = setup or RunnerSetup()
        self._nvml, self._drm, self._cpu = nvml, drm, cpu
        self.runner = Runner(self.setup, tap=self, warning=self._driver_warning)
        self.brief = RunnerBrief(self, id="runner-brief")
        """The runner in brief, for the monitor to show while the pane is not on screen."""
        self._installed: DeviceInventory | None = None
        """What the pane paints: its devices, its jobs and what they said."""
        self.watched: ProcessReading | None = None
        """The latest reading of the trainer process (None when none runs)."""
        self.tap: Callable[[RunnerEntry], None] | None = None
        """Told what the pane receives, as it comes (``gputui --record``)."""
        self.recorded = False
        """Whether the pane shows a recording (:meth:`replay`): it has no choices, watches no
        process and starts no child."""
        self.built = False
        """Whether the pane's widgets exist: composed after the frame that first shows it."""
        self.build_allowed = False
        """Set by the app once the monitor's first frame is out (:meth:`allow_build`)."""
        self._build_scheduled = self._shown = self._building = False
        self._built = asyncio.Event()
        self._watcher: ProcessSampler | None = None
        self._trainer: JobHandle | None = None
        self._said: tuple[int | None, str | None, tuple[int, ...], str | None] | None = None
        self._offered: tuple[DeviceOption, ...] = ()
        self._replayed = 0
        self._replayed_last: RunnerEntry | None = None
        self._busy_timers: tuple[Timer, ...] = ()
        # the pane's parts, made when it is built (compose)
        self._controls: RunnerControls | None = None
        self._status: RunStatus
        self._body: Static
        self._scroll: VerticalScroll

    def compose(self) -> ComposeResult:
        """The choices, the status, then the job's body (nothing until the pane is built)."""
        if not self._building:
            return
        # the runner's modules load with the pane's build, not the monitor's start
        from gputui.ui.widgets.runner.controls import RunnerControls
        from gputui.ui.widgets.runner.status import RunStatus

        if not self.recorded:
            self._offered = self.runner.devices
            self._controls = RunnerControls(
                self.setup.defaults,
                self._offered,
                accelerator_first=not self.setup.device_named,
                id="runner-controls",
            )
            yield self._controls
        self._status = RunStatus(id="runner-run-status")
        self._body = Static(id="runner-body")
        self._scroll = VerticalScroll(self._body, id="runner-scroll")
        yield self._status
        yield self._scroll

    def on_mount(self) -> None:
        """Set up the drain and watch timers, paused: an idle pane costs nothing."""
        self.border_title = "Runner"
        self._busy_timers = (
            self.set_interval(self.setup.drain_interval_s, self.drain, pause=True),
            self.set_interval(self.setup.watch_interval_s, self._watch_trainer, pause=True),
        )

    def on_show(self) -> None:
        """Build the widgets once this frame is drawn (and the app allows it)."""
        self._shown = True
        self._schedule_build()

    def allow_build(self) -> None:
        """The monitor's first frame is out: the pane may build itself when it shows, and
        offers the devices in the readings (its brief and the GPU panel say what of them)."""
        self.build_allowed = True
        self.readings_came()
        self.brief.refresh()
        self._schedule_build()

    def _schedule_build(self) -> None:
        if self._shown and self.build_allowed and not self._build_scheduled:
            self._build_scheduled = True
            self.call_after_refresh(self.build)

    async def build(self) -> None:
        """Offer the devices the monitor sees, then compose the choices and the body, once; a
        second call waits for the first (an action may need the widgets before it ran)."""
        if self._building:
            await self._built.wait()
            return
        self._building = True
        if not self.recorded and not self.runner.checked:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + READINGS_WAIT_S
            while (self._nvml() is None or self._cpu() is None) and loop.time() < deadline:
                await asyncio.sleep(0.05)
            self.runner.offer(self._seen())
        if self.app._exit:  # quitting: a Select mounted now fails to find its own parts
            return
        await self.recompose()
        if not hasattr(self, "_status"):  # the app closed first: recompose composed nothing
            return
        self.built = True
        self._built.set()
        self._refresh()
        self.call_after_refresh(self._paint)  # at the width the body is laid out to

    def on_resize(self) -> None:
        self._paint()

    def on_unmount(self) -> None:
        """Stop the trainer and wait for it (no orphan process)."""
        self.shutdown()

    def shutdown(self) -> None:
        """Stop the running trainer or experiment and wait until it and its workers are gone."""
        self.runner.shutdown()

    def readings_came(self) -> None:
        """New GPU readings, once the monitor's first frame is out: offer the devices they
        show until torch is asked (a GPU whose first reading came late is offered then)."""
        runner = self.runner
        if not self.build_allowed or self.recorded or runner.checked or runner.checking:
            return
        seen = self._seen()
        if seen.devices != runner.devices:
            runner.offer(seen)
            self._refresh()

    def _seen(self) -> DevicesListed:
        """The devices in the monitor's readings, as the installed torch would list them."""
        from gputui.jobs.devices import seen_devices  # (as above)
        from gputui.telemetry.readings import Vendor

        if self._installed is None:  # torch's files, read once
            self._installed = self.setup.installed()
        nvml, drm, cpu = self._nvml(), self._drm(), self._cpu()
        nvidia = nvml.gpus if nvml is not None and nvml.status.available else ()
        others = drm.gpus if drm is not None else ()
        return seen_devices(
            self._installed,
            nvidia=[gpu.name for gpu in nvidia],
            driver_cuda=nvml.status.cuda_driver_version if nvml is not None else None,
            amd=[gpu.name for gpu in others if gpu.vendor is Vendor.AMD],
            intel=[gpu.name for gpu in others if gpu.vendor is Vendor.INTEL],
            cpu_name=cpu.model_name if cpu is not None and cpu.model_name else "CPU",
        )

    def _driver_warning(self, listed: DevicesListed) -> str | None:
        """The doctor's line where this torch is a CUDA build the driver cannot run."""
        nvml = self._nvml()
        if nvml is None:
            return None
        # the doctor's modules (0.15 s of imports) load with the pane's build
        from gputui.doctor.run import driver_too_old

        return driver_too_old(listed, nvml)

    # -- the runner's state, as the app (and its tests) reads it off the pane ----------------

    @property
    def session(self) -> Session | None:
        return self.runner.session

    @property
    def busy(self) -> bool:
        return self.runner.busy

    @property
    def experiment_running(self) -> bool:
        return self.runner.experiment_running

    @property
    def trainer_pid(self) -> int | None:
        return self.runner.trainer_pid

    @property
    def trainer(self) -> JobHandle | None:
        return self.runner.trainer

    @property
    def devices(self) -> tuple[DeviceOption, ...]:
        return self.runner.devices

    # -- what the user asks -----------------------------------------------------------------

    def choices(self) -> Choices:
        """What the choices say (the pane is built)."""
        assert self._controls is not None
        return self._controls.choices()

    def _ask(self, ask: Callable[[Choices], bool]) -> bool:
        """Ask the runner for a job on the choices; whether it starts (now, or once torch
        has listed the devices)."""
        if self.runner.busy:
            self.app.notify("A run is in progress: stop it first (s).", severity="warning")
            return False
        started = ask(self.choices())
        self._refresh()
        return started

    def start(self, *, compare: bool = False) -> bool:
        """Start a run of the chosen config, or a comparison: the baseline, then the chosen one."""
        return self._ask(lambda choices: self.runner.start(choices, compare=compare))

    def start_scaling(self, sizes: tuple[int, ...], scaling: str) -> bool:
        """Train the chosen config at each world size in turn."""
        return self._ask(lambda choices: self.runner.start_scaling(choices, sizes, scaling))

    def start_experiment(self) -> bool:
        """Run the chosen experiment on the baseline and the chosen device (once if the same)."""
        return self._ask(self.runner.start_experiment)

    def world_sizes(self) -> tuple[tuple[int, ...], str] | None:
        """The world sizes to offer for the chosen device, and its kind; ``None``, after
        saying why, where no distributed backend serves it (MPS)."""
        offered = self.runner.world_sizes(self.choices().device)
        self._refresh()
        return offered

    def stop(self) -> None:
        """Stop the session or experiment: the child ends after its current step."""
        self.runner.stop()
        self._refresh()

    def toggle_detail(self) -> None:
        """Show or hide the failed run's detail (traceback or stderr tail)."""
        self.runner.show_detail = not self.runner.show_detail
        self._paint()

    # -- the runner's children --------------------------------------------------------------

    def drain(self) -> None:
        """Fold in what the runner's children said (on a timer while it is busy)."""
        if self.runner.drain() or not self.runner.busy:
            self._refresh()

    # What the runner tells the pane, told to the tap; the runs' entries load only when recording

    def begun(self, kind: str, configs: tuple[JobConfig, ...], scaling: str | None) -> None:
        if self.tap is not None:
            from gputui.recording.runs import JobBegun

            self.tap(JobBegun(kind, configs, scaling))

    def drained(self, events: tuple[Event, ...]) -> None:
        if self.tap is not None:
            from gputui.recording.runs import EventsDrained

            self.tap(EventsDrained(events))

    def stop_asked(self) -> None:
        if self.tap is not None:
            from gputui.recording.runs import StopAsked

            self.tap(StopAsked())

    def devices_asked(self, answered: bool) -> None:
        """The runner asked torch for the devices, or had its answer."""
        if self.tap is not None:
            from gputui.recording.runs import DevicesAsked

            self.tap(DevicesAsked(answered))

    def _watch_trainer(self) -> None:
        pid = self.runner.trainer_pid
        if pid is not None:
            self._sample_trainer(pid)

    @work(thread=True, exit_on_error=False, exclusive=True, group="runner-watch")
    def _sample_trainer(self, pid: int) -> None:
        from gputui.telemetry.watched import ProcessSampler  # (loads with the first trainer)

        watcher = self._watcher
        if watcher is None or watcher.pid != pid:
            watcher = self._watcher = ProcessSampler(pid)
        reading = watcher.sample()
        self.app.call_from_thread(self._show_watched, reading)

    def _show_watched(self, reading: ProcessReading) -> None:
        if reading.pid != self.runner.trainer_pid:
            return  # the run ended while the reading was on its way
        self._watched_now(reading)
        if self.tap is not None:
            from gputui.recording.runs import TrainerWatched

            self.tap(TrainerWatched(reading))
        self._paint()

    def _watched_now(self, reading: ProcessReading) -> None:
        self.watched = reading
        self.post_message(self.TrainerSampled(reading))

    def replay(self, entries: Sequence[RunnerEntry]) -> None:
        """Show what the recorded pane showed once it had received ``entries`` (in order, as
        :meth:`~gputui.recording.player.Player.runner_entries` gives them): the entries after
        those shown last where they follow on, else all of them from an empty pane (a seek
        back). Each takes the live runner's own steps: a job starts, a drain, a stop."""
        from gputui.recording.runs import DevicesAsked, EventsDrained, JobBegun, TrainerWatched

        runner, done = self.runner, self._replayed
        if not (done <= len(entries) and (done == 0 or entries[done - 1] is self._replayed_last)):
            runner.clear()
            done = 0
        for entry in entries[done:]:
            if isinstance(entry, JobBegun):
                runner.replay_job(entry.kind, entry.configs, entry.scaling)
            elif isinstance(entry, EventsDrained):
                runner.replay_events(entry.events)
            elif isinstance(entry, DevicesAsked):
                runner.replay_asked(entry.answered)
            elif isinstance(entry, TrainerWatched):  # the running trainer's, when recorded
                runner.replay_watched(entry.reading.pid)
                self._follow_trainer()
                self._watched_now(entry.reading)
            else:
                runner.stop()
        self._replayed = len(entries)
        self._replayed_last = entries[-1] if entries else None
        self._refresh()

    # -- painting ---------------------------------------------------------------------------

    def _follow_trainer(self) -> None:
        """Tell the app when the trainer changed (its process started, or ended); forget the
        reading of one that ended."""
        runner = self.runner
        if runner.trainer is not self._trainer:
            self._trainer, self.watched = runner.trainer, None
        run = runner.session.current if runner.session is not None and runner.trainer else None
        started = run.started if run is not None else None
        said = None
        if run is not None and (started is not None or run.rank_pids):
            pid, gpu, bus = (
                (started.pid, started.gpu_uuid, started.gpu_bus_id) if started else (None,) * 3
            )
            said = (pid, gpu, run.rank_pids, bus)
        if said != self._said:
            self._said = said
            self.post_message(self.TrainerChanged(*said) if said else self.TrainerChanged(None))

    def _refresh(self) -> None:
        """The runner may have changed: follow its trainer, offer the devices torch listed
        (and say they changed), drain it while it is busy, and paint."""
        self._follow_trainer()
        runner = self.runner
        if runner.devices is not self._offered:
            self._offered = runner.devices
            self.post_message(self.DevicesChanged())
            if self._controls is not None:
                self._controls.offer_devices(runner.devices)
        for timer in self._busy_timers:
            if runner.busy and not self.recorded:
                timer.resume()
            else:
                timer.pause()
        self._paint()

    def _paint(self) -> None:
        """Repaint the brief and, once built, the buttons, the status, progress and body."""
        self.brief.refresh()
        if not self.built:
            return
        from gputui.ui.widgets.runner.status import job_body, job_error, job_progress

        runner = self.runner
        if self._controls is not None:
            self._controls.busy = runner.busy
        error = job_error(runner) if runner.show_detail else None
        self._status.show(self._status_line(), job_progress(runner), error)
        self._body.update(job_body(runner, max(self._scroll.size.width - 1, 30)))

    def _status_line(self) -> Text:
        """The runner's complaint if it has one; else the job's line, with the trainer's pid,
        CPU use and memory while it trains."""
        from gputui.ui.render.runner import MUTED
        from gputui.ui.widgets.runner.status import job_line

        runner, watched = self.runner, self.watched
        if runner.message is not None:
            style = "yellow" if runner.message.startswith("⚠") else "red"
            return Text(runner.message, style=style)
        if runner.checking:
            return Text("asking torch which devices it can use (a child process)…", style=MUTED)
        line = job_line(runner)
        if watched is not None and watched.alive and runner.busy:
            line = line.copy()
            cpu, rss = fmt_percent(watched.cpu_percent), fmt_bytes(watched.rss_bytes)
            line.append(f"  pid {watched.pid} · CPU {cpu} · RSS {rss}", style="not bold")
        return line
