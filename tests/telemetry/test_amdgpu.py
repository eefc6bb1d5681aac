"""AMD GPUs read through the real sampler from fake sysfs trees (tests/telemetry/sysfs_trees.py):
eight MI300X, a Radeon desktop card, an APU; files missing, truncated or garbled; cards that
go away."""

from __future__ import annotations

import errno
import itertools
import logging
import os
import shutil
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gputui.format import fmt_fan
from gputui.telemetry.amdgpu import parse_dpm
from gputui.telemetry.drm import GONE, DrmSampler
from gputui.telemetry.pci_names import PciNames
from gputui.telemetry.readings import GpuReading, GpuState, Vendor, gpu_label, health_problems
from gputui.telemetry.sysfs import LINK_TTL_S
from tests.fakeprocfs import KIB, FakeProcfs, amdgpu_6_8
from tests.telemetry.sysfs_trees import (
    MI300X_BUS_IDS,
    MI300X_BUSY,
    MI300X_JUNCTION_C,
    MI300X_POWER_W,
    MI300X_SCLK,
    MI300X_VRAM,
    MI300X_VRAM_USED,
    Card,
    GiB,
    aspeed_bmc,
    build,
    device_of,
    gpu_metrics_v1_3,
    mi300x,
    mi300x_box,
    names,
    nvidia_card,
    radeon_780m,
    radeon_rx_7900_xtx,
)


def sample(sysfs: Path, tmp_path: Path) -> tuple[GpuReading, ...]:
    return DrmSampler(sysfs, names=names(tmp_path / "ids")).sample().gpus


def test_eight_mi300x_read_as_the_files_say(tmp_path: Path) -> None:
    gpus = sample(mi300x_box(tmp_path / "sys"), tmp_path)
    assert [gpu.index for gpu in gpus] == list(range(8))  # the BMC's display is no GPU
    assert [gpu.bus_id for gpu in gpus] == list(MI300X_BUS_IDS)
    assert [gpu_label(gpu) for gpu in gpus] == [f"amd{i}" for i in range(8)]
    for i, gpu in enumerate(gpus):
        assert gpu.vendor is Vendor.AMD and gpu.state is GpuState.OK
        assert gpu.name == "AMD Instinct MI300X OAM"
        assert gpu.uuid == f"{0x5C2F71A9D3E84B60 + 0x1111 * i:016x}"
        assert gpu.utilization_percent == MI300X_BUSY[i]
        assert gpu.memory_utilization_percent == MI300X_BUSY[i] * 2 // 5
        assert (gpu.memory_used_bytes, gpu.memory_total_bytes) == (
            MI300X_VRAM_USED[i],
            MI300X_VRAM,
        )
        # no edge sensor on MI300X: the core temperature is the junction's
        assert gpu.temperature_c == gpu.junction_temperature_c == MI300X_JUNCTION_C[i]
        assert gpu.memory_temperature_c == MI300X_JUNCTION_C[i] - 6
        assert (gpu.power_w, gpu.power_limit_w) == (MI300X_POWER_W[i], 750.0)
        assert (gpu.sm_clock_mhz, gpu.sm_clock_max_mhz) == (MI300X_SCLK[i], 2100.0)
        assert (gpu.memory_clock_mhz, gpu.memory_clock_max_mhz) == (1300.0, 1300.0)
        assert (gpu.pcie_link_gen, gpu.pcie_link_width_lanes) == (5, 16)
        assert (gpu.pcie_link_gen_max, gpu.pcie_link_width_max_lanes) == (5, 16)
        assert gpu.fan_percent is None  # passively cooled
        assert gpu.pcie_rx_bytes_per_s is None and gpu.performance_state is None
        assert gpu.processes == ()  # no DRM client of this machine's on these cards
        assert gpu.ecc_uncorrected_errors == (2 if i == 4 else 0)
    assert health_problems(gpus[4]) == ["2 uncorrected ECC errors"]
    assert health_problems(gpus[0]) == []


