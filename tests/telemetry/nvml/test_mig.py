"""MIG devices (``gputui.telemetry.nvml.mig``), against the stand-in libnvidia-ml.so.1."""

from __future__ import annotations

import os
from collections.abc import Callable

import psutil
import pytest

from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.readings import GpuState
from tests.fakenvml import FakeNvml
from tests.telemetry.nvml.conftest import FakeClock, gpu

MiB = 1024 * 1024


def test_mig_devices_are_read_with_their_ids_memory_and_processes(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    sampler: NvmlSampler,
    clock: FakeClock,
) -> None:
    me = os.getpid()
    fake_nvml_env.setenv("FAKE_NVML_MIG_MODE", "0:1")
    fake_nvml_env.setenv("FAKE_NVML_MIG_DEVICES", "0:1:0:4200:9856,0:2:0:0:9856,0:3:1:512:19968")
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", f"0/0:{me}:{4096 * MiB},0/2:4242:{512 * MiB}")
    reading = sampler.sample()

    mig, plain = gpu(reading, 0), gpu(reading, 1)
    assert plain.mig_mode is False and plain.mig_devices is None  # out of MIG mode: none
    assert mig.mig_devices is not None
    first, empty, third = mig.mig_devices
    assert (first.index, first.gpu_instance_id, first.compute_instance_id) == (0, 1, 0)
    assert (first.memory_used_bytes, first.memory_total_bytes) == (4200 * MiB, 9856 * MiB)
    assert [(p.pid, p.gpu_memory_bytes, p.user) for p in first.processes or ()] == [
        (me, 4096 * MiB, psutil.Process().username())
    ]
    assert (empty.index, empty.gpu_instance_id, empty.processes) == (1, 2, ())
    assert (third.gpu_instance_id, third.compute_instance_id) == (3, 1)
    assert [p.pid for p in third.processes or ()] == [4242]
    assert [p.pid for p in mig.processes or ()] == [me, 4242]  # the GPU lists them all too
    # By index until the driver has none at the next: three devices, four asks.
    assert fake_nvml.calls("nvmlDeviceGetMigDeviceHandleByIndex", 0) == 4
    listed = fake_nvml.calls("nvmlDeviceGetComputeRunningProcesses_v3", 0)

    for _ in range(3):
        clock.now += 1.0
        again = gpu(sampler.sample(), 0)
    assert again.mig_devices == mig.mig_devices
    assert fake_nvml.calls("nvmlDeviceGetMigDeviceHandleByIndex", 0) == 4  # on the TTL
    assert fake_nvml.calls("nvmlDeviceGetGpuInstanceId", 0) == 3
    # Only the GPU's own list each sample (the bindings' count, then the fill), the MIG
    # devices' on the TTL; their memory every sample, with the GPU's.
    assert fake_nvml.calls("nvmlDeviceGetComputeRunningProcesses_v3", 0) == listed + 3 * 2
    assert fake_nvml.calls("nvmlDeviceGetMemoryInfo_v2", 0) == 4 * (1 + 3)
    clock.now += 10.0
    sampler.sample()
    assert fake_nvml.calls("nvmlDeviceGetMigDeviceHandleByIndex", 0) == 8  # listed again


def test_mig_devices_nvml_will_not_list_are_none_and_never_a_crash(
    load_nvml: Callable[..., FakeNvml], fake_nvml_env: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_MIG_MODE", "0:1,1:1,2:1")
    fake_nvml_env.setenv("FAKE_NVML_MIG_DEVICES", "0:1:0:100:9856,1:1:0:100:9856,2:1:0:100:9856")
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "0:mig_devices")
    fake_nvml_env.setenv(
        "FAKE_NVML_FAIL",
        "1:nvmlDeviceGetMigDeviceHandleByIndex=NO_PERMISSION,2:nvmlDeviceGetGpuInstanceId",
    )
    load_nvml()
    with NvmlSampler(clock=clock) as sampler:
        unsupported, refused, partial = sampler.sample().gpus
    assert unsupported.mig_mode is True and unsupported.mig_devices is None
    assert refused.mig_devices is None
    assert partial.mig_devices is not None
    (device,) = partial.mig_devices
    assert (device.gpu_instance_id, device.compute_instance_id) == (None, 0)
    assert device.memory_total_bytes == 9856 * MiB

    fake_nvml_env.delenv("FAKE_NVML_UNSUPPORTED")
    fake_nvml_env.delenv("FAKE_NVML_FAIL")
    load_nvml(omit=["nvmlDeviceGetMaxMigDeviceCount"])  # a driver before MIG
    with NvmlSampler(clock=clock) as sampler:
        old = sampler.sample().gpus
    assert [g.mig_devices for g in old] == [None, None, None]
    assert all(g.state is GpuState.OK for g in old)
