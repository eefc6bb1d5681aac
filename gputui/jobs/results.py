"""The one results model: what a job's events add up to, for the commands and the UI alike.

A training run is a :class:`RunRecord`, a runner-pane session a :class:`Session`, an
experiment an :class:`ExperimentResult` (its JSON is shown in the README). Every figure of
a run follows the warm-up rule of :func:`steady_figures`. Torch-free and Textual-free.

Over 600 lines: a run, a session, an experiment and their shared figures are one model that
bench, experiment, scale, replay and the pane all read; split, each would need the others.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from gputui.device import Device, plain
from gputui.jobs.conclusions import (
    NOISE,
    PaceVerdict,
    pace_verdict,
    pipelines_summary,
    sync_stall_summary,
)
from gputui.jobs.config import RunConfig
from gputui.jobs.events import (
    GRAPHS_OFF,
    BatchSweepRow,
    DataReady,
    DeviceFailed,
    EpochFinished,
    Error,
    Event,
    ExperimentConcluded,
    ExperimentDevice,
    ExperimentStarted,
    Finished,
    Memory,
    Note,
    PipelineRow,
    Placement,
    Progress,
    RanksStarted,
    RecordingStopped,
    Row,
    RunStarted,
    StepTimes,
    SyncStallRow,
    WorldJoined,
)


@dataclass(frozen=True)
class EpochFigures:
    """A run's steady state: what its epochs after the warm-up took, on average."""

    seconds: float
    """Mean seconds of the epochs counted."""
    images_per_second: float | None
    """Their images over their seconds."""
    includes_warmup: bool
    """True when only the warm-up epoch ran, so it is what was counted."""


def steady_figures(epochs: Sequence[EpochFinished], *, ended: bool) -> EpochFigures | None:
    """The warm-up rule, the one every report, speedup and view of a run follows.

    Epoch 1 is the warm-up (cuDNN autotune, ``torch.compile``, the allocator growing), so it
    is shown apart, and a run's figures are the mean of the epochs after it. A run that
    ended with only its warm-up epoch falls back to that one, marked ``includes_warmup``
    (and a speedup then compares warm-up with warm-up). While the run goes on (not
    ``ended``), ``None`` until an epoch after the warm-up finished.
    """
    counted = steady_epochs(epochs, ended=ended)
    if not counted:
        return None
    seconds = sum(epoch.seconds for epoch in counted)
    images = sum(epoch.images for epoch in counted)
    return EpochFigures(
        seconds=seconds / len(counted),
        images_per_second=images / seconds if seconds > 0 else None,
        includes_warmup=counted[0].warmup,
    )


def steady_epochs(epochs: Sequence[EpochFinished], *, ended: bool) -> list[EpochFinished]:
    """The epochs :func:`steady_figures` counts; empty until there are any."""
    counted = [epoch for epoch in epochs if not epoch.warmup]
    return counted or (list(epochs[:1]) if ended else [])


def median_spread(values: Sequence[float]) -> tuple[float, float]:
    """The median of ``values`` and their spread (largest minus smallest)."""
    return statistics.median(values), max(values) - min(values)


@dataclass(frozen=True)
class Pace:
    """A run's steady epochs (:func:`steady_epochs`) by the wall clock and the device's own,
    each the median epoch with its spread, and what the device made of them."""

    epochs: int
    """Epochs counted."""
    wall_s: float
    """The median epoch's seconds by the host's clock, the device synchronized."""
    wall_spread_s: float
    """The slowest epoch's seconds minus the fastest's."""
    device_clock: str
    """``events``, ``wall`` (the CPU: the host is the device) or empty (none)."""
    device_s: float | None
    """The same steps' median seconds between the device's events; ``None`` without them."""
    device_spread_s: float | None
    """Their slowest epoch's seconds minus the fastest's."""
    busy_share: float | None
    """The share of its steps' time the device ran kernels: a profiled sample's (CUDA); 1 on
    the CPU, where busy = wall; ``None`` where unknown."""
    flops_per_second: float | None
    """FLOPs an image (counted) times the steady images/s (measured)."""
    images_per_joule: float | None
    """Steady images over the joules the GPU's energy counter rose by; ``None`` without one."""
    verdict: PaceVerdict | None
    """What set the pace (:func:`~gputui.jobs.conclusions.pace_verdict`)."""