def test_a_radeon_desktop_card_named_from_libdrms_table(tmp_path: Path) -> None:
    (gpu,) = sample(build(tmp_path / "sys", [radeon_rx_7900_xtx()]), tmp_path)
    assert (gpu.name, gpu.uuid, gpu.bus_id) == (
        "AMD Radeon RX 7900 XTX",
        "8f3b2c6a1d5e7f09",
        "0000:03:00.0",
    )
    assert (gpu.utilization_percent, gpu.memory_utilization_percent) == (97.0, 34.0)
    assert (gpu.memory_used_bytes, gpu.memory_total_bytes) == (18340888576, 25753026560)
    assert (gpu.temperature_c, gpu.junction_temperature_c, gpu.memory_temperature_c) == (
        62.0,
        79.0,
        70.0,
    )
    assert (gpu.power_w, gpu.power_limit_w) == (312.0, 339.0)  # power1_average
    assert gpu.fan_percent == 40.0  # fan1_input 1320 of fan1_max 3300 RPM
    assert (gpu.sm_clock_mhz, gpu.sm_clock_max_mhz) == (2371.0, 2526.0)
    assert (gpu.memory_clock_mhz, gpu.memory_clock_max_mhz) == (1249.0, 1249.0)
    assert (gpu.pcie_link_gen, gpu.pcie_link_width_lanes) == (4, 16)
    assert gpu.ecc_uncorrected_errors is None  # no RAS on a desktop card


def test_an_apu_beside_a_discrete_card(tmp_path: Path) -> None:
    sysfs = build(tmp_path / "sys", [radeon_780m(), radeon_rx_7900_xtx()])
    discrete, apu = sample(sysfs, tmp_path)  # in bus order: 03:00.0, then c4:00.0
    assert (discrete.index, apu.index) == (0, 1)
    assert apu.name == "AMD Radeon 780M"
    assert apu.memory_utilization_percent is None  # no mem_busy_percent on an APU
    assert (apu.memory_used_bytes, apu.memory_total_bytes) == (293601280, 536870912)
    assert (apu.temperature_c, apu.junction_temperature_c) == (46.0, None)
    assert (apu.power_w, apu.power_limit_w, apu.fan_percent) == (8.047, None, None)
    assert (apu.sm_clock_mhz, apu.sm_clock_max_mhz) == (800.0, 2700.0)
    assert (apu.memory_clock_mhz, apu.memory_clock_max_mhz) == (800.0, 1400.0)
    # "Unknown" speed, width 0 now and 255 at most: no link to tell of
    assert (apu.pcie_link_gen, apu.pcie_link_width_lanes) == (None, None)
    assert (apu.pcie_link_gen_max, apu.pcie_link_width_max_lanes) == (None, None)


def test_only_gpu_cards_count_once_each(tmp_path: Path) -> None:
    """Render nodes and connectors are not GPUs, nor are the BMC's display and an NVIDIA
    card (NVML reads it); a second card node of one PCI device is the same GPU."""
    sysfs = build(tmp_path / "sys", [aspeed_bmc(), nvidia_card(), radeon_rx_7900_xtx()])
    drm = sysfs / "class" / "drm"
    assert {"card2", "renderD130", "card2-DP-1"} <= set(os.listdir(drm))
    os.symlink(os.readlink(drm / "card2"), drm / "card7")
    (gpu,) = sample(sysfs, tmp_path)
    assert (gpu.name, gpu.bus_id) == ("AMD Radeon RX 7900 XTX", "0000:03:00.0")


def test_no_drm_at_all_is_no_gpu(tmp_path: Path) -> None:
    assert DrmSampler(tmp_path / "empty").sample().gpus == ()


