"""Samplers as the app sees them, the thread that calls a sampler that may hang, and one
NVML sample that is not waited for past a deadline (:func:`sample_nvml`, for the commands).

No Textual here: this is the plain-Python half of polling. Each source has a
:class:`SamplerThread`, a daemon thread that takes one sample at a time and hands
each result to a callback, on that thread (the app's callback posts a message,
which is thread-safe). The event loop never waits for a sample: a driver call that
hangs for minutes holds only its daemon thread, and the app can still quit (Python
does not wait for daemon threads at exit).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from gputui.telemetry.readings import (
    CpuReading,
    DriverCall,
    DrmReading,
    GpuTopology,
    MpsReading,
    NvmlReading,
)

if TYPE_CHECKING:
    from gputui.telemetry.nvml import NvmlSampler

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Sampler(Protocol[R_co]):
    """Anything with a blocking ``sample()`` that returns a reading."""

    def sample(self) -> R_co:
        """Take one reading (may block; must be called off the event loop)."""
        ...


class NoDrmGpus:
    """A box with no AMD or Intel GPU: the AMD and Intel source of samplers a test builds
    for NVIDIA alone."""

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
        """The real samplers, built on first use inside their threads.

        Building them imports psutil and the NVML bindings and may initialise NVML
        (which can hang): none of that runs on the event loop or delays the first frame.
        AMD and Intel GPUs are read under ``GPUTUI_SYSFS`` (default ``/sys``).

        Args:
            raw_commands: Keep the secrets in processes' command lines (redacted otherwise).
        """
        return cls(
            cpu=LazySampler(_host_sampler),
            nvml=LazySampler(partial(_nvml_sampler, raw_commands=raw_commands)),
            mps=LazySampler(_mps_sampler),
            drm=LazySampler(_drm_sampler),
        )


class LazySampler(Generic[R]):
    """A sampler built by ``factory`` on the first ``sample()`` call, in the caller's thread."""

    def __init__(self, factory: Callable[[], Sampler[R]]) -> None:
        """Remember how to build the sampler.

        Args:
            factory: Builds the real sampler (imports, driver set-up); called once.
        """
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
        """Close the sampler if it was built and has a ``close()`` (NVML does)."""
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
        """What the sampler can say while a sample is stuck, if it was built and tells (NVML
        does, :meth:`~gputui.telemetry.nvml.NvmlSampler.hung_reading`)."""
        return hung_reading(self._sampler, keep_read=keep_read)

    def never_blocks(self) -> bool:
        """Whether the sampler, once built, says its next sample cannot block; never
        before it is built (building it imports and may set a driver up)."""
        return self._sampler is not None and never_blocks(self._sampler)


def close_sampler(sampler: object) -> None:
    """Call ``sampler.close()`` if it has one; samplers need not."""
    close = getattr(sampler, "close", None)
    if callable(close):
        close()


def stop_sampler(sampler: object) -> None:
    """Call ``sampler.stop()`` if it has one: a sample in flight ends at its next driver call
    instead of running to its end (then ``close`` need not wait for it). Never blocks."""
    stop = getattr(sampler, "stop", None)
    if callable(stop):
        stop()


def read_topology(sampler: object) -> GpuTopology | None:
    """``sampler.topology()`` if it has one (NVML's and a :class:`LazySampler` of it do);
    ``None`` for a sampler that cannot say. Blocks on the driver: call it on the sampler's
    thread (:meth:`SamplerThread.call`)."""
    topology = getattr(sampler, "topology", None)
    if not callable(topology):
        return None
    answer = topology()
    return answer if isinstance(answer, GpuTopology) else None


def pending_call(sampler: object) -> DriverCall | None:
    """The driver call ``sampler`` waits on now, for a sampler that tells (``pending_call()``,
    as NVML's does); ``None`` otherwise. Never blocks."""
    pending = getattr(sampler, "pending_call", None)
    call = pending() if callable(pending) else None
    return call if isinstance(call, DriverCall) else None


def never_blocks(sampler: object) -> bool:
    """Whether ``sampler``'s next sample cannot block (no driver or device is asked), for a
    sampler that tells (``never_blocks()``: the host's kernel counters, MPS off macOS, AMD
    and Intel where no card is known); such a sample may run on the caller's thread.
    ``False`` for any other."""
    tells = getattr(sampler, "never_blocks", None)
    return bool(tells()) if callable(tells) else False


