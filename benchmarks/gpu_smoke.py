"""The GPU smoke suite: gputui's GPU paths checked on a real device, in one command.

    PYTHONPATH=. python3 benchmarks/gpu_smoke.py --device cuda --out DIR
    python benchmarks/gpu_smoke.py --device cpu --out DIR      # the rehearsal CI runs

``--device cuda`` is an NVIDIA GPU on a CUDA build of torch and an AMD GPU on a ROCm build;
``--device xpu`` an Intel GPU; ``mps`` Apple's. Which GPU that is, is read from the build
the child reports (``torch_build``: ``torch.version.hip`` set means ROCm), never guessed
(:func:`platform_for`): NVIDIA's checks read NVML, AMD's and Intel's read the monitor's
own sysfs and DRM fdinfo readings (``gputui snapshot --json``, the GPU found by its PCI bus
id), and what a vendor lacks is SKIP with the reason. It needs torch, psutil and (for
NVIDIA) nvidia-ml-py; never Textual. The checks run in order, each printing one PASS, FAIL
or SKIP line as it ends; ``DIR/gpu_smoke.md`` and ``DIR/gpu_smoke.json`` (``{"device",
"machine", "checks": [{"name", "status", "figures", "detail"}], ...}``) list every check
and are written again after each one, so a suite cut off keeps what it measured. The whole
suite has a deadline (``--deadline``, 540 s: under the device machine's 600 s a command): a
check cut off by it, and every check after it, is SKIP with the reason, as on SIGTERM. The
exit status is 0 only when none failed and nothing stopped it (2 for a usage error).

The checks, the most telling first (a first GPU run must not lose them to a hang later):

1. imports: torch and its build (CUDA and cuDNN, ROCm's HIP and MIOpen, or XPU and the
   Level Zero driver), the device and its name; arch: the wheel has code for the GPU
   (NVIDIA's compute capability, AMD's ``gcnArchName``; not matched on Intel).
2. doctor: ``gputui doctor --json`` exits 0; pinned transfers beat pageable both ways;
   the device's figures fall in the ranges its kind and vendor should show. snapshot:
   ``gputui snapshot --json`` reads the GPU through its driver (NVML by UUID; AMD's and
   Intel's sysfs by bus id), healthy, with torch's memory size. nvml cost (NVIDIA):
   ``benchmarks/nvml_calls.py`` times every NVML call of 220 samples 50 ms apart (11 s,
   past the energy counter's 10 s): a sample's median CPU at most 1 ms a GPU, and no call
   made every sample above 0.5 ms of CPU.
3. bench: ``gputui bench`` for 4 epochs (resident fp32, on CUDA again with ``--no-graphs``
   to give what the CUDA graphs gain, then tf32 and bf16, classic fp32, and last
   ``--compile``, with TF32 too on CUDA builds; the CPU's rehearsal: 3 epochs, no tf32,
   which is fp32 there, and no eager run, the CPU's being eager): epochs 2 to 4 agree
   within the tolerance, the math is the one asked for (TF32 only where torch says it is
   in effect), every placement row is on the device, held-out accuracy beats chance, and
   on CUDA the resident runs replayed their step from a CUDA graph. Each run's
   event stream is kept as ``OUT/streams/bench_*.jsonl``, to test the UI on (tests/ui/streams).
4. timing: bench's steady epochs by the wall clock against the same epochs timed with the
   device's events in the same run (``pace``): bench must not read slower than the device
   ran (issue 40's goal: 3% apart). The CPU has no device clock: SKIP.
5. processes: during a run the monitor lists exactly the trainer's pid on the chosen GPU,
   and no other process of the run (the ``gputui`` parent above all) holds it. NVIDIA: by
   NVML on the GPU's UUID (or its MIG device's); in a pid namespace NVML's host pid counts
   as the trainer where ``telemetry/devnodes`` proves it, as the monitor matches it. AMD
   and Intel: by DRM fdinfo on the GPU's bus id (the runtimes open every GPU they see, so
   other GPUs' lists are reported, not judged).
6. oom: a real out-of-memory (another process holding all but a little of the GPU's
   memory; on the CPU, an address-space limit) ends in an ``oom`` error whose suggested
   batch size then trains.
7. experiments: each of batch-sweep, sync-stall and pipelines with no failed device;
   reading the loss every step is not faster than once (beyond the noise measured);
   resident data beats the DataLoader; a larger batch trains more images a second.
8. scale: ``gputui scale`` on 1, 2, 4... ranks up to every GPU (gloo with 2 ranks on
   the CPU): every world size finishes, on the backend gputui picks for the device (NCCL,
   RCCL under NCCL's name, XCCL), and its speedup, efficiency and all-reduce share are
   reported.

Every torch call runs in a child process (gputui's own commands, or this script run
again with ``--child``), so the parent never holds a GPU context of its own and the
process check sees only the run's. ``--device cuda`` is given its index once, ``cuda:0``,
as every command and child is given it (gputui's :class:`~gputui.device.Device`).

On the CPU the rehearsal proves each check's plumbing and logic, and judges what does not
depend on timing (status, math, placement, accuracy, the out-of-memory); epoch spreads
and the experiments' lessons are reported there, not judged, since a shared CI machine's
timings are noise. The GPU's tolerances are the real ones.

Checked against torch 2.13.0 (CPU, CI) and 2.11.0+cu130 (an H200, 2026-11-26): the suite
and the code it drives use no API that 2.11 lacks. The ROCm and XPU paths have not yet run
on an AMD or Intel GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import IO, Any, NoReturn

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # gputui's torch-free parts, and this file's --child runs

from gputui.device import Device, DeviceError  # noqa: E402  # found through the path above
from gputui.jobs.events import GRAPHS_OFF  # noqa: E402

GIB = 1 << 30
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
EXPERIMENTS = ("batch-sweep", "sync-stall", "pipelines")
CHANCE = 0.1
"""Ten classes: a model that learned nothing is right one time in ten."""
LEARNED = 2 * CHANCE
"""Held-out accuracy a run must beat to count as having learned (4 epochs reach 40 to 75%)."""


# ---------------------------------------------------------------------------
# What each kind of device should show


@dataclass(frozen=True)
class Expect:
    """What a device should measure. Ranges are ``(low, high)``; ``None`` leaves a side open."""

    label: str
    tolerance: float | None
    """Largest relative gap between bench's steady epochs by the wall clock and by the
    device's events in the same run; ``None``: reported, not judged."""
    epoch_tolerance: float | None
    """Largest relative spread of bench's steady epochs; ``None``: reported, not judged."""
    ranges: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    """Doctor figures in display units: ``*_gbs`` in GB/s (1e9 B/s), ``*_tflops`` in TFLOP/s."""


CUDA_EPOCHS = 0.25
"""Steady epochs on CUDA agree within ±25%. This CNN's step is launch-bound: 2.3 to 3 ms of
the host's Python and kernel launches (the GPU waits), so an epoch of half a second shows
the host's noise. On two H200 machines (2026-11-26) twelve 4-epoch runs spread 1.3% to
19.8% (three above 10%), and an 8-epoch classic run had one epoch 1.33 times its median:
a DataLoader worker stalled. A recompiling or restarting epoch costs several times more
(a compiled run's first epoch: 8 to 12 s against 0.6). The figure that must be right,
images/s, is judged at ±10% against CUDA events (``timing``)."""


CPU = Expect(
    "a CPU (a shared machine: loose)",
    tolerance=None,
    epoch_tolerance=None,
    ranges={"copy_gbs": (0.5, 2000.0), "matmul_fp32_tflops": (0.001, 100.0)},
)
GENERIC_GPU = Expect(
    "an unnamed NVIDIA GPU",
    tolerance=0.10,
    epoch_tolerance=CUDA_EPOCHS,
    ranges={
        "copy_gbs": (20.0, 20_000.0),
        "h2d_pinned_gbs": (1.0, 200.0),
        "d2h_pinned_gbs": (1.0, 200.0),
        "matmul_fp32_tflops": (0.1, 500.0),
        "matmul_bf16_tflops": (0.1, 5000.0),
    },
)
H100 = Expect(
    "an H100 (PCIe Gen4/Gen5 host link; HBM3; bf16 tensor cores)",
    tolerance=0.10,
    epoch_tolerance=CUDA_EPOCHS,
    ranges={
        # Copy in device memory, counted as bytes read plus written: about 3 TB/s on SXM.
        "copy_gbs": (1000.0, 4000.0),
        # Pinned transfers over PCIe: tens of GB/s (Gen4 x16 about 25, Gen5 about 50).
        "h2d_pinned_gbs": (10.0, 80.0),
        "d2h_pinned_gbs": (10.0, 80.0),
        # IEEE fp32 runs on the CUDA cores (67 TFLOP/s peak on SXM); bf16 on tensor cores.
        "matmul_fp32_tflops": (15.0, 70.0),
        "matmul_bf16_tflops": (150.0, 1000.0),
    },
)
H200 = Expect(
    "an H200 (HBM3e)",
    tolerance=0.10,
    epoch_tolerance=CUDA_EPOCHS,
    ranges={**H100.ranges, "copy_gbs": (1500.0, 5000.0)},
)
MPS = Expect(
    "an Apple GPU (unified memory)",
    tolerance=0.15,
    epoch_tolerance=0.15,
    ranges={"copy_gbs": (10.0, 1000.0), "matmul_fp32_tflops": (0.1, 100.0)},
)