@pytest.mark.parametrize(
    ("amdgpu_ids", "pci_ids", "name"),
    [
        (True, True, "AMD Radeon RX 7900 XTX"),
        (False, True, "AMD Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M"),
        (False, False, "AMD GPU 1002:744c"),
    ],
)
def test_a_card_without_a_board_name_is_named_by_its_pci_ids(
    tmp_path: Path, amdgpu_ids: bool, pci_ids: bool, name: str
) -> None:
    ids = tmp_path / "ids"
    names(ids)
    tables = PciNames(
        [ids / "amdgpu.ids"] if amdgpu_ids else [], [ids / "pci.ids"] if pci_ids else []
    )
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx()])
    (gpu,) = DrmSampler(sysfs, names=tables).sample().gpus
    assert gpu.name == name


@pytest.mark.parametrize(
    ("path", "text", "field"),
    [
        ("gpu_busy_percent", None, "utilization_percent"),  # a driver without it
        ("gpu_busy_percent", "", "utilization_percent"),
        ("gpu_busy_percent", "busy\n", "utilization_percent"),
        ("gpu_busy_percent", "250\n", "utilization_percent"),
        ("mem_info_vram_used", "\xff\xfe\n", "memory_used_bytes"),
        ("mem_info_vram_used", "1.5e9\n", "memory_used_bytes"),
        ("pp_dpm_sclk", "0: 500Mhz\n1: 21", "sm_clock_max_mhz"),  # truncated mid-table
        ("pp_dpm_mclk", "0: 96Mhz\n1: 1249Mhz\n", "memory_clock_mhz"),  # no level marked
        ("pp_dpm_mclk", "garbage", "memory_clock_max_mhz"),
        ("hwmon/hwmon2/temp1_input", "-\n", "temperature_c"),
        ("hwmon/hwmon2/temp2_input", "511000000\n", "junction_temperature_c"),
        ("hwmon/hwmon2/power1_average", "N/A\n", "power_w"),
        ("hwmon/hwmon2/fan1_input", "fast\n", "fan_percent"),
        ("current_link_speed", "fast\n", "pcie_link_gen"),
    ],
)
def test_a_missing_or_garbled_file_is_na_and_a_debug_note(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    path: str,
    text: str | None,
    field: str,
) -> None:
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx()])
    device = device_of(sysfs, "0000:03:00.0")
    ticks = itertools.count(step=LINK_TTL_S)  # each sample reads what is trusted a while
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"), clock=lambda: next(ticks))
    (before,) = sampler.sample().gpus
    assert getattr(before, field) is not None
    if text is None:
        (device / path).unlink()
    else:
        (device / path).write_bytes(text.encode("latin-1"))
    with caplog.at_level(logging.DEBUG, logger="gputui.telemetry"):
        if text is None:  # never had it
            sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"), clock=lambda: next(ticks))
        (gpu,) = sampler.sample().gpus
        sampler.sample()
    assert gpu.state is GpuState.OK and getattr(gpu, field) is None
    others = ("utilization_percent", "memory_total_bytes", "power_limit_w", "fan_percent")
    assert all(getattr(gpu, other) is not None for other in others if other != field)
    notes = [r.getMessage() for r in caplog.records if path.split("/")[-1] in r.getMessage()]
    assert len(notes) == 1, notes  # once, not every sample


def test_gpu_metrics_tells_why_the_clocks_are_held_down(tmp_path: Path) -> None:
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx(), mi300x(0)])
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    radeon, instinct = sampler.sample().gpus
    assert radeon.throttle_reasons == ()  # v1.3 says it, and nothing holds them down
    assert instinct.throttle_reasons is None  # no gpu_metrics in this tree
    bits = 1 << 0 | 1 << 4 | 1 << 35 | 1 << 47  # PPT0, SPL, edge temperature, PROCHOT
    (device_of(sysfs, "0000:03:00.0") / "gpu_metrics").write_bytes(gpu_metrics_v1_3(bits))
    radeon = sampler.sample().gpus[0]
    assert radeon.throttle_reasons == ("power cap", "thermal", "HW slowdown")
    assert "throttled: power cap, thermal, HW slowdown" in health_problems(radeon)


