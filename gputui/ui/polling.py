"""Samplers as the app sees them, and the thread that calls a sampler that may hang.

No Textual here: this is the plain-Python half of polling. The app's thread
workers call :meth:`SamplerThread.call`, which runs ``sample()`` on a daemon
thread of its own and waits for it while watching for cancellation. A driver call
that hangs for minutes therefore holds only that daemon thread: the app can still
quit (Python does not wait for daemon threads at exit, but it does wait for the
worker threads of asyncio's executor).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from gputui.telemetry.readings import CpuReading, MpsReading, NvmlReading

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

CHECK_CANCELLED_S = 0.1
"""How often a waiting worker checks whether the app is closing."""


class Sampler(Protocol[R_co]):
    """Anything with a blocking ``sample()`` that returns a reading."""

    def sample(self) -> R_co:
        """Take one reading (may block; must be called off the event loop)."""
        ...


@dataclass(frozen=True, slots=True)
class Samplers:
    """The three sources the monitor polls; production uses :meth:`real`, tests inject fakes."""

    cpu: Sampler[CpuReading]
    """The host: CPUs, memory, gputui's own footprint."""
    nvml: Sampler[NvmlReading]
    """Every NVIDIA GPU (may hang on a bad driver)."""
    mps: Sampler[MpsReading]
    """Apple MPS."""

    @classmethod
    def real(cls) -> Samplers:
        """The real samplers, built on first use inside their threads.

        Building them imports psutil and the NVML bindings and may initialise NVML
        (which can hang): none of that runs on the event loop or delays the first frame.
        """
        return cls(
            cpu=LazySampler(_host_sampler),
            nvml=LazySampler(_nvml_sampler),
            mps=LazySampler(_mps_sampler),
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

    def sample(self) -> R:
        """Build the sampler if it is not built yet, then take one reading."""
        if self._sampler is None:
            self._sampler = self._factory()
        return self._sampler.sample()

    def close(self) -> None:
        """Close the sampler if it was built and has a ``close()`` (NVML does)."""
        close_sampler(self._sampler)


def close_sampler(sampler: object) -> None:
    """Call ``sampler.close()`` if it has one; samplers need not."""
    close = getattr(sampler, "close", None)
    if callable(close):
        close()


def _host_sampler() -> Sampler[CpuReading]:
    from gputui.telemetry.host import HostSampler

    return HostSampler()


def _nvml_sampler() -> Sampler[NvmlReading]:
    from gputui.telemetry.nvml import NvmlSampler

    return NvmlSampler()


def _mps_sampler() -> Sampler[MpsReading]:
    from gputui.telemetry.apple import MpsSampler

    return MpsSampler()


SOURCES = ("cpu", "nvml", "mps")
"""The sources the app polls, by their name in :class:`Samplers`."""


@dataclass(frozen=True)
class HeadStart:
    """The samplers and their threads, with each source's first sample already under way.

    Made before Textual is imported (see ``gputui.cli``): the first readings are taken
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
        samplers = samplers if samplers is not None else Samplers.real()
        threads = {source: SamplerThread(f"gputui-{source}") for source in SOURCES}
        for source, thread in threads.items():
            thread.prefetch(getattr(samplers, source).sample)
        return cls(samplers, threads)


class Abandoned(Exception):
    """The caller stopped waiting for a sample (the app is closing)."""


class _Job(Generic[R]):
    def __init__(self, function: Callable[[], R]) -> None:
        self.function = function
        self.done = threading.Event()
        self.value: R | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.function()
        except BaseException as error:  # handed back to the waiting caller
            self.error = error
        finally:
            self.done.set()


class SamplerThread:
    """One daemon thread that runs one source's samples, one at a time, in order.

    Keeping each sampler on one thread suits samplers that are not thread-safe
    (``HostSampler``). Calls must not overlap; the app never starts a poll before
    the last one finished.

    A first sample may be started early with :meth:`prefetch` (before Textual has
    even loaded); the first :meth:`call` then waits for that sample instead of
    taking another.
    """

    def __init__(self, name: str) -> None:
        """Name the thread (it starts on the first call).

        Args:
            name: Shown in thread dumps, e.g. ``gputui-nvml``.
        """
        self._name = name
        self._jobs: queue.SimpleQueue[_Job[object] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._early: _Job[object] | None = None

    def prefetch(self, function: Callable[[], object]) -> None:
        """Start ``function`` now; the next :meth:`call` (whatever it asks) returns its result.

        Args:
            function: The first sample, e.g. a sampler's ``sample``.
        """
        self._early = self._submit(function)

    def prefetched(self) -> tuple[bool, object]:
        """The prefetched sample if it has finished without error: ``(True, value)``.

        Otherwise ``(False, None)``, and the next :meth:`call` waits for it (or raises
        its error). A sample taken here is not returned again.
        """
        job = self._early
        if job is None or not job.done.is_set() or job.error is not None:
            return False, None
        self._early = None
        return True, job.value

    def call(
        self,
        function: Callable[[], R],
        cancelled: Callable[[], bool],
        *,
        check_s: float = CHECK_CANCELLED_S,
    ) -> R:
        """Run ``function`` on the daemon thread and wait for its result.

        Args:
            function: The blocking call, typically a sampler's ``sample``.
            cancelled: Polled every ``check_s`` while waiting; when it returns True
                the wait ends and the call is left to finish (or hang) on its own.
            check_s: Seconds between checks of ``cancelled``.

        Returns:
            What ``function`` returned.

        Raises:
            Abandoned: ``cancelled()`` became true before ``function`` returned, or
                the thread was closed.
            Exception: Whatever ``function`` raised.
        """
        if self._closed:
            raise Abandoned
        job, self._early = self._early or self._submit(function), None
        while not job.done.wait(check_s):
            if cancelled():
                raise Abandoned
        if job.error is not None:
            raise job.error
        return job.value  # type: ignore[return-value]

    def _submit(self, function: Callable[[], R]) -> _Job[R]:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        job: _Job[R] = _Job(function)
        self._jobs.put(job)  # type: ignore[arg-type]
        return job

    def close(self, finalizer: Callable[[], object] | None = None) -> None:
        """Let the thread end once it is idle (at once, unless a call is still hanging).

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

    def join(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a closed thread to end; True when it has."""
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            job.run()
