"""Read a fleet's GPUs from a Prometheus server that already scrapes its exporters.

Instant queries through Prometheus's HTTP API (``/api/v1/query``): every GPU series
gputui can read, and ``up`` with its timestamp. Hosts are Prometheus's ``instance``s: each
one with GPU series, and each down one of a job that has GPU series elsewhere (a GPU host
that stopped answering). Their age is how long ago Prometheus last scraped them.

The queries share one deadline and each answer is read up to a cap, as a host's exposition
is (:mod:`gputui.fleet.fetch`); an answer that is not the API's documented shape is one line
(:class:`PrometheusError`), and each host's series are checked as a scrape's are.
"""

from __future__ import annotations

import json
import logging
import reprlib
import threading
import time
import urllib.parse
from collections import defaultdict
from typing import Any

from gputui.fleet.exporters import MAX_SERIES, NotAnExporter, Sample, read_samples
from gputui.fleet.fetch import MIB, Deadline, FetchError, fetch
from gputui.fleet.hosts import HostReading, HungSince
from gputui.fleet.targets import DEFAULT_TIMEOUT_S
from gputui.format import exception_line, one_line

log = logging.getLogger(__name__)

GPU_SERIES_QUERY = '{__name__=~"gputui_.+|DCGM_FI_DEV_.+|gpu_.+_(Percentage|MiB|MiBps|C|W|MHz)"}'
"""Every series :func:`~gputui.fleet.exporters.read_samples` can read."""

UP_QUERY = "timestamp(up)"
"""When each target was last scraped; joined with ``up`` for whether it answered."""

MAX_ANSWER_BYTES = 64 * MIB
"""The largest answer read: one holds every GPU host's series (a host's scrape: 16 MiB)."""

MAX_ANSWER_SERIES = 4 * MAX_SERIES
"""The most series one answer may hold (a host may send :data:`MAX_SERIES`)."""

CLOCK_SKEW_S = 3600.0
"""How far ahead of this machine's clock Prometheus's may be: a last scrape later than that
(or not a time at all: NaN, an infinity) leaves the host's age unknown."""

_HEADERS = {"Accept": "application/json"}


class PrometheusError(RuntimeError):
    """The Prometheus server could not be read; the message says why in one line."""


