"""Facts of machines that are not this one, for the doctor's pure checks."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gputui.device import CPU, Device
from gputui.doctor.checks import DeviceReport
from gputui.doctor.diagnose import DoctorFacts
from gputui.doctor.mps import PlatformFacts
from gputui.doctor.torch_facts import TorchFacts
from gputui.jobs.events import CudaProbed, MpsProbed, TorchProbed
from gputui.jobs.events import PitfallShown as Pitfall
from gputui.telemetry.readings import NvmlReading, NvmlStatus
from tests.ui.fakes import gpu_reading

LINUX = PlatformFacts("Linux", "x86_64")
NO_LIBRARY = (
    "No NVIDIA driver library (libnvidia-ml.so.1) was found; "
    "install the NVIDIA driver to monitor NVIDIA GPUs."
)


def nvml(count: int = 2, cuda: str | None = "12.4", driver: str = "550.54.15") -> NvmlReading:
    """A working NVML with ``count`` H100s and a driver for CUDA ``cuda``."""
    status = NvmlStatus(available=True, driver_version=driver, cuda_driver_version=cuda)
    return NvmlReading(status, tuple(gpu_reading(i) for i in range(count)), 0.0)


def no_nvml(error: str = NO_LIBRARY) -> NvmlReading:
    """NVML unavailable, with the sampler's sentence."""
    return NvmlReading(NvmlStatus(available=False, error=error), (), 0.0)


PITFALLS = (
    Pitfall("cross-device", "meta", "RuntimeError: Tensor on device meta is not on the expected"),
    Pitfall("numpy", "meta", "TypeError: can't convert meta device type tensor to numpy."),
    Pitfall("device-string", "cuda0", "RuntimeError: Invalid device string: 'cuda0'"),
)

CPU_BUILD = TorchProbed(
    imported=True, version="2.13.0+cpu", build="cpu", mps_built=False, numpy_installed=True
)
"""A CPU-only build, as on this machine (with NumPy)."""
NO_CUDA = CudaProbed(
    available=False,
    device_count=0,
    init_error="AssertionError: Torch not compiled with CUDA enabled",
)
"""What CUDA says in a CPU-only build."""
CPU_TORCH = TorchFacts(
    install=CPU_BUILD,
    cuda=NO_CUDA,
    mps=MpsProbed(available=False),
    pitfalls=PITFALLS,
    completed=True,
)
"""The probe of a CPU-only build."""

CUDA_BUILD = replace(CPU_BUILD, version="2.4.0+cu124", cuda_version="12.4", build="cuda")
"""A CUDA 12.4 build."""
TWO_GPUS = CudaProbed(available=True, device_count=2, cudnn_version=90100)
"""What CUDA says of two GPUs it can use (no arch list: an older engine's)."""
CUDA_TORCH = replace(CPU_TORCH, install=CUDA_BUILD, cuda=TWO_GPUS)
"""The probe of a CUDA 12.4 build that works."""


WHEEL_ARCHES = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
"""``torch.cuda.get_arch_list()`` of the cu118 to cu126 wheels (x86_64)."""

CU128_ARCHES = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
"""``torch.cuda.get_arch_list()`` of torch 2.11's cu128 wheel (x86_64)."""


def cuda_devices(
    count: int = 2, name: str = "NVIDIA H100 80GB HBM3", capability: str = "9.0"
) -> tuple[DeviceReport, ...]:
    """The CPU and ``count`` CUDA devices of one kind, as the probe reports them."""
    gpus = tuple(
        DeviceReport(device=Device("cuda", i), name=name, compute_capability=capability)
        for i in range(count)
    )
    return (DeviceReport(device=CPU, name="CPU"), *gpus)


def facts(**changes: Any) -> DoctorFacts:
    """A Linux box with two H100s, nvidia-smi, and a CPU-only torch; ``changes`` override."""
    base = DoctorFacts(
        torch=CPU_TORCH,
        nvml=nvml(),
        nvidia_smi="/usr/bin/nvidia-smi",
        cuda_visible_devices=None,
        platform=LINUX,
        python="python",
        nvml_missing_error=NO_LIBRARY,
    )
    return replace(base, **changes)
