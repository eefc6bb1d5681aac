"""The runner pane's work, with no screen: choices made into configs, torch asked for its
devices, runs trained one after another and their events folded into a session or an
experiment, a recording's jobs alike. :class:`Runner` never blocks: :meth:`Runner.drain`, on
the pane's timer, folds in what the children said. What a job needs (the events, the results)
is imported once one starts: the monitor's first frame does not wait for it.

Over 600 lines: the pane's whole life with its jobs (asking torch, starting, draining,
stopping, a recording's jobs) is one state machine, read best in one place.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from gputui.device import Device
from gputui.format import for_screen, one_line
from gputui.jobs.config import (
    DISTRIBUTED_KINDS,
    ConfigError,
    ExperimentConfig,
    JobConfig,
    RunConfig,
    available_cores,
    sweep_sizes,
)

if TYPE_CHECKING:
    from gputui.jobs.devices import DeviceInventory
    from gputui.jobs.events import DeviceOption, DevicesListed, Error, Event
    from gputui.jobs.results import ExperimentResult, Session

J = TypeVar("J", bound=JobConfig)
T = TypeVar("T")

UI_NICE = 10
"""Niceness of a job started beside the live monitor, so the screen stays responsive."""
RUNNER_DEFAULTS_ENV = "GPUTUI_RUNNER_DEFAULTS"
"""Environment variable: a JSON object of :class:`RunConfig` fields the runner pane starts
from (e.g. ``{"dataset": "synthetic", "limit": 256, "epochs": 1, "threads": 1}``)."""


def ui_friendly_threads() -> int:
    """Threads for CPU work beside a live UI: every core but one, at least 1."""
    return max(1, available_cores() - 1)


def ui_friendly(config: J) -> J:
    """``config`` as a job beside the live monitor runs it: a core spare, lower priority."""
    return config.with_changes(threads=ui_friendly_threads(), nice=UI_NICE)


def runner_defaults(environ: Mapping[str, str]) -> RunConfig:
    """The runner pane's starting config: a run beside the monitor (:func:`ui_friendly`),
    changed by ``GPUTUI_RUNNER_DEFAULTS``. Its device is parsed here; whether it is here
    needs torch (``gputui`` asks a child before the app starts).

    Raises:
        ConfigError: naming the variable, when it is not a JSON object of known, valid fields.
    """
    config = ui_friendly(RunConfig())
    text = environ.get(RUNNER_DEFAULTS_ENV)
    if not text:
        return config
    config = config.changed_by_json(text, RUNNER_DEFAULTS_ENV)
    try:
        config.validate()
    except ConfigError as exc:
        raise ConfigError(f"{RUNNER_DEFAULTS_ENV}: {exc}") from None
    return config


class JobHandle(Protocol):
    """A trainer's or an experiment's child process (or a scripted one, in tests)."""

    @property
    def pid(self) -> int | None:
        """The child's process id."""
        ...

    def start(self) -> JobHandle:
        """Start the run."""
        ...

    def drain(self) -> list[Event]:
        """Every event received so far, without waiting."""
        ...

    def stop(self, *, wait: bool = True) -> None:
        """Stop the run."""
        ...


def _real_child(config: RunConfig | ExperimentConfig) -> JobHandle:
    # a job's modules load once one starts (the module's docstring)
    from gputui.jobs.process import ChildProcess

    return ChildProcess(config)


def _real_devices() -> DevicesListed | Error:
    # (as above)
    from gputui.jobs.process import list_devices

    return list_devices()


def _installed_torch() -> DeviceInventory:
    # (as above)
    from gputui.jobs.devices import installed_torch

    return installed_torch()


