"""CPU per sample of the NVML sampler with 8 stand-in GPUs with NVLink, this tree against a
baseline commit's (``--baseline``, default the last before issue 30's NVML readings), side
by side: what the video engines (two calls a GPU every ``MEDIA_TTL_S``), the NVLink links'
states (a call a link every ``NVLINK_STATE_TTL_S``) and their throughput counters (one
``nvmlDeviceGetFieldValues`` a GPU every ``NVLINK_TTL_S``, every second in a third variant)
add to a sample.

Each round runs the trees' samplers in turn, the order rotating, each in a child process of
its own (``--child TREE``: the ``gputui`` package under TREE first on ``sys.path``) that
takes ``--samples`` samples after 20 warm-up samples and counts its CPU time
(``time.process_time``). The sampler's clock moves 1 s a sample, the default interval. The
stand-in (tests/fakenvml, built from this tree) answers from memory, where a driver's calls
go through the kernel, so it is the least each call costs and the largest share the added
calls take. The baseline's package comes from ``git archive``; no checkout is touched.

    python benchmarks/nvml_cost.py                          # 7 rounds of 2000 samples
    python benchmarks/nvml_cost.py --rounds 3 --samples 500 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GPUS = 8
WARM_UP = 20
SECOND = 1.0
BEFORE_READINGS = "20673ab"
"""The last commit before issue 30's NVML readings (video engines, NVLink states and
throughput): the sampler as it was when the issue asked for them."""
EVERY_SECOND = "this tree, NVLink read every 1 s"
"""The variant that reads the throughput counters every sample (a TTL of 1 s)."""


def child(tree: str, samples: int, library: str, nvlink_ttl_s: float | None) -> int:
    """Measure one tree's sampler; print its CPU ms per sample and where gputui came from."""
    sys.path.insert(0, tree)
    import gputui
    from gputui.telemetry.nvml import sampler as module
    from gputui.telemetry.nvml.sampler import NvmlSampler

    if nvlink_ttl_s is not None:
        module.NVLINK_TTL_S = nvlink_ttl_s  # type: ignore[attr-defined]

    now = [1000.0]

    def clock() -> float:
        return now[0]

    sampler = NvmlSampler(library, clock=clock)
    reading = sampler.sample()
    if len(reading.gpus) != GPUS:
        raise SystemExit(f"the stand-in NVML did not start: {reading.status.error}")
    for _ in range(WARM_UP):
        now[0] += SECOND
        sampler.sample()
    started = time.process_time()
    for _ in range(samples):
        now[0] += SECOND
        sampler.sample()
    spent = time.process_time() - started
    last = sampler.sample()
    sampler.close()
    print(
        json.dumps(
            {
                "ms_per_sample": spent / samples * 1000,
                "package": str(Path(gputui.__file__).parent),
                "nvlink_rate_read": any(
                    getattr(gpu, "nvlink_throughput", None) is not None for gpu in last.gpus
                ),
            }
        )
    )
    return 0


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()


def export(ref: str, into: Path) -> Path:
    """``ref``'s ``gputui`` package, from ``git archive``, under ``into``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref, "gputui"],
        cwd=REPO,
        check=True,
        stdout=subprocess.PIPE,
    ).stdout
    into.mkdir(parents=True)
    tar = into / "gputui.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as opened:
        opened.extractall(into, filter="data")
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline",
        default=BEFORE_READINGS,
        help=f"the commit to compare with (default: {BEFORE_READINGS}, the last before the "
        "video engines' and NVLink's readings)",
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", metavar="TREE", help=argparse.SUPPRESS)
    parser.add_argument("--library", help=argparse.SUPPRESS)
    parser.add_argument("--nvlink-ttl", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.samples, args.library, args.nvlink_ttl)

    sys.path.insert(0, str(REPO))
    from benchmarks._terminal import machine_description
    from tests.fakenvml import LIBRARY_NAME, build_fake_nvml

    baseline = _git("rev-parse", "--short", args.baseline)
    env = {name: value for name, value in os.environ.items() if not name.startswith("FAKE_NVML")}
    env["FAKE_NVML_GPU_COUNT"] = str(GPUS)
    env["FAKE_NVML_NVLINKS"] = ",".join(f"{gpu}:18" for gpu in range(GPUS))
    env["FAKE_NVML_PROCESSES"] = ",".join(f"{gpu}:{os.getpid()}:1073741824" for gpu in range(GPUS))
    env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory() as tmp:
        library = build_fake_nvml(Path(tmp) / "nvml") / LIBRARY_NAME
        old = export(baseline, Path(tmp) / "baseline")
        variants = {
            baseline: [str(old)],
            "this tree": [str(REPO)],
            EVERY_SECOND: [str(REPO), "--nvlink-ttl", "1"],
        }
        runs: dict[str, list[float]] = {name: [] for name in variants}
        packages: dict[str, str] = {}
        rates: dict[str, bool] = {}
        for number in range(args.rounds):
            names = list(variants)
            order = names[number % 3 :] + names[: number % 3]  # each goes first in turn
            for name in order:
                command = [sys.executable, __file__, "--child", *variants[name]]
                command += ["--samples", str(args.samples), "--library", str(library)]
                out = subprocess.run(
                    command,
                    check=True,
                    capture_output=True,
                    text=True,
                    env=env,
                    cwd=tmp,
                ).stdout
                measured = json.loads(out)
                runs[name].append(measured["ms_per_sample"])
                packages[name] = measured["package"]
                rates[name] = measured["nvlink_rate_read"]
    medians = {name: statistics.median(values) for name, values in runs.items()}
    result = {
        "machine": machine_description(),
        "gpus": GPUS,
        "baseline": baseline,
        "rounds": args.rounds,
        "samples": args.samples,
        "ms_per_sample": {name: [round(v, 4) for v in values] for name, values in runs.items()},
        "median_ms_per_sample": {name: round(v, 4) for name, v in medians.items()},
        "ratio": round(medians["this tree"] / medians[baseline], 3),
        "ratio_every_second": round(medians[EVERY_SECOND] / medians[baseline], 3),
        "nvlink_rate_read": rates,
        "packages": packages,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for name, median in medians.items():
        each = ", ".join(f"{v:.3f}" for v in runs[name])
        print(f"{name:<32} {median:7.3f} ms CPU per sample  rounds: {each}")
    print(f"this tree / {baseline}: {result['ratio']:.3f}; read every second: ", end="")
    print(f"{result['ratio_every_second']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
