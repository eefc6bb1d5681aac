"""Time to the first frame: gputui, nvitop, and the floor, a bare Textual app.

Each program starts in its own pseudo-terminal (120x40) against the stand-in NVML
library with 8 simulated GPUs; the first frame is the first screen output that
shows ``H100``. The floor is a Textual app that draws one line holding ``H100``
and nothing else (:data:`BARE_APP`): what any Textual
program pays here to import Textual, start its driver and draw. The programs
alternate, ``--repeat`` times, so that a busy moment hits them all alike.

    python benchmarks/first_frame.py [--repeat 5] [--json]

The floor runs as ``python -c BARE_APP``: started as this script, it would first pay for
the imports this script needs to measure (psutil, subprocess, the stand-in library's
builder), which once made the floor look 0.15 s slower than it is.

Issue 2's goal is a first frame within 0.4 s. Not a test: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._terminal import ensure_env, machine_description, run_in_terminal  # noqa: E402
from tests.fakenvml import build_fake_nvml  # noqa: E402

GPU_COUNT = 8
MARKER = b"H100"


BARE_APP = """
from textual.app import App
from textual.widgets import Static


class Bare(App):
    BINDINGS = [("q", "quit", "Quit")]

    def compose(self):
        yield Static("NVIDIA H100 (a bare Textual app)")


Bare().run()
"""
"""The floor: a Textual app that draws one line and waits for ``q``, and imports nothing else."""


def measure(repeat: int, size: tuple[int, int]) -> dict[str, list[float | None]]:
    """First-frame seconds per program, ``repeat`` times each, alternating."""
    nvitop = ensure_env("nvitop", ["nvitop"])
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "gputui")], check=True)
    commands = {
        "gputui": [sys.executable, "-m", "gputui", "--interval", "1"],
        "bare Textual app": [sys.executable, "-c", BARE_APP],
        "nvitop": [str(nvitop), "-m", "nvitop", "--monitor", "full", "--interval", "1"],
    }
    times: dict[str, list[float | None]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as tmp:
        lib_dir = build_fake_nvml(Path(tmp))
        env = {"LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_GPU_COUNT": str(GPU_COUNT)}
        for _ in range(repeat):
            for name, argv in commands.items():
                run = run_in_terminal(
                    name, argv, marker=MARKER, env=env, settle_s=0.5, steady_s=0.5, size=size
                )
                times[name].append(run.first_frame_s)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--size", default="120x40", help="terminal COLSxROWS")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cols, rows = (int(v) for v in args.size.split("x"))
    times = measure(args.repeat, (cols, rows))
    medians = {
        name: statistics.median(t for t in seen if t is not None) if any(seen) else None
        for name, seen in times.items()
    }
    if args.json:
        print(json.dumps({"machine": machine_description(), "times": times, "medians": medians}))
        return 0
    print(f"machine: {machine_description()}; {cols}x{rows}, {args.repeat} starts each")
    for name, seen in times.items():
        shown = ", ".join("never" if t is None else f"{t:.2f}" for t in seen)
        median = medians[name]
        print(f"{name:<17} median {'never' if median is None else f'{median:.2f} s'} ({shown})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
