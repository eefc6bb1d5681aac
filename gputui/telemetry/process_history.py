"""Each GPU process's history: its GPU memory and SM use over time, for the monitor's
process screen. A process is known by its pid and start time (:data:`ProcessKey`), so a pid
reused by a later process starts a history of its own. A sample older than a process's last
one (from before a replay's seek) is ignored: the replay clears the history when it seeks.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gputui.telemetry.history import DEFAULT_WINDOW_S, samples_for_window
from gputui.telemetry.readings import GpuProcess, GpuReading, gpu_label

DEFAULT_MAX_PROCESSES = 256
"""Processes kept at most: more than eight busy GPUs run, at a few MiB at most."""

ProcessKey = tuple[int, float | None]
"""A process's identity across readings: its pid (NVML's, the host's) and start time
(``create_time``; ``None`` where unknown, so a reused pid cannot be told apart)."""


def process_key(process: GpuProcess) -> ProcessKey:
    """The identity of ``process`` (:data:`ProcessKey`)."""
    return (process.pid, process.create_time)


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One reading of one process, over all the GPUs it was on."""

    t: float
    """When it was read (the reading's ``taken_at``, or a recording's time)."""
    gpu_memory_bytes: int | None
    """GPU memory it held, summed over its GPUs; ``None`` where no GPU said."""
    sm_utilization_percent: float | None
    """Share of its GPUs' SMs it kept busy (their mean), 0-100; ``None`` where none said."""


class ProcessTrack:
    """One process's history: its latest reading, its GPUs and its samples, oldest first."""

    __slots__ = ("ended_t", "first_t", "gpus", "key", "last_t", "process", "samples")

    def __init__(self, key: ProcessKey, maxlen: int) -> None:
        """An empty history for the process ``key``, keeping ``maxlen`` samples."""
        self.key = key
        """Its pid and start time."""
        self.process: GpuProcess | None = None
        """Its latest reading (on one of its GPUs), with its user, command and workload."""
        self.gpus: tuple[str, ...] = ()
        """The labels of every GPU it was seen on (:func:`gpu_label`), in the order seen."""
        self.first_t: float | None = None
        """When it was first seen."""
        self.last_t: float | None = None
        """When it was last seen."""
        self.ended_t: float | None = None
        """When a reading of all its GPUs first did not list it; ``None`` while it runs."""
        self.samples: deque[ProcessSample] = deque(maxlen=maxlen)
        """Its samples, oldest first."""

    @property
    def ended(self) -> bool:
        """Whether it has left its GPUs (exited, or freed them)."""
        return self.ended_t is not None

    @property
    def peak_memory_bytes(self) -> int | None:
        """The most GPU memory it held in the samples kept; ``None`` where none is known."""
        known = [s.gpu_memory_bytes for s in self.samples if s.gpu_memory_bytes is not None]
        return max(known) if known else None

    def _seen(
        self, t: float, process: GpuProcess, gpus: list[str], memory: int | None, sm: float | None
    ) -> None:
        self.process = process
        self.gpus += tuple(label for label in gpus if label not in self.gpus)
        if self.first_t is None:
            self.first_t = t
        self.ended_t = None  # listed again: a reading had missed it
        if t != self.last_t:  # (the same reading twice is one sample)
            self.samples.append(ProcessSample(t, memory, sm))
        self.last_t = t

    def _older(self, t: float) -> bool:
        """Whether ``t`` is before its last sample (kept in time order)."""
        return self.last_t is not None and t < self.last_t


@dataclass
class _Seen:
    """What one reading says of one process, over its GPUs."""

    process: GpuProcess
    gpus: list[str]
    memory: list[int]
    sm: list[float]


class ProcessHistory:
    """The history of every GPU process seen, by :data:`ProcessKey`, bounded in memory."""

    def __init__(
        self,
        maxlen: int,
        *,
        max_processes: int = DEFAULT_MAX_PROCESSES,
        keep_ended_s: float | None = None,
    ) -> None:
        """An empty history of ``maxlen`` samples per process and ``max_processes`` processes
        (past it, the one seen least recently is forgotten, an ended one first); an ended
        process is kept ``keep_ended_s`` after it was last seen (``None``: until pushed out).

        Raises:
            ValueError: ``maxlen`` or ``max_processes`` below 1.
        """
        if maxlen < 1 or max_processes < 1:
            raise ValueError("maxlen and max_processes must be at least 1")
        self.maxlen = maxlen
        self.max_processes = max_processes
        self.keep_ended_s = keep_ended_s
        self._tracks: OrderedDict[ProcessKey, ProcessTrack] = OrderedDict()  # last seen last

    @classmethod
    def for_window(cls, interval_s: float, window_s: float = DEFAULT_WINDOW_S) -> ProcessHistory:
        """A history as long as the monitor's (:meth:`History.for_window`)."""
        return cls(samples_for_window(window_s, interval_s), keep_ended_s=window_s)

    def record(self, t: float, gpus: Iterable[GpuReading]) -> None:
        """Add a sample for each process ``gpus`` list, read at ``t``, and mark ended those
        last seen on these GPUs that they no longer list (a GPU whose processes are unknown
        ends none; nor does another vendor's reading, without their GPU)."""
        seen: dict[ProcessKey, _Seen] = {}
        listed: set[str] = set()
        for gpu in gpus:
            if gpu.processes is None:
                continue
            label = gpu_label(gpu)
            listed.add(label)
            for process in gpu.processes:
                key = process_key(process)
                found = seen.get(key)
                if found is None:
                    found = seen[key] = _Seen(process, [], [], [])
                found.gpus.append(label)
                if process.gpu_memory_bytes is not None:
                    found.memory.append(process.gpu_memory_bytes)
                if process.sm_utilization_percent is not None:
                    found.sm.append(process.sm_utilization_percent)
        for key, found in seen.items():
            track = self._tracks.get(key)
            if track is None:
                track = self._add(key)
            elif track._older(t):
                continue
            else:
                self._tracks.move_to_end(key)
            memory = sum(found.memory) if found.memory else None
            sm = sum(found.sm) / len(found.sm) if found.sm else None
            track._seen(t, found.process, found.gpus, memory, sm)
        for key, track in list(self._tracks.items()):
            if key in seen or track._older(t):
                continue
            if track.ended_t is None and listed.issuperset(track.gpus):
                track.ended_t = t
            last = track.last_t if track.last_t is not None else t
            if track.ended and self.keep_ended_s is not None and t - last > self.keep_ended_s:
                del self._tracks[key]

    def _add(self, key: ProcessKey) -> ProcessTrack:
        while len(self._tracks) >= self.max_processes:
            ended = next((k for k, track in self._tracks.items() if track.ended), None)
            if ended is not None:
                del self._tracks[ended]  # the ended one seen least recently
            else:
                self._tracks.popitem(last=False)  # seen least recently
        track = self._tracks[key] = ProcessTrack(key, self.maxlen)
        return track

    def clear(self) -> None:
        """Forget every process (a replay that seeks starts the history again)."""
        self._tracks.clear()

    def get(self, key: ProcessKey) -> ProcessTrack | None:
        """The history of process ``key``; ``None`` where it was never seen, or forgotten."""
        return self._tracks.get(key)

    def of(self, process: GpuProcess) -> ProcessTrack | None:
        """The history of ``process`` (by its pid and start time)."""
        return self._tracks.get(process_key(process))

    def __contains__(self, key: object) -> bool:
        return key in self._tracks

    def __iter__(self) -> Iterator[ProcessKey]:
        return iter(list(self._tracks))

    def __len__(self) -> int:
        return len(self._tracks)
