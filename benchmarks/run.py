"""Regenerate BENCHMARKS.md: every figure measured side by side in one run.

    python benchmarks/run.py                 # all benchmarks, then rewrite BENCHMARKS.md
    python benchmarks/run.py --only monitor  # one section; the others keep their last figures
    python benchmarks/run.py --quick         # shorter windows, for a smoke test

Each section is written between markers in BENCHMARKS.md, with the command that
produced it and the machine it ran on, so sections can be refreshed one at a time.
Peers (nvitop, torchvision for the seed loop) live in benchmarks/.envs/, never in
the project's environment.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUTPUT = REPO / "BENCHMARKS.md"
sys.path.insert(0, str(REPO))

from benchmarks._terminal import machine_description  # noqa: E402

HEADER = """# Benchmarks

Every figure here is measured side by side in one run on the machine named in its
section, by the command shown there; `python benchmarks/run.py` regenerates the
whole file. The machines are shared and noisy, so read ratios, not absolute
seconds, and expect a few percent of drift between runs. Speed goals are checked
here, never as timed assertions in the tests.
"""


def _run_json(argv: list[str]) -> dict:
    out = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=REPO).stdout
    return json.loads(out.strip().splitlines()[-1])


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} before the run"


def monitor_section(quick: bool) -> str:
    steady = "20" if quick else "60"
    sizes = ["120x40", "80x24"]
    rows, commands = [], []
    load = _load()
    for size in sizes:
        argv = [sys.executable, "benchmarks/monitor_overhead.py", "--steady", steady,
                "--size", size, "--json"]
        commands.append(" ".join(["python", *argv[1:]]))
        result = _run_json(argv)
        for run in result["runs"]:
            first = run["first_frame_s"]
            rows.append(
                f"| {size} | {run['name']} | "
                f"{'never' if first is None else f'{first:.2f} s'} | "
                f"{run['cpu_s_per_min']:.2f} | {run['peak_rss_mib']:.1f} MiB |"
            )
    return "\n".join([
        "## Monitor overhead: gputui against nvitop",
        "",
        "8 simulated H100s through the stand-in `libnvidia-ml.so.1` (tests/fakenvml), "
        "`--interval 1`, each program in its own pseudo-terminal, one after the other. "
        "First frame: from exec to the first screen showing a GPU. CPU: user + system "
        f"seconds per minute over a {steady} s steady state after 5 s of settling.",
        "",
        "| terminal | program | first frame | CPU-s/min | peak RSS |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Goals (issue 2): CPU at most nvitop's, first frame within 0.4 s, peak RSS at most 60 MiB.",
        "",
        f"Machine: {machine_description()}; {load}.",
        "",
        "Commands:",
        "",
        *[f"    {c}" for c in commands],
    ])


def trainer_section(quick: bool) -> str:
    load = _load()
    argv = [sys.executable, "benchmarks/trainer_vs_seed.py", "--epochs", "2", "--json"]
    result = _run_json(argv)
    rows = []
    for d in result["details"]:
        s, g = d["seed"], d["gputui"]
        rows.append(
            f"| {s['total_seconds']:.1f} s ({', '.join(f'{x:.1f}' for x in s['epoch_seconds'])}) "
            f"| {g['wall_seconds']:.1f} s ({', '.join(f'{x:.1f}' for x in g['epoch_seconds'])}) "
            f"| {g['wall_seconds'] / s['total_seconds']:.2f} |"
        )
    return "\n".join([
        "## The trainer against seed 001's notebook loop (CPU)",
        "",
        "Two epochs on the same CIFAR-10-format files (50,000 generated images in the real "
        "binary and pickle layouts). Baseline: seed 001's loop as written (torchvision "
        "ToTensor + Normalize, DataLoader with 2 workers, batch 256, the loss read every "
        "step) from its own torchvision environment. gputui: the whole `gputui bench "
        "--device cpu --dataset cifar10` command, start-up, file loading and held-out "
        "evaluation included, with its defaults (resident data, fp32).",
        "",
        "| seed loop: training (epochs) | gputui bench: whole command (epochs) | ratio |",
        "|---|---|---|",
        *rows,
        "",
        f"Median ratio: **{result['ratio']:.2f}** (goal, issue 3: at most 0.40).",
        "",
        f"Machine: {result['machine']}; {load}.",
        "",
        "Command:",
        "",
        f"    python {' '.join(argv[1:-1])}",
    ])


SECTIONS: dict[str, Callable[[bool], str]] = {
    "monitor": monitor_section,
    "trainer": trainer_section,
}


def _splice(document: str, name: str, body: str) -> str:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{body}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if pattern.search(document):
        return pattern.sub(lambda _: block, document)
    return document.rstrip("\n") + "\n\n" + block + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    document = OUTPUT.read_text() if OUTPUT.exists() else HEADER
    for name in args.only or list(SECTIONS):
        print(f"running {name} ...", file=sys.stderr)
        body = SECTIONS[name](args.quick)
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        document = _splice(document, name, f"{body}\n\n_Measured {stamp}._")
        OUTPUT.write_text(document)
    print(f"wrote {OUTPUT.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