# AMD's and Intel's bands are set from their datasheets' peaks (none measured here): the
# high side above the peak, the low side a fraction of it that only a broken path misses.
GENERIC_AMD = Expect(
    "an unnamed AMD GPU (ROCm)",
    tolerance=0.10,
    epoch_tolerance=CUDA_EPOCHS,
    ranges=GENERIC_GPU.ranges,
)
MI300X = Expect(
    "an MI300X (HBM3; PCIe Gen5 host link; bf16 matrix cores)",
    tolerance=0.10,
    epoch_tolerance=CUDA_EPOCHS,
    ranges={
        # AMD's MI300X datasheet: 5.3 TB/s HBM3 peak; fp32 163.4 TFLOP/s on the matrix cores
        # (81.7 on the vector units), bf16 1307.4 dense.
        "copy_gbs": (1500.0, 6000.0),
        "h2d_pinned_gbs": (10.0, 80.0),
        "d2h_pinned_gbs": (10.0, 80.0),
        "matmul_fp32_tflops": (15.0, 170.0),
        "matmul_bf16_tflops": (150.0, 1400.0),
    },
)
MI250 = Expect(
    "one GCD of an MI250 or MI250X (HBM2e; PCIe Gen4 host link)",
    tolerance=0.10,
    epoch_tolerance=CUDA_EPOCHS,
    ranges={
        # AMD's MI250X datasheet, for the two GCDs that torch shows as two devices: 3.2 TB/s
        # HBM2e, fp32 95.7 TFLOP/s (matrix), bf16 383; one GCD has half of each.
        "copy_gbs": (400.0, 2000.0),
        "h2d_pinned_gbs": (5.0, 40.0),
        "d2h_pinned_gbs": (5.0, 40.0),
        "matmul_fp32_tflops": (5.0, 55.0),
        "matmul_bf16_tflops": (40.0, 220.0),
    },
)
GENERIC_INTEL = Expect(
    "an unnamed Intel GPU (XPU)",
    tolerance=0.10,
    epoch_tolerance=CUDA_EPOCHS,
    ranges={**GENERIC_GPU.ranges, "copy_gbs": (10.0, 5000.0)},
)
INTEL_MAX = Expect(
    "an Intel Data Center GPU Max (HBM2e; one stack or two)",
    tolerance=0.10,
    epoch_tolerance=CUDA_EPOCHS,
    ranges={
        # Intel's Max 1550 datasheet: 3.2 TB/s HBM2e, fp32 about 52 TFLOP/s (vector), bf16
        # about 839 on the XMX engines; a Max 1100 about 1.2 TB/s, 22 and 352. Level Zero
        # may show each of a 1550's two stacks as a device, with half of each.
        "copy_gbs": (300.0, 4000.0),
        "h2d_pinned_gbs": (5.0, 80.0),
        "d2h_pinned_gbs": (5.0, 80.0),
        "matmul_fp32_tflops": (3.0, 60.0),
        "matmul_bf16_tflops": (30.0, 900.0),
    },
)
INTEL_ARC = Expect(
    "an Intel Arc GPU (GDDR6; PCIe Gen4, x8 on some)",
    tolerance=0.10,
    epoch_tolerance=CUDA_EPOCHS,
    ranges={
        # Intel's Arc A770 and B580 pages: 560 and 456 GB/s GDDR6, fp32 under 20 TFLOP/s,
        # bf16 on the XMX engines under 160.
        "copy_gbs": (100.0, 1200.0),
        "h2d_pinned_gbs": (2.0, 40.0),
        "d2h_pinned_gbs": (2.0, 40.0),
        "matmul_fp32_tflops": (1.0, 25.0),
        "matmul_bf16_tflops": (5.0, 250.0),
    },
)


def expectations(kind: str, name: str | None, vendor: str | None = None) -> Expect:
    """What a device of this kind (``cpu``, ``cuda``, ``mps``, ``xpu``), vendor (``amd`` for
    ``cuda`` on a ROCm build) and name should measure."""
    if kind == "cpu":
        return CPU
    if kind == "mps":
        return MPS
    text = (name or "").upper()
    if kind == "xpu":
        if "MAX" in text:
            return INTEL_MAX
        return INTEL_ARC if "ARC" in text else GENERIC_INTEL
    if vendor == "amd":
        if "MI300X" in text:
            return MI300X
        return MI250 if "MI250" in text else GENERIC_AMD
    if "H200" in text:
        return H200
    if "H100" in text:
        return H100
    return GENERIC_GPU


# ---------------------------------------------------------------------------
# The checks' decisions: pure functions, tested on their own


@dataclass
class Check:
    """One line of the report."""

    name: str
    status: str
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)


VENDORS = {"cuda": "nvidia", "rocm": "amd", "xpu": "intel"}
"""The GPU's maker, in the monitor's words (``vendor``), by torch's build."""
FROM_NVIDIA = ("arch", "snapshot", "nvml cost", "processes")
"""The checks that read what a GPU's driver says."""
SAMPLE_CPU_MS_PER_GPU = 1.0
"""The most CPU a monitor's NVML sample may take a GPU, at the median (an H200 took 0.40 ms
on driver 580 once its energy counter was read every 10 s, 3.95 before)."""
EVERY_SAMPLE_CALL_CPU_MS = 0.5
"""The most CPU one NVML call made every sample may take (``ENERGY_SLOW_S``'s rule: a
slower one is made every few seconds)."""
NVML_COST_SAMPLES, NVML_COST_INTERVAL_S = 220, 0.05
"""``nvml cost``'s samples and their spacing: 11 s, so that a slow energy counter's
10 s read falls in them."""


@dataclass(frozen=True)
class Platform:
    """What the suite checks on one device, decided from the facts its child reported."""

    build: str
    """``torch_build``: ``cuda``, ``rocm``, ``xpu``, ``cpu`` (``unknown``: no facts)."""
    vendor: str | None
    """The GPU's maker as the monitor names it (``nvidia``, ``amd``, ``intel``); ``None``
    where the monitor reads no GPU for the device (the CPU, MPS)."""
    tf32: bool
    """Whether a ``tf32`` run's math is TF32 here (torch's own word on ROCm and XPU)."""
    backend: str | None
    """``gputui scale``'s backend for the device; ``None`` where it refuses to run."""
    skips: Mapping[str, str] = field(default_factory=dict)
    """Each check that does not run here, with the reason."""


def platform_for(kind: str, facts: Mapping[str, Any]) -> Platform:
    """What runs on a device of ``kind``, by the build and abilities in ``facts`` (the
    ``facts`` child's: ``build``, ``gcn_arch``, ``tf32_matmul``, ``bf16``, ``tf32``, ``xccl``)."""
    from gputui.jobs.config import ConfigError
    from gputui.jobs.world import backend_for

    build = str(facts.get("build") or "unknown")
    vendor = VENDORS.get(build) if kind in ("cuda", "xpu") else None
    skips: dict[str, str] = {}
    if vendor is None:
        why = f"torch's build is {build}" if kind in ("cuda", "xpu") else f"this is {kind}"
        for name in FROM_NVIDIA:
            skips[name] = f"the monitor reads no GPU for {kind}: {why}"
    elif vendor == "amd" and not (facts.get("gcn_arch") and facts.get("arch_list")):
        skips["arch"] = (
            "torch gives no gcnArchName or arch list to match (compute capability is NVIDIA's)"
        )
    elif vendor == "intel":
        skips["arch"] = "compute capability is NVIDIA's; XPU's AOT targets are not matched here"
    if vendor == "intel" and facts.get("bf16") is False:
        skips["bench resident bf16"] = "this Intel GPU has no bf16 (torch.xpu.is_bf16_supported())"
    if vendor == "intel" and facts.get("tf32") is False:
        skips["bench resident tf32"] = "this Intel GPU has no TF32 (torch.xpu.is_tf32_supported())"
    tf32 = (
        vendor == "nvidia"
        or (vendor == "amd" and facts.get("tf32_matmul") is True)
        or (vendor == "intel" and facts.get("tf32") is True)
    )
    if kind == "cpu":  # (the rehearsal's time goes to what differs)
        skips["bench resident tf32"] = "TF32 is CUDA's: on the CPU it is the fp32 bench above"
    if kind != "cuda":
        skips["bench resident fp32 eager"] = (
            f"CUDA graphs are CUDA's: on {kind} the fp32 bench above is eager"
        )
    elif vendor == "amd":
        skips["bench resident fp32 eager"] = (
            "gputui replays no CUDA graph on ROCm (a capture can hang, pytorch#179961): "
            "the fp32 bench above is eager"
        )
    if kind == "cuda" and not tf32:
        skips["bench resident tf32 compile"] = (
            f"TF32 is not in effect on this {build} build ({_tf32_why(facts)})"
        )
    try:
        backend: str | None = backend_for(kind, xccl_available=facts.get("xccl") is not False)
    except ConfigError as refused:
        backend, skips["scale"] = None, f"gputui scale refuses {kind} here: {refused}"
    return Platform(build, vendor, tf32, backend, skips)


def _tf32_why(facts: Mapping[str, Any]) -> str:
    """Why torch says TF32 is off, in its words: ROCm's matmuls take it only with
    ``HIPBLASLT_ALLOW_TF32=1`` (torch 2.7 on), on the GPUs whose hipBLASLt has it."""
    if facts.get("build") == "rocm":
        return (
            f"torch reads TF32 back as {facts.get('tf32_matmul')} with "
            f"HIPBLASLT_ALLOW_TF32={facts.get('hipblaslt_allow_tf32')}"
        )
    return "TF32 is NVIDIA's"


def facts_line(facts: Mapping[str, Any]) -> str:
    """torch, its build's own versions and the suite's packages, in one line."""
    build = facts.get("build")
    if build == "rocm":
        stack = f"ROCm build (HIP {facts.get('hip')}, MIOpen {facts.get('cudnn')})"
    elif build == "xpu":
        stack = (
            f"XPU build ({facts.get('xpu') or 'version not given'}, "
            f"Level Zero driver {facts.get('driver') or 'unknown'})"
        )
    elif build == "cuda":
        stack = f"CUDA {facts.get('cuda')}, cuDNN {facts.get('cudnn')}"
    else:
        stack = f"{build} build"
    nvml = f", nvidia-ml-py {facts.get('pynvml') or 'absent'}" if build == "cuda" else ""
    return (
        f"torch {facts.get('torch')}, {stack}{nvml}, psutil {facts.get('psutil')}, "
        f"Textual {facts.get('textual') or 'absent (not needed)'}"
    )


def spread(values: Sequence[float]) -> float:
    """Largest relative distance of any value from their median (0.04 is ±4%)."""
    middle = statistics.median(values)
    return max(abs(v - middle) for v in values) / middle


def arch_runs(capability: str, arch_list: Sequence[str]) -> tuple[bool, str]:
    """Whether a wheel built for ``arch_list`` runs kernels on a GPU of ``capability``
    (``"9.0"``), by the doctor's own rule (:func:`gputui.doctor.wheels.gpu_code`)."""
    from gputui.doctor.wheels import GpuCode, gpu_code

    major, minor = (int(part) for part in capability.split(".")[:2])
    found = gpu_code(10 * major + minor, tuple(arch_list))
    listed = ", ".join(arch_list)
    if found is GpuCode.COMPILED:
        return True, f"compiled code for compute capability {capability} ({listed})"
    if found is GpuCode.PTX:
        return (
            True,
            f"only PTX, compiled at first use, for compute capability {capability} ({listed})",
        )
    return False, f"this wheel has no code for compute capability {capability} ({listed})"


