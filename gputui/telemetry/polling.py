"""The one sampling engine (:class:`Poller`) that the monitor, ``gputui serve`` and ``gputui
record`` pace, the sources it samples (:class:`Samplers`), the thread that calls a sampler
that may hang (:class:`SamplerThread`), and one NVML sample or topology that is not waited
for past a deadline (:func:`sample_nvml`, :func:`read_nvml_topology`, for the commands).
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Generic, Protocol, TypeVar

from gputui.format import exception_line, one_line
from gputui.telemetry.apple import MpsSampler
from gputui.telemetry.drm import DrmSampler
from gputui.telemetry.host import HostSampler
from gputui.telemetry.nvml import NvmlSampler, describe_hung_call, is_stale
from gputui.telemetry.readings import (
    CpuReading,
    DriverCall,
    DrmReading,
    GpuTopology,
    MpsReading,
    NvmlReading,
    Snapshot,
)

log = logging.getLogger(__name__)

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Sampler(Protocol[R_co]):
    """Anything with a blocking ``sample()`` that returns a reading."""

    def sample(self) -> R_co:
        """Take one reading (may block; must be called off the event loop)."""
        ...


class NoDrmGpus:
    """A box with no AMD or Intel GPU (the DRM source of samplers built for NVIDIA alone)."""

    def sample(self) -> DrmReading:
        """No GPU, now."""
        return DrmReading(gpus=(), taken_at=time.monotonic())


@dataclass(frozen=True, slots=True)
class Samplers:
    """The sources the monitor polls; production uses :meth:`real`, tests inject fakes."""

    cpu: Sampler[CpuReading]
    """The host: CPUs, memory, gputui's own footprint."""
    nvml: Sampler[NvmlReading]
    """Every NVIDIA GPU (may hang on a bad driver)."""
    mps: Sampler[MpsReading]
    """Apple MPS."""
    drm: Sampler[DrmReading] = field(default_factory=NoDrmGpus)
    """Every AMD and Intel GPU, from sysfs."""

    @classmethod
    def real(cls, *, raw_commands: bool = False) -> Samplers:
        """The real samplers, built on first use inside their threads: building them imports
        psutil and the NVML bindings and may initialise NVML (which can hang), none of it on
        the event loop. ``raw_commands``: keep the secrets in processes' command lines."""
        return cls(
            cpu=LazySampler(HostSampler),
            nvml=LazySampler(partial(NvmlSampler, raw_commands=raw_commands)),
            mps=LazySampler(MpsSampler),
            drm=LazySampler(DrmSampler),
        )


class LazySampler(Generic[R]):
    """A sampler built by ``factory`` on the first ``sample()`` call, in the caller's thread."""

    def __init__(self, factory: Callable[[], Sampler[R]]) -> None:
        """Remember ``factory``: it builds the real sampler (imports, driver set-up), once."""
        self._factory = factory
        self._sampler: Sampler[R] | None = None
        self._stopped = False

    def sample(self) -> R:
        """Build the sampler if it is not built yet, then take one reading."""
        return self._built().sample()

    def _built(self) -> Sampler[R]:
        if self._sampler is None:
            self._sampler = self._factory()
            if self._stopped:  # stopped before it was built
                stop_sampler(self._sampler)
        return self._sampler

    def close(self) -> None:
        """Close the sampler if it was built and has a ``close()`` (NVML's)."""
        close_sampler(self._sampler)

    def stop(self) -> None:
        """Stop the sampler (once built, if not yet) if it has a ``stop()`` (NVML does)."""
        self._stopped = True
        stop_sampler(self._sampler)

    def topology(self) -> GpuTopology | None:
        """The GPUs' topology, if the sampler tells (NVML does); builds it first, as
        :meth:`sample` does (so call it on the sampler's thread)."""
        return read_topology(self._built())

    def pending_call(self) -> DriverCall | None:
        """The driver call the sampler waits on, if it was built and tells (NVML does)."""
        return pending_call(self._sampler)

    def hung_reading(self, *, keep_read: bool = True) -> object | None:
        """What the sampler says of a stuck sample, if built and it tells (NVML's does)."""
        return hung_reading(self._sampler, keep_read=keep_read)

    def never_blocks(self) -> bool:
        """Whether the sampler, once built, says its next sample cannot block; never
        before it is built (building it imports and may set a driver up)."""
        return self._sampler is not None and never_blocks(self._sampler)