@dataclass(frozen=True)
class RunnerSetup:
    """Where the runner gets its children and devices; production uses the defaults (tests
    inject scripted ones)."""

    trainer: Callable[[RunConfig], JobHandle] = _real_child
    """Builds a (not yet started) trainer for a config."""
    experiment: Callable[[ExperimentConfig], JobHandle] = _real_child
    """Builds a (not yet started) experiment process (issue 6's experiments)."""
    list_devices: Callable[[], DevicesListed | Error] = _real_devices
    """Asks torch which devices it can use (blocking: a child; run in a thread before the
    first job)."""
    installed: Callable[[], DeviceInventory] = _installed_torch
    """What the installed torch was built for, read without importing it: the devices
    offered until torch is asked."""
    listed: DevicesListed | None = None
    """torch's answer, where it was asked already (``gputui`` asks before the app starts
    when ``GPUTUI_RUNNER_DEFAULTS`` names a device): it is not asked again."""
    defaults: RunConfig = field(default_factory=lambda: ui_friendly(RunConfig()))
    """The config the choices start from (a core spare, a lower priority); ``gputui``
    reads it from ``GPUTUI_RUNNER_DEFAULTS`` (:func:`runner_defaults`)."""
    device_named: bool = False
    """Whether ``defaults`` names its device on purpose (``GPUTUI_RUNNER_DEFAULTS`` did): the
    pane then chooses it; else the first usable accelerator, as the runner is for GPUs."""
    drain_interval_s: float = 0.1
    """How often the pane drains the runner while it is busy."""
    experiment_budget_s: float = 2.0
    """About how long each measurement of an experiment may take."""
    watch_interval_s: float = 1.0
    """How often the pane reads the trainer process's CPU use (psutil)."""
    cores: int = field(default_factory=available_cores)
    """The CPU cores the jobs may use (this process's), against which the views say how
    many threads a CPU run had, and whether ranks are oversubscribed."""


def runner_setup(environ: Mapping[str, str]) -> RunnerSetup:
    """The real runner, its choices starting from :func:`runner_defaults`. A device that
    ``GPUTUI_RUNNER_DEFAULTS`` names is the one chosen, the CPU beside a GPU included.

    Raises:
        ConfigError: as :func:`runner_defaults` does.
    """
    defaults = runner_defaults(environ)
    named = "device" in json.loads(environ.get(RUNNER_DEFAULTS_ENV) or "{}")
    return RunnerSetup(defaults=defaults, device_named=named)


@dataclass(frozen=True)
class Choices:
    """What the runner's choices say."""

    device: Device
    """The device to train on."""
    baseline: Device
    """The device to compare against."""
    settings: Mapping[str, object]
    """The batch size, epochs, dataset, pipeline and precision, by config field."""
    experiment: str
    """The experiment to run."""


class Tap(Protocol):
    """Told what the runner receives, as it comes (``gputui --record`` writes it down)."""

    def begun(self, kind: str, configs: tuple[JobConfig, ...], scaling: str | None) -> None:
        """A job started: a ``training``, ``scaling`` or ``experiment`` session."""
        ...

    def drained(self, events: tuple[Event, ...]) -> None:
        """A drain brought the running child's events (as it sent them)."""
        ...

    def stop_asked(self) -> None:
        """The user asked the running job to stop."""
        ...

    def devices_asked(self, answered: bool) -> None:
        """Torch is asked which devices it can use, before the first job starts; or
        (``answered``) its answer came."""
        ...


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