def gcn_arch_check(gcn_arch: str, arch_list: Sequence[str]) -> Check:
    """Whether a ROCm wheel built for ``arch_list`` (``gfx90a``, ``gfx942``...) has code for
    an AMD GPU whose ``gcnArchName`` is ``gcn_arch`` (``gfx942:sramecc+:xnack-``): HIP
    compiles no kernel at first use, so the base name must be listed."""
    base = gcn_arch.split(":")[0]
    listed = ", ".join(arch_list)
    figures = {"gcn_arch": gcn_arch, "arch_list": list(arch_list)}
    if base in {arch.split(":")[0] for arch in arch_list}:
        return Check("arch", PASS, f"compiled code for {base} ({listed})", figures)
    return Check("arch", FAIL, f"this wheel has no code for {base} ({listed})", figures)


def placement_problems(run: Mapping[str, Any], device: Device) -> list[str]:
    """Every place a bench run put something off ``device`` (the dataset: where its pipeline
    keeps it)."""
    problems = []
    for row in run.get("placement") or []:
        for key in ("device", "state_device", "step_device", "buffer_device"):
            value = row.get(key)
            if value is not None and not same_device(value, str(device)):
                problems.append(f"{row['group']} {key} {value}")
    inputs = run.get("inputs") or {}
    for key in ("device", "labels_device"):
        if not same_device(inputs.get(key), str(device)):
            problems.append(f"inputs {key} {inputs.get(key)}")
    dataset_on = str(device) if run.get("pipeline") == "resident" else "cpu"
    if not same_device(inputs.get("dataset_device"), dataset_on):
        problems.append(f"dataset on {inputs.get('dataset_device')}, not {dataset_on}")
    if not run.get("placement"):
        problems.append("no placement rows")
    return problems


def same_device(a: str | None, b: str | None) -> bool:
    """Whether two devices, as a result writes them, are one: ``cuda`` is ``cuda:0`` and
    ``mps`` is ``mps:0`` (torch names a tensor's device with its index)."""

    def indexed(name: str | None) -> Device | str | None:
        try:
            return Device.parse(name).indexed() if name is not None else None
        except DeviceError:  # not one device (``cpu, cuda:0``): only itself
            return name

    return indexed(a) == indexed(b)


def expected_math(precision: str, tf32: bool) -> str:
    """The start of the math a bench run must report for its precision, where TF32 is
    (``tf32``) or is not in effect."""
    if precision == "bf16":
        return "bf16"
    if precision == "tf32" and tf32:
        return "TF32"
    return "IEEE fp32"


def bench_verdict(
    run: Mapping[str, Any],
    device: Device,
    precision: str,
    tolerance: float | None,
    tf32: bool = False,
    graphs: bool = False,
    eager: bool = False,
) -> Check:
    """One bench run's check: it ended, steady epochs agree, the math and placement are
    right, and it learned; with ``graphs``, its steps were replayed from a CUDA graph."""
    name = _bench_name(run.get("pipeline", "?"), precision, bool(run.get("compile")), eager)
    if run.get("status") != "ok":
        error = run.get("error") or {}
        if error.get("kind") == "toolchain":  # --compile on a machine without a compiler
            return Check(name, SKIP, f"not run here: {error.get('message')}")
        return Check(name, FAIL, f"status {run.get('status')}: {error.get('message')}")
    epochs = run.get("epochs") or []
    seconds = [e["seconds"] for e in epochs if not e.get("warmup")]
    accuracy = epochs[-1].get("accuracy") if epochs else None
    figures = {
        "epoch_seconds": [round(e["seconds"], 4) for e in epochs],
        "images_per_second": run.get("images_per_second"),
        "accuracy": accuracy,
        "math": run.get("math"),
        "graphs": run.get("graphs"),
    }
    problems = []
    fell_back = [note for note in run.get("notes") or [] if note.startswith(GRAPHS_OFF)]
    if graphs and (fell_back or not run.get("graphs")):
        problems.append(f"CUDA graphs did not run: {fell_back[0] if fell_back else 'not asked'}")
    if len(seconds) < 2:
        problems.append(f"only {len(seconds)} steady epochs")
    else:
        figures["steady_spread"] = round(spread(seconds), 4)
        if tolerance is not None and figures["steady_spread"] > tolerance:
            problems.append(
                f"steady epochs differ by ±{figures['steady_spread']:.1%} "
                f"(more than ±{tolerance:.0%})"
            )
    math = expected_math(precision, tf32)
    if not str(run.get("math") or "").startswith(math):
        problems.append(f"math {run.get('math')!r}, expected {math}")
    problems += placement_problems(run, device)
    if accuracy is None or accuracy <= LEARNED:
        problems.append(f"accuracy {accuracy} is no better than {LEARNED:.0%}")
    if problems:
        return Check(name, FAIL, "; ".join(problems), figures)
    return Check(
        name,
        PASS,
        f"{run['images_per_second']:,.0f} images/s, steady epochs within "
        f"±{figures['steady_spread']:.1%}{_judged(tolerance)}, {run['math']}, "
        f"accuracy {accuracy:.0%}, everything on {device}",
        figures,
    )


GRAPHS_LOSS_GAP = 0.10
"""The most the last epoch's loss may differ between the graphed run and the eager one
(the same seed, data and order; only the kernels' rounding differs): a first bound, to be
set from what a GPU measures."""


def graphs_verdict(check: Check, graphed: Mapping[str, Any], eager: Mapping[str, Any]) -> Check:
    """The eager run's check, with what the CUDA graphs gained over it and whether the
    graphed run trained as it did (its last loss within :data:`GRAPHS_LOSS_GAP`)."""
    ratio = graphed["images_per_second"] / eager["images_per_second"]
    losses = [run["epochs"][-1]["loss"] for run in (graphed, eager)]
    gap = abs(losses[0] - losses[1]) / losses[1]
    figures = {**check.figures, "graphs_speedup": round(ratio, 3), "loss_gap": round(gap, 4)}
    said = f"with CUDA graphs {ratio:.2f}x this eager pace (issue 40's goal: 5x)"
    if gap > GRAPHS_LOSS_GAP:
        why = f"the graphed run's last loss {losses[0]:.4f} is {gap:.1%} from eager's"
        return Check(check.name, FAIL, f"{why} {losses[1]:.4f}; {said}", figures)
    return Check(check.name, PASS, f"{check.detail}; {said}, losses {gap:.1%} apart", figures)


def _judged(tolerance: float | None) -> str:
    return " (not judged: a shared CPU)" if tolerance is None else f" (at most ±{tolerance:.0%})"


def doctor_verdict(
    report: Mapping[str, Any], exit_code: int, device: Device, expect: Expect
) -> Check:
    """The doctor's check: exit 0, pinned faster than pageable, figures in range."""
    ours = [d for d in report.get("devices", []) if d.get("device") == str(device)]
    failed = [c["name"] for c in report.get("checks", []) if c.get("status") == "fail"]
    problems = []
    if exit_code != 0:
        problems.append(f"exit {exit_code} (failed checks: {', '.join(failed) or 'none'})")
    if not ours:
        return Check("doctor", FAIL, "; ".join([*problems, f"no report for {device}"]))
    figures = doctor_figures(ours[0])
    if device.kind not in ("cpu", "mps"):
        for way in ("h2d", "d2h"):
            pinned, pageable = figures.get(f"{way}_pinned_gbs"), figures.get(f"{way}_pageable_gbs")
            if pinned is None or pageable is None or pinned <= pageable:
                problems.append(f"{way.upper()} pinned {pinned} GB/s not above pageable {pageable}")
    for key, (low, high) in expect.ranges.items():
        value = figures.get(key)
        if value is None:
            problems.append(f"{key} not measured")
        elif (low is not None and value < low) or (high is not None and value > high):
            problems.append(f"{key} {value:.4g} outside {low}..{high} for {expect.label}")
    if problems:
        return Check("doctor", FAIL, "; ".join(problems), figures)
    shown = ", ".join(f"{key} {value:.4g}" for key, value in figures.items() if value is not None)
    return Check("doctor", PASS, f"exit 0; {shown} (in range for {expect.label})", figures)


def snapshot_verdict(report: Mapping[str, Any], exit_code: int, facts: Mapping[str, Any]) -> Check:
    """``gputui snapshot --json`` read through the real driver: it exits 0, NVML answers,
    and the GPU torch names (by UUID) is there, healthy, with torch's memory size (NVML's
    total also counts what the driver reserves: within 2%) and its name."""
    nvml = report.get("nvml") or {}
    uuid = facts.get("uuid")
    gpus = report.get("gpus") or []
    ours = [g for g in gpus if uuid and g.get("uuid") and same_uuid(g["uuid"], uuid)]
    problems = []
    if exit_code != 0:
        problems.append(f"exit {exit_code}")
    if not nvml.get("available"):
        problems.append(f"NVML not available: {nvml.get('error')}")
    if not ours:
        listed = [g.get("uuid") for g in gpus]
        return Check("snapshot", FAIL, "; ".join([*problems, f"no GPU {uuid} in {listed}"]))
    gpu = ours[0]
    fields = ("name", "state", "memory_total_bytes", "temperature_c", "power_w", "sm_clock_mhz")
    figures = {key: gpu.get(key) for key in fields}
    figures["driver_version"] = nvml.get("driver_version")
    missing = [key for key in fields if gpu.get(key) is None]
    if gpu.get("state") != "ok":
        problems.append(f"state {gpu.get('state')}: {gpu.get('error')}")
    if missing:
        problems.append(f"NVML gave no {', '.join(missing)}")
    torch_bytes, nvml_bytes = facts.get("memory_bytes"), gpu.get("memory_total_bytes")
    if torch_bytes and nvml_bytes and not 1 <= nvml_bytes / torch_bytes <= 1.02:
        problems.append(f"NVML's memory {nvml_bytes} against torch's {torch_bytes}")
    if facts.get("name") and gpu.get("name") != facts["name"]:
        problems.append(f"NVML names it {gpu.get('name')!r}, torch {facts['name']!r}")
    if problems:
        return Check("snapshot", FAIL, "; ".join(problems), figures)
    return Check(
        "snapshot",
        PASS,
        f"GPU {gpu.get('index')} {gpu['name']}, {nvml_bytes / GIB:.1f} GiB, "
        f"{gpu['temperature_c']:.0f} °C, {gpu['power_w']:.0f} W, "
        f"driver {nvml.get('driver_version')}",
        figures,
    )


