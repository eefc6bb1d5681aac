"""Read each host's ``/metrics`` over HTTP, every host on a thread of its own.

A host that is slow, refuses, trickles, or accepts and never answers costs only its own
thread: the others are read on time, and it is marked down with the reason once its deadline
passes. The deadline covers the whole exchange (:mod:`gputui.fleet.fetch`); what the host sent
is parsed after it, so a big exposition is not taken for a host that did not answer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from gputui.fleet.exporters import NotAnExporter, parse_text, read_samples
from gputui.fleet.fetch import MIB, Deadline, FetchError, StatusError, fetch, no_answer
from gputui.fleet.hosts import HostReading, HungSince
from gputui.fleet.targets import DEFAULT_TIMEOUT_S, Target
from gputui.format import exception_line

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * MIB
"""The largest exposition read (a host with thousands of processes stays far below)."""

_HEADERS = {"Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1"}
"""Ask for the classic text format (dcgm-exporter and prometheus_client both speak it)."""

_GRACE_S = 0.5
"""How long :func:`scrape_all` waits past the deadline for a host's thread to say so itself."""


def scrape(
    target: Target,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    *,
    exchanged: Callable[[], object] = lambda: None,
) -> HostReading:
    """Read ``target`` once: its answer within ``timeout_s``, then parsed; never raises for
    a network or exporter failure. ``exchanged`` is called once the network is done with."""
    started = clock()
    try:
        answer = fetch_exposition(target, Deadline(timeout_s, clock))
    finally:
        exchanged()
    if isinstance(answer, HostReading):
        return answer
    return read_exposition(target, answer, started)


def fetch_exposition(target: Target, deadline: Deadline) -> bytes | HostReading:
    """``target``'s answer, or the host marked down with why there is none."""
    try:
        return fetch(target.url, deadline, max_bytes=MAX_BODY_BYTES, headers=_HEADERS)
    except StatusError as error:
        hint = "" if 300 <= error.status < 400 else ": is this the exporter's /metrics address?"
        return HostReading(target.name, up=False, error=f"{error}{hint}")
    except FetchError as error:
        return HostReading(target.name, up=False, error=str(error))


def read_exposition(target: Target, body: bytes, taken_at: float) -> HostReading:
    """The host's readings from its answer (``taken_at``: when it was asked)."""
    try:
        exposition = read_samples(parse_text(body.decode("utf-8", errors="replace")))
    except NotAnExporter as error:
        return HostReading(target.name, up=False, error=str(error))
    except Exception as error:  # a fault of gputui's own: this host only
        log.exception("reading the answer of %s failed", target.name)
        return HostReading(target.name, up=False, error=exception_line(error))
    return HostReading(
        target.name,
        up=True,
        source=exposition.source,
        gpus=exposition.gpus,
        taken_at=taken_at - exposition.sample_age_s,
        notes=exposition.notes,
    )


def scrape_all(
    targets: Sequence[Target], timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[HostReading]:
    """Read every target at once; returns in ``targets``' order.

    Each host has ``timeout_s`` to answer; what it sent is then parsed, however long that
    takes (the series a host may send are capped). A host whose thread has not finished its
    exchange by the deadline (a name that takes that long to resolve) is marked down ("no
    answer within ..."); its thread is a daemon and is left to finish on its own.
    """
    results: list[HostReading | None] = [None] * len(targets)
    exchanged = [threading.Event() for _ in targets]

    def read(slot: int, target: Target) -> None:
        results[slot] = scrape(target, timeout_s, exchanged=exchanged[slot].set)

    threads = [
        threading.Thread(
            target=read, args=(slot, target), name=f"gputui-scrape-{slot}", daemon=True
        )
        for slot, target in enumerate(targets)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s + _GRACE_S
    for thread, done in zip(threads, exchanged, strict=True):
        if done.wait(max(0.0, deadline - time.monotonic())):
            thread.join()  # parsing what it sent: bounded by the series cap, not the network
    return [
        result or HostReading(target.name, up=False, error=no_answer(timeout_s))
        for target, result in zip(targets, results, strict=True)
    ]


class FleetPoller:
    """Reads every host every ``interval_s`` seconds, each on its own daemon thread.

    :meth:`latest` returns at once with each host's latest state; a host that stops
    answering keeps its last readings, marked down with the reason and their age.
    """

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        interval_s: float,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        read: Callable[[Target, float], HostReading] = scrape,
    ) -> None:
        self._targets = tuple(targets)
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._read = read
        self._lock = threading.Lock()
        self._latest = {
            target.name: HostReading(target.name, up=False, error="not read yet")
            for target in self._targets
        }
        self._stop = threading.Event()
        self._hung = HungSince()
        self._threads: list[threading.Thread] = []
        self.error: str | None = None
        """Always ``None``: each host's own error is in its reading (see PrometheusPoller)."""
        self.generation = 0
        """Grows by one each time a host's state changes (a view redraws when it moved)."""

    def start(self) -> None:
        """Start one thread a host; each reads its host at once, then every interval."""
        for slot, target in enumerate(self._targets):
            thread = threading.Thread(
                target=self._run, args=(target,), name=f"gputui-host-{slot}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Ask every thread to end (a thread inside a read ends at its deadline)."""
        self._stop.set()

    def latest(self) -> list[HostReading]:
        """Every host's latest state, in the order they were named; never waits on a host."""
        with self._lock:
            return [self._latest[target.name] for target in self._targets]

    def _run(self, target: Target) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                reading = self._read(target, self._timeout_s)
            except Exception as error:  # a fault of gputui's own: this host only, and again
                log.exception("reading %s failed", target.name)
                reading = HostReading(target.name, up=False, error=exception_line(error))
            with self._lock:
                before = self._latest[target.name]
                if not reading.up and before.taken_at is not None:
                    reading = before.failed(reading.error or "no answer")
                self._latest[target.name] = self._hung.track(reading, time.monotonic())
                self.generation += 1
            self._stop.wait(max(0.0, started + self._interval_s - time.monotonic()))
