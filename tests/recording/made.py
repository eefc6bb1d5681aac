"""Recordings made in a test: readings that change from frame to frame, written by the real
writer, and the lines of a file read back as they are."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gputui.recording.codec import Decoder, sniffed
from gputui.recording.frames import FORMAT_VERSION, Header, rounded
from gputui.recording.reader import Frame, Recording, RecordingError
from gputui.recording.writer import RecordingWriter
from gputui.telemetry.readings import (
    CpuReading,
    GpuProcess,
    GpuReading,
    GpuState,
    MpsReading,
    NvmlReading,
    NvmlStatus,
    Snapshot,
    Vendor,
)
from gputui.telemetry.snapshot import snapshot_as_dict
from tests.helpers import wait_for

GiB = 1024**3
HIDE_ZSTANDARD = "import sys; sys.modules['zstandard'] = None\n"
"""Run first in a child: ``import zstandard`` fails there, as where it is not installed."""
STARTED = 1_795_000_000.0
"""When the recordings made here started (2026-11-18, UTC)."""


def header(*, interval_s: float = 1.0, full_every: int = 10) -> Header:
    return Header(
        version=FORMAT_VERSION,
        recording="test-recording",
        part=0,
        host="box-01",
        gputui_version="0.1.0",
        interval_s=interval_s,
        full_every=full_every,
        started_unix=STARTED,
    )


def gpu(index: int, frame: int, **changes: Any) -> GpuReading:
    """An H100 whose readings move with ``frame``; a process on it from frame 3 to 8."""
    utilization = float((frame * 37 + index * 11) % 101)
    processes = ()
    if 3 <= frame <= 8:
        processes = (
            GpuProcess(
                pid=4000 + index,
                user="ada",
                command=f"python train.py --rank {index}",
                gpu_memory_bytes=(frame + 1) * GiB,
                sm_utilization_percent=utilization,
                elapsed_s=100.0 + frame,
            ),
        )
    values: dict[str, Any] = {
        "index": index,
        "vendor": Vendor.NVIDIA,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-{index:08d}",
        "bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "state": GpuState.OK,
        "utilization_percent": utilization,
        "memory_utilization_percent": utilization / 2,
        "memory_used_bytes": (frame % 7 + 1) * GiB,
        "memory_total_bytes": 80 * GiB,
        "temperature_c": 40.0 + frame % 5,
        "power_w": 100.0 + frame * 1.5,
        "power_limit_w": 700.0,
        "sm_clock_mhz": 1980.0,
        "sm_clock_max_mhz": 1980.0,
        "fan_percent": None,
        "pcie_rx_bytes_per_s": 1e9 + frame,
        "pcie_tx_bytes_per_s": 2e8,
        "performance_state": 0,
        "energy_j": 1e6 + 150.0 * frame,
        "energy_joules": 150.0 * frame,
        "throttle_reasons": ("power cap",) if frame % 4 == 0 else ("idle",),
        "processes": processes,
    }
    values.update(changes)
    return GpuReading(**values)


def snapshot(frame: int, gpus: int = 2, **gpu_changes: Any) -> Snapshot:
    """A whole reading of the host and ``gpus`` GPUs at frame ``frame``."""
    cpu = CpuReading(
        utilization_percent=float(frame % 100),
        per_core_percent=(float(frame % 100), 50.0),
        logical_cores=2,
        physical_cores=2,
        model_name="Test CPU",
        load_average=(1.0, 0.5, 0.25),
        frequency_mhz=2600.0,
        frequency_max_mhz=None,
        memory_used_bytes=4 * GiB + frame,
        memory_total_bytes=32 * GiB,
        swap_used_bytes=0,
        swap_total_bytes=0,
        self_cpu_percent=1.5,
        self_rss_bytes=40_000_000,
        taken_at=float(frame),
    )
    nvml = NvmlReading(
        status=NvmlStatus(available=True, driver_version="550.54.15", cuda_driver_version="12.4"),
        gpus=tuple(gpu(index, frame, **gpu_changes) for index in range(gpus)),
        taken_at=float(frame),
    )
    mps = MpsReading(supported_platform=False, message="MPS is Apple's.")
    return Snapshot(cpu=cpu, nvml=nvml, mps=mps)


def readings(frame: int, gpus: int = 2) -> dict[str, Any]:
    """:func:`snapshot` as ``snapshot --json`` writes it."""
    return snapshot_as_dict(snapshot(frame, gpus))


def write(
    path: Path,
    frames: int,
    *,
    codec: str = "none",
    max_size: int | None = None,
    keep: int | None = None,
    full_every: int = 10,
    gpus: int = 2,
) -> list[dict[str, Any]]:
    """Write a recording of ``frames`` frames, one a second from t=0.5; returns each frame's
    readings as a reader should read them back."""
    writer = RecordingWriter(
        path, header(full_every=full_every), codec=codec, max_size=max_size, keep=keep
    )
    written = []
    for frame in range(frames):
        data = readings(frame, gpus)
        writer.write(0.5 + frame, data)
        written.append(rounded(data))
    writer.close()
    return written


def decoded_lines(path: Path) -> list[bytes]:
    """The file's lines, decompressed (a last one cut short included)."""
    data = path.read_bytes()
    return Decoder(sniffed(data)).decode(data).split(b"\n")


def plain_lines(path: Path) -> list[bytes]:
    """An uncompressed recording's lines as they are on disk."""
    return path.read_bytes().split(b"\n")


def frames_when(
    path: Path, recorder: subprocess.Popen[str], done: Callable[[list[Frame]], bool]
) -> list[Frame]:
    """The frames ``recorder`` has written to ``path`` once ``done`` says so of them, read
    again and again while it runs; it is killed if they never come."""

    def read() -> tuple[list[Frame]] | None:
        assert recorder.poll() is None, recorder.communicate()
        try:
            frames = list(Recording.open(path).frames())
        except RecordingError:  # no header yet
            frames = []
        return (frames,) if done(frames) else None

    try:
        return wait_for(read, "the recorder never wrote what was waited for")[0]
    except AssertionError:
        recorder.kill()
        raise