DRM_FIELDS = {
    "amd": ("name", "state", "memory_total_bytes", "power_w", "sm_clock_mhz"),
    "intel": ("name", "state", "sm_clock_mhz"),
}
"""What the monitor must read of an AMD or Intel GPU: amdgpu's sysfs and hwmon give all of
these (temperatures are reported: an MI300X has no edge sensor, only junction and memory);
i915 and xe give the clocks, and VRAM, temperature and power only on some GPUs."""
TEMPERATURES = {
    "temperature_c": "",
    "junction_temperature_c": " junction",
    "memory_temperature_c": " memory",
}
DRM_MEMORY = (0.9, 1.1)
"""An AMD GPU's VRAM as the monitor reads it against torch's: both count the whole of it
(loose: AMD does not document what its runtime holds back). An Intel GPU's is reported, not
judged: Level Zero may show each stack of a card as a device of its own."""


def drm_gpu(report: Mapping[str, Any], vendor: str, bus_id: str | None) -> Mapping[str, Any] | None:
    """The GPU of ``vendor`` that ``gputui snapshot --json`` lists at torch's ``bus_id``."""
    from gputui.pci import canonical_bus_id

    wanted = canonical_bus_id(bus_id)
    for gpu in report.get("gpus") or []:
        if gpu.get("vendor") == vendor and wanted and canonical_bus_id(gpu.get("bus_id")) == wanted:
            return gpu
    return None


def nvml_cost_verdict(result: Mapping[str, Any]) -> Check:
    """``benchmarks/nvml_calls.py --json`` on the real driver: a sample's median CPU at most
    ``SAMPLE_CPU_MS_PER_GPU`` a GPU, and no call made every sample (once a GPU or more)
    above ``EVERY_SAMPLE_CALL_CPU_MS``; the costliest calls are reported."""
    gpus = max(len(result.get("gpus") or ()), 1)
    median = float(result["sample_cpu_ms_median"])
    calls = sorted(result.get("calls") or (), key=lambda c: -c["cpu_ms_per_sample"])
    slow = [
        f"{c['function']} {c['cpu_us_per_call'] / 1000:.2f} ms a call"
        for c in calls
        if c["per_sample"] >= gpus and c["cpu_us_per_call"] / 1000 > EVERY_SAMPLE_CALL_CPU_MS
    ]
    costliest = ", ".join(
        f"{c['function'].removeprefix('nvmlDevice')} {c['cpu_us_per_call']:.0f} us x "
        f"{c['per_sample']:g}"
        for c in calls[:3]
    )
    figures = {
        "gpus": gpus,
        "sample_cpu_ms_median": median,
        "sample_cpu_ms_mean": result.get("sample_cpu_ms_mean"),
        "costliest": calls[:3],
    }
    detail = (
        f"a sample {median:.2f} ms of CPU at the median for {gpus} GPU{'s' * (gpus > 1)} "
        f"(at most {SAMPLE_CPU_MS_PER_GPU:g} ms a GPU); costliest calls: {costliest}"
    )
    problems = [f"every sample: {call}" for call in slow]
    if median > SAMPLE_CPU_MS_PER_GPU * gpus:
        problems.insert(0, "too slow a sample")
    if problems:
        return Check("nvml cost", FAIL, f"{'; '.join(problems)}; {detail}", figures)
    return Check("nvml cost", PASS, detail, figures)


def drm_snapshot_verdict(
    report: Mapping[str, Any], exit_code: int, facts: Mapping[str, Any], vendor: str
) -> Check:
    """``gputui snapshot --json`` on an AMD or Intel GPU: it exits 0, and the GPU torch
    names (by PCI bus id) is there, healthy, read through sysfs, with torch's memory size on
    AMD. The names are reported, not judged (torch's and the PCI database's words differ)."""
    gpu = drm_gpu(report, vendor, facts.get("bus_id"))
    problems = [f"exit {exit_code}"] if exit_code != 0 else []
    if gpu is None:
        listed = [(g.get("vendor"), g.get("bus_id")) for g in report.get("gpus") or []]
        problems.append(f"no {vendor} GPU at torch's bus id {facts.get('bus_id')} in {listed}")
        return Check("snapshot", FAIL, "; ".join(problems))
    keys = (*DRM_FIELDS[vendor], "memory_total_bytes", "power_w", *TEMPERATURES)
    figures = {key: gpu.get(key) for key in dict.fromkeys(keys)}
    figures.update(
        bus_id=gpu.get("bus_id"),
        torch_name=facts.get("name"),
        torch_memory_bytes=facts.get("memory_bytes"),
    )
    missing = [key for key in DRM_FIELDS[vendor] if gpu.get(key) is None]
    if gpu.get("state") != "ok":
        problems.append(f"state {gpu.get('state')}: {gpu.get('error')}")
    if missing:
        problems.append(f"sysfs gave no {', '.join(missing)}")
    torch_bytes, read_bytes = facts.get("memory_bytes"), gpu.get("memory_total_bytes")
    low, high = DRM_MEMORY
    judged = vendor == "amd" and torch_bytes and read_bytes
    if judged and not low <= read_bytes / torch_bytes <= high:
        problems.append(f"the monitor's memory {read_bytes} against torch's {torch_bytes}")
    if problems:
        return Check("snapshot", FAIL, "; ".join(problems), figures)
    shown = [f"{read_bytes / GIB:.1f} GiB" if read_bytes else "memory n/a"]
    shown += [f"{gpu[key]:.0f} °C{where}" for key, where in TEMPERATURES.items() if gpu.get(key)]
    shown += [f"{gpu['power_w']:.0f} W"] if gpu.get("power_w") is not None else []
    return Check(
        "snapshot",
        PASS,
        f"GPU {gpu.get('index')} {gpu['name']} at {gpu.get('bus_id')} (torch: "
        f"{facts.get('name')}), {', '.join(shown)}, {gpu['sm_clock_mhz']:.0f} MHz",
        figures,
    )


def drm_process_verdict(
    report: Mapping[str, Any],
    vendor: str,
    bus_id: str | None,
    bench_pid: int,
    run_pids: set[int],
) -> Check:
    """The monitor's process lists on an AMD or Intel GPU (DRM fdinfo) during a run: the
    trainer, alone of the run, on the GPU at ``bus_id``, and the ``gputui`` parent on none.
    ROCm and Level Zero open every GPU they see, so the run on other GPUs is reported, not
    judged."""
    gpu = drm_gpu(report, vendor, bus_id)
    if gpu is None:
        return Check("processes", FAIL, f"no {vendor} GPU at {bus_id} in the snapshot")
    if gpu.get("processes") is None:
        return Check("processes", FAIL, f"the monitor could not list processes: {gpu.get('error')}")
    listed = {
        str(g.get("bus_id")): sorted(p["pid"] for p in g.get("processes") or [])
        for g in report.get("gpus") or []
        if g.get("vendor") == vendor
    }
    on_ours = {p["pid"] for p in gpu["processes"]} & run_pids
    elsewhere = {
        bus: sorted(set(pids) & run_pids)
        for bus, pids in listed.items()
        if bus != str(gpu.get("bus_id")) and set(pids) & run_pids
    }
    figures = {
        "gpu": gpu.get("index"),
        "bus_id": gpu.get("bus_id"),
        "bench_pid": bench_pid,
        "run_pids": sorted(run_pids),
        "listed": listed,
        "run_elsewhere": elsewhere,
    }
    problems = []
    if any(bench_pid in pids for pids in listed.values()):
        problems.append(f"the gputui parent (pid {bench_pid}) holds a GPU")
    if len(on_ours - {bench_pid}) != 1:
        problems.append(
            f"the monitor lists {listed.get(str(gpu.get('bus_id')))} on GPU {gpu.get('index')}; "
            f"the run's pids are {sorted(run_pids)}"
        )
    if problems:
        return Check("processes", FAIL, "; ".join(problems), figures)
    (pid,) = on_ours - {bench_pid}
    also = f"; the run also on {elsewhere} (not judged)" if elsewhere else ""
    return Check(
        "processes",
        PASS,
        f"the monitor (DRM fdinfo) lists the trainer (pid {pid}) on GPU {gpu.get('index')} "
        f"({gpu.get('bus_id')}), and not the gputui parent{also}",
        figures,
    )


def doctor_figures(device_report: Mapping[str, Any]) -> dict[str, float | None]:
    """A doctor device report's figures in display units: GB/s (1e9) and TFLOP/s."""
    out: dict[str, float | None] = {}
    for key, value in device_report.items():
        if key.endswith("_bytes_per_s"):
            out[key.removesuffix("_bytes_per_s") + "_gbs"] = None if value is None else value / 1e9
        elif key.endswith("_tflops"):
            out[key] = value
    return out


