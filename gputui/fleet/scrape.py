"""Read each host's ``/metrics`` over HTTP: once (``snapshot --hosts``), or every interval
(:class:`FleetPoller`).

A host that is slow, refuses, trickles, or accepts and never answers costs only its own
thread: the others are read on time, and it is marked down with the reason once its deadline
passes. The deadline covers the whole exchange (:mod:`gputui.fleet.fetch`); what the host sent
is parsed after it, so a big exposition is not taken for a host that did not answer.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence

from gputui.fleet.exporters import Exposition, NotAnExporter, read_samples
from gputui.fleet.exposition import ExpositionParser
from gputui.fleet.fetch import MIB, Deadline, FetchError, StatusError, fetch, no_answer
from gputui.fleet.hosts import NOT_READ, HostReading, HungSince
from gputui.fleet.targets import DEFAULT_TIMEOUT_S, Target
from gputui.format import exception_line

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * MIB
"""The largest exposition read (a host with thousands of processes stays far below)."""

_HEADERS = {"Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1"}
"""Ask for the classic text format (dcgm-exporter and prometheus_client both speak it)."""

_GRACE_S = 0.5
"""How long :func:`scrape_all` waits past the deadline for a host's thread to say so itself."""

PACE_S = 0.02
"""The shortest wait between two starts of reads: hosts due closer together start together."""


class HostScraper:
    """Reads one host, again and again; one read at a time.

    An answer the same as the last (by its length and hash) is not parsed again: its readings
    are the last ones, taken anew. A new answer is parsed with the label sets of the last.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self._parser = ExpositionParser()
        self._last: tuple[tuple[int, int], Exposition | str] | None = None
        """The last answer's length and hash (Python's, keyed anew in each process: a host
        cannot aim at a match), and what it said (its readings, or why it had none)."""

    def scrape(
        self, timeout_s: float, *, exchanged: Callable[[], object] = lambda: None
    ) -> HostReading:
        """Read the host once: its answer within ``timeout_s``, then parsed; never raises for
        a network or exporter failure. ``exchanged`` is called once the network is done with."""
        started = time.monotonic()
        try:
            answer = fetch_exposition(self.target, Deadline(timeout_s))
        finally:
            exchanged()
        if isinstance(answer, HostReading):
            return answer
        return self.read(answer, started)

    def read(self, body: bytes, taken_at: float) -> HostReading:
        """The host's readings from its answer ``body`` (``taken_at``: when it was asked)."""
        name = self.target.name
        digest = len(body), hash(body)
        if self._last is not None and self._last[0] == digest:
            exposition = self._last[1]
        else:
            try:
                text = body.decode("utf-8", errors="replace")
                exposition = read_samples(self._parser.parse(text))
            except NotAnExporter as error:
                exposition = str(error)
                if body.lstrip()[:1] in (b"{", b"["):  # gputui serve's /snapshot, say
                    exposition = (
                        "this answers JSON, not a Prometheus exposition: give the "
                        "exporter's /metrics address"
                    )
            except Exception as error:  # a fault of gputui's own: this host only
                log.exception("reading the answer of %s failed", name)
                self._last = None
                return HostReading(name, up=False, error=exception_line(error))
            self._last = digest, exposition
        if isinstance(exposition, str):
            return HostReading(name, up=False, error=exposition)
        return HostReading.answered(name, exposition, taken_at)


def scrape(
    target: Target, timeout_s: float, *, exchanged: Callable[[], object] = lambda: None
) -> HostReading:
    """Read ``target`` once (see :meth:`HostScraper.scrape`)."""
    return HostScraper(target).scrape(timeout_s, exchanged=exchanged)


