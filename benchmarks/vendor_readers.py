"""CPU per sample of the AMD and Intel reader (``DrmSampler``: every card's sysfs and the DRM
clients of every process) against the NVML reader's (``NvmlSampler``), for 8 GPUs with 200
processes on the box, side by side.

Every variant runs in this one process, in turn, for a number of rounds; each round takes
``--samples`` whole samples after a warm-up (the steady state: cards found, each process's
fds listed once) and counts this process's CPU time (``time.process_time``) over them:

- ``amd, 8 MI300X``: ``DrmSampler`` on a sysfs tree of a GPU server (its BMC's display
  device and 8 MI300X, tests/telemetry/sysfs_trees.py) and a procfs tree of 200 processes
  (tests/fakeprocfs.py), one on each GPU (an amdgpu client on two fds), the other 192 with
  10 fds each on sockets, pipes and files.
- ``intel i915, 8 Flex 170`` and ``intel xe, 8 Arc B580``: the same on 8 Intel cards, their
  clients in i915's and xe's fdinfo.
- ``amd, sysfs alone``: the MI300X box with a procfs of no process: the cards' own cost.
- ``amd, 8 MI300X, live /proc``: the MI300X tree with this machine's /proc (200 sleeping
  processes started for it beside what else runs; no client, as no GPU is here).
- ``nvml, 8 stand-in GPUs``: ``NvmlSampler`` on the stand-in ``libnvidia-ml.so.1``
  (tests/fakenvml), 8 GPUs with one of the 200 sleeping processes on each. The stand-in
  answers from memory, where a driver's calls go through the kernel, so this is the least
  the NVML reader costs.

The trees are plain files and symlinks on the machine's file system, not sysfs and procfs:
a tree does not count fds in its folders' sizes (as procfs does from Linux 6.2), and its
files are read as ordinary files are. The sampler is told to keep the files it reads every
sample open, as it does on a real sysfs (``keep_open``; a baseline from before it keeps them
open on any tree).

With ``--baseline REV``, each round also runs the same in a child process with gputui as of
commit REV (its ``gputui/`` from ``git archive``, first on the path; the trees and the
stand-in are this tree's), this tree and the baseline in turn; each is reported against the
NVML figure of its own run.

    python benchmarks/vendor_readers.py                      # 5 rounds of 200 samples
    python benchmarks/vendor_readers.py --rounds 1 --samples 100 --json
    python benchmarks/vendor_readers.py --baseline 8964975 --rounds 5
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from inspect import signature
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
GPUTUI_FROM = "VENDOR_READERS_GPUTUI"
"""Names a folder whose ``gputui`` package is measured instead of this tree's (a baseline)."""
if os.environ.get(GPUTUI_FROM):
    sys.path.insert(0, os.environ[GPUTUI_FROM])

from benchmarks._terminal import machine_description  # noqa: E402
from gputui.telemetry.drm import DrmSampler  # noqa: E402
from gputui.telemetry.nvml.sampler import NvmlSampler  # noqa: E402
from tests.fakenvml import LIBRARY_NAME, build_fake_nvml  # noqa: E402
from tests.fakeprocfs import FakeProcfs, amdgpu_6_11, i915, xe  # noqa: E402
from tests.telemetry import sysfs_trees  # noqa: E402

GPUS = 8
PROCESSES = 200
OTHER_FDS = 10
WARM_UP = 20
NVML = "nvml, 8 stand-in GPUs"

INTEL_BUS_IDS = tuple(
    f"0000:{bus:02x}:00.0" for bus in (0x29, 0x3A, 0x4D, 0x5E, 0x9B, 0xAA, 0xC9, 0xDA)
)
"""8 Intel cards' PCI addresses, one behind each of a server's PCIe switches."""