def _if_any(sampler: object, method: str, **kwargs: object) -> object | None:
    """``sampler.method(**kwargs)`` where the sampler has it (none need); else ``None``."""
    found = getattr(sampler, method, None)
    return found(**kwargs) if callable(found) else None


def close_sampler(sampler: object) -> None:
    """Call ``sampler.close()`` if it has one."""
    _if_any(sampler, "close")


def stop_sampler(sampler: object) -> None:
    """Call ``sampler.stop()`` if it has one: a sample in flight ends at its next driver call
    instead of running to its end (then ``close`` need not wait for it). Never blocks."""
    _if_any(sampler, "stop")


def read_topology(sampler: object) -> GpuTopology | None:
    """``sampler.topology()`` (NVML's and a :class:`LazySampler` of it say); ``None`` for a
    sampler that cannot say. Blocks on the driver: call it on the sampler's thread."""
    answer = _if_any(sampler, "topology")
    return answer if isinstance(answer, GpuTopology) else None


def pending_call(sampler: object) -> DriverCall | None:
    """The driver call ``sampler`` waits on now, if it tells (NVML's does). Never blocks."""
    call = _if_any(sampler, "pending_call")
    return call if isinstance(call, DriverCall) else None


def never_blocks(sampler: object) -> bool:
    """Whether ``sampler`` says its next sample cannot block (the host's kernel counters, MPS
    off macOS, AMD and Intel with no card): it may then run on the caller's thread."""
    return bool(_if_any(sampler, "never_blocks"))


def hung_reading(sampler: object, *, keep_read: bool = True) -> object | None:
    """What ``sampler`` says of a sample stuck in the driver, for a sampler that tells
    (``NvmlSampler.hung_reading``, ``keep_read`` passed on). Never blocks."""
    return _if_any(sampler, "hung_reading", keep_read=keep_read)


SOURCES = ("cpu", "nvml", "mps", "drm")
"""The sources, by their name in :class:`Samplers`."""

Reply = Callable[[object, "BaseException | None"], object]
"""Takes a sample's result: ``(reading, None)``, or ``(None, error)`` if the sampler raised."""


_Job = tuple[Callable[[], object], Reply | None]
"""A function a sampler thread runs, and what takes its result."""


def _run(job: _Job) -> None:
    function, reply = job
    try:
        value, error = function(), None
    except BaseException as caught:  # handed to the reply
        value, error = None, caught
    if reply is not None:
        try:
            reply(value, error)
        except Exception:  # the thread goes on serving its source
            log.exception("a reply to %s failed", function)


class SamplerThread:
    """One daemon thread that runs one source's samples, one at a time, in order (a sampler
    need not be thread-safe). A driver call that hangs holds only this thread, and Python
    does not wait for a daemon thread at exit."""

    def __init__(self, name: str) -> None:
        """Name the thread (``gputui-nvml``: thread dumps show it); it starts on a sample."""
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    def sample(self, function: Callable[[], object], reply: Reply) -> None:
        """Run ``function`` on the thread after what is queued, then call ``reply`` there with
        ``(value, None)``, or ``(None, error)`` if it raised. Returns at once; after
        :meth:`close`, nothing runs."""
        if self._closed:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        self._jobs.put((function, reply))

    call = sample
    """A question other than a sample (the topology) for the same sampler, on its thread."""

    def close(self, finalizer: Callable[[], object] | None = None) -> None:
        """Let the thread end once it is idle (at once, unless a sample still hangs), running
        ``finalizer`` (the sampler's ``close``) on it first; its errors are ignored."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            return
        if finalizer is not None:
            self._jobs.put((finalizer, None))
        self._jobs.put(None)

    @property
    def started(self) -> bool:
        """Whether the thread was started (by a first sample or call)."""
        return self._thread is not None

    def join(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a closed thread to end; True when it has."""
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            _run(job)


