"""Which devices a torch build can use, and why not, from plain facts: torch-free, so that the
engine's child (which reads the facts from torch) and the runner pane (which reads them from
torch's installed files and the monitor's readings, importing no torch) list them alike.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gputui.device import CPU, Device, Kind
from gputui.jobs.events import DeviceOption, DevicesListed


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
    hip_version: str | None = None
    """``torch.version.hip``: set on a ROCm build, whose ``cuda`` devices are AMD GPUs."""
    xpu_built: bool = False
    """Whether torch was built for Intel GPUs (``xpu``)."""
    xpu_names: tuple[str, ...] = ()
    """Name of each visible XPU device, by index; empty when none is usable."""

    def usable(self) -> list[Device]:
        """Every usable device: ``cpu``, then each ``cuda:N``, each ``xpu:N``, then ``mps``."""
        found = [CPU]
        found += [Device("cuda", i) for i in range(len(self.cuda_names))]
        found += [Device("xpu", i) for i in range(len(self.xpu_names))]
        return [*found, Device("mps")] if self.mps_available else found

    def names(self, kind: str) -> tuple[str, ...]:
        """The GPUs of a numbered kind (``cuda``, ``xpu``) torch can use, by index."""
        return self.xpu_names if kind == "xpu" else self.cuda_names


def device_options(inv: DeviceInventory) -> list[DeviceOption]:
    """Every candidate device, usable or not, with the reason when not: ``cpu``; each
    ``cuda:N`` (or one ``cuda`` with its reason); on an XPU build each ``xpu:N`` (or one
    ``xpu`` with its reason); ``mps``."""
    options = [DeviceOption(CPU, True, inv.cpu_name)]
    gpus: list[tuple[Kind, str]] = [
        ("cuda", "AMD GPU (ROCm)" if inv.hip_version else "NVIDIA GPU (CUDA)")
    ]
    if inv.xpu_built:
        gpus.append(("xpu", "Intel GPU (XPU)"))
    for kind, description in gpus:
        reason = unusable_reason(kind, inv)
        if reason:
            options.append(DeviceOption(Device(kind), False, description, reason))
        else:
            options += [
                DeviceOption(Device(kind, i), True, name) for i, name in enumerate(inv.names(kind))
            ]
    mps_reason = unusable_reason("mps", inv)
    options.append(DeviceOption(Device("mps"), mps_reason is None, "Apple GPU (MPS)", mps_reason))
    return options


def unusable_reason(kind: str, inv: DeviceInventory) -> str | None:
    """Why no device of ``kind`` can be used here (one line), ``None`` when one can."""
    if kind == "cuda" and not inv.cuda_built:
        return (
            f"this torch {inv.torch_version} was built without CUDA; install a CUDA build "
            "of torch, as gputui doctor explains"
        )
    if kind == "cuda" and not inv.cuda_names and inv.hip_version:
        return (
            f"torch was built for ROCm (HIP {inv.hip_version}) but sees no GPU; check the "
            "driver with rocm-smi or gputui doctor"
        )
    if kind == "cuda" and not inv.cuda_names:
        return (
            f"torch was built for CUDA {inv.cuda_version} but sees no GPU; check the driver "
            "with nvidia-smi or gputui doctor"
        )
    if kind == "xpu" and not inv.xpu_built:
        return (
            f"this torch {inv.torch_version} was built without XPU; install an XPU build "
            "of torch for an Intel GPU"
        )
    if kind == "xpu" and not inv.xpu_names:
        return "torch was built for XPU but sees no Intel GPU; check the GPU's driver"
    if kind == "mps" and inv.system != "Darwin":
        return f"MPS needs Apple silicon and macOS; this is {inv.system}"
    if kind == "mps" and not inv.mps_built:
        return f"this torch {inv.torch_version} was built without MPS"
    if kind == "mps" and not inv.mps_available:
        return "MPS is not available: it needs macOS 12.3 or later on Apple silicon"
    return None


_VERSION_LINE = re.compile(r"(__version__|cuda|hip|xpu)\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]")
"""A line of ``torch/version.py`` that says a version (``cuda: Optional[str] = '12.4'``)."""


def installed_torch() -> DeviceInventory:
    """What the installed torch was built for, read from its ``torch/version.py`` without
    importing it; no GPU is in it yet (:func:`seen_devices` adds those). A torch whose files
    cannot be read reads as a CPU build of an unknown version."""
    # (0.1 s of imports: only when the installed torch is read)
    import importlib.metadata

    try:
        path = importlib.metadata.distribution("torch").locate_file("torch/version.py")
        lines = path.read_text().splitlines()
    except (OSError, ValueError, importlib.metadata.PackageNotFoundError):
        lines = []
    found = (_VERSION_LINE.fullmatch(line.strip()) for line in lines)
    text = {match.group(1): match.group(2) for match in found if match is not None}
    cuda, hip = text.get("cuda"), text.get("hip")
    system = platform.system()
    apple = system == "Darwin" and platform.machine() == "arm64"
    return DeviceInventory(
        torch_version=text.get("__version__", "(unknown version)"),
        cuda_built=bool(cuda or hip),
        cuda_version=cuda or hip,
        cuda_names=(),
        mps_built=apple,
        mps_available=apple,
        system=system,
        cpu_name="CPU",
        hip_version=hip,
        xpu_built="xpu" in text,
    )


def seen_devices(
    installed: DeviceInventory,
    *,
    nvidia: Sequence[str],
    driver_cuda: str | None,
    amd: Sequence[str],
    intel: Sequence[str],
    cpu_name: str,
) -> DevicesListed:
    """The devices the monitor sees, as ``installed`` torch would list them (no torch asked).

    A CUDA build gets the NVIDIA GPUs, unless the driver's CUDA is of an older major
    version than the build's (it cannot start then; an older minor often can, so torch's
    own listing says); a ROCm build the AMD GPUs, an XPU build the Intel GPUs.

    Args:
        installed: What the installed torch was built for (:func:`installed_torch`).
        nvidia: The NVIDIA GPUs' names, in NVML's order (not always CUDA's).
        driver_cuda: The newest CUDA the NVIDIA driver runs (``12.4``), if known.
        amd: The AMD GPUs' names (``intel``: the Intel GPUs').
        cpu_name: The CPU's model name.
    """
    cuda = None if installed.hip_version else installed.cuda_version
    driver, built = _major(driver_cuda), _major(cuda)
    too_old = driver is not None and built is not None and driver < built
    gpus = tuple(amd) if installed.hip_version else () if too_old else tuple(nvidia)
    inv = replace(
        installed,
        cpu_name=cpu_name,
        cuda_names=gpus if installed.cuda_built else (),
        xpu_names=tuple(intel) if installed.xpu_built else (),
    )
    build = "rocm" if inv.hip_version else "cuda" if cuda else "xpu" if inv.xpu_built else "cpu"
    return DevicesListed(
        devices=tuple(device_options(inv)),
        torch_version=inv.torch_version,
        cuda_version=cuda,
        torch_build=build,
    )


def _major(version: str | None) -> int | None:
    """The major version of ``12.4``; ``None`` where none is known."""
    head = (version or "").partition(".")[0]
    return int(head) if head.isdigit() else None
