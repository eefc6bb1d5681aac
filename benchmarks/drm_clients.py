"""CPU per sample of the DRM client sampler (the processes on AMD and Intel GPUs) against the
NVML sampler's for the same number of GPUs, with 200 processes on the box, side by side.

Every variant runs in this one process, in turn, for a number of rounds; each round takes
``--samples`` samples after a warm-up and counts this process's CPU time
(``time.process_time``) over them:

- ``drm, 200-process tree``: a procfs tree like the tests' (tests/fakeprocfs.py) of 200
  processes, one on each of 8 AMD GPUs (an amdgpu client on two fds), the other 192 with
  10 fds each on sockets, pipes and files. A tree does not count fds in its folders'
  sizes, so this is the sampler as on Linux before 6.2: no ``stat`` per process, fds
  listed again every ``RESCAN_EVERY`` sweeps (the links of new fd numbers read, all of
  them every ``RESCAN_EVERY_COUNTED`` sweeps).
- ``drm, tree, no fd cache``: the same, listing every process's fds every sweep
  (``rescan_every=1``; the links read as above): what skipping listings saves.
- ``drm, tree, no rescan``: the same, never listing a process's fds again
  (``rescan_every=10**9``): what the periodic rescan costs.
- ``drm, live /proc``: this machine's /proc with 200 sleeping processes started for it,
  beside what else runs (no GPU here, so no client: the listing, the ``stat`` of each fd
  folder and the fd listings, on the real procfs, which counts fds from Linux 6.2).
- ``nvml, 8 stand-in GPUs``: ``NvmlSampler`` on the stand-in ``libnvidia-ml.so.1``
  (tests/fakenvml), 8 GPUs with a process each. The stand-in answers from memory, where a
  driver's calls go through the kernel, so this is the least the NVML reader costs.

    python benchmarks/drm_clients.py                      # 3 rounds of 300 samples
    python benchmarks/drm_clients.py --rounds 1 --samples 100 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._terminal import machine_description  # noqa: E402
from gputui.telemetry import drm_clients  # noqa: E402
from gputui.telemetry.drm_clients import DrmClientSampler  # noqa: E402
from gputui.telemetry.nvml.sampler import NvmlSampler  # noqa: E402
from tests.fakenvml import LIBRARY_NAME, build_fake_nvml  # noqa: E402
from tests.fakeprocfs import FakeProcfs, amdgpu_6_11  # noqa: E402

GPUS = 8
PROCESSES = 200
OTHER_FDS = 10


def build_tree(base: Path) -> Path:
    """The fake box: ``PROCESSES`` processes, the first ``GPUS`` each on its own GPU."""
    proc = FakeProcfs(base)
    for index in range(PROCESSES):
        pid = 2000 + index
        proc.process(pid, ("python3", "train.py", f"--rank={index}"), start_ticks=1000 + index)
        proc.standard_fds(pid)
        for fd in range(3, OTHER_FDS):
            proc.other_fd(pid, fd, f"socket:[{pid * 100 + fd}]")
        if index < GPUS:
            client = amdgpu_6_11(
                pid, f"0000:{index + 3:02x}:00.0", vram_kib=8 << 20, engines={"gfx": 10**9}
            )
            proc.drm_fd(pid, 20, "renderD128", client)
            proc.drm_fd(pid, 21, "renderD128", client)
    return proc.root


def cpu_ms_per_sample(sample: Callable[[], object], samples: int) -> float:
    """This process's CPU time per call of ``sample``, after 20 warm-up calls."""
    for _ in range(20):
        sample()
    started = time.process_time()
    for _ in range(samples):
        sample()
    return (time.process_time() - started) / samples * 1000