class Phase(str, Enum):
    """Where the pane's session is."""

    IDLE = "idle"
    """Nothing has run yet."""
    RUNNING = "running"
    """A trainer is running (or about to start)."""
    FINISHED = "finished"
    """Every run of the session ended without error."""
    STOPPED = "stopped"
    """The user stopped the session."""
    FAILED = "failed"
    """A run ended with an error."""


@dataclass
class RunRecord:
    """One training run, as its events told it."""

    config: RunConfig
    """What was asked for."""
    started: RunStarted | None = None
    """The trainer's RunStarted (device, dataset, pid...)."""
    data_ready: DataReady | None = None
    """Where the data went, and how long it took."""
    progress: Progress | None = None
    """The latest progress of the epoch in flight."""
    last_progress: Progress | None = None
    """The latest progress of any epoch, kept once the run ended: where a stopped run was."""
    epochs: list[EpochFinished] = field(default_factory=list)
    """Finished epochs, in order."""
    placement: Placement | None = None
    """Where the parameters, optimizer state and batches live."""
    memory: Memory | None = None
    """The trainer's latest memory reading."""
    notes: list[str] = field(default_factory=list)
    """Notes from the trainer."""
    finished: Finished | None = None
    """The run's Finished, once it ended without error."""
    error: Error | None = None
    """The run's Error, once it failed."""
    world: WorldJoined | None = None
    """The distributed job the run is (rank 0 of), when it is one."""
    step_times: StepTimes | None = None
    """A distributed run's steps timed with and without the gradients' all-reduce."""
    rank_pids: tuple[int, ...] = ()
    """A scaling run's rank processes, rank 0 first (empty for a run of one process)."""
    recording_stopped: RecordingStopped | None = None
    """Why the run folder was removed part-way (a full disk), if it was."""

    @property
    def device(self) -> Device:
        """The device the run trains on (indexed, as the trainer names it, once known)."""
        return self.started.device if self.started is not None else self.config.device

    @property
    def ended(self) -> bool:
        """Whether the run's last event arrived."""
        return self.finished is not None or self.error is not None

    @property
    def status(self) -> str:
        """``ok``, ``stopped`` or ``error`` (a run that never ended counts as stopped)."""
        if self.error is not None:
            return "error"
        return "stopped" if self.finished is None or self.finished.stopped else "ok"

    @property
    def steady(self) -> EpochFigures | None:
        """The steady state by :func:`steady_figures`' rule; ``None`` until it is known."""
        return steady_figures(self.epochs, ended=self.ended)

    @property
    def pace(self) -> Pace | None:
        """The steady epochs by both clocks, and the verdict; ``None`` until known."""
        counted = steady_epochs(self.epochs, ended=self.ended)
        if not counted:
            return None
        clock = counted[-1].device_clock
        timed = [e.device_seconds for e in counted if e.device_seconds is not None]
        joules = sum(e.energy_joules or 0.0 for e in counted)
        metered = all(e.energy_joules is not None for e in counted) and joules > 0
        busy = 1.0 if clock == "wall" else self.finished.busy_share if self.finished else None
        ips = self.steady.images_per_second if self.steady else None
        flops = self.started.flops_per_image if self.started else None
        pipeline = self.started.pipeline if self.started else self.config.pipeline
        wall_s, wall_spread_s = median_spread([e.seconds for e in counted])
        device_s, device_spread_s = (
            median_spread(timed) if len(timed) == len(counted) else (None, None)
        )
        return Pace(
            len(counted),
            wall_s,
            wall_spread_s,
            clock,
            device_s,
            device_spread_s,
            busy,
            flops * ips if flops and ips else None,
            sum(e.images for e in counted) / joules if metered else None,
            pace_verdict(self.device, busy, pipeline, graphed=self.graphed),
        )

    @property
    def graphed(self) -> bool:
        """Whether the run's step was replayed from a CUDA graph: asked, and no note of a
        capture that failed."""
        asked = self.started is not None and self.started.graphs
        return asked and not any(note.startswith(GRAPHS_OFF) for note in self.notes)

    @property
    def run_dir(self) -> str | None:
        """The run's folder, once the trainer made one (a run killed mid-way has one too);
        ``None`` once it was removed (a full disk)."""
        if self.recording_stopped is not None:
            return None
        if self.finished is not None and self.finished.run_dir:
            return self.finished.run_dir
        return self.started.run_dir if self.started is not None else None

    @property
    def best_images_per_second(self) -> float | None:
        """Steady throughput, else the last epoch's, else the live epoch's so far."""
        steady = self.steady
        if steady is not None and steady.images_per_second is not None:
            return steady.images_per_second
        if self.epochs:
            return self.epochs[-1].images_per_second
        return self.progress.images_per_second if self.progress is not None else None

    @property
    def share_done(self) -> float:
        """How much of the planned training the run did, 0 to 1: its finished epochs, plus
        the part of the next one it last reported (where a stopped run stopped, to within
        the trainer's progress interval)."""
        planned = self.started.epochs if self.started is not None else self.config.epochs
        done = float(len(self.epochs))
        last = self.last_progress
        if last is not None and last.epoch > len(self.epochs) and last.steps_per_epoch:
            done += last.step / last.steps_per_epoch
        return min(done / planned, 1.0) if planned > 0 else 0.0

    def absorb(self, event: Event) -> None:
        """Take in one trainer event."""
        if isinstance(event, RunStarted):
            self.started = event
        elif isinstance(event, DataReady):
            self.data_ready = event
        elif isinstance(event, Progress):
            self.progress = self.last_progress = event
        elif isinstance(event, EpochFinished):
            self.epochs.append(event)
            self.progress = None
        elif isinstance(event, Placement):
            self.placement = event
        elif isinstance(event, WorldJoined):
            self.world = event
        elif isinstance(event, StepTimes):
            self.step_times = event
        elif isinstance(event, RanksStarted):
            self.rank_pids = event.pids
        elif isinstance(event, Memory):
            self.memory = event
        elif isinstance(event, Note):
            if isinstance(event, RecordingStopped):
                self.recording_stopped = event
            self.notes.append(event.message)
        elif isinstance(event, Finished):
            self.finished = event
            self.progress = None
        elif isinstance(event, Error):
            self.error = event
            self.progress = None


