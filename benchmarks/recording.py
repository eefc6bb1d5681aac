"""``gputui record`` and its recordings: what recording costs beside the sampling, the file
size per GPU-hour, and the time to open a day's recording and seek to its end.

- CPU: the recorder's own work per frame (the snapshot to JSON data, the changes since the
  last whole frame, compressing and writing it) against the sampling every frame needs
  (``HostSampler`` and ``NvmlSampler`` on the stand-in ``libnvidia-ml.so.1``, 8 GPUs with a
  process each), in this process, taking turns; then the whole ``gputui record --interval 1``
  process against the monitor (``gputui --interval 1`` in a 120x40 pty), taking turns for as
  many rounds, CPU seconds per minute after 5 s of settling (the recorder's from its threads'
  schedstat, in nanoseconds; the monitor's from psutil, with its children), medians.
- Size: a 24-hour recording of an 8-GPU box at 1 s, written frame by frame through the real
  writer without waiting (86,400 frames, zstd and gzip side by side). The readings move as a
  busy box's do (seeded): training jobs of hours on each GPU with idle gaps, utilization,
  power and clocks that change every second, a host of 224 logical CPUs (a DGX H100's), and
  every process's CPU, memory and elapsed time; the identities are the stand-in's.
- Seek: ``Recording.open`` and ``at(end)`` of that recording in this process (median of 5),
  then the whole ``gputui snapshot --from FILE --json`` command (median of 3, start-up
  included); the same without the index, once; and ``gputui replay --summary``'s reading of
  the whole day, once.

    python benchmarks/recording.py                 # everything, about 5 minutes
    python benchmarks/recording.py --hours 1 --window 10 --json
    python benchmarks/recording.py --baseline 6c03c8c   # the recorder as of 6c03c8c too
    python benchmarks/recording.py --real-nvml --baseline-tree DIR   # on a GPU box

With ``--baseline REV``, each round also runs ``gputui record`` with gputui as of commit REV
(its ``gputui/`` from ``git archive``, first on the path), this tree's recorder, the
baseline's and the monitor in turn; ``--baseline-tree DIR`` takes a folder that holds such a
``gputui/`` already (a copy without git history). ``--real-nvml`` runs only the whole-process
rounds, on the machine's own NVIDIA driver instead of the stand-in.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._terminal import (  # noqa: E402
    machine_description,
    run_in_terminal,
)
from benchmarks.vendor_readers import baseline_gputui  # noqa: E402
from gputui.recording.frames import DECIMALS, FORMAT_VERSION, FULL_EVERY, Header  # noqa: E402
from gputui.recording.reader import Recording  # noqa: E402
from gputui.recording.summary import summarise  # noqa: E402
from gputui.recording.writer import RecordingWriter, index_path  # noqa: E402
from gputui.telemetry.apple import MpsSampler  # noqa: E402
from gputui.telemetry.host import HostSampler  # noqa: E402
from gputui.telemetry.nvml.sampler import NvmlSampler  # noqa: E402
from gputui.telemetry.readings import Snapshot  # noqa: E402
from gputui.telemetry.snapshot import snapshot_as_dict  # noqa: E402
from tests.fakenvml import LIBRARY_NAME, build_fake_nvml  # noqa: E402

GPUS = 8
HOST_CPUS = 224
"""A DGX H100's logical CPUs: the host's per-core figures are in every frame."""
MiB = 1 << 20
SUFFIXES = {"zstd": ".ndjson.zst", "gzip": ".ndjson.gz"}


def stand_in_env(lib_dir: Path | None) -> dict[str, str]:
    """The stand-in NVML's variables; none for ``None`` (the machine's own driver)."""
    if lib_dir is None:
        return {}
    processes = ",".join(f"{gpu}:{os.getpid()}:1073741824" for gpu in range(GPUS))
    return {
        "LD_LIBRARY_PATH": str(lib_dir),
        "FAKE_NVML_GPU_COUNT": str(GPUS),
        "FAKE_NVML_PROCESSES": processes,
    }


def header(interval_s: float = 1.0) -> Header:
    return Header(FORMAT_VERSION, "benchmark", 0, "dgx-01", "bench", interval_s, FULL_EVERY, 1.8e9)


# --- CPU ---------------------------------------------------------------------------------


def cpu_per_frame(lib_dir: Path, frames: int, rounds: int, folder: Path) -> dict[str, Any]:
    """Milliseconds of CPU per frame: sampling, and recording it with each codec."""
    os.environ.update(stand_in_env(lib_dir))
    host, nvml, mps = HostSampler(), NvmlSampler(lib_dir / LIBRARY_NAME), MpsSampler()
    taken = [Snapshot(host.sample(), nvml.sample(), mps.sample()) for _ in range(20)]
    if len(taken[-1].nvml.gpus) != GPUS:
        raise SystemExit(f"the stand-in NVML did not start: {taken[-1].nvml.status.error}")

    def sampling() -> None:
        for _ in range(frames):
            taken.append(Snapshot(host.sample(), nvml.sample(), mps.sample()))
            del taken[0]

    def recording(codec: str, round_: int) -> None:
        path = folder / f"cpu-{round_}{SUFFIXES[codec]}"
        writer = RecordingWriter(path, header(), codec=codec)
        for at in range(frames):
            readings = snapshot_as_dict(taken[at % len(taken)], decimals=DECIMALS)
            writer.write(float(at), readings, already_rounded=True)  # as the recorder does
        writer.close()

    results: dict[str, list[float]] = {"sampling": [], "zstd": [], "gzip": []}
    for round_ in range(rounds):
        for name in results:
            started = time.process_time()
            sampling() if name == "sampling" else recording(name, round_)
            results[name].append((time.process_time() - started) / frames * 1000)
    nvml.close()
    return {name: statistics.median(values) for name, values in results.items()} | {
        "rounds_ms": results
    }


def process_cpu(
    lib_dir: Path | None,
    window_s: float,
    folder: Path,
    rounds: int,
    baseline: Path | None = None,
) -> dict[str, Any]:
    """CPU seconds per minute of the recorder process and of the monitor, taking turns for
    ``rounds`` rounds (the machine's other load falls on both alike): medians, and each;
    with ``baseline`` (a folder holding an older ``gputui/``), that recorder's too, in turn.
    ``lib_dir`` ``None``: the machine's own NVML."""
    recorders = {"recorder": REPO} | ({} if baseline is None else {"baseline": baseline})
    each: dict[str, list[float]] = {name: [] for name in (*recorders, "monitor")}
    marker = first_gpu_name(lib_dir).encode()
    for round_ in range(rounds):
        for name, tree in recorders.items():
            each[name].append(_recorder_cpu(lib_dir, tree, window_s, folder / f"{name}-{round_}"))
        monitor = run_in_terminal(
            "gputui",
            [sys.executable, "-m", "gputui", "--interval", "1"],
            marker=marker,
            env={**stand_in_env(lib_dir), "PYTHONPATH": python_path(REPO)},
            steady_s=window_s,
        )
        each["monitor"].append(monitor.cpu_s_per_min)
    ratios = {
        f"{name}_ratios": [r / m for r, m in zip(each[name], each["monitor"], strict=True)]
        for name in recorders
    }
    return {name: statistics.median(values) for name, values in each.items()} | {
        "rounds": each,
        "ratios": ratios["recorder_ratios"],
        **({"baseline_ratios": ratios["baseline_ratios"]} if baseline is not None else {}),
    }


def python_path(tree: Path) -> str:
    """``tree`` first on the path, before what ``PYTHONPATH`` holds already (where Textual or
    zstandard were put on a machine that lacks them)."""
    return os.pathsep.join(filter(None, (str(tree), os.environ.get("PYTHONPATH"))))


def first_gpu_name(lib_dir: Path | None) -> str:
    """The first GPU's model (``H100`` of ``NVIDIA H100 80GB HBM3``), which the monitor shows
    once its first frame is drawn."""
    nvml = NvmlSampler(None if lib_dir is None else lib_dir / LIBRARY_NAME)
    try:
        return nvml.sample().gpus[0].name.removeprefix("NVIDIA ").split()[0]
    finally:
        nvml.close()


def _recorder_cpu(lib_dir: Path | None, tree: Path, window_s: float, output: Path) -> float:
    """CPU seconds per minute of ``gputui record --interval 1`` with gputui from ``tree``,
    over ``window_s`` after 5 s of settling."""
    env = {**os.environ, **stand_in_env(lib_dir), "PYTHONPATH": python_path(tree)}
    argv = [sys.executable, "-m", "gputui", "record", "--interval", "1"]
    argv += ["--output", f"{output}.ndjson.zst"]
    # run in the tree: ``-m`` puts the working folder first on the path
    recorder = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, cwd=tree)
    try:
        time.sleep(5.0)
        before, started = _threads_cpu_s(recorder.pid), time.monotonic()
        time.sleep(window_s)
        spent = _threads_cpu_s(recorder.pid) - before
        return spent / (time.monotonic() - started) * 60
    finally:
        recorder.terminate()
        recorder.wait()


