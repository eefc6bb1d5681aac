"""``gputui serve``: the server's time per scrape of ``/metrics``, 8 simulated GPUs with processes.

The readings come from the real samplers (the stand-in ``libnvidia-ml.so.1`` from
tests/fakenvml, 8 GPUs, two real processes on each so that psutil's join runs), sampled by
the exporter's own :class:`~gputui.telemetry.polling.Poller` at ``--interval`` while the
scrapes run, exactly as ``gputui serve --processes`` does. Two figures:

- server time: the WSGI app answering ``GET /metrics`` (building the series from the latest
  readings and writing the exposition), called directly: what a scrape costs the exporter;
- round trip: the same scrape over a real loopback socket, client included (the server is
  HTTP/1.0, so each scrape opens a connection), for context.

    python benchmarks/serve_scrape.py                 # 2000 scrapes
    python benchmarks/serve_scrape.py --scrapes 500 --json

Goal (issue 16): server time at most 2 ms per scrape.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._terminal import machine_description  # noqa: E402
from gputui.serve.listen import ListenAddress  # noqa: E402
from gputui.serve.server import bound_address, make_app, open_server  # noqa: E402
from gputui.telemetry.polling import Poller  # noqa: E402
from tests.fakenvml import build_fake_nvml, load_fake_nvml  # noqa: E402

GPU_COUNT = 8
GOAL_MS = 2.0


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure(scrapes: int, interval_s: float) -> dict[str, object]:
    """Time ``scrapes`` scrapes each way; returns the figures in milliseconds."""
    lib_dir = build_fake_nvml(Path(tempfile.gettempdir()) / "gputui-bench-fake-nvml")
    pids = (os.getpid(), os.getppid())
    os.environ["FAKE_NVML_GPU_COUNT"] = str(GPU_COUNT)
    os.environ["FAKE_NVML_PROCESSES"] = ",".join(
        f"{gpu}:{pid}:{(gpu + 1) * 2**30}" for gpu in range(GPU_COUNT) for pid in pids
    )
    load_fake_nvml(lib_dir)
    poller = Poller.real(interval_s)
    app = make_app(poller.latest, interval_s=interval_s, processes=True)
    poller.start()
    deadline = time.monotonic() + 60
    while poller.latest().snapshot() is None:
        if time.monotonic() > deadline:
            raise SystemExit("the samplers gave no reading in 60 s")
        time.sleep(0.05)

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": ""}
    statuses: list[str] = []

    def start_response(status: str, headers: object) -> None:
        statuses.append(status)

    body = b"".join(app(dict(environ), start_response))
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(scrapes):
        started, started_cpu = time.perf_counter(), time.thread_time()
        b"".join(app(dict(environ), start_response))
        cpu.append((time.thread_time() - started_cpu) * 1000)
        wall.append((time.perf_counter() - started) * 1000)
    assert set(statuses) == {"200 OK"}, set(statuses)

    server = open_server(ListenAddress("127.0.0.1", 0), app)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    _, port = bound_address(server)
    trips: list[float] = []
    for _ in range(scrapes):
        started = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/metrics")
        answer = connection.getresponse()
        answer.read()
        connection.close()
        trips.append((time.perf_counter() - started) * 1000)
        assert answer.status == 200
    server.shutdown()
    server.server_close()
    poller.close()
    return {
        "gpus": GPU_COUNT,
        "processes": GPU_COUNT * len(pids),
        "series": series,
        "bytes": len(body),
        "scrapes": scrapes,
        "interval_s": interval_s,
        "server_ms_median": statistics.median(wall),
        "server_ms_p95": _percentile(wall, 0.95),
        "server_cpu_ms_median": statistics.median(cpu),
        "round_trip_ms_median": statistics.median(trips),
        "round_trip_ms_p95": _percentile(trips, 0.95),
        "goal_ms": GOAL_MS,
        "machine": machine_description(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=2000, help="scrapes each way")
    parser.add_argument("--interval", type=float, default=1.0, help="sampling interval, seconds")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    figures = measure(args.scrapes, args.interval)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(
        f"{figures['gpus']} GPUs, {figures['processes']} processes: {figures['series']} samples, "
        f"{figures['bytes']} bytes per scrape, {figures['scrapes']} scrapes\n"
        f"server time:  median {figures['server_ms_median']:.3f} ms, "
        f"p95 {figures['server_ms_p95']:.3f} ms "
        f"({figures['server_ms_median'] / GOAL_MS:.2f}x the {GOAL_MS:g} ms goal); "
        f"CPU median {figures['server_cpu_ms_median']:.3f} ms\n"
        f"round trip:   median {figures['round_trip_ms_median']:.3f} ms, "
        f"p95 {figures['round_trip_ms_p95']:.3f} ms (loopback, client included)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
