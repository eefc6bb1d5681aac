"""Monitor overhead: gputui against nvitop, side by side, on 8 simulated GPUs.

Both programs run in a real pseudo-terminal of the same size, at the same
interval, against the same stand-in ``libnvidia-ml.so.1`` (built from
tests/fakenvml with gcc). For each: time to the first frame showing a GPU,
steady-state CPU-seconds per minute, and peak RSS.

    python benchmarks/monitor_overhead.py            # 60 s steady state each
    python benchmarks/monitor_overhead.py --steady 20 --json

nvitop is installed into benchmarks/.envs/nvitop on first use (never into the
project's environment).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._terminal import TerminalRun, ensure_env, machine_description, run_in_terminal
from tests.fakenvml import build_fake_nvml

GPU_COUNT = 8
MARKER = b"H100"


def measure(steady_s: float, interval: float, size: tuple[int, int]) -> list[TerminalRun]:
    """Run gputui then nvitop under identical conditions; return both measurements."""
    nvitop_python = ensure_env("nvitop", ["nvitop"])
    # An installed package has its bytecode compiled; a checkout run with
    # PYTHONDONTWRITEBYTECODE=1 would otherwise recompile gputui at every start.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "gputui")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        lib_dir = build_fake_nvml(Path(tmp))
        env = {"LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_GPU_COUNT": str(GPU_COUNT)}
        programs = [
            ("gputui", [sys.executable, "-m", "gputui", "--interval", str(interval)]),
            (
                "nvitop",
                [str(nvitop_python), "-m", "nvitop", "--monitor", "full",
                 "--interval", str(interval)],
            ),
        ]
        return [
            run_in_terminal(name, argv, marker=MARKER, env=env, steady_s=steady_s, size=size)
            for name, argv in programs
        ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--size", default="120x40", help="terminal COLSxROWS")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cols, rows = (int(v) for v in args.size.split("x"))
    runs = measure(args.steady, args.interval, (cols, rows))
    if args.json:
        print(json.dumps({"machine": machine_description(), "runs": [asdict(r) for r in runs]}))
        return 0
    print(f"machine: {machine_description()}")
    print(f"{GPU_COUNT} simulated GPUs, --interval {args.interval:g}, {cols}x{rows} pty")
    print(f"{'program':<8} {'first frame':>12} {'CPU-s/min':>10} {'peak RSS':>10}")
    for r in runs:
        first = "never" if r.first_frame_s is None else f"{r.first_frame_s:.2f} s"
        print(f"{r.name:<8} {first:>12} {r.cpu_s_per_min:>10.2f} {r.peak_rss_mib:>7.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
