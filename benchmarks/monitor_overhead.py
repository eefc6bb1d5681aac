"""Monitor overhead: gputui against nvitop and glances, side by side, on 8 simulated GPUs.

The three programs run one after the other, each in a real pseudo-terminal of the
same size, at the same interval, against the same stand-in ``libnvidia-ml.so.1``
(built from tests/fakenvml with gcc). For each: time to the first frame showing a
GPU (the text ``H100``: the stand-in's GPUs are "NVIDIA H100 80GB HBM3"), steady-state
CPU-seconds per minute, and peak RSS.

    python benchmarks/monitor_overhead.py            # 60 s steady state each
    python benchmarks/monitor_overhead.py --steady 30 --rounds 3 --json

With ``--rounds N`` the programs take turns N times and each figure is the median of
the N rounds (peak RSS: the largest): on a shared machine a single window can be 10 to
20% off, and a busy moment then hits one program only.

The peers are installed on first use into their own environments, never into the
project's: benchmarks/.envs/nvitop (``nvitop``) and benchmarks/.envs/glances
(``glances`` with ``nvidia-ml-py``, which its GPU plugin needs to read NVML).
glances runs as a user starts it, with its default plugins (processes, network,
disks...); its GPU plugin reads the stand-in library found through LD_LIBRARY_PATH
and draws "8 NVIDIA H100 80G" and one line per GPU. A program that never draws a
GPU shows "never" as its first frame.

One process is listed on the first GPU (this script's own), as on a box at work. gputui
runs with a ``torch`` on its path that notes each process importing it (then fails): the
monitor should import none while it is watched, nor start a child that does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._terminal import (  # noqa: E402
    TerminalRun,
    ensure_env,
    machine_description,
    run_in_terminal,
)
from tests.fakenvml import build_fake_nvml  # noqa: E402

GPU_COUNT = 8
MARKER = b"H100"
"""Text of the first frame showing a GPU, in all three programs."""
PROGRAMS = ("gputui", "nvitop", "glances")
PEERS = {"nvitop": ["nvitop"], "glances": ["glances", "nvidia-ml-py"]}
"""What each peer's own environment (benchmarks/.envs/NAME) installs."""


TORCH_STUB = """import os
with open(os.environ["GPUTUI_BENCH_TORCH_SEEN"], "a") as seen:
    seen.write(f"{os.getpid()}\\n")
raise ImportError("torch imported while the monitor was watched")
"""
"""A ``torch`` that notes who imported it: nothing in a watched monitor should."""


def measure(
    steady_s: float,
    interval: float,
    size: tuple[int, int],
    programs: tuple[str, ...] = PROGRAMS,
    rounds: int = 1,
) -> dict[str, list[TerminalRun]]:
    """Run ``programs`` in turn under identical conditions, ``rounds`` times; each one's runs."""
    peers = {name: ensure_env(name, PEERS[name]) for name in programs if name in PEERS}
    # An installed package has its bytecode compiled; a checkout run with
    # PYTHONDONTWRITEBYTECODE=1 would otherwise recompile gputui at every start.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "gputui")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        lib_dir = build_fake_nvml(Path(tmp))
        env = {
            "LD_LIBRARY_PATH": str(lib_dir),
            "FAKE_NVML_GPU_COUNT": str(GPU_COUNT),
            "FAKE_NVML_PROCESSES": f"0:{os.getpid()}:1073741824",
        }
        stub = Path(tmp) / "stub" / "torch"
        stub.mkdir(parents=True)
        (stub / "__init__.py").write_text(TORCH_STUB)
        seen = Path(tmp) / "torch-seen"
        watched = {"PYTHONPATH": str(stub.parent), "GPUTUI_BENCH_TORCH_SEEN": str(seen)}
        commands = {
            "gputui": [sys.executable, "-m", "gputui", "--interval", str(interval)],
            "nvitop": [
                str(peers.get("nvitop")),
                *("-m", "nvitop", "--monitor", "full", "--interval", str(interval)),
            ],
            # --disable-check-update: no look-up of a newer release on PyPI at start.
            "glances": [
                str(peers.get("glances")),
                *("-m", "glances", "--time", str(interval), "--disable-check-update"),
            ],
        }
        runs: dict[str, list[TerminalRun]] = {name: [] for name in programs}
        for _ in range(rounds):
            for name in programs:
                runs[name].append(
                    run_in_terminal(
                        name,
                        commands[name],
                        marker=MARKER,
                        env={**env, **watched} if name == "gputui" else env,
                        steady_s=steady_s,
                        size=size,
                    )
                )
        global TORCH_IMPORTS
        TORCH_IMPORTS = len(seen.read_text().split()) if seen.exists() else 0
        return runs


TORCH_IMPORTS = 0
"""Processes that imported torch while gputui was watched, in the last :func:`measure`."""


def summary(runs: list[TerminalRun]) -> TerminalRun:
    """One program's rounds as one run: the median first frame and CPU, the largest RSS."""
    first = [run.first_frame_s for run in runs if run.first_frame_s is not None]
    return TerminalRun(
        name=runs[0].name,
        first_frame_s=statistics.median(first) if len(first) == len(runs) else None,
        cpu_s_per_min=statistics.median(run.cpu_s_per_min for run in runs),
        peak_rss_mib=max(run.peak_rss_mib for run in runs),
        steady_s=sum(run.steady_s for run in runs),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=1, help="turns each program takes")
    parser.add_argument("--size", default="120x40", help="terminal COLSxROWS")
    parser.add_argument(
        "--program",
        choices=PROGRAMS,
        action="append",
        help="measure only this program (repeatable; default: all three)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cols, rows = (int(v) for v in args.size.split("x"))
    programs = tuple(p for p in PROGRAMS if p in args.program) if args.program else PROGRAMS
    rounds = measure(args.steady, args.interval, (cols, rows), programs, args.rounds)
    runs = [summary(each) for each in rounds.values()]
    if args.json:
        each = {name: [asdict(run) for run in runs] for name, runs in rounds.items()}
        summaries = [asdict(run) for run in runs]
        print(
            json.dumps(
                {
                    "machine": machine_description(),
                    "runs": summaries,
                    "rounds": each,
                    "torch_imports": TORCH_IMPORTS,
                }
            )
        )
        return 0
    print(f"machine: {machine_description()}")
    print(f"{GPU_COUNT} simulated GPUs, --interval {args.interval:g}, {cols}x{rows} pty")
    print(f"median of {args.rounds} round(s) of {args.steady:g} s")
    print(f"{'program':<8} {'first frame':>12} {'CPU-s/min':>10} {'peak RSS':>10}")
    for r in runs:
        first = "never" if r.first_frame_s is None else f"{r.first_frame_s:.2f} s"
        print(f"{r.name:<8} {first:>12} {r.cpu_s_per_min:>10.2f} {r.peak_rss_mib:>7.1f} MiB")
    if "gputui" in programs:
        print(f"processes that imported torch while gputui was watched: {TORCH_IMPORTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
