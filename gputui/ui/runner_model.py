"""What the runner pane knows about its runs: a pure model fed trainer events, no Textual.

A *session* is what one press of start (one run) or compare (two runs, one after the
other) asks for. Each run keeps the events that matter to the pane; the speedup of a
comparison is computed from the epochs as they arrive, so it forms while the second
run trains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from gputui.training.config import RunConfig
from gputui.training.events import (
    DataReady,
    EpochFinished,
    Error,
    Event,
    Finished,
    Memory,
    Note,
    Placement,
    Progress,
    RunStarted,
)


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
    """One trainer run as the pane saw it."""

    config: RunConfig
    """What was asked for."""
    started: RunStarted | None = None
    """The trainer's RunStarted (device, dataset, pid...)."""
    data_ready: DataReady | None = None
    """Where the data went, and how long it took."""
    progress: Progress | None = None
    """The latest progress of the epoch in flight."""
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

    @property
    def device(self) -> str:
        """The device the run trains on (the trainer's canonical name once known)."""
        return self.started.device if self.started is not None else self.config.device

    @property
    def ended(self) -> bool:
        """Whether the run's last event arrived."""
        return self.finished is not None or self.error is not None

    @property
    def steady_epochs(self) -> list[EpochFinished]:
        """Finished epochs after the warm-up epoch."""
        return [epoch for epoch in self.epochs if not epoch.warmup]

    @property
    def steady_seconds(self) -> float | None:
        """Mean seconds of the steady epochs; ``None`` before the first one."""
        steady = self.steady_epochs
        return sum(e.seconds for e in steady) / len(steady) if steady else None

    @property
    def steady_images_per_second(self) -> float | None:
        """Images per second over the steady epochs; ``None`` before the first one."""
        steady = self.steady_epochs
        seconds = sum(e.seconds for e in steady)
        return sum(e.images for e in steady) / seconds if steady and seconds > 0 else None

    @property
    def best_images_per_second(self) -> float | None:
        """Steady throughput, else the warm-up epoch's, else the live epoch's so far."""
        steady = self.steady_images_per_second
        if steady is not None:
            return steady
        if self.epochs:
            return self.epochs[-1].images_per_second
        return self.progress.images_per_second if self.progress is not None else None

    def absorb(self, event: Event) -> None:
        """Take in one trainer event."""
        if isinstance(event, RunStarted):
            self.started = event
            if event.dataset_note:  # not the dataset asked for: say why (a failed download)
                self.notes.append(event.dataset_note)
        elif isinstance(event, DataReady):
            self.data_ready = event
        elif isinstance(event, Progress):
            self.progress = event
        elif isinstance(event, EpochFinished):
            self.epochs.append(event)
            self.progress = None
        elif isinstance(event, Placement):
            self.placement = event
        elif isinstance(event, Memory):
            self.memory = event
        elif isinstance(event, Note):
            self.notes.append(event.message)
        elif isinstance(event, Finished):
            self.finished = event
            self.progress = None
        elif isinstance(event, Error):
            self.error = event
            self.progress = None


@dataclass(frozen=True)
class Speedup:
    """How much faster the second run of a comparison trains than the first."""

    baseline: str
    """The first run's device."""
    other: str
    """The second run's device."""
    per_epoch: tuple[tuple[int, float], ...]
    """(epoch, baseline seconds / other seconds) for each epoch both runs finished."""
    steady: float | None
    """Ratio of mean steady-epoch seconds (warm-up excluded); ``None`` until both have one."""
    warmup: float | None
    """Ratio of the warm-up epochs' seconds."""
    so_far: float | None
    """While the second run is in an epoch: its throughput so far over the baseline's."""


def speedup(baseline: RunRecord, other: RunRecord) -> Speedup:
    """The speedup of ``other`` over ``baseline`` from what has arrived so far."""
    theirs = {epoch.epoch: epoch for epoch in other.epochs}
    per_epoch = tuple(
        (mine.epoch, mine.seconds / theirs[mine.epoch].seconds)
        for mine in baseline.epochs
        if mine.epoch in theirs and theirs[mine.epoch].seconds > 0
    )
    base_steady, other_steady = baseline.steady_seconds, other.steady_seconds
    steady = base_steady / other_steady if base_steady and other_steady else None
    warm_base = next((e for e in baseline.epochs if e.warmup), None)
    warm_other = next((e for e in other.epochs if e.warmup), None)
    warmup = (
        warm_base.seconds / warm_other.seconds
        if warm_base is not None and warm_other is not None and warm_other.seconds > 0
        else None
    )
    so_far = None
    base_ips = baseline.best_images_per_second
    if other.progress is not None and base_ips:
        so_far = other.progress.images_per_second / base_ips
    return Speedup(baseline.device, other.device, per_epoch, steady, warmup, so_far)


@dataclass
class Session:
    """One start (one run) or compare (two runs in turn) of the runner pane."""

    configs: list[RunConfig]
    """Every run the session asks for, in order."""
    runs: list[RunRecord] = field(default_factory=list)
    """The runs started so far, in order."""
    stopped: bool = False
    """Whether the user stopped the session."""

    @property
    def compare(self) -> bool:
        """Whether this session compares two runs."""
        return len(self.configs) > 1

    @property
    def current(self) -> RunRecord | None:
        """The run started last."""
        return self.runs[-1] if self.runs else None

    @property
    def next_config(self) -> RunConfig | None:
        """The config of the next run to start, or ``None`` when the session is done."""
        if self.stopped or any(run.error is not None for run in self.runs):
            return None
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
        if any(run.error is not None for run in self.runs):
            return Phase.FAILED
        current = self.current
        if current is not None and not current.ended:
            return Phase.RUNNING
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