@dataclass(frozen=True, slots=True)
class Latest:
    """The latest reading of each source; ``None`` until that source has answered once."""

    started_at: float
    """When sampling started (``time.monotonic()``); a reading not in yet is as old as this."""
    cpu: CpuReading | None = None
    nvml: NvmlReading | None = None
    mps: MpsReading | None = None
    drm: DrmReading | None = None
    hang: NvmlReading | None = None
    """While an NVML call holds the readings back past staleness, what
    :meth:`NvmlSampler.hung_reading` says (``keep_read=False``); ``None`` otherwise. ``nvml``
    keeps the last reading that came, and its time."""

    def age_s(self, now: float) -> float:
        """Seconds since the oldest of the readings was taken (since the start, for a
        missing one), at ``now`` (``time.monotonic()``)."""
        taken = [
            self.started_at if reading is None else reading.taken_at
            for reading in (self.cpu, self.nvml, self.mps, self.drm)
        ]
        return max(0.0, now - min(taken))

    def snapshot(self) -> Snapshot | None:
        """The readings as ``gputui snapshot`` has them (NVML's as :attr:`hang` says, while
        it hangs); ``None`` until every source answered or NVML is known to hang."""
        nvml = self.hang or self.nvml
        if self.cpu is None or nvml is None or self.mps is None or self.drm is None:
            return None
        return Snapshot(cpu=self.cpu, nvml=nvml, mps=self.mps, drm=self.drm)


@dataclass(frozen=True, slots=True)
class Beat:
    """What came in one beat: the readings that arrived, and the samples that raised."""

    readings: Mapping[str, object]
    """Each source's new reading, by source (``cpu``, ``nvml``, ``mps``, ``drm``)."""
    errors: Mapping[str, str] = field(default_factory=dict)
    """Each source whose sampler raised, with the error in one line."""
    late: bool = False
    """Handed on as it came, not on the beat: a reading that came past the grace, or before
    every source had answered once (a recorder folds it into the next beat's frame)."""


OnBeat = Callable[[Beat], object]
"""Takes each beat's readings; called on a sampler's or the pacer's thread, so it must be
quick and thread-safe (post a message, queue a frame)."""

MIN_REST = 0.1
"""Shortest pause between a source's answer and its next sample, as a share of the interval:
a sample that overran its beat waits for the next one, and a slow driver never gets
back-to-back calls."""
BEAT_GRACE_S = 0.2
"""Longest a beat's readings wait for each other before they are handed on together (a
quarter of the interval when that is shorter): a hung NVML call delays the others that much."""
CLOSE_WAIT_S = 2.0
"""How long :meth:`Poller.close` waits for the samplers to finish (a hung one is left)."""