def experiment_verdict(name: str, result: Mapping[str, Any], judged: bool = True) -> Check:
    """An experiment's check: it ended with no failed device, and shows its lesson (when
    ``judged``: a shared CPU's timings can reverse any lesson, so there it is reported)."""
    check = f"experiment {name}"
    failed = [
        f"{d['device']}: {d.get('error')}"
        for d in result.get("device_results", [])
        if d.get("status") != "ok"
    ]
    if result.get("status") != "ok" or failed or not result.get("device_results"):
        why = "; ".join(failed) or str((result.get("error") or {}).get("message"))
        return Check(check, FAIL, f"status {result.get('status')}: {why}")
    device = result["device_results"][0]
    rows = device["rows"]
    if name == "sync-stall":
        summary = device["summary"]
        every, once, noise = summary["every_step_ms"], summary["once_ms"], summary["noise_ms"]
        figures = {"every_step_ms": every, "once_ms": once, "noise_ms": noise}
        ok = every >= once - noise
        detail = f"every step {every:.3f} ms, once {once:.3f} ms (noise {noise:.3f} ms)"
    elif name == "pipelines":
        rate = {row["pipeline"]: row["images_per_second"] for row in rows}
        figures = {"resident_ips": rate.get("resident"), "classic_ips": rate.get("classic")}
        ok = None not in figures.values() and rate["resident"] >= rate["classic"]
        detail = (
            f"resident {rate.get('resident') or 0:,.0f} vs "
            f"classic {rate.get('classic') or 0:,.0f} images/s"
        )
    else:
        done = [row for row in rows if row.get("error") is None]
        first, last = done[0], done[-1]
        figures = {
            "data_share": {row["batch_size"]: round(row["data_share"], 4) for row in done},
            "images_per_second": {
                row["batch_size"]: round(row["images_per_second"]) for row in done
            },
        }
        # Judged by throughput: on a GPU this small CNN's step is launch-bound (its compute
        # time hardly grows with the batch) while the batch's copy grows, so the data share
        # rises with the batch there (3% to 13% from 32 to 2048 on an H200) and falls on a
        # CPU. Either way a larger batch must train more images a second.
        ok = len(done) >= 2 and last["images_per_second"] > first["images_per_second"]
        detail = (
            f"{first['images_per_second']:,.0f} images/s at batch {first['batch_size']}, "
            f"{last['images_per_second']:,.0f} at batch {last['batch_size']}; data share "
            f"{first['data_share']:.1%} and {last['data_share']:.1%}"
        )
    if not judged:
        return Check(check, PASS, f"{detail} (the lesson not judged: a shared CPU)", figures)
    return Check(check, PASS if ok else FAIL, detail, figures)


def timing_verdict(run: Mapping[str, Any], tolerance: float | None) -> Check:
    """Bench's steady epochs by the wall clock against the same epochs timed with the
    device's events in the same run (``pace``: medians; issue 40's goal is 3% apart)."""
    pace = run.get("pace") or {}
    wall, device, clock = pace.get("wall_s"), pace.get("device_s"), pace.get("device_clock")
    if not wall or not device:
        return Check("timing", SKIP, f"bench's epochs have no device clock to compare ({clock})")
    gap = abs(wall - device) / device
    figures = {"wall_s": wall, "device_s": device, "gap": round(gap, 4), "clock": clock}
    detail = f"steady epochs {wall:.4f} s by the wall, {device:.4f} s by {clock}: {gap:.1%} apart"
    ok = tolerance is None or gap <= tolerance
    return Check("timing", PASS if ok else FAIL, detail + _judged(tolerance), figures)


def oom_verdict(first: Mapping[str, Any], retry: Mapping[str, Any] | None, batch: int) -> Check:
    """The OOM check: the first run failed with ``oom`` and a smaller batch that then trained."""
    error = first.get("error") or {}
    suggested = error.get("suggested_batch_size")
    figures = {"batch_size": batch, "suggested_batch_size": suggested}
    if first.get("status") != "error" or error.get("kind") != "oom":
        return Check(
            "oom", FAIL, f"expected an oom error; got {first.get('status')}: {error}", figures
        )
    if not isinstance(suggested, int) or not 0 < suggested < batch:
        return Check(
            "oom", FAIL, f"no usable suggested batch size: {error.get('message')}", figures
        )
    if retry is None or retry.get("status") != "ok":
        why = (retry or {}).get("error") or "not run"
        return Check("oom", FAIL, f"suggested batch {suggested} did not train: {why}", figures)
    return Check("oom", PASS, f"{error['message']}; batch {suggested} then trained", figures)


def _bench_name(pipeline: str, precision: str, compiled: bool, eager: bool = False) -> str:
    return (
        f"bench {pipeline} {precision}"
        + (" compile" if compiled else "")
        + (" eager" if eager else "")
    )


# ---------------------------------------------------------------------------
# Running things


@dataclass
class Settings:
    """Sizes of the runs, by device kind: the CPU's are small enough for CI."""

    limit: int | None
    epochs: int = 4
    batch_size: int = 256
    oom_batch: int = 50_000
    """A batch too large for the memory left (2 GiB) once another process holds the rest."""
    budget_s: float | None = None
    """Each experiment measurement's budget (their own default when ``None``)."""
    sweep: str | None = None
    """batch-sweep's batch sizes (its own default when ``None``)."""
    quick_limit: int | None = None
    """The training images of the runs that judge no learning (scale); ``limit``
    when ``None``. The benches' limit is what the small CNN needs to learn in 4 epochs."""
    resident: tuple[int, int] | None = None
    """The resident benches' images and batch size where they differ from ``limit`` and
    ``batch_size``. On the CPU, 4096 images at batch 128 take as many steps as 8192 at 256
    and learn as far, in half the time; the classic pipeline's shuffle needs the larger set
    (at 4096 and 128 it stays at chance)."""

    @staticmethod
    def for_kind(kind: str) -> Settings:
        if kind == "cpu":
            return Settings(
                limit=8192,
                epochs=3,  # two steady epochs: their spread is not judged on a shared CPU
                quick_limit=2048,
                resident=(4096, 128),
                oom_batch=16384,
                budget_s=0.5,
                sweep="32,256,1024",
            )
        return Settings(limit=None)


class DeadlineReached(Exception):
    """The suite's deadline came while a check ran (or before it began)."""