def _unmarked(run: RunRecord, with_precision: bool) -> str:
    return f"{run.device} {run.config.precision}" if with_precision else str(run.device)


def run_marks(runs: Sequence[RunRecord], *, with_precision: bool = False) -> list[str]:
    """What tells apart runs that a report would name alike (by device, and by precision
    with ``with_precision``): `` (baseline)`` after the first run, the one every speedup is
    over, when a later run has its name; `` (run N)`` after later runs that share one."""
    names = [_unmarked(run, with_precision) for run in runs]
    later = names[1:]
    marks = []
    for index, name in enumerate(names):
        if index == 0:
            marks.append(" (baseline)" if name in later else "")
        else:
            marks.append(f" (run {index + 1})" if later.count(name) > 1 else "")
    return marks


def run_names(runs: Sequence[RunRecord], *, with_precision: bool = False) -> list[str]:
    """Each run's name in a report: its device (and precision), marked by :func:`run_marks`
    where two would read alike (the CPU compared with itself: ``cpu (baseline)``, ``cpu``)."""
    marks = run_marks(runs, with_precision=with_precision)
    return [_unmarked(run, with_precision) + mark for run, mark in zip(runs, marks, strict=True)]


@dataclass(frozen=True)
class Speedup:
    """How much faster the second run of a comparison trains than the first."""

    baseline: str
    """The first run's name (:func:`run_names`): its device, ``(baseline)`` after it when
    both ran on one."""
    other: str
    """The second run's name: its device."""
    per_epoch: tuple[tuple[int, float], ...]
    """(epoch, baseline seconds / other seconds) for each epoch both runs finished."""
    steady: float | None
    """Ratio of the steady epoch seconds (:func:`steady_figures`); ``None`` until both
    have them."""
    steady_includes_warmup: bool
    """True when either side's steady figure is its warm-up epoch (only that one ran)."""
    warmup: float | None
    """Ratio of the warm-up epochs' seconds."""
    so_far: float | None
    """While the second run is in an epoch: its throughput so far over the baseline's."""
    ended: bool = False
    """Both runs have ended: a figure still missing (``steady`` is ``None``) never comes,
    because a run ended (stopped or failed) before its first epoch did."""
    warning: str | None = None
    """Why the figure is no speedup, where both runs trained on one device in one precision
    (the CPU against itself): it measures :data:`~gputui.jobs.conclusions.NOISE`."""
    verdict: str | None = None
    """What set the second run's pace (:attr:`RunRecord.pace`), once known."""


