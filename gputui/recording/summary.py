"""A recording summed up per GPU (a fleet's: per host, then per GPU): its time span,
utilization and memory (mean, p95, max), the energy it used, the time it was throttled or
did not answer, and the processes that used it.

Each frame counts for the time until the next one, at most ``GAP_INTERVALS`` intervals (a
longer gap is time without readings, not time in the state read last); the last frame counts
for none. Means and percentiles are over the frames, p95 by nearest rank. Frames are read as
a replay reads them (:func:`~gputui.telemetry.snapshot.snapshot_from_dict`,
:func:`~gputui.fleet.report.hosts_from_dict`): one that does not decode ends the figures
there, as a damaged line does.
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gputui.fleet.hosts import HostReading
from gputui.fleet.report import hosts_from_dict
from gputui.recording.reader import Frame, Recording
from gputui.recording.runs import RunnerEntry, RunSummary, entries_of, summarise_runs
from gputui.telemetry.readings import BENIGN_THROTTLES, GpuProcess, GpuReading, GpuState
from gputui.telemetry.snapshot import snapshot_from_dict

GAP_INTERVALS = 2.0
"""The most a frame counts for, in recording intervals."""
START_TOLERANCE_S = 2.0
"""A pid listed again whose start (frame time less its elapsed time) is within this of one
seen before is the same process; further off, the pid was reused."""


@dataclass(frozen=True, slots=True)
class Spread:
    """A reading over the frames; ``None`` where no frame had it."""

    mean: float | None
    p95: float | None
    max: float | None


@dataclass(frozen=True, slots=True)
class ProcessUse:
    """One process's use of one GPU over the recording."""

    pid: int
    """Its pid, as NVML gave it (the host's)."""
    local_pid: int | None
    """Its pid where gputui ran, where known (``snapshot --json``'s ``local_pid``)."""
    user: str | None
    """Its user, as last read."""
    command: str | None
    """Its command line, as last read."""
    peak_memory_bytes: int | None
    """The most GPU memory it held in a frame; ``None`` where NVML never said."""
    time_s: float
    """Time it was on the GPU: the frames it was listed in."""
    sm_seconds: float | None
    """Its share of the GPU's SMs over that time, in seconds of the whole GPU; ``None``
    where NVML never gave its share."""
    first_t: float
    """The first frame it was listed in."""
    last_t: float
    """The last frame it was listed in."""


