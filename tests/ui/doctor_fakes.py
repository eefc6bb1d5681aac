"""A fixed doctor report and a doctor that returns it, for the Doctor screen's tests and
screenshot (no torch is spawned)."""

from __future__ import annotations

import threading

from gputui.device import CPU, Device
from gputui.doctor.checks import Check, DeviceReport, DoctorReport, Status
from gputui.telemetry.readings import NvmlReading
from tests.ui.fakes import GiB

INSTALL_CUDA = (
    "python -m pip uninstall -y torch && "
    "python -m pip install torch --index-url https://download.pytorch.org/whl/cu124"
)

REPORT = DoctorReport(
    checks=(
        Check("torch", Status.OK, "torch 2.13.0+cpu imports: a CPU-only build."),
        Check(
            "nvidia driver",
            Status.OK,
            "NVIDIA driver 550.54.15 (CUDA 12.4) with 2 GPUs; nvidia-smi at /usr/bin/nvidia-smi.",
        ),
        Check(
            "torch build",
            Status.FAIL,
            "torch 2.13.0+cpu is a CPU-only build (`torch.version.cuda` is None), but NVML "
            "reports NVIDIA driver 550.54.15 (CUDA 12.4) with 2 GPUs.",
            INSTALL_CUDA,
        ),
        Check("driver vs build", Status.SKIP, "Nothing to compare: torch is a CPU-only build."),
        Check(
            "CUDA_VISIBLE_DEVICES",
            Status.WARN,
            "CUDA_VISIBLE_DEVICES='' hides every GPU from torch.",
            "`unset CUDA_VISIBLE_DEVICES`, or list GPUs that exist: "
            "`export CUDA_VISIBLE_DEVICES=0,1`",
        ),
        Check("mps", Status.SKIP, "MPS exists only on macOS; this is Linux."),
        Check(
            "pitfall: 'cuda0'",
            Status.INFO,
            "`torch.device('cuda0')` raises RuntimeError: Invalid device string: 'cuda0'",
            "write `'cuda:0'`: the GPU's index follows a colon",
        ),
    ),
    devices=(
        DeviceReport(
            device=CPU,
            name="AMD EPYC 7763 64-Core Processor",
            memory_bytes=int(125.7 * GiB),
            copy_bytes_per_s=9.66e9,
            matmul_fp32_tflops=0.124,
            matmul_bf16_tflops=None,
            notes=("torch CPU kernels: AVX2, 16 threads", "bf16 matmul: not measured in time"),
        ),
        DeviceReport(
            device=Device("cuda", 0),
            name="NVIDIA H100 80GB HBM3",
            compute_capability="9.0",
            memory_bytes=80 * GiB,
            copy_bytes_per_s=2.9e12,  # read + written, as an H100's 3 TB/s
            h2d_pageable_bytes_per_s=5.5e9,
            h2d_pinned_bytes_per_s=2.4e10,
            d2h_pageable_bytes_per_s=4.9e9,
            d2h_pinned_bytes_per_s=None,
            matmul_fp32_tflops=48.2,
            matmul_bf16_tflops=612.0,
            notes=("device -> host pinned: timed out",),
        ),
    ),
)
"""A CPU-only torch on a box with two H100s: every status, both kinds of device, and n/a."""


class FixedDoctor:
    """Returns ``report``, after ``release`` is set (set from the start unless ``hold``)."""

    def __init__(self, report: DoctorReport = REPORT, *, hold: bool = False) -> None:
        self.report = report
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.running = threading.Event()
        self.calls: list[NvmlReading | None] = []
        self.threads: list[threading.Thread] = []
        """The thread of each call."""

    def __call__(self, nvml: NvmlReading | None) -> DoctorReport:
        self.calls.append(nvml)
        self.threads.append(threading.current_thread())
        self.running.set()
        if not self.release.wait(10):
            raise TimeoutError("the test never released the doctor")
        return self.report