def speedup(baseline: RunRecord, other: RunRecord) -> Speedup:
    """The speedup of ``other`` over ``baseline`` from what has arrived so far."""
    theirs = {epoch.epoch: epoch for epoch in other.epochs}
    per_epoch = tuple(
        (mine.epoch, mine.seconds / theirs[mine.epoch].seconds)
        for mine in baseline.epochs
        if mine.epoch in theirs and theirs[mine.epoch].seconds > 0
    )
    warm_base = next((e for e in baseline.epochs if e.warmup), None)
    warm_other = next((e for e in other.epochs if e.warmup), None)
    warmup = (
        warm_base.seconds / warm_other.seconds
        if warm_base is not None and warm_other is not None and warm_other.seconds > 0
        else None
    )
    base_steady, other_steady = baseline.steady, other.steady
    includes_warmup = any(s is not None and s.includes_warmup for s in (base_steady, other_steady))
    if base_steady is None or other_steady is None or not other_steady.seconds > 0:
        steady = None
    elif includes_warmup:  # like with like: one side has only its warm-up epoch
        steady = warmup
    else:
        steady = base_steady.seconds / other_steady.seconds
    so_far = None
    base_ips = baseline.best_images_per_second
    if other.progress is not None and base_ips:
        so_far = other.progress.images_per_second / base_ips
    names = run_names([baseline, other])
    warning = None
    if (baseline.device, baseline.config.precision) == (other.device, other.config.precision):
        warning = f"{names[1]} compared with itself: its speedup measures {NOISE}, not hardware"
    pace = other.pace
    return Speedup(
        names[0],
        names[1],
        per_epoch,
        steady,
        includes_warmup,
        warmup,
        so_far,
        ended=baseline.ended and other.ended,
        warning=warning,
        verdict=pace.verdict.sentence if pace and pace.verdict else None,
    )


def bf16_gain(runs: Sequence[RunRecord], run: RunRecord) -> float | None:
    """How much faster bf16 ``run`` trained than the fp32 run on its device among ``runs``
    (:func:`speedup`'s steady rule); ``None`` when ``run`` is not bf16, no fp32 run on its
    device finished, or either has no figures yet."""
    if run.config.precision != "bf16":
        return None
    fp32 = next(
        (
            other
            for other in runs
            if other.device == run.device
            and other.config.precision == "fp32"
            and other.error is None
        ),
        None,
    )
    return speedup(fp32, run).steady if fp32 is not None else None