@pytest.mark.parametrize(
    ("metrics", "note"),
    [
        (gpu_metrics_v1_3(size=3), "truncated"),
        (struct.pack("=HBB", 96, 1, 5) + bytes(92), "v1.5 has no ASIC-independent throttle"),
    ],
)
def test_a_gpu_metrics_of_another_version_or_truncated_is_na_and_a_note(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, metrics: bytes, note: str
) -> None:
    card = radeon_rx_7900_xtx()
    card.device["gpu_metrics"] = metrics
    sysfs = build(tmp_path / "sys", [card])
    with caplog.at_level(logging.DEBUG, logger="gputui.telemetry"):
        (gpu,) = DrmSampler(sysfs, names=names(tmp_path / "ids")).sample().gpus
    assert gpu.state is GpuState.OK and gpu.throttle_reasons is None
    assert gpu.utilization_percent == 97.0  # the rest as sysfs says
    assert [r for r in caplog.records if "gpu_metrics" in r.getMessage() and note in r.getMessage()]


def test_a_gpu_metrics_truncated_since_is_na_and_noted_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx()])
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    sampler.sample()
    (device_of(sysfs, "0000:03:00.0") / "gpu_metrics").write_bytes(gpu_metrics_v1_3(size=64))
    with caplog.at_level(logging.DEBUG, logger="gputui.telemetry"):
        gpus = [sampler.sample().gpus[0] for _ in range(3)]
    assert [gpu.throttle_reasons for gpu in gpus] == [None] * 3
    assert len([r for r in caplog.records if "gpu_metrics: truncated" in r.getMessage()]) == 1


def test_parse_dpm_reads_each_kernels_spelling() -> None:
    assert parse_dpm("0: 500Mhz \n1: 2371Mhz *\n2: 2526Mhz \n") == (2371.0, 2526.0)
    assert parse_dpm("S: 19Mhz *\n0: 500Mhz\n1: 2100Mhz\n") == (19.0, 2100.0)  # deep sleep
    assert parse_dpm("0: 96MHz\n1: 1249MHz *") == (1249.0, 1249.0)
    assert parse_dpm("") == (None, None)
    assert parse_dpm(None) == (None, None)


def with_hwmon(card: Card, drop: str | tuple[str, ...], files: dict[str, str]) -> Card:
    """``card`` with its hwmon files named ``drop*`` (a prefix) replaced by ``files``."""
    kept = {name: text for name, text in card.hwmon.items() if not name.startswith(drop)}
    card.hwmon = {**kept, **files}
    return card


@pytest.mark.parametrize(
    ("fan", "percent"),
    [
        ({"pwm1": "0\n", "fan1_input": "1395\n", "fan1_max": "3100\n"}, 45.0),  # RX 6600
        ({"pwm1": "76\n", "fan1_input": "0\n", "fan1_max": "3200\n"}, 0.0),  # RX 7600S, stopped
        ({"pwm1": "65\n", "fan1_input": "29\n", "fan1_max": "3400\n"}, 0.9),  # RX 5700 XT
        ({"pwm1": "76\n", "fan1_input": "1200\n"}, None),  # RPM with no maximum: n/a
    ],
)
def test_the_fan_is_the_tachometers_where_the_card_has_one(
    tmp_path: Path, fan: dict[str, str], percent: float | None
) -> None:
    card = with_hwmon(radeon_rx_7900_xtx(), ("pwm1", "fan1"), {"pwm1_enable": "2\n", **fan})
    (gpu,) = sample(build(tmp_path / "sys", [card]), tmp_path)
    assert gpu.fan_percent == percent
    assert gpu.fan_rpm == int(fan["fan1_input"])  # and its speed, shown where % is n/a
    assert fmt_fan(gpu.fan_percent, gpu.fan_rpm) == (
        f"{fan['fan1_input'].strip()} rpm" if percent is None else f"{percent:.0f}%"
    )