@dataclass(frozen=True, slots=True)
class GpuSummary:
    """One GPU over the recording."""

    index: int
    """NVML index."""
    name: str | None
    """Product name, as last read."""
    uuid: str | None
    """UUID, as last read."""
    first_t: float
    """The first frame it is in."""
    last_t: float
    """The last frame it is in."""
    frames: int
    """Frames it is in."""
    utilization_percent: Spread
    """Utilization, over the frames it answered in."""
    memory_used_bytes: Spread
    """Memory in use, over the frames it answered in."""
    memory_total_bytes: int | None
    """Its memory, as last read."""
    energy_j: float | None
    """Energy used over the recording."""
    energy_from: str | None
    """``counter`` (the driver's energy counter's increase), ``power`` (power draw times
    time, where there is no counter), ``None`` (neither was read)."""
    throttled_s: float
    """Time its clocks were held down for a reason that is a problem (power cap, thermal...;
    not idle)."""
    throttle_reasons_s: Mapping[str, float]
    """That time by reason (a frame with two reasons counts for both)."""
    unanswered_s: float
    """Time it did not answer (lost, unreachable, hung)."""
    state_changes: tuple[tuple[float, str], ...]
    """Each time its state changed, and to what (``lost``, ``ok``...), the first frame's
    state included where it is not ``ok``."""
    processes: tuple[ProcessUse, ...]
    """The processes that used it, the longest first."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    """What a host's and a fleet's summary both say about their recording."""

    started_unix: float
    """When the recording started (seconds since the epoch); times below count from it."""
    interval_s: float
    """Seconds between samples."""
    frames: int
    """Frames read."""
    first_t: float | None
    """The first frame's time; ``None`` without frames."""
    last_t: float | None
    """The last frame's time."""
    problem: str | None
    """Where reading stopped early, and why (the figures cover what came before)."""
    files: tuple[str, ...] = ()
    """The files read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary(Recorded):
    """A recording summed up."""

    host: str
    """The recorded machine."""
    gpus: tuple[GpuSummary, ...]
    """Every GPU seen, by index."""
    runs: tuple[RunSummary, ...] = ()
    """The training runs the runner pane showed (``gputui --record``), job by job."""


@dataclass(frozen=True, slots=True)
class HostSummary:
    """One host of a fleet over the recording."""

    host: str
    """The host as the recorder named it (or Prometheus's ``instance``)."""
    source: str | None
    """The exporter that answered, as last read (``gputui``, ``dcgm-exporter``...)."""
    first_t: float
    """The first frame it is in."""
    last_t: float
    """The last frame it is in."""
    frames: int
    """Frames it is in."""
    unreachable_s: float
    """Time it did not answer (its GPUs count it as time they did not answer too)."""
    state_changes: tuple[tuple[float, str, str | None], ...]
    """Each time it went ``down`` (and why) or came back ``up``, the first frame's state
    included where it is down."""
    gpus: tuple[GpuSummary, ...]
    """Every GPU it listed, by index."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetSummary(Recorded):
    """A fleet recording summed up."""

    recorded_by: str
    """The machine that recorded it."""
    source: str | None
    """``exporters`` (each host's /metrics) or ``prometheus``."""
    hosts: tuple[HostSummary, ...]
    """Every host seen, in the order first seen."""


R = TypeVar("R")


class _Span(Generic[R]):
    """The frames of a recording a summary reads, each with its readings (typed by
    ``decode``) and the time it stands for; their count and first and last times once read."""

    def __init__(self, recording: Recording, decode: Callable[[Frame], R]) -> None:
        self._recording = recording
        self._decode = decode
        self.frames = 0
        self.first_t: float | None = None
        self.last_t: float | None = None

    def __iter__(self) -> Iterator[tuple[Frame, R, float]]:
        """Each frame and its readings with the seconds until the next (at most
        :data:`GAP_INTERVALS` intervals: a gap in the recording counts no more), and 0 for
        the last. A frame its readings do not fit ends the frames there, as a damaged line
        does (the recording's :attr:`~Recording.problem` says where)."""
        recording = self._recording
        cap = GAP_INTERVALS * recording.header.interval_s
        previous: tuple[Frame, R] | None = None
        for frame in recording.frames():
            try:
                readings = self._decode(frame)
            except ValueError as error:
                recording.problem = recording.not_a_frame(frame, error)
                break
            if previous is None:
                self.first_t = frame.t
            else:
                yield *previous, min(max(frame.t - previous[0].t, 0.0), cap)
            previous = frame, readings
            self.frames += 1
        if previous is not None:
            self.last_t = previous[0].t
            yield *previous, 0.0

    def recorded(self) -> dict[str, Any]:
        """:class:`Recorded`'s fields, once the frames are read."""
        recording = self._recording
        return {
            "started_unix": recording.header.started_unix,
            "interval_s": recording.header.interval_s,
            "frames": self.frames,
            "first_t": self.first_t,
            "last_t": self.last_t,
            "problem": None if recording.problem is None else str(recording.problem),
            "files": tuple(str(path) for path in recording.paths),
        }


def summarise(recording: Recording) -> Summary:
    """Read every frame of ``recording`` and sum it up."""
    header = recording.header
    tallies: dict[int, _GpuTally] = {}
    runner: list[RunnerEntry] = []
    span = _Span(recording, lambda frame: snapshot_from_dict(frame.readings).gpus)
    for frame, gpus, weight in span:
        if frame.runner:
            runner += entries_of([frame.runner])
        _tally_gpus(tallies, gpus, frame.t, weight)
    return Summary(
        host=header.host,
        gpus=tuple(tallies[index].summary() for index in sorted(tallies)),
        runs=summarise_runs(runner),
        **span.recorded(),
    )


def _tally_gpus(
    tallies: dict[int, _GpuTally], gpus: Iterable[GpuReading], t: float, weight: float
) -> None:
    for gpu in gpus:
        tallies.setdefault(gpu.index, _GpuTally(gpu.index, t)).add(gpu, t, weight)


def summarise_fleet(recording: Recording) -> FleetSummary:
    """Read every frame of a fleet's ``recording`` and sum it up per host and GPU."""
    header = recording.header
    hosts: dict[str, _HostTally] = {}
    span = _Span(recording, lambda frame: hosts_from_dict(frame.readings, frame.t))
    for frame, readings, weight in span:
        for host in readings:
            hosts.setdefault(host.host, _HostTally(host.host, frame.t)).add(host, frame.t, weight)
    return FleetSummary(
        recorded_by=header.host,
        source=header.source,
        hosts=tuple(tally.summary() for tally in hosts.values()),
        **span.recorded(),
    )


@dataclass
class _HostTally:
    host: str
    first_t: float
    last_t: float = 0.0
    frames: int = 0
    source: str | None = None
    unreachable_s: float = 0.0
    up: bool = True
    state_changes: list[tuple[float, str, str | None]] = field(default_factory=list)
    gpus: dict[int, _GpuTally] = field(default_factory=dict)

    def add(self, host: HostReading, t: float, weight: float) -> None:
        self.frames += 1
        self.last_t = t
        self.source = host.source or self.source
        if host.up != self.up or (self.frames == 1 and not host.up):
            self.state_changes.append((t, "up" if host.up else "down", host.error))
            self.up = host.up
        if not host.up:
            self.unreachable_s += weight
        _tally_gpus(self.gpus, [_as_counted(gpu, host.up) for gpu in host.gpus], t, weight)

    def summary(self) -> HostSummary:
        return HostSummary(
            host=self.host,
            source=self.source,
            first_t=self.first_t,
            last_t=self.last_t,
            frames=self.frames,
            unreachable_s=self.unreachable_s,
            state_changes=tuple(self.state_changes),
            gpus=tuple(self.gpus[index].summary() for index in sorted(self.gpus)),
        )


def _as_counted(gpu: GpuReading, host_up: bool) -> GpuReading:
    """A fleet host's GPU as a host recording's is summed up: the driver's energy counter
    (all an exporter gives) as the counter summed, and a GPU of a host that did not answer
    (its last readings, kept) as unreachable."""
    if host_up and gpu.energy_joules is not None:
        return gpu
    counted = gpu.energy_joules if gpu.energy_joules is not None else gpu.energy_j
    state = gpu.state if host_up else GpuState.UNREACHABLE
    return dataclasses.replace(gpu, energy_joules=counted, state=state)


@dataclass
class _ProcessTally:
    pid: int
    start: float | None
    first_t: float
    last_t: float
    local_pid: int | None = None
    user: str | None = None
    command: str | None = None
    peak_memory_bytes: int | None = None
    time_s: float = 0.0
    sm_seconds: float | None = None

    def add(self, process: GpuProcess, t: float, weight: float) -> None:
        self.last_t = t
        self.time_s += weight
        self.local_pid = process.local_pid or self.local_pid
        self.user = process.user or self.user
        self.command = process.command or self.command
        memory = process.gpu_memory_bytes
        if memory is not None and (
            self.peak_memory_bytes is None or memory > self.peak_memory_bytes
        ):
            self.peak_memory_bytes = memory
        sm = process.sm_utilization_percent
        if sm is not None:
            self.sm_seconds = (self.sm_seconds or 0.0) + weight * sm / 100

    def use(self) -> ProcessUse:
        return ProcessUse(**{f.name: getattr(self, f.name) for f in dataclasses.fields(ProcessUse)})


@dataclass
class _GpuTally:
    index: int
    first_t: float
    last_t: float = 0.0
    frames: int = 0
    name: str | None = None
    uuid: str | None = None
    memory_total_bytes: int | None = None
    utilization: array[float] = field(default_factory=lambda: array("d"))
    memory: array[float] = field(default_factory=lambda: array("d"))
    energy_counter_j: float | None = None
    counted_j: float = 0.0
    since_answer_j: float = 0.0
    """Power times time over the frame in which the counter last moved."""
    unread_j: float = 0.0
    """Power times time since the counter's last answer, while it repeats that answer."""
    repeated: bool = False
    """Whether the counter has repeated its last answer since it last moved."""
    counter_reads: int = 0
    power_j: float = 0.0
    power_reads: int = 0
    throttled_s: float = 0.0
    reasons_s: dict[str, float] = field(default_factory=dict)
    unanswered_s: float = 0.0
    state: str = "ok"
    state_changes: list[tuple[float, str]] = field(default_factory=list)
    processes: dict[int, list[_ProcessTally]] = field(default_factory=dict)

    def add(self, gpu: GpuReading, t: float, weight: float) -> None:
        self.frames += 1
        self.last_t = t
        self.name = gpu.name or self.name
        self.uuid = gpu.uuid or self.uuid
        self.memory_total_bytes = gpu.memory_total_bytes or self.memory_total_bytes
        state = gpu.state.value
        if state != self.state or (self.frames == 1 and state != "ok"):
            self.state_changes.append((t, state))
            self.state = state
        if state != "ok":
            self.unanswered_s += weight
            return
        if gpu.utilization_percent is not None:
            self.utilization.append(gpu.utilization_percent)
        if gpu.memory_used_bytes is not None:
            self.memory.append(gpu.memory_used_bytes)
        self._energy(gpu, weight)
        held = set(gpu.throttle_reasons or ()) - BENIGN_THROTTLES
        if held:
            self.throttled_s += weight
            for reason in held:
                self.reasons_s[reason] = self.reasons_s.get(reason, 0.0) + weight
        for process in gpu.processes or ():
            self._process(process, t).add(process, t, weight)

    def _energy(self, gpu: GpuReading, weight: float) -> None:
        """The counter's increase; and where a counter is read every few seconds (a slow
        driver's, an exporter's: its last answer repeated in between), power times time
        from its last change on until it moves again, so that a recording that ends between
        two answers, or a counter that starts again, loses none of those seconds."""
        power = gpu.power_w
        power_j = 0.0 if power is None else power * weight
        counter = gpu.energy_joules
        if counter is not None:
            if counter == self.energy_counter_j:
                self.unread_j += power_j if self.repeated else self.since_answer_j + power_j
                self.repeated = True
            else:
                last = self.energy_counter_j
                if last is not None:  # one that went back started again: its unread seconds
                    self.counted_j += counter - last if counter >= last else self.unread_j
                self.unread_j, self.repeated, self.since_answer_j = 0.0, False, power_j
            self.energy_counter_j = counter
            self.counter_reads += 1
        if power is not None:
            self.power_j += power_j
            self.power_reads += 1

    def _process(self, process: GpuProcess, t: float) -> _ProcessTally:
        pid = process.pid
        elapsed = process.elapsed_s
        start = None if elapsed is None else t - elapsed
        for known in self.processes.get(pid, ()):
            if (
                start is None
                or known.start is None
                or abs(known.start - start) <= START_TOLERANCE_S
            ):
                return known
        tally = _ProcessTally(pid, start, first_t=t, last_t=t)
        self.processes.setdefault(pid, []).append(tally)
        return tally

    def summary(self) -> GpuSummary:
        if self.counter_reads:
            energy, source = self.counted_j + self.unread_j, "counter"
        elif self.power_reads:
            energy, source = self.power_j, "power"
        else:
            energy, source = None, None
        processes = sorted(
            (tally.use() for tallies in self.processes.values() for tally in tallies),
            key=lambda use: (-use.time_s, use.first_t, use.pid),
        )
        return GpuSummary(
            index=self.index,
            name=self.name,
            uuid=self.uuid,
            first_t=self.first_t,
            last_t=self.last_t,
            frames=self.frames,
            utilization_percent=spread(self.utilization),
            memory_used_bytes=spread(self.memory),
            memory_total_bytes=self.memory_total_bytes,
            energy_j=energy,
            energy_from=source,
            throttled_s=self.throttled_s,
            throttle_reasons_s=dict(sorted(self.reasons_s.items(), key=lambda item: -item[1])),
            unanswered_s=self.unanswered_s,
            state_changes=tuple(self.state_changes),
            processes=tuple(processes),
        )


def spread(values: Iterable[float]) -> Spread:
    """Mean, p95 (nearest rank) and max of ``values``; ``None`` each without values."""
    ordered = sorted(values)
    if not ordered:
        return Spread(None, None, None)
    p95 = ordered[max(math.ceil(0.95 * len(ordered)) - 1, 0)]
    return Spread(math.fsum(ordered) / len(ordered), p95, ordered[-1])