class Runner:
    """Runs gputui's commands and this script's children, each with a timeout and all
    within the suite's deadline (a ``time.monotonic()`` instant)."""

    def __init__(self, python: str, timeout_s: float, deadline: float = float("inf")) -> None:
        self.python = python
        self.timeout_s = timeout_s
        self.deadline = deadline
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), self.env.get("PYTHONPATH")) if p
        )
        self.running: set[subprocess.Popen[str]] = set()
        """Every process started and not yet waited for: killed whole when the suite stops."""

    def left_s(self) -> float:
        """Seconds until the suite's deadline."""
        return self.deadline - time.monotonic()

    def gputui(self, *args: str, limit_as: int | None = None) -> tuple[int, Any, str]:
        """``python -m gputui ARGS``: its exit code, its JSON output (or ``None``) and
        stderr's tail."""
        return self._json([self.python, "-m", "gputui", *args], limit_as)

    def benchmark(self, name: str, *args: str) -> tuple[int, Any, str]:
        """``python benchmarks/NAME.py ARGS --json``, as :meth:`gputui` runs a command."""
        script = str(REPO / "benchmarks" / f"{name}.py")
        return self._json([self.python, script, *args, "--json"], None)

    def child(self, *args: str) -> tuple[int, Any, str]:
        """This script run again with ``--child``, in its own process."""
        return self._json([self.python, str(Path(__file__).resolve()), "--child", *args], None)

    def start_child(self, *args: str) -> subprocess.Popen[str]:
        """This script run again with ``--child``, left running with pipes to talk to it."""
        argv = [self.python, str(Path(__file__).resolve()), "--child", *args]
        return self.spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def start_gputui(self, *args: str, stderr: IO[str]) -> subprocess.Popen[str]:
        """``python -m gputui ARGS`` left running; its progress goes to ``stderr`` (a file,
        so a long run never blocks on a full pipe) and its result is not kept."""
        argv = [self.python, "-m", "gputui", *args]
        return self.spawn(argv, stdout=subprocess.DEVNULL, stderr=stderr)

    def spawn(
        self, argv: list[str], limit_as: int | None = None, **pipes: Any
    ) -> subprocess.Popen[str]:
        """Start ``argv`` in a session of its own, so that stopping it takes its trainer
        with it: a grandchild left holding the GPU would spoil every check after it. It
        is in ``running`` before a SIGTERM or Ctrl-C can reach this process."""
        held = {signal.SIGINT, signal.SIGTERM}
        before = signal.pthread_sigmask(signal.SIG_BLOCK, held)

        def prepare() -> None:  # in the child: the signals as they were, and its limit
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
            if limit_as:  # a real address-space limit: the CPU's out-of-memory
                import resource

                resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

        try:
            proc = subprocess.Popen(
                argv,
                env=self.env,
                cwd=REPO,
                text=True,
                start_new_session=True,
                preexec_fn=prepare,
                **pipes,
            )
            self.running.add(proc)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
        return proc

    def done(self, proc: subprocess.Popen[str]) -> None:
        """``proc`` has ended (or is to be killed): kill what is left of its session."""
        if proc.poll() is None:
            _kill_group(proc)
        self.running.discard(proc)

    def stop_all(self) -> None:
        """Kill every process started and not yet ended, each with its session."""
        for proc in list(self.running):
            self.done(proc)

    def _json(self, argv: list[str], limit_as: int | None) -> tuple[int, Any, str]:
        left = self.left_s()
        if left <= 0:
            raise DeadlineReached("the suite's deadline had passed")
        timeout = min(self.timeout_s, left)
        proc = self.spawn(argv, limit_as, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.done(proc)
            if timeout < self.timeout_s:
                raise DeadlineReached(
                    f"cut off at the suite's deadline after {timeout:.0f} s: {' '.join(argv[1:])}"
                ) from None
            return -1, None, f"timed out after {self.timeout_s:.0f} s: {' '.join(argv[1:])}"
        finally:
            self.done(proc)  # also when a SIGTERM or Ctrl-C ends the wait
        try:
            out = json.loads(stdout)
        except json.JSONDecodeError:
            out = None
        return proc.returncode, out, _tail(stderr)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill a process started in a session of its own, with everything it started."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=10)


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


class Suite:
    """The checks for one device, the most telling figures first, within a deadline."""

    def __init__(self, device: Device, runner: Runner, out: Path | None) -> None:
        self.device = device.indexed()
        """The device given its index once, as every command and child is given it and as
        bench names it in its results: ``cuda`` is ``cuda:0`` (torch's ``set_device``
        refuses a CUDA device without an index)."""
        self.kind = self.device.kind
        self.runner = runner
        self.out = out
        self.settings = Settings.for_kind(self.kind)
        self.checks: list[Check] = []
        self.facts: dict[str, Any] = {}
        self.expect = expectations(self.kind, None)
        self.platform = platform_for(self.kind, {})
        """What runs here: set from the facts child's build and abilities."""
        self.bench_runs: dict[str, Mapping[str, Any]] = {}

    def add(self, check: Check) -> None:
        self.checks.append(check)
        print(f"{check.status}  {check.name}: {check.detail}", flush=True)
        self.write()

    def write(self) -> None:
        """Both reports as they stand: written after every check, so that a suite cut off
        (a hang, the device command's own limit) still leaves what it measured."""
        if self.out is not None:
            write_reports(self.out, self.device, self.checks, self.facts)

    def steps(self) -> list[tuple[tuple[str, ...], Callable[[], Iterator[Check]]]]:
        """Each step with the checks it adds, in the order they run: what a first GPU
        run must not lose comes first; the slow and the likeliest to hang (the compiler,
        NCCL's rendezvous) come last."""

        def bench(
            pipeline: str, precision: str, compiled: bool = False, eager: bool = False
        ) -> Any:
            name = _bench_name(pipeline, precision, compiled, eager)
            return (name,), lambda: self.bench(pipeline, precision, compiled, eager)

        steps = [
            (("imports", "arch"), self.imports),
            (("doctor",), self.doctor),
            (("snapshot",), self.snapshot),
            (("nvml cost",), self.nvml_cost),
            bench("resident", "fp32"),
            bench("resident", "fp32", eager=True),
            (("timing",), self.timing),
            bench("resident", "tf32"),
            bench("resident", "bf16"),
            (("processes",), self.processes),
            bench("classic", "fp32"),
            (("oom",), self.oom),
            *(((f"experiment {n}",), partial(self.experiment, n)) for n in EXPERIMENTS),
            bench("resident", "fp32", compiled=True),
        ]
        if self.kind == "cuda":  # TF32 set for a compiled model: Inductor reads the flags
            steps.append(bench("resident", "tf32", compiled=True))
        return [*steps, (("scale",), self.scale)]

    def skipped(self, name: str) -> Check | None:
        """``name``'s SKIP where it does not run on this platform, else ``None``."""
        why = self.platform.skips.get(name)
        return None if why is None else Check(name, SKIP, why)

    def run(self) -> None:
        for names, step in self.steps():
            added = len(self.checks)
            try:
                if self.runner.left_s() <= 0:
                    raise DeadlineReached("the suite's deadline had passed")
                for check in step():
                    self.add(check)
            except (DeadlineReached, KeyboardInterrupt) as stop:
                why = str(stop) if isinstance(stop, DeadlineReached) else "the suite was stopped"
                done = {c.name for c in self.checks[added:]}
                for name in names:
                    if name not in done:
                        self.add(Check(name, SKIP, f"not run: {why}"))
                if isinstance(stop, KeyboardInterrupt):
                    self.skip_rest(names, why)
                    raise
            except Exception as error:  # a broken check is a failed check, never a crash
                self.add(Check(names[0], FAIL, f"{type(error).__name__}: {error}"))
        self.write()

    def skip_rest(self, after: tuple[str, ...], why: str) -> None:
        """Mark every step after ``after`` not run."""
        names = [name for ns, _ in self.steps() for name in ns]
        for name in names[names.index(after[-1]) + 1 :]:
            self.add(Check(name, SKIP, f"not run: {why}"))

    # -- 1 ------------------------------------------------------------------
    def imports(self) -> Iterator[Check]:
        code, facts, stderr = self.runner.child("facts", str(self.device))
        if code != 0 or not isinstance(facts, dict):
            yield Check("imports", FAIL, f"exit {code}: {stderr}")
            return
        self.facts = facts
        self.platform = platform_for(self.kind, facts)
        self.expect = expectations(self.kind, facts.get("name"), self.platform.vendor)
        if "bench resident bf16" in self.platform.skips:  # nor will the doctor's bf16 matmul
            ranges = {k: v for k, v in self.expect.ranges.items() if "bf16" not in k}
            self.expect = replace(self.expect, ranges=ranges)
        versions = facts_line(facts)
        if facts.get("error"):
            yield Check("imports", FAIL, f"{versions}; {self.device}: {facts['error']}", facts)
            return
        yield Check("imports", PASS, f"{versions}; {self.device} is {facts['name']}", facts)
        skip = self.skipped("arch")
        if skip is not None:
            yield skip
        elif self.platform.vendor == "amd":
            yield gcn_arch_check(facts["gcn_arch"], facts["arch_list"])
        else:
            runs, why = arch_runs(facts["capability"], facts["arch_list"])
            figures = {"capability": facts["capability"], "arch_list": facts["arch_list"]}
            yield Check("arch", PASS if runs else FAIL, why, figures)

    # -- 2 ------------------------------------------------------------------
    def doctor(self) -> Iterator[Check]:
        code, report, stderr = self.runner.gputui("doctor", "--json", "--timeout", "600")
        if not isinstance(report, dict):
            yield Check("doctor", FAIL, f"exit {code}, no JSON: {stderr}")
            return
        self._save("doctor.json", report)
        yield doctor_verdict(report, code, self.device, self.expect)

    def snapshot(self) -> Iterator[Check]:
        skip, vendor = self.skipped("snapshot"), self.platform.vendor
        if skip is not None or vendor is None:
            yield skip or Check("snapshot", SKIP, "no GPU the monitor reads")
            return
        code, report, stderr = self.runner.gputui("snapshot", "--json")
        if not isinstance(report, dict):
            yield Check("snapshot", FAIL, f"exit {code}, no JSON: {stderr}")
            return
        self._save("snapshot.json", report)
        if vendor == "nvidia":
            yield snapshot_verdict(report, code, self.facts)
        else:
            yield drm_snapshot_verdict(report, code, self.facts, vendor)

    def nvml_cost(self) -> Iterator[Check]:
        skip = self.skipped("nvml cost")
        if skip is not None or self.platform.vendor != "nvidia":
            yield skip or Check("nvml cost", SKIP, "NVML's cost: an NVIDIA GPU's alone")
            return
        spacing = ("--samples", str(NVML_COST_SAMPLES), "--interval", str(NVML_COST_INTERVAL_S))
        code, result, stderr = self.runner.benchmark("nvml_calls", *spacing)
        if code != 0 or not isinstance(result, dict):
            yield Check("nvml cost", FAIL, f"exit {code}: {stderr}")
            return
        self._save("nvml_calls.json", result)
        yield nvml_cost_verdict(result)

    # -- 3 ------------------------------------------------------------------
    def bench(
        self, pipeline: str, precision: str, compiled: bool, eager: bool = False
    ) -> Iterator[Check]:
        name = _bench_name(pipeline, precision, compiled, eager)
        skip = self.skipped(name)
        if skip is not None:
            yield skip
            return
        sizes = self.settings.resident if pipeline == "resident" else None
        limit, batch = sizes or (None, None)
        args = [*self._bench_args(batch=batch, limit=limit), "--pipeline", pipeline]
        args += ["--precision", precision]
        args += ["--no-graphs"] if eager else []
        if self.out is not None:  # its run folder keeps the event stream the UI is tested on
            args[args.index("--no-record")] = f"--runs-dir={self.out / 'runs'}"
        code, result, stderr = self.runner.gputui(*args, *(["--compile"] if compiled else []))
        runs = (result or {}).get("runs") or []
        if not runs:
            yield Check(name, FAIL, f"exit {code}, no result: {stderr}")
            return
        self.bench_runs[name] = runs[0]
        self._save(name.replace(" ", "_") + ".json", result)
        self._keep_stream(name.replace(" ", "_"), runs[0].get("run_dir"))
        tolerance, tf32 = self.expect.epoch_tolerance, self.platform.tf32
        graphed_here = "bench resident fp32 eager" not in self.platform.skips
        graphs = graphed_here and pipeline == "resident" and not (compiled or eager)
        check = bench_verdict(runs[0], self.device, precision, tolerance, tf32, graphs, eager)
        graphed = self.bench_runs.get(_bench_name(pipeline, precision, compiled))
        if eager and graphed and graphed.get("graphs") and check.status == PASS:
            check = graphs_verdict(check, graphed, runs[0])
        yield check

    def _bench_args(
        self, epochs: int | None = None, batch: int | None = None, limit: int | None = None
    ) -> list[str]:
        s = self.settings
        batch, limit = batch or s.batch_size, limit or s.limit
        args = ["bench", "--device", str(self.device), "--dataset", "synthetic", "--json"]
        args += ["--no-record", "--epochs", str(epochs or s.epochs), "--batch-size", str(batch)]
        return args + (["--limit", str(max(limit, batch))] if limit else [])

    # -- 4 ------------------------------------------------------------------
    def timing(self) -> Iterator[Check]:
        name = _bench_name("resident", "fp32", False)
        run = self.bench_runs.get(name)
        if not run or run.get("status") != "ok":
            yield Check("timing", SKIP, f"no {name} result to compare with")
            return
        yield timing_verdict(run, self.expect.tolerance)

    # -- 5 ------------------------------------------------------------------
    def processes(self) -> Iterator[Check]:
        skip, vendor = self.skipped("processes"), self.platform.vendor
        if skip is not None or vendor is None:
            yield skip or Check("processes", SKIP, "no GPU the monitor reads")
            return
        key, token = ("uuid", "UUID") if vendor == "nvidia" else ("bus_id", "PCI bus id")
        if not self.facts.get(key):
            yield Check("processes", FAIL, f"torch gave no {token} for the device")
            return
        wait_s = min(120.0, max(self.runner.left_s() - 70, 1.0))  # 60 s to stop the run
        args = self._bench_args(epochs=1000)
        if vendor == "nvidia":
            yield nvml_check(self.runner, args, self.facts[key], wait_s)
        else:
            yield drm_process_check(self.runner, args, vendor, self.facts[key], wait_s)

    # -- 6 ------------------------------------------------------------------
    def oom(self) -> Iterator[Check]:
        batch = self.settings.oom_batch
        args = self._bench_args(epochs=1, batch=batch)
        if self.kind == "mps":
            yield Check(
                "oom", SKIP, "MPS shares memory with the whole system: not filled on purpose"
            )
            return
        if self.kind == "cpu":
            limit = 2 * GIB  # torch imports in 1.5 GiB; a batch of 8192 needs about 2.4
            first = self._bench_once(args, limit)
            retry = self._retry(first, limit)
            check = oom_verdict(first, retry, batch)
            check.detail += f" (under an address-space limit of {limit / GIB:.0f} GiB)"
            yield check
            return
        with holding_memory(self.runner, self.device, keep_bytes=2 * GIB) as held:
            if held is None:
                yield Check("oom", FAIL, "could not start the process that holds the memory")
                return
            first = self._bench_once(args, None)
            check = oom_verdict(first, self._retry(first, None), batch)
            check.figures["held_bytes"] = held
            yield check

    def _bench_once(self, args: list[str], limit_as: int | None) -> Mapping[str, Any]:
        code, result, stderr = self.runner.gputui(*args, limit_as=limit_as)
        runs = (result or {}).get("runs") or []
        return runs[0] if runs else {"status": f"exit {code}", "error": {"message": stderr}}

    def _retry(self, first: Mapping[str, Any], limit_as: int | None) -> Mapping[str, Any] | None:
        suggested = (first.get("error") or {}).get("suggested_batch_size")
        if not isinstance(suggested, int) or suggested < 1:
            return None
        return self._bench_once(self._bench_args(epochs=1, batch=suggested), limit_as)

    # -- 7 ------------------------------------------------------------------
    def experiment(self, name: str) -> Iterator[Check]:
        s = self.settings
        args = ["experiment", name, "--device", str(self.device), "--dataset", "synthetic"]
        args += ["--json"]
        args += ["--limit", str(s.limit)] if s.limit else []
        args += ["--budget", str(s.budget_s)] if s.budget_s else []
        args += ["--batch-sizes", s.sweep] if s.sweep and name == "batch-sweep" else []
        code, result, stderr = self.runner.gputui(*args)
        if not isinstance(result, dict):
            yield Check(f"experiment {name}", FAIL, f"exit {code}, no JSON: {stderr}")
            return
        self._save(f"experiment_{name}.json", result)
        yield experiment_verdict(name, result, judged=self.expect.tolerance is not None)

    # -- 8 ------------------------------------------------------------------
    def scale(self) -> Iterator[Check]:
        skip, backend = self.skipped("scale"), self.platform.backend
        if skip is not None or backend is None:
            yield skip or Check("scale", SKIP, "gputui scale has no backend here")
            return
        args = ["scale", "--device", self.kind, "--dataset", "synthetic", "--json"]
        limit = self.settings.quick_limit or self.settings.limit
        args += ["--limit", str(limit)] if limit else []
        # on the CPU, two gloo ranks alone: its ranks' path, without a 1-rank job before it
        args += ["--world-sizes", "2"] if self.kind == "cpu" else []
        code, result, stderr = self.runner.gputui(*args)
        if not isinstance(result, dict):
            yield Check("scale", FAIL, f"exit {code}, no JSON: {stderr}")
            return
        self._save("scale.json", result)
        yield scale_verdict(result["runs"], backend)

    def _keep_stream(self, name: str, run_dir: str | None) -> None:
        """Copy a bench run's events to ``OUT/streams/NAME.jsonl``: a GPU run's stream, as
        the trainer wrote it, for the runner pane's tests (tests/ui/streams)."""
        if self.out is not None and run_dir is not None:
            streams = self.out / "streams"
            streams.mkdir(parents=True, exist_ok=True)
            events = Path(run_dir) / "events.jsonl"
            (streams / f"{name}.jsonl").write_bytes(events.read_bytes())

    def _save(self, name: str, data: Any) -> None:
        if self.out is not None:
            raw = self.out / "raw"
            raw.mkdir(parents=True, exist_ok=True)
            (raw / name).write_text(json.dumps(data, indent=2) + "\n")


def scale_verdict(rows: Sequence[Mapping[str, Any]], backend: str) -> Check:
    """``gputui scale``'s check: every world size finished on ``backend`` (the one gputui
    picks for the device), with its figures; the figures themselves are reported (one GPU
    lent scales nothing)."""
    wrong = [
        f"{row['world_size']} ranks: {row['status']} {row.get('error') or ''} {row['backend']}"
        for row in rows
        if row["status"] != "ok" or row["backend"] != backend or row["step_ms_p50"] is None
    ]
    figures = {
        str(row["world_size"]): {
            key: row[key]
            for key in ("images_per_second", "speedup", "efficiency", "allreduce_share")
        }
        for row in rows
    }
    detail = "; ".join(
        f"{row['world_size']} ranks {row['images_per_second'] or 0:,.0f} images/s, "
        f"efficiency {row['efficiency'] or 0:.0%}, all-reduce {row['allreduce_share'] or 0:.0%}"
        for row in rows
    )
    if wrong or not rows:
        return Check("scale", FAIL, "; ".join(wrong) or "no world size ran", figures)
    return Check("scale", PASS, detail, figures)


def nvml_check(runner: Runner, bench_args: list[str], uuid: str, wait_s: float = 120) -> Check:
    """Start a long bench; once its trainer holds the GPU, compare NVML's process lists
    with the run's processes; then stop the run (SIGINT, as Ctrl-C)."""
    import pynvml as nv

    nv.nvmlInit()
    with tempfile.TemporaryFile("w+") as log:
        bench = runner.start_gputui(*bench_args, stderr=log)
        try:
            return _match_processes(nv, bench, log, uuid, wait_s)
        finally:
            _stop(bench)
            runner.done(bench)
            with contextlib.suppress(Exception):
                nv.nvmlShutdown()


def drm_process_check(
    runner: Runner, bench_args: list[str], vendor: str, bus_id: str, wait_s: float = 120
) -> Check:
    """Start a long bench; once the monitor lists its trainer on the GPU at ``bus_id`` (or
    ``wait_s`` has passed), judge its lists; then stop the run (SIGINT, as Ctrl-C)."""
    import psutil

    with tempfile.TemporaryFile("w+") as log:
        bench = runner.start_gputui(*bench_args, stderr=log)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                run_pids = {bench.pid}
                with contextlib.suppress(psutil.NoSuchProcess):
                    children = psutil.Process(bench.pid).children(recursive=True)
                    run_pids |= {child.pid for child in children}
                code, report, stderr = runner.gputui("snapshot", "--json")
                check = drm_process_verdict(report or {}, vendor, bus_id, bench.pid, run_pids)
                if report is None:
                    check.detail += f" (snapshot exit {code}: {stderr})"
                ended = bench.poll() is not None
                if check.status == PASS or ended or time.monotonic() >= deadline:
                    break
                time.sleep(0.5)
            if ended:
                log.seek(0)
                check.status = FAIL
                check.detail += (
                    f"; bench ended early (exit {bench.returncode}): {_tail(log.read())}"
                )
            return check
        finally:
            _stop(bench)
            runner.done(bench)


def same_uuid(a: str, b: str) -> bool:
    """Whether two UUIDs name one device, whatever their prefix: torch gives a MIG slice's
    UUID bare (gputui's ``cuda_uuid`` spells it ``GPU-...``), where NVML names the slice
    ``MIG-...`` and its GPU ``GPU-...``."""

    def bare(uuid: str) -> str:
        return uuid.removeprefix("GPU-").removeprefix("MIG-").lower()

    return bare(a) == bare(b)


def gpu_of(uuid: str, uuids: Mapping[int, Sequence[str]]) -> int | None:
    """The NVML index of the GPU that ``uuid`` (torch's) names: the GPU itself, or one of
    its MIG devices (``uuids``: each GPU's UUID, then its MIG devices'). NVML lists a MIG
    slice's processes on its GPU, so the GPU's index is the one to read."""
    for index, names in uuids.items():
        if any(same_uuid(uuid, name) for name in names):
            return index
    return None


def _nvml_uuids(nv: Any, handles: Sequence[Any]) -> dict[int, list[str]]:
    """Each GPU's UUID, then (in MIG mode) its MIG devices'."""
    found: dict[int, list[str]] = {}
    for index, handle in enumerate(handles):
        names = [nv.nvmlDeviceGetUUID(handle)]
        with contextlib.suppress(nv.NVMLError):  # not in MIG mode, or no MIG support
            for mig in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
                with contextlib.suppress(nv.NVMLError):  # an empty slot
                    names.append(
                        nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, mig))
                    )
        found[index] = names
    return found