def test_without_a_tachometer_the_fan_is_pwm1_and_full_without_control(tmp_path: Path) -> None:
    card = with_hwmon(
        radeon_rx_7900_xtx(), ("pwm1", "fan1"), {"pwm1": "103\n", "pwm1_enable": "0\n"}
    )
    sysfs = build(tmp_path / "sys", [card])
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    assert sampler.sample().gpus[0].fan_percent == 100.0  # pwm1_enable 0: full speed
    (device_of(sysfs, "0000:03:00.0") / "hwmon" / "hwmon2" / "pwm1_enable").write_text("2\n")
    assert sampler.sample().gpus[0].fan_percent == 40.4  # automatic: pwm1 103 of 255


@pytest.mark.parametrize(
    ("sclk", "mclk", "freq", "clocks"),
    [
        # RX 7800 XT: the starred level is 77 MHz, gpu_metrics and freq1_input say 2011
        (
            "0: 500Mhz \n1: 77Mhz *\n2: 2430Mhz \n",
            "0: 96Mhz \n1: 1218Mhz *\n",
            {"freq1_input": "2011000000\n", "freq1_label": "sclk\n"},
            (2011.0, 2430.0, 1218.0, 1218.0),
        ),
        # RX 6600 idle: 2605 starred, 20 measured
        (
            "0: 500Mhz \n1: 2605Mhz *\n",
            "0: 96Mhz *\n1: 1750Mhz \n",
            {"freq1_input": "20000000\n", "freq1_label": "sclk\n"},
            (20.0, 2605.0, 96.0, 1750.0),
        ),
        # R7 240 (SI): empty tables, hwmon's clocks
        (
            "",
            "",
            {
                "freq1_input": "400000000\n",
                "freq1_label": "sclk\n",
                "freq2_input": "1150000000\n",
                "freq2_label": "mclk\n",
            },
            (400.0, None, 1150.0, None),
        ),
        # a table of zeros, no measured clock: n/a, not 0
        ("0: 0Mhz *\n1: 0Mhz \n", "0: 0Mhz *\n", {}, (None, None, None, None)),
    ],
)
def test_the_clocks_are_hwmons_measured_ones_and_the_dpm_tables_top(
    tmp_path: Path,
    sclk: str,
    mclk: str,
    freq: dict[str, str],
    clocks: tuple[float | None, ...],
) -> None:
    card = with_hwmon(radeon_rx_7900_xtx(), "freq", freq)
    card.device.update(pp_dpm_sclk=sclk, pp_dpm_mclk=mclk)
    (gpu,) = sample(build(tmp_path / "sys", [card]), tmp_path)
    assert (
        gpu.sm_clock_mhz,
        gpu.sm_clock_max_mhz,
        gpu.memory_clock_mhz,
        gpu.memory_clock_max_mhz,
    ) == clocks


def test_a_memory_temperature_of_0_is_na(tmp_path: Path) -> None:
    card = radeon_rx_7900_xtx()
    card.hwmon["temp3_input"] = "0\n"
    (gpu,) = sample(build(tmp_path / "sys", [card]), tmp_path)
    assert (gpu.temperature_c, gpu.memory_temperature_c) == (62.0, None)


def test_the_hotspot_bit_counts_only_near_the_hotspots_limit(tmp_path: Path) -> None:
    """RDNA3's gpu_metrics sets the hotspot bit (36) nearly always: at 54 °C of 100 °C it
    is no throttle; within HOTSPOT_NEAR_C of the limit it is."""
    card = radeon_rx_7900_xtx()
    card.hwmon.update(temp2_input="54000\n", temp2_crit="100000\n")
    card.device["gpu_metrics"] = gpu_metrics_v1_3(1 << 36)
    sysfs = build(tmp_path / "sys", [card])
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    (gpu,) = sampler.sample().gpus
    assert gpu.throttle_reasons == () and health_problems(gpu) == []
    (device_of(sysfs, "0000:03:00.0") / "hwmon" / "hwmon2" / "temp2_input").write_text("97000\n")
    assert sampler.sample().gpus[0].throttle_reasons == ("thermal",)


