"""Intel GPUs read through the real sampler from fake sysfs trees: an Arc B580 on xe and a
Data Center GPU Flex 170 on i915, whose utilization and power come from two samples'
counters."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gputui.telemetry.drm import DrmSampler
from gputui.telemetry.readings import GpuReading, GpuState, Vendor, gpu_label, health_problems
from tests.telemetry.sysfs_trees import (
    I915_THROTTLE_FILES,
    Card,
    GiB,
    add_to,
    arc_b580,
    build,
    device_of,
    flex_170,
    intel_box,
    mi300x,
    names,
)
from tests.ui.fakes import FakeClock

ARC = "0000:03:00.0"
FLEX = "0000:4d:00.0"


def two_samples(tmp_path: Path, sysfs: Path) -> tuple[tuple[GpuReading, ...], ...]:
    """A sample, then one a second later in which the Arc's render GT idled 250 ms and its
    media GT 900 ms and the card used 95 J, and the Flex idled all the second and used
    41.5 J."""
    clock = FakeClock(100.0)
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"), clock=clock)
    first = sampler.sample().gpus
    arc, flex = device_of(sysfs, ARC), device_of(sysfs, FLEX)
    add_to(arc / "tile0" / "gt0" / "gtidle" / "idle_residency_ms", 250)
    add_to(arc / "tile0" / "gt1" / "gtidle" / "idle_residency_ms", 900)
    add_to(arc / "hwmon" / "hwmon2" / "energy1_input", 95_000_000)
    add_to(flex / "drm" / "card1" / "gt" / "gt0" / "rc6_residency_ms", 1000)
    add_to(flex / "hwmon" / "hwmon3" / "energy1_input", 41_500_000)
    clock.advance(1.0)
    return first, sampler.sample().gpus


def test_an_arc_on_xe_and_a_flex_on_i915(tmp_path: Path) -> None:
    first, (arc, flex) = two_samples(tmp_path, intel_box(tmp_path / "sys"))
    assert [gpu_label(gpu) for gpu in (arc, flex)] == ["intel0", "intel1"]
    assert (arc.vendor, flex.vendor) == (Vendor.INTEL, Vendor.INTEL)
    assert (arc.name, flex.name) == ("Intel Arc B580", "Intel Data Center GPU Flex 170")
    assert (arc.bus_id, flex.bus_id) == (ARC, FLEX)
    # the busier GT counts: the render GT was busy 75% of the second
    assert (arc.utilization_percent, flex.utilization_percent) == (75.0, 0.0)
    assert (arc.power_w, flex.power_w) == (95.0, 41.5)
    assert (arc.power_limit_w, flex.power_limit_w) == (190.0, 150.0)
    assert (arc.energy_j, arc.energy_joules) == (3514.0, 95.0)
    assert (arc.sm_clock_mhz, arc.sm_clock_max_mhz) == (2670.0, 2850.0)
    assert (flex.sm_clock_mhz, flex.sm_clock_max_mhz) == (2050.0, 2050.0)
    assert (arc.memory_total_bytes, arc.memory_used_bytes) == (12 * GiB, None)
    assert (flex.memory_total_bytes, flex.memory_used_bytes) == (None, None)
    assert (arc.temperature_c, arc.memory_temperature_c) == (58.0, 62.0)
    assert flex.temperature_c is None  # i915's hwmon has no temperature
    assert (arc.pcie_link_gen, arc.pcie_link_width_lanes) == (4, 8)
    assert (flex.pcie_link_gen_max, flex.pcie_link_width_max_lanes) == (4, 16)
    assert all(gpu.state is GpuState.OK and gpu.processes == () for gpu in (arc, flex))
    # the first sample has no second to tell rates by
    assert [(gpu.utilization_percent, gpu.power_w) for gpu in first] == [(None, None)] * 2
    assert first[0].energy_joules == 0.0 and first[0].sm_clock_mhz == 2670.0


def test_an_older_i915_keeps_rc6_under_power(tmp_path: Path) -> None:
    card = flex_170()
    card.node = {k: v for k, v in card.node.items() if not k.startswith("gt/")}
    sysfs = build(tmp_path / "sys", [card])
    clock = FakeClock()
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"), clock=clock)
    sampler.sample()
    add_to(device_of(sysfs, FLEX) / "drm" / "card0" / "power" / "rc6_residency_ms", 400)
    clock.advance(2.0)
    (gpu,) = sampler.sample().gpus
    assert gpu.utilization_percent == 80.0
    assert gpu.throttle_reasons is None  # before Linux 6.1: i915 does not say


def test_a_gt_held_down_says_why_in_nvmls_words(tmp_path: Path) -> None:
    sysfs = intel_box(tmp_path / "sys")
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    assert [gpu.throttle_reasons for gpu in sampler.sample().gpus] == [(), ()]
    arc_throttle = device_of(sysfs, ARC) / "tile0" / "gt0" / "freq0" / "throttle"
    for name in ("status", "reason_pl2", "reason_thermal", "reason_pl1"):
        (arc_throttle / name).write_text("1\n")
    flex_gt = device_of(sysfs, FLEX) / "drm" / "card1" / "gt" / "gt0"
    (flex_gt / "throttle_reason_status").write_text("1\n")  # and no reason it names
    arc, flex = sampler.sample().gpus
    assert arc.throttle_reasons == ("power cap", "thermal")  # once each, in a set order
    assert flex.throttle_reasons == ("other",)
    assert "throttled: power cap, thermal" in health_problems(arc)
    (arc_throttle / "status").write_text("0\n")  # the reasons' files may lag: status rules
    assert sampler.sample().gpus[0].throttle_reasons == ()


def test_each_i915_gt_keeps_its_own_throttle_files(tmp_path: Path) -> None:
    """A GT without an RC6 counter (gt0 here) still says why its clock is held down, and the
    next GT's reasons are its own, not the one before it's."""
    card = flex_170()
    del card.node["gt/gt0/rc6_residency_ms"]
    card.node["gt/gt1/rc6_residency_ms"] = "1000\n"
    card.node.update({f"gt/gt1/throttle_reason_{name}": "0\n" for name in I915_THROTTLE_FILES})
    sysfs = build(tmp_path / "sys", [card])
    clock = FakeClock()
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"), clock=clock)
    assert [gpu.throttle_reasons for gpu in sampler.sample().gpus] == [()]
    gt = device_of(sysfs, FLEX) / "drm" / "card0" / "gt"
    for name in ("status", "pl1"):
        (gt / "gt1" / f"throttle_reason_{name}").write_text("1\n")
    add_to(gt / "gt1" / "rc6_residency_ms", 500)
    clock.advance(1.0)
    (gpu,) = sampler.sample().gpus
    assert gpu.throttle_reasons == ("power cap",)
    assert (gpu.utilization_percent, gpu.sm_clock_mhz) == (50.0, 2050.0)
    (gt / "gt1" / "throttle_reason_status").write_text("0\n")
    for name in ("status", "vr_tdc"):
        (gt / "gt0" / f"throttle_reason_{name}").write_text("1\n")
    assert sampler.sample().gpus[0].throttle_reasons == ("VR current limit",)


def test_a_counter_that_goes_backwards_gives_no_rate_and_keeps_the_tally(tmp_path: Path) -> None:
    sysfs = build(tmp_path / "sys", [arc_b580()])
    clock = FakeClock()
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"), clock=clock)
    energy = device_of(sysfs, ARC) / "hwmon" / "hwmon2" / "energy1_input"
    sampler.sample()
    add_to(energy, 50_000_000)
    clock.advance(1.0)
    assert sampler.sample().gpus[0].energy_joules == 50.0
    energy.write_text("1000000\n")  # the driver was loaded again
    clock.advance(1.0)
    (gpu,) = sampler.sample().gpus
    assert (gpu.power_w, gpu.energy_joules, gpu.energy_j) == (None, 50.0, 1.0)


def test_an_a380_on_xe_has_its_package_power_limit(tmp_path: Path) -> None:
    """xe on an Arc A380 gives hwmon's package channel alone (``power2_*``, ``energy2_*``)."""
    a380 = Card(
        ARC,
        "xe",
        "8086:56A5",
        device=arc_b580().device,
        hwmon={
            "name": "xe\n",
            "energy2_input": "1287000000\n",
            "energy2_label": "pkg\n",
            "power2_max": "55000000\n",
            "power2_rated_max": "55000000\n",
            "power2_label": "pkg\n",
        },
    )
    (gpu,) = (
        DrmSampler(build(tmp_path / "sys", [a380]), names=names(tmp_path / "ids")).sample().gpus
    )
    assert (gpu.power_limit_w, gpu.energy_j) == (55.0, 1287.0)