class Poller:
    """The one sampling engine: every source sampled on one beat, each whose sample may block
    on a daemon thread of its own (a hung driver call holds back only its source), the others
    on the pacing thread. Each beat's readings are handed together to every subscriber (the
    monitor, the recorder) once all are in or :data:`BEAT_GRACE_S` has passed; a reading
    that comes later, or before every source has answered once, is handed on at once. A
    source still answering is not asked again, so samples never queue behind a hung one.
    :meth:`latest` (``gputui serve``'s scrapes) never waits.
    """

    def __init__(
        self,
        samplers: Samplers,
        interval_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        name: str = "gputui",
    ) -> None:
        """Prepare the threads (named ``{name}-{source}``); nothing is sampled before
        :meth:`start`. ``clock`` is the samplers' (readings' ``taken_at`` are on it)."""
        self.samplers = samplers
        self.interval_s = interval_s
        self._clock = clock
        self._name = name
        self._grace_s = min(BEAT_GRACE_S, interval_s / 4)
        self._threads = {source: SamplerThread(f"{name}-{source}") for source in SOURCES}
        self._state = threading.Condition()  # guards what follows, up to _emitting
        self._latest = Latest(started_at=clock())
        self._busy: set[str] = set()
        self._answered_at: dict[str, float] = {}
        self._arrived: dict[str, object] = {}  # not handed on yet
        self._errors: dict[str, str] = {}
        self._seen: set[str] = set()  # sources handed on once, reading or error
        self._warned: set[str] = set()  # sources whose failure was logged
        self._gathering = False  # the pacer waits for this beat's readings
        self._emitting = threading.Lock()  # hands beats on one at a time, in order
        self._subscribers: list[OnBeat] = []
        self._stop = threading.Event()
        self._pacer: threading.Thread | None = None

    @classmethod
    def real(cls, interval_s: float, *, raw_commands: bool = False, name: str = "gputui") -> Poller:
        """The real sources (:meth:`Samplers.real`), the NVML bindings imported in this thread:
        importing cannot hang, unlike a driver call, and done on a sampler thread while the
        main thread imports Textual, the two would fight over the GIL and the import locks."""
        with contextlib.suppress(ImportError):  # (the NVML sampler reports it, with the fix)
            import pynvml  # noqa: F401
        return cls(Samplers.real(raw_commands=raw_commands), interval_s, name=name)

    @property
    def started(self) -> bool:
        """Whether :meth:`start` was called."""
        return self._pacer is not None

    def start(self) -> None:
        """Take the first samples now, then a beat every ``interval_s``, on a pacing thread."""
        self._latest = Latest(started_at=self._clock())
        self._pacer = threading.Thread(target=self._pace, name=f"{self._name}-pacer", daemon=True)
        self._pacer.start()

    def subscribe(self, on_beat: OnBeat) -> Beat:
        """Hand every later beat to ``on_beat`` too; returns the readings in hand now, so that
        none falls between the two."""
        with self._emitting, self._state:
            self._subscribers.append(on_beat)
            latest, arrived = self._latest, set(self._arrived)  # (those come with the next beat)
        readings = {s: getattr(latest, s) for s in SOURCES if s not in arrived}
        return Beat({s: r for s, r in readings.items() if r is not None})

    def latest(self) -> Latest:
        """The latest readings, with :attr:`Latest.hang` while NVML is stuck in a call past
        staleness; safe from any thread, and never waits."""
        latest = self._latest
        if self.pending_call() is None:
            return latest
        taken_at = latest.nvml.taken_at if latest.nvml is not None else latest.started_at
        if not is_stale(taken_at, self._clock(), self.interval_s):
            return latest
        hang = hung_reading(self.samplers.nvml, keep_read=False)
        return replace(latest, hang=hang) if isinstance(hang, NvmlReading) else latest

    def pending_call(self) -> DriverCall | None:
        """The NVML call a sample waits on now, if any (never blocks)."""
        return pending_call(self.samplers.nvml)

    def call(self, source: str, function: Callable[[], object], reply: Reply) -> None:
        """Run ``function`` on ``source``'s thread after its sample, then ``reply`` there."""
        self._threads[source].call(function, reply)

    def poll(self) -> None:
        """Ask every source that is due for a sample; returns at once but for the samples
        that cannot block (:func:`never_blocks`), taken here before any thread is woken."""
        now = self._clock()
        with self._state:
            if self._stop.is_set():
                return
            due = [
                source
                for source in SOURCES
                if source not in self._busy
                and now - self._answered_at.get(source, -math.inf) >= self.interval_s * MIN_REST
            ]
            self._busy.update(due)
            self._gathering = True
        samplers = {source: getattr(self.samplers, source) for source in due}
        threaded = [source for source, sampler in samplers.items() if not never_blocks(sampler)]
        for source, sampler in samplers.items():  # the quick ones first, no thread awake yet
            if source not in threaded:
                _run((sampler.sample, partial(self._answered, source)))  # as on its thread
        for source in threaded:
            sampler = samplers[source]
            self._threads[source].sample(sampler.sample, partial(self._answered, source))

    def stop(self) -> None:
        """Stop sampling without waiting: a sample in flight ends at its next driver call,
        then each sampler is closed on its thread (NVML shut down with no call inside it)."""
        self._stop.set()
        with self._state:
            self._state.notify_all()
        if self._pacer is not None and self._pacer is not threading.current_thread():
            self._pacer.join(CLOSE_WAIT_S)  # (it samples only what cannot block)
        for source, thread in self._threads.items():
            sampler = getattr(self.samplers, source)
            stop_sampler(sampler)
            if thread.started:
                thread.close(finalizer=partial(close_sampler, sampler))
            else:  # only ever sampled on the pacer's thread, or never
                thread.close()
                close_sampler(sampler)

    def join(self, timeout_s: float) -> bool:
        """After :meth:`stop`: wait up to ``timeout_s`` for the threads; True when all ended
        (a sampler stuck in a driver call is left behind: its thread is a daemon)."""
        deadline = time.monotonic() + timeout_s
        return all(
            thread.join(max(deadline - time.monotonic(), 0.0)) for thread in self._threads.values()
        )

    def close(self, wait_s: float = CLOSE_WAIT_S) -> bool:
        """:meth:`stop`, then :meth:`join` for at most ``wait_s``."""
        self.stop()
        return self.join(wait_s)

    def _pace(self) -> None:
        next_at = self._clock()
        while not self._stop.is_set():
            self.poll()
            with self._state:  # the beat's readings, or the grace, whichever comes first
                self._state.wait_for(
                    lambda: not self._busy or self._stop.is_set(), timeout=self._grace_s
                )
                self._gathering = False
            self._emit()
            next_at += self.interval_s
            now = self._clock()
            next_at = max(next_at, now)  # fell behind: go on from now, without a burst
            if self._stop.wait(next_at - now):
                return

    def _answered(self, source: str, reading: object, error: BaseException | None) -> None:
        with self._state:
            self._busy.discard(source)
            self._answered_at[source] = self._clock()
            if error is None:
                self._latest = replace(self._latest, **{source: reading})  # type: ignore[arg-type]  # source names one of its fields
                self._arrived[source] = reading
            else:
                said = self._errors[source] = one_line(exception_line(error))
                if source not in self._warned:  # once a source, at whatever time
                    self._warned.add(source)
                    log.warning("the %s sampler failed (%s)", source, said)
            if self._gathering and self._seen.issuperset(SOURCES):
                self._state.notify_all()  # the pacer hands the beat on
                return
        self._emit(late=True)  # late for its beat, or the first readings: at once

    def _emit(self, *, late: bool = False) -> None:
        with self._emitting:
            with self._state:
                if not self._arrived and not self._errors:
                    return
                beat = Beat(self._arrived, self._errors, late)
                self._arrived, self._errors = {}, {}
                self._seen.update(beat.readings, beat.errors)
                subscribers = list(self._subscribers)
            for on_beat in subscribers:
                try:
                    on_beat(beat)
                except Exception:  # one subscriber's bug neither stops the beats nor the others
                    log.exception("a subscriber failed on a beat")