def _match_processes(
    nv: Any,
    bench: subprocess.Popen[str],
    log: IO[str],
    uuid: str,
    wait_s: float,
    proc: Path = Path("/proc"),
) -> Check:
    """Wait until NVML lists a process of the run on the GPU ``uuid``; judge the lists.

    In a container with its own pid namespace NVML lists the host's pids: a host pid
    counts as the local process that gputui's monitor would take it for
    (``telemetry/devnodes``: the one process on a GPU and the one local process mapping
    its ``/dev/nvidiaN``), and no other way."""
    import psutil

    from gputui.telemetry.devnodes import match_host_pids, node_mappers

    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    uuids = _nvml_uuids(nv, handles)
    ours_index = gpu_of(uuid, uuids)
    if ours_index is None:
        return Check(
            "processes", FAIL, f"no GPU or MIG device in NVML has torch's UUID {uuid}: {uuids}"
        )
    minors = {i: int(nv.nvmlDeviceGetMinorNumber(h)) for i, h in enumerate(handles)}
    deadline = time.monotonic() + wait_s
    listed: dict[int, list[int]] = {}
    children: set[int] = set()
    local: dict[int, set[int]] = {}
    proven: dict[int, int] = {}
    mappers: dict[int, set[int]] = {}
    while True:
        with contextlib.suppress(psutil.NoSuchProcess):
            children = {p.pid for p in psutil.Process(bench.pid).children(recursive=True)}
        run_pids = children | {bench.pid}
        listed = {
            i: [p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h)]
            for i, h in enumerate(handles)
        }
        mappers = node_mappers(proc)
        proven = match_host_pids({minors[i]: pids for i, pids in listed.items()}, mappers)
        local = {  # NVML's pids as this pid namespace knows them, where that is proven
            i: {p if p in run_pids else proven.get(p, p) for p in pids}
            for i, pids in listed.items()
        }
        if children & local[ours_index] or time.monotonic() >= deadline or bench.poll() is not None:
            break
        time.sleep(0.5)
    minor = minors[ours_index]
    hosts = {host: here for host, here in proven.items() if host not in run_pids}
    figures = {
        "gpu": ours_index,
        "uuid": uuid,
        "bench_pid": bench.pid,
        "run_pids": sorted(run_pids),
        "nvml_pids": {str(i): pids for i, pids in listed.items()},
        "host_pids": {str(host): here for host, here in hosts.items()},
        "minor": minor,
        "node_mappers": {str(m): sorted(pids) for m, pids in mappers.items()},
    }
    on_ours = local.get(ours_index, set()) & run_pids
    elsewhere = {i: p & run_pids for i, p in local.items() if i != ours_index}
    problems = []
    if bench.pid in on_ours or any(bench.pid in p for p in elsewhere.values()):
        problems.append(f"the gputui parent (pid {bench.pid}) holds a CUDA context")
    if bench.poll() is not None:
        log.seek(0)
        problems.append(f"bench ended early (exit {bench.returncode}): {_tail(log.read())}")
    if len(on_ours - {bench.pid}) != 1:
        listing = (
            f"NVML lists {sorted(listed.get(ours_index, []))} on GPU {ours_index}; the run's "
            f"pids are {sorted(run_pids)}"
        )
        if not on_ours:  # seen from inside a container, NVML's pids are the host's
            listing += (
                " (none match: NVML may list host pids from outside this pid namespace, and "
                f"no one process here alone maps /dev/nvidia{minor} to prove which)"
            )
        problems.append(listing)
    trainers = on_ours - {bench.pid}
    node_here = (proc.parent / "dev" / f"nvidia{minor}").exists()  # not under the stand-in
    if node_here and trainers and not trainers <= mappers.get(minor, set()):
        problems.append(
            f"the trainer does not map /dev/nvidia{minor} (mapped: {figures['node_mappers']}); "
            "gputui's matching of host pids in a container (telemetry/devnodes.py) relies on it"
        )
    if any(os.getpid() in pids for pids in mappers.values()):
        problems.append(
            "this process maps a GPU's device node with NVML alone (no CUDA context): a monitor "
            "would be taken for a GPU process by telemetry/devnodes.py's rule"
        )
    if any(elsewhere.values()):
        others = {i: sorted(p) for i, p in elsewhere.items() if p}
        problems.append(f"the run also holds other GPUs: {others}")
    if problems:
        return Check("processes", FAIL, "; ".join(problems), figures)
    (pid,) = trainers
    host = next((h for h, here in hosts.items() if here == pid), None)
    seen = "" if host is None else f" (NVML's host pid {host}, proven by /dev/nvidia{minor})"
    return Check(
        "processes",
        PASS,
        f"NVML lists the trainer (pid {pid}{seen}) on GPU {ours_index} ({uuid}), and no other "
        "process of the run on any GPU",
        figures,
    )


