"""The fleet view with 256 simulated hosts at ``--interval 2``: its CPU per minute and its
key-to-screen latency, in a real pseudo-terminal at 160x50.

The hosts: one real ``gputui serve`` (8 stand-in GPUs, processes on each) is read once a
second, and its latest ``/metrics`` is served on 256 loopback ports by an asyncio server in
this process, so every host answers a real gputui exposition that moves. ``gputui --hosts``
then reads all 256 (a thread per host) and the figures are taken from its process alone:

- CPU: seconds of CPU the gputui process used over the window, per minute;
- keys: ``s`` cycles the sort key; the latency of a press is the time from writing the key
  to the pty until the screen with the new key's name arrives.

    python benchmarks/fleet_view.py                  # 60 s window, 40 presses
    python benchmarks/fleet_view.py --window 20 --presses 20 --json

Goal (issue 16): key latency p95 at most 150 ms. Not a test: the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._terminal import PtyProgram, _cpu_seconds, machine_description  # noqa: E402
from gputui.ui.fleet.rows import SORT_KEYS  # noqa: E402
from tests.fakenvml import build_fake_nvml  # noqa: E402
from tests.serve.served import Served  # noqa: E402

HOSTS = 256
GPUS = 8


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
            with urllib.request.urlopen(self.source_url, timeout=5) as answer:
                self.body = answer.read()
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=60.0, help="seconds of CPU measured")
    parser.add_argument("--presses", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lib_dir = build_fake_nvml(Path(tmp))
        pids = ",".join(f"{gpu}:{os.getpid()}:1073741824" for gpu in range(GPUS))
        knobs = {"FAKE_NVML_GPU_COUNT": str(GPUS), "FAKE_NVML_PROCESSES": pids}
        served = Served.start(lib_dir, "--interval", "1", "--processes", knobs=knobs)
        try:
            served.wait_for_readings()
            fleet = Fleet(f"http://127.0.0.1:{served.port}/metrics")
            hosts = ",".join(f"127.0.0.1:{port}" for port in fleet.ports)
            term = PtyProgram(
                [sys.executable, "-m", "gputui", "--interval", "2", "--hosts", hosts],
                env={},
                size=(160, 50),
                cwd=REPO,
            )
            try:
                if term.wait_for(f"{HOSTS} hosts, {HOSTS} up".encode(), 0.0, 120.0) is None:
                    print("the fleet view never showed every host up", file=sys.stderr)
                    return 1
                time.sleep(4.0)  # settle
                process = psutil.Process(term.pid)
                cpu_before, wall_before, scrapes_before = (
                    _cpu_seconds(process),
                    time.monotonic(),
                    fleet.scrapes,
                )
                time.sleep(args.window)
                cpu = _cpu_seconds(process) - cpu_before
                wall = time.monotonic() - wall_before
                scrapes = fleet.scrapes - scrapes_before
                latencies = measure_keys(term, args.presses)
            finally:
                term.close()
        finally:
            served.kill()
    ordered = sorted(latencies) or [float("nan")]
    result = {
        "machine": machine_description(),
        "hosts": HOSTS,
        "gpus_per_host": GPUS,
        "interval_s": 2.0,
        "window_s": round(wall, 1),
        "scrapes_per_second": round(scrapes / wall, 1),
        "cpu_seconds_per_minute": round(cpu / wall * 60, 2),
        "presses": args.presses,
        "missed": args.presses - len(latencies),
        "key_p50_ms": round(statistics.median(ordered), 1),
        "key_p95_ms": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 1),
        "key_max_ms": round(ordered[-1], 1),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"fleet view, {HOSTS} hosts x {GPUS} GPUs at --interval 2: "
            f"{result['cpu_seconds_per_minute']} CPU-s/min ({result['scrapes_per_second']} "
            f"scrapes/s); keys p50 {result['key_p50_ms']} ms, p95 {result['key_p95_ms']} ms, "
            f"missed {result['missed']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