NVML_TIMEOUT_S = 5.0
"""How long one NVML sample outside the monitor (``gputui snapshot``, ``doctor``, ``bench``)
waits for the driver before it reports what did not answer."""


def sample_nvml(
    timeout_s: float = NVML_TIMEOUT_S, *, sampler: NvmlSampler | None = None
) -> NvmlReading:
    """One NVML sample on a sampler thread of its own, waited for at most ``timeout_s``; past
    it, :meth:`NvmlSampler.hung_reading` (the call that has not returned is left to its
    thread). ``sampler``: default, a new one, closed once it has answered."""
    return _asked(NvmlSampler.sample, NvmlSampler.hung_reading, timeout_s, sampler)


def read_nvml_topology(
    timeout_s: float = NVML_TIMEOUT_S, *, sampler: NvmlSampler | None = None
) -> GpuTopology:
    """The GPUs' topology (:meth:`NvmlSampler.topology`) read on a sampler thread of its own,
    waited for at most ``timeout_s``: past it, the topology's error names the call that has
    not returned, which is left to its thread (arguments as :func:`sample_nvml`'s)."""

    def hung(sampler: NvmlSampler) -> GpuTopology:
        call = sampler.pending_call()
        if call is None:
            return GpuTopology((), (), error="NVML had not answered by the deadline.")
        return GpuTopology((), (), error=describe_hung_call(call, time.monotonic()))

    return _asked(NvmlSampler.topology, hung, timeout_s, sampler)


def _asked(
    ask: Callable[[NvmlSampler], R],
    hung: Callable[[NvmlSampler], R],
    timeout_s: float,
    sampler: NvmlSampler | None,
) -> R:
    """``ask(sampler)`` on a sampler thread of its own, waited for at most ``timeout_s``; past
    it, ``hung(sampler)``, and the sampler stopped (its call left to its thread). Raises what
    ``ask`` raised. A sampler made here is closed once it has answered."""
    own = sampler is None
    if sampler is None:
        sampler = NvmlSampler()
    answer: queue.SimpleQueue[tuple[object, BaseException | None]] = queue.SimpleQueue()
    thread = SamplerThread("gputui-nvml")
    thread.sample(partial(ask, sampler), lambda value, error: answer.put((value, error)))
    thread.close()  # the thread ends once the call has, if ever
    try:
        value, error = answer.get(timeout=max(timeout_s, 0.0))
    except queue.Empty:
        said = hung(sampler)
        sampler.stop()
        return said
    if error is not None:
        raise error
    if own:
        sampler.close()
    return value  # type: ignore[return-value]  # (what ask returned)