def opens_per_sample(sampler: DrmClientSampler, sweeps: int) -> float:
    """Files and folders a steady sweep opens, counted around the sampler's own open paths
    after a first sweep (which lists every process's fds)."""
    sampler.sample()
    read, scan, list_fds = drm_clients._read_text, drm_clients._scan_dir, drm_clients._list_fds
    opened = 0

    def counted_read(path: str) -> str | None:
        nonlocal opened
        opened += 1
        return read(path)

    def counted_scan(path: str) -> list[tuple[str, int]] | None:
        nonlocal opened
        opened += 1
        return scan(path)

    def counted_list_fds(
        path: str, known: frozenset[str]
    ) -> tuple[frozenset[str], list[str]] | None:
        nonlocal opened
        opened += 1
        return list_fds(path, known)

    drm_clients._read_text, drm_clients._scan_dir = counted_read, counted_scan
    drm_clients._list_fds = counted_list_fds
    try:
        for _ in range(sweeps):
            sampler.sample()
    finally:
        drm_clients._read_text, drm_clients._scan_dir, drm_clients._list_fds = read, scan, list_fds
    return opened / sweeps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tree = build_tree(Path(tmp) / "box")
        lib_dir = build_fake_nvml(Path(tmp) / "nvml")
        os.environ["FAKE_NVML_GPU_COUNT"] = str(GPUS)
        os.environ["FAKE_NVML_PROCESSES"] = ",".join(
            f"{gpu}:{os.getpid()}:1073741824" for gpu in range(GPUS)
        )
        sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(PROCESSES)]
        try:
            live_processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
            nvml = NvmlSampler(lib_dir / LIBRARY_NAME)
            first_nvml = nvml.sample()
            if len(first_nvml.gpus) != GPUS:
                raise SystemExit(f"the stand-in NVML did not start: {first_nvml.status.error}")
            fresh = DrmClientSampler(tree)
            started = time.process_time()
            first = fresh.sample()
            first_sweep_ms = (time.process_time() - started) * 1000
            if len(first) != GPUS:
                raise SystemExit(f"the fake tree shows {len(first)} GPUs, not {GPUS}")
            variants: dict[str, Callable[[], object]] = {
                "drm, 200-process tree": fresh.sample,
                "drm, tree, no fd cache": DrmClientSampler(tree, rescan_every=1).sample,
                "drm, tree, no rescan": DrmClientSampler(tree, rescan_every=10**9).sample,
                "drm, live /proc": DrmClientSampler(Path("/proc")).sample,
                "nvml, 8 stand-in GPUs": nvml.sample,
            }
            rounds: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(args.rounds):
                for name, sample in variants.items():
                    rounds[name].append(cpu_ms_per_sample(sample, args.samples))
            opens = {
                "drm, 200-process tree": opens_per_sample(DrmClientSampler(tree), 50),
                "drm, tree, no fd cache": opens_per_sample(
                    DrmClientSampler(tree, rescan_every=1), 50
                ),
            }
            nvml.close()
        finally:
            for sleeper in sleepers:
                sleeper.kill()
                sleeper.wait()
    medians = {name: statistics.median(values) for name, values in rounds.items()}
    result = {
        "machine": machine_description(),
        "gpus": GPUS,
        "processes": PROCESSES,
        "live_processes": live_processes,
        "samples": args.samples,
        "rounds": args.rounds,
        "rescan_every": drm_clients.RESCAN_EVERY,
        "rescan_every_counted": drm_clients.RESCAN_EVERY_COUNTED,
        "ms_per_sample": {name: [round(v, 4) for v in values] for name, values in rounds.items()},
        "median_ms_per_sample": {name: round(v, 4) for name, v in medians.items()},
        "first_sweep_ms": round(first_sweep_ms, 3),
        "opens_per_sample": opens,
        "ratio_drm_over_nvml": round(
            medians["drm, 200-process tree"] / medians["nvml, 8 stand-in GPUs"], 2
        ),
        "ratio_live_over_nvml": round(
            medians["drm, live /proc"] / medians["nvml, 8 stand-in GPUs"], 2
        ),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{GPUS} GPUs, {PROCESSES} processes, {args.rounds} rounds of {args.samples} samples")
    for name, median in medians.items():
        each = ", ".join(f"{v:.3f}" for v in rounds[name])
        print(f"{name:<24} {median:7.3f} ms CPU per sample  rounds: {each}")
    print(f"first sweep of the tree: {first_sweep_ms:.2f} ms; opens per sample: {opens}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
