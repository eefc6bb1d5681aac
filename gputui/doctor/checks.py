"""The doctor's report: typed, frozen checks and per-device figures.

A :class:`DoctorReport` is all a renderer needs: ``gputui doctor`` prints it as
text or JSON (:mod:`gputui.doctor.render`), and the app's Doctor screen shows the
same objects. A figure that could not be measured is ``None`` (shown ``n/a``),
with the reason in the device's ``notes``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum

from gputui.device import Device


class Status(str, Enum):
    """How a check came out."""

    OK = "ok"
    """Works as it should."""
    WARN = "warn"
    """Works, or does not matter here, but something deserves a look."""
    FAIL = "fail"
    """Broken and fixable: ``gputui doctor`` exits 1 when any check fails."""
    SKIP = "skip"
    """Does not apply to this machine, or could not be checked."""
    INFO = "info"
    """Nothing to check: a common mistake, shown with the error torch raises for it here."""


@dataclass(frozen=True, slots=True)
class Check:
    """One finding: what was checked, how it came out, and what to do about it."""

    name: str
    """Short name, e.g. ``torch`` or ``CUDA_VISIBLE_DEVICES``."""
    status: Status
    """``ok``, ``warn``, ``fail`` or ``skip``."""
    message: str
    """What was found, in a sentence or two (may quote torch's own error text)."""
    fix: str | None = None
    """What to do: a command or a sentence; ``None`` when there is nothing to do."""


@dataclass(frozen=True, slots=True)
class DeviceReport:
    """One device torch can use here, and how fast it really is.

    Bandwidths are bytes per second: a copy within one memory counts each byte twice,
    read and written (as STREAM and nvbandwidth count a copy), a host/device transfer
    once. TFLOP/s counts ``2 * n**3`` floating-point operations per ``n x n`` matmul.
    """

    device: Device
    """``cpu``, ``cuda:N`` or ``mps``."""
    name: str
    """The processor's name, e.g. ``NVIDIA H100 80GB HBM3``."""
    compute_capability: str | None = None
    """CUDA compute capability, e.g. ``9.0``; ``None`` for the CPU and MPS."""
    memory_bytes: int | None = None
    """Device memory (host memory for the CPU; what Metal recommends for MPS)."""
    uuid: str | None = None
    """A CUDA device's UUID as NVML spells it (``GPU-...``)."""
    nvml_index: int | None = None
    """The NVML GPU with that UUID: CUDA's numbering is not NVML's."""
    copy_bytes_per_s: float | None = None
    """Copy within the device's own memory (for the CPU: a host memcpy), bytes read plus
    bytes written per second."""
    h2d_pageable_bytes_per_s: float | None = None
    """Host-to-device copy from ordinary (pageable) host memory."""
    h2d_pinned_bytes_per_s: float | None = None
    """Host-to-device copy from pinned (page-locked) host memory."""
    d2h_pageable_bytes_per_s: float | None = None
    """Device-to-host copy into ordinary (pageable) host memory."""
    d2h_pinned_bytes_per_s: float | None = None
    """Device-to-host copy into pinned (page-locked) host memory."""
    matmul_fp32_tflops: float | None = None
    """``n x n`` float32 matrix-multiply throughput."""
    matmul_bf16_tflops: float | None = None
    """``n x n`` bfloat16 matrix-multiply throughput."""
    notes: tuple[str, ...] = ()
    """How the figures were taken, and why any is ``n/a``."""


FIGURES = tuple(
    f.name for f in fields(DeviceReport) if f.name.endswith(("_bytes_per_s", "_tflops"))
)
"""The names of a :class:`DeviceReport`'s measured figures."""


@dataclass(frozen=True, slots=True)
class ReportFacts:
    """The facts the checks were drawn from, for scripts; ``None`` where not gathered."""

    torch_version: str | None = None
    """``torch.__version__``; ``None`` when torch did not import (or the probe stopped first)."""
    torch_build: str | None = None
    """``cuda``, ``rocm``, ``xpu`` or ``cpu``; ``None`` when torch did not import."""
    torch_cuda_version: str | None = None
    """The CUDA version torch was built with (``torch.version.cuda``); ``None`` for other builds."""
    cuda_available: bool | None = None
    """``torch.cuda.is_available()``; ``None`` when the probe did not ask."""
    cuda_device_count: int | None = None
    """``torch.cuda.device_count()``; ``None`` when the probe did not ask."""
    driver_version: str | None = None
    """The NVIDIA driver's version as NVML reports it."""
    driver_cuda_version: str | None = None
    """The newest CUDA version the driver supports."""
    gpu_count: int | None = None
    """How many GPUs NVML reports; ``None`` when NVML did not answer."""
    nvml_error_code: int | None = None
    """NVML's return code when it did not start (``12``: no library, ``18``: driver and
    library versions differ); ``None`` when it started or no NVML call failed."""


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """Every check, in the order they read best, every usable device, and the facts."""

    checks: tuple[Check, ...]
    """The findings."""
    devices: tuple[DeviceReport, ...] = ()
    """Each device torch can use (the CPU first), with its figures."""
    facts: ReportFacts = ReportFacts()
    """What the checks were drawn from."""

    @property
    def failed(self) -> bool:
        """True when any check failed (``gputui doctor`` then exits 1)."""
        return any(check.status is Status.FAIL for check in self.checks)

    def counts(self) -> dict[Status, int]:
        """How many checks came out each way (every status, zeros included)."""
        return {status: sum(check.status is status for check in self.checks) for status in Status}

    def check(self, name: str) -> Check | None:
        """The check called ``name``, or ``None``."""
        return next((check for check in self.checks if check.name == name), None)
