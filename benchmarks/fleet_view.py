"""The fleet view with 256 simulated hosts at ``--interval 2``: its CPU per minute and its
key-to-screen latency, in a real pseudo-terminal at 160x50; and ``gputui snapshot --hosts``
of the same hosts: its CPU per snapshot. With ``--baseline REV``, the same for gputui as of
commit REV, run in turn with this tree's on the same hosts.

The hosts: one real ``gputui serve`` (8 stand-in GPUs, processes on each) is read once a
second, and its latest ``/metrics`` is served on 256 loopback ports by an asyncio server in
this process, so every host answers a real gputui exposition that moves. ``gputui --hosts``
then reads all 256 and the figures are taken from its process alone:

- CPU: seconds of CPU the gputui process used over the window, per minute;
- keys: ``s`` cycles the sort key; the latency of a press is the time from writing the key
  to the pty until the screen with the new key's name arrives;
- snapshot: CPU seconds (user and system) of one ``gputui snapshot --json --hosts ...``
  process, start-up included, the median of ``--snapshots``.

The baseline is REV's files (``git archive``) in a temporary folder, run by this Python
with that folder first on its path; each round runs the baseline and this tree, the first
of them in turn, so that a drift of the machine's load falls on both.

    python benchmarks/fleet_view.py                  # 60 s window, 40 presses
    python benchmarks/fleet_view.py --window 20 --presses 20 --json
    python benchmarks/fleet_view.py --baseline b607855 --rounds 2

Goals: key latency p95 at most 150 ms (issue 16); with a baseline, at most a quarter of its
CPU, in the view and per snapshot, and key latency no worse (issue 31). Not a test: the
machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._terminal import PtyProgram, _cpu_seconds, machine_description  # noqa: E402
from gputui.ui.fleet.rows import SORT_KEYS  # noqa: E402
from tests.fakenvml import build_fake_nvml  # noqa: E402
from tests.serve.served import Served  # noqa: E402

HOSTS = 256
GPUS = 8
INTERVAL_S = 2.0
THIS = "this tree"
SETTLE_S = 4.0


class Fleet:
    """``HOSTS`` loopback ports answering ``GET /metrics`` with the source's latest text."""

    def __init__(self, source_url: str) -> None:
        self.source_url = source_url
        self.body = b""
        self.ports: list[int] = []
        self.scrapes = 0
        self._ready = threading.Event()
        threading.Thread(target=self._refresh, daemon=True).start()
        threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True).start()
        self._ready.wait(30)

    def _refresh(self) -> None:
        while True:
            try:
                with urllib.request.urlopen(self.source_url, timeout=5) as answer:
                    self.body = answer.read()
            except OSError:
                return  # the source was stopped: the measurement is over
            time.sleep(1.0)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = (
            "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
            f"Content-Length: {len(self.body)}\r\n\r\n"
        )
        writer.write(head.encode() + self.body)
        self.scrapes += 1
        await writer.drain()
        writer.close()

    async def _serve(self) -> None:
        servers = [await asyncio.start_server(self._answer, "127.0.0.1", 0) for _ in range(HOSTS)]
        self.ports = [server.sockets[0].getsockname()[1] for server in servers]
        while not self.body:
            await asyncio.sleep(0.05)
        self._ready.set()
        await asyncio.Event().wait()


