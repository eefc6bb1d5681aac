"""The readings ``gputui serve`` serves: taken on threads of their own, read without waiting.

Each source (host, NVML, MPS, AMD and Intel) is sampled on its own
:class:`~gputui.telemetry.polling.SamplerThread` at a fixed pace, but for a source whose
sample cannot block (the host's kernel counters, MPS off macOS, AMD and Intel where there is
no such card): that one is taken on the thread that polls, which wakes no other thread for
it. A source whose last sample has not answered yet (a hung driver call) is not asked again
until it does, so samples never queue up behind it and the other sources keep their pace. A
scrape reads :meth:`Poller.latest`: it never waits for a sample. Once an NVML call has held
the readings back until they are stale, it also says what NVML is stuck in
(:attr:`Latest.hang`), as the monitor does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from gputui.telemetry.nvml import is_stale
from gputui.telemetry.polling import (
    SOURCES,
    Samplers,
    SamplerThread,
    close_sampler,
    hung_reading,
    never_blocks,
    pending_call,
)
from gputui.telemetry.readings import (
    CpuReading,
    DrmReading,
    MpsReading,
    NvmlReading,
    Snapshot,
)

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 2.0
"""How long :meth:`Poller.close` waits for the samplers to finish (a hung one is left behind)."""


@dataclass(frozen=True, slots=True)
class Latest:
    """The latest reading of each source; ``None`` until that source has answered once."""

    started_at: float
    """When sampling started (``time.monotonic()``); a reading not in yet is as old as this."""
    cpu: CpuReading | None = None
    """The host."""
    nvml: NvmlReading | None = None
    """Every NVIDIA GPU."""
    mps: MpsReading | None = None
    """Apple MPS."""
    drm: DrmReading | None = None
    """Every AMD and Intel GPU."""
    hang: NvmlReading | None = None
    """While an NVML call holds the readings back past staleness: every GPU NVML counted,
    ``hung`` (those known lost or unreachable stay so), and the call in the status
    (``hung_call``, ``hung_seconds``); NVML unavailable when the call is ``nvmlInit``. ``None``
    otherwise. ``nvml`` keeps the last reading that came, and its time."""

    def age_s(self, now: float) -> float:
        """Seconds since the oldest of the readings was taken (since the start, for a missing one).

        Args:
            now: The current ``time.monotonic()``.
        """
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


class Poller:
    """Samples every source every ``interval_s`` seconds, each on its own daemon thread.

    Example::

        poller = Poller(Samplers.real(), interval_s=1.0)
        poller.start()
        poller.latest()  # from any thread, at any time: never waits
        poller.close()  # samplers closed on their threads (NVML shut down) after their last sample
    """

    def __init__(
        self,
        samplers: Samplers,
        interval_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Prepare the threads; nothing is sampled before :meth:`start`.

        Args:
            samplers: The sources (``Samplers.real()``, which builds them on their threads).
            interval_s: Seconds between the starts of two samples of a source.
            clock: Monotonic clock for the pace and the start time.
        """
        self._samplers = samplers
        self._interval_s = interval_s
        self._clock = clock
        self._threads = {source: SamplerThread(f"gputui-serve-{source}") for source in SOURCES}
        self._lock = threading.Lock()
        self._busy: set[str] = set()
        self._failed: set[str] = set()
        self._latest = Latest(started_at=clock())
        self._stop = threading.Event()
        self._pacer: threading.Thread | None = None

    @property
    def interval_s(self) -> float:
        """Seconds between samples."""
        return self._interval_s

    def latest(self) -> Latest:
        """The latest readings, with :attr:`Latest.hang` while NVML is stuck in a call; safe
        from any thread, and never waits."""
        latest = self._latest
        nvml = self._samplers.nvml
        if pending_call(nvml) is None:
            return latest
        taken_at = latest.nvml.taken_at if latest.nvml is not None else latest.started_at
        if not is_stale(taken_at, self._clock(), self._interval_s):
            return latest
        hang = hung_reading(nvml, keep_read=False)
        return replace(latest, hang=hang) if isinstance(hang, NvmlReading) else latest

    def start(self, *, paced: bool = True) -> None:
        """Take the first samples now, then one every ``interval_s`` on a thread of its own.

        Args:
            paced: Poll on a pacing thread; ``False``: the caller calls :meth:`poll` every
                ``interval_s`` itself (the recorder, whose loop wakes then anyway).
        """
        self._latest = Latest(started_at=self._clock())
        if not paced:
            return
        self._pacer = threading.Thread(target=self._pace, name="gputui-serve-pacer", daemon=True)
        self._pacer.start()

    def poll(self) -> None:
        """Ask every source that is not still answering for a sample; returns at once, but
        for the samples that cannot block (:func:`~gputui.telemetry.polling.never_blocks`),
        taken here before any source's thread is woken (which would wait for the GIL while
        they run)."""
        threaded = []
        for source in SOURCES:
            with self._lock:
                if source in self._busy:
                    continue
                self._busy.add(source)
            sampler = getattr(self._samplers, source)
            if not never_blocks(sampler):
                threaded.append((source, sampler))
                continue
            try:
                reading = sampler.sample()
            except Exception as error:  # as a sampler thread hands it over
                self._answered(source, None, error)
            else:
                self._answered(source, reading, None)
        for source, sampler in threaded:
            self._threads[source].sample(sampler.sample, partial(self._answered, source))

    def close(self, wait_s: float = CLOSE_WAIT_S) -> bool:
        """Stop sampling, then close each sampler on its thread once its last sample is in.

        NVML is shut down only after the sample in flight has finished; a sampler that stays
        hung is left to the process's exit (its thread is a daemon).

        Args:
            wait_s: How long to wait for the threads to end.

        Returns:
            True when every thread ended in time.
        """
        self._stop.set()
        if self._pacer is not None:
            self._pacer.join()
        for source, thread in self._threads.items():
            sampler = getattr(self._samplers, source)
            if thread.started:
                thread.close(finalizer=partial(close_sampler, sampler))
            else:  # only ever sampled here
                thread.close()
                close_sampler(sampler)
        deadline = self._clock() + wait_s
        return all(
            thread.join(max(0.0, deadline - self._clock())) for thread in self._threads.values()
        )

    def _pace(self) -> None:
        next_at = self._clock()
        while True:
            self.poll()
            next_at += self._interval_s
            now = self._clock()
            next_at = max(next_at, now)  # fell behind: go on from now, without a burst to catch up
            if self._stop.wait(next_at - now):
                return

    def _answered(self, source: str, reading: object, error: BaseException | None) -> None:
        with self._lock:
            self._busy.discard(source)
            if error is None:
                self._latest = replace(self._latest, **{source: reading})  # type: ignore[arg-type]  # source names one of its fields
                return
            first = source not in self._failed
            self._failed.add(source)
        if first:  # the reading stays as it was; gputui_sample_age_seconds shows how old
            log.warning("the %s sampler failed (%s); serving its last reading", source, error)
