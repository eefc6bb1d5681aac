"""The engine's ``probe`` mode, for the doctor: what torch sees here, and how fast each
device is.

A ``ProbeStep`` goes out before each part that can hang (importing torch, initialising
CUDA, measuring a device), so that a parent that kills a hung probe can say where it hung
(:mod:`gputui.doctor.torch_facts`). torch is imported inside, so that a failed import is
reported rather than raised; the figures are :mod:`gputui.engine.measure`'s.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import platform
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from gputui.device import CPU, Device, Kind
from gputui.engine.failures import error_text
from gputui.jobs.config import ProbeConfig
from gputui.jobs.events import (
    TORCH_COMPANIONS,
    CudaProbed,
    DeviceProbed,
    Emit,
    Finished,
    MpsProbed,
    ProbeStep,
    TorchProbed,
    XpuProbed,
)

MEASUREMENTS_PER_DEVICE: dict[Kind, int] = {"cpu": 3, "cuda": 7, "mps": 7, "xpu": 7}
"""Timed loops per kind of device: copy and two matmuls, plus four transfers off the CPU."""

MIN_LOOP_S = 0.1
"""Shortest timed loop, however many devices split the budget: long enough that reading the
clock and the one synchronize at the loop's end are lost in it."""


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
        try:  # here, not at the top: a broken torch is reported rather than raised
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
    from gputui.engine.devices import torch_build  # it imports torch, which did import

    emit(
        TorchProbed(
            imported=True,
            version=torch.__version__,
            cuda_version=torch.version.cuda,
            hip_version=getattr(torch.version, "hip", None),
            build=torch_build(),
            mps_built=bool(torch.backends.mps.is_built()),
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
    with recorded_warnings() as mps_warnings:
        available = bool(torch.backends.mps.is_available())
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


def run_probe(config: ProbeConfig, emit: Emit) -> None:
    """Probe torch and the devices, emitting each part as it is known, in the order
    :mod:`gputui.jobs.events` gives; ends with ``Finished``."""
    started = time.perf_counter()
    torch = _torch_stage(emit)
    if torch is None:
        emit(Finished(epochs_completed=0, total_seconds=time.perf_counter() - started))
        return
    from gputui.engine import measure  # it imports torch, which did import

    cuda_count = _cuda_stage(torch, emit)
    mps_available = _mps_stage(torch, emit)
    xpu_count = _xpu_stage(torch, emit)
    if config.torch_only:
        emit(Finished(epochs_completed=0, total_seconds=time.perf_counter() - started))
        return

    if config.measure:  # not --quick: made on the meta device, they load torch._dynamo
        emit(ProbeStep("showing the pitfalls"))
        accelerator = (
            "cuda:0" if cuda_count else "xpu:0" if xpu_count else "mps" if mps_available else None
        )
        for pitfall in measure.pitfalls(accelerator):
            emit(pitfall)

    devices: list[tuple[Device, Callable[[], DeviceProbed]]] = [(CPU, measure.cpu_identity)]
    devices += [
        (Device("cuda", i), functools.partial(measure.cuda_identity, i)) for i in range(cuda_count)
    ]
    devices += [
        (Device("xpu", i), functools.partial(measure.xpu_identity, i)) for i in range(xpu_count)
    ]
    if mps_available:
        devices.append((Device("mps"), measure.mps_identity))
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
            figures, notes = measure.measure_device(torch.device(str(device)), config, loop_s)
        except Exception as error:
            figures, notes = {}, [f"measurement failed: {error_text(error)}"]
        emit(DeviceProbed(device=device, figures=figures, notes=tuple(notes)))
    emit(Finished(epochs_completed=0, total_seconds=time.perf_counter() - started))