def hung_reading(sampler: object, *, keep_read: bool = True) -> object | None:
    """What ``sampler`` can say of a sample stuck in the driver, for a sampler that tells
    (``hung_reading()``, as NVML's does); ``None`` otherwise. Never blocks.

    Args:
        sampler: The sampler.
        keep_read: Keep what the stuck sample has read (see ``NvmlSampler.hung_reading``).
    """
    hung = getattr(sampler, "hung_reading", None)
    return hung(keep_read=keep_read) if callable(hung) else None


def _host_sampler() -> Sampler[CpuReading]:
    from gputui.telemetry.host import HostSampler

    return HostSampler()


def _nvml_sampler(*, raw_commands: bool) -> Sampler[NvmlReading]:
    from gputui.telemetry.nvml import NvmlSampler

    return NvmlSampler(raw_commands=raw_commands)


def _mps_sampler() -> Sampler[MpsReading]:
    from gputui.telemetry.apple import MpsSampler

    return MpsSampler()


def _drm_sampler() -> Sampler[DrmReading]:
    from gputui.telemetry.drm import DrmSampler

    return DrmSampler()


def import_real_samplers() -> None:
    """Import the real samplers' modules, psutil and the NVML bindings, in this thread.

    Importing cannot hang, unlike a driver call, so it need not wait for a sampler thread;
    done there while the main thread imports Textual, the two would fight over the GIL and
    the import locks, and the first frame would come later.
    """
    import gputui.telemetry.apple
    import gputui.telemetry.drm
    import gputui.telemetry.host
    import gputui.telemetry.nvml  # noqa: F401

    with contextlib.suppress(ImportError):  # the NVML sampler reports it, with the fix
        import pynvml  # noqa: F401


SOURCES = ("cpu", "nvml", "mps", "drm")
"""The sources the app polls, by their name in :class:`Samplers`."""


@dataclass(frozen=True)
class HeadStart:
    """The samplers and their threads, with each source's first sample already under way.

    Made before Textual is imported (see ``gputui.commands``): the first readings are taken
    while Textual loads, so the first frame can show them.
    """

    samplers: Samplers
    """The sources."""
    threads: dict[str, SamplerThread]
    """One thread per source, each with its first sample prefetched."""

    @classmethod
    def begin(cls, samplers: Samplers | None = None) -> HeadStart:
        """Start the first sample of every source, each on its own thread.

        Args:
            samplers: The sources (default: :meth:`Samplers.real`).
        """
        if samplers is None:
            import_real_samplers()
            samplers = Samplers.real()
        threads = {source: SamplerThread(f"gputui-{source}") for source in SOURCES}
        for source, thread in threads.items():
            thread.prefetch(getattr(samplers, source).sample)
        return cls(samplers, threads)


Reply = Callable[[object, "BaseException | None"], object]
"""Takes a sample's result: ``(reading, None)``, or ``(None, error)`` if the sampler raised."""


class _Job:
    def __init__(self, function: Callable[[], object]) -> None:
        self.function = function
        self.done = threading.Event()
        self.value: object = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._reply: Reply | None = None

    def run(self) -> None:
        try:
            self.value = self.function()
        except BaseException as error:  # handed to the reply, or to ``prefetched``
            self.error = error
        with self._lock:
            self.done.set()
            reply = self._reply
        if reply is not None:
            reply(self.value, self.error)

    def reply_to(self, reply: Reply) -> None:
        """Hand the result to ``reply`` once it is in: now, in this thread, if it already is."""
        with self._lock:
            if not self.done.is_set():
                self._reply = reply
                return
        reply(self.value, self.error)


