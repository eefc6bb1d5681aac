"""The runner pane: choose a device and settings, train, compare, and watch the epochs arrive.

The trainer runs in a child process (:class:`gputui.jobs.process.ChildProcess`);
the pane drains its events on a cheap timer (``drain()`` never blocks) and folds them
into a :class:`~gputui.jobs.results.Session`. What it shows follows from its reactives
(the session, the experiment, a complaint, the trainer's reading, which view): a change
repaints the status line and the view on screen, which a ``ContentSwitcher`` picks from one
per kind of run. Devices are listed by a child process too, from a thread worker once the
pane is built, so no frame waits for torch.

Tests inject the trainer and the device list through
:class:`~gputui.ui.widgets.runner.setup.RunnerSetup`.

What the pane receives (a job started, each drain's events, a stop asked) goes to its
``tap`` as it comes (``gputui --record`` writes it into the recording); a replay's pane is
``recorded``: it starts no child, and :meth:`RunnerPane.replay` takes it through the same
steps with the recorded events.

What the pane needs only once it is built (the trainer's events, the session model and
its renderers, the experiments) is imported where it is used: the monitor's first frame
does not wait for those modules, and a pane never shown never loads them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import var

from gputui.format import for_screen
from gputui.jobs.config import (
    DISTRIBUTED_KINDS,
    ConfigError,
    ExperimentConfig,
    RunConfig,
    sweep_sizes,
)
from gputui.ui.widgets.runner.setup import JobHandle, RunnerSetup
from gputui.ui.widgets.steady import SteadyRender

if TYPE_CHECKING:  # loaded once the pane is built (see the module's docstring)
    from textual.widgets import ContentSwitcher

    from gputui.device import Device
    from gputui.jobs.events import DeviceOption, DevicesListed, Error, Event
    from gputui.jobs.results import ExperimentResult, Session
    from gputui.recording.runs import JobBegun, RunnerEntry
    from gputui.telemetry.readings import NvmlReading
    from gputui.telemetry.watched import ProcessReading, ProcessSampler
    from gputui.ui.widgets.runner.controls import RunnerControls
    from gputui.ui.widgets.runner.status import RunStatus
    from gputui.ui.widgets.runner.view import RunView

T = TypeVar("T")


class _RecordedJob:
    """A replay's job: hands out the recorded events it is given; no process."""

    def __init__(self) -> None:
        self.pending: list[Event] = []
        self.pid: int | None = None
        """The recorded child's, once a reading of it says (as the live job knew it)."""

    def start(self) -> _RecordedJob:
        return self

    def drain(self) -> list[Event]:
        drained, self.pending = self.pending, []
        return drained

    def stop(self, *, wait: bool = True) -> None:
        """Nothing runs."""


def _view_types() -> dict[str, type[RunView]]:
    """The views the switcher holds, by the name the pane's ``view`` takes; a new view is a
    widget and an entry here. Each one's widget id is ``runner-view-`` and its name."""
    from gputui.ui.widgets.runner.experiment_view import ExperimentView
    from gputui.ui.widgets.runner.scaling_view import ScalingView
    from gputui.ui.widgets.runner.training_view import TrainingView

    return {"training": TrainingView, "scaling": ScalingView, "experiment": ExperimentView}