def test_a_card_energy_counter_that_stays_0_gives_way_to_the_packages(tmp_path: Path) -> None:
    """A B580 on Linux 6.16: ``energy1_input`` (card) reads 0 while ``energy2_input`` (pkg)
    moves."""
    card = arc_b580()
    card.hwmon["energy1_input"] = "0\n"
    sysfs = build(tmp_path / "sys", [card])
    clock = FakeClock()
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"), clock=clock)
    sampler.sample()
    add_to(device_of(sysfs, ARC) / "hwmon" / "hwmon2" / "energy2_input", 95_000_000)
    clock.advance(1.0)
    (gpu,) = sampler.sample().gpus
    assert (gpu.power_w, gpu.energy_joules) == (95.0, 95.0)


def test_a_memory_temperature_of_0_is_na(tmp_path: Path) -> None:
    card = arc_b580()
    card.hwmon["temp3_input"] = "0\n"
    (gpu,) = (
        DrmSampler(build(tmp_path / "sys", [card]), names=names(tmp_path / "ids")).sample().gpus
    )
    assert (gpu.temperature_c, gpu.memory_temperature_c) == (58.0, None)


@pytest.mark.parametrize(
    ("path", "text", "field"),
    [
        ("tile0/gt0/freq0/cur_freq", "fast\n", "sm_clock_mhz"),
        ("tile0/gt0/gtidle/idle_residency_ms", "\x00\x00\n", "utilization_percent"),
        ("hwmon/hwmon2/energy1_input", "", "power_w"),
        ("hwmon/hwmon2/temp2_input", "-\n", "temperature_c"),
        ("tile0/physical_vram_size_bytes", "12G\n", "memory_total_bytes"),
    ],
)
def test_a_garbled_file_is_na_and_a_debug_note(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, path: str, text: str, field: str
) -> None:
    sysfs = build(tmp_path / "sys", [arc_b580()])
    (device_of(sysfs, ARC) / path).write_text(text)
    clock = FakeClock()
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"), clock=clock)
    with caplog.at_level(logging.DEBUG, logger="gputui.telemetry"):
        sampler.sample()
        clock.advance(1.0)
        (gpu,) = sampler.sample().gpus
    assert gpu.state is GpuState.OK and getattr(gpu, field) is None
    assert gpu.power_limit_w == 190.0
    assert [r for r in caplog.records if path.split("/")[-1] in r.getMessage()]


def test_amd_and_intel_on_one_box_each_count_from_zero(tmp_path: Path) -> None:
    sysfs = build(tmp_path / "sys", [flex_170(), mi300x(0, "0000:9f:00.0"), arc_b580()])
    gpus = DrmSampler(sysfs, names=names(tmp_path / "ids")).sample().gpus
    assert [gpu_label(gpu) for gpu in gpus] == ["amd0", "intel0", "intel1"]
    assert [gpu.bus_id for gpu in gpus] == ["0000:9f:00.0", ARC, FLEX]