class SamplerThread:
    """One daemon thread that runs one source's samples, one at a time, in order.

    Keeping each sampler on one thread suits samplers that are not thread-safe
    (``HostSampler``). The app never asks for a sample before the last one has
    answered, so samples never queue up behind a hung one.

    A first sample may be started early with :meth:`prefetch` (before Textual has
    even loaded); the first :meth:`sample` then takes that sample's result instead
    of taking another.
    """

    def __init__(self, name: str) -> None:
        """Name the thread (it starts on the first sample).

        Args:
            name: Shown in thread dumps, e.g. ``gputui-nvml``.
        """
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._early: _Job | None = None

    def prefetch(self, function: Callable[[], object]) -> None:
        """Start ``function`` now; the next :meth:`sample` (whatever it asks) gets its result.

        Args:
            function: The first sample, e.g. a sampler's ``sample``.
        """
        self._early = self._submit(function)

    def prefetched(self) -> tuple[bool, object]:
        """The prefetched sample if it has finished without error: ``(True, value)``.

        Otherwise ``(False, None)``, and the next :meth:`sample` gets its result (or
        its error). A sample taken here is not handed over again.
        """
        job = self._early
        if job is None or not job.done.is_set() or job.error is not None:
            return False, None
        self._early = None
        return True, job.value

    def sample(self, function: Callable[[], object], reply: Reply) -> None:
        """Run ``function`` on the thread, then call ``reply`` with its result, on the thread.

        Returns at once. After :meth:`close`, nothing runs and ``reply`` is never called.

        Args:
            function: The blocking call, typically a sampler's ``sample``.
            reply: Called as ``reply(value, None)``, or ``reply(None, error)`` if
                ``function`` raised. Called in this thread instead when the prefetched
                sample had already finished.
        """
        if self._closed:
            return
        job, self._early = self._early or self._submit(function), None
        job.reply_to(reply)

    def call(self, function: Callable[[], object], reply: Reply) -> None:
        """Run ``function`` on the thread after what is queued, then ``reply`` with its
        result, as :meth:`sample` does but never taking the prefetched sample: a question
        other than a sample (the topology) for the same sampler, on its thread."""
        if self._closed:
            return
        self._submit(function).reply_to(reply)

    def _submit(self, function: Callable[[], object]) -> _Job:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        job = _Job(function)
        self._jobs.put(job)
        return job

    def close(self, finalizer: Callable[[], object] | None = None) -> None:
        """Let the thread end once it is idle (at once, unless a sample is still hanging).

        Args:
            finalizer: Run on the thread before it ends, e.g. the sampler's ``close``;
                errors from it are ignored.
        """
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            return
        if finalizer is not None:
            self._jobs.put(_Job(finalizer))
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
            job.run()


NVML_TIMEOUT_S = 5.0
"""How long one NVML sample outside the monitor (``gputui snapshot``, ``doctor``, ``bench``)
waits for the driver before it reports what did not answer."""


def sample_nvml(
    timeout_s: float = NVML_TIMEOUT_S, *, sampler: NvmlSampler | None = None
) -> NvmlReading:
    """One NVML sample on a sampler thread of its own, waited for at most ``timeout_s``.

    Past it, what the sampler can say of the sample (:meth:`NvmlSampler.hung_reading`): the
    GPUs it has read are kept, the others are ``hung`` with the call that has not returned.
    That call is left to its thread, and the sample stops there should the driver answer.

    Args:
        timeout_s: How long to wait for the sample.
        sampler: The sampler (default: a new one on the system's library, closed once it
            has answered).
    """
    own = sampler is None
    if sampler is None:
        from gputui.telemetry.nvml import NvmlSampler

        sampler = NvmlSampler()
    answered, value = _within(sampler.sample, timeout_s)
    if not answered:
        reading = sampler.hung_reading()
        sampler.stop()
        return reading
    if own:
        sampler.close()
    assert isinstance(value, NvmlReading)
    return value


def _within(function: Callable[[], object], timeout_s: float) -> tuple[bool, object]:
    """Run ``function`` on a sampler thread of its own and wait at most ``timeout_s`` for it:
    ``(True, its value)``, or ``(False, None)`` past the deadline (it goes on, on its thread).

    Raises:
        BaseException: What ``function`` raised.
    """
    answer: queue.SimpleQueue[tuple[object, BaseException | None]] = queue.SimpleQueue()
    thread = SamplerThread("gputui-nvml")
    thread.sample(function, lambda value, error: answer.put((value, error)))
    thread.close()  # the thread ends once the call has, if ever
    try:
        value, error = answer.get(timeout=max(timeout_s, 0.0))
    except queue.Empty:
        return False, None
    if error is not None:
        raise error
    return True, value


def read_nvml_topology(
    timeout_s: float = NVML_TIMEOUT_S, *, sampler: NvmlSampler | None = None
) -> GpuTopology:
    """The GPUs' topology (:meth:`NvmlSampler.topology`) read on a sampler thread of its own,
    waited for at most ``timeout_s``: past it, the topology's error names the call that has
    not returned, which is left to its thread.

    Args:
        timeout_s: How long to wait.
        sampler: The sampler (default: a new one on the system's library, closed once it
            has answered).
    """
    own = sampler is None
    if sampler is None:
        from gputui.telemetry.nvml import NvmlSampler

        sampler = NvmlSampler()
    answered, value = _within(sampler.topology, timeout_s)
    if not answered:
        from gputui.telemetry.nvml import describe_hung_call

        call = sampler.pending_call()
        sampler.stop()
        why = (
            describe_hung_call(call, time.monotonic())
            if call is not None
            else "NVML had not answered by the deadline."
        )
        return GpuTopology((), (), error=why)
    if own:
        sampler.close()
    assert isinstance(value, GpuTopology)
    return value