class RunnerPane(Vertical, SteadyRender):
    """Device and settings, start/compare/stop, progress, epochs, speedup and placement."""

    class TrainerChanged(Message):
        """The trainer process changed (started, or ended: ``pid`` is ``None``)."""

        def __init__(
            self,
            pid: int | None,
            gpu_uuid: str | None = None,
            ranks: tuple[int, ...] = (),
            gpu_bus_id: str | None = None,
        ) -> None:
            """Carry the trainer's pid and its GPU."""
            super().__init__()
            self.pid = pid
            """The trainer's process id, ``None`` when none runs."""
            self.gpu_uuid = gpu_uuid
            """The UUID of the GPU it trains on (``None``: not a CUDA device, or unknown)."""
            self.gpu_bus_id = gpu_bus_id
            """The PCI bus id of the GPU it trains on (``None``: not a GPU, or unknown)."""
            self.ranks = ranks
            """A scaling run's rank processes (rank 0 is ``pid``); empty otherwise."""

    class TrainerSampled(Message):
        """A reading of the trainer process's CPU use and memory."""

        def __init__(self, reading: ProcessReading) -> None:
            """Carry the reading."""
            super().__init__()
            self.reading = reading
            """The trainer process's reading."""

    view = var("training", init=False)
    """The view on screen (a key of ``_view_types()``): the kind of the last run started."""
    session: var[Session | None] = var(None, init=False, always_update=True)
    """The training or scaling session shown (the last one started). Drains change it in
    place and say so (``mutate_reactive``); ``always_update`` spares a deep comparison."""
    experiment: var[ExperimentResult | None] = var(None, init=False, always_update=True)
    """The experiment shown (the last one started), if any; changed in place as ``session``."""
    experiment_progress = var("", init=False)
    """The experiment's latest progress line."""
    watched: var[ProcessReading | None] = var(None, init=False)
    """The latest reading of the trainer process (None when none runs)."""
    message: var[Text | None] = var(None, init=False)
    """A one-line complaint about the choices (e.g. an unusable device), if any."""
    show_detail = var(False, init=False)
    """Whether the error's detail is shown."""

    def __init__(
        self,
        setup: RunnerSetup | None = None,
        *,
        nvml: Callable[[], NvmlReading | None] = lambda: None,
        id: str | None = None,
    ) -> None:
        """An idle pane; devices are listed once it is built.

        Args:
            setup: Trainers, device list and defaults (default: the real ones).
            nvml: The monitor's latest NVML reading, if any, read once the devices are
                listed: whether this torch is a CUDA build the driver cannot run.
            id: The widget id.
        """
        super().__init__(id=id)
        self.setup = setup or RunnerSetup()
        self._nvml = nvml
        self.devices: tuple[DeviceOption, ...] = ()
        """Devices listed so far (empty until the listing child answers)."""
        self.devices_error: str | None = None
        """Why devices could not be listed, if they could not."""
        self.built = False
        """Whether the pane's widgets exist. They are composed the first time it shows, after
        that frame is drawn: the monitor's first frame never waits for them, and a pane never
        shown (a narrow terminal) never builds them."""
        self._build_scheduled = False
        self._shown = False
        self.build_allowed = False
        """Set by the app once the monitor's first frame is out (:meth:`allow_build`)."""
        self._building = False
        self._built = asyncio.Event()
        self.trainer: JobHandle | None = None
        """The trainer running now, if any."""
        self.experiment_process: JobHandle | None = None
        """The experiment running now, if any."""
        self.events_seen = 0
        """Trainer events folded in so far (tests wait on it)."""
        self._watcher: ProcessSampler | None = None
        self.tap: Callable[[RunnerEntry], None] | None = None
        """Told what the pane receives, as it comes (``gputui --record``)."""
        self.recorded = False
        """Whether the pane shows a recording (:meth:`replay`): it lists no devices, hides
        its choices, watches no process and starts no child."""
        self._replayed = 0
        self._replayed_last: RunnerEntry | None = None
        self._holding = False
        self._held = False
        # the pane's parts, made when it is built (compose)
        self._controls: RunnerControls
        self._status: RunStatus
        self._views: dict[str, RunView]
        self._switcher: ContentSwitcher
        self._scroll: VerticalScroll

    def compose(self) -> ComposeResult:
        """The choices, the status, then the views (nothing until the pane is built)."""
        if not self._building:
            return
        from textual.widgets import ContentSwitcher

        from gputui.ui.widgets.runner.controls import RunnerControls
        from gputui.ui.widgets.runner.status import RunStatus

        self._controls = RunnerControls(self.setup.defaults, id="runner-controls")
        self._status = RunStatus(id="runner-run-status")
        self._views = {name: view(id=f"runner-view-{name}") for name, view in _view_types().items()}
        self._switcher = ContentSwitcher(
            *self._views.values(), id="runner-views", initial=f"runner-view-{self.view}"
        )
        self._scroll = VerticalScroll(self._switcher, id="runner-scroll")
        yield self._controls
        yield self._status
        yield self._scroll

    def on_mount(self) -> None:
        """Set up the drain and watch timers, paused: an idle pane costs nothing."""
        self.border_title = "Runner"
        self._drain_timer = self.set_interval(self.setup.drain_interval_s, self.drain, pause=True)
        self._watch_timer = self.set_interval(
            self.setup.watch_interval_s, self._watch_trainer, pause=True
        )

    def on_show(self) -> None:
        """First shown: build the widgets once this frame is drawn (and the app allows it)."""
        self._shown = True
        self._schedule_build()

    def allow_build(self) -> None:
        """The monitor's first frame is out: the pane may build itself when it shows."""
        self.build_allowed = True
        self._schedule_build()

    def _schedule_build(self) -> None:
        if self._shown and self.build_allowed and not self._build_scheduled:
            self._build_scheduled = True
            self.call_after_refresh(self.build)

    async def build(self) -> None:
        """Compose the choices and views, then list the devices (a child that imports torch).

        Runs once, after the frame that first showed the pane; a second call waits for the
        first to finish (an action may need the widgets before the scheduled build ran).
        """
        if self._building:
            await self._built.wait()
            return
        self._building = True
        await self.recompose()
        if not hasattr(self, "_controls"):  # the app closed first: recompose composed nothing
            return
        self.built = True
        self._built.set()
        self._paint()
        self.call_after_refresh(self._paint)  # at the width the views are laid out to
        if self.recorded:
            self._controls.display = False
        else:
            self._list_devices()

    def _timers_running(self, running: bool) -> None:
        """Drain and watch only while a trainer or experiment runs (never in a replay)."""
        for timer in (self._drain_timer, self._watch_timer):
            if running and not self.recorded:
                timer.resume()
            else:
                timer.pause()

    def on_resize(self) -> None:
        """A new width: draw the chart and tables to it."""
        self._paint()

    def on_unmount(self) -> None:
        """The app is closing: stop the trainer and wait for it (no orphan process)."""
        self.shutdown()

    def shutdown(self) -> None:
        """Stop the running trainer or experiment and wait until it and its workers are gone."""
        trainer, self.trainer = self.trainer, None
        if trainer is not None:
            trainer.stop(wait=True)
        experiment, self.experiment_process = self.experiment_process, None
        if experiment is not None:
            experiment.stop(wait=True)

    # -- devices and the trainer's reading --------------------------------------------------

    @work(thread=True, exit_on_error=False, group="runner-devices")
    def _list_devices(self) -> None:
        listed = self.setup.list_devices()
        self.app.call_from_thread(self.show_devices, listed)

    def show_devices(self, listed: DevicesListed | Error) -> None:
        """Offer the devices listed (every candidate, the unusable ones greyed with their
        reason), or say why they could not be listed; where nothing has started yet, say
        so if this torch is a CUDA build the driver cannot run, with the doctor's fix."""
        from gputui.jobs.events import Error

        listed = for_screen(listed)  # the devices' names are the drivers'
        if isinstance(listed, Error):
            self.devices_error = listed.message
            self.message = Text(f"Could not list devices: {listed.message}", style="red")
            return
        self.devices = listed.devices
        wanted = self.setup.defaults.device
        if self.session is not None:  # a run started before the listing came: show its device
            wanted = self.session.configs[-1].device
        self._controls.offer_devices(
            listed.devices,
            wanted,
            accelerator_first=self.session is None and not self.setup.device_named,
        )
        nvml = self._nvml()
        if nvml is not None and self.session is None and self.experiment is None:
            from gputui.doctor.run import driver_too_old

            line = driver_too_old(listed, nvml)
            if line is not None:
                self.message = Text(f"⚠ {line}", style="yellow")

    def _watch_trainer(self) -> None:
        pid = self.trainer_pid
        if pid is not None:
            self._sample_trainer(pid)

    @work(thread=True, exit_on_error=False, exclusive=True, group="runner-watch")
    def _sample_trainer(self, pid: int) -> None:
        from gputui.telemetry.watched import ProcessSampler

        watcher = self._watcher
        if watcher is None or watcher.pid != pid:
            watcher = self._watcher = ProcessSampler(pid)
        reading = watcher.sample()
        self.app.call_from_thread(self._show_watched, reading)

    def _show_watched(self, reading: ProcessReading) -> None:
        if reading.pid != self.trainer_pid:
            return  # the run ended while the reading was on its way
        self._watched_now(reading)
        if self.tap is not None:
            from gputui.recording.runs import TrainerWatched

            self.tap(TrainerWatched(reading))

    def _watched_now(self, reading: ProcessReading) -> None:
        self.watched = reading
        self.post_message(self.TrainerSampled(reading))

    @property
    def trainer_pid(self) -> int | None:
        """The running trainer's process id, if one runs."""
        run = self.session.current if self.session is not None else None
        if self.trainer is None or run is None:
            return None
        return run.started.pid if run.started is not None else self.trainer.pid

    # -- choices ----------------------------------------------------------------------------

    def chosen_config(self, device: Device | None = None) -> RunConfig:
        """The config the choices describe (on ``device`` when given).

        Raises:
            ConfigError: when the choices cannot work (an unusable device, a bad value).
        """
        controls = self._controls
        device = controls.device if device is None else device
        option = next((d for d in self.devices if d.name == device), None)
        if option is not None and not option.usable:
            raise ConfigError(f"{device} is unusable: {option.reason or 'no reason given'}")
        config = self.setup.defaults.with_changes(device=device, **controls.settings())
        config.validate()
        return config

    def _baseline_config(self) -> RunConfig:
        """The chosen config on the baseline device (the CPU until the devices are listed).

        Raises:
            ConfigError: when the baseline device is unusable.
        """
        return self.chosen_config(self._controls.baseline)

    def _usable_gpus(self, kind: str) -> int:
        """How many GPUs of ``kind`` (``cuda``, ``xpu``) torch can use here (as listed)."""
        return sum(1 for d in self.devices if d.usable and d.name.kind == kind)

    def _from_choices(self, build: Callable[[], T]) -> T | None:
        """What ``build`` makes of the choices; ``None`` after saying why not (a run is in
        progress, or a choice cannot work)."""
        if self.busy:
            self.app.notify("A run is in progress: stop it first (s).", severity="warning")
            return None
        try:
            made = build()
        except ConfigError as error:
            self.message = Text(f"✗ {error}", style="red")
            return None
        self.message = None
        self.show_detail = False
        return made

    # -- actions ----------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Whether a session or an experiment is running."""
        if self.experiment_process is not None:
            return True
        if self.session is None:
            return False
        from gputui.jobs.results import Phase  # loaded: it made the session

        return self.session.phase is Phase.RUNNING

    @property
    def cores(self) -> int:
        """The CPU cores the jobs may use (the setup's)."""
        return self.setup.cores

    @property
    def experiment_running(self) -> bool:
        """Whether the experiment is still running."""
        return self.experiment_process is not None

    def start(self, *, compare: bool = False) -> bool:
        """Start a run of the chosen config, or a comparison: the baseline, then the chosen one.

        Returns:
            Whether a session started (not when one is running or the choices are bad).
        """
        with self._painting_once():
            configs = self._from_choices(
                lambda: (
                    [self._baseline_config(), self.chosen_config()]
                    if compare
                    else [self.chosen_config()]
                )
            )
            if configs is None:
                return False
            from gputui.jobs.results import Session

            self._start_session(Session(configs), "training")
        return True

    def world_sizes(self) -> tuple[tuple[int, ...], str] | None:
        """The world sizes to offer for the chosen device, and its kind (``cpu``: 1 and 2
        ranks; ``cuda``, ``xpu``: 1, 2, 4... up to every usable GPU of the kind); ``None``,
        after saying why, where no distributed backend serves it (MPS)."""
        kind = self._controls.device.kind
        if kind not in DISTRIBUTED_KINDS:
            self.message = Text(
                f"✗ torch.distributed has no backend for {kind}: choose cpu, a CUDA or an XPU GPU",
                style="red",
            )
            return None
        from gputui.jobs.scale.plan import CPU_WORLD_SIZES, gpu_world_sizes

        if kind == "cpu":
            return CPU_WORLD_SIZES, kind
        return gpu_world_sizes(self._usable_gpus(kind)), kind

    def start_scaling(self, sizes: tuple[int, ...], scaling: str) -> bool:
        """Train the chosen config at each world size in turn (``gputui scale``'s runs).

        Returns:
            Whether it started.
        """

        from gputui.jobs.scale.plan import scaling_configs

        def build() -> list[RunConfig]:
            chosen = self.chosen_config()
            gpus = self._usable_gpus(chosen.device.kind)
            if chosen.device.kind in ("cuda", "xpu") and max(sizes) > gpus:
                raise ConfigError(
                    f"{max(sizes)} ranks need {max(sizes)} GPUs and torch sees {gpus} here"
                )
            return list(scaling_configs(chosen, sizes, scaling))

        with self._painting_once():
            configs = self._from_choices(build)
            if configs is None:
                return False
            from gputui.jobs.results import Session

            self._start_session(Session(configs, scaling=scaling), "scaling")
        return True

    def start_experiment(self) -> bool:
        """Run the chosen experiment on the baseline and the chosen device (once if the same).

        Returns:
            Whether it started.
        """

        def build() -> ExperimentConfig:
            chosen = self.chosen_config()
            config = ExperimentConfig(
                **chosen.job_settings(),
                experiment=self._controls.experiment,
                devices=tuple(dict.fromkeys((self._baseline_config().device, chosen.device))),
                batch_size=chosen.batch_size,
                batch_sizes=sweep_sizes(chosen.limit),
                budget_s=self.setup.experiment_budget_s,
            )
            config.validate()
            return config

        with self._painting_once():
            config = self._from_choices(build)
            if config is None:
                return False
            self._start_experiment(config)
        return True

    def _start_experiment(self, config: ExperimentConfig) -> None:
        from gputui.jobs.results import ExperimentResult

        self._told_job("experiment", (config,), None)
        self.experiment = ExperimentResult(config.experiment)
        self.experiment_progress = f"{config.experiment}: starting (torch import, data)…"
        self.experiment_process = (
            _RecordedJob() if self.recorded else self.setup.experiment(config).start()
        )
        self._timers_running(True)
        self.view = "experiment"

    def stop(self) -> None:
        """Stop the session or experiment: the child ends after its current step."""
        if self.experiment_process is not None:
            self._told_stop()
            self.experiment_process.stop(wait=False)
            return
        if self.session is None or not self.busy:
            return
        self._told_stop()
        self.session.stopped = True
        if self.trainer is not None:
            self.trainer.stop(wait=False)
        self.mutate_reactive(RunnerPane.session)

    def toggle_detail(self) -> None:
        """Show or hide the failed run's detail (traceback or stderr tail)."""
        self.show_detail = not self.show_detail

    # -- the children's events --------------------------------------------------------------

    def _told_job(
        self, kind: str, configs: Sequence[RunConfig | ExperimentConfig], scaling: str | None
    ) -> None:
        if self.tap is not None:
            from gputui.recording.runs import JobBegun

            self.tap(JobBegun(kind, tuple(configs), scaling))

    def _told_events(self, events: list[Event]) -> None:
        if self.tap is not None:
            from gputui.recording.runs import EventsDrained

            self.tap(EventsDrained(tuple(events)))

    def _told_stop(self) -> None:
        if self.tap is not None:
            from gputui.recording.runs import StopAsked

            self.tap(StopAsked())

    def _start_session(self, session: Session, view: str) -> None:
        """Start ``session``'s first run and show it in ``view``."""
        self._told_job(view, session.configs, session.scaling)
        self._start_next(session)
        self.view = view

    def _start_next(self, session: Session) -> None:
        """Start the session's next run, if it has one; show the session either way."""
        config = session.next_config
        if config is not None:
            session.begin(config)
            self.trainer = _RecordedJob() if self.recorded else self.setup.trainer(config).start()
            self._timers_running(True)
            self.watched = None
        self.session = session

    def drain(self) -> None:
        """Fold in every event the trainer has sent; start the comparison's next run."""
        if self.experiment_process is not None:
            self._drain_experiment(self.experiment_process)
            return
        trainer, session = self.trainer, self.session
        if trainer is None or session is None or session.current is None:
            self._timers_running(False)
            return
        events = trainer.drain()
        if not events:
            return
        self._told_events(events)  # recorded as the child sent them,
        events = for_screen(events)  # shown sanitised, live or replayed
        from gputui.jobs.events import Finished, RanksStarted, RunStarted

        run = session.current
        for event in events:
            run.absorb(event)
            self.events_seen += 1
            if isinstance(event, RunStarted | RanksStarted):
                started = run.started
                pid = started.pid if started is not None else None
                gpu = started.gpu_uuid if started is not None else None
                bus = started.gpu_bus_id if started is not None else None
                self.post_message(self.TrainerChanged(pid, gpu, run.rank_pids, bus))
        if not run.ended:
            self.mutate_reactive(RunnerPane.session)
            return
        self.trainer = None
        self.post_message(self.TrainerChanged(None))
        if isinstance(run.finished, Finished) and run.finished.stopped:
            session.stopped = True
        with self._painting_once():
            self.watched = None
            self._start_next(session)

    def _drain_experiment(self, process: JobHandle) -> None:
        from gputui.jobs.experiments.report import experiment_progress_line

        result = self.experiment
        events = process.drain()
        if not events or result is None:
            return
        self._told_events(events)
        events = for_screen(events)
        progress = self.experiment_progress
        for event in events:
            result.absorb(event)
            self.events_seen += 1
            line = experiment_progress_line(event)
            if line is not None:
                progress = line
        if result.finished is not None or result.error is not None:
            self.experiment_process = None
        with self._painting_once():
            self.experiment_progress = progress
            self.mutate_reactive(RunnerPane.experiment)

    # -- a recording ------------------------------------------------------------------------

    def replay(self, entries: Sequence[RunnerEntry]) -> None:
        """Show what the recorded pane showed once it had received ``entries`` (in order, as
        :meth:`~gputui.recording.player.Player.runner_entries` gives them): the entries after
        those shown last where they follow on, else all of them from an empty pane (a seek
        back). Each takes the live pane's own steps: a job starts, a drain, a stop."""
        from gputui.recording.runs import EventsDrained, JobBegun, TrainerWatched

        done = self._replayed
        follows = done <= len(entries) and (done == 0 or entries[done - 1] is self._replayed_last)
        with self._painting_once():
            if not follows:
                self._clear()
                done = 0
            for entry in entries[done:]:
                if isinstance(entry, JobBegun):
                    self._begin_recorded(entry)
                elif isinstance(entry, EventsDrained):
                    job = self.experiment_process or self.trainer
                    if isinstance(job, _RecordedJob):
                        job.pending.extend(entry.events)
                        self.drain()
                elif isinstance(entry, TrainerWatched):  # the running trainer's, when recorded
                    if isinstance(self.trainer, _RecordedJob):
                        self.trainer.pid = entry.reading.pid
                    self._watched_now(entry.reading)
                else:
                    self.stop()
            self._replayed = len(entries)
            self._replayed_last = entries[-1] if entries else None

    def _begin_recorded(self, entry: JobBegun) -> None:
        from gputui.jobs.results import Session

        self.message = None
        self.show_detail = False
        configs = list(for_screen(entry.configs))  # a recording's text, as shown
        if entry.kind == "experiment":
            if isinstance(configs[0], ExperimentConfig):
                self._start_experiment(configs[0])
            return
        runs = [config for config in configs if isinstance(config, RunConfig)]
        self._start_session(Session(runs, scaling=entry.scaling), entry.kind)

    def _clear(self) -> None:
        """Back to a pane that has run nothing."""
        if self.trainer is not None:
            self.post_message(self.TrainerChanged(None))
        self.trainer = self.experiment_process = None
        self.session = None
        self.experiment = None
        self.experiment_progress = ""
        self.watched = None
        self.message = None
        self.show_detail = False
        self.view = "training"

    # -- painting ---------------------------------------------------------------------------

    def _paint(self) -> None:
        """Repaint from the state (once built): the buttons, the status line and progress
        row, and the view on screen (a hidden view is painted when it shows)."""
        if not self.built:
            return
        self._controls.busy = self.busy
        view = self._views[self.view]
        line = self.message if self.message is not None else view.status_line(self)
        error = view.error(self) if self.show_detail else None
        self._status.show(line, view.progress(self), error)
        width = max(self._scroll.size.width - 1, 30)
        view.update(view.body(self, width))

    def _changed(self) -> None:
        """Something the views show changed: repaint now, or once the changes held end."""
        if self._holding:
            self._held = True
        else:
            self._paint()

    @contextmanager
    def _painting_once(self) -> Iterator[None]:
        """Change several reactives (a start changes the complaint, the session and the view
        together) and paint once, after the last, if any changed."""
        self._holding, self._held = True, False
        try:
            yield
        finally:
            self._holding = False
            if self._held:
                self._paint()

    def watch_view(self, view: str) -> None:
        """Switch to ``view`` and paint it."""
        if self.built:
            self._switcher.current = f"runner-view-{view}"
        self._changed()

    watch_session = watch_experiment = watch_experiment_progress = _changed
    watch_watched = watch_message = watch_show_detail = _changed
