"""The trainer against seed 001's notebook loop, side by side, on the CPU.

Both train the seed's CNN for the same number of epochs on the same CIFAR-10
format files (50,000 generated images, written by benchmarks/cifar_files.py):

- baseline: seed 001's loop (benchmarks/seed001_loop.py): torchvision
  ToTensor + Normalize, DataLoader with 2 workers, batch 256, loss read every step;
- gputui: ``gputui bench --device cpu --dataset cifar10`` with its defaults.

The ratio is gputui's whole command wall time (start-up, loading the files and
the held-out evaluation included) over the baseline's training time. The
baseline runs from its own environment with torchvision (benchmarks/.envs/
torchvision, created on first use with ``pip install torch==2.14.1
torchvision==0.29.1``); gputui runs from the project's environment.

    python benchmarks/trainer_vs_seed.py --epochs 2 [--repeat 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._terminal import ensure_env, machine_description

HERE = Path(__file__).resolve().parent


def run_seed(python: Path, root: Path, epochs: int) -> dict:
    out = subprocess.run(
        [str(python), str(HERE / "seed001_loop.py"), str(root), "--epochs", str(epochs)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_gputui(root: Path, epochs: int, extra: list[str]) -> dict:
    argv = [
        sys.executable,
        "-m",
        "gputui",
        "bench",
        "--device",
        "cpu",
        "--epochs",
        str(epochs),
        "--dataset",
        "cifar10",
        "--data-dir",
        str(root),
        "--json",
        *extra,
    ]
    started = time.perf_counter()
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - started
    result = json.loads(out)
    run = result["runs"][0]
    epochs = [e["seconds"] for e in run["epochs"]]
    evals = [e["eval_seconds"] for e in run["epochs"]]
    return {
        "wall_seconds": wall,
        "epoch_seconds": epochs,
        "eval_seconds": evals,
        "other_seconds": wall - sum(epochs) - sum(evals),
        "precision": run["precision"],
        "dataset": run["dataset"],
        "argv": " ".join(argv[1:]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="alternate the two this many times")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="also time `--precision bf16` (autocast; AMX/AVX512-BF16 CPUs)",
    )
    parser.add_argument("gputui_args", nargs="*", help="extra `gputui bench` arguments")
    args = parser.parse_args()
    tv_python = ensure_env("torchvision", ["torch==2.14.1", "torchvision==0.29.1"])
    seed_s, gputui_s, details = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run([str(tv_python), str(HERE / "cifar_files.py"), str(root)], check=True)
        for _ in range(args.repeat):
            seed = run_seed(tv_python, root, args.epochs)
            ours = run_gputui(root, args.epochs, args.gputui_args)
            seed_s.append(seed["total_seconds"])
            gputui_s.append(ours["wall_seconds"])
            detail = {"seed": seed, "gputui": ours}
            if args.bf16:
                detail["gputui_bf16"] = run_gputui(
                    root, args.epochs, [*args.gputui_args, "--precision", "bf16"]
                )
            details.append(detail)
    ratio = statistics.median(g / s for g, s in zip(gputui_s, seed_s, strict=True))
    bf16_ratio = (
        statistics.median(
            d["gputui_bf16"]["wall_seconds"] / s for d, s in zip(details, seed_s, strict=True)
        )
        if args.bf16
        else None
    )
    summary = {
        "machine": machine_description(),
        "epochs": args.epochs,
        "ratio": ratio,
        "bf16_ratio": bf16_ratio,
        "seed_seconds": seed_s,
        "gputui_seconds": gputui_s,
        "details": details,
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"machine: {machine_description()}")
    for d in details:
        s, g = d["seed"], d["gputui"]
        print(
            f"seed 001 loop: {s['total_seconds']:.1f} s "
            f"(epochs {', '.join(f'{x:.1f}' for x in s['epoch_seconds'])} s)"
        )
        for label, g in (("fp32", d["gputui"]), ("bf16", d.get("gputui_bf16"))):
            if g is None:
                continue
            print(
                f"gputui bench {label}: {g['wall_seconds']:.1f} s whole command "
                f"(epochs {', '.join(f'{x:.1f}' for x in g['epoch_seconds'])} s, "
                f"evaluation {sum(g['eval_seconds']):.1f} s, "
                f"start-up and loading {g['other_seconds']:.1f} s, dataset {g['dataset']})"
            )
    print(f"ratio gputui / seed loop: {ratio:.2f} (goal: at most 0.40)")
    if bf16_ratio is not None:
        print(f"ratio with --precision bf16: {bf16_ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
