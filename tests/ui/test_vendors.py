"""The monitor on boxes with AMD and Intel GPUs: the real app reading the stand-in NVML
library and fake sysfs trees (tests/telemetry/sysfs_trees.py) through the real samplers,
and SVG snapshots of a mixed NVIDIA and AMD box at 160x50 and 80x24.

The snapshots read the fixed NVIDIA readings the other snapshots use (the stand-in's values
move with every call) beside the real sysfs sampler on a tree; the pilot tests read both
through the real samplers.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gputui.telemetry.drm import DrmSampler
from gputui.telemetry.history import History, memory_metric, util_metric
from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.polling import Samplers
from gputui.telemetry.readings import GpuState
from gputui.ui.monitor.app import MonitorApp
from gputui.ui.render.gpu import area_title, nvml_title
from gputui.ui.render.processes import PROCESS_COLUMNS, process_table_title
from gputui.ui.widgets.gpu_area import GpuArea
from tests.fakenvml import FakeNvml
from tests.fakeprocfs import FakeProcfs, amdgpu_6_11
from tests.telemetry.sysfs_trees import build, mi300x_box, names, radeon_780m, radeon_rx_7900_xtx
from tests.ui.fakes import (
    MPS_ON_LINUX,
    NO_DRIVER,
    FakeClock,
    ScriptedSampler,
    cpu_reading,
    fake_app,
    h100s,
    nvml_reading,
    screen_text,
    settled,
    wait_until,
)
from tests.ui.runner_fakes import scripted_setup

SMALL = (80, 24)
LARGE = (160, 50)


TRAINER_PID = 4194301
"""A pid no process of this machine has (pid_max is 4194304): the fake procfs's trainer."""


def workstation(tmp_path: Path, *, trainer: bool = False) -> DrmSampler:
    """A Radeon RX 7900 XTX and the Radeon 780M of the box's APU, read from sysfs; with
    ``trainer``, a process holding 6 GiB of the 7900 XTX's VRAM in its fake procfs."""
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx(), radeon_780m()])
    procfs = FakeProcfs(tmp_path)
    if trainer:
        procfs.process(TRAINER_PID, ("python3", "train.py"))
        fdinfo = amdgpu_6_11(3, "0000:03:00.0", vram_kib=6 << 20)
        procfs.drm_fd(TRAINER_PID, 7, "renderD128", fdinfo)
    return DrmSampler(sysfs, procfs=procfs.root, names=names(tmp_path / "ids"))


def real_app(
    drm: DrmSampler,
    *,
    nvml: object | None = None,
    interval: float = 60.0,
    clock: Callable[[], float] = time.monotonic,
) -> MonitorApp:
    samplers = Samplers(
        cpu=ScriptedSampler(cpu_reading()),  # type: ignore[arg-type]
        nvml=nvml if nvml is not None else NvmlSampler(),  # type: ignore[arg-type]
        mps=ScriptedSampler(MPS_ON_LINUX),  # type: ignore[arg-type]
        drm=drm,
    )
    return MonitorApp(samplers, interval=interval, clock=clock, runner=scripted_setup())


def area_of(app: MonitorApp) -> GpuArea:
    return app.query_one(GpuArea)


async def test_a_mixed_box_shows_every_gpu_each_vendor_counted(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "2")
    app = real_app(workstation(tmp_path, trainer=True))
    async with app.run_test(size=LARGE) as pilot:
        await settled(pilot)
        area = area_of(app)
        assert area.border_title == "GPUs · 2 NVIDIA, 2 AMD · driver 550.54.15 · CUDA 12.4"
        gpus = area.gpu_list
        assert "0 · NVIDIA H100 80GB HBM3" in gpus.gpu_text(0)
        radeon = gpus.gpu_text("amd0")
        assert "amd0 · AMD Radeon RX 7900 XTX" in radeon
        assert "97%" in radeon and "17.1/24.0 GiB" in radeon and "62°C" in radeon
        assert "312 W/339 W" in radeon or "312/339 W" in radeon
        assert "PCIe Gen4 x16" in radeon  # the link, where the throughput is not known
        assert "amd1 · AMD Radeon 780M" in gpus.gpu_text("amd1")
        table = app.monitor.process_table
        assert table.border_title is not None
        assert str(table.border_title) == "GPU processes · 1"
        [cells] = table.shown.values()
        row = {column.key: cell for column, cell in zip(PROCESS_COLUMNS, cells, strict=True)}
        assert (row["gpu"], row["pid"], row["memory"]) == ("amd0", str(TRAINER_PID), "6.0 GiB")
        assert row["command"] == "python3 train.py"
        assert app.history.series(util_metric("amd0"))[-1] == 97.0
        assert app.history.series(util_metric(0))[-1] is not None  # NVIDIA's keep their names


async def test_an_amd_box_without_nvml_shows_its_gpus(tmp_path: Path) -> None:
    sysfs = mi300x_box(tmp_path / "sys")
    drm = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    no_nvml = ScriptedSampler(nvml_reading(status=NO_DRIVER))  # answered at T0, as the clock
    app = real_app(drm, nvml=no_nvml, interval=0.25, clock=FakeClock())
    async with app.run_test(size=LARGE) as pilot:
        await settled(pilot)
        assert area_of(app).border_title == "AMD · 8 GPUs"
        assert "libnvidia-ml" not in screen_text(app)  # NVML's absence is no news here
        assert app.monitor.process_table.display  # n/a, said in its title
        assert "amd4 MI30" in area_of(app).gpu_list.gpu_text("amd4")  # no brand: no room
        shutil.rmtree(sysfs / "devices" / "pci0000:00" / "0000:38:00.0")
        await wait_until(pilot, lambda: app.monitor.gpus[2].state is GpuState.LOST)
        await wait_until(pilot, lambda: "8 GPUs, 1 lost" in str(area_of(app).border_title))
        assert "LOST" in area_of(app).gpu_list.gpu_text("amd2")
        assert "gone from /sys/class/drm" in area_of(app).gpu_list.gpu_text("amd2")


