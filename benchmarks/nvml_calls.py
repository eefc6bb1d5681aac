"""What each NVML call the sampler makes costs, on this machine's own driver: for a GPU box
(the stand-in answers from memory, so there only the Python side shows).

The sampler's one way into NVML (``NvmlSampler._call``) is wrapped with a timer: each call's
CPU time (``time.thread_time``: what a monitor pays) and wall time (what delays a sample),
by NVML function, over ``--samples`` samples taken ``--interval`` apart on the real clock
(so the sampler's TTLs apply as in the monitor at that interval), after 3 warm-up samples.
Also each whole sample's CPU (median and mean: the median leaves out the reads made every
few seconds, the mean spreads them where the samples span them: 120 samples 0.1 s apart
hold one second read of a slow energy counter, ``ENERGY_TTL_S`` after the first).

    PYTHONPATH=. python3 benchmarks/nvml_calls.py                    # 120 samples, 0.1 s apart
    PYTHONPATH=. python3 benchmarks/nvml_calls.py --interval 1 --samples 30 --json

On an H200 (driver 580, 2026-11-27) this found ``nvmlDeviceGetTotalEnergyConsumption``
spending 3.5 to 4.8 ms of CPU a call, 86% of a sample: see BENCHMARKS.md and
``benchmarks/gpu_runs/2026-11-27-h200-third/nvml``.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gputui.telemetry.nvml import sampler as sampler_module  # noqa: E402

WARM_UP = 3


def measure(samples: int, interval_s: float) -> dict[str, Any]:
    """Time every call of ``samples`` samples, ``interval_s`` apart."""
    calls: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    original = sampler_module.NvmlSampler._call

    def timed(self: Any, function: str, gpu_index: int | None, query: Any, *args: Any) -> Any:
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            return original(self, function, gpu_index, query, *args)
        finally:
            entry = calls[function]
            entry[0] += 1
            entry[1] += time.thread_time() - cpu
            entry[2] += time.perf_counter() - wall

    sampler_module.NvmlSampler._call = timed  # type: ignore[method-assign]
    try:
        with sampler_module.NvmlSampler() as sampler:
            for _ in range(WARM_UP):
                reading = sampler.sample()
            calls.clear()
            each = []
            for _ in range(samples):
                started = time.thread_time()
                reading = sampler.sample()
                each.append((time.thread_time() - started) * 1e3)
                time.sleep(interval_s)
    finally:
        sampler_module.NvmlSampler._call = original  # type: ignore[method-assign]
    rows = sorted(calls.items(), key=lambda item: -item[1][1])
    return {
        "gpus": [gpu.name for gpu in reading.gpus],
        "driver": reading.status.driver_version,
        "samples": samples,
        "interval_s": interval_s,
        "sample_cpu_ms_median": round(statistics.median(each), 4),
        "sample_cpu_ms_mean": round(statistics.fmean(each), 4),
        "in_calls_cpu_ms_per_sample": round(sum(v[1] for v in calls.values()) / samples * 1e3, 4),
        "calls": [
            {
                "function": name,
                "per_sample": round(count / samples, 3),
                "cpu_ms_per_sample": round(cpu / samples * 1e3, 4),
                "wall_ms_per_sample": round(wall / samples * 1e3, 4),
                "cpu_us_per_call": round(cpu / count * 1e6, 1),
            }
            for name, (count, cpu, wall) in rows
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=120)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between samples")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.samples, args.interval)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(
        f"{', '.join(result['gpus']) or 'no GPU'} (driver {result['driver']}): a sample "
        f"{result['sample_cpu_ms_median']:.3f} ms CPU at the median, "
        f"{result['sample_cpu_ms_mean']:.3f} mean"
    )
    for row in result["calls"]:
        print(
            f"  {row['function']:<45} {row['per_sample']:>6.2f}/sample "
            f"{row['cpu_us_per_call']:>9.1f} us CPU a call "
            f"{row['wall_ms_per_sample']:>8.3f} ms wall/sample"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