def procfs_tree(base: Path, clients: list[str]) -> Path:
    """``PROCESSES`` processes, the first ``len(clients)`` each holding one client (on two
    fds, as a dup'd fd or an inherited one shows it)."""
    proc = FakeProcfs(base)
    for index in range(PROCESSES):
        pid = 2000 + index
        proc.process(pid, ("python3", "train.py", f"--rank={index}"), start_ticks=1000 + index)
        proc.standard_fds(pid)
        for fd in range(3, OTHER_FDS):
            proc.other_fd(pid, fd, f"socket:[{pid * 100 + fd}]")
        if index < len(clients):
            proc.drm_fd(pid, 20, "renderD128", clients[index])
            proc.drm_fd(pid, 21, "renderD128", clients[index])
    return proc.root


def build_boxes(base: Path) -> dict[str, tuple[Path, Path]]:
    """Each box's sysfs and procfs trees, by variant name."""
    amd_sysfs = sysfs_trees.mi300x_box(base / "amd" / "sys")
    i915_sysfs = sysfs_trees.build(
        base / "i915" / "sys", [sysfs_trees.flex_170(bus) for bus in INTEL_BUS_IDS]
    )
    xe_sysfs = sysfs_trees.build(
        base / "xe" / "sys", [sysfs_trees.arc_b580(bus) for bus in INTEL_BUS_IDS]
    )
    amd_clients = [
        amdgpu_6_11(index + 1, bus, vram_kib=96 << 20, engines={"gfx": 10**9, "compute": 5 * 10**8})
        for index, bus in enumerate(sysfs_trees.MI300X_BUS_IDS)
    ]
    i915_clients = [
        i915(index + 1, render_ns=10**9, video_ns=10**8, pdev=bus)
        for index, bus in enumerate(INTEL_BUS_IDS)
    ]
    xe_clients = [
        xe(index + 1, rcs=10**6, ccs=10**7, gpu_cycles=10**8, pdev=bus)
        for index, bus in enumerate(INTEL_BUS_IDS)
    ]
    empty = FakeProcfs(base / "empty").root
    return {
        "amd, 8 MI300X": (amd_sysfs, procfs_tree(base / "amd", amd_clients)),
        "intel i915, 8 Flex 170": (i915_sysfs, procfs_tree(base / "i915", i915_clients)),
        "intel xe, 8 Arc B580": (xe_sysfs, procfs_tree(base / "xe", xe_clients)),
        "amd, sysfs alone": (amd_sysfs, empty),
        "amd, 8 MI300X, live /proc": (amd_sysfs, Path("/proc")),
    }


def cpu_ms_per_sample(sample: Callable[[], object], samples: int) -> float:
    """This process's CPU time per call of ``sample``, after ``WARM_UP`` calls."""
    for _ in range(WARM_UP):
        sample()
    started = time.process_time()
    for _ in range(samples):
        sample()
    return (time.process_time() - started) / samples * 1000


def checked_drm(name: str, sysfs: Path, procfs: Path, names_dir: Path) -> DrmSampler:
    """A sampler whose first sample shows every GPU, with its process unless on live /proc."""
    keep = {"keep_open": True} if "keep_open" in signature(DrmSampler).parameters else {}
    sampler = DrmSampler(sysfs, procfs=procfs, names=sysfs_trees.names(names_dir), **keep)
    gpus = sampler.sample().gpus
    with_process = sum(1 for gpu in gpus if gpu.processes)
    expected = 0 if procfs == Path("/proc") or "alone" in name else GPUS
    if len(gpus) != GPUS or with_process != expected:
        raise SystemExit(f"{name}: {len(gpus)} GPUs, {with_process} with a process")
    return sampler


