"""The engine's ``probe`` mode, for the doctor: what torch sees here, and how fast each
device is.

A ``ProbeStep`` goes out before each part that can hang (importing torch, initialising
CUDA, measuring a device), so that a parent that kills a hung probe can say where it hung
(:mod:`gputui.doctor.torch_facts`). torch is imported inside, so that a failed import is
reported rather than raised.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import math
import platform
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from gputui.device import CPU, Device, Kind
from gputui.format import fmt_counted
from gputui.jobs.config import ProbeConfig
from gputui.jobs.events import (
    TORCH_COMPANIONS,
    CudaProbed,
    DeviceProbed,
    Emit,
    Finished,
    MpsProbed,
    PitfallShown,
    ProbeStep,
    TorchProbed,
    XpuProbed,
)
from gputui.system import read_sysctl

if TYPE_CHECKING:
    import torch

    from gputui.engine.devices import CpuBf16

MEASUREMENTS_PER_DEVICE: dict[Kind, int] = {"cpu": 3, "cuda": 7, "mps": 7, "xpu": 7}
"""Timed loops per kind of device: copy and two matmuls, plus four transfers off the CPU."""

MIN_LOOP_S = 0.1
"""Shortest timed loop, however many devices split the budget: long enough that reading the
clock and the one synchronize at the loop's end are lost in it."""

MIN_REPS = 5
"""Fewest calls a timed loop averages, so that one call that runs long (a clock still
ramping up, another process's burst) is a fifth of the figure at most, not half of it."""

SLOW_LOOP_MAX_S = 2.0
"""A call so slow that ``MIN_REPS`` of them would take longer than this (and longer than
the loop's share) is timed fewer times: a call that long is timed precisely on its own,
and the probe must stay quick (a bf16 matmul on a CPU without fast bf16 is that slow)."""

MAX_REPS = 100_000
"""Most calls a timed loop makes (a call of nothing, on a coarse clock)."""

SLOW_BF16_RATIO = 2.0
"""A CPU whose bf16 matmul is this many times slower than its fp32 one gets a note
saying why."""

ERROR_TEXT_MAX = 1000
"""Longest error text passed on; torch's CUDA errors can run to pages."""


def error_text(error: BaseException) -> str:
    """``RuntimeError: Invalid device string: 'cuda0'``: the type and torch's own words."""
    text = f"{type(error).__name__}: {error}".strip()
    return text if len(text) <= ERROR_TEXT_MAX else text[: ERROR_TEXT_MAX - 1] + "…"


@contextmanager
def recorded_warnings() -> Iterator[list[str]]:
    """Collect the text of every warning raised inside the block."""
    texts: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield texts
    texts.extend(str(item.message).strip() for item in caught)


def loop_seconds(budget_s: float, loops: int) -> float:
    """Seconds for each timed loop: an equal share of ``budget_s``, at least ``MIN_LOOP_S``."""
    return max(budget_s / max(loops, 1), MIN_LOOP_S)


def timed_reps(once_s: float, loop_s: float) -> int:
    """How many calls the timed loop makes, given one call's time.

    Enough to fill ``loop_s``, and at least ``MIN_REPS``; but a call so slow that these
    would run past ``SLOW_LOOP_MAX_S`` (or past ``loop_s``, if longer) gets only as many as
    fit there, and ``0`` when not one does: the call that sized the loop is then the figure.
    """
    longest_s = max(loop_s, SLOW_LOOP_MAX_S)
    reps = max(MIN_REPS, math.ceil(loop_s / max(once_s, 1e-9)))
    if reps * once_s > longest_s:
        reps = int(longest_s / once_s)
    return min(reps, MAX_REPS)