def read_prometheus(url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[HostReading]:
    """Every GPU host Prometheus at ``url`` knows, sorted by instance; all three queries
    within ``timeout_s``, their answers parsed after.

    Raises:
        PrometheusError: when the server does not answer in time or is not Prometheus.
    """
    asked_at_wall, asked_at = time.time(), time.monotonic()
    deadline = Deadline(timeout_s)
    answers = [_ask(url, query, deadline) for query in (GPU_SERIES_QUERY, "up", UP_QUERY)]
    gpu_samples, up, scraped = (_samples(url, answer) for answer in answers)
    by_instance: dict[str, list[Sample]] = defaultdict(list)
    gpu_jobs = set()
    for sample in gpu_samples:
        instance = sample.labels.get("instance", "")
        by_instance[instance].append(sample)
        gpu_jobs.add(sample.labels.get("job"))
    last_scrape = {_target(sample): sample.value for sample in scraped}
    hosts = []
    for sample in up:
        instance = sample.labels.get("instance", "")
        if instance not in by_instance and sample.labels.get("job") not in gpu_jobs:
            continue  # not a GPU exporter (Prometheus itself, a node exporter)
        taken_at = None
        scraped_at = last_scrape.get(_target(sample))
        if scraped_at is not None and 0 < scraped_at <= asked_at_wall + CLOCK_SKEW_S:
            taken_at = asked_at - max(0.0, asked_at_wall - scraped_at)
        hosts.append(_host(instance, sample.value == 1, by_instance.get(instance, []), taken_at))
    return sorted(hosts, key=lambda host: host.host)


def _host(instance: str, up: bool, samples: list[Sample], taken_at: float | None) -> HostReading:
    if not up:
        return HostReading(
            instance, up=False, error="Prometheus's last scrape failed", via="prometheus"
        )
    try:
        if len(samples) > MAX_SERIES:
            raise NotAnExporter(
                f"{len(samples)} series stored; gputui reads at most {MAX_SERIES} of one host"
            )
        exposition = read_samples(samples)
    except NotAnExporter as error:
        return HostReading(instance, up=False, error=str(error), via="prometheus")
    except Exception as error:  # a fault of gputui's own: this host only
        log.exception("reading the series of %s failed", instance)
        return HostReading(instance, up=False, error=exception_line(error), via="prometheus")
    return HostReading.answered(instance, exposition, taken_at, via="prometheus")


def _target(sample: Sample) -> tuple[str, str]:
    return sample.labels.get("job", ""), sample.labels.get("instance", "")


def _ask(url: str, query: str, deadline: Deadline) -> bytes:
    """Prometheus's answer to ``query``, within what is left of ``deadline``."""
    address = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    try:
        return fetch(address, deadline, max_bytes=MAX_ANSWER_BYTES, headers=_HEADERS)
    except FetchError as error:
        raise PrometheusError(f"cannot read Prometheus at {url}: {error}") from None


def _samples(url: str, body: bytes) -> list[Sample]:
    """The samples of an instant query's answer.

    Raises:
        PrometheusError: for an answer that is not the API's documented shape.
    """
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past Python's stack
        raise PrometheusError(f"{url} did not answer as a Prometheus server (not JSON)") from None
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise PrometheusError(f"{url} did not answer as a Prometheus server")
    result = data.get("result")
    if not isinstance(result, list):
        raise PrometheusError(f"{url} answered a vector that is not a list")
    if len(result) > MAX_ANSWER_SERIES:
        raise PrometheusError(
            f"{url} answered {len(result)} series; gputui reads at most {MAX_ANSWER_SERIES}"
        )
    samples = []
    for series in result:
        sample = _sample(series)
        if sample is None:
            shown = one_line(reprlib.repr(series))
            raise PrometheusError(f"{url} answered a series gputui cannot read: {shown}")
        samples.append(sample)
    return samples


def _sample(series: Any) -> Sample | None:
    """One ``{"metric": {...}, "value": [time, "text"]}``; ``None`` for anything else."""
    if not isinstance(series, dict):
        return None
    metric, value = series.get("metric"), series.get("value")
    if not isinstance(metric, dict) or not all(
        isinstance(key, str) and isinstance(text, str) for key, text in metric.items()
    ):
        return None
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], str):
        return None
    try:
        number = float(value[1])  # Prometheus writes "NaN", "+Inf": checked with the host
    except ValueError:
        return None
    labels = dict(metric)
    name = labels.pop("__name__", "")
    return Sample(name, labels, number)


class PrometheusPoller:
    """Reads the fleet from Prometheus every ``interval_s`` seconds on a daemon thread.

    The same face as :class:`~gputui.fleet.scrape.FleetPoller`: :meth:`latest` never waits.
    When Prometheus itself stops answering, the hosts keep their last state and
    :attr:`error` says why.
    """

    def __init__(
        self, url: str, *, interval_s: float, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.url = url
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._hosts: list[HostReading] = []
        self._hung = HungSince()
        self._stop = threading.Event()
        self.error: str | None = None
        """Why the last read of Prometheus failed; ``None`` when it answered."""
        self.generation = 0
        """Grows by one with each read (a view redraws when it moved)."""

    def start(self) -> None:
        """Start reading, at once and then every interval."""
        threading.Thread(target=self._run, name="gputui-prometheus", daemon=True).start()

    def stop(self) -> None:
        """Ask the thread to end (one inside a read ends at its deadline)."""
        self._stop.set()

    def latest(self) -> list[HostReading]:
        """Every GPU host as of the last read, sorted by instance."""
        return self._hosts

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                hosts = read_prometheus(self.url, self._timeout_s)
                now = time.monotonic()
                self._hosts = [self._hung.track(host, now) for host in hosts]
                self.error = None
            except PrometheusError as error:
                self.error = str(error)
            except Exception as error:  # a fault of gputui's own: say so, and read again
                log.exception("reading Prometheus at %s failed", self.url)
                self.error = f"reading Prometheus failed: {exception_line(error)}"
            self.generation += 1
            self._stop.wait(max(0.0, started + self._interval_s - time.monotonic()))
