"""The probe's figures, and the mistakes it makes on purpose: torch is imported at the top,
so :mod:`gputui.engine.probe` imports this module only once torch has imported.
"""

from __future__ import annotations

import functools
import math
import platform
import time
from collections.abc import Callable

import psutil
import torch

from gputui.device import CPU, Device
from gputui.engine.devices import (
    CpuBf16,
    cpu_bf16,
    cpu_model_name,
    cuda_uuid,
    empty_cache,
    synchronize,
)
from gputui.engine.failures import error_text
from gputui.engine.step import set_tf32
from gputui.format import fmt_counted
from gputui.jobs.config import ProbeConfig
from gputui.jobs.events import DeviceProbed, PitfallShown
from gputui.system import read_sysctl

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
    """Seconds per call of ``fn``: warmed up, then repeated for about ``loop_s``, synchronized.

    One warm-up call pays for lazy initialisation (allocations, kernel choice); one
    timed call sizes the loop (:func:`timed_reps`); the loop then runs with one
    synchronize at its end, before the clock is read, so queued device work is counted.
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
    try:
        return torch.ones(nbytes, dtype=torch.uint8).pin_memory(), None
    except Exception as error:
        return None, error_text(error)


def measure_device(
    device: torch.device, config: ProbeConfig, loop_s: float
) -> tuple[dict[str, float | None], list[str]]:
    """Bandwidth and matmul figures of one device (``config``'s sizes, ``loop_s`` a timed
    loop), by the same code for the CPU and every GPU: the
    :class:`~gputui.doctor.checks.DeviceReport` figure fields, and the notes."""
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


def cpu_identity() -> DeviceProbed:
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


def cuda_identity(index: int) -> DeviceProbed:
    props = torch.cuda.get_device_properties(index)
    return DeviceProbed(
        device=Device("cuda", index),
        name=props.name,
        uuid=cuda_uuid(index),
        compute_capability=f"{props.major}.{props.minor}",
        memory_bytes=int(props.total_memory),
    )


def xpu_identity(index: int) -> DeviceProbed:
    props = torch.xpu.get_device_properties(index)
    return DeviceProbed(
        device=Device("xpu", index),
        name=str(props.name),
        memory_bytes=int(props.total_memory),
    )


def mps_identity() -> DeviceProbed:
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


def _attempt(action: Callable[[], object]) -> str | None:
    """Run a mistake on purpose; return torch's error text (``None`` if it did not raise)."""
    try:
        action()
    except Exception as error:
        return error_text(error)
    return None


def pitfalls(accelerator: str | None) -> list[PitfallShown]:
    """The tutorials' three mistakes, made for real on ``accelerator`` (a usable GPU), each
    with torch's own error text (``None`` when torch did not raise; ``cpu_error``: ``.numpy()``
    of a CPU tensor, for NumPy missing). With no GPU, the first two use the ``meta`` device,
    the only other device every build has (it fails the same kind of device check)."""
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