def measure(rounds: int, samples: int) -> dict[str, list[float]]:
    """Every variant's CPU ms per sample in each of ``rounds`` rounds, in turn."""
    with tempfile.TemporaryDirectory() as tmp:
        boxes = build_boxes(Path(tmp))
        lib_dir = build_fake_nvml(Path(tmp) / "nvml")
        sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(PROCESSES)]
        try:
            os.environ["FAKE_NVML_GPU_COUNT"] = str(GPUS)
            os.environ["FAKE_NVML_PROCESSES"] = ",".join(
                f"{gpu}:{sleepers[gpu].pid}:1073741824" for gpu in range(GPUS)
            )
            nvml = NvmlSampler(lib_dir / LIBRARY_NAME)
            first_nvml = nvml.sample()
            if len(first_nvml.gpus) != GPUS or not all(g.processes for g in first_nvml.gpus):
                raise SystemExit(f"the stand-in NVML did not start: {first_nvml.status.error}")
            variants: dict[str, Callable[[], object]] = {
                name: checked_drm(name, sysfs, procfs, Path(tmp) / "names" / str(n)).sample
                for n, (name, (sysfs, procfs)) in enumerate(boxes.items())
            }
            variants[NVML] = nvml.sample
            figures: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(rounds):
                for name, sample in variants.items():
                    figures[name].append(cpu_ms_per_sample(sample, samples))
            nvml.close()
        finally:
            for sleeper in sleepers:
                sleeper.kill()
                sleeper.wait()
    return figures


def baseline_gputui(rev: str, into: Path) -> Path:
    """Commit ``rev``'s ``gputui/`` in ``into`` (``git archive``; no worktree, no checkout)."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, "gputui"], cwd=REPO, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def measure_in_child(gputui_from: Path | None, samples: int) -> dict[str, list[float]]:
    """One round in a child process, with gputui from ``gputui_from`` (``None``: this tree)."""
    env = {**os.environ, GPUTUI_FROM: str(gputui_from or "")}
    argv = [sys.executable, __file__, "--rounds", "1", "--samples", str(samples), "--json"]
    out = subprocess.run(argv, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)["trees"][THIS]["ms_per_sample"]


THIS = "this tree"


def summary(figures: dict[str, list[float]]) -> dict:
    """Medians, and each variant's median of its per-round ratio to NVML's."""
    nvml = figures[NVML]
    return {
        "ms_per_sample": {name: [round(v, 4) for v in values] for name, values in figures.items()},
        "median_ms_per_sample": {
            name: round(statistics.median(values), 4) for name, values in figures.items()
        },
        "of_nvml": {
            name: round(statistics.median(v / n for v, n in zip(values, nvml, strict=True)), 2)
            for name, values in figures.items()
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--baseline", metavar="REV", help="measure gputui as of REV too, in turn")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    live_processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
    load = os.getloadavg()
    if args.baseline:
        with tempfile.TemporaryDirectory() as tmp:
            old = baseline_gputui(args.baseline, Path(tmp))
            trees: dict[str, Path | None] = {THIS: None, args.baseline: old}
            figures: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
            for round_ in range(args.rounds):
                for name in list(trees) if round_ % 2 == 0 else list(trees)[::-1]:
                    print(f"round {round_ + 1}: {name}", file=sys.stderr)
                    for variant, ms in measure_in_child(trees[name], args.samples).items():
                        figures[name].setdefault(variant, []).extend(ms)
    else:
        figures = {THIS: measure(args.rounds, args.samples)}
    result = {
        "machine": machine_description(),
        "load_before": [round(v, 2) for v in load],
        "gpus": GPUS,
        "processes": PROCESSES,
        "live_processes_before": live_processes,
        "samples": args.samples,
        "rounds": args.rounds,
        "warm_up": WARM_UP,
        "baseline": args.baseline,
        "trees": {name: summary(values) for name, values in figures.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{GPUS} GPUs, {PROCESSES} processes, {args.rounds} rounds of {args.samples} samples")
    for tree, figures_of in result["trees"].items():
        print(tree)
        for name, median in figures_of["median_ms_per_sample"].items():
            each = ", ".join(f"{v:.3f}" for v in figures_of["ms_per_sample"][name])
            print(
                f"  {name:<28} {median:7.3f} ms CPU per sample  "
                f"{figures_of['of_nvml'][name]:5.2f}x NVML  rounds: {each}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
