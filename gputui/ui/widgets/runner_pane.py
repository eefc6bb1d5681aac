"""The runner pane: choose a device and settings, train, compare, and watch the epochs arrive.

The trainer runs in a child process (:class:`gputui.jobs.process.ChildProcess`);
the pane drains its events on a cheap timer (``drain()`` never blocks), folds them
into a :class:`~gputui.jobs.results.Session`, and repaints from the pure
renderers in :mod:`gputui.ui.runner_render`. Devices are listed by a child process
too, from a thread worker at mount, so the first frame never waits for torch.

Tests inject the trainer and the device list through
:class:`~gputui.ui.widgets.runner.setup.RunnerSetup`.

What the pane needs only once it is built (the trainer's events, the session model and
its renderers, the experiments) is imported where it is used: the monitor's first frame
does not wait for those modules (about 40 ms), and a pane never shown never loads them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Label, ProgressBar, Select, Static

from gputui.format import fmt_bytes, fmt_percent
from gputui.jobs.config import (
    DATASETS,
    DISTRIBUTED_DEVICES,
    EXPERIMENTS,
    PIPELINES,
    PRECISIONS,
    ConfigError,
    ExperimentConfig,
    RunConfig,
    scaling_configs,
    sweep_sizes,
)
from gputui.ui.widgets.runner.setup import JobHandle, RunnerSetup

if TYPE_CHECKING:  # loaded once the pane is built (see the module's docstring)
    from gputui.jobs.events import DeviceOption, DevicesListed, Error
    from gputui.jobs.results import ExperimentResult, Session
    from gputui.telemetry.watched import ProcessReading, ProcessSampler

T = TypeVar("T")

LISTING = "?listing"
"""The device choice's value until the devices are listed (the default device is used)."""

BATCH_SIZES = (32, 64, 128, 256, 512, 1024, 2048)
EPOCH_CHOICES = (1, 2, 3, 5, 10, 20)


def _options(values: tuple[object, ...], extra: object) -> list[tuple[str, object]]:
    chosen = sorted({*values, extra}) if isinstance(extra, int) else list(values)
    return [(str(value), value) for value in chosen]


def _choice(options: list[tuple[str, object]], value: object, id: str) -> Select[object]:
    """A compact drop-down that always holds one of its ``options``."""
    return Select(
        options, value=value, allow_blank=False, type_to_search=False, compact=True, id=id
    )