def test_an_apus_processes_count_gtt_a_discrete_cards_vram(tmp_path: Path) -> None:
    """A Strix Point process whose model (24 GiB) is in GTT and 5 MiB in the VRAM carve-out
    reads 24 GiB and 5 MiB; on the discrete card beside it, its VRAM alone."""
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx(), radeon_780m()])
    proc = FakeProcfs(tmp_path)
    proc.process(2001, ("python3", "chat.py"))
    proc.drm_fd(
        2001, 5, "renderD129", amdgpu_6_8(7, "0000:c4:00.0", vram_kib=5 << 10, gtt_kib=24 << 20)
    )
    proc.process(2002, ("python3", "train.py"))
    proc.drm_fd(2002, 5, "renderD128", amdgpu_6_8(8, "0000:03:00.0", vram_kib=6 << 20))
    sampler = DrmSampler(sysfs, procfs=proc.root, names=names(tmp_path / "ids"))
    discrete, apu = sampler.sample().gpus
    assert [p.gpu_memory_bytes for p in apu.processes or ()] == [24 * GiB + 5 * 1024 * KIB]
    assert [p.gpu_memory_bytes for p in discrete.processes or ()] == [6 * GiB]


OpenHook = Callable[[str], None]


@pytest.fixture
def on_open(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[OpenHook]]:
    """Hooks run on each file the readers open or read again (its path), before it is
    opened or read: as a card that goes away while it is read."""
    hooks: list[OpenHook] = []
    real_open, real_pread = os.open, os.pread
    paths: dict[int, str] = {}

    def hooked(path: str | os.PathLike[str], flags: int, *args: int, **kwargs: int) -> int:
        for hook in hooks:
            hook(os.fspath(path))
        fd = real_open(path, flags, *args, **kwargs)
        paths[fd] = os.fspath(path)
        return fd

    def hooked_pread(fd: int, size: int, offset: int) -> bytes:
        for hook in hooks:
            hook(paths.get(fd, ""))
        return real_pread(fd, size, offset)

    monkeypatch.setattr("gputui.telemetry.sysfs.os.open", hooked)
    monkeypatch.setattr("gputui.telemetry.sysfs.os.pread", hooked_pread)
    yield hooks


def test_a_card_gone_from_sysfs_is_kept_lost_at_its_index(tmp_path: Path) -> None:
    sysfs = mi300x_box(tmp_path / "sys")
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    sampler.sample()
    shutil.rmtree(device_of(sysfs, MI300X_BUS_IDS[3]))  # the class/drm links now dangle
    gpus = sampler.sample().gpus
    assert len(gpus) == 8
    lost = gpus[3]
    assert (lost.index, lost.state, lost.error) == (3, GpuState.LOST, GONE)
    assert (lost.name, lost.bus_id, lost.uuid) == (
        gpus[2].name,
        MI300X_BUS_IDS[3],
        f"{0x5C2F71A9D3E84B60 + 0x3333:016x}",
    )
    assert lost.utilization_percent is None and lost.processes is None
    assert [gpu.state for gpu in gpus].count(GpuState.OK) == 7
    assert [gpu.index for gpu in gpus] == list(range(8))


def test_a_card_that_vanishes_mid_read_is_lost_with_why(
    tmp_path: Path, on_open: list[OpenHook]
) -> None:
    sysfs = mi300x_box(tmp_path / "sys")
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    sampler.sample()
    device = device_of(sysfs, MI300X_BUS_IDS[5])

    def unplug(path: str) -> None:
        if path.endswith("pp_dpm_sclk") and MI300X_BUS_IDS[5] in os.path.realpath(path):
            shutil.rmtree(device)

    on_open.append(unplug)
    gpus = sampler.sample().gpus
    assert (gpus[5].state, gpus[5].error) == (GpuState.LOST, GONE)
    assert all(gpu.state is GpuState.OK for i, gpu in enumerate(gpus) if i != 5)