def seconds_per_call(
    fn: Callable[[], object],
    sync: Callable[[], None],
    loop_s: float,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Time ``fn`` correctly: warm up, then repeat it for about ``loop_s``, synchronized.

    One warm-up call pays for lazy initialisation (allocations, kernel choice); one
    timed call sizes the loop (:func:`timed_reps`); the loop then runs with one
    synchronize at its end, before the clock is read, so queued device work is counted.

    Returns:
        Seconds per call.
    """
    fn()
    sync()
    start = clock()
    fn()
    sync()
    once = clock() - start
    reps = timed_reps(once, loop_s)
    if reps == 0:
        return once
    start = clock()
    for _ in range(reps):
        fn()
    sync()
    return (clock() - start) / reps


def _finite_positive(value: float) -> float | None:
    return value if math.isfinite(value) and value > 0 else None


class _Figures:
    """Measured figures of one device, with a note for each one that failed."""

    def __init__(self, sync: Callable[[], None], loop_s: float) -> None:
        self.sync = sync
        self.loop_s = loop_s
        self.values: dict[str, float | None] = {}
        self.notes: list[str] = []

    def rate(self, key: str, label: str, work: float, fn: Callable[[], object]) -> None:
        """Store ``work / seconds_per_call(fn)`` under ``key``, or ``None`` and a note."""
        try:
            self.values[key] = _finite_positive(work / seconds_per_call(fn, self.sync, self.loop_s))
        except Exception as error:
            self.values[key] = None
            self.notes.append(f"{label}: {error_text(error)}")


def _matmul(figures: _Figures, device: torch.device, n: int) -> None:
    import torch

    from gputui.engine.step import set_tf32

    set_tf32(False)  # fp32 means IEEE fp32, whatever the default
    for dtype, key, label in (
        (torch.float32, "matmul_fp32_tflops", "fp32 matmul"),
        (torch.bfloat16, "matmul_bf16_tflops", "bf16 matmul"),
    ):
        try:
            a = torch.randn(n, n, device=device, dtype=dtype)
            b = torch.randn(n, n, device=device, dtype=dtype)
            c = torch.empty(n, n, device=device, dtype=dtype)
        except Exception as error:
            figures.values[key] = None
            figures.notes.append(f"{label}: {error_text(error)}")
            continue
        figures.rate(key, label, 2.0 * n**3 / 1e12, functools.partial(torch.mm, a, b, out=c))
        del a, b, c
    figures.notes.append(f"matmul: {n}x{n}; fp32 is IEEE fp32 (TF32 off), bf16 sums in fp32")


def bf16_matmul_note(
    fp32_tflops: float | None,
    bf16_tflops: float | None,
    cpu: CpuBf16,
    *,
    onednn_on: bool,
    onednn_bf16: bool | None,
    x86: bool,
) -> str | None:
    """Why a CPU's bf16 matmul is much slower than its fp32 one; ``None`` when it is not.

    Without oneDNN's bf16 (no AVX-512, or oneDNN off), torch multiplies bf16 matrices in
    its generic reference loop, orders of magnitude slower than fp32 through MKL.

    Args:
        fp32_tflops: The measured fp32 matmul.
        bf16_tflops: The measured bf16 matmul.
        cpu: What /proc/cpuinfo and torch say of the CPU's bf16 instructions.
        onednn_on: Whether torch has oneDNN and it is on (``torch.backends.mkldnn``).
        onednn_bf16: Whether oneDNN runs bf16 on this CPU, as torch decides it
            (``torch.ops.mkldnn._is_mkldnn_bf16_supported()``); ``None`` when unknown.
        x86: Whether the CPU is an x86 one (AVX-512 and AMX are x86's).
    """
    if fp32_tflops is None or bf16_tflops is None or bf16_tflops <= 0:
        return None
    ratio = fp32_tflops / bf16_tflops
    if ratio < SLOW_BF16_RATIO:
        return None
    head = f"bf16 matmul is {ratio:.0f}x slower than fp32 here"
    kernels = f"torch CPU kernels: {cpu.capability or 'unknown'}"
    fallback = "so torch falls back to its generic reference loop"
    if not onednn_on:
        return f"{head}: torch's oneDNN is off or missing (torch.backends.mkldnn), {fallback}"
    if onednn_bf16 is False:
        return (
            f"{head}: torch's oneDNN has no bf16 matmul for this CPU (it needs AVX-512; "
            f"{kernels}), {fallback}"
        )
    if not x86:
        return f"{head}: torch has no fast bf16 matmul for this CPU ({kernels})"
    have = [
        name for name, flag in (("AVX512-BF16", cpu.avx512_bf16), ("AMX", cpu.amx_bf16)) if flag
    ]
    if not have:
        return (
            f"{head}: this CPU has no AVX512-BF16 or AMX, so oneDNN emulates bf16 "
            "(converting to fp32 and back in software)"
        )
    return f"{head}, although this CPU has {' and '.join(have)} ({kernels})"


def _cpu_bf16_note(values: dict[str, float | None]) -> str | None:
    """:func:`bf16_matmul_note` with this CPU's flags and torch's own oneDNN answers."""
    import torch

    from gputui.engine.devices import cpu_bf16

    mkldnn = torch.backends.mkldnn
    try:
        onednn_bf16: bool | None = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:  # a private op: absent from some builds
        onednn_bf16 = None
    return bf16_matmul_note(
        values.get("matmul_fp32_tflops"),
        values.get("matmul_bf16_tflops"),
        cpu_bf16(),
        onednn_on=bool(mkldnn.is_available() and mkldnn.enabled),  # type: ignore[no-untyped-call]  # torch
        onednn_bf16=onednn_bf16,
        x86=platform.machine().lower() in {"x86_64", "amd64", "i386", "i686"},
    )


def _pinned(nbytes: int) -> tuple[torch.Tensor | None, str | None]:
    """A pinned host buffer, or ``None`` and torch's reason."""
    import torch

    try:
        return torch.ones(nbytes, dtype=torch.uint8).pin_memory(), None
    except Exception as error:
        return None, error_text(error)


def measure_device(
    device: torch.device, config: ProbeConfig, loop_s: float
) -> tuple[dict[str, float | None], list[str]]:
    """Bandwidth and matmul figures of one device; the same code for the CPU and every GPU.

    Args:
        device: ``cpu``, ``cuda:N``, ``xpu:N`` or ``mps``.
        config: Sizes (``*_copy_mib``, ``*_matmul_n``).
        loop_s: Seconds for each timed loop.

    Returns:
        The :class:`~gputui.doctor.checks.DeviceReport` figure fields, and the notes.
    """
    from gputui.engine.devices import empty_cache, synchronize

    kind = "gpu" if device.type in ("cuda", "xpu") else device.type
    figures = _Figures(lambda: synchronize(device), loop_s)
    _copies(figures, device, int(getattr(config, f"{kind}_copy_mib")) << 20)
    _matmul(figures, device, int(getattr(config, f"{kind}_matmul_n")))
    if device.type == "cpu":
        note = _cpu_bf16_note(figures.values)
        if note is not None:
            figures.notes.append(note)
    empty_cache(device)
    return figures.values, figures.notes


def _copies(figures: _Figures, device: torch.device, nbytes: int) -> None:
    """Copy within the device, and (off the CPU) each way between host and device."""
    import torch

    source = torch.ones(nbytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    label = "host memcpy" if device.type == "cpu" else "copy in device memory"
    # A copy reads every byte and writes it: 2x its size, as nvbandwidth and STREAM count.
    figures.rate("copy_bytes_per_s", label, 2 * nbytes, lambda: target.copy_(source))
    figures.notes.append(
        f"{label}: copy_ of {nbytes >> 20} MiB, counted as {2 * nbytes >> 20} MiB "
        "read + written (as STREAM and nvbandwidth count a copy)"
    )
    if device.type == "cpu":
        _, why = _pinned(1)
        figures.notes.append(
            "pinned host memory: available"
            if why is None
            else f"pinned host memory: not available in this build ({why})"
        )
        return
    pageable = torch.ones(nbytes, dtype=torch.uint8)
    figures.rate("h2d_pageable_bytes_per_s", "H2D pageable", nbytes, lambda: target.copy_(pageable))
    figures.rate("d2h_pageable_bytes_per_s", "D2H pageable", nbytes, lambda: pageable.copy_(target))
    pinned, why = _pinned(nbytes)
    if pinned is None:
        figures.notes.append(f"pinned: not available ({why})")
    else:
        figures.rate(
            "h2d_pinned_bytes_per_s",
            "H2D pinned",
            nbytes,
            lambda: target.copy_(pinned, non_blocking=True),
        )
        figures.rate(
            "d2h_pinned_bytes_per_s",
            "D2H pinned",
            nbytes,
            lambda: pinned.copy_(target, non_blocking=True),
        )
    figures.notes.append(f"transfers: {nbytes >> 20} MiB each way")


def _cpu_identity() -> DeviceProbed:
    import psutil
    import torch

    from gputui.engine.devices import cpu_model_name

    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        capability = "unknown"
    return DeviceProbed(
        device=CPU,
        name=cpu_model_name(),
        memory_bytes=psutil.virtual_memory().total,
        notes=(
            f"torch CPU kernels: {capability}, {fmt_counted(torch.get_num_threads(), 'thread')}",
        ),
    )


def _cuda_identity(index: int) -> DeviceProbed:
    import torch

    from gputui.engine.devices import cuda_uuid

    props = torch.cuda.get_device_properties(index)
    return DeviceProbed(
        device=Device("cuda", index),
        name=props.name,
        uuid=cuda_uuid(index),
        compute_capability=f"{props.major}.{props.minor}",
        memory_bytes=int(props.total_memory),
    )


def _xpu_identity(index: int) -> DeviceProbed:
    import torch

    props = torch.xpu.get_device_properties(index)
    return DeviceProbed(
        device=Device("xpu", index),
        name=str(props.name),
        memory_bytes=int(props.total_memory),
    )


def _mps_identity() -> DeviceProbed:
    import torch

    memory = None
    recommended = getattr(torch.mps, "recommended_max_memory", None)
    if recommended is not None:
        try:
            memory = int(recommended())
        except Exception:
            memory = None
    chip = read_sysctl("machdep.cpu.brand_string", timeout_s=2.0) or None
    return DeviceProbed(
        device=Device("mps"),
        name=f"{chip} GPU (MPS)" if chip else "Apple GPU (MPS)",
        memory_bytes=memory,
        notes=("memory: what Metal recommends as the most to use (shared with the CPU)",),
    )


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _platform() -> dict[str, Any]:
    return {
        "system": platform.system(),
        "machine": platform.machine(),
        "mac_version": platform.mac_ver()[0] or None,
        "python": platform.python_version(),
        "executable": sys.executable,
    }


def _torch_stage(emit: Emit) -> Any:
    """Import torch; emit what it is. Returns the module, or ``None`` when it will not import."""
    emit(ProbeStep("importing torch"))
    failure: BaseException | None = None
    with recorded_warnings() as import_warnings:
        try:
            import torch
        except (Exception, SystemExit) as error:  # a broken install can raise anything
            failure = error
    facts: dict[str, Any] = {
        "platform": _platform(),
        "import_warnings": tuple(import_warnings),
        "numpy_installed": importlib.util.find_spec("numpy") is not None,
        "companions": {name: _package_version(name) for name in TORCH_COMPANIONS},
    }
    if failure is not None:
        missing = isinstance(failure, ModuleNotFoundError) and failure.name == "torch"
        emit(
            TorchProbed(imported=False, missing=missing, import_error=error_text(failure), **facts)
        )
        return None
    from gputui.engine.devices import torch_build

    mps = getattr(torch.backends, "mps", None)
    emit(
        TorchProbed(
            imported=True,
            version=torch.__version__,
            cuda_version=torch.version.cuda,
            hip_version=getattr(torch.version, "hip", None),
            build=torch_build(),
            mps_built=bool(mps is not None and mps.is_built()),
            **facts,
        )
    )
    return torch


def _cuda_stage(torch: Any, emit: Emit) -> int:
    """Ask CUDA; emit what it says. Returns how many CUDA devices are usable."""
    emit(ProbeStep("initialising CUDA"))
    init_error = None
    with recorded_warnings() as cuda_warnings:
        available = bool(torch.cuda.is_available())
        count = int(torch.cuda.device_count())
        if not available:
            try:  # is_available() only says False; init() says why, in torch's words
                torch.cuda.init()
            except Exception as error:
                init_error = error_text(error)
    cudnn = None
    arch_list: tuple[str, ...] = ()
    if available:
        try:
            cudnn = torch.backends.cudnn.version()
        except Exception:
            cudnn = None
        try:  # the GPU code this build carries: sm_90 is compiled code, compute_90 is PTX
            arch_list = tuple(str(arch) for arch in torch.cuda.get_arch_list())
        except Exception:
            arch_list = ()
    emit(CudaProbed(available, count, init_error, tuple(cuda_warnings), cudnn, arch_list=arch_list))
    return count if available else 0


def _mps_stage(torch: Any, emit: Emit) -> bool:
    """Ask MPS; emit what it says. Returns whether it is usable."""
    emit(ProbeStep("asking MPS"))
    mps = getattr(torch.backends, "mps", None)
    with recorded_warnings() as mps_warnings:
        available = bool(mps is not None and mps.is_available())
    emit(MpsProbed(available, tuple(mps_warnings)))
    return available


def _xpu_stage(torch: Any, emit: Emit) -> int:
    """Ask ``torch.xpu`` (Intel GPUs), where this torch has it; emit what it says. Returns how
    many XPU devices are usable."""
    xpu = getattr(torch, "xpu", None)
    if xpu is None:
        emit(XpuProbed(available=False))
        return 0
    emit(ProbeStep("initialising XPU"))
    try:
        available = bool(xpu.is_available())
        count = int(xpu.device_count()) if available else 0
    except Exception as error:
        emit(XpuProbed(available=False, error=error_text(error)))
        return 0
    emit(XpuProbed(available, count))
    return count


def _attempt(action: Callable[[], object]) -> str | None:
    """Run a mistake on purpose; return torch's error text (``None`` if it did not raise)."""
    try:
        action()
    except Exception as error:
        return error_text(error)
    return None


def pitfalls(accelerator: str | None) -> list[PitfallShown]:
    """The tutorials' three mistakes, made for real; each with torch's own error text.

    Args:
        accelerator: A usable GPU (``cuda:0``, ``xpu:0`` or ``mps``) to make them on; ``None``
            on a CPU-only machine, where the first two use torch's ``meta`` device,
            the only other device every build has (it fails the same kind of device check).

    Returns:
        One per pitfall (``error`` is ``None`` when torch did not raise), with ``cpu_error``
        for ``.numpy()`` on a CPU tensor (NumPy missing).
    """
    import torch

    other = accelerator or "meta"
    return [
        PitfallShown(
            name="cross-device",
            shown_on=other,
            error=_attempt(lambda: torch.ones(2) + torch.ones(2, device=other)),
        ),
        PitfallShown(
            name="numpy",
            shown_on=other,
            error=_attempt(lambda: torch.ones(2, device=other).numpy()),
            cpu_error=_attempt(lambda: torch.ones(2).numpy()),
        ),
        PitfallShown(
            name="device-string",
            shown_on="cuda0",
            error=_attempt(lambda: torch.device("cuda0")),
        ),
    ]


def run_probe(config: ProbeConfig, emit: Emit) -> None:
    """Probe torch and the devices, emitting each part as it is known, in the order
    :mod:`gputui.jobs.events` gives; ends with ``Finished``."""
    started = time.perf_counter()
    torch = _torch_stage(emit)
    if torch is None:
        emit(Finished(epochs_completed=0, total_seconds=time.perf_counter() - started))
        return
    cuda_count = _cuda_stage(torch, emit)
    mps_available = _mps_stage(torch, emit)
    xpu_count = _xpu_stage(torch, emit)
    if config.torch_only:
        emit(Finished(epochs_completed=0, total_seconds=time.perf_counter() - started))
        return

    emit(ProbeStep("showing the pitfalls"))
    accelerator = (
        "cuda:0" if cuda_count else "xpu:0" if xpu_count else "mps" if mps_available else None
    )
    for pitfall in pitfalls(accelerator):
        emit(pitfall)

    devices: list[tuple[Device, Callable[[], DeviceProbed]]] = [(CPU, _cpu_identity)]
    devices += [
        (Device("cuda", i), functools.partial(_cuda_identity, i)) for i in range(cuda_count)
    ]
    devices += [(Device("xpu", i), functools.partial(_xpu_identity, i)) for i in range(xpu_count)]
    if mps_available:
        devices.append((Device("mps"), _mps_identity))
    loops = sum(MEASUREMENTS_PER_DEVICE[device.kind] for device, _ in devices)
    loop_s = loop_seconds(float(config.budget_s), loops)
    for device, identity in devices:
        emit(ProbeStep(f"reading {device}"))
        try:
            emit(identity())
        except Exception as error:
            emit(DeviceProbed(device=device, error=error_text(error)))
            continue
        if not config.measure:
            emit(DeviceProbed(device=device, notes=("not measured (quick)",)))
            continue
        emit(ProbeStep(f"measuring {device}"))
        try:
            figures, notes = measure_device(torch.device(str(device)), config, loop_s)
        except Exception as error:
            figures, notes = {}, [f"measurement failed: {error_text(error)}"]
        emit(DeviceProbed(device=device, figures=figures, notes=tuple(notes)))
    emit(Finished(epochs_completed=0, total_seconds=time.perf_counter() - started))