class RunnerPane(Vertical):
    """Device and settings, start/compare/stop, progress, epochs, speedup and placement."""

    class TrainerChanged(Message):
        """The trainer process changed (started, or ended: ``pid`` is ``None``)."""

        def __init__(
            self, pid: int | None, gpu_uuid: str | None = None, ranks: tuple[int, ...] = ()
        ) -> None:
            """Carry the trainer's pid and its GPU."""
            super().__init__()
            self.pid = pid
            """The trainer's process id, ``None`` when none runs."""
            self.gpu_uuid = gpu_uuid
            """The UUID of the GPU it trains on (``None``: not a CUDA device, or unknown)."""
            self.ranks = ranks
            """A scaling run's rank processes (rank 0 is ``pid``); empty otherwise."""

    class TrainerSampled(Message):
        """A reading of the trainer process's CPU use and memory."""

        def __init__(self, reading: ProcessReading) -> None:
            """Carry the reading."""
            super().__init__()
            self.reading = reading
            """The trainer process's reading."""

    def __init__(self, setup: RunnerSetup | None = None, *, id: str | None = None) -> None:
        """An idle pane; devices are listed once it is mounted.

        Args:
            setup: Trainers, device list and defaults (default: the real ones).
            id: The widget id.
        """
        super().__init__(id=id)
        self.setup = setup or RunnerSetup()
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
        self.session: Session | None = None
        """The session shown (the last one started)."""
        self.trainer: JobHandle | None = None
        """The trainer running now, if any."""
        self.message: Text | None = None
        """A one-line complaint about the choices (e.g. an unusable device), if any."""
        self.events_seen = 0
        """Trainer events folded in so far (tests wait on it)."""
        self.show_detail = False
        """Whether the error's detail is shown."""
        self.experiment_progress = ""
        """The experiment's latest progress line."""
        self.watched: ProcessReading | None = None
        """The latest reading of the trainer process (None when none runs)."""
        self._watcher: ProcessSampler | None = None
        self.experiment: ExperimentResult | None = None
        """The experiment shown (the last one started), if any."""
        self.experiment_process: JobHandle | None = None
        """The experiment running now, if any."""
        self.showing_experiment = False
        """Whether the body shows the experiment (else the training session)."""

    def compose(self) -> ComposeResult:
        """The choices, the buttons, then what the run shows (nothing until it is built)."""
        if not self._building:
            return
        from gputui.ui.runner_render import session_body, status_line

        defaults = self.setup.defaults
        device = defaults.device
        with Horizontal(classes="runner-row"):
            yield Label("Device ")
            yield _choice([(f"{device} · listing devices…", LISTING)], LISTING, "runner-device")
        with Horizontal(classes="runner-row"):
            yield Label("Compare vs ")
            yield _choice([("cpu", LISTING)], LISTING, "runner-baseline")
        rows = (
            (
                ("Batch ", "batch", BATCH_SIZES, defaults.batch_size),
                (" Epochs ", "epochs", EPOCH_CHOICES, defaults.epochs),
                (" Data ", "dataset", DATASETS, defaults.dataset),
            ),
            (
                ("Pipeline ", "pipeline", PIPELINES, defaults.pipeline),
                (" Precision ", "precision", PRECISIONS, defaults.precision),
            ),
        )
        for row in rows:
            with Horizontal(classes="runner-row"):
                for label, name, values, value in row:
                    yield Label(label)
                    yield _choice(_options(values, value), value, f"runner-{name}")
        with Horizontal(id="runner-buttons"):
            yield Button("Train r", id="runner-start", compact=True, action="app.runner_start")
            yield Button(
                "Compare c", id="runner-compare", compact=True, action="app.runner_compare"
            )
            yield Button("Stop s", id="runner-stop", compact=True, action="app.runner_stop")
            yield _choice(
                [(name, name) for name in EXPERIMENTS], EXPERIMENTS[0], "runner-experiment"
            )
            yield Button(
                "Experiment x",
                id="runner-run-experiment",
                compact=True,
                action="app.runner_experiment",
            )
        yield Static(status_line(None), id="runner-status")
        with Horizontal(id="runner-progress-row"):
            yield ProgressBar(total=None, show_eta=False, id="runner-progress")
            yield Static("", id="runner-progress-text")
        yield Static("", id="runner-detail")
        with VerticalScroll(id="runner-scroll"):
            yield Static(session_body(None, 60), id="runner-body")

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
        self.built = True
        self._built.set()
        self.refresh_view()
        self._list_devices()

    def _timers_running(self, running: bool) -> None:
        """Drain and watch only while a trainer or experiment runs."""
        for timer in (self._drain_timer, self._watch_timer):
            if running:
                timer.resume()
            else:
                timer.pause()

    def on_resize(self) -> None:
        """A new width: draw the chart and tables to it."""
        self.refresh_view()

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

    @work(thread=True, exit_on_error=False, group="runner-devices")
    def _list_devices(self) -> None:
        listed = self.setup.list_devices()
        self.app.call_from_thread(self.show_devices, listed)

    def show_devices(self, listed: DevicesListed | Error) -> None:
        """Fill the device choices: every candidate, the unusable ones greyed with their reason."""
        from gputui.jobs.events import Error
        from gputui.ui.runner_render import device_label

        if isinstance(listed, Error):
            self.devices_error = listed.message
            self.message = Text(f"Could not list devices: {listed.message}", style="red")
            self.refresh_view()
            return
        self.devices = listed.devices
        options = [(device_label(option), option.name) for option in listed.devices]
        usable = [option.name for option in listed.devices if option.usable]
        wanted = self.setup.defaults.device
        if self.session is not None:  # a run started before the listing came: show its device
            wanted = self.session.configs[-1].device
        for select_id, prefer in (("#runner-device", wanted), ("#runner-baseline", "cpu")):
            select = self.query_one(select_id, Select)
            select.set_options(options)
            choice = prefer if prefer in usable else (usable[0] if usable else None)
            if select_id == "#runner-device" and prefer == "cpu" and self.session is None:
                accelerators = [name for name in usable if name != "cpu"]
                choice = accelerators[0] if accelerators else choice
            if choice is not None:
                select.value = choice

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
        self.watched = reading
        self.post_message(self.TrainerSampled(reading))
        self.refresh_view()

    # -- choices ----------------------------------------------------------------------------

    def chosen_config(self, device: str | None = None) -> RunConfig:
        """The config the choices describe (on ``device`` when given).

        Raises:
            ConfigError: when the choices cannot work (an unusable device, a bad value).
        """

        def value(name: str) -> object:
            return self.query_one(f"#runner-{name}", Select).value

        if device is None:
            device = str(value("device"))
            device = self.setup.defaults.device if device == LISTING else device
        option = next((d for d in self.devices if d.name == device), None)
        if option is not None and not option.usable:
            raise ConfigError(f"{device} is unusable: {option.reason or 'no reason given'}")
        config = self.setup.defaults.with_changes(
            device=device,
            batch_size=value("batch"),
            epochs=value("epochs"),
            dataset=value("dataset"),
            pipeline=value("pipeline"),
            precision=value("precision"),
        )
        config.validate()
        return config

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

    def start_experiment(self) -> bool:
        """Run the chosen experiment on the baseline and the chosen device (once if the same).

        Returns:
            Whether it started.
        """

        def build() -> ExperimentConfig:
            chosen = self.chosen_config()
            config = ExperimentConfig(
                **chosen.job_settings(),
                experiment=str(self.query_one("#runner-experiment", Select).value),
                devices=tuple(dict.fromkeys((self._baseline_config().device, chosen.device))),
                batch_size=chosen.batch_size,
                batch_sizes=sweep_sizes(chosen.limit),
                budget_s=self.setup.experiment_budget_s,
            )
            config.validate()
            return config

        config = self._from_choices(build)
        if config is None:
            return False
        from gputui.jobs.results import ExperimentResult

        self.showing_experiment = True
        self.experiment = ExperimentResult(config.experiment)
        self.experiment_progress = f"{config.experiment}: starting (torch import, data)…"
        self.experiment_process = self.setup.experiment(config).start()
        self._timers_running(True)
        self.refresh_view()
        return True

    def start(self, *, compare: bool = False) -> bool:
        """Start a run of the chosen config, or a comparison: the baseline, then the chosen one.

        Returns:
            Whether a session started (not when one is running or the choices are bad).
        """
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

        self.showing_experiment = False
        self.session = Session(configs)
        self._start_next()
        return True

    def world_sizes(self) -> tuple[tuple[int, ...], str] | None:
        """The world sizes to offer for the chosen device, and its kind (``cpu``: 1 and 2
        ranks; ``cuda``: 1, 2, 4... up to every usable GPU); ``None``, after saying why,
        where no distributed backend serves it (MPS)."""
        device = str(self.query_one("#runner-device", Select).value)
        kind = (self.setup.defaults.device if device == LISTING else device).split(":")[0]
        if kind not in DISTRIBUTED_DEVICES:
            self.message = Text(
                f"✗ torch.distributed has no backend for {kind}: choose cpu or a CUDA GPU",
                style="red",
            )
            self.refresh_view()
            return None
        if kind == "cpu":
            return (1, 2), kind
        gpus = sum(1 for d in self.devices if d.usable and d.name.startswith("cuda:"))
        sizes = [1]
        while sizes[-1] * 2 <= gpus:
            sizes.append(sizes[-1] * 2)
        return (*sizes, *(() if sizes[-1] == gpus else (gpus,))), kind

    def start_scaling(self, sizes: tuple[int, ...], scaling: str) -> bool:
        """Train the chosen config at each world size in turn (``gputui scale``'s runs).

        Returns:
            Whether it started.
        """

        def build() -> list[RunConfig]:
            chosen = self.chosen_config()
            gpus = sum(1 for d in self.devices if d.usable and d.name.startswith("cuda:"))
            if chosen.device.startswith("cuda") and max(sizes) > gpus:
                raise ConfigError(
                    f"{max(sizes)} ranks need {max(sizes)} GPUs and torch sees {gpus} here"
                )
            return list(scaling_configs(chosen, sizes, scaling))

        configs = self._from_choices(build)
        if configs is None:
            return False
        from gputui.jobs.results import Session

        self.showing_experiment = False
        self.session = Session(configs, scaling=scaling)
        self._start_next()
        return True

    def _baseline_config(self) -> RunConfig:
        """The chosen config on the baseline device (the CPU until the devices are listed).

        Raises:
            ConfigError: when the baseline device is unusable.
        """
        baseline = str(self.query_one("#runner-baseline", Select).value)
        return self.chosen_config("cpu" if baseline == LISTING else baseline)

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
            self.refresh_view()
            return None
        self.message = None
        self.show_detail = False
        return made

    def stop(self) -> None:
        """Stop the session or experiment: the child ends after its current step."""
        if self.experiment_process is not None:
            self.experiment_process.stop(wait=False)
            return
        if self.session is None or not self.busy:
            return
        self.session.stopped = True
        if self.trainer is not None:
            self.trainer.stop(wait=False)
        self.refresh_view()

    def toggle_detail(self) -> None:
        """Show or hide the failed run's detail (traceback or stderr tail)."""
        self.show_detail = not self.show_detail
        self.refresh_view()

    def _start_next(self) -> None:
        session = self.session
        config = session.next_config if session is not None else None
        if session is None or config is None:
            return
        session.begin(config)
        self.trainer = self.setup.trainer(config).start()
        self._timers_running(True)
        self.watched = None
        self.refresh_view()

    def _drain_experiment(self, process: JobHandle) -> None:
        from gputui.jobs.reports import experiment_progress_line

        result = self.experiment
        events = process.drain()
        if not events or result is None:
            return
        for event in events:
            result.absorb(event)
            self.events_seen += 1
            line = experiment_progress_line(event)
            if line is not None:
                self.experiment_progress = line
        if result.finished is not None or result.error is not None:
            self.experiment_process = None
        self.refresh_view()

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
        from gputui.jobs.events import Finished, RanksStarted, RunStarted

        run = session.current
        for event in events:
            run.absorb(event)
            self.events_seen += 1
            if isinstance(event, RunStarted | RanksStarted):
                pid = run.started.pid if run.started is not None else None
                gpu = run.started.gpu_uuid if run.started is not None else None
                self.post_message(self.TrainerChanged(pid, gpu, run.rank_pids))
        if run.ended:
            self.trainer = None
            self.watched = None
            self.post_message(self.TrainerChanged(None))
            if isinstance(run.finished, Finished) and run.finished.stopped:
                session.stopped = True
            self._start_next()
        self.refresh_view()

    # -- painting ---------------------------------------------------------------------------

    def refresh_view(self) -> None:
        """Repaint the status line, progress bar and body from the session (once built)."""
        if not self.built:
            return
        from gputui.ui.runner_render import (
            ended_line,
            error_detail,
            progress_line,
            session_body,
            status_line,
        )
        from gputui.ui.scaling_render import scaling_body

        self._enable_buttons()
        if self.showing_experiment and self.experiment is not None:
            self._show_experiment(self.experiment)
            return
        session = self.session
        status = self.message if self.message is not None else status_line(session)
        watched = self.watched
        if self.message is None and watched is not None and watched.alive and self.busy:
            cpu = fmt_percent(watched.cpu_percent)
            status = status.copy()
            status.append(
                f"  pid {watched.pid} · CPU {cpu} · RSS {fmt_bytes(watched.rss_bytes)}",
                style="not bold",
            )
        self.query_one("#runner-status", Static).update(status)
        bar = self.query_one("#runner-progress", ProgressBar)
        text = self.query_one("#runner-progress-text", Static)
        run = session.current if session is not None else None
        self.query_one("#runner-progress-row").display = session is not None
        if run is not None and not run.ended:
            progress = run.progress
            epochs = run.started.epochs if run.started is not None else run.config.epochs
            if progress is not None:
                bar.update(total=progress.steps_per_epoch, progress=progress.step)
            else:
                bar.update(total=None, progress=0)
            text.update(progress_line(progress, epochs, run.device))
        else:  # ended: the bar stays where the run got to (a stopped run short of 100%)
            bar.update(total=100, progress=round(100 * run.share_done) if run is not None else 0)
            text.update(ended_line(run) if run is not None else "")
        detail = self.query_one("#runner-detail", Static)
        failed = next((r for r in session.runs if r.error), None) if session else None
        detail.display = bool(self.show_detail and failed)
        if failed is not None and failed.error is not None and self.show_detail:
            detail.update(error_detail(failed.error))
        width = max(self.query_one("#runner-scroll").size.width - 1, 30)
        body = scaling_body if session is not None and session.scaling else session_body
        self.query_one("#runner-body", Static).update(body(session, width))  # type: ignore[arg-type]

    def _enable_buttons(self) -> None:
        busy = self.busy
        for name, disabled in (
            ("#runner-start", busy),
            ("#runner-compare", busy),
            ("#runner-run-experiment", busy),
            ("#runner-stop", not busy),
        ):
            self.query_one(name, Button).disabled = disabled

    def _show_experiment(self, result: ExperimentResult) -> None:
        from gputui.ui.runner_render import error_detail, experiment_body, experiment_status

        running = self.experiment_process is not None
        status = self.message or experiment_status(result, running)
        self.query_one("#runner-status", Static).update(status)
        self.query_one("#runner-progress-row").display = running
        bar = self.query_one("#runner-progress", ProgressBar)
        bar.update(total=None)
        self.query_one("#runner-progress-text", Static).update(self.experiment_progress)
        detail = self.query_one("#runner-detail", Static)
        detail.display = bool(self.show_detail and result.error)
        if result.error is not None and self.show_detail:
            detail.update(error_detail(result.error))
        width = max(self.query_one("#runner-scroll").size.width - 1, 30)
        self.query_one("#runner-body", Static).update(experiment_body(result, width))

    @property
    def trainer_pid(self) -> int | None:
        """The running trainer's process id, if one runs."""
        run = self.session.current if self.session is not None else None
        if self.trainer is None or run is None:
            return None
        return run.started.pid if run.started is not None else self.trainer.pid
