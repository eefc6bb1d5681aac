"""Whether a :class:`~gputui.device.Device` is usable here, what it is called, and the few
calls that differ by its kind (synchronize, memory, the current device).

The checks read a :class:`~gputui.jobs.devices.DeviceInventory`, a plain record of what
torch reports, by rules the runner pane shares (:mod:`gputui.jobs.devices`), so they are
tested for machines that are not this one. torch's ``xpu`` module (Intel GPUs) is reached
through ``getattr``, for the builds that lack it.
"""

from __future__ import annotations

import inspect
import platform
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch

from gputui.device import Device, DeviceError
from gputui.jobs.devices import DeviceInventory, unusable_reason
from gputui.jobs.devices import device_options as options_of
from gputui.jobs.events import DeviceOption
from gputui.pci import intel_uuid_bus_id, pci_bus_id, uuid_bytes
from gputui.system import read_sysctl

MPS_BF16_MACOS = 14
"""The first macOS (Sonoma) on which MPS runs bf16."""
MPS_BF16_TORCH = (2, 6)
"""The first torch whose autocast runs bf16 on MPS (2.5's turns itself off: fp32 in truth)."""
SYSCTL_TIMEOUT_S = 5.0


def current_inventory() -> DeviceInventory:
    """Read the inventory from torch (no CUDA context is created)."""
    hip = getattr(torch.version, "hip", None)
    cuda_version = torch.version.cuda or hip
    names: tuple[str, ...] = ()
    if cuda_version and torch.cuda.is_available():
        names = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    xpu = _xpu()
    xpu_names: tuple[str, ...] = ()
    if xpu is not None and xpu.is_available():
        xpu_names = tuple(xpu.get_device_name(i) for i in range(xpu.device_count()))
    return DeviceInventory(
        torch_version=torch.__version__,
        cuda_built=cuda_version is not None,
        cuda_version=cuda_version,
        cuda_names=names,
        mps_built=torch.backends.mps.is_built(),
        mps_available=torch.backends.mps.is_available(),
        system=platform.system(),
        cpu_name=cpu_model_name(),
        hip_version=hip,
        xpu_built=torch_build() == "xpu",
        xpu_names=xpu_names,
    )


def torch_build() -> str:
    """What this torch was built for: ``rocm`` (AMD GPUs, as ``cuda``), ``cuda``, ``xpu``
    (Intel GPUs) or ``cpu``."""
    if getattr(torch.version, "hip", None):
        return "rocm"
    if torch.version.cuda:
        return "cuda"
    if getattr(torch.version, "xpu", None) or getattr(torch._C, "_has_xpu", False):
        return "xpu"
    return "cpu"


def check_device(device: Device, inventory: DeviceInventory | None = None) -> Device:
    """``device`` if it can be used here (by ``inventory``, else torch's), given its index: a
    plain ``cuda`` or ``xpu`` is its first GPU (``cuda:0``).

    Raises:
        DeviceError: one line naming the problem and the usable devices.
    """
    inv = inventory or current_inventory()
    usable = f"usable here: {', '.join(map(str, inv.usable()))}"
    reason = unusable_reason(device.kind, inv)
    if reason:
        raise DeviceError(f"{device}: {reason} ({usable})")
    indexed = device.indexed()
    if indexed.index is None:  # the CPU, MPS: one device each
        return indexed
    count = len(inv.names(device.kind))
    if indexed.index >= count:
        first, last = Device(device.kind, 0), Device(device.kind, count - 1)
        have = f"1 GPU, {first}" if count == 1 else f"{count} GPUs, {first} to {last}"
        raise DeviceError(
            f"{device}: there is no GPU {indexed.index}; torch sees {have} ({usable})"
        )
    return indexed


def usable_devices(inventory: DeviceInventory | None = None) -> list[Device]:
    """Every usable device, like the tutorials' ``try_all_gpus`` but with the CPU and MPS:
    ``[cpu, cuda:0, ..., xpu:0, ..., mps]``, whichever of them are usable; ``cpu`` always."""
    return (inventory or current_inventory()).usable()


def chosen_devices(requested: Sequence[Device]) -> tuple[Device, ...]:
    """The devices a job runs on, indexed, each once: ``requested``, or every usable device
    when none is.

    Raises:
        DeviceError: for the first device that cannot be used, in one line.
    """
    return tuple(dict.fromkeys(check_device(device) for device in requested or usable_devices()))


def device_options(inventory: DeviceInventory | None = None) -> list[DeviceOption]:
    """Every candidate device, usable or not, with the reason when not
    (:func:`gputui.jobs.devices.device_options`; read from torch when ``inventory`` is
    ``None``)."""
    return options_of(inventory or current_inventory())


