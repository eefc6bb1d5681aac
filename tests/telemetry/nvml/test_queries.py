"""Each GPU's fields through the real nvidia-ml-py bindings, against the stand-in
libnvidia-ml.so.1: counters, times to live, unsupported and missing fields, lost GPUs, PCIe,
NVLink, video engines and health (``gputui.telemetry.nvml.queries``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import pytest

from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.nvml.calls import (
    GPU_IS_LOST,
    NO_PERMISSION,
    RESET_REQUIRED,
    UNKNOWN,
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
from gputui.telemetry.readings import ERROR_BRIEF_MAX, GpuState, NvlinkThroughput, NvmlReading
from tests.fakenvml import FakeNvml
from tests.telemetry.nvml.conftest import H100, H100_MEMORY, FakeClock, assert_one_sentence, gpu

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