def test_a_driver_that_says_enodev_loses_the_card_until_it_answers(
    tmp_path: Path, on_open: list[OpenHook]
) -> None:
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx()])
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    failing = [True]

    def enodev(path: str) -> None:
        if failing[0] and path.endswith("gpu_busy_percent"):
            raise OSError(errno.ENODEV, os.strerror(errno.ENODEV), path)

    on_open.append(enodev)
    (gpu,) = sampler.sample().gpus
    assert gpu.state is GpuState.LOST and gpu.name == "AMD Radeon RX 7900 XTX"
    assert gpu.error == (
        "the amdgpu driver says the device is gone (gpu_busy_percent: No such device); "
        "check `dmesg`"
    )
    failing[0] = False
    (gpu,) = sampler.sample().gpus
    assert (gpu.state, gpu.utilization_percent) == (GpuState.OK, 97.0)


def test_a_sample_reads_few_files_and_the_static_ones_once(
    tmp_path: Path, on_open: list[OpenHook], monkeypatch: pytest.MonkeyPatch
) -> None:
    sysfs = mi300x_box(tmp_path / "sys")
    now = [0.0]
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"), clock=lambda: now[0], keep_open=True)
    sampler.sample()
    opened: list[str] = []
    on_open.append(opened.append)
    hooked_open, reopened = os.open, []

    def counted_open(path: str, flags: int, *args: int, **kwargs: int) -> int:
        reopened.append(path)
        return hooked_open(path, flags, *args, **kwargs)

    monkeypatch.setattr("gputui.telemetry.sysfs.os.open", counted_open)
    now[0] = LINK_TTL_S / 2
    sampler.sample()
    in_sysfs = [os.path.basename(path) for path in opened if path.startswith(str(sysfs))]
    # eight files a card: no uevent, no RAS (trusted 10 s), no link (trusted LINK_TTL_S)
    assert len(in_sysfs) == 8 * 8
    assert not [path for path in reopened if path.startswith(str(sysfs))]  # kept open
    static = {"product_name", "unique_id", "mem_info_vram_total", "max_link_speed", "uevent"}
    assert not (static | {"current_link_speed", "current_link_width"}) & set(in_sysfs)
    opened.clear()
    now[0] = LINK_TTL_S
    sampler.sample()
    links = [path for path in opened if "current_link" in path]
    assert len(links) == 2 * 8  # read again once trusted for LINK_TTL_S


def open_under(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(os.path.realpath(folder) + os.sep):
            found.append(target)
    return found


def test_files_read_every_sample_are_kept_open_read_afresh_and_closed(tmp_path: Path) -> None:
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx()])
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"), keep_open=True)
    sampler.sample()
    kept = {os.path.basename(path) for path in open_under(sysfs)}
    assert {"gpu_busy_percent", "pp_dpm_sclk", "temp1_input"} <= kept
    assert not {"product_name", "power1_cap", "uevent"} & kept  # read once, or a while
    (device_of(sysfs, "0000:03:00.0") / "gpu_busy_percent").write_text("12\n")
    (gpu,) = sampler.sample().gpus
    assert gpu.utilization_percent == 12.0
    sampler.close()
    assert open_under(sysfs) == []
    (gpu,) = sampler.sample().gpus  # still reads, opening each file
    assert (gpu.state, gpu.utilization_percent) == (GpuState.OK, 12.0)
    assert open_under(sysfs) == []


def test_a_tree_that_is_not_sysfs_is_read_by_path_and_a_file_renamed_in_reads_anew(
    tmp_path: Path,
) -> None:
    """A copied tree refreshed as rsync does (a new file renamed over the old) reads the new
    file; a kept one would read the old, deleted one forever."""
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx()])
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    sampler.sample()
    assert open_under(sysfs) == []
    busy = device_of(sysfs, "0000:03:00.0") / "gpu_busy_percent"
    fresh = busy.with_name(".gpu_busy_percent.new")
    fresh.write_text("12\n")
    fresh.rename(busy)
    (gpu,) = sampler.sample().gpus
    assert gpu.utilization_percent == 12.0


