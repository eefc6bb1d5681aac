"""A GPU's MIG devices: listed with their ids and processes, their memory read every sample."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gputui.telemetry.readings import GpuProcess, MigDeviceReading

AskGpu = Callable[..., Any]
"""Asks one field of one GPU: ``ask(field_name, *args, not_found=None)``, ``None`` when NVML
does not answer (``Queries.ask`` with the GPU given)."""

_NONE_THERE = False
"""What asking for a MIG device past the last one answers (NVML's NotFound)."""


@dataclass(slots=True)
class MigDevice:
    """What the sampler remembers about one MIG device between health reads."""

    index: int
    """Its index among its GPU's MIG devices."""
    handle: Any
    """Its NVML handle (memory is asked through it every sample)."""
    gpu_instance_id: int | None
    """Its GPU instance id."""
    compute_instance_id: int | None
    """Its compute instance id."""
    processes: tuple[GpuProcess, ...] | None
    """Its processes, as last read."""


def read_mig_devices(
    ask: AskGpu, processes_of: Callable[[Any], tuple[GpuProcess, ...]]
) -> list[MigDevice] | None:
    """A GPU's MIG devices, by index until the driver says there is none at the next (as
    nvitop reads them), each with its processes (``processes_of`` NVML's infos); ``None``
    where NVML does not list them."""
    most = ask("mig_device_count")
    if most is None:
        return None
    devices = []
    for index in range(int(most)):
        handle = ask("mig_device", index, not_found=_NONE_THERE)
        if handle is _NONE_THERE:
            break
        if handle is None:
            return None
        gpu_instance = ask("mig_gpu_instance_id", handle)
        compute_instance = ask("mig_compute_instance_id", handle)
        infos = ask("mig_processes", handle)
        devices.append(
            MigDevice(
                index,
                handle,
                int(gpu_instance) if gpu_instance is not None else None,
                int(compute_instance) if compute_instance is not None else None,
                None if infos is None else processes_of(infos),
            )
        )
    return devices


def read_mig_memory(
    devices: list[MigDevice] | None, ask: AskGpu
) -> tuple[MigDeviceReading, ...] | None:
    """The MIG devices as last listed, with their memory asked now."""
    if devices is None:
        return None
    readings = []
    for device in devices:
        memory = ask("mig_memory", device.handle)
        readings.append(
            MigDeviceReading(
                index=device.index,
                gpu_instance_id=device.gpu_instance_id,
                compute_instance_id=device.compute_instance_id,
                memory_used_bytes=int(memory.used) if memory is not None else None,
                memory_total_bytes=int(memory.total) if memory is not None else None,
                processes=device.processes,
            )
        )
    return tuple(readings)
