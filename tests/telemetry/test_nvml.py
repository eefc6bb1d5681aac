"""NvmlSampler through the real nvidia-ml-py bindings, against the stand-in libnvidia-ml.so.1."""

from __future__ import annotations

import ctypes.util
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from gputui.telemetry.nvml import (
    NvmlSampler,
    calls_in_flight,
    describe_nvml_error,
    format_cuda_version,
    is_stale,
)
from gputui.telemetry.nvml.calls import (
    GPU_IS_LOST,
    NO_PERMISSION,
    RESET_REQUIRED,
    UNKNOWN,
    _CallsInFlight,
    describe_handle_error,
)
from gputui.telemetry.nvml.queries import (
    ENERGY_SLOW_S,
    ENERGY_TTL_S,
    MEDIA_TTL_S,
    NVLINK_STATE_TTL_S,
    NVLINK_TTL_S,
    PCIE_BUDGET_S,
    PCIE_TTL_S,
)
from gputui.telemetry.readings import (
    ERROR_BRIEF_MAX,
    DriverCall,
    GpuReading,
    GpuState,
    NvlinkThroughput,
    NvmlReading,
    nvml_hung,
)
from tests.fakenvml import LIBRARY_NAME, FakeNvml
from tests.fakeprocfs import FakeProcfs, started
from tests.telemetry.conftest import FakeClock

H100 = "NVIDIA H100 80GB HBM3"
H100_MEMORY = 81559 * 1024 * 1024
LIBRARY_MISSING = (
    "No NVIDIA driver library (libnvidia-ml.so.1) was found; "
    "install the NVIDIA driver to monitor NVIDIA GPUs."
)
LIVE_FIELDS = (
    "utilization_percent",
    "memory_utilization_percent",
    "memory_used_bytes",
    "memory_total_bytes",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "energy_j",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "fan_percent",
    "pcie_rx_bytes_per_s",
    "pcie_tx_bytes_per_s",
    "performance_state",
    "memory_clock_mhz",
    "memory_clock_max_mhz",
    "pcie_link_gen",
    "pcie_link_gen_max",
    "pcie_link_width_lanes",
    "pcie_link_width_max_lanes",
)
MEMORY_CLOCK_AND_LINK = (
    "memory_clock_mhz",
    "memory_clock_max_mhz",
    "pcie_link_gen",
    "pcie_link_gen_max",
    "pcie_link_width_lanes",
    "pcie_link_width_max_lanes",
)


def gpu(reading: NvmlReading, index: int) -> GpuReading:
    (found,) = [g for g in reading.gpus if g.index == index]
    return found


def assert_one_sentence(text: str | None) -> None:
    assert text is not None
    assert "\n" not in text
    assert text.endswith(".")
    assert ". " not in text.rstrip(".")


def test_two_simulated_h100s_answer_every_field(sampler: NvmlSampler) -> None:
    reading = sampler.sample()

    assert reading.status.available
    assert reading.status.error is None
    assert reading.status.driver_version == "550.54.15"
    assert reading.status.cuda_driver_version == "12.4"
    assert [g.index for g in reading.gpus] == [0, 1]
    first = gpu(reading, 0)
    assert first.name == H100
    assert first.state is GpuState.OK
    assert first.uuid is not None and first.uuid.startswith("GPU-")
    assert first.uuid != gpu(reading, 1).uuid
    assert first.bus_id == "00000000:18:00.0"
    assert gpu(reading, 1).bus_id == "00000000:2A:00.0"
    for name in LIVE_FIELDS:
        assert getattr(first, name) is not None, name
    assert first.memory_total_bytes == H100_MEMORY
    assert 0 < first.memory_used_bytes < H100_MEMORY  # type: ignore[operator]
    assert first.power_limit_w == 700.0
    assert first.sm_clock_max_mhz == 1980.0
    assert (first.memory_clock_mhz, first.memory_clock_max_mhz) == (2619.0, 2619.0)
    assert first.pcie_link_gen in (1, 5)  # Gen1 while idle
    assert (first.pcie_link_gen_max, first.pcie_link_width_lanes) == (5, 16)
    assert first.pcie_link_width_max_lanes == 16
    assert 0.0 <= first.utilization_percent <= 100.0  # type: ignore[operator]
    assert first.pcie_tx_bytes_per_s % 1024 == 0  # type: ignore[operator]  # from KB/s
    assert first.processes == ()


def test_readings_move_between_samples_on_every_gpu(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "4")
    fake_nvml_env.setenv("FAKE_NVML_GPU_NAME", "NVIDIA A100-SXM4-40GB")
    readings = [sampler.sample() for _ in range(6)]

    assert all(len(r.gpus) == 4 for r in readings)
    assert {g.name for g in readings[0].gpus} == {"NVIDIA A100-SXM4-40GB"}
    for index in range(4):
        utilization = {gpu(r, index).utilization_percent for r in readings}
        memory = {gpu(r, index).memory_used_bytes for r in readings}
        assert len(utilization) > 2, (index, utilization)
        assert len(memory) > 2, (index, memory)
    assert readings[0].taken_at <= readings[-1].taken_at


def test_total_energy_is_a_counter_in_joules(sampler: NvmlSampler) -> None:
    readings = [sampler.sample() for _ in range(3)]

    for index in (0, 1):
        energy = [gpu(r, index).energy_j for r in readings]
        assert all(e is not None for e in energy)
        # The stand-in starts GPU i at (i + 1) MJ (mJ from NVML, joules here), then counts up.
        assert (index + 1) * 1e6 < energy[0] < energy[1] < energy[2] < (index + 2) * 1e6  # type: ignore[operator]


def test_energy_since_start_is_the_counter_s_increase_from_the_first_reading(
    sampler: NvmlSampler,
) -> None:
    readings = [sampler.sample() for _ in range(4)]

    for index in (0, 1):
        counter = [gpu(r, index).energy_j for r in readings]
        since = [gpu(r, index).energy_joules for r in readings]
        assert since[0] == 0.0
        for step in range(1, 4):
            assert since[step] == pytest.approx(counter[step] - counter[0])  # type: ignore[operator]
        assert since[3] > since[2] > since[1] > 0.0  # type: ignore[operator]


