"""Read each host's ``/metrics`` over HTTP, every host on a thread of its own.

A host that is slow, refuses, or accepts and never answers costs only its own thread: the
others are read on time, and it is marked down with the reason once its timeout passes.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

from gputui.fleet.exporters import NotAnExporter, parse_text, read_samples
from gputui.fleet.hosts import HostReading
from gputui.fleet.targets import DEFAULT_TIMEOUT_S, Target

MAX_BODY_BYTES = 16 * 1024**2
"""The largest exposition read (a host with thousands of processes stays far below)."""

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Hosts are read directly, as Prometheus reads them: no proxy from the environment."""

_ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
"""Ask for the classic text format (dcgm-exporter and prometheus_client both speak it)."""


def scrape(
    target: Target, timeout_s: float, clock: Callable[[], float] = time.monotonic
) -> HostReading:
    """Read ``target`` once; never raises for a network or exporter failure."""
    started = clock()
    try:
        text = _fetch(target.url, timeout_s)
        exposition = read_samples(parse_text(text))
    except NotAnExporter as error:
        return HostReading(target.name, up=False, error=str(error))
    except Exception as error:  # a network error of any kind: the host is down, not gputui
        return HostReading(target.name, up=False, error=in_words(error, timeout_s))
    return HostReading(
        target.name,
        up=True,
        source=exposition.source,
        gpus=exposition.gpus,
        taken_at=started - exposition.sample_age_s,
    )


def scrape_all(
    targets: Sequence[Target], timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[HostReading]:
    """Read every target at once; returns in ``targets``' order after at most ``timeout_s``.

    A host still not answered at the deadline is marked down ("no answer within ...");
    its thread is a daemon and is left to its socket timeout.
    """
    results: list[HostReading | None] = [None] * len(targets)

    def read(slot: int, target: Target) -> None:
        results[slot] = scrape(target, timeout_s)

    threads = [
        threading.Thread(
            target=read, args=(slot, target), name=f"gputui-scrape-{slot}", daemon=True
        )
        for slot, target in enumerate(targets)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s + 0.5  # the socket's own timeout ends first
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [
        result or HostReading(target.name, up=False, error=_no_answer(timeout_s))
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
        """Ask every thread to end (a thread inside a hung read ends at its timeout)."""
        self._stop.set()

    def latest(self) -> list[HostReading]:
        """Every host's latest state, in the order they were named; never waits on a host."""
        with self._lock:
            return [self._latest[target.name] for target in self._targets]

    def _run(self, target: Target) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            reading = self._read(target, self._timeout_s)
            with self._lock:
                before = self._latest[target.name]
                if not reading.up and before.taken_at is not None:
                    reading = before.failed(reading.error or "no answer")
                self._latest[target.name] = reading
                self.generation += 1
            self._stop.wait(max(0.0, started + self._interval_s - time.monotonic()))


def _fetch(url: str, timeout_s: float) -> str:
    request = urllib.request.Request(url, headers={"Accept": _ACCEPT, "User-Agent": "gputui"})
    with OPENER.open(request, timeout=timeout_s) as response:
        body = response.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise ValueError(f"the answer is larger than {MAX_BODY_BYTES // 1024**2} MiB")
    return body.decode("utf-8", errors="replace")


def _no_answer(timeout_s: float) -> str:
    return f"no answer within {timeout_s:g} s"


def in_words(error: BaseException, timeout_s: float) -> str:
    """A failed read in one line a user can act on."""
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}: is this the exporter's /metrics address?"
    reason = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return _no_answer(timeout_s)
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused: nothing listens on that port"
    if isinstance(reason, socket.gaierror):
        return "unknown host name"
    if isinstance(reason, ssl.SSLError):
        return f"TLS failed: {reason.reason or reason}"
    if isinstance(reason, (ConnectionResetError, http.client.RemoteDisconnected)):
        return "the host closed the connection without answering"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror[0].lower() + reason.strerror[1:]
    return str(reason) or type(reason).__name__
