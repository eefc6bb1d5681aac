"""Where the monitor's CPU goes: gputui as it is, against itself with parts of its work taken
away, side by side in one run.

Three variants of the real app on the same pty, stand-in NVML and interval as
monitor_overhead.py (8 simulated H100s, ``--interval 1``), taking turns:

- ``as is``: gputui.
- ``no line building``: each panel replays lines it built before (four in turn), so the
  screen changes as much as before while gputui's own rendering code costs nothing; what is
  left is sampling, the app's bookkeeping and Textual drawing the changed lines.
- ``screen frozen``: each panel shows the same lines for ever, so nothing is drawn after
  the first frames; what is left is sampling, the app's bookkeeping and Textual idling
  (its input thread wakes ten times a second).

The difference between the first two is gputui's rendering code; between the last two,
Textual's drawing of about 19 changed lines a second. nvitop is measured beside them, as
the goal is a share of its CPU.

    python benchmarks/monitor_floor.py --steady 30 --rounds 3 --size 160x50
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._terminal import (
    REPO,
    ensure_env,
    machine_description,
    run_in_terminal,
)
from tests.fakenvml import build_fake_nvml

VARIANTS = {"as is": "", "no line building": "replay", "screen frozen": "freeze"}
"""Each variant's name, and what the child (``--child MODE``) takes away."""
GPU_COUNT = 8


def child(mode: str) -> NoReturn:
    """Run the real monitor as the command line does, with ``mode``'s work taken away."""
    gc.disable()  # as gputui.commands does until the first frame is out
    from gputui.commands import exit_process
    from gputui.telemetry.polling import Poller

    poller = Poller.real(1.0)
    poller.start()
    from gputui.ui.monitor.app import run_app
    from gputui.ui.widgets.cpu_panel import CpuPanel
    from gputui.ui.widgets.gpu_area import GpuList

    if mode:
        for panel in (GpuList, CpuPanel):
            _replay_lines(panel, frozen=mode == "freeze")
    exit_process(run_app(interval=1.0, poller=poller))


def _replay_lines(panel: type, *, frozen: bool) -> None:
    """Make ``panel`` build its first four sets of lines, then replay them (or the last)."""
    build = panel.build_lines

    def replayed(self: object, width: int) -> object:
        built = self.__dict__.setdefault("_built", [])
        if len(built) < 4:
            built.append(build(self, width))
        elif not frozen:
            built.append(built.pop(0))
        return built[-1]

    panel.build_lines = replayed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steady", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", default="160x50")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", choices=["", "replay", "freeze"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
    cols, rows = (int(v) for v in args.size.split("x"))
    nvitop = ensure_env("nvitop", ["nvitop"])
    commands = {
        name: [sys.executable, __file__, "--child", mode] for name, mode in VARIANTS.items()
    }
    commands["nvitop"] = [str(nvitop), "-m", "nvitop", "--monitor", "full", "--interval", "1"]
    runs: dict[str, list[float]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "LD_LIBRARY_PATH": str(build_fake_nvml(Path(tmp))),
            "FAKE_NVML_GPU_COUNT": str(GPU_COUNT),
            "PYTHONPATH": str(REPO),
        }
        for _ in range(args.rounds):
            for name, argv in commands.items():
                run = run_in_terminal(
                    name, argv, marker=b"H100", env=env, steady_s=args.steady, size=(cols, rows)
                )
                runs[name].append(run.cpu_s_per_min)
    medians = {name: statistics.median(each) for name, each in runs.items()}
    if args.json:
        print(json.dumps({"machine": machine_description(), "median": medians, "rounds": runs}))
        return 0
    print(f"machine: {machine_description()}; load {os.getloadavg()[0]:.2f} after the run")
    print(f"{GPU_COUNT} simulated GPUs, --interval 1, {cols}x{rows} pty, {args.rounds} rounds")
    for name, median in medians.items():
        each = ", ".join(f"{v:.2f}" for v in runs[name])
        share = median / medians["nvitop"] if medians["nvitop"] else float("nan")
        print(f"{name:<18} {median:5.2f} CPU-s/min ({share:.2f}x nvitop)  rounds: {each}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