def _threads_cpu_s(pid: int) -> float:
    """The CPU time of every thread of ``pid`` (from each one's schedstat, in nanoseconds:
    psutil's clock ticks are 10 ms, an eighth of what the recorder spends in 30 s). The
    recorder's threads all live from its first sample to its end."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # a thread that just ended
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
    return total / 1e9


# --- a day of readings -------------------------------------------------------------------


class Box:
    """An 8-GPU box's readings, second by second: jobs of hours with idle gaps on each GPU."""

    def __init__(self, template: dict[str, Any], seed: int = 29) -> None:
        self.chance = random.Random(seed)
        self.template = template
        self.cores = [self.chance.random() < 0.2 for _ in range(HOST_CPUS)]  # busy or not
        self.jobs: list[dict[str, Any] | None] = [None] * GPUS
        self.ends = [0.0] * GPUS
        self.energy = [1.0e6 * (gpu + 1) for gpu in range(GPUS)]
        self.counted = [0.0] * GPUS
        self.next_pid = 20_000

    def frame(self, t: float) -> dict[str, Any]:
        chance = self.chance
        data = copy.copy(self.template)
        cpu = dict(self.template["cpu"])
        per_core = [
            round(min(100.0, max(0.0, (92.0 if busy else 1.0) + chance.gauss(0, 4))), 1)
            for busy in self.cores
        ]
        cpu.update(
            logical_cores=HOST_CPUS,
            physical_cores=HOST_CPUS // 2,
            per_core_percent=per_core,
            utilization_percent=round(sum(per_core) / HOST_CPUS, 1),
            load_average=[round(40 + chance.random(), 2) for _ in range(3)],
            memory_used_bytes=700 * 2**30 + chance.randrange(0, 2**28, 4096),
            self_cpu_percent=round(chance.uniform(0.5, 2.5), 1),
            self_rss_bytes=45 * MiB + chance.randrange(0, MiB, 4096),
        )
        data["cpu"] = cpu
        data["gpus"] = [self._gpu(gpu, t) for gpu in range(GPUS)]
        return data

    def _gpu(self, index: int, t: float) -> dict[str, Any]:
        chance = self.chance
        if t >= self.ends[index]:  # a job ends, or a gap does
            if self.jobs[index] is None:
                memory = chance.randrange(20, 78) * 2**30
                self.jobs[index] = {"pid": self.next_pid, "start": t, "memory": memory}
                self.next_pid += chance.randrange(1, 500)
                self.ends[index] = t + chance.uniform(2, 6) * 3600
            else:
                self.jobs[index] = None
                self.ends[index] = t + chance.uniform(5, 60) * 60
        job = self.jobs[index]
        busy = job is not None
        gpu = dict(self.template["gpus"][index])
        utilization = float(min(100, max(0, round(chance.gauss(95, 4))))) if busy else 0.0
        power = round(chance.uniform(550, 700) if busy else chance.uniform(68, 75), 3)
        self.energy[index] += round(power, 3)
        self.counted[index] += round(power, 3)
        held = busy and chance.random() < 0.05
        gpu.update(
            utilization_percent=utilization,
            memory_utilization_percent=float(round(utilization * 0.6)),
            memory_used_bytes=(job["memory"] if job else 0) + 512 * MiB,
            temperature_c=float(round(chance.gauss(70 if busy else 35, 1))),
            power_w=power,
            energy_j=round(self.energy[index], 3),
            energy_joules=round(self.counted[index], 3),
            fan_percent=None,
            sm_clock_mhz=float(chance.choice([1755, 1830, 1980]) if busy else 345),
            pcie_rx_bytes_per_s=float(chance.randrange(0, 12_000_000) * 1024 if busy else 0),
            pcie_tx_bytes_per_s=float(chance.randrange(0, 2_000_000) * 1024 if busy else 0),
            pcie_link_gen=5 if busy else 1,
            performance_state=0 if busy else 2,
            throttle_reasons=["power cap"] if held else ([] if busy else ["idle"]),
            processes=[self._process(job, t, utilization)] if job else [],
        )
        return gpu

    def _process(self, job: dict[str, Any], t: float, utilization: float) -> dict[str, Any]:
        chance = self.chance
        return {
            "pid": job["pid"],
            "local_pid": job["pid"],
            "user": "ada",
            "command": f"python train.py --config configs/vit_h14.yaml --rank {job['pid'] % 8}",
            "gpu_memory_bytes": job["memory"],
            "sm_utilization_percent": utilization,
            "kind": "compute",
            "cpu_percent": round(chance.gauss(101, 3), 1),
            "rss_bytes": 12 * 2**30 + chance.randrange(0, 64 * MiB, 4096),
            "elapsed_s": round(t - job["start"] + 1234.567, 3),
        }