def fetch_exposition(target: Target, deadline: Deadline) -> bytes | HostReading:
    """``target``'s answer, or the host marked down with why there is none."""
    try:
        return fetch(target.url, deadline, max_bytes=MAX_BODY_BYTES, headers=_HEADERS)
    except StatusError as error:
        hint = "" if 300 <= error.status < 400 else ": is this the exporter's /metrics address?"
        return HostReading(target.name, up=False, error=f"{error}{hint}")
    except FetchError as error:
        return HostReading(target.name, up=False, error=str(error))


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
    """Reads every host every ``interval_s`` seconds, their reads spread across the interval.

    Host ``n`` of ``N`` is read ``n / N`` of the way into each interval, so the reads come in
    a steady stream rather than all at once, and a few threads read them all; a host still
    being read when its turn comes again is read at its turn after. A read that hangs holds
    only its own thread (:class:`ReadThreads` starts another for the others). :meth:`latest`
    returns at once with each host's latest state; a host that stops answering keeps its
    last readings, marked down with the reason and their age.
    """

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        interval_s: float,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._targets = tuple(targets)
        self._scrapers = tuple(HostScraper(target) for target in self._targets)
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._lock = threading.Condition(threading.Lock())
        self._latest = {
            target.name: HostReading(target.name, up=False, error=NOT_READ)
            for target in self._targets
        }
        self._reading: set[int] = set()
        """The hosts (by their place) being read now."""
        self._unread = set(range(len(self._targets)))
        """The hosts not read yet in this round."""
        self._stop = threading.Event()
        self._hung = HungSince()
        self._threads = ReadThreads(len(self._targets), name="gputui-host")
        self.error: str | None = None
        """Always ``None``: each host's own error is in its reading (see PrometheusPoller)."""
        self.generation = 0
        """Grows by one each time a host's state changes (a view redraws when it moved)."""
        self.rounds = 0
        """How many rounds are over: a round is over once every host has been read (whether
        it answered or not) since the last one was."""

    def start(self) -> None:
        """Start reading: host ``n`` of ``N`` in ``n / N`` of an interval, then every
        interval."""
        if self._targets:
            threading.Thread(target=self._pace, name="gputui-fleet-pace", daemon=True).start()

    def stop(self) -> None:
        """Stop starting reads (one under way ends at its deadline), and let the threads end."""
        self._stop.set()
        self._threads.close()

    def latest(self) -> list[HostReading]:
        """Every host's latest state, in the order they were named; never waits on a host."""
        with self._lock:
            return [self._latest[target.name] for target in self._targets]

    def wait_rounds(self, count: int, timeout_s: float | None = None) -> bool:
        """Wait until :attr:`rounds` is at least ``count``; ``False`` if ``timeout_s`` passed
        first."""
        with self._lock:
            return self._lock.wait_for(lambda: self.rounds >= count, timeout_s)

    def _pace(self) -> None:
        """Start each host's read at its turn: host ``n`` of ``N`` at ``n / N`` of each
        interval. Turns missed by more than an interval (this process was stopped) are not
        made up for in a burst."""
        count = len(self._targets)
        step_s = self._interval_s / count
        began = time.monotonic()
        turn = 0
        while not self._stop.is_set():
            now = time.monotonic()
            if now - (began + turn * step_s) > self._interval_s:
                began = now - turn * step_s
            self._threads.keep_up()  # one more thread if reads started at the last turn wait
            while began + turn * step_s <= now:
                self._start_read(turn % count)
                turn += 1
            wait_s = max(PACE_S, began + turn * step_s - now)
            if self._stop.wait(wait_s):
                return

    def _start_read(self, slot: int) -> None:
        with self._lock:
            if slot in self._reading:
                return
            self._reading.add(slot)
        self._threads.run(lambda: self._read(slot))

    def _read(self, slot: int) -> None:
        target = self._targets[slot]
        try:
            reading = self._scrapers[slot].scrape(self._timeout_s)
        except Exception as error:  # a fault of gputui's own: this host only, and again
            log.exception("reading %s failed", target.name)
            reading = HostReading(target.name, up=False, error=exception_line(error))
        with self._lock:
            before = self._latest[target.name]
            if not reading.up and before.taken_at is not None:
                reading = before.failed(reading.error or "no answer")
            self._latest[target.name] = self._hung.track(reading, time.monotonic())
            self.generation += 1
            self._reading.discard(slot)
            self._unread.discard(slot)
            if not self._unread:
                self._unread.update(range(len(self._targets)))
                self.rounds += 1
                self._lock.notify_all()


class ReadThreads:
    """Daemon threads that run reads one after another, as few as keep up: one to start
    with, and one more each time :meth:`keep_up` finds a read still waiting, the others
    busy (a host that never answers, or a name slow to resolve, holds its thread until its
    deadline). Few threads, few hand-overs of the interpreter between them. Daemons:
    quitting never waits for a read."""

    def __init__(self, most: int, *, name: str) -> None:
        self._most = most
        self._name = name
        self._jobs: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = 0
        self._closed = False

    def run(self, job: Callable[[], object]) -> None:
        """Run ``job`` on the next thread free; nothing once closed."""
        with self._lock:
            if self._closed:
                return
            self._jobs.put(job)
            if self._started == 0:
                self._start()

    def keep_up(self) -> None:
        """Start one more thread (up to ``most``) if a read given before is still waiting."""
        with self._lock:
            if not self._closed and not self._jobs.empty() and self._started < self._most:
                self._start()

    def close(self) -> None:
        """Let every thread end once it is free (reads already given run first)."""
        with self._lock:
            self._closed = True
            for _ in range(self._started):
                self._jobs.put(None)

    def _start(self) -> None:
        self._started += 1
        name = f"{self._name}-{self._started}"
        threading.Thread(target=self._work, name=name, daemon=True).start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()