def torch_device(device: Device) -> torch.device:
    """``device`` as torch takes it."""
    return torch.device(str(device))


def device_of(device: torch.device) -> Device:
    """The :class:`~gputui.device.Device` torch names ``device`` (``mps:0`` reads ``mps``)."""
    return Device.parse(str(device))


def _xpu() -> Any:
    """``torch.xpu``, or ``None`` in a torch without it."""
    return getattr(torch, "xpu", None)


def make_current(device: torch.device) -> None:
    """Make ``device`` the process's current GPU (the CPU and MPS have no such thing).

    Tensors placed with an explicit ``cuda:N`` land there anyway, but what uses the current
    device does not: cuBLAS and cuDNN handles, streams and events made without a device,
    NCCL, a bare ``.cuda()``. Without this they would all act on ``cuda:0``.
    """
    if device.type == "cuda":
        torch.cuda.set_device(device)
    elif device.type == "xpu":
        _xpu().set_device(device)


def check_precision(
    device: Device, precision: str, inventory: DeviceInventory | None = None
) -> None:
    """Refuse, before any training, a ``precision`` (``fp32``, ``tf32`` or ``bf16``) that
    ``device`` (:func:`check_device`'s) cannot run.

    MPS runs bf16 only on macOS 14 (Sonoma) or later (before it, torch fails mid-run) and
    from torch 2.6 on (before it, autocast turns itself off: the run trains in fp32 and
    says bf16). An Intel GPU runs TF32 and bf16 only where torch says it has them
    (:func:`xpu_runs`), else the run would be IEEE fp32, or emulated bf16, under their name.

    Raises:
        DeviceError: one line that says what to use instead.
    """
    if device.kind == "xpu" and precision != "fp32" and not xpu_runs(precision, device.index or 0):
        emulated = " (emulation not counted)" if precision == "bf16" else ""
        raise DeviceError(
            f"{precision} on {device}: torch.xpu.is_{precision}_supported() says no{emulated}, "
            "or this torch has none: use --precision fp32"
        )
    if precision != "bf16" or device.kind != "mps":
        return
    release = platform.mac_ver()[0]
    numbers = re.match(r"(\d+)", release)
    if numbers is not None and int(numbers.group(1)) < MPS_BF16_MACOS:
        raise DeviceError(
            f"bf16 on MPS needs macOS {MPS_BF16_MACOS} or later; this is macOS {release}: "
            "use --precision fp32"
        )
    version = (inventory or current_inventory()).torch_version
    numbers = re.match(r"(\d+)\.(\d+)", version)
    if numbers is not None and (int(numbers.group(1)), int(numbers.group(2))) < MPS_BF16_TORCH:
        first = "{}.{}".format(*MPS_BF16_TORCH)
        raise DeviceError(
            f"bf16 on MPS needs torch {first} or later; this is torch {version}: upgrade torch "
            f"to {first} or later, or use --precision fp32"
        )


def xpu_runs(precision: str, index: int = 0) -> bool:
    """Whether Intel GPU ``index`` runs ``tf32`` or ``bf16`` in hardware, as this torch says
    (``torch.xpu.is_tf32_supported()``, ``is_bf16_supported()``; False in a torch without
    them). bf16 is asked without emulation where torch can be told: it counts it by default.
    """
    supported = getattr(_xpu(), f"is_{precision}_supported", None)
    if supported is None:
        return False
    make_current(torch.device("xpu", index))  # both ask the current GPU
    native = "including_emulation" in inspect.signature(supported).parameters
    return bool(supported(including_emulation=False) if native else supported())


def _gpu_module(device: torch.device) -> Any:
    """``torch.cuda``, ``torch.xpu`` or ``torch.mps`` for a GPU; ``None`` for the CPU."""
    return {"cuda": torch.cuda, "xpu": _xpu(), "mps": torch.mps}.get(device.type)


def synchronize(device: torch.device) -> None:
    """Wait until ``device`` has finished its queued work; the CPU has none to wait for."""
    if device.type == "mps":
        torch.mps.synchronize()  # one device: it takes none
    elif (module := _gpu_module(device)) is not None:
        module.synchronize(device)


def empty_cache(device: torch.device) -> None:
    """Hand the caching allocator's unused memory on ``device`` back (the CPU has none)."""
    if (module := _gpu_module(device)) is not None:
        module.empty_cache()


def reset_peak_memory(device: torch.device) -> None:
    """Start ``device``'s peak allocated memory afresh: the trainer calls it as each epoch
    begins. Only a GPU's allocator keeps a peak that can be reset; the CPU's (the process's
    peak resident set) cannot be, and MPS keeps none."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif device.type == "xpu" and hasattr(_xpu(), "reset_peak_memory_stats"):  # torch 2.5 on
        _xpu().reset_peak_memory_stats(device)


@dataclass(frozen=True)
class AllocatorMemory:
    """What a GPU's caching allocator holds for this process."""

    allocated_bytes: int
    """Bytes held by tensors."""
    reserved_bytes: int
    """Bytes reserved by the allocator (tensors and its cache)."""
    peak_bytes: int
    """The most held by tensors since the last :func:`reset_peak_memory`."""