@dataclass
class Session:
    """One start (one run), compare (two runs in turn) or scaling run (one run per world
    size, in turn: ``scaling`` says weak or strong) of the runner pane."""

    configs: list[RunConfig]
    """Every run the session asks for, in order."""
    runs: list[RunRecord] = field(default_factory=list)
    """The runs started so far, in order."""
    stopped: bool = False
    """Whether the user stopped the session."""
    scaling: str | None = None
    """``weak`` or ``strong`` for a scaling session (its configs are ``ScaleConfig``s)."""

    @property
    def compare(self) -> bool:
        """Whether this session compares two runs."""
        return len(self.configs) > 1 and self.scaling is None

    @property
    def current(self) -> RunRecord | None:
        """The run started last."""
        return self.runs[-1] if self.runs else None

    @property
    def next_config(self) -> RunConfig | None:
        """The config of the next run to start, or ``None`` when the session is done."""
        if self.stopped:
            return None
        if self.scaling is None and any(run.error is not None for run in self.runs):
            return None  # a scaling session goes on: the other world sizes still tell
        current = self.current
        if current is not None and not current.ended:
            return None
        return self.configs[len(self.runs)] if len(self.runs) < len(self.configs) else None

    def begin(self, config: RunConfig) -> RunRecord:
        """Record that the run of ``config`` is starting."""
        run = RunRecord(config)
        self.runs.append(run)
        return run

    @property
    def phase(self) -> Phase:
        """Where the session is."""
        current = self.current
        if current is not None and not current.ended:
            return Phase.RUNNING
        if self.scaling is not None and self.next_config is not None:
            return Phase.RUNNING  # between two world sizes
        if any(run.error is not None for run in self.runs):
            return Phase.FAILED
        if self.stopped or any(r.finished is not None and r.finished.stopped for r in self.runs):
            return Phase.STOPPED
        if len(self.runs) < len(self.configs):
            return Phase.RUNNING
        return Phase.FINISHED

    @property
    def speedup(self) -> Speedup | None:
        """The comparison's speedup so far; ``None`` for a single run or before the second."""
        if not self.compare or len(self.runs) < 2:
            return None
        return speedup(self.runs[0], self.runs[1])


def dataset_origin(source: str) -> str:
    """Where a job's data came from (``RunStarted.dataset_source``), in words."""
    return "generated locally" if source == "generated" else f"from {source}"


SCHEMA_FIELDS_SKIPPED = ("pid",)
"""``ExperimentStarted`` fields left out of ``settings`` (they differ every run)."""


@dataclass
class DeviceResult:
    """One device's part of an experiment."""

    device: Device
    """The device, indexed."""
    info: ExperimentDevice | None = None
    """The device's announcement (name, what the data phase is)."""
    rows: list[Row] = field(default_factory=list)
    """Rows in the order they were measured."""
    failure: DeviceFailed | None = None
    """Why the device stopped early, if it did."""

    def summary(self, experiment: str) -> dict[str, Any] | None:
        """The experiment's per-device figures (fields in the README); ``None`` if incomplete."""
        if experiment == "batch-sweep":
            ok = [r for r in self.rows if isinstance(r, BatchSweepRow) and r.images_per_second]
            if not ok:
                return None
            best = max(ok, key=lambda r: r.images_per_second or 0.0)
            return {
                "best_batch_size": best.batch_size,
                "best_images_per_second": best.images_per_second,
            }
        if experiment == "sync-stall":
            stall = sync_stall_summary([r for r in self.rows if isinstance(r, SyncStallRow)])
            return dataclasses.asdict(stall) if stall is not None else None
        pipes = pipelines_summary([r for r in self.rows if isinstance(r, PipelineRow)])
        return dataclasses.asdict(pipes) if pipes is not None else None


