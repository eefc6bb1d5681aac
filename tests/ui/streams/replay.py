"""Replay the streams recorded from the real trainer (:mod:`.record`) into the runner pane.

Every line is read by the protocol's own parser, strictly: where the live parent skips a
line it cannot read (a newer engine's), a replay stops with :class:`RecordingError`, so a
protocol change breaks the recordings loudly instead of thinning them out in silence.

A replayed job hands out its whole stream (or, cut, the part up to a moment, the rest once
released) at its first drain: no real time passes, so a snapshot of a replay is the same
every time. The pane must ask for exactly the configs
that were recorded (:mod:`.scenarios`), or the replay refuses.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from gputui.jobs.config import ExperimentConfig, RunConfig
from gputui.jobs.devices import DeviceInventory
from gputui.jobs.events import (
    EVENT_TYPES,
    SCHEMA_VERSION,
    TERMINAL_TYPES,
    DevicesListed,
    Event,
    ExperimentStarted,
    Progress,
    RunStarted,
    parse_event,
)
from gputui.jobs.runner import RunnerSetup
from tests.ui.streams.scenarios import (
    BY_NAME,
    DEVICES,
    EXPERIMENT_BUDGET_S,
    RECORDED,
    RECORDED_CORES,
    Scenario,
)

FOLDER = Path(__file__).resolve().parent
"""Where the recordings live."""
RERECORD = "re-record with `python -m tests.ui.streams.record`"


class RecordingError(Exception):
    """A recording the current protocol cannot read, or a replay the pane does not match."""


def load(name: str, folder: Path = FOLDER) -> list[Event]:
    """Every event of recording ``name``, in order.

    Raises:
        RecordingError: naming the file, the line and what is wrong with it.
    """
    path = folder / f"{name}.jsonl"
    lines = path.read_text().splitlines()
    return [_parse(line, f"{path.name}:{number}") for number, line in enumerate(lines, 1)]


def _parse(line: str, where: str) -> Event:
    """One recorded line, read by the protocol's parser; why not, when it cannot be."""
    event = parse_event(line)
    if event is None:
        raise RecordingError(f"{where}: {_unreadable(line)}; {RERECORD}")
    version = json.loads(line).get("v")
    if version != SCHEMA_VERSION:
        raise RecordingError(
            f"{where}: recorded with protocol version {version!r}, this is {SCHEMA_VERSION}; "
            f"{RERECORD}"
        )
    return event


def _unreadable(line: str) -> str:
    """Why :func:`parse_event` skipped ``line`` (it only logs it)."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return "not a line of JSON"
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        return "not an event (no type)"
    if data["type"] not in EVENT_TYPES:
        return f"unknown event type {data['type']!r} (gputui/jobs/events.py does not define it)"
    return f"a {data['type']!r} event the protocol cannot build (a field missing or renamed?)"


def streams(name: str, folder: Path = FOLDER) -> list[list[Event]]:
    """Recording ``name`` cut into its jobs' streams, each ending with its last event.

    Raises:
        RecordingError: when the recording does not end with a job's last event.
    """
    jobs: list[list[Event]] = [[]]
    for event in load(name, folder):
        jobs[-1].append(event)
        if isinstance(event, TERMINAL_TYPES):
            jobs.append([])
    if jobs[-1]:
        raise RecordingError(f"{name}.jsonl ends part-way through a job; {RERECORD}")
    return jobs[:-1]


def stream(name: str) -> list[Event]:
    """The one job's stream of a single-job recording."""
    (only,) = streams(name)
    return only


def devices() -> DevicesListed:
    """This machine's device listing, as recorded."""
    (listed,) = load(DEVICES)
    assert isinstance(listed, DevicesListed), listed
    return listed


RECORDED_TORCH = DeviceInventory(
    torch_version="2.13.0+cpu",
    cuda_built=False,
    cuda_version=None,
    cuda_names=(),
    mps_built=False,
    mps_available=False,
    system="Linux",
    cpu_name="CPU",
)
"""The torch the recordings were made with, as its files say (a CPU build, on Linux)."""


def in_flight(events: Sequence[Event], epoch: int, step: int) -> list[Event]:
    """``events`` up to the progress read at ``step`` of ``epoch``: the run as it stood then.

    Raises:
        RecordingError: when the stream has no such read.
    """
    for index, event in enumerate(events):
        if isinstance(event, Progress) and (event.epoch, event.step) == (epoch, step):
            return list(events[: index + 1])
    raise RecordingError(f"no progress read at step {step} of epoch {epoch} in the recording")


