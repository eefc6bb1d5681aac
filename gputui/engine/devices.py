"""Device strings as the tutorials write them, checked against what torch can use here.

``parse_device`` turns ``cpu``, ``cuda``, ``cuda:N``, ``mps`` (and ``cpu:0``, ``mps:0``, as
torch writes them) into a canonical device string, or raises :class:`DeviceError` with one
line that names what *is* usable. ``usable_devices`` is the tutorials' ``try_all_gpus`` with
the CPU and MPS included; ``device_options`` lists every candidate with a reason when it
cannot be used (for the runner pane, through the engine's ``devices`` mode).

The checks read a :class:`DeviceInventory`, a plain record of what torch
reports, so the rules are tested for machines that are not this one.
"""

from __future__ import annotations

import platform
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from gputui.jobs.events import DeviceOption
from gputui.system import read_sysctl

_DEVICE_RE = re.compile(r"^(cpu|cuda|mps)(?::(\d+))?$")
_SPELLINGS = "cpu, cuda, cuda:N or mps"
MPS_BF16_MACOS = 14
"""The first macOS (Sonoma) on which MPS runs bf16."""
MPS_BF16_TORCH = (2, 6)
"""The first torch whose autocast runs bf16 on MPS (2.5's turns itself off: fp32 in truth)."""
SYSCTL_TIMEOUT_S = 5.0


class DeviceError(ValueError):
    """A device that cannot be used; ``str()`` is one line naming what is usable."""


@dataclass(frozen=True)
class DeviceInventory:
    """What this torch build and machine offer, as plain facts."""

    torch_version: str
    """``torch.__version__``."""
    cuda_built: bool
    """Whether torch was built with CUDA (or ROCm, which also answers to ``cuda``)."""
    cuda_version: str | None
    """CUDA (or HIP) version torch was built for."""
    cuda_names: tuple[str, ...]
    """Name of each visible CUDA device, by index; empty when none is usable."""
    mps_built: bool
    """Whether torch was built with MPS."""
    mps_available: bool
    """Whether MPS can be used now."""
    system: str
    """``platform.system()``: ``Linux``, ``Darwin``, ``Windows``."""
    cpu_name: str
    """The CPU's model name."""

    def usable(self) -> list[str]:
        """Every usable device string: ``cpu``, then each ``cuda:N``, then ``mps``."""
        found = ["cpu"] + [f"cuda:{i}" for i in range(len(self.cuda_names))]
        return [*found, "mps"] if self.mps_available else found


def current_inventory() -> DeviceInventory:
    """Read the inventory from torch (no CUDA context is created)."""
    hip = getattr(torch.version, "hip", None)
    cuda_version = torch.version.cuda or hip
    names: tuple[str, ...] = ()
    if cuda_version and torch.cuda.is_available():
        names = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return DeviceInventory(
        torch_version=torch.__version__,
        cuda_built=cuda_version is not None,
        cuda_version=cuda_version,
        cuda_names=names,
        mps_built=torch.backends.mps.is_built(),
        mps_available=torch.backends.mps.is_available(),
        system=platform.system(),
        cpu_name=cpu_model_name(),
    )


def parse_device(text: str, inventory: DeviceInventory | None = None) -> str:
    """Check a device string and return its canonical form.

    Args:
        text: ``cpu``, ``cpu:0``, ``cuda``, ``cuda:N``, ``mps`` or ``mps:0``.
        inventory: What is usable; read from torch when ``None``.

    Returns:
        ``cpu`` (for ``cpu:0`` too), ``cuda:N`` (plain ``cuda`` reads ``cuda:0``) or ``mps``
        (for ``mps:0`` too).

    Raises:
        DeviceError: one line naming the problem and the usable devices.
    """
    inv = inventory or current_inventory()
    usable = f"usable here: {', '.join(inv.usable())}"
    spelled = text.strip()
    match = _DEVICE_RE.match(spelled)
    if match is None:
        raise DeviceError(
            f"{text!r} is not a device: write {_SPELLINGS}{_hint(spelled)} ({usable})"
        )
    kind, index_text = match.group(1), match.group(2)
    if kind == "cpu":
        if index_text is not None and int(index_text) != 0:
            raise DeviceError(f"{spelled}: the CPU is one device, cpu (or cpu:0) ({usable})")
        return "cpu"  # cpu:0, as torch accepts it, is the same one
    if kind == "mps":
        reason = _mps_unusable_reason(inv)
        if reason:
            raise DeviceError(f"{spelled}: {reason} ({usable})")
        if index_text is not None and int(index_text) != 0:
            raise DeviceError(f"{spelled}: a Mac has one GPU, mps (or mps:0) ({usable})")
        return "mps"  # mps:0, as torch names a tensor's device, is the same one
    reason = _cuda_unusable_reason(inv)
    if reason:
        raise DeviceError(f"{spelled}: {reason} ({usable})")
    index = int(index_text) if index_text is not None else 0
    count = len(inv.cuda_names)
    if index >= count:
        have = "1 GPU, cuda:0" if count == 1 else f"{count} GPUs, cuda:0 to cuda:{count - 1}"
        raise DeviceError(f"{spelled}: there is no GPU {index}; torch sees {have} ({usable})")
    return f"cuda:{index}"


