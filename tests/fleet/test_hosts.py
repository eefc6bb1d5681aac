"""A fleet on loopback: two ``gputui serve`` children on stand-in NVMLs of their own, a static
dcgm-exporter and nvitop-exporter, a dead port and a host that accepts and never answers.
Every host is shown as it is, and the bad ones never hold the good ones up."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from gputui.fleet.hosts import HostReading
from gputui.fleet.scrape import FleetPoller, scrape_all
from gputui.fleet.targets import parse_hosts
from tests.fleet.hosts import (
    A100,
    DCGM_EXPOSITION,
    H100,
    running_fleet,
    serving,
    static_exporter,
)
from tests.helpers import ROOT, gputui_env

WAIT_S = 30.0


@pytest.fixture
def fleet(fake_nvml_dir: Path) -> Iterator[dict[str, str]]:
    """HOST:PORT of each kind of host, by role."""
    with running_fleet(fake_nvml_dir) as hosts:
        yield hosts


def test_snapshot_hosts_shows_each_host_as_it_is(fleet: dict[str, str]) -> None:
    order = ["silent", "serve2", "dcgm", "dead", "serve4", "nvitop"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gputui",
            "snapshot",
            "--json",
            "--timeout",
            "1.5",
            "--hosts",
            ",".join(fleet[role] for role in order),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=gputui_env(Path("/nonexistent")),
        timeout=60,
    )
    assert done.returncode == 1, done.stderr  # some hosts did not answer
    assert done.stderr == ""
    hosts = json.loads(done.stdout)["hosts"]
    assert [host["host"] for host in hosts] == [fleet[role] for role in order]  # as given
    by_role = dict(zip(order, hosts, strict=True))

    silent, dead = by_role["silent"], by_role["dead"]
    assert (silent["up"], silent["error"], silent["gpus"]) == (False, "no answer within 1.5 s", [])
    assert silent["age_seconds"] is None
    assert (dead["up"], dead["error"]) == (
        False,
        "connection refused: nothing listens on that port",
    )

    serve2, serve4 = by_role["serve2"], by_role["serve4"]
    assert (serve2["up"], serve2["source"], serve2["error"]) == (True, "gputui", None)
    assert [gpu["name"] for gpu in serve2["gpus"]] == [H100, H100]
    assert [gpu["name"] for gpu in serve4["gpus"]] == [A100] * 4
    assert [gpu["index"] for gpu in serve4["gpus"]] == [0, 1, 2, 3]
    first = serve2["gpus"][0]
    assert first["memory_total_bytes"] == 81559 * 1024**2  # the stand-in's H100
    assert first["power_limit_w"] == 700
    assert 0 <= first["utilization_percent"] <= 100
    assert first["uuid"].startswith("GPU-") and first["state"] == "ok"
    assert 0 <= serve2["age_seconds"] < 5  # the exporter's own sample age included
    (process,) = serve2["gpus"][1]["processes"]
    assert (process["pid"], process["gpu_memory_bytes"]) == (4242, 1073741824)
    assert serve2["gpus"][0]["processes"] == []  # its exporter lists processes: none here
    assert serve4["gpus"][0]["processes"] is None  # no process series at all: not known

    dcgm, nvitop = by_role["dcgm"], by_role["nvitop"]
    assert (dcgm["source"], len(dcgm["gpus"])) == ("dcgm-exporter", 2)
    assert dcgm["gpus"][0]["memory_used_bytes"] == 41088 * 1024**2
    assert dcgm["gpus"][0]["processes"] is None  # dcgm-exporter does not list them
    assert (nvitop["source"], nvitop["gpus"][0]["name"]) == (
        "nvitop-exporter",
        "NVIDIA A100-SXM4-40GB",
    )
    # The snapshot's own GPU fields, every one of them.
    assert set(first) == set(dcgm["gpus"][0]) == set(nvitop["gpus"][0])


def test_snapshot_hosts_table_says_which_hosts_are_down(fleet: dict[str, str]) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gputui",
            "snapshot",
            "--timeout",
            "1",
            "--hosts",
            f"{fleet['serve2']},{fleet['dead']}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=gputui_env(Path("/nonexistent"), {"COLUMNS": "100"}),
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == f"{fleet['serve2']}  up · gputui · 2 GPUs"
    assert lines[1].split()[:2] == ["0", "NVIDIA"] and "°C" in lines[1]
    assert lines[3] == f"{fleet['dead']}  DOWN: connection refused: nothing listens on that port"
    assert lines[-1] == "1 of 2 hosts answered"
    assert all(len(line) <= 100 for line in lines)


def test_a_silent_host_never_holds_the_others_up(fleet: dict[str, str]) -> None:
    # The silent host may take 30 s; the others are read, and read again, meanwhile.
    targets = parse_hosts(",".join(fleet[role] for role in ("silent", "dcgm", "serve2")))
    poller = FleetPoller(targets, interval_s=0.2, timeout_s=WAIT_S)
    poller.start()
    try:
        silent, _, serve2 = _wait(poller, lambda hosts: hosts[1].up and hosts[2].up)
        assert (silent.up, silent.error) == (False, "not read yet")
        first = serve2.taken_at
        _, _, serve2 = _wait(poller, lambda hosts: hosts[2].taken_at != first)
        assert poller.latest()[0].error == "not read yet"  # still waiting on its first answer
    finally:
        poller.stop()


def test_a_host_that_stops_answering_keeps_its_last_readings(fleet: dict[str, str]) -> None:
    with static_exporter(DCGM_EXPOSITION.read_text()) as address:
        poller = FleetPoller(parse_hosts(address), interval_s=0.1, timeout_s=1.0)
        poller.start()
        (first,) = _wait(poller, lambda hosts: hosts[0].up)
    try:
        refused = "connection refused: nothing listens on that port"
        (down,) = _wait(poller, lambda hosts: hosts[0].error == refused)
        assert not down.up
        assert down.gpus == first.gpus and down.taken_at == first.taken_at
        assert down.age_s(time.monotonic()) > 0
    finally:
        poller.stop()


def test_every_host_is_read_at_once_not_one_after_another() -> None:
    """Four hosts that answer only once all four are being read: read one after another,
    the first would wait in vain until its timeout."""
    everyone = threading.Barrier(4, timeout=WAIT_S)

    def metrics(path: str) -> tuple[str, bytes]:
        everyone.wait()
        return "text/plain; version=0.0.4", DCGM_EXPOSITION.read_bytes()

    with ExitStack() as stack:
        hosts = [f"127.0.0.1:{stack.enter_context(serving(metrics))}" for _ in range(4)]
        read = scrape_all(parse_hosts(",".join(hosts)), timeout_s=WAIT_S)
    assert [(host.up, host.error) for host in read] == [(True, None)] * 4


def _wait(poller: FleetPoller, done: object) -> list[HostReading]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        hosts = poller.latest()
        if done(hosts):  # type: ignore[operator]
            return hosts
        time.sleep(0.02)
    raise AssertionError(f"never happened: {poller.latest()}")