def baseline_tree(rev: str, into: Path) -> Path:
    """The files of commit ``rev`` in ``into`` (``git archive``; the repository is not
    touched: no worktree, no checkout)."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev], cwd=REPO, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _env(tree: Path) -> dict[str, str]:
    """gputui from ``tree``: first on the path (before this environment's own install)."""
    return {"PYTHONPATH": str(tree)}


def measure_view(tree: Path, fleet: Fleet, hosts: str, window_s: float, presses: int) -> dict:
    """One run of the fleet view from ``tree``: its CPU over ``window_s``, then the keys."""
    term = PtyProgram(
        [sys.executable, "-m", "gputui", "--interval", f"{INTERVAL_S:g}", "--hosts", hosts],
        env=_env(tree),
        size=(160, 50),
        cwd=tree,
    )
    try:
        if term.wait_for(f"{HOSTS} hosts, {HOSTS} up".encode(), 0.0, 120.0) is None:
            raise RuntimeError(f"the fleet view from {tree} never showed every host up")
        time.sleep(SETTLE_S)
        process = psutil.Process(term.pid)
        cpu_before, wall_before, scrapes_before = (
            _cpu_seconds(process),
            time.monotonic(),
            fleet.scrapes,
        )
        time.sleep(window_s)
        cpu = _cpu_seconds(process) - cpu_before
        wall = time.monotonic() - wall_before
        scrapes = fleet.scrapes - scrapes_before
        latencies = measure_keys(term, presses)
    finally:
        term.close()
    return {
        "cpu_seconds_per_minute": cpu / wall * 60,
        "scrapes_per_second": scrapes / wall,
        "window_s": wall,
        "latencies_ms": latencies,
        "missed": presses - len(latencies),
    }


def measure_keys(term: PtyProgram, presses: int) -> list[float]:
    latencies = []
    key = 0
    for _ in range(presses):
        time.sleep(0.3)
        key = (key + 1) % len(SORT_KEYS)
        at = term.press(b"s")
        frame = term.wait_for(f"sorted by {SORT_KEYS[key]}".encode(), at, 5.0)
        if frame is not None:
            latencies.append((frame[1] - at) * 1000)
    return latencies


def measure_snapshot(tree: Path, hosts: str) -> float:
    """CPU seconds of one ``gputui snapshot --json --hosts ...`` from ``tree``."""
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(
            [sys.executable, "-m", "gputui", "snapshot", "--json", "--hosts", hosts],
            stdout=subprocess.DEVNULL,
            stderr=errors,
            cwd=tree,
            env={**os.environ, **_env(tree)},
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            errors.seek(0)
            said = errors.read().decode(errors="replace")[-500:]
            raise RuntimeError(f"snapshot from {tree} exited {child.returncode}: {said}")
    return usage.ru_utime + usage.ru_stime


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values) or [float("nan")]
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def summary(runs: list[dict], snapshots: list[float], presses: int) -> dict[str, Any]:
    """One tree's figures over its rounds: medians of CPU, keys pooled."""
    latencies = [ms for run in runs for ms in run["latencies_ms"]]
    return {
        "cpu_seconds_per_minute": round(
            statistics.median(run["cpu_seconds_per_minute"] for run in runs), 2
        ),
        "cpu_seconds_per_minute_rounds": [round(run["cpu_seconds_per_minute"], 2) for run in runs],
        "scrapes_per_second": round(
            statistics.median(run["scrapes_per_second"] for run in runs), 1
        ),
        "window_s": round(statistics.median(run["window_s"] for run in runs), 1),
        "presses": presses * len(runs),
        "missed": sum(run["missed"] for run in runs),
        "key_p50_ms": round(_percentile(latencies, 0.5), 1),
        "key_p95_ms": round(_percentile(latencies, 0.95), 1),
        "key_max_ms": round(_percentile(latencies, 1.0), 1),
        "snapshot_cpu_seconds": round(statistics.median(snapshots), 3),
        "snapshot_cpu_seconds_runs": [round(value, 3) for value in snapshots],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=60.0, help="seconds of CPU measured")
    parser.add_argument("--presses", type=int, default=40)
    parser.add_argument(
        "--baseline", metavar="REV", help="measure gputui as of commit REV too, in turn"
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs of each tree's view")
    parser.add_argument("--snapshots", type=int, default=3, help="snapshots of each tree a round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {THIS: REPO}
        if args.baseline:
            trees[args.baseline] = baseline_tree(args.baseline, Path(tmp) / "baseline")
        lib_dir = build_fake_nvml(Path(tmp))
        pids = ",".join(f"{gpu}:{os.getpid()}:1073741824" for gpu in range(GPUS))
        knobs = {"FAKE_NVML_GPU_COUNT": str(GPUS), "FAKE_NVML_PROCESSES": pids}
        served = Served.start(lib_dir, "--interval", "1", "--processes", knobs=knobs)
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        snapshots: dict[str, list[float]] = {name: [] for name in trees}
        try:
            served.wait_for_readings()
            fleet = Fleet(f"http://127.0.0.1:{served.port}/metrics")
            hosts = ",".join(f"127.0.0.1:{port}" for port in fleet.ports)
            names = list(trees)
            for round_ in range(args.rounds):
                for name in names if round_ % 2 == 0 else names[::-1]:
                    print(f"round {round_ + 1}: {name}", file=sys.stderr)
                    tree = trees[name]
                    runs[name].append(measure_view(tree, fleet, hosts, args.window, args.presses))
                    snapshots[name] += [
                        measure_snapshot(tree, hosts) for _ in range(args.snapshots)
                    ]
        finally:
            served.kill()
    figures = {name: summary(runs[name], snapshots[name], args.presses) for name in trees}
    result: dict[str, Any] = {
        "machine": machine_description(),
        "hosts": HOSTS,
        "gpus_per_host": GPUS,
        "interval_s": INTERVAL_S,
        "rounds": args.rounds,
        "baseline": args.baseline,
        **figures[THIS],
    }
    if args.baseline:
        base = figures[args.baseline]
        result["baseline_figures"] = base
        result["cpu_ratio"] = round(
            result["cpu_seconds_per_minute"] / base["cpu_seconds_per_minute"], 3
        )
        result["snapshot_cpu_ratio"] = round(
            result["snapshot_cpu_seconds"] / base["snapshot_cpu_seconds"], 3
        )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for name, tree_figures in figures.items():
        print(
            f"{name}: fleet view, {HOSTS} hosts x {GPUS} GPUs at --interval {INTERVAL_S:g}: "
            f"{tree_figures['cpu_seconds_per_minute']} CPU-s/min "
            f"({tree_figures['scrapes_per_second']} scrapes/s); keys p50 "
            f"{tree_figures['key_p50_ms']} ms, p95 {tree_figures['key_p95_ms']} ms, missed "
            f"{tree_figures['missed']}; snapshot --hosts {tree_figures['snapshot_cpu_seconds']} "
            "CPU-s"
        )
    if args.baseline:
        print(
            f"this tree / {args.baseline}: view CPU {result['cpu_ratio']:.2f}x, snapshot CPU "
            f"{result['snapshot_cpu_ratio']:.2f}x (goal: at most 0.25x each)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