def _stop(proc: subprocess.Popen[str]) -> None:
    """Stop a run as Ctrl-C does, and wait for it (killing it after a minute)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            _kill_group(proc)


@contextlib.contextmanager
def holding_memory(runner: Runner, device: Device, keep_bytes: int) -> Iterator[int | None]:
    """Another process holding all but ``keep_bytes`` of the GPU's free memory; yields
    how many bytes it holds (``None`` if it could not)."""
    holder = runner.start_child("hold", str(device), str(keep_bytes))
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        yield json.loads(line)["held_bytes"] if line.strip() else None
    finally:
        with contextlib.suppress(OSError):
            assert holder.stdin is not None
            holder.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            holder.wait(timeout=30)
        runner.done(holder)


# ---------------------------------------------------------------------------
# Children: the only code here that imports torch


def child_facts(device: Device) -> dict[str, Any]:
    import importlib.metadata as metadata

    import torch

    from gputui.engine.devices import cpu_model_name, gpu_bus_id, torch_build

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "build": torch_build(),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "xpu": getattr(torch.version, "xpu", None),
        "cudnn": None,
        "pynvml": version("nvidia-ml-py"),
        "psutil": version("psutil"),
        "textual": _textual(),
        "name": None,
    }
    kind = device.kind
    try:
        if kind == "cuda":
            from gputui.engine.devices import cuda_uuid, torch_device

            index = device.indexed().index or 0
            props = torch.cuda.get_device_properties(index)
            facts.update(
                cudnn=torch.backends.cudnn.version(),  # MIOpen's on ROCm
                name=props.name,
                capability=f"{props.major}.{props.minor}",
                gcn_arch=getattr(props, "gcnArchName", None),  # ROCm's alone
                arch_list=torch.cuda.get_arch_list(),
                uuid=cuda_uuid(index),
                bus_id=gpu_bus_id(torch_device(device.indexed())),
                memory_bytes=props.total_memory,
            )
            if facts["hip"]:
                facts.update(_rocm_tf32())
        elif kind == "mps":
            facts.update(name="Apple GPU (MPS)", available=torch.backends.mps.is_available())
        elif kind == "xpu":
            from gputui.engine.devices import device_name, torch_device, xpu_runs
            from gputui.engine.distributed import xccl_available

            props = torch.xpu.get_device_properties(device.indexed().index or 0)
            facts.update(
                name=device_name(torch_device(device.indexed())),
                bus_id=gpu_bus_id(torch_device(device.indexed())),
                memory_bytes=getattr(props, "total_memory", None),
                driver=getattr(props, "driver_version", None),
                bf16=xpu_runs("bf16", device.indexed().index or 0),  # emulation not counted
                tf32=xpu_runs("tf32", device.indexed().index or 0),
                xccl=xccl_available(),
            )
        else:
            facts.update(name=cpu_model_name(), threads=torch.get_num_threads())
        facts["cpu"] = cpu_model_name()
    except Exception as error:
        facts["error"] = f"{type(error).__name__}: {error}"
    return facts


def _rocm_tf32() -> dict[str, Any]:
    """What torch says of TF32 on ROCm once gputui asks for it (:func:`tf32_taken`), and
    the variable that decides it."""
    from gputui.engine.step import set_tf32, tf32_taken

    set_tf32(True)
    try:
        taken = tf32_taken()
    finally:
        set_tf32(False)
    return {"tf32_matmul": taken, "hipblaslt_allow_tf32": os.environ.get("HIPBLASLT_ALLOW_TF32")}


def _textual() -> str | None:
    """Textual's version where it imports (gputui's headless commands never need it)."""
    try:
        import textual
    except ImportError:
        return None
    return getattr(textual, "__version__", "present")


def child_hold(named: Device, keep_bytes: int) -> None:
    """Hold all but ``keep_bytes`` of the GPU's free memory until stdin closes."""
    import torch

    from gputui.engine.devices import make_current, torch_device

    device = torch_device(named.indexed())
    make_current(device)
    free, _total = getattr(torch, device.type).mem_get_info(device)
    held = torch.empty(max(free - keep_bytes, 0), dtype=torch.uint8, device=device)
    print(json.dumps({"held_bytes": held.numel()}), flush=True)
    sys.stdin.read()


# ---------------------------------------------------------------------------
# Reports


def write_reports(
    out: Path, device: Device, checks: Sequence[Check], facts: Mapping[str, Any]
) -> None:
    """``gpu_smoke.json`` and ``gpu_smoke.md`` in ``out``: every check, with its figures."""
    out.mkdir(parents=True, exist_ok=True)
    counts = {status: sum(c.status == status for c in checks) for status in (PASS, FAIL, SKIP)}
    report = {
        "device": str(device),
        "device_name": facts.get("name"),
        "machine": _machine(facts.get("cpu")),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python3", "benchmarks/gpu_smoke.py", *sys.argv[1:]]),
        "counts": counts,
        "ok": counts[FAIL] == 0,
        "checks": [asdict(c) for c in checks],
    }
    (out / "gpu_smoke.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        f"# GPU smoke: {device} ({facts.get('name') or 'unknown'})",
        "",
        f"{report['date']} on {report['machine']}; `{report['command']}`.",
        f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped.",
        "",
        "| check | status | detail |",
        "|---|---|---|",
        *(f"| {c.name} | {c.status} | {c.detail.replace('|', '/')} |" for c in checks),
        "",
        "## Figures",
        "",
        *(f"- **{c.name}**: `{json.dumps(c.figures)}`" for c in checks if c.figures),
        "",
    ]
    (out / "gpu_smoke.md").write_text("\n".join(lines))


def _machine(cpu: str | None) -> str:
    """The machine in one line: its CPU, cores, memory and system."""
    try:
        import psutil

        size = f", {psutil.cpu_count()} logical cores, "
        size += f"{psutil.virtual_memory().total / GIB:.0f} GiB RAM"
    except ImportError:
        size = ""
    return f"{cpu or platform.machine()}{size}, {platform.system()} {platform.release()}"


# ---------------------------------------------------------------------------


class OneLineParser(argparse.ArgumentParser):
    """A usage error in one line (exit 2), as gputui's own commands give it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = OneLineParser(
        prog="gpu_smoke.py", description="gputui's checks on a real device, in order."
    )
    parser.add_argument(
        "--device",
        type=_device,
        default="cuda",
        help="cuda, cuda:N, mps, xpu, xpu:N or cpu (default: cuda)",
    )
    parser.add_argument("--out", type=Path, help="folder for gpu_smoke.md and gpu_smoke.json")
    parser.add_argument("--timeout", type=float, default=900, help="seconds each command may take")
    parser.add_argument(
        "--deadline",
        type=float,
        default=540,
        help="seconds the whole suite may take; checks not run by then are SKIP (default: 540)",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _device(text: str) -> Device:
    """``--device``: a device that is not one is a usage error (exit 2), in one line."""
    try:
        return Device.parse(text)
    except DeviceError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.child:
        return _child(args.child)
    started = time.monotonic()
    runner = Runner(sys.executable, args.timeout, deadline=started + args.deadline)
    suite = Suite(args.device, runner, args.out)

    def stopped(signum: int, _frame: Any) -> None:  # as Ctrl-C: the reports still written
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stopped)
    interrupted = False
    try:
        suite.run()
    except KeyboardInterrupt:
        interrupted = True
        runner.stop_all()
    failed = sum(c.status == FAIL for c in suite.checks)
    print(
        f"{len(suite.checks)} checks in {time.monotonic() - started:.0f} s: "
        f"{len(suite.checks) - failed} without failure, {failed} failed"
        + (" (stopped)" if interrupted else "")
    )
    if args.out:
        suite.write()
        print(f"reports: {args.out / 'gpu_smoke.md'}, {args.out / 'gpu_smoke.json'}")
    return 1 if failed or interrupted else 0


def _child(argv: Sequence[str]) -> int:
    mode, *rest = argv
    if mode == "facts":
        print(json.dumps(child_facts(Device.parse(rest[0]))))
    elif mode == "hold":
        child_hold(Device.parse(rest[0]), int(rest[1]))
    else:
        raise SystemExit(f"unknown child mode {mode!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