async def test_only_shows_the_nvidia_gpus_it_names(tmp_path: Path) -> None:
    from gputui.telemetry.selection import GpuSelection

    app = fake_app(drm=workstation(tmp_path), only=GpuSelection.parse("1"))
    async with app.run_test(size=LARGE) as pilot:
        await settled(pilot)
        assert [gpu.index for gpu in app.monitor.gpus] == [1]


def mixed_history() -> History:
    """Fixed, varied sparklines for the two H100s and the two Radeons."""
    history = History(300)
    for place, label in enumerate(("0", "1", "amd0", "amd1")):
        for step in range(120):
            history.append(util_metric(label), float((step * (7 + place) + place * 13) % 100))
            history.append(memory_metric(label), 20.0 + (step * 3 + place * 11) % 60)
    return history


def mixed_app(tmp_path: Path) -> MonitorApp:
    """Two H100s (the fakes' fixed readings) beside the workstation's two Radeons."""
    return fake_app(drm=workstation(tmp_path), history=mixed_history())


def test_a_mixed_box_160x50(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(mixed_app(tmp_path), terminal_size=LARGE, run_before=settled)


def test_a_mixed_box_80x24(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(mixed_app(tmp_path), terminal_size=SMALL, run_before=settled)


def test_the_area_title_counts_each_vendor(tmp_path: Path) -> None:
    read = DrmSampler(mi300x_box(tmp_path / "sys"), names=names(tmp_path / "ids")).sample()
    amd = tuple(dataclasses.replace(gpu, processes=None) for gpu in read.gpus)  # not listed
    nvidia = h100s(2).gpus
    assert area_title("550.54.15", "12.4", nvidia) == nvml_title("550.54.15", "12.4", 2, nvidia)
    assert area_title(None, None, amd) == "AMD · 8 GPUs"
    lost = (amd[0], dataclasses.replace(amd[1], state=GpuState.LOST), *amd[2:])
    assert area_title("550.54.15", "12.4", nvidia + lost) == (
        "GPUs · 2 NVIDIA, 8 AMD, 1 lost · driver 550.54.15 · CUDA 12.4"
    )
    assert process_table_title(0, nvidia + amd) == "GPU processes · 0 · n/a on 8 GPUs"
    assert process_table_title(0, nvidia + amd[:2]) == "GPU processes · 0 · n/a on GPU amd0, amd1"


async def test_the_trainer_is_marked_on_its_amd_gpu_found_by_bus_id(tmp_path: Path) -> None:
    """A ROCm trainer holds a render node of every AMD GPU (the HIP runtime opens them all),
    so its pid is listed on both cards: only the row on the GPU whose bus id RunStarted
    names (torch's pci_domain_id/pci_bus_id/pci_device_id) is the trainer's. AMD's UUIDs
    are no help: torch's and the driver's ``unique_id`` differ."""
    from gputui.jobs.config import RunConfig
    from gputui.jobs.events import Event, RunStarted, parse_event
    from tests.ui.runner_fakes import cuda_build, gpu_run_events

    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx(), radeon_780m()])
    procfs = FakeProcfs(tmp_path)
    procfs.process(TRAINER_PID, ("python3", "train.py"))
    procfs.drm_fd(TRAINER_PID, 7, "renderD128", amdgpu_6_11(3, "0000:03:00.0", vram_kib=4096))
    procfs.drm_fd(TRAINER_PID, 8, "renderD129", amdgpu_6_11(4, "0000:c4:00.0", vram_kib=6 << 20))
    drm = DrmSampler(sysfs, procfs=procfs.root, names=names(tmp_path / "ids"))

    def on_the_apu(config: RunConfig) -> list[Event]:  # NOT RECORDABLE WITHOUT AN AMD GPU
        events = gpu_run_events(config, pid=TRAINER_PID, upto_epoch=1)
        return [
            parse_event(  # through the wire, as the trainer's child sends it
                dataclasses.replace(
                    event,
                    device_name="AMD Radeon 780M",
                    torch_build="rocm",
                    gpu_uuid=None,
                    gpu_bus_id="0000:c4:00.0",
                ).to_json()
            )
            or event
            if isinstance(event, RunStarted)
            else event
            for event in events
        ]

    no_nvml = ScriptedSampler(nvml_reading(status=NO_DRIVER))
    rocm = dataclasses.replace(cuda_build("6.2"), torch_version="2.13.0+rocm6.2", hip_version="6.2")
    setup = dataclasses.replace(scripted_setup(on_the_apu), installed=lambda: rocm)
    app = fake_app(nvml=no_nvml, drm=drm, runner=setup)
    async with app.run_test(size=LARGE) as pilot:
        table = app.monitor.process_table
        await wait_until(pilot, lambda: bool(app.runner.devices) and len(table.shown) == 2)
        await pilot.press("r")
        await wait_until(pilot, lambda: table.trainer_bus_id == "0000:c4:00.0")
        marked = [line.plain.split()[:2] for line in table.lines[1:] if line.styled()]
        assert marked == [["amd1", str(TRAINER_PID)]]