@dataclass
class ExperimentResult:
    """Everything an experiment's stream said, gathered per device."""

    experiment: str
    """The experiment asked for."""
    started: ExperimentStarted | None = None
    """The start event: devices, data, steps."""
    devices: dict[Device, DeviceResult] = field(default_factory=dict)
    """Each device's result, in the order they ran."""
    conclusion: str | None = None
    """The one-sentence result, once the experiment finished."""
    finished: Finished | None = None
    """The last event, when the run ended without error."""
    error: Error | None = None
    """The last event, when the run failed."""
    notes: list[str] = field(default_factory=list)
    """Anything else the child said, one line each."""

    def absorb(self, event: Event) -> Row | None:
        """Keep what the result needs from ``event``; returns it when it is a row."""
        if isinstance(event, BatchSweepRow | SyncStallRow | PipelineRow):
            self._device(event.device).rows.append(event)
            return event
        if isinstance(event, ExperimentStarted):
            self.started = event
        elif isinstance(event, ExperimentDevice):
            self._device(event.device).info = event
        elif isinstance(event, DeviceFailed):
            self._device(event.device).failure = event
        elif isinstance(event, ExperimentConcluded):
            self.conclusion = event.conclusion
        elif isinstance(event, Finished):
            self.finished = event
        elif isinstance(event, Error):
            self.error = event
        elif isinstance(event, Note):
            self.notes.append(event.message)
        return None

    @property
    def ended(self) -> bool:
        """Whether the experiment's last event arrived (until then it is running)."""
        return self.finished is not None or self.error is not None

    @property
    def status(self) -> str:
        """``ok``, ``stopped``, ``error`` (a failed device makes the whole run ``error``) or
        ``empty``: it finished, but not one row has figures (every batch ran out of memory, say)."""
        if self.error is not None or any(d.failure for d in self.devices.values()):
            return "error"
        if self.finished is None or self.finished.stopped:
            return "stopped"
        measured = any(row.error is None for d in self.devices.values() for row in d.rows)
        return "ok" if measured else "empty"

    def device_status(self, device: Device) -> str:
        """``ok``, ``error`` or ``stopped`` (the device in hand when the run stopped, and
        those it never reached)."""
        result = self.devices.get(device)
        if result is not None and result.failure is not None:
            return "error"
        if self.finished is not None and not self.finished.stopped:
            return "ok"
        if self.error is not None and result is not None:  # the devices before the error
            return "ok"
        in_hand = next(reversed(self.devices), None)  # they run in turn: the last one began
        return "ok" if result is not None and device != in_hand else "stopped"

    @property
    def unreached(self) -> list[Device]:
        """The devices the experiment was to run on but never began (it stopped first)."""
        if self.status != "stopped" or self.started is None:
            return []
        planned = self.started.devices
        return [device for device in planned if device not in self.devices]

    def to_json_dict(self) -> dict[str, Any]:
        """The result as the JSON object the README shows (a test holds the two together)."""
        settings = None
        if self.started is not None:
            settings = {
                key: list(value) if isinstance(value, tuple) else value
                for key, value in plain(self.started).items()
                if key not in {"experiment", *SCHEMA_FIELDS_SKIPPED}
            }
        error = None
        if self.error is not None:
            error = {key: getattr(self.error, key) for key in ("message", "kind", "detail")}
        return {
            "experiment": self.experiment,
            "status": self.status,
            "error": error,
            "settings": settings,
            "device_results": [
                {
                    "device": str(result.device),
                    "device_name": result.info.device_name if result.info else None,
                    "status": self.device_status(result.device),
                    "error": result.failure.message if result.failure else None,
                    "data_phase": result.info.data_phase if result.info else None,
                    "pinned": result.info.pinned if result.info else False,
                    "rows": [plain(row) for row in result.rows],
                    "summary": result.summary(self.experiment),
                }
                for result in [*self.devices.values(), *map(DeviceResult, self.unreached)]
            ],
            "conclusion": self.conclusion,
        }

    def _device(self, device: Device) -> DeviceResult:
        return self.devices.setdefault(device, DeviceResult(device))