def test_a_tree_the_mount_table_calls_sysfs_keeps_its_files_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx()])
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"30 1 0:21 / {sysfs} rw,relatime shared:2 - sysfs sysfs rw\n")
    monkeypatch.setattr("gputui.telemetry.sysfs.MOUNTINFO", mountinfo)
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    sampler.sample()
    assert "gpu_busy_percent" in {os.path.basename(path) for path in open_under(sysfs)}
    sampler.close()


def test_a_kept_file_whose_node_went_is_opened_anew(
    tmp_path: Path, on_open: list[OpenHook]
) -> None:
    """A driver bound again makes its files anew: the old ones answer ENODEV. Opened again,
    the new one reads; where the open too says ENODEV, the card is lost until it answers."""
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx()])
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"), keep_open=True)
    sampler.sample()
    (device_of(sysfs, "0000:03:00.0") / "gpu_busy_percent").write_text("12\n")
    failures = [1]

    def enodev(path: str) -> None:
        if failures[0] and path.endswith("gpu_busy_percent"):
            failures[0] -= 1
            raise OSError(errno.ENODEV, os.strerror(errno.ENODEV), path)

    on_open.append(enodev)
    (gpu,) = sampler.sample().gpus  # the kept file fails; opened anew, it reads
    assert (gpu.state, gpu.utilization_percent) == (GpuState.OK, 12.0)
    failures[0] = 2  # the kept file, then the open
    (gpu,) = sampler.sample().gpus
    assert gpu.state is GpuState.LOST and "says the device is gone" in (gpu.error or "")
    (gpu,) = sampler.sample().gpus
    assert (gpu.state, gpu.utilization_percent) == (GpuState.OK, 12.0)


def test_a_card_back_after_it_was_lost_is_read_again_at_its_index(tmp_path: Path) -> None:
    sysfs = build(tmp_path / "sys", [radeon_780m(), radeon_rx_7900_xtx()])
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    sampler.sample()
    device = device_of(sysfs, "0000:03:00.0")
    device.rename(tmp_path / "away")
    assert [gpu.state for gpu in sampler.sample().gpus] == [GpuState.LOST, GpuState.OK]
    (tmp_path / "away").rename(device)
    gpus = sampler.sample().gpus
    assert [(gpu.index, gpu.state) for gpu in gpus] == [(0, GpuState.OK), (1, GpuState.OK)]


def test_a_card_gone_while_it_is_first_read_is_not_an_error(
    tmp_path: Path, on_open: list[OpenHook]
) -> None:
    sysfs = build(tmp_path / "sys", [radeon_780m(), radeon_rx_7900_xtx()])

    def enodev(path: str) -> None:
        if path.endswith("product_name") and "0000:03:00.0" in os.path.realpath(path):
            raise OSError(errno.ENODEV, os.strerror(errno.ENODEV), path)

    on_open.append(enodev)
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    assert [gpu.bus_id for gpu in sampler.sample().gpus] == ["0000:c4:00.0"]
    on_open.clear()
    gpus = sampler.sample().gpus  # it answers now: a GPU like any other
    assert [(gpu.bus_id, gpu.index) for gpu in gpus] == [("0000:c4:00.0", 0), ("0000:03:00.0", 1)]


def test_a_number_no_gpu_can_have_reads_na(tmp_path: Path) -> None:
    """A card's file that says 10**33 bytes (a driver's oddity, a planted tree) is checked as
    another host's reading is (:func:`~gputui.telemetry.bounds.in_range`): n/a, not a
    figure, and the card's other readings stand."""
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx()])
    (device_of(sysfs, "0000:03:00.0") / "mem_info_vram_total").write_text(f"{10**33}\n")
    (gpu,) = sample(sysfs, tmp_path)
    assert gpu.memory_total_bytes is None
    assert gpu.utilization_percent is not None and gpu.memory_used_bytes is not None
