"""``gputui serve`` against nvitop-exporter: steady CPU at a 1 s interval, side by side.

Both exporters read the same stand-in ``libnvidia-ml.so.1`` (8 GPUs, a process on each,
joined with psutil) at ``--interval 1`` and are scraped once a second over loopback, as a
Prometheus with ``scrape_interval: 1s`` would. They run at the same time, so both see the
same machine; the figure is each exporter's CPU seconds per minute over the window (its
start-up excluded). nvitop-exporter lives in benchmarks/.envs/, never in the project's
environment.

    python benchmarks/serve_cpu.py                 # 3 rounds of 30 s
    python benchmarks/serve_cpu.py --rounds 1 --window 20 --json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._terminal import _cpu_seconds, ensure_env, machine_description  # noqa: E402
from tests.fakenvml import build_fake_nvml  # noqa: E402

GPUS = 8


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _scrape_every_second(url: str, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                answer.read()
        except OSError:
            pass


def _wait_up(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                if b"_gpu_" in answer.read():
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} never answered")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    nvitop = ensure_env("nvitop-exporter", ["nvitop-exporter"])
    with tempfile.TemporaryDirectory() as tmp:
        lib_dir = build_fake_nvml(Path(tmp))
        pids = ",".join(f"{gpu}:{os.getpid()}:1073741824" for gpu in range(GPUS))
        env = {
            **os.environ,
            "LD_LIBRARY_PATH": str(lib_dir),
            "FAKE_NVML_GPU_COUNT": str(GPUS),
            "FAKE_NVML_PROCESSES": pids,
            "PYTHONPATH": str(REPO),
        }
        ports = {"gputui serve": _free_port(), "nvitop-exporter": _free_port()}
        commands = {
            "gputui serve": [
                sys.executable,
                "-m",
                "gputui",
                "serve",
                "--interval",
                "1",
                "--processes",
                "--listen",
                f"127.0.0.1:{ports['gputui serve']}",
            ],
            "nvitop-exporter": [
                str(nvitop),
                "-m",
                "nvitop_exporter",
                "--interval",
                "1",
                "--bind-address",
                "127.0.0.1",
                "--port",
                str(ports["nvitop-exporter"]),
            ],
        }
        rounds: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            processes = {
                name: subprocess.Popen(
                    argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                for name, argv in commands.items()
            }
            stop = threading.Event()
            try:
                for port in ports.values():
                    url = f"http://127.0.0.1:{port}/metrics"
                    _wait_up(url)
                    threading.Thread(
                        target=_scrape_every_second, args=(url, stop), daemon=True
                    ).start()
                time.sleep(5.0)  # settle
                before = {n: _cpu_seconds(psutil.Process(p.pid)) for n, p in processes.items()}
                started = time.monotonic()
                time.sleep(args.window)
                wall = time.monotonic() - started
                for name, process in processes.items():
                    used = _cpu_seconds(psutil.Process(process.pid)) - before[name]
                    rounds[name].append(used / wall * 60)
            finally:
                stop.set()
                for process in processes.values():
                    process.kill()
                    process.wait()
    medians = {name: statistics.median(values) for name, values in rounds.items()}
    result = {
        "machine": machine_description(),
        "gpus": GPUS,
        "interval_s": 1.0,
        "window_s": args.window,
        "rounds": args.rounds,
        "cpu_seconds_per_minute": {n: [round(v, 3) for v in vs] for n, vs in rounds.items()},
        "median_cpu_seconds_per_minute": {n: round(v, 3) for n, v in medians.items()},
        "ratio_gputui_over_nvitop": round(medians["gputui serve"] / medians["nvitop-exporter"], 2),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"exporters, {GPUS} GPUs with processes, --interval 1, scraped each second: "
            + ", ".join(f"{n} {v:.2f} CPU-s/min" for n, v in medians.items())
            + f"; ratio {result['ratio_gputui_over_nvitop']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
