"""AMD and Intel GPUs served beside NVIDIA's: the same ``gputui_gpu_*`` series with a
``vendor`` label, through a real ``gputui serve`` on the stand-in NVML and a fake sysfs tree
(``GPUTUI_SYSFS``), checked by promtool; and the series' rules on readings made here."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gputui.fleet.exporters import Sample as FleetSample
from gputui.fleet.exporters import read_samples
from gputui.serve.metrics import LatestCollector
from gputui.telemetry.drm import DrmSampler
from gputui.telemetry.polling import Latest
from gputui.telemetry.readings import GpuState, NvmlReading, Vendor
from gputui.telemetry.sysfs import SYSFS_ENV
from tests.serve.served import StartServe, promtool
from tests.telemetry.sysfs_trees import (
    MI300X_BUS_IDS,
    MI300X_BUSY,
    arc_b580,
    build,
    gpu_metrics_v1_3,
    mi300x_box,
    names,
    radeon_rx_7900_xtx,
)
from tests.ui.fakes import MPS_ON_LINUX, cpu_reading, h100s

NOW = 1000.0


def test_a_mixed_box_serves_every_gpu_with_its_vendor(
    start_serve: StartServe, tmp_path: Path
) -> None:
    sysfs = mi300x_box(tmp_path / "sys")
    child = start_serve("--processes", FAKE_NVML_GPU_COUNT="2", **{SYSFS_ENV: str(sysfs)})
    snapshot = child.wait_for_readings()
    assert [(gpu["vendor"], gpu["index"]) for gpu in snapshot["gpus"]] == [
        ("nvidia", 0),
        ("nvidia", 1),
        *(("amd", i) for i in range(8)),
    ]
    answer = child.get("/metrics")
    assert answer.status == 200
    metrics: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(answer.body.decode()):
        for sample in family.samples:
            metrics.setdefault(sample.name, []).append(sample)
    up = metrics["gputui_gpu_up"]
    assert sorted((s.labels["vendor"], s.labels["gpu"]) for s in up) == sorted(
        [("nvidia", "0"), ("nvidia", "1"), *(("amd", str(i)) for i in range(8))]
    )
    assert all(s.value == 1.0 for s in up)
    amd = [s for s in metrics["gputui_gpu_utilization_ratio"] if s.labels["vendor"] == "amd"]
    assert [s.value for s in sorted(amd, key=lambda s: int(s.labels["gpu"]))] == [
        busy / 100 for busy in MI300X_BUSY
    ]
    info = {s.labels["bus_id"]: s.labels for s in metrics["gputui_gpu_info"]}
    assert info[MI300X_BUS_IDS[0]]["name"] == "AMD Instinct MI300X OAM"
    assert info[MI300X_BUS_IDS[0]]["driver"] == ""  # NVIDIA's driver version is NVIDIA's
    fans = metrics.get("gputui_gpu_fan_speed_ratio", [])
    assert all(s.labels["vendor"] == "nvidia" for s in fans)  # passive: left out, never 0

    checked = subprocess.run(
        [promtool(), "check", "metrics"], input=answer.body, capture_output=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == b""


def scrape(latest: Latest, now: float = NOW) -> list[Sample]:
    registry = CollectorRegistry()
    registry.register(
        LatestCollector(lambda: latest, interval_s=1.0, processes=True, clock=lambda: now)
    )
    text = generate_latest(registry).decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def latest_of(tmp_path: Path, *, nvml: NvmlReading, drm_taken_at: float = NOW) -> Latest:
    drm = DrmSampler(mi300x_box(tmp_path / "sys"), names=names(tmp_path / "ids")).sample()
    return Latest(
        started_at=NOW - 60,
        cpu=cpu_reading(taken_at=NOW),
        nvml=nvml,
        mps=dataclasses.replace(MPS_ON_LINUX, taken_at=NOW),
        drm=dataclasses.replace(drm, taken_at=drm_taken_at),
    )


def up_by_vendor(samples: list[Sample]) -> dict[str, set[float]]:
    found: dict[str, set[float]] = {}
    for s in samples:
        if s.name == "gputui_gpu_up":
            found.setdefault(s.labels["vendor"], set()).add(s.value)
    return found


def test_stale_nvidia_readings_leave_the_amd_gpus_up(tmp_path: Path) -> None:
    latest = latest_of(tmp_path, nvml=h100s(2, taken_at=NOW - 30))
    assert up_by_vendor(scrape(latest)) == {"nvidia": {0.0}, "amd": {1.0}}


def test_stale_amd_readings_mark_the_amd_gpus_down(tmp_path: Path) -> None:
    latest = latest_of(tmp_path, nvml=h100s(2, taken_at=NOW), drm_taken_at=NOW - 30)
    samples = scrape(latest)
    assert up_by_vendor(samples) == {"nvidia": {1.0}, "amd": {0.0}}
    assert {s.value for s in samples if s.name == "gputui_gpu_hung"} == {0.0}


def test_the_fleet_reads_a_mixed_exporter_back_gpu_by_gpu(tmp_path: Path) -> None:
    """NVIDIA's GPU 0 and AMD's GPU 0 are two GPUs, not one."""
    latest = latest_of(tmp_path, nvml=h100s(2, taken_at=NOW))
    exposition = read_samples(FleetSample(s.name, s.labels, s.value) for s in scrape(latest))
    gpus = exposition.gpus
    assert [(gpu.vendor, gpu.index) for gpu in gpus] == [
        (Vendor.NVIDIA, 0),
        (Vendor.NVIDIA, 1),
        *((Vendor.AMD, i) for i in range(8)),
    ]
    assert [gpu.utilization_percent for gpu in gpus[2:]] == [float(b) for b in MI300X_BUSY]
    assert gpus[2].name == "AMD Instinct MI300X OAM" and gpus[2].state is GpuState.OK
    assert gpus[0].name == "NVIDIA H100 80GB HBM3"


def test_the_fleet_reads_an_older_exporter_as_nvidia_and_skips_an_unknown_vendor() -> None:
    samples = [
        FleetSample("gputui_gpu_up", {"gpu": "0", "uuid": "GPU-1"}, 1.0),
        FleetSample("gputui_gpu_up", {"gpu": "1", "uuid": "GPU-2", "vendor": ""}, 1.0),
        FleetSample("gputui_gpu_up", {"gpu": "0", "uuid": "", "vendor": "matrox"}, 1.0),
    ]
    gpus = read_samples(samples).gpus
    assert [(gpu.vendor, gpu.index) for gpu in gpus] == [(Vendor.NVIDIA, 0), (Vendor.NVIDIA, 1)]


def test_amd_and_intel_export_each_of_their_throttle_reasons_held_or_not(tmp_path: Path) -> None:
    """Their series stay put as reasons come and go (as NVIDIA's do), and promtool takes
    them."""
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx("0000:03:00.0"), arc_b580("0000:83:00.0")])
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))

    def throttled() -> dict[tuple[str, str], float]:
        drm = dataclasses.replace(sampler.sample(), taken_at=NOW)
        latest = Latest(
            started_at=NOW - 60,
            cpu=cpu_reading(taken_at=NOW),
            nvml=h100s(0, taken_at=NOW),
            mps=dataclasses.replace(MPS_ON_LINUX, taken_at=NOW),
            drm=drm,
        )
        registry = CollectorRegistry()
        registry.register(
            LatestCollector(lambda: latest, interval_s=1.0, processes=False, clock=lambda: NOW)
        )
        body = generate_latest(registry)
        checked = subprocess.run(
            [promtool(), "check", "metrics"], input=body, capture_output=True, check=False
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        return {
            (s.labels["vendor"], s.labels["reason"]): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples
            if s.name == "gputui_gpu_throttled"
        }

    amd = ["power_cap", "current_limit", "thermal", "hw_thermal", "hw_slowdown"]
    amd.append("reliability_limit")
    intel = ["power_cap", "peak_current_limit", "thermal", "hw_slowdown", "hw_thermal"]
    intel += ["vr_current_limit", "other"]
    every = [("amd", r) for r in amd] + [("intel", r) for r in intel]
    assert throttled() == dict.fromkeys(every, 0.0)

    tdc, fit = 1 << 16, 1 << 57
    radeon = sysfs / "devices" / "pci0000:00" / "0000:03:00.0"
    (radeon / "gpu_metrics").write_bytes(gpu_metrics_v1_3(tdc | fit))
    gt = sysfs / "devices" / "pci0000:00" / "0000:83:00.0" / "tile0" / "gt0" / "freq0"
    for name in ("status", "reason_vr_tdc"):
        (gt / "throttle" / name).write_text("1\n")
    held = {
        ("amd", "current_limit"),
        ("amd", "reliability_limit"),
        ("intel", "vr_current_limit"),
    }
    assert throttled() == {key: float(key in held) for key in every}
    (gt / "throttle" / "reason_vr_tdc").write_text("0\n")  # held, for no reason it names
    assert throttled()[("intel", "other")] == 1.0