class Runner:
    """One runner's devices and jobs: what it offers, what runs, what it said, and why not."""

    def __init__(
        self,
        setup: RunnerSetup,
        *,
        tap: Tap | None = None,
        warning: Callable[[DevicesListed], str | None] = lambda listed: None,
    ) -> None:
        """A runner that has run nothing. ``warning`` is what to say of a device listing
        before anything has run (the pane's: a CUDA build the driver cannot run)."""
        self.setup = setup
        self.tap = tap
        self._warning = warning
        self.devices: tuple[DeviceOption, ...] = ()
        """The devices on offer: as torch listed them once :attr:`checked`, else as seen."""
        self.checked = False
        """Whether torch listed the devices (asked once, before the first job)."""
        self.kind = "training"
        """The kind of the last job started: ``training``, ``scaling`` or ``experiment``."""
        self.session: Session | None = None
        """The last training or scaling session started."""
        self.experiment: ExperimentResult | None = None
        """The last experiment started."""
        self.experiment_progress = ""
        """The experiment's latest progress line."""
        self.message: str | None = None
        """A one-line complaint about the choices (``✗``) or warning (``⚠``), if any."""
        self.show_detail = False
        """Whether the error's detail is shown."""
        self.trainer: JobHandle | None = None
        """The trainer running now, if any."""
        self.experiment_process: JobHandle | None = None
        """The experiment running now, if any."""
        self.events_seen = 0
        """Events folded in so far (tests wait on it)."""
        self.recorded = False
        """Whether it replays a recording (:meth:`replay_job`): it starts no child."""
        self._check: threading.Thread | None = None
        self._ask_replayed = False  # a replay's: torch was asked then
        self._answer: DevicesListed | Error | None = None
        self._asked: Callable[[], bool] | None = None
        if setup.listed is not None:
            self.offer(setup.listed, checked=True)

    # -- state ------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Whether torch is being asked for the devices, or a session or experiment runs."""
        if self.experiment_process is not None or self.checking:
            return True
        if self.session is None:
            return False
        from gputui.jobs.results import Phase  # loaded: it made the session

        return self.session.phase is Phase.RUNNING

    @property
    def checking(self) -> bool:
        """Whether torch is being asked which devices it can use (a job waits for it)."""
        return self._check is not None or self._ask_replayed

    @property
    def experiment_running(self) -> bool:
        """Whether the experiment is still running."""
        return self.experiment_process is not None

    @property
    def cores(self) -> int:
        """The CPU cores the jobs may use (the setup's)."""
        return self.setup.cores

    @property
    def trainer_pid(self) -> int | None:
        """The running trainer's process id, if one runs."""
        run = self.session.current if self.session is not None else None
        if self.trainer is None or run is None:
            return None
        return run.started.pid if run.started is not None else self.trainer.pid

    # -- devices ----------------------------------------------------------------------------

    def offer(self, listed: DevicesListed | Error, *, checked: bool = False) -> None:
        """Offer the devices ``listed`` (``checked``: by torch), or say why torch could not
        list them; before anything has run, say what ``warning`` finds in them."""
        # the protocol (0.1 s of imports) loads with the first devices or job
        from gputui.jobs.events import Error

        listed = for_screen(listed)  # the devices' names are the drivers'
        if isinstance(listed, Error):
            self.message = f"Could not list devices: {listed.message}"
            return
        self.devices, self.checked = listed.devices, self.checked or checked
        if self.session is None and self.experiment is None:
            warning = self._warning(listed)
            if warning is not None:
                self.message = f"⚠ {warning}"

    def unusable(self, device: Device) -> str | None:
        """Why torch cannot use ``device``, as it listed; ``None`` when it can, or has not
        been asked yet (what is seen before is no proof)."""
        if not self.checked:
            return None
        options = {option.name: option for option in self.devices}
        option = options.get(device) or options.get(Device(device.kind))
        if option is not None:
            return None if option.usable else option.reason or "no reason given"
        return f"torch sees no {device} here" if device.index is not None else None

    def usable_gpus(self, kind: str) -> int:
        """How many GPUs of ``kind`` (``cuda``, ``xpu``) are on offer, usable."""
        return sum(1 for d in self.devices if d.usable and d.name.kind == kind)

    def config(self, choices: Choices, device: Device | None = None) -> RunConfig:
        """The config ``choices`` describe (on ``device`` when given).

        Raises:
            ConfigError: when a choice cannot work (an unusable device, a bad value).
        """
        device = choices.device if device is None else device
        reason = self.unusable(device)
        if reason is not None:
            raise ConfigError(f"{device} is unusable: {reason}")
        config = self.setup.defaults.with_changes(device=device, **choices.settings)
        config.validate()
        return config

    # -- what the user asks -----------------------------------------------------------------

    def start(self, choices: Choices, *, compare: bool = False) -> bool:
        """Train the chosen config, or compare: the baseline, then the chosen one. Returns
        whether it started, or will once torch has listed the devices (not when busy, or
        when a choice cannot work: :attr:`message` says why)."""

        def build() -> list[RunConfig]:
            chosen = self.config(choices)
            return [self.config(choices, choices.baseline), chosen] if compare else [chosen]

        return self._ask(build, lambda configs: self._start_session(configs, "training", None))

    def world_sizes(self, device: Device) -> tuple[tuple[int, ...], str] | None:
        """The world sizes to offer on ``device`` (``cpu``: 1 and 2 ranks; a GPU: 1, 2, 4...
        up to every usable one of its kind), and its kind; ``None``, after saying why, where
        no distributed backend serves it (MPS)."""
        kind = device.kind
        if kind not in DISTRIBUTED_KINDS:
            self.message = (
                f"✗ torch.distributed has no backend for {kind}: choose cpu, a CUDA or an XPU GPU"
            )
            return None
        # a job's modules load once one starts (the module's docstring)
        from gputui.jobs.scale.plan import CPU_WORLD_SIZES, gpu_world_sizes

        if kind == "cpu":
            return CPU_WORLD_SIZES, kind
        return gpu_world_sizes(self.usable_gpus(kind)), kind

    def start_scaling(self, choices: Choices, sizes: tuple[int, ...], scaling: str) -> bool:
        """Train the chosen config at each world size in turn; returns as :meth:`start`."""
        # (as above)
        from gputui.jobs.scale.plan import scaling_configs

        def build() -> list[RunConfig]:
            chosen = self.config(choices)
            gpus = self.usable_gpus(chosen.device.kind)
            if chosen.device.kind in ("cuda", "xpu") and max(sizes) > gpus:
                raise ConfigError(
                    f"{max(sizes)} ranks need {max(sizes)} GPUs and torch sees {gpus} here"
                )
            return list(scaling_configs(chosen, sizes, scaling))

        return self._ask(build, lambda configs: self._start_session(configs, "scaling", scaling))

    def start_experiment(self, choices: Choices) -> bool:
        """Run the chosen experiment on the baseline and the chosen device (once if the
        same); returns as :meth:`start`."""

        def build() -> ExperimentConfig:
            chosen = self.config(choices)
            baseline = self.config(choices, choices.baseline)
            config = ExperimentConfig(
                **chosen.job_settings(),
                experiment=choices.experiment,
                devices=tuple(dict.fromkeys((baseline.device, chosen.device))),
                batch_size=chosen.batch_size,
                batch_sizes=sweep_sizes(chosen.limit),
                budget_s=self.setup.experiment_budget_s,
            )
            config.validate()
            return config

        return self._ask(build, self._start_experiment)

    def _ask(self, build: Callable[[], T], begin: Callable[[T], None]) -> bool:
        """Start what ``build`` makes of the choices with ``begin``; the first time, once
        torch has listed the devices (``build`` runs again then, against its list)."""
        if self.busy:
            return False
        try:
            made = build()
        except ConfigError as error:
            self.message = f"✗ {error}"
            return False
        self.message, self.show_detail = None, False
        if self.checked or self.recorded:
            begin(made)
        else:
            self._asked = lambda: self._ask(build, begin)
            self._check = threading.Thread(target=self._ask_torch, daemon=True)
            self._check.start()
            if self.tap is not None:
                self.tap.devices_asked(False)
        return True

    def _ask_torch(self) -> None:
        try:
            self._answer = self.setup.list_devices()
        except Exception as error:  # (the real one says its failures as an Error)
            from gputui.jobs.events import Error  # with the first devices or job, as above

            self._answer = Error(one_line(f"{type(error).__name__}: {error}"), kind="device")

    def stop(self) -> None:
        """Stop the session or experiment (the child ends after its current step), or what
        waits for torch's device list."""
        self._ask_replayed = False
        if self._asked is not None:
            self._asked = None
            return
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

    def shutdown(self) -> None:
        """Stop the running trainer or experiment and wait until it and its workers are gone."""
        self._asked = None
        jobs = (self.trainer, self.experiment_process)
        self.trainer = self.experiment_process = None
        for job in jobs:
            if job is not None:
                job.stop(wait=True)

    # -- the children -----------------------------------------------------------------------

    def _start_session(self, configs: list[RunConfig], kind: str, scaling: str | None) -> None:
        # (as above)
        from gputui.jobs.results import Session

        session = Session(configs, scaling=scaling)
        if self.tap is not None:
            self.tap.begun(kind, tuple(configs), scaling)
        self._start_next(session)
        self.kind = kind

    def _start_next(self, session: Session) -> None:
        """Start the session's next run, if it has one."""
        config = session.next_config
        if config is not None:
            session.begin(config)
            self.trainer = _RecordedJob() if self.recorded else self.setup.trainer(config).start()
        self.session = session

    def _start_experiment(self, config: ExperimentConfig) -> None:
        # (as above)
        from gputui.jobs.results import ExperimentResult

        if self.tap is not None:
            self.tap.begun("experiment", (config,), None)
        self.experiment = ExperimentResult(config.experiment)
        self.experiment_progress = f"{config.experiment}: starting (torch import, data)…"
        self.experiment_process = (
            _RecordedJob() if self.recorded else self.setup.experiment(config).start()
        )
        self.kind = "experiment"

    def drain(self) -> bool:
        """Fold in what the children said: torch's device list (then start what waited
        for it), or the running job's events (then start the session's next run); returns
        whether anything changed."""
        if self._check is not None:
            if self._check.is_alive():
                return False
            answer, asked = self._answer, self._asked
            self._check = self._asked = None
            assert answer is not None
            if self.tap is not None:
                self.tap.devices_asked(True)
            self.offer(answer, checked=True)
            if asked is not None and self.checked:
                asked()
            return True
        job = self.experiment_process or self.trainer
        events = job.drain() if job is not None else []
        if not events:
            return False
        if self.tap is not None:
            self.tap.drained(tuple(events))  # recorded as the child sent them,
        events = for_screen(events)  # shown sanitised, live or replayed
        self.events_seen += len(events)
        if job is self.experiment_process:
            self._fold_experiment(events)
        else:
            self._fold_run(events)
        return True

    def _fold_run(self, events: list[Event]) -> None:
        # (as above)
        from gputui.jobs.events import Finished

        session = self.session
        run = session.current if session is not None else None
        if session is None or run is None:
            return
        for event in events:
            run.absorb(event)
        if run.ended:
            self.trainer = None
            if isinstance(run.finished, Finished) and run.finished.stopped:
                session.stopped = True
            self._start_next(session)

    def _fold_experiment(self, events: list[Event]) -> None:
        # (as above)
        from gputui.jobs.experiments.report import experiment_progress_line

        result = self.experiment
        if result is None:
            return
        for event in events:
            result.absorb(event)
            line = experiment_progress_line(event)
            if line is not None:
                self.experiment_progress = line
        if result.ended:
            self.experiment_process = None

    def _told_stop(self) -> None:
        if self.tap is not None:
            self.tap.stop_asked()

    # -- a recording ------------------------------------------------------------------------

    def replay_job(
        self, kind: str, configs: Sequence[JobConfig], scaling: str | None = None
    ) -> None:
        """A recorded job starts, as it did live: its children are the recorded events that
        :meth:`replay_events` brings."""
        self.recorded = True
        self.message, self.show_detail, self._ask_replayed = None, False, False
        shown = list(for_screen(configs))  # a recording's text, as shown
        if kind == "experiment":
            if isinstance(shown[0], ExperimentConfig):
                self._start_experiment(shown[0])
            return
        runs = [config for config in shown if isinstance(config, RunConfig)]
        self._start_session(runs, kind, scaling)

    def replay_events(self, events: Sequence[Event]) -> None:
        """A recorded drain: the running job's events, folded in as live."""
        job = self.experiment_process or self.trainer
        if isinstance(job, _RecordedJob):
            job.pending.extend(events)
            self.drain()

    def replay_asked(self, answered: bool) -> None:
        """A recorded ask of torch for the devices (shown as asking), or its answer."""
        self.recorded, self._ask_replayed = True, not answered

    def replay_watched(self, pid: int) -> None:
        """A recorded reading of trainer ``pid`` (as the live runner knew its pid)."""
        if isinstance(self.trainer, _RecordedJob):
            self.trainer.pid = pid

    def clear(self) -> None:
        """Back to a runner that has run nothing (a replay seeking back)."""
        self.trainer = self.experiment_process = None
        self.session = self.experiment = None
        self.experiment_progress = ""
        self.message, self.show_detail, self._ask_replayed = None, False, False
        self.kind = "training"