def usable_devices(inventory: DeviceInventory | None = None) -> list[str]:
    """Every usable device, like the tutorials' ``try_all_gpus`` but with the CPU and MPS.

    Returns:
        ``["cpu", "cuda:0", ..., "mps"]``, whichever of them are usable; ``cpu`` always.
    """
    return (inventory or current_inventory()).usable()


def chosen_devices(requested: Sequence[str]) -> tuple[str, ...]:
    """The devices a job runs on, spelled as torch does, each once: ``requested``, or
    every usable device when none is.

    Raises:
        DeviceError: for the first device that cannot be used, in one line.
    """
    return tuple(dict.fromkeys(parse_device(text) for text in requested or usable_devices()))


def device_options(inventory: DeviceInventory | None = None) -> list[DeviceOption]:
    """Every candidate device, usable or not, with the reason when not.

    Returns:
        ``cpu``; each ``cuda:N`` (or one ``cuda`` with its reason); ``mps``.
    """
    inv = inventory or current_inventory()
    options = [DeviceOption("cpu", True, inv.cpu_name)]
    cuda_reason = _cuda_unusable_reason(inv)
    if cuda_reason:
        options.append(DeviceOption("cuda", False, "NVIDIA GPU (CUDA)", cuda_reason))
    else:
        options += [DeviceOption(f"cuda:{i}", True, name) for i, name in enumerate(inv.cuda_names)]
    mps_reason = _mps_unusable_reason(inv)
    options.append(DeviceOption("mps", mps_reason is None, "Apple GPU (MPS)", mps_reason))
    return options


def _cuda_unusable_reason(inv: DeviceInventory) -> str | None:
    if not inv.cuda_built:
        return (
            f"this torch {inv.torch_version} was built without CUDA; install a CUDA build "
            "of torch, as gputui doctor explains"
        )
    if not inv.cuda_names:
        return (
            f"torch was built for CUDA {inv.cuda_version} but sees no GPU; check the driver "
            "with nvidia-smi or gputui doctor"
        )
    return None


def _mps_unusable_reason(inv: DeviceInventory) -> str | None:
    if inv.system != "Darwin":
        return f"MPS needs Apple silicon and macOS; this is {inv.system}"
    if not inv.mps_built:
        return f"this torch {inv.torch_version} was built without MPS"
    if not inv.mps_available:
        return "MPS is not available: it needs macOS 12.3 or later on Apple silicon"
    return None


def _hint(text: str) -> str:
    lowered = text.lower()
    numbered = re.match(r"^(?:cuda|gpu)(\d+)$", lowered)
    if numbered:
        return f"; did you mean cuda:{numbered.group(1)}?"
    if lowered in {"gpu", "nvidia"}:
        return "; an NVIDIA GPU is cuda"
    if _DEVICE_RE.match(lowered) and lowered != text:
        return f"; did you mean {lowered}?"
    return ""


def make_current(device: torch.device) -> None:
    """Make ``device`` the process's current CUDA device (other devices have no such thing).

    Tensors placed with an explicit ``cuda:N`` land there anyway, but what uses the current
    device does not: cuBLAS and cuDNN handles, streams and events made without a device,
    NCCL, a bare ``.cuda()``. Without this they would all act on ``cuda:0``.
    """
    if device.type == "cuda":
        torch.cuda.set_device(device)


def check_precision(device: str, precision: str, inventory: DeviceInventory | None = None) -> None:
    """Refuse, before any training, a precision ``device`` cannot run.

    MPS runs bf16 only on macOS 14 (Sonoma) or later (before it, torch fails mid-run) and
    from torch 2.6 on (before it, autocast turns itself off: the run trains in fp32 and
    says bf16).

    Args:
        device: A canonical device (:func:`parse_device`).
        precision: ``fp32``, ``tf32`` or ``bf16``.
        inventory: What this torch is; read from torch when ``None``.

    Raises:
        DeviceError: one line that says what to use instead.
    """
    if precision != "bf16" or device != "mps":
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


def synchronize(device: torch.device) -> None:
    """Wait until ``device`` has finished its queued work; the CPU has none to wait for."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def device_name(device: torch.device) -> str:
    """What ``device`` is: the GPU's name, ``Apple GPU (MPS)``, or the CPU's model name."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
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
