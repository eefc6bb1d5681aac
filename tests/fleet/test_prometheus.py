"""A real Prometheus server (Debian's package) scraping two ``gputui serve`` exporters and a
dead port on loopback; ``gputui snapshot --prometheus`` reads every GPU host back from it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from gputui.fleet.prometheus import PrometheusPoller
from tests.fleet.hosts import dead_port
from tests.helpers import ROOT, gputui_env
from tests.serve.served import Served, prometheus_query, prometheus_scraping

WAIT_S = 60.0

NVLINKS = {"FAKE_NVML_NVLINKS": "0:18", "FAKE_NVML_NVLINKS_DOWN": "0:0x20001"}
"""Each exporter's GPU 0 has 18 NVLink links, 0 and 17 down; its others have no NVLink."""


@pytest.fixture
def prometheus(fake_nvml_dir: Path, tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A Prometheus scraping two exporters and a dead port each second: its URL and the
    targets (the exporters first)."""
    with ExitStack() as stack:
        servers = [
            Served.start(
                fake_nvml_dir, "--interval", "0.5", knobs={"FAKE_NVML_GPU_COUNT": n, **NVLINKS}
            )
            for n in ("1", "3")
        ]
        for server in servers:
            stack.callback(server.kill)
        targets = [f"127.0.0.1:{server.port}" for server in servers] + [dead_port()]
        base = stack.enter_context(prometheus_scraping(targets, tmp_path))
        deadline = time.monotonic() + WAIT_S
        while True:  # every target scraped once, and the exporters' GPU series stored
            try:
                scraped = len(prometheus_query(base, "up")) == 3
                gpus = len(prometheus_query(base, "gputui_gpu_info"))
            except OSError:
                scraped, gpus = False, 0
            if scraped and gpus == 4:
                break
            assert time.monotonic() < deadline, "Prometheus never scraped every target"
            time.sleep(0.2)
        yield base, targets


def test_snapshot_reads_the_fleet_back_from_prometheus(prometheus: tuple[str, list[str]]) -> None:
    base, targets = prometheus
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gputui",
            "snapshot",
            "--json",
            "--prometheus",
            base,
            "--timeout",
            "10",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=gputui_env(Path("/nonexistent")),
        timeout=60,
    )
    assert done.returncode == 1, done.stderr  # the dead target is down
    hosts = {host["host"]: host for host in json.loads(done.stdout)["hosts"]}
    assert set(hosts) == set(targets)  # Prometheus itself is not a GPU host
    one, three, dead = (hosts[target] for target in targets)
    assert (one["up"], one["source"], one["via"]) == (True, "gputui", "prometheus")
    assert [gpu["index"] for gpu in three["gpus"]] == [0, 1, 2]
    assert three["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert three["gpus"][0]["memory_total_bytes"] == 81559 * 1024**2
    assert three["gpus"][0]["energy_j"] > 0  # a counter, stored without its _total suffix
    assert [gpu["nvlink_links_down"] for gpu in three["gpus"]] == [[0, 17], None, None]
    assert three["gpus"][0]["nvlink_links_active"] == 16
    assert 0 <= one["age_seconds"] < 10  # since Prometheus's last scrape of it
    assert (dead["up"], dead["error"], dead["gpus"]) == (
        False,
        "Prometheus's last scrape failed",
        [],
    )


def test_a_server_that_is_not_prometheus_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gputui", "snapshot", "--prometheus", f"http://{dead_port()}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "cannot read Prometheus at http://127.0.0.1:" in done.stderr
    assert "connection refused" in done.stderr


def test_the_fleet_view_reads_prometheus_on_its_own_thread(
    prometheus: tuple[str, list[str]],
) -> None:
    base, targets = prometheus
    poller = PrometheusPoller(base, interval_s=0.5)
    poller.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while len(poller.latest()) < 3:
            assert time.monotonic() < deadline, poller.error
            time.sleep(0.05)
        assert poller.error is None
        hosts = {host.host: host for host in poller.latest()}
        assert [host.up for host in (hosts[target] for target in targets)] == [True, True, False]
        assert len(hosts[targets[1]].gpus) == 3
        generation = poller.generation
        while poller.generation == generation:  # it reads again, every interval
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        poller.stop()


def test_a_prometheus_that_does_not_answer_says_why() -> None:
    poller = PrometheusPoller(f"http://{dead_port()}", interval_s=0.2, timeout_s=1.0)
    poller.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while poller.generation == 0:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert poller.latest() == []
        assert poller.error is not None and "connection refused" in poller.error
    finally:
        poller.stop()