def allocator_memory(device: torch.device) -> AllocatorMemory | None:
    """The caching allocator's figures on a CUDA (ROCm) or XPU device; ``None`` elsewhere, and
    on XPU before torch 2.5, whose ``torch.xpu`` has no memory statistics."""
    module = _gpu_module(device) if device.type != "mps" else None
    if module is None or not hasattr(module, "memory_allocated"):
        return None
    return AllocatorMemory(
        allocated_bytes=int(module.memory_allocated(device)),
        reserved_bytes=int(module.memory_reserved(device)),
        peak_bytes=int(module.max_memory_allocated(device)),
    )


def device_name(device: torch.device) -> str:
    """What ``device`` is: the GPU's name, ``Apple GPU (MPS)``, or the CPU's model name."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "xpu":
        return str(_xpu().get_device_name(device))
    if device.type == "mps":
        return "Apple GPU (MPS)"
    return cpu_model_name()


def cuda_uuid(index: int) -> str | None:
    """CUDA device ``index``'s UUID as NVML spells it (``GPU-...``), or ``None`` if unknown.

    CUDA numbers devices its own way (``CUDA_DEVICE_ORDER`` defaults to fastest first, and
    ``CUDA_VISIBLE_DEVICES`` renumbers them), so ``cuda:i`` is matched to an NVML GPU by
    this UUID, never by index.
    """
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def gpu_bus_id(device: torch.device) -> str | None:
    """The GPU's PCI bus id as sysfs writes it (``0000:03:00.0``); ``None`` off a GPU, or
    where this torch does not say.

    A CUDA or ROCm build gives the PCI domain, bus and device in the device's properties;
    an XPU build gives the Level Zero UUID, which holds them for Intel's GPUs.
    """
    try:
        if device.type == "cuda":
            props = torch.cuda.get_device_properties(device.index or 0)
            domain, bus, slot = (
                getattr(props, f"pci_{n}_id", None) for n in ("domain", "bus", "device")
            )
            if isinstance(domain, int) and isinstance(bus, int) and isinstance(slot, int):
                return pci_bus_id(domain, bus, slot)
        elif device.type == "xpu":
            uuid = getattr(_xpu().get_device_properties(device.index or 0), "uuid", None)
            raw = uuid_bytes(uuid)
            return intel_uuid_bus_id(raw) if raw is not None else None
    except Exception:  # a build whose properties lack them, or a device gone
        return None
    return None


@cache
def cpu_model_name() -> str:
    """The CPU's model name: ``/proc/cpuinfo`` on Linux, ``sysctl machdep.cpu.brand_string``
    on macOS (``Apple M2 Pro``, where ``platform.processor()`` says only ``arm``), else
    ``platform.processor()``."""
    for line in _cpuinfo_lines():
        key, _, value = line.partition(":")
        if key.strip() in {"model name", "Model"} and value.strip():
            return value.strip()
    if sys.platform == "darwin":
        brand = read_sysctl("machdep.cpu.brand_string", timeout_s=SYSCTL_TIMEOUT_S)
        if brand:
            return brand
    return platform.processor() or platform.machine() or "CPU"


@dataclass(frozen=True)
class CpuBf16:
    """Whether this CPU runs bf16 fast, and why."""

    avx512_bf16: bool
    """``avx512_bf16`` in /proc/cpuinfo's flags."""
    amx_bf16: bool
    """``amx_bf16`` in /proc/cpuinfo's flags (Intel AMX)."""
    capability: str
    """``torch.backends.cpu.get_cpu_capability()``, e.g. ``AVX512``."""

    @property
    def fast(self) -> bool:
        """True when bf16 with channels_last is worth using on this CPU."""
        return self.avx512_bf16 or self.amx_bf16 or "AMX" in self.capability.upper()


@cache
def cpu_bf16() -> CpuBf16:
    """Detect AVX512-BF16 and AMX from /proc/cpuinfo and torch's CPU capability."""
    flags: set[str] = set()
    for line in _cpuinfo_lines():
        key, _, value = line.partition(":")
        if key.strip() in {"flags", "Features"}:
            flags.update(value.split())
            break
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        capability = ""
    return CpuBf16("avx512_bf16" in flags, "amx_bf16" in flags, capability)


def _cpuinfo_lines() -> list[str]:
    if not sys.platform.startswith("linux"):
        return []
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        return []