def test_energy_since_start_counts_on_across_a_counter_that_starts_again(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_ENERGY_RESET", "0:60")  # a driver reload after 60 queries
    readings = [sampler.sample() for _ in range(8)]

    counter = [gpu(r, 0).energy_j for r in readings]
    since = [gpu(r, 0).energy_joules for r in readings]
    restart = next(i for i in range(1, 8) if counter[i] < counter[i - 1])  # type: ignore[operator]
    assert counter[restart] < 1e6 < counter[0]  # type: ignore[operator]  # it went back to ~0
    assert since[restart] == since[restart - 1]  # what was used across the reload is not guessed
    for step in range(restart + 1, 8):
        grown = counter[step] - counter[step - 1]  # type: ignore[operator]
        assert since[step] == pytest.approx(since[step - 1] + grown)  # type: ignore[operator]
    assert since[-1] > since[restart] > 0.0  # type: ignore[operator]


def test_energy_is_none_where_nvml_has_no_counter(
    load_nvml: Callable[..., FakeNvml], fake_nvml_env: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    fake = load_nvml(omit=["nvmlDeviceGetTotalEnergyConsumption"])  # a driver before Volta's
    with NvmlSampler(clock=clock) as sampler:
        old_driver = [sampler.sample() for _ in range(2)]
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "1:energy")  # a board without the counter
    fake = load_nvml()
    with NvmlSampler(clock=clock) as sampler:
        unsupported = [sampler.sample() for _ in range(3)]

    assert all(g.energy_j is None for r in old_driver for g in r.gpus)
    assert all(g.energy_joules is None for r in old_driver for g in r.gpus)
    assert all(g.power_w is not None for r in old_driver for g in r.gpus)
    assert all(gpu(r, 0).energy_j is not None for r in unsupported)
    assert all(gpu(r, 1).energy_j is None for r in unsupported)
    assert all(gpu(r, 1).energy_joules is None for r in unsupported)
    assert fake.calls("nvmlDeviceGetTotalEnergyConsumption", 1) == 1  # asked once, then n/a


def test_a_counter_that_costs_milliseconds_of_cpu_is_asked_every_ten_seconds(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    """As an H200 on driver 580 spends milliseconds on it (BENCHMARKS.md): its last answer is
    shown until ENERGY_TTL_S has passed, while the rest is read every sample. The energy
    counted between two answers is the counter's increase."""
    fake_nvml_env.setenv("FAKE_NVML_ENERGY_CPU_US", "3000")
    assert ENERGY_SLOW_S < 0.003
    readings = []
    for _ in range(int(ENERGY_TTL_S) + 1):  # t = 0, 1, ..., 10 s
        readings.append(sampler.sample())
        clock.now += 1.0

    assert fake_nvml.calls("nvmlDeviceGetTotalEnergyConsumption", 0) == 2  # at 0 and 10 s
    assert fake_nvml.calls("nvmlDeviceGetPowerUsage", 0) == len(readings)
    counter = [gpu(r, 0).energy_j for r in readings]
    since = [gpu(r, 0).energy_joules for r in readings]
    assert counter[:-1] == [counter[0]] * (len(readings) - 1)  # the first answer, shown
    assert since[:-1] == [0.0] * (len(readings) - 1)
    assert counter[-1] > counter[0]  # type: ignore[operator]
    assert since[-1] == pytest.approx(counter[-1] - counter[0])  # type: ignore[operator]
    assert len({gpu(r, 0).power_w for r in readings}) > 1  # the power draw moves every sample


def test_slow_counters_of_several_gpus_are_asked_in_turn(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    """8 GPUs whose counters cost milliseconds: all are asked at the first sample, then each
    in a sample of its own, every ENERGY_TTL_S from then on."""
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "8")
    fake_nvml_env.setenv("FAKE_NVML_ENERGY_CPU_US", "1000")

    def asked() -> list[int]:
        return [fake_nvml.calls("nvmlDeviceGetTotalEnergyConsumption", i) for i in range(8)]

    sampler.sample()  # the first sample starts the library (its counts from 0)
    assert asked() == [1] * 8
    asked_at: dict[int, list[int]] = {index: [0] for index in range(8)}
    for second in range(1, int(2 * ENERGY_TTL_S) + 1):
        clock.now += 1.0
        before = asked()
        sampler.sample()
        for index, count in enumerate(asked()):
            if count > before[index]:
                asked_at[index].append(second)
    second_reads = [times[1] for times in asked_at.values()]
    assert len(set(second_reads)) == 8  # each in a sample of its own
    for times in asked_at.values():
        assert times[2] - times[1] == ENERGY_TTL_S


def test_a_quick_counter_is_asked_every_sample(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    """A counter that answers on little CPU is asked every sample, however long the call
    waits (a preempted call, a driver that sleeps): CPU time decides, not wall time."""
    fake_nvml_env.setenv("FAKE_NVML_HANG", "energy=0.005")  # sleeps 5 ms, spends no CPU
    for _ in range(3):
        sampler.sample()
        clock.now += 1.0
    assert fake_nvml.calls("nvmlDeviceGetTotalEnergyConsumption", 0) == 3


def test_static_facts_are_asked_once(
    fake_nvml: FakeNvml, sampler: NvmlSampler, clock: FakeClock
) -> None:
    for _ in range(5):
        sampler.sample()
        clock.now += 1.0

    for index in (0, 1):
        assert fake_nvml.calls("nvmlDeviceGetHandleByIndex_v2", index) == 1
        for static in (
            "nvmlDeviceGetName",
            "nvmlDeviceGetUUID",
            "nvmlDeviceGetPciInfo_v3",
            "nvmlDeviceGetMaxPcieLinkGeneration",
            "nvmlDeviceGetMaxPcieLinkWidth",
            "nvmlDeviceGetEnforcedPowerLimit",
        ):
            assert fake_nvml.calls(static, index) == 1, static
        assert fake_nvml.calls("nvmlDeviceGetMaxClockInfo", index) == 2  # SM and memory
        assert fake_nvml.calls("nvmlDeviceGetUtilizationRates", index) == 5
        assert fake_nvml.calls("nvmlDeviceGetMemoryInfo_v2", index) == 5
        assert fake_nvml.calls("nvmlDeviceGetMemoryInfo", index) == 0
    assert fake_nvml.calls("nvmlSystemGetDriverVersion") == 1


def test_power_limit_is_asked_again_after_its_ttl(
    fake_nvml: FakeNvml, sampler: NvmlSampler, clock: FakeClock
) -> None:
    sampler.sample()
    clock.now += 10.0
    sampler.sample()
    assert fake_nvml.calls("nvmlDeviceGetEnforcedPowerLimit", 0) == 1
    clock.now += 25.0
    sampler.sample()
    assert fake_nvml.calls("nvmlDeviceGetEnforcedPowerLimit", 0) == 2


def test_unsupported_fields_are_none_and_asked_once_quietly(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    sampler: NvmlSampler,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "fan,power_limit,1:pcie")
    caplog.set_level(logging.DEBUG, logger="gputui.telemetry.nvml")
    readings = [sampler.sample() for _ in range(3)]

    for reading in readings:
        for g in reading.gpus:
            assert g.fan_percent is None
            assert g.power_limit_w is None
            assert g.temperature_c is not None
        assert gpu(reading, 0).pcie_rx_bytes_per_s is not None
        assert gpu(reading, 1).pcie_rx_bytes_per_s is None
        assert gpu(reading, 1).pcie_tx_bytes_per_s is None
    for index in (0, 1):
        assert fake_nvml.calls("nvmlDeviceGetFanSpeed", index) == 1
        # Enforced limit answers NotSupported: the field is given up, no fallback is tried.
        assert fake_nvml.calls("nvmlDeviceGetEnforcedPowerLimit", index) == 1
    # tx + rx once: the figures are fresh for PCIE_TTL_S, and the clock did not move.
    assert fake_nvml.calls("nvmlDeviceGetPcieThroughput", 0) == 2
    assert fake_nvml.calls("nvmlDeviceGetPcieThroughput", 1) == 2  # tx once, rx once

    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    fan_logs = [r for r in caplog.records if "fan" in r.getMessage()]
    assert len(fan_logs) == 2  # once per GPU
    assert all(r.levelno == logging.DEBUG and r.exc_info is None for r in caplog.records)


def test_a_gpu_without_a_memory_clock_or_pcie_link_reads_none_and_is_asked_once(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    """GPU 1 answers NotSupported for its memory clock (but not its SM clock) and its link."""
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "1:mem_clock,1:pcie_link")
    readings = []
    for _ in range(3):
        readings.append(sampler.sample())
        clock.now += PCIE_TTL_S  # the link is asked again, where it answers

    for reading in readings:
        supported, unsupported = gpu(reading, 0), gpu(reading, 1)
        assert all(getattr(supported, name) is not None for name in MEMORY_CLOCK_AND_LINK)
        assert all(getattr(unsupported, name) is None for name in MEMORY_CLOCK_AND_LINK)
        assert unsupported.sm_clock_mhz is not None and unsupported.sm_clock_max_mhz == 1980.0
    link = ("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth")
    assert [fake_nvml.calls(name, 0) for name in link] == [3, 3]
    assert [fake_nvml.calls(name, 1) for name in link] == [1, 1]  # NotSupported: asked once
    # Every sample asks GPU 0's SM and memory clocks; GPU 1's memory clock only once.
    assert fake_nvml.calls("nvmlDeviceGetClockInfo", 0) == 6
    assert fake_nvml.calls("nvmlDeviceGetClockInfo", 1) == 3 + 1
    assert fake_nvml.calls("nvmlDeviceGetMaxClockInfo", 1) == 2


def test_a_driver_without_the_pcie_link_functions_reads_none(
    load_nvml: Callable[..., FakeNvml], clock: FakeClock
) -> None:
    fake = load_nvml(
        omit=[
            "nvmlDeviceGetCurrPcieLinkGeneration",
            "nvmlDeviceGetMaxPcieLinkGeneration",
            "nvmlDeviceGetCurrPcieLinkWidth",
            "nvmlDeviceGetMaxPcieLinkWidth",
        ]
    )
    with NvmlSampler(clock=clock) as sampler:
        reading = sampler.sample()
    for g in reading.gpus:
        assert g.state is GpuState.OK and g.memory_clock_mhz == 2619.0
        assert (g.pcie_link_gen, g.pcie_link_gen_max) == (None, None)
        assert (g.pcie_link_width_lanes, g.pcie_link_width_max_lanes) == (None, None)
    assert fake.calls("nvmlDeviceGetPcieThroughput") == 4  # the throughput still answers


def test_missing_function_is_none_without_noise(
    load_nvml: Callable[..., FakeNvml],
    clock: FakeClock,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = load_nvml(omit=["nvmlDeviceGetPcieThroughput", "nvmlDeviceGetFanSpeed"])
    caplog.set_level(logging.DEBUG, logger="gputui.telemetry.nvml")
    with NvmlSampler(clock=clock) as sampler:
        readings = [sampler.sample() for _ in range(3)]

    for reading in readings:
        assert reading.status.available
        for g in reading.gpus:
            assert g.pcie_rx_bytes_per_s is None
            assert g.pcie_tx_bytes_per_s is None
            assert g.fan_percent is None
            assert g.utilization_percent is not None
    assert fake.calls("nvmlDeviceGetUtilizationRates") == 6
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    missing = [r for r in caplog.records if "nvmlDeviceGetPcieThroughput" in r.getMessage()]
    assert len(missing) == 1
    assert all(r.levelno == logging.DEBUG and r.exc_info is None for r in caplog.records)


def test_older_driver_falls_back_to_older_entry_points(
    load_nvml: Callable[..., FakeNvml], fake_nvml_env: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    fake = load_nvml(
        omit=[
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetGraphicsRunningProcesses_v3",
            "nvmlDeviceGetMemoryInfo_v2",
            "nvmlSystemGetCudaDriverVersion_v2",
            "nvmlDeviceGetEnforcedPowerLimit",
        ]
    )
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", f"0:{os.getpid()}:4096")
    with NvmlSampler(clock=clock) as sampler:
        reading = sampler.sample()
        sampler.sample()

    assert reading.status.cuda_driver_version == "12.4"
    first = gpu(reading, 0)
    assert [p.pid for p in first.processes] == [os.getpid()]
    assert first.memory_total_bytes == H100_MEMORY
    assert first.memory_used_bytes is not None
    assert first.power_limit_w == 700.0  # from nvmlDeviceGetPowerManagementLimit
    assert fake.calls("nvmlDeviceGetComputeRunningProcesses_v2", 0) == 4  # two per sample
    assert fake.calls("nvmlDeviceGetMemoryInfo", 0) == 2


def test_lost_gpu_is_marked_lost_while_the_others_keep_updating(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    sampler: NvmlSampler,
    clock: FakeClock,
) -> None:
    # A first sample asks a GPU about 27 questions; GPU 1 dies during the second.
    fake_nvml_env.setenv("FAKE_NVML_LOST", "1:30")
    first = sampler.sample()
    assert gpu(first, 1).state is GpuState.OK
    known = gpu(first, 1)

    clock.now += 1.0
    lost = gpu(sampler.sample(), 1)
    assert lost.state is GpuState.LOST
    assert (lost.index, lost.name, lost.uuid, lost.bus_id) == (
        known.index,
        known.name,
        known.uuid,
        known.bus_id,
    )
    assert all(getattr(lost, name) is None for name in LIVE_FIELDS)
    assert lost.processes is None  # unknown, not none

    queries = fake_nvml.device_queries(1)
    survivors = []
    for _ in range(4):
        clock.now += 1.0
        reading = sampler.sample()
        assert gpu(reading, 1).state is GpuState.LOST
        survivors.append(gpu(reading, 0))
    assert fake_nvml.device_queries(1) == queries  # not asked again within the retry time
    assert all(g.state is GpuState.OK for g in survivors)
    assert len({g.utilization_percent for g in survivors}) > 1

    clock.now += 31.0
    assert gpu(sampler.sample(), 1).state is GpuState.LOST
    assert fake_nvml.device_queries(1) == queries + 1  # one probe, then given up again


def test_lost_gpu_that_answers_again_is_read_again(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    sampler: NvmlSampler,
    clock: FakeClock,
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_LOST", "0:0")
    assert gpu(sampler.sample(), 0).state is GpuState.LOST
    assert gpu(sampler.sample(), 1).state is GpuState.OK

    fake_nvml_env.delenv("FAKE_NVML_LOST")
    assert fake_nvml.lib.nvmlInit_v2() == 0  # the stand-in rereads its knobs: GPU 0 is back
    clock.now += 31.0
    back = gpu(sampler.sample(), 0)
    assert back.state is GpuState.OK
    assert back.name == H100  # static facts read now, as the GPU was lost from the start
    assert back.utilization_percent is not None


def test_unknown_error_costs_only_that_field_of_that_sample(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    sampler: NvmlSampler,
    capfd: pytest.CaptureFixture[str],
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_FAIL", "0:temperature,1:power=TIMEOUT")
    readings = [sampler.sample() for _ in range(3)]

    for reading in readings:
        assert gpu(reading, 0).temperature_c is None
        assert gpu(reading, 0).power_w is not None
        assert gpu(reading, 1).temperature_c is not None
        assert gpu(reading, 1).power_w is None
    assert fake_nvml.calls("nvmlDeviceGetTemperature", 0) == 3  # asked again every sample
    assert fake_nvml.calls("nvmlDeviceGetPowerUsage", 1) == 3
    assert capfd.readouterr() == ("", "")


def test_hanging_driver_blocks_only_the_sampling_thread(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, tmp_path: Path
) -> None:
    hang = tmp_path / "hang"
    fake_nvml_env.setenv("FAKE_NVML_HANG_FILE", str(hang))
    assert len(sampler.sample().gpus) == 2  # no file yet: answers at once

    hang.touch()
    results: list[NvmlReading] = []
    worker = threading.Thread(target=lambda: results.append(sampler.sample()), daemon=True)
    worker.start()
    worker.join(timeout=0.3)
    assert worker.is_alive(), "the sample should block while the hang file exists"
    assert results == []

    hang.unlink()
    worker.join(timeout=10)
    assert not worker.is_alive()
    (reading,) = results
    assert [g.state for g in reading.gpus] == [GpuState.OK, GpuState.OK]


def test_close_does_not_wait_forever_for_a_hung_sample(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, clock: FakeClock, tmp_path: Path
) -> None:
    hang = tmp_path / "hang"
    fake_nvml_env.setenv("FAKE_NVML_HANG_FILE", str(hang))
    sampler = NvmlSampler(clock=clock)
    sampler.sample()
    hang.touch()
    worker = threading.Thread(target=sampler.sample, daemon=True)
    worker.start()
    closer = threading.Thread(target=sampler.close, daemon=True)
    closer.start()
    closer.join(timeout=10)
    try:
        assert not closer.is_alive(), "close() should give up on a sample stuck in the driver"
    finally:
        hang.unlink()
        worker.join(timeout=10)
    after = sampler.sample()
    assert not after.status.available
    assert_one_sentence(after.status.error)


@pytest.mark.parametrize(
    ("error", "words", "code"),
    [
        ("DRIVER_NOT_LOADED", "modprobe nvidia", 9),
        ("NO_PERMISSION", "/dev/nvidia", 4),
        ("LIB_RM_VERSION_MISMATCH", "reboot", 18),
        ("18", "reboot", 18),
        ("UNKNOWN", "nvidia-smi", 999),
    ],
)
def test_init_failure_is_one_sentence_with_the_fix(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, error: str, words: str, code: int
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_INIT_ERROR", error)
    reading = sampler.sample()

    assert not reading.status.available
    assert reading.gpus == ()
    assert words in (reading.status.error or "")
    assert_one_sentence(reading.status.error)
    assert reading.status.error_code == code  # NVML's own code, for the doctor's --json


def test_init_is_retried_at_most_every_30_seconds(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_INIT_ERROR", "DRIVER_NOT_LOADED")
    assert not sampler.sample().status.available

    fake_nvml_env.delenv("FAKE_NVML_INIT_ERROR")  # the driver gets loaded
    clock.now += 10.0
    assert not sampler.sample().status.available  # too soon to ask again
    clock.now += 21.0
    reading = sampler.sample()
    assert reading.status.available
    assert len(reading.gpus) == 2


def test_gpu_count_failure_is_a_sentence(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_FAIL", "count=NO_PERMISSION")
    reading = sampler.sample()
    assert not reading.status.available
    assert "/dev/nvidia" in (reading.status.error or "")
    assert reading.status.error_code == 4
    assert fake_nvml.calls("nvmlShutdown") == 1  # what was started is shut down


def test_no_gpus_is_available_and_empty(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "0")
    reading = sampler.sample()
    assert reading.status.available
    assert reading.gpus == ()


def test_library_at_a_missing_path_is_a_sentence(
    fake_nvml_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / LIBRARY_NAME
    with NvmlSampler(library_path=missing) as sampler:
        reading = sampler.sample()
    assert not reading.status.available
    assert reading.gpus == ()
    assert str(missing) in (reading.status.error or "")
    assert_one_sentence(reading.status.error)
    assert reading.status.error_code is None  # no NVML call failed: it never loaded


def test_library_path_loads_that_library(
    load_nvml: Callable[..., FakeNvml], fake_nvml_dir: Path, clock: FakeClock
) -> None:
    from tests.fakenvml import unload_fake_nvml

    unload_fake_nvml()
    with NvmlSampler(fake_nvml_dir / LIBRARY_NAME, clock=clock) as sampler:
        reading = sampler.sample()
    assert reading.status.available
    assert [g.name for g in reading.gpus] == [H100, H100]


def _sample_in_child(env: dict[str, str]) -> tuple[dict[str, object], str]:
    code = (
        "import json; from gputui.telemetry.nvml import NvmlSampler; "
        "r = NvmlSampler().sample(); "
        "print(json.dumps({'error': r.status.error, 'gpus': [g.name for g in r.gpus], "
        "'cuda': r.status.cuda_driver_version}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    return json.loads(done.stdout), done.stderr


def test_child_process_finds_the_stand_in_on_ld_library_path(
    fake_nvml_dir: Path, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_GPU_COUNT": "8"}
    result, stderr = _sample_in_child(env)
    assert result == {"error": None, "gpus": [H100] * 8, "cuda": "12.4"}
    assert stderr == ""


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None,
    reason="a real NVIDIA driver library is installed here",
)
def test_no_driver_library_is_a_sentence(tmp_path: Path) -> None:
    env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path)}
    result, stderr = _sample_in_child(env)
    assert result == {"error": LIBRARY_MISSING, "gpus": [], "cuda": None}
    assert stderr == ""


def test_processes_are_joined_with_psutil(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    me = psutil.Process()
    gone = next(pid for pid in range(4_000_000, 4_100_000) if not psutil.pid_exists(pid))
    fake_nvml_env.setenv(
        "FAKE_NVML_PROCESSES", f"0:{me.pid}:1073741824,0:{gone}:2048,1:{me.pid}:na"
    )
    fake_nvml_env.setenv("FAKE_NVML_GRAPHICS_PROCESSES", f"1:{me.pid}:5,1:1:4096")
    first, second = sampler.sample(), sampler.sample()

    for reading in (first, second):
        mine, ghost = gpu(reading, 0).processes
        assert (mine.pid, mine.kind, mine.gpu_memory_bytes) == (me.pid, "compute", 2**30)
        assert mine.user == me.username()
        assert mine.command == " ".join(me.cmdline())
        assert mine.create_time == me.create_time()  # what a signal checks the pid against
        assert (ghost.pid, ghost.user, ghost.command, ghost.gpu_memory_bytes) == (
            gone,
            None,
            None,
            2048,
        )
        assert ghost.create_time is None
        # GPU 1: this process is in both lists (shown once, as compute+graphics, with the
        # compute list's memory: none); PID 1 is a graphics process whose owner psutil can tell.
        both, init = gpu(reading, 1).processes
        assert (both.pid, both.kind, both.gpu_memory_bytes) == (me.pid, "compute+graphics", None)
        assert (init.pid, init.kind, init.gpu_memory_bytes) == (1, "graphics", 4096)
        assert init.user == _username_or_none(1)


def test_processes_that_come_and_go_are_listed_as_the_stand_in_s_file_says(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, tmp_path: Path
) -> None:
    """FAKE_NVML_PROCESSES_FILE, read at each listing (the recorder's tests start and end
    processes with it); graphics processes stay as FAKE_NVML_GRAPHICS_PROCESSES says."""
    listed = tmp_path / "processes"
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES_FILE", str(listed))
    fake_nvml_env.setenv("FAKE_NVML_GRAPHICS_PROCESSES", "1:1:4096")
    pids = []
    for text in ("", "0:4242:1024\n", "0:4242:1024,0:4343:2048,1:77:5", "1:77:5"):
        listed.write_text(text)
        reading = sampler.sample()
        pids.append([[p.pid for p in gpu(reading, i).processes or ()] for i in (0, 1)])
    listed.unlink()
    pids.append([[p.pid for p in gpu(sampler.sample(), i).processes or ()] for i in (0, 1)])
    assert pids == [
        [[], [1]],
        [[4242], [1]],
        [[4242, 4343], [77, 1]],
        [[], [77, 1]],
        [[], [1]],  # no file: none
    ]


def test_processes_have_their_host_cpu_memory_and_elapsed_time(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    """Read from the psutil object cached per (pid, start time): CPU % is unknown on the
    first reading (nothing to measure from) and known on the next, on every GPU that lists
    the process (read once a sample: a second call would measure a few microseconds)."""
    me = psutil.Process()
    gone = next(pid for pid in range(4_000_000, 4_100_000) if not psutil.pid_exists(pid))
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", f"0:{me.pid}:1024,0:{gone}:2048,1:{me.pid}:1024")
    readings = []
    for _ in range(3):
        before = time.time()
        readings.append(sampler.sample())
        after = time.time()
        (mine, ghost), (also_mine,) = (gpu(readings[-1], i).processes for i in (0, 1))
        assert also_mine == mine
        assert mine.elapsed_s is not None
        assert before - me.create_time() <= mine.elapsed_s <= after - me.create_time()
        assert mine.rss_bytes is not None and 0 < mine.rss_bytes < me.memory_info().vms
        assert (ghost.cpu_percent, ghost.rss_bytes, ghost.elapsed_s) == (None, None, None)
    cpu = [gpu(reading, 0).processes[0].cpu_percent for reading in readings]  # type: ignore[index]
    assert cpu[0] is None and cpu[1] is not None and cpu[2] is not None
    assert cpu[1] >= 0 and cpu[2] >= 0


@pytest.mark.parametrize("linux", [True, False], ids=["stat", "psutil elsewhere"])
def test_a_spinning_process_s_cpu_percent_is_the_share_of_a_core_it_had(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, linux: bool
) -> None:
    """CPU % comes from the process's ``stat`` read once a sample on Linux (psutil's figures
    elsewhere): between two samples it is the CPU time the spinner had over the time between
    them, which psutil's own figures, read around each sample, bound from both sides."""
    fake_nvml_env.setattr("gputui.telemetry.nvml.processes._LINUX", linux)
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        spinner = psutil.Process(child.pid)
        fake_nvml_env.setenv("FAKE_NVML_PROCESSES", f"0:{child.pid}:1024")

        def cpu_s() -> float:
            times = spinner.cpu_times()
            return times.user + times.system

        wall0, cpu0 = time.monotonic(), cpu_s()
        sampler.sample()
        wall1, cpu1 = time.monotonic(), cpu_s()
        time.sleep(0.5)
        wall2, cpu2 = time.monotonic(), cpu_s()
        reading = sampler.sample()
        wall3, cpu3 = time.monotonic(), cpu_s()
    finally:
        child.kill()
        child.wait()
    (process,) = gpu(reading, 0).processes or ()
    assert process.cpu_percent is not None
    tick = 1 / os.sysconf("SC_CLK_TCK")  # each figure is whole ticks: one either side
    least = max(cpu2 - cpu1 - 2 * tick, 0) / (wall3 - wall0) * 100
    most = (cpu3 - cpu0 + 2 * tick) / (wall2 - wall1) * 100
    assert least <= process.cpu_percent <= most
    assert process.rss_bytes is not None and process.rss_bytes > 1 << 20


def test_a_pid_taken_over_by_another_process_is_looked_up_again(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, tmp_path: Path
) -> None:
    """The identity is kept while the pid's ``stat`` gives the same start time; a process
    that takes the pid over (a new start time) gets its own user and command, and its CPU %
    counts from its own first reading, never from the one before's CPU time."""
    procfs = FakeProcfs(tmp_path)
    fake_nvml_env.setattr(psutil, "PROCFS_PATH", str(procfs.root))
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", "0:4242:1024")
    ticks = os.sysconf("SC_CLK_TCK")
    folder = procfs.process(4242, ("python3", "train.py"), start_ticks=5000, cpu_ticks=(100, 0))
    wall0 = time.monotonic()
    first = gpu(sampler.sample(), 0).processes
    wall1 = time.monotonic()
    shutil.rmtree(folder)  # the same process, half a second of CPU and 16 MiB later
    procfs.process(
        4242, ("python3", "train.py"), start_ticks=5000, cpu_ticks=(100, 50), rss_pages=4096
    )
    wall2 = time.monotonic()
    second = gpu(sampler.sample(), 0).processes
    wall3 = time.monotonic()
    shutil.rmtree(folder)  # another process, under the same pid
    procfs.process(4242, ("python3", "eval.py"), start_ticks=9000, cpu_ticks=(10, 0))
    third = gpu(sampler.sample(), 0).processes
    assert first and second and third
    assert [p.command for p in (*first, *second, *third)] == [
        "python3 train.py",
        "python3 train.py",
        "python3 eval.py",
    ]
    assert first[0].cpu_percent is None  # nothing to count from yet
    cpu = second[0].cpu_percent
    assert cpu is not None
    assert 50 / ticks / (wall3 - wall0) * 100 <= cpu <= 50 / ticks / (wall2 - wall1) * 100
    assert second[0].rss_bytes == 4096 * os.sysconf("SC_PAGE_SIZE")
    assert third[0].cpu_percent is None  # a new process: not counted from 150 ticks
    assert third[0].create_time == started(9000)


def test_each_process_has_its_sm_utilization_from_one_ask_per_gpu_and_sample(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", "0:100:1024,0:200:1024,0:300:1024,2:400:1024")
    fake_nvml_env.setenv("FAKE_NVML_PROCESS_UTILIZATION", "0:100:87,0:200:3")
    readings = [sampler.sample() for _ in range(3)]

    for reading in readings:
        busy, light, idle = gpu(reading, 0).processes  # type: ignore[misc]
        assert (busy.pid, busy.sm_utilization_percent) == (100, 87.0)
        assert (light.pid, light.sm_utilization_percent) == (200, 3.0)
        assert (idle.pid, idle.sm_utilization_percent) == (300, 0.0)  # no sample: no kernel
        (alone,) = gpu(reading, 2).processes  # type: ignore[misc]
        assert alone.sm_utilization_percent == 0.0  # NotFound: no sample on that GPU at all
    # One ask per sample on a GPU with processes (the bindings' size query, then the fill);
    # none on GPU 1, which has none.
    assert fake_nvml.calls("nvmlDeviceGetProcessUtilization", 0) == 2 * 3
    assert fake_nvml.calls("nvmlDeviceGetProcessUtilization", 2) == 3
    assert fake_nvml.calls("nvmlDeviceGetProcessUtilization", 1) == 0


def test_process_samples_are_asked_from_just_before_the_newest_answered(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", "0:100:1024")
    fake_nvml_env.setenv("FAKE_NVML_PROCESS_UTILIZATION", "0:100:50")
    since = []
    for _ in range(3):
        sampler.sample()
        since.append(fake_nvml.last_seen_timestamp(0))

    assert since[0] == 0  # at first, every sample the driver holds
    assert 0 < since[1] < since[2]  # then only the recent ones, kept per GPU


def test_sm_utilization_nvml_does_not_give_is_none(
    load_nvml: Callable[..., FakeNvml], fake_nvml_env: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", "0:100:1024,1:200:1024")
    fake_nvml_env.setenv("FAKE_NVML_PROCESS_UTILIZATION", "0:100:50,1:200:60")
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "1:process_utilization")
    fake = load_nvml()
    with NvmlSampler(clock=clock) as sampler:
        readings = [sampler.sample() for _ in range(2)]
    for reading in readings:
        assert gpu(reading, 0).processes[0].sm_utilization_percent == 50.0  # type: ignore[index]
        assert gpu(reading, 1).processes[0].sm_utilization_percent is None  # type: ignore[index]
    assert fake.calls("nvmlDeviceGetProcessUtilization", 1) == 1  # NotSupported: asked once

    fake = load_nvml(omit=["nvmlDeviceGetProcessUtilization"])  # a driver without it
    with NvmlSampler(clock=clock) as sampler:
        reading = sampler.sample()
    assert [p.sm_utilization_percent for g in reading.gpus for p in g.processes or ()] == [
        None,
        None,
    ]


def _username_or_none(pid: int) -> str | None:
    try:
        return psutil.Process(pid).username()
    except psutil.Error:
        return None


@pytest.mark.parametrize(
    ("version", "text"),
    [(12040, "12.4"), (11080, "11.8"), (12020, "12.2"), (13000, "13.0"), (10010, "10.1")],
)
def test_cuda_version_is_major_dot_minor(version: int, text: str) -> None:
    assert format_cuda_version(version) == text


def test_cuda_version_from_the_driver(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_CUDA_VERSION", "11080")
    fake_nvml_env.setenv("FAKE_NVML_DRIVER_VERSION", "520.61.05")
    status = sampler.sample().status
    assert (status.driver_version, status.cuda_driver_version) == ("520.61.05", "11.8")


def test_unanswered_system_facts_are_none(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "cuda_version,driver_version")
    reading = sampler.sample()
    assert reading.status.available
    assert (reading.status.driver_version, reading.status.cuda_driver_version) == (None, None)
    assert len(reading.gpus) == 2


def test_closed_sampler_shuts_nvml_down_once(fake_nvml: FakeNvml, clock: FakeClock) -> None:
    sampler = NvmlSampler(clock=clock)
    assert sampler.sample().status.available
    sampler.close()
    sampler.close()
    assert fake_nvml.calls("nvmlShutdown") == 1
    reading = sampler.sample()
    assert not reading.status.available
    assert_one_sentence(reading.status.error)


@pytest.mark.parametrize(
    ("taken_at", "now", "interval", "stale"),
    [
        (10.0, 11.9, 1.0, False),  # within two periods
        (10.0, 12.1, 1.0, True),
        (10.0, 11.2, 0.25, False),  # short intervals get a second of slack
        (10.0, 11.3, 0.25, True),
        (10.0, 29.0, 10.0, False),
        (10.0, 30.5, 10.0, True),
    ],
)
def test_is_stale(taken_at: float, now: float, interval: float, stale: bool) -> None:
    assert is_stale(taken_at, now, interval) is stale


def test_unknown_init_error_keeps_the_bindings_words() -> None:
    sentence = describe_nvml_error(999, "Unknown Error")
    assert "Unknown Error" in sentence
    assert_one_sentence(sentence)


MEDIA_CALLS = ("nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetDecoderUtilization")


def test_video_engines_are_read_every_media_ttl_and_not_supported_reads_none(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    """GPU 0 encodes and decodes; GPU 1 has no video engines (NotSupported): None, asked once."""
    fake_nvml_env.setenv("FAKE_NVML_ENCODER_UTILIZATION", "0:12")
    fake_nvml_env.setenv("FAKE_NVML_DECODER_UTILIZATION", "0:40")
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "1:encoder,1:decoder")
    readings = [sampler.sample()]
    clock.now += MEDIA_TTL_S / 2
    readings.append(sampler.sample())
    assert [fake_nvml.calls(name, 0) for name in MEDIA_CALLS] == [1, 1]  # not every sample
    clock.now += MEDIA_TTL_S / 2
    readings.append(sampler.sample())
    assert [fake_nvml.calls(name, 0) for name in MEDIA_CALLS] == [2, 2]
    assert [fake_nvml.calls(name, 1) for name in MEDIA_CALLS] == [1, 1]
    for reading in readings:
        busy, without = gpu(reading, 0), gpu(reading, 1)
        assert (busy.encoder_utilization_percent, busy.decoder_utilization_percent) == (12, 40)
        assert without.state is GpuState.OK and without.utilization_percent is not None
        assert (without.encoder_utilization_percent, without.decoder_utilization_percent) == (
            None,
            None,
        )


def test_a_driver_without_the_video_engine_functions_reads_none(
    load_nvml: Callable[..., FakeNvml], clock: FakeClock
) -> None:
    load_nvml(omit=list(MEDIA_CALLS))
    with NvmlSampler(clock=clock) as sampler:
        reading = sampler.sample()
    for g in reading.gpus:
        assert g.state is GpuState.OK and g.memory_clock_mhz == 2619.0
        assert (g.encoder_utilization_percent, g.decoder_utilization_percent) == (None, None)


def test_nvlink_says_which_links_are_up_rarely_and_a_gpu_without_nvlink_reads_none(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    """GPU 0 has 18 links, two of them down; GPU 1 has 4 (NotSupported after them); GPU 2 is a
    PCIe card (NotSupported for link 0: asked once, never again)."""
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_NVLINKS", "0:18,1:4")
    fake_nvml_env.setenv("FAKE_NVML_NVLINKS_DOWN", "0:0x20001")
    first = sampler.sample()
    clock.now += NVLINK_STATE_TTL_S / 2
    sampler.sample()
    calls = [fake_nvml.calls("nvmlDeviceGetNvLinkState", index) for index in range(3)]
    assert calls == [19, 5, 1]  # to the first link past the last (18: InvalidArgument)
    clock.now += NVLINK_STATE_TTL_S / 2
    last = sampler.sample()
    calls = [fake_nvml.calls("nvmlDeviceGetNvLinkState", index) for index in range(3)]
    assert calls == [38, 10, 1]
    for reading in (first, last):
        assert [gpu(reading, i).nvlink_links_active for i in range(3)] == [16, 4, None]
        assert [gpu(reading, i).nvlink_links_down for i in range(3)] == [(0, 17), (), None]
        assert gpu(reading, 2).state is GpuState.OK


def test_nvlink_throughput_is_a_rate_between_two_reads_of_the_counters_a_second_apart(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    """GPU 0 has 18 links, two down, each sending 100 KiB and receiving 300 KiB more at each
    counter read; GPU 1's counters are NotSupported (asked once); GPU 2 is a PCIe card (never
    asked). NVML counts KiB; gputui reads bytes."""
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_NVLINKS", "0:18,1:4")
    fake_nvml_env.setenv("FAKE_NVML_NVLINKS_DOWN", "0:0x20001")
    fake_nvml_env.setenv("FAKE_NVML_NVLINK_TX_KIB", "0:100")
    fake_nvml_env.setenv("FAKE_NVML_NVLINK_RX_KIB", "0:300")
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "1:nvlink_throughput")
    first = sampler.sample()
    clock.now += NVLINK_TTL_S / 2
    sampler.sample()
    calls = [fake_nvml.calls("nvmlDeviceGetFieldValues", index) for index in range(3)]
    assert calls == [1, 1, 0]  # once a second at most; never on a GPU without NVLink
    clock.now += NVLINK_TTL_S / 2
    last = sampler.sample()
    calls = [fake_nvml.calls("nvmlDeviceGetFieldValues", index) for index in range(3)]
    assert calls == [2, 1, 0]

    assert gpu(first, 0).nvlink_throughput == NvlinkThroughput(  # one read: no rate yet
        rx_bytes=300 * 16 * 1024, tx_bytes=100 * 16 * 1024, rx_bytes_per_s=None, tx_bytes_per_s=None
    )
    assert gpu(last, 0).nvlink_throughput == NvlinkThroughput(
        rx_bytes=600 * 16 * 1024,
        tx_bytes=200 * 16 * 1024,
        rx_bytes_per_s=300 * 16 * 1024 / NVLINK_TTL_S,
        tx_bytes_per_s=100 * 16 * 1024 / NVLINK_TTL_S,
    )
    unsupported = NvlinkThroughput(None, None, None, None)
    for reading in (first, last):
        assert [gpu(reading, i).state for i in (1, 2)] == [GpuState.OK, GpuState.OK]
        assert gpu(reading, 1).nvlink_throughput == unsupported  # NVLink, its counters n/a
        assert gpu(reading, 2).nvlink_throughput is None  # no NVLink
    assert gpu(last, 1).nvlink_links_active == 4


def _a_second_apart(sampler: NvmlSampler, clock: FakeClock, count: int) -> list[NvmlReading]:
    readings = []
    for _ in range(count):
        readings.append(sampler.sample())
        clock.now += NVLINK_TTL_S
    return readings


def test_nvlink_throughput_is_none_on_a_driver_without_field_values_or_when_the_call_fails(
    load_nvml: Callable[..., FakeNvml], fake_nvml_env: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_NVLINKS", "0:18,1:18")
    load_nvml(omit=["nvmlDeviceGetFieldValues"])
    with NvmlSampler(clock=clock) as sampler:
        old_driver = _a_second_apart(sampler, clock, 2)
    fake_nvml_env.setenv("FAKE_NVML_FAIL", "1:nvlink_throughput")
    fake = load_nvml()
    with NvmlSampler(clock=clock) as sampler:
        failing = _a_second_apart(sampler, clock, 3)
    for reading in old_driver + failing:
        assert [g.nvlink_links_active for g in reading.gpus] == [18, 18]
        assert [g.nvlink_links_down for g in reading.gpus] == [(), ()]
    unknown = NvlinkThroughput(None, None, None, None)
    assert [g.nvlink_throughput for g in old_driver[-1].gpus] == [unknown, unknown]
    working = gpu(failing[-1], 0).nvlink_throughput
    assert working is not None and working.tx_bytes_per_s is not None
    assert gpu(failing[-1], 1).nvlink_throughput == unknown
    assert fake.calls("nvmlDeviceGetFieldValues", 1) == 3  # an error is not NotSupported


def _pcie_calls(fake: FakeNvml, gpus: int) -> list[int]:
    return [fake.calls("nvmlDeviceGetPcieThroughput", index) for index in range(gpus)]


def test_pcie_throughput_is_asked_again_once_it_is_older_than_its_ttl(
    fake_nvml: FakeNvml, sampler: NvmlSampler, clock: FakeClock
) -> None:
    first = sampler.sample()
    clock.now += PCIE_TTL_S / 2
    second = sampler.sample()
    assert _pcie_calls(fake_nvml, 2) == [2, 2]  # both GPUs, tx + rx, once
    assert gpu(second, 0).pcie_rx_bytes_per_s == gpu(first, 0).pcie_rx_bytes_per_s
    clock.now += PCIE_TTL_S / 2
    sampler.sample()
    assert _pcie_calls(fake_nvml, 2) == [4, 4]
    # The link's generation and width ride along with the throughput.
    for name in ("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth"):
        assert [fake_nvml.calls(name, index) for index in (0, 1)] == [2, 2]


def test_gpus_take_turns_when_the_driver_takes_20_ms_a_pcie_call(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    """As a real driver does: 8 GPUs would spend 320 ms a sample on PCIe alone. Each sample
    asks the stalest GPU (2 calls, 40 ms, past PCIE_BUDGET_S) and shows the others' last
    figures; every GPU has its figures after 8 samples, and the oldest is asked next."""
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "8")
    fake_nvml_env.setenv("FAKE_NVML_PCIE_DELAY_MS", "20")
    assert PCIE_BUDGET_S < 2 * 0.020
    shown = []
    for turn in range(8):
        reading = sampler.sample()
        assert _pcie_calls(fake_nvml, 8) == [2] * (turn + 1) + [0] * (7 - turn)
        shown.append([g.pcie_rx_bytes_per_s is not None for g in reading.gpus])
        assert all(g.temperature_c is not None for g in reading.gpus)  # the rest every sample
        clock.now += 0.25
    assert shown[0] == [True] + [False] * 7 and shown[-1] == [True] * 8
    sampler.sample()  # t = 2 s: GPU 0's figures are the oldest
    assert _pcie_calls(fake_nvml, 8) == [4] + [2] * 7


def test_a_quick_driver_gets_every_gpu_s_pcie_in_one_sample(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "8")
    reading = sampler.sample()
    assert _pcie_calls(fake_nvml, 8) == [2] * 8
    assert all(g.pcie_tx_bytes_per_s is not None for g in reading.gpus)


def test_a_gpu_lost_while_its_pcie_is_asked_reads_as_lost(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_LOST", "1:0")  # lost from its first query: the PCIe one
    reading = sampler.sample()
    assert gpu(reading, 1).state is GpuState.LOST and gpu(reading, 1).pcie_rx_bytes_per_s is None
    assert gpu(reading, 0).state is GpuState.OK and gpu(reading, 0).pcie_rx_bytes_per_s is not None


def test_a_gpu_whose_handle_is_refused_is_shown_unreachable_with_the_fix(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    sampler: NvmlSampler,
    clock: FakeClock,
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "4")
    fake_nvml_env.setenv("FAKE_NVML_FAIL", "1:handle=NO_PERMISSION,2:handle=UNKNOWN")
    reading = sampler.sample()
    assert [g.index for g in reading.gpus] == [0, 1, 2, 3]  # none of them dropped
    assert [g.state for g in reading.gpus] == [
        GpuState.OK,
        GpuState.UNREACHABLE,
        GpuState.UNREACHABLE,
        GpuState.OK,
    ]
    refused, unknown = gpu(reading, 1), gpu(reading, 2)
    assert refused.error is not None and "no permission" in refused.error
    assert unknown.error is not None and "Unknown Error" in unknown.error
    assert "nvidia-smi -r -i 2" in unknown.error  # the fix, for this GPU
    assert refused.error_brief == "no permission on /dev/nvidia*: ask an admin"
    assert unknown.error_brief is not None and "`nvidia-smi -r -i 2`" in unknown.error_brief
    assert_one_sentence(refused.error.split("; ")[0] + ".")
    assert all(getattr(refused, name) is None for name in LIVE_FIELDS)
    assert gpu(reading, 0).error is None

    asked = fake_nvml.calls("nvmlDeviceGetHandleByIndex_v2", 1)
    clock.now += 1.0
    assert gpu(sampler.sample(), 1).state is GpuState.UNREACHABLE
    assert fake_nvml.calls("nvmlDeviceGetHandleByIndex_v2", 1) == asked  # not within 30 s

    fake_nvml_env.delenv("FAKE_NVML_FAIL")  # the administrator fixed the permissions
    assert fake_nvml.lib.nvmlInit_v2() == 0  # the stand-in rereads its knobs
    clock.now += 31.0
    back = gpu(sampler.sample(), 1)
    assert back.state is GpuState.OK and back.error is None
    assert back.name == H100 and back.utilization_percent is not None


@pytest.mark.parametrize("code", [NO_PERMISSION, RESET_REQUIRED, UNKNOWN, GPU_IS_LOST, 42])
def test_each_handle_error_has_its_few_words_within_their_limit(code: int) -> None:
    sentence, brief = describe_handle_error(63, code, "Some Error")
    assert len(brief) <= ERROR_BRIEF_MAX < len(sentence)
    assert "INDEX" not in brief and ("63" in brief) == ("63" in sentence)


def test_a_gpu_lost_from_the_start_is_asked_again(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    sampler: NvmlSampler,
    clock: FakeClock,
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_FAIL", "0:handle=GPU_IS_LOST")
    lost = gpu(sampler.sample(), 0)
    assert lost.state is GpuState.LOST
    assert lost.error is not None and "nvidia-smi -r -i 0" in lost.error
    assert lost.error_brief is not None and "`nvidia-smi -r -i 0`" in lost.error_brief
    fake_nvml_env.delenv("FAKE_NVML_FAIL")
    assert fake_nvml.lib.nvmlInit_v2() == 0
    clock.now += 31.0
    assert gpu(sampler.sample(), 0).state is GpuState.OK


def test_processes_nvml_cannot_list_are_unknown_not_none(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "1:processes")
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", f"0:{os.getpid()}:1610612736")
    reading = sampler.sample()
    assert [p.pid for p in gpu(reading, 0).processes or ()] == [os.getpid()]
    assert gpu(reading, 1).processes is None  # NotSupported: unknown, never "none"
    assert gpu(reading, 1).memory_used_bytes is not None  # the rest of it still read


def test_health_is_read_quietly_when_fine_and_in_words_when_not(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    sampler: NvmlSampler,
    clock: FakeClock,
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_CLOCK_EVENTS", "1:0x24,2:0x48")  # power cap+thermal; HW
    fake_nvml_env.setenv("FAKE_NVML_ECC_UNCORRECTED", "2:3")
    fake_nvml_env.setenv("FAKE_NVML_REMAPPED_PENDING", "2:1")
    fake_nvml_env.setenv("FAKE_NVML_MIG_MODE", "1:1")
    fine, throttled, failing = sampler.sample().gpus
    assert fine.throttle_reasons == ()
    assert (fine.ecc_uncorrected_errors, fine.remapped_rows_pending, fine.mig_mode) == (
        0,
        False,
        False,
    )
    assert throttled.throttle_reasons == ("power cap", "thermal")
    assert throttled.mig_mode is True
    assert failing.throttle_reasons == ("HW slowdown", "HW thermal")
    assert (failing.ecc_uncorrected_errors, failing.remapped_rows_pending) == (3, True)

    asked = fake_nvml.calls("nvmlDeviceGetTotalEccErrors", 2)
    clock.now += 1.0
    sampler.sample()
    assert fake_nvml.calls("nvmlDeviceGetTotalEccErrors", 2) == asked  # on a 10 s TTL
    assert fake_nvml.calls("nvmlDeviceGetCurrentClocksEventReasons", 2) == 2  # every sample


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


def test_health_a_gpu_does_not_have_is_none(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv(
        "FAKE_NVML_UNSUPPORTED",
        "nvmlDeviceGetTotalEccErrors,nvmlDeviceGetRemappedRows,nvmlDeviceGetMigMode,nvmlDeviceGetCurrentClocksEventReasons,nvmlDeviceGetCurrentClocksThrottleReasons",
    )
    reading = gpu(sampler.sample(), 0)
    assert reading.state is GpuState.OK
    assert (
        reading.throttle_reasons,
        reading.ecc_uncorrected_errors,
        reading.remapped_rows_pending,
        reading.mig_mode,
    ) == (None, None, None, None)


def test_in_a_pid_namespace_nvml_pids_are_the_host_s_and_not_joined(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """In a real pid namespace (``unshare``) the snapshot's own process is pid 1 there; NVML
    reporting pid 1 means the host's init, so no local user or command is borrowed for it."""
    unshare = shutil.which("unshare")
    probe = (
        subprocess.run(
            [unshare or "unshare", "--pid", "--fork", "--mount-proc", "true"],
            capture_output=True,
            text=True,
            check=False,
        )
        if unshare
        else None
    )
    if probe is None or probe.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"unshare --pid must work under CI: {probe and probe.stderr}")
        pytest.skip("unshare --pid is not allowed here")
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "FAKE_NVML_GPU_COUNT": "1",
        "FAKE_NVML_PROCESSES": "0:1:1073741824",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    command = [sys.executable, "-m", "gputui", "snapshot", "--json"]
    inside = subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", *command],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert inside.returncode == 0, inside.stderr
    data = json.loads(inside.stdout)
    assert data["nvml"]["host_pids"] is True
    (process,) = data["gpus"][0]["processes"]
    assert (process["pid"], process["user"], process["command"]) == (1, None, None)
    assert (process["rss_bytes"], process["elapsed_s"]) == (None, None)  # n/a, not pid 1's here
    outside = json.loads(
        subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
    )
    assert outside["nvml"]["host_pids"] is False
    (process,) = outside["gpus"][0]["processes"]
    assert process["command"] is not None  # the host's own pid 1, joined as before


NAMESPACE_WITH_GPU_NODES = """
set -e
# A /dev of this mount namespace's own, with the GPUs' device nodes as plain files (the
# stand-in NVML opens no node; what the test needs is who maps them).
mount -t tmpfs tmpfs /dev
mknod -m 666 /dev/null c 1 3
mknod -m 666 /dev/zero c 1 5
mknod -m 666 /dev/urandom c 1 9
truncate -s 4096 /dev/nvidia0 /dev/nvidia1
# GPU 0: one local process maps its node, as a CUDA context does; this shell only holds
# it open, as a monitor does. GPU 1: two local processes map its node.
exec 3</dev/nvidia0
n=0
for node in 0 1 1; do
  n=$((n + 1))
  "$PYTHON" -c "$MAPPER" /dev/nvidia$node "$READY.$n" >/dev/null &
done
while [ "$(ls "$READY".* 2>/dev/null | wc -l)" -lt 3 ]; do sleep 0.05; done
"$PYTHON" -m gputui snapshot --json
# the namespace's every process ends with this shell, its pid 1
"""
MAPPER = (
    "import mmap, sys, time; node = open(sys.argv[1], 'r+b'); "
    "view = mmap.mmap(node.fileno(), 4096); open(sys.argv[2], 'w').close(); time.sleep(60)"
)


def test_in_a_pid_namespace_the_one_local_process_mapping_a_gpu_is_matched(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """NVML lists host pid 4242 on GPU 0 and 4343 on GPU 1. In a real pid and mount
    namespace, one local process maps /dev/nvidia0: it is 4242, seen from here (its pid,
    user and command are shown, and a signal would go to it). Two map /dev/nvidia1:
    nothing is proven, 4343 stays a bare host pid. The shell that only opens
    /dev/nvidia0 (as NVML itself does) proves nothing."""
    unshare = shutil.which("unshare")
    if (
        unshare is None
        or subprocess.run(
            [unshare, "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False
        ).returncode
    ):
        if os.environ.get("CI") == "true":
            pytest.fail("unshare --pid must work under CI")
        pytest.skip("unshare --pid is not allowed here")
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "FAKE_NVML_GPU_COUNT": "2",
        "FAKE_NVML_PROCESSES": "0:4242:1073741824,1:4343:2147483648",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "PYTHON": sys.executable,
        "MAPPER": MAPPER,
        "READY": str(tmp_path / "ready"),
    }
    inside = subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", "sh", "-c", NAMESPACE_WITH_GPU_NODES],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert inside.returncode == 0, inside.stderr
    data = json.loads(inside.stdout)
    assert data["nvml"]["host_pids"] is True
    (matched,) = data["gpus"][0]["processes"]
    assert matched["pid"] == 4242
    assert matched["local_pid"] not in (None, 4242)
    assert matched["user"] == "root"
    assert "/dev/nvidia0" in matched["command"] and "mmap" in matched["command"]
    assert matched["rss_bytes"] > 0 and matched["elapsed_s"] >= 0  # the local process's
    (unproven,) = data["gpus"][1]["processes"]
    assert (unproven["pid"], unproven["local_pid"], unproven["command"]) == (4343, None, None)
    assert (unproven["rss_bytes"], unproven["elapsed_s"]) == (None, None)


def test_the_hang_knob_holds_a_call_inside_the_library_until_released(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    """``FAKE_NVML_HANG`` (tests/fakenvml/README.md): the named call sleeps in the C library."""
    import pynvml

    fake_nvml_env.setenv("FAKE_NVML_HANG", "init=600")
    worker = threading.Thread(target=pynvml.nvmlInit, daemon=True)
    worker.start()
    worker.join(timeout=0.3)
    assert worker.is_alive(), "nvmlInit should sleep inside the library"
    assert fake_nvml.calls_inside() == 1
    fake_nvml.release_hangs()
    worker.join(timeout=10)
    assert not worker.is_alive() and fake_nvml.calls_inside() == 0
    pynvml.nvmlShutdown()


@pytest.mark.parametrize(
    "value", ["init", "init=soon", "init=-1", "nvmlNoSuchCall=1", "x:count=1", "init=1," * 1000]
)
def test_a_malformed_hang_knob_fails_init_saying_so(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    value: str,
) -> None:
    import pynvml

    fake_nvml_env.setenv("FAKE_NVML_HANG", value)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlInit()
    assert "fake_nvml: bad FAKE_NVML_HANG" in capfd.readouterr().err


TEARDOWN_UNDER_A_CALL = """
import os, sys, threading, time
import pynvml

pynvml.nvmlInit()
if sys.argv[1] != "idle":
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    threading.Thread(target=pynvml.nvmlDeviceGetTemperature, args=(handle, 0), daemon=True).start()
    time.sleep(0.3)  # the call is asleep inside the library: exit tears NVML down under it
if sys.argv[1] == "shutdown":
    pynvml.nvmlShutdown()
"""


@pytest.mark.parametrize(
    ("mode", "crash"),
    [
        ("exit", "the library was unloaded (process exit) with 1 call"),
        ("shutdown", "nvmlShutdown tore NVML down with 1 call"),
        ("idle", None),
    ],
)
def test_the_strict_stand_in_crashes_when_nvml_goes_away_under_a_call(
    fake_nvml_dir: Path, mode: str, crash: str | None
) -> None:
    """``FAKE_NVML_CRASH_ON_TEARDOWN=1`` makes the real driver's use after free certain."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
    env.update(
        LD_LIBRARY_PATH=str(fake_nvml_dir),
        FAKE_NVML_CRASH_ON_TEARDOWN="1",
        FAKE_NVML_HANG="temperature=600",
    )
    done = subprocess.run(
        [sys.executable, "-c", TEARDOWN_UNDER_A_CALL, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if crash is not None:
        assert done.returncode == -11
        assert f"fake_nvml: {crash}" in done.stderr
    else:
        assert (done.returncode, done.stderr) == (0, "")


# --- calls that do not return ------------------------------------------------------------

WEDGED = "the driver may be wedged; check `nvidia-smi` and `dmesg`."


class Sampling:
    """One sample of ``sampler`` on a thread of its own, which the test watches hang."""

    def __init__(self, sampler: NvmlSampler) -> None:
        self.results: list[NvmlReading] = []
        self.thread = threading.Thread(
            target=lambda: self.results.append(sampler.sample()), daemon=True
        )
        self.thread.start()

    def result(self) -> NvmlReading:
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "the sample should end once the driver answers"
        (reading,) = self.results
        return reading


def wait_inside(fake: FakeNvml, calls: int = 1) -> None:
    """Wait until ``calls`` calls are asleep inside the stand-in library."""
    deadline = time.monotonic() + 10
    while fake.calls_inside() < calls:
        assert time.monotonic() < deadline, "no call went to sleep inside the library"
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("knob", "function"), [("init", "nvmlInit"), ("count", "nvmlDeviceGetCount")]
)
def test_a_start_that_hangs_is_named_with_how_long(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    sampler: NvmlSampler,
    clock: FakeClock,
    knob: str,
    function: str,
) -> None:
    """The most common wedge: NVML does not even start. Another thread can say which call
    holds it, for how long, and where to look; once it returns the sample goes on."""
    fake_nvml_env.setenv("FAKE_NVML_HANG", f"{knob}=600")
    sampling = Sampling(sampler)
    wait_inside(fake_nvml)
    assert sampler.pending_call() == DriverCall(function, None, clock.now)
    assert [call.function for call in calls_in_flight()] == [function]
    clock.now += 12.0

    hung = sampler.hung_reading()
    assert not hung.status.available and hung.gpus == ()
    assert hung.status.error == f"{function} has not returned for 12 s: {WEDGED}"
    assert hung.status.hung_call == function and nvml_hung(hung)
    assert hung.status.hung_seconds == 12.0

    fake_nvml.release_hangs()
    reading = sampling.result()
    assert reading.status.available and len(reading.gpus) == 2 and not nvml_hung(reading)
    assert sampler.pending_call() is None and calls_in_flight() == ()


def test_a_gpu_call_that_hangs_leaves_the_gpus_read_before_it(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_HANG", "1:temperature=600")
    sampling = Sampling(sampler)
    wait_inside(fake_nvml)
    assert sampler.pending_call() == DriverCall("nvmlDeviceGetTemperature", 1, clock.now)
    clock.now += 5.0

    hung = sampler.hung_reading()
    assert hung.status.available and nvml_hung(hung)
    assert (hung.status.hung_call, hung.status.hung_seconds) == ("nvmlDeviceGetTemperature", 5.0)
    answered, stuck, behind = hung.gpus
    assert answered.state is GpuState.OK and answered.temperature_c is not None
    assert stuck.state is GpuState.HUNG and stuck.name == H100  # what was read is kept
    assert (stuck.temperature_c, stuck.processes) == (None, None)
    assert stuck.error == f"nvmlDeviceGetTemperature on GPU 1 has not returned for 5 s: {WEDGED}"
    assert behind.state is GpuState.HUNG
    assert behind.error == (
        "Not read: NVML had not returned from nvmlDeviceGetTemperature on GPU 1 after 5 s; "
        + WEDGED
    )
    fake_nvml.release_hangs()
    assert [gpu.state for gpu in sampling.result().gpus] == [GpuState.OK] * 3


def test_for_a_reader_that_goes_on_every_gpu_not_known_down_is_hung(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    """``gputui serve``'s view of a stuck sample: what the sample read before the call is as
    old as the call, and no GPU is read again until it returns, so GPU 0 is hung too; GPU 2,
    whose handle NVML refused at the start, stays unreachable."""
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_HANG", "1:temperature=600")
    fake_nvml_env.setenv("FAKE_NVML_FAIL", "2:handle=NO_PERMISSION")
    sampling = Sampling(sampler)
    wait_inside(fake_nvml)
    clock.now += 45.0

    hung = sampler.hung_reading(keep_read=False)
    assert hung.status.available
    assert (hung.status.hung_call, hung.status.hung_seconds) == ("nvmlDeviceGetTemperature", 45.0)
    read_before, stuck, refused = hung.gpus
    assert [gpu.state for gpu in hung.gpus] == [GpuState.HUNG, GpuState.HUNG, GpuState.UNREACHABLE]
    assert read_before.name == H100 and read_before.uuid is not None  # its identity is kept
    assert read_before.temperature_c is None  # its figures are not
    assert read_before.error == (
        "Not read: NVML had not returned from nvmlDeviceGetTemperature on GPU 1 after 45 s; "
        + WEDGED
    )
    assert stuck.error == f"nvmlDeviceGetTemperature on GPU 1 has not returned for 45 s: {WEDGED}"
    assert "no permission" in (refused.error or "")
    fake_nvml.release_hangs()
    assert [gpu.state for gpu in sampling.result().gpus][:2] == [GpuState.OK] * 2


def test_a_stopped_sample_makes_no_call_after_the_one_in_flight(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    """Quitting must not wait for a whole sample of slow calls, only for the one in flight."""
    fake_nvml_env.setenv("FAKE_NVML_HANG", "1:temperature=600")
    sampling = Sampling(sampler)
    wait_inside(fake_nvml)
    sampler.stop()
    fake_nvml.release_hangs()
    assert not sampling.result().status.available
    assert fake_nvml.calls("nvmlDeviceGetPowerUsage", 1) == 0  # asked after the temperature
    assert not sampler.sample().status.available  # and no later sample asks anything
    assert fake_nvml.calls("nvmlDeviceGetPowerUsage") == 1  # GPU 0's, before the stop


def test_close_leaves_nvml_running_while_another_thread_is_inside_it(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    """nvmlShutdown under another thread's call frees what it uses (a real driver crashes):
    the sampler that closes then leaves NVML to the process's exit."""
    closing = NvmlSampler(clock=clock)
    assert closing.sample().status.available
    fake_nvml_env.setenv("FAKE_NVML_HANG", "0:temperature=600")
    other = NvmlSampler(clock=clock)
    sampling = Sampling(other)  # its init reads the knob, then its sample hangs
    wait_inside(fake_nvml)
    closing.close()
    assert fake_nvml.calls("nvmlShutdown") == 0
    fake_nvml.release_hangs()
    assert sampling.result().status.available
    other.close()
    assert fake_nvml.calls("nvmlShutdown") == 1


def test_no_call_starts_while_nvml_shuts_down() -> None:
    """The other half of the rule above: a call that comes while nvmlShutdown is in flight
    is not made (it came between two calls of another sampler; the stand-in crashed)."""
    calls = _CallsInFlight()
    assert calls.enter(("nvmlShutdown", None, 0.0), alone=True)
    made: list[bool] = []
    other = threading.Thread(target=lambda: made.append(calls.enter(("nvmlInit", None, 0.0))))
    other.start()
    other.join(5)
    assert made == [False]
    calls.leave()
    other = threading.Thread(target=lambda: made.append(calls.enter(("nvmlInit", None, 0.0))))
    other.start()
    other.join(5)
    assert made == [False, True]
    assert not calls.enter(("nvmlShutdown", None, 0.0), alone=True)  # the other is inside