def a_day(template: dict[str, Any], hours: float, folder: Path) -> dict[str, Any]:
    """Write ``hours`` of frames at 1 s with each codec; their sizes and the time it took."""
    box = Box(template)
    writers = {
        codec: RecordingWriter(folder / f"day{suffix}", header(), codec=codec)
        for codec, suffix in SUFFIXES.items()
    }
    frames = round(hours * 3600)
    started = time.monotonic()
    for at in range(frames):
        data = box.frame(float(at))
        for writer in writers.values():
            writer.write(float(at), data)
    for writer in writers.values():
        writer.close()
    gpu_hours = GPUS * hours
    return {
        "frames": frames,
        "hours": hours,
        "write_s": time.monotonic() - started,
        "bytes": {codec: writer.size for codec, writer in writers.items()},
        "mib_per_gpu_hour": {
            codec: writer.size / MiB / gpu_hours for codec, writer in writers.items()
        },
        "files": {codec: str(writer.path) for codec, writer in writers.items()},
    }


def seek(path: Path) -> dict[str, float]:
    """Seconds to open the recording and read its last frame: in this process (median of
    5), as a whole command (median of 3), and without the index (once)."""
    inside = []
    for _ in range(5):
        started = time.perf_counter()
        last = Recording.open(path).at(math.inf)
        inside.append(time.perf_counter() - started)
        assert last is not None
    middle_started = time.perf_counter()
    Recording.open(path).at(12 * 3600.0)
    middle = time.perf_counter() - middle_started
    command = []
    argv = [sys.executable, "-m", "gputui", "snapshot", "--from", str(path), "--json"]
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
        command.append(time.perf_counter() - started)
    index = index_path(path)
    index.rename(index.with_suffix(".away"))
    try:
        started = time.perf_counter()
        Recording.open(path).at(math.inf)
        unindexed = time.perf_counter() - started
    finally:
        index.with_suffix(".away").rename(index)
    started = time.perf_counter()
    summarise(Recording.open(path))
    summary = time.perf_counter() - started
    return {
        "open_and_end_s": statistics.median(inside),
        "open_and_middle_s": middle,
        "command_s": statistics.median(command),
        "without_index_s": unindexed,
        "summary_s": summary,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0, help="the synthetic recording's")
    parser.add_argument("--frames", type=int, default=300, help="frames per CPU round")
    parser.add_argument(
        "--rounds", type=int, default=3, help="CPU rounds (per frame, and whole processes)"
    )
    parser.add_argument("--window", type=float, default=30.0, help="seconds of process CPU")
    parser.add_argument(
        "--baseline", metavar="REV", help="also the recorder as of commit REV, in the same rounds"
    )
    parser.add_argument(
        "--baseline-tree", metavar="DIR", type=Path, help="a folder holding the baseline's gputui/"
    )
    parser.add_argument(
        "--real-nvml",
        action="store_true",
        help="only the whole-process rounds, on this machine's NVIDIA driver",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "gputui")], check=True)
    if args.real_nvml:
        return real_nvml_rounds(args)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        lib_dir = build_fake_nvml(folder / "nvml")
        per_frame = cpu_per_frame(lib_dir, args.frames, args.rounds, folder)
        baseline = args.baseline_tree
        if args.baseline:
            baseline = baseline_gputui(args.baseline, folder / "baseline")
        processes = process_cpu(lib_dir, args.window, folder, args.rounds, baseline)
        nvml = NvmlSampler(lib_dir / LIBRARY_NAME)
        template = snapshot_as_dict(
            Snapshot(HostSampler().sample(), nvml.sample(), MpsSampler().sample())
        )
        nvml.close()
        day = a_day(template, args.hours, folder)
        seeks = {codec: seek(Path(file)) for codec, file in day["files"].items()}
    sampling = per_frame["sampling"]
    result = {
        "machine": machine_description(),
        "gpus": GPUS,
        "host_cpus": HOST_CPUS,
        "cpu_ms_per_frame": {k: round(v, 4) for k, v in per_frame.items() if k != "rounds_ms"},
        "cpu_rounds_ms": {k: [round(v, 4) for v in vs] for k, vs in per_frame["rounds_ms"].items()},
        "recording_over_sampling": {
            codec: round(per_frame[codec] / sampling, 3) for codec in SUFFIXES
        },
        "process_cpu_s_per_min": {
            k: round(v, 3) for k, v in processes.items() if k in ("recorder", "baseline", "monitor")
        },
        "process_cpu_rounds": {
            k: [round(v, 3) for v in vs] for k, vs in processes["rounds"].items()
        },
        "process_ratio_rounds": [round(v, 3) for v in processes["ratios"]],
        "baseline": args.baseline,
        "baseline_ratio_rounds": [round(v, 3) for v in processes.get("baseline_ratios", [])],
        "window_s": args.window,
        "frames": args.frames,
        "rounds": args.rounds,
        "day": {k: v for k, v in day.items() if k != "files"},
        "seek": {codec: {k: round(v, 4) for k, v in s.items()} for codec, s in seeks.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"machine: {result['machine']}")
    print(
        f"CPU ms per frame: {result['cpu_ms_per_frame']}; recording over sampling: "
        f"{result['recording_over_sampling']}"
    )
    print(f"process CPU-s/min: {result['process_cpu_s_per_min']}")
    print(
        f"{args.hours:g} h written in {day['write_s']:.0f} s; MiB per GPU-hour: "
        f"{ {k: round(v, 3) for k, v in day['mib_per_gpu_hour'].items()} }"
    )
    print(f"seek: {result['seek']}")
    return 0


def real_nvml_rounds(args: argparse.Namespace) -> int:
    """The recorder against the monitor on this machine's own driver and GPUs."""
    with tempfile.TemporaryDirectory() as tmp:
        baseline = args.baseline_tree
        if args.baseline:
            baseline = baseline_gputui(args.baseline, Path(tmp) / "baseline")
        processes = process_cpu(None, args.window, Path(tmp), args.rounds, baseline)
    result = {
        "machine": machine_description(),
        "nvml": "this machine's driver",
        "gpu": first_gpu_name(None),
        "process_cpu_s_per_min": {
            k: round(v, 3) for k, v in processes.items() if k in ("recorder", "baseline", "monitor")
        },
        "process_cpu_rounds": {
            k: [round(v, 3) for v in vs] for k, vs in processes["rounds"].items()
        },
        "process_ratio_rounds": [round(v, 3) for v in processes["ratios"]],
        "baseline_ratio_rounds": [round(v, 3) for v in processes.get("baseline_ratios", [])],
        "window_s": args.window,
        "rounds": args.rounds,
    }
    print(json.dumps(result, indent=2) if args.json else result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