def before_epoch(events: Sequence[Event], epoch: int) -> list[Event]:
    """``events`` before the first progress read of ``epoch``: the run as it stood then."""
    for index, event in enumerate(events):
        if isinstance(event, Progress) and event.epoch == epoch:
            return list(events[:index])
    raise RecordingError(f"no progress read in epoch {epoch} in the recording")


class ReplayedJob:
    """A trainer or experiment that hands out a recorded stream at its first drain."""

    def __init__(
        self, events: Sequence[Event], held: Sequence[Event] = (), on_stop: Sequence[Event] = ()
    ) -> None:
        self._events = list(events)
        self._held = list(held)
        self._on_stop = list(on_stop)
        self._pid = next(
            (e.pid for e in events if isinstance(e, RunStarted | ExperimentStarted)), None
        )
        self.started = False
        self.stopped = False
        """Whether the pane asked it to stop (a replay has nothing more to say then)."""

    @property
    def pid(self) -> int | None:
        """The recorded child's pid, once started."""
        return self._pid if self.started else None

    def start(self) -> ReplayedJob:
        self.started = True
        return self

    def drain(self) -> list[Event]:
        events, self._events = self._events, []
        if self.stopped:
            events, self._on_stop = [*events, *self._on_stop], []
        return events

    def release(self) -> None:
        """Hand out the rest of the stream, held back by a cut, at the next drain."""
        self._events, self._held = self._events + self._held, []

    def stop(self, *, wait: bool = True) -> None:
        self.stopped = True


Cut = Callable[[int, list[Event]], list[Event]]
"""What a replay hands out of job ``index``'s stream (a prefix: the run in flight); the rest
waits for :meth:`ReplayedJob.release`, but for a stopped run's end, which waits for the stop."""


class Replay:
    """The jobs of one scenario, handed out in turn to a pane that asks for them."""

    def __init__(self, scenario: Scenario, cut: Cut | None = None) -> None:
        self.scenario = scenario
        self._streams = streams(scenario.name)
        self._cut = cut
        self.jobs: list[ReplayedJob] = []
        """The jobs handed out so far."""

    def job(self, config: RunConfig | ExperimentConfig) -> ReplayedJob:
        """The next recorded job, which must have been recorded with ``config``.

        Raises:
            RecordingError: when the pane asks for more jobs, or another config.
        """
        index, name = len(self.jobs), self.scenario.name
        if index >= len(self._streams):
            raise RecordingError(f"the pane started job {index + 1}; {name} recorded {index}")
        recorded = self.scenario.configs[index]
        if config != recorded:
            raise RecordingError(
                f"{name}: the pane asked for {_difference(config, recorded)}; "
                f"change the test's defaults, or the scenario and {RERECORD}"
            )
        events = self._streams[index]
        shown = self._cut(index, events) if self._cut else events
        held, on_stop = list(events[len(shown) :]), []
        if held and self.scenario.ending == "stop":  # its end comes when the pane stops it
            on_stop = [held.pop()]
        job = ReplayedJob(shown, held=held, on_stop=on_stop)
        self.jobs.append(job)
        return job


def _difference(asked: object, recorded: object) -> str:
    if type(asked) is not type(recorded):
        return f"a {type(asked).__name__}, the recording ran a {type(recorded).__name__}"
    changed = [
        f"{spec.name}={getattr(asked, spec.name)!r} (recorded {getattr(recorded, spec.name)!r})"
        for spec in dataclasses.fields(asked)  # type: ignore[arg-type]
        if getattr(asked, spec.name) != getattr(recorded, spec.name)
    ]
    return ", ".join(changed)


def replayed_setup(
    name: str,
    *,
    cut: Cut | None = None,
    defaults: RunConfig = RECORDED,
) -> RunnerSetup:
    """A runner pane whose jobs replay recording ``name`` and whose devices are this
    machine's, as recorded; its defaults are the recorded config, so it asks for it."""
    replay = Replay(BY_NAME[name], cut)
    return RunnerSetup(
        trainer=replay.job,
        experiment=replay.job,
        list_devices=devices,
        installed=lambda: RECORDED_TORCH,
        defaults=defaults,
        drain_interval_s=0.02,
        experiment_budget_s=EXPERIMENT_BUDGET_S,
        watch_interval_s=3600.0,  # the recorded pids are not live processes: never watch them
        cores=RECORDED_CORES,
    )
