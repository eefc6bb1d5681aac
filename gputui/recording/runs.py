"""The runner pane's part of a recording (``gputui --record``): what the pane received, in the
order it did, so that a replay drives the pane through the same steps and shows the same runs.

Four things happen to the pane: a job starts (the runs' configs, each as the line sent to its
child), a drain brings the child's events (each as the line the child sent,
:meth:`~gputui.jobs.events.Event.to_json`), the trainer process is read (its CPU use and
memory, on the status line), and the user asks for a stop. Each is an entry of a frame's
``runner`` list (:func:`~gputui.recording.frames.runner_entry`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gputui.device import plain
from gputui.jobs.config import ConfigError, ExperimentConfig, JobConfig, RunConfig, ScaleConfig
from gputui.jobs.events import Event, parse_event
from gputui.jobs.results import Session, run_names
from gputui.jobs.scale.plan import SCALINGS
from gputui.recording.frames import runner_entry
from gputui.telemetry.snapshot import json_number
from gputui.telemetry.watched import ProcessReading

CONFIG_TYPES: dict[str, type[JobConfig]] = {
    "training": RunConfig,
    "scaling": ScaleConfig,
    "experiment": ExperimentConfig,
}
"""The kinds of job the pane starts (its views' names), with the config of each run."""


@dataclass(frozen=True, slots=True)
class JobBegun:
    """The pane started a job: a training session, a scaling session or an experiment."""

    kind: str
    """``training``, ``scaling`` or ``experiment`` (a key of :data:`CONFIG_TYPES`)."""
    configs: tuple[JobConfig, ...]
    """Each run's config, in order (one for an experiment)."""
    scaling: str | None = None
    """``weak`` or ``strong`` for a scaling session."""


@dataclass(frozen=True, slots=True)
class EventsDrained:
    """One drain of the running child: its events, in order."""

    events: tuple[Event, ...]


@dataclass(frozen=True, slots=True)
class StopAsked:
    """The user asked the running job to stop."""


@dataclass(frozen=True, slots=True)
class DevicesAsked:
    """The pane asked torch which devices it can use, before its first job; or (``answered``)
    torch's answer came, whatever came of it (a job, an error, a stop)."""

    answered: bool = False


@dataclass(frozen=True, slots=True)
class TrainerWatched:
    """The trainer process was read."""

    reading: ProcessReading


RunnerEntry = JobBegun | EventsDrained | TrainerWatched | StopAsked | DevicesAsked
"""Something that happened to the runner pane."""


def entry_as_dict(t: float, entry: RunnerEntry) -> dict[str, object]:
    """``entry`` at ``t`` seconds into the recording, as a frame holds it."""
    if isinstance(entry, JobBegun):
        configs = [config.to_json() for config in entry.configs]
        return runner_entry(t, start=entry.kind, configs=configs, scaling=entry.scaling)
    if isinstance(entry, EventsDrained):
        return runner_entry(t, events=[event.to_json() for event in entry.events])
    if isinstance(entry, TrainerWatched):
        return runner_entry(t, watched=plain(entry.reading))
    if isinstance(entry, DevicesAsked):
        return runner_entry(t, asked="answered" if entry.answered else "asking")
    return runner_entry(t, stop=True)


def entry_from_dict(value: Mapping[str, Any]) -> RunnerEntry | None:
    """The entry a frame holds; ``None`` for one this gputui cannot read (a newer kind, a
    config it does not know). An event line the protocol skips is left out, as the live
    pane never saw it."""
    if "events" in value:
        lines = value["events"]
        if not isinstance(lines, list):
            return None
        events = (parse_event(line) for line in lines if isinstance(line, str))
        return EventsDrained(tuple(event for event in events if event is not None))
    if "watched" in value:
        return _watched(value["watched"])
    if value.get("stop") is True:
        return StopAsked()
    if value.get("asked") in ("asking", "answered"):
        return DevicesAsked(value["asked"] == "answered")
    kind, configs, scaling = value.get("start"), value.get("configs"), value.get("scaling")
    if not isinstance(kind, str) or kind not in CONFIG_TYPES or not isinstance(configs, list):
        return None
    if scaling is not None and scaling not in SCALINGS:
        return None
    try:
        read = tuple(CONFIG_TYPES[kind].from_json(text) for text in configs)
    except (ConfigError, TypeError):  # TypeError: a config that is not text
        return None
    return JobBegun(kind, read, scaling) if read else None


def _watched(value: Any) -> TrainerWatched | None:
    if not isinstance(value, dict):
        return None
    pid, alive = value.get("pid"), value.get("alive")
    cpu, rss, threads = (value.get(key) for key in ("cpu_percent", "rss_bytes", "threads"))
    if json_number(pid) is None or type(pid) is not int or type(alive) is not bool:
        return None
    if not (cpu is None or json_number(cpu) is not None) or not all(
        n is None or (type(n) is int and json_number(n) is not None) for n in (rss, threads)
    ):
        return None  # (10**400 would overflow where it is shown)
    return TrainerWatched(ProcessReading(pid, alive, cpu, rss, threads))


def entries_of(frames: Sequence[Sequence[Mapping[str, Any]]]) -> list[RunnerEntry]:
    """The entries of ``frames``' runner lists, in order, those it cannot read left out."""
    read = (entry_from_dict(value) for frame in frames for value in frame)
    return [entry for entry in read if entry is not None]


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One training run the runner pane showed, as it ended (or stood when the recording did)."""

    job: int
    """Which job of the recording it belongs to, from 1 (a comparison's two runs share one)."""
    kind: str
    """``training`` or ``scaling``."""
    name: str
    """Its device, marked where two runs of the job read alike (``cpu (baseline)``)."""
    precision: str
    """``fp32``, ``tf32`` or ``bf16``."""
    epochs: int
    """Epochs it finished."""
    images_per_second: float | None
    """Its steady throughput (the warm-up rule), else its last epoch's; ``None`` before any."""
    speedup: float | None
    """A comparison's second run: how much faster it trained than the first (steady)."""
    status: str
    """``ok``, ``stopped`` (or cut off by the recording's end) or ``error``."""


def summarise_runs(entries: Iterable[RunnerEntry]) -> tuple[RunSummary, ...]:
    """The training runs ``entries`` show, job by job, each run as the pane folded its events
    (an experiment's rows are not runs: left out)."""
    sessions: list[Session] = []
    session: Session | None = None
    for entry in entries:
        if isinstance(entry, JobBegun):
            session = None
            if entry.kind != "experiment":
                runs = [config for config in entry.configs if isinstance(config, RunConfig)]
                session = Session(runs, scaling=entry.scaling)
                sessions.append(session)
                _begin_next(session)
        elif session is None or session.current is None:
            continue
        elif isinstance(entry, EventsDrained):  # one drain: one run's events, as in the pane
            run = session.current
            for event in entry.events:
                run.absorb(event)
            if run.ended:
                if run.finished is not None and run.finished.stopped:
                    session.stopped = True
                _begin_next(session)
        elif isinstance(entry, StopAsked):
            session.stopped = True
    return tuple(
        _run_summary(job, session, index, name)
        for job, session in enumerate(sessions, 1)
        for index, name in enumerate(run_names(session.runs))
    )


def _begin_next(session: Session) -> None:
    config = session.next_config
    if config is not None:
        session.begin(config)


def _run_summary(job: int, session: Session, index: int, name: str) -> RunSummary:
    run = session.runs[index]
    speed = session.speedup if index == 1 else None
    return RunSummary(
        job=job,
        kind="scaling" if session.scaling is not None else "training",
        name=name,
        precision=run.config.precision,
        epochs=len(run.epochs),
        images_per_second=run.best_images_per_second if run.epochs else None,
        speedup=speed.steady if speed is not None else None,
        status=run.status,
    )
