"""Read a fleet's GPUs from a Prometheus server that already scrapes its exporters.

Two instant queries through Prometheus's HTTP API (``/api/v1/query``): every GPU series
gputui can read, and ``up`` with its timestamp. Hosts are Prometheus's ``instance``s: each
one with GPU series, and each down one of a job that has GPU series elsewhere (a GPU host
that stopped answering). Their age is how long ago Prometheus last scraped them.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable

from gputui.fleet.exporters import NotAnExporter, Sample, read_samples
from gputui.fleet.hosts import HostReading
from gputui.fleet.scrape import OPENER, in_words
from gputui.fleet.targets import DEFAULT_TIMEOUT_S

GPU_SERIES_QUERY = '{__name__=~"gputui_.+|DCGM_FI_DEV_.+|gpu_.+_(Percentage|MiB|MiBps|C|W|MHz)"}'
"""Every series :func:`~gputui.fleet.exporters.read_samples` can read."""

UP_QUERY = "timestamp(up)"
"""When each target was last scraped; joined with ``up`` for whether it answered."""


class PrometheusError(RuntimeError):
    """The Prometheus server could not be read; the message says why in one line."""


def read_prometheus(
    url: str, timeout_s: float = DEFAULT_TIMEOUT_S, clock: Callable[[], float] = time.monotonic
) -> list[HostReading]:
    """Every GPU host Prometheus at ``url`` knows, sorted by instance.

    Raises:
        PrometheusError: when the server does not answer or is not Prometheus.
    """
    asked_at_wall, asked_at = time.time(), clock()
    gpu_samples = _query(url, GPU_SERIES_QUERY, timeout_s)
    up = _query(url, "up", timeout_s)
    scraped = _query(url, UP_QUERY, timeout_s)
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
        if _target(sample) in last_scrape:
            taken_at = asked_at - max(0.0, asked_at_wall - last_scrape[_target(sample)])
        hosts.append(_host(instance, sample.value == 1, by_instance.get(instance, []), taken_at))
    return sorted(hosts, key=lambda host: host.host)


def _host(instance: str, up: bool, samples: list[Sample], taken_at: float | None) -> HostReading:
    if not up:
        return HostReading(
            instance, up=False, error="Prometheus's last scrape failed", via="prometheus"
        )
    try:
        exposition = read_samples(samples)
    except NotAnExporter as error:
        return HostReading(instance, up=False, error=str(error), via="prometheus")
    return HostReading(
        instance,
        up=True,
        source=exposition.source,
        gpus=exposition.gpus,
        taken_at=None if taken_at is None else taken_at - exposition.sample_age_s,
        via="prometheus",
    )


def _target(sample: Sample) -> tuple[str, str]:
    return sample.labels.get("job", ""), sample.labels.get("instance", "")


def _query(url: str, query: str, timeout_s: float) -> list[Sample]:
    address = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    try:
        with OPENER.open(address, timeout=timeout_s) as response:
            answer = json.loads(response.read())
    except json.JSONDecodeError:
        raise PrometheusError(f"{url} did not answer as a Prometheus server (not JSON)") from None
    except Exception as error:
        raise PrometheusError(
            f"cannot read Prometheus at {url}: {in_words(error, timeout_s)}"
        ) from None
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise PrometheusError(f"{url} did not answer as a Prometheus server")
    samples = []
    for series in data.get("result", []):
        labels = dict(series.get("metric", {}))
        name = labels.pop("__name__", "")
        try:
            value = float(series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        samples.append(Sample(name, labels, value))
    return samples


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
        self._stop = threading.Event()
        self.error: str | None = None
        """Why the last read of Prometheus failed; ``None`` when it answered."""
        self.generation = 0
        """Grows by one with each read (a view redraws when it moved)."""

    def start(self) -> None:
        """Start reading, at once and then every interval."""
        threading.Thread(target=self._run, name="gputui-prometheus", daemon=True).start()

    def stop(self) -> None:
        """Ask the thread to end (one inside a hung read ends at its timeout)."""
        self._stop.set()

    def latest(self) -> list[HostReading]:
        """Every GPU host as of the last read, sorted by instance."""
        return self._hosts

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._hosts = read_prometheus(self.url, self._timeout_s)
                self.error = None
            except PrometheusError as error:
                self.error = str(error)
            self.generation += 1
            self._stop.wait(max(0.0, started + self._interval_s - time.monotonic()))
