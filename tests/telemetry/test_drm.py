"""AMD and Intel GPUs beside NVIDIA's in ``gputui snapshot``, run as users run it: a child
process whose ``GPUTUI_SYSFS`` names a fake sysfs tree (tests/telemetry/sysfs_trees.py) and
whose NVML is the stand-in library."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gputui.commands.snapshot import render_snapshot_table
from gputui.telemetry.drm import DrmSampler
from gputui.telemetry.polling import Samplers
from gputui.telemetry.readings import Snapshot
from gputui.telemetry.sysfs import PROCFS_ENV, SYSFS_ENV
from tests.fakeprocfs import FakeProcfs, amdgpu_6_11
from tests.helpers import ROOT
from tests.telemetry.sysfs_trees import (
    MI300X_BUS_IDS,
    MI300X_BUSY,
    every_kind_box,
    mi300x_box,
    names,
)
from tests.ui.fakes import MPS_ON_LINUX, cpu_reading, h100s


def snapshot(
    *args: str, lib_dir: Path, sysfs: Path, gpus: int = 2, procfs: Path | None = None
) -> str:
    """``gputui snapshot ARGS`` on ``gpus`` stand-in H100s and the cards under ``sysfs``
    (with the DRM clients of ``procfs``, else of an empty one)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("FAKE_NVML_")}
    env.pop("COLUMNS", None)
    env.update(
        LD_LIBRARY_PATH=str(lib_dir),
        FAKE_NVML_GPU_COUNT=str(gpus),
        PYTHONPATH=str(ROOT),
        **{
            SYSFS_ENV: str(sysfs),
            PROCFS_ENV: str(procfs or FakeProcfs(sysfs.parent / "box").root),
        },
    )
    done = subprocess.run(
        [sys.executable, "-m", "gputui", "snapshot", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def test_snapshot_json_lists_every_vendors_gpus(fake_nvml_dir: Path, tmp_path: Path) -> None:
    sysfs = every_kind_box(tmp_path / "sys")
    data: dict[str, Any] = json.loads(snapshot("--json", lib_dir=fake_nvml_dir, sysfs=sysfs))
    gpus = data["gpus"]
    assert [(gpu["vendor"], gpu["index"]) for gpu in gpus] == [
        ("nvidia", 0),
        ("nvidia", 1),
        *(("amd", i) for i in range(10)),
        ("intel", 0),
        ("intel", 1),
    ]
    nvidia, amd, intel = gpus[:2], gpus[2:12], gpus[12:]
    assert all(gpu["bus_id"].startswith("00000000:") for gpu in nvidia)  # NVML's spelling
    # each vendor's cards in bus order: the Radeon (03), the APU (c4) among the MI300X
    assert [gpu["bus_id"] for gpu in amd] == sorted(
        ["0000:03:00.0", "0000:c4:00.0", *MI300X_BUS_IDS]
    )
    assert [gpu["bus_id"] for gpu in intel] == ["0000:4d:00.0", "0000:e3:00.0"]
    mi300 = [gpu for gpu in amd if gpu["name"] == "AMD Instinct MI300X OAM"]
    assert [gpu["bus_id"] for gpu in mi300] == list(MI300X_BUS_IDS)
    assert [gpu["utilization_percent"] for gpu in mi300] == list(MI300X_BUSY)
    for gpu in amd + intel:
        assert gpu["state"] == "ok"
        assert gpu["name"].startswith(("AMD", "Intel"))  # the board's, or from the PCI ids
        assert gpu["processes"] == []  # no DRM client in the (empty) procfs
        assert gpu["sm_clock_mhz"] > 0 and gpu["sm_clock_max_mhz"] >= gpu["sm_clock_mhz"]
        assert gpu["pcie_link_gen"] in (None, 4, 5)
    assert all(gpu["memory_total_bytes"] > 0 for gpu in amd)
    assert all(gpu["power_w"] > 0 and gpu["temperature_c"] > 0 for gpu in amd)
    # Intel's rates come from the snapshot's two samples; the tree's counters stand still,
    # as they do while a GT is busy and draws nothing (a fake's limit, not the kernel's)
    assert [(gpu["utilization_percent"], gpu["power_w"]) for gpu in intel] == [(100.0, 0.0)] * 2
    assert [gpu["power_limit_w"] for gpu in intel] == [150.0, 190.0]


def test_snapshot_table_has_a_section_per_vendor(fake_nvml_dir: Path, tmp_path: Path) -> None:
    text = snapshot(lib_dir=fake_nvml_dir, sysfs=mi300x_box(tmp_path / "sys"), gpus=1)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert any(line.startswith("NVIDIA  driver 550.54.15, CUDA 12.4, 1 GPU") for line in lines)
    assert "AMD     8 GPUs" in lines
    assert "  GPU amd4  AMD Instinct MI300X OAM" in lines
    assert "    health  2 uncorrected ECC errors" in lines
    assert any("GFX clock" in line and "2100 MHz" in line for line in lines)
    assert any("PCIe link" in line and "Gen5/5 x16/16" in line for line in lines)
    assert "  processes    none" in lines  # the procfs's DRM clients: none on these cards


def test_a_lost_card_reads_lost_in_the_table(tmp_path: Path) -> None:
    sysfs = mi300x_box(tmp_path / "sys")
    sampler = DrmSampler(sysfs, names=names(tmp_path / "ids"))
    sampler.sample()
    shutil.rmtree(sysfs / "devices" / "pci0000:00" / MI300X_BUS_IDS[1])
    snap = Snapshot(cpu=cpu_reading(), nvml=h100s(0), mps=MPS_ON_LINUX, drm=sampler.sample())
    text = render_snapshot_table(snap)
    assert "AMD     8 GPUs, 1 lost" in text
    assert "  GPU amd1  AMD Instinct MI300X OAM  lost" in text


def test_the_real_samplers_read_the_cards_under_gputui_sysfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SYSFS_ENV, str(mi300x_box(tmp_path / "sys")))
    reading = Samplers.real().drm.sample()
    assert [gpu.bus_id for gpu in reading.gpus] == list(MI300X_BUS_IDS)
    monkeypatch.setenv(SYSFS_ENV, str(tmp_path / "nothing"))
    assert Samplers.real().drm.sample().gpus == ()


def test_each_card_lists_the_processes_whose_drm_clients_are_on_it(tmp_path: Path) -> None:
    """The cards under GPUTUI_SYSFS joined with the DRM clients under GPUTUI_PROCFS by PCI
    bus id: a process on amd1 is amd1's alone, and a card nobody uses lists none."""
    procfs = FakeProcfs(tmp_path)
    procfs.process(4242, ("python3", "train.py"))
    procfs.drm_fd(4242, 5, "renderD129", amdgpu_6_11(7, MI300X_BUS_IDS[1], vram_kib=4 << 20))
    sampler = DrmSampler(
        mi300x_box(tmp_path / "sys"), procfs=procfs.root, names=names(tmp_path / "ids")
    )
    gpus = {gpu.bus_id: gpu for gpu in sampler.sample().gpus}
    [process] = gpus[MI300X_BUS_IDS[1]].processes or ()
    assert (process.pid, process.command, process.gpu_memory_bytes) == (
        4242,
        "python3 train.py",
        4 << 30,
    )
    assert gpus[MI300X_BUS_IDS[0]].processes == ()


def test_a_fifo_in_sysfs_or_fdinfo_is_na_never_a_hang_nor_a_lost_gpu(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """A FIFO where a card's file or a client's fdinfo should be (a planted tree, a driver's
    oddity): a plain ``open`` waits for a writer for ever. That one reading is n/a; every GPU
    and the other process are still there."""
    sysfs = every_kind_box(tmp_path / "sys")
    cards = sysfs / "devices" / "pci0000:00"
    radeon_busy = cards / "0000:03:00.0" / "gpu_busy_percent"
    (arc_limit,) = (cards / "0000:e3:00.0" / "hwmon").glob("hwmon*/power1_max")
    for path in (radeon_busy, arc_limit):
        path.unlink()
        os.mkfifo(path)
    procfs = FakeProcfs(tmp_path)
    for pid, bus_id in ((4242, MI300X_BUS_IDS[0]), (4343, MI300X_BUS_IDS[1])):
        procfs.process(pid, ("python3", f"train{pid}.py"))
        procfs.drm_fd(pid, 5, "renderD129", amdgpu_6_11(7, bus_id, vram_kib=4 << 20))
    fdinfo = procfs.root / "4343" / "fdinfo" / "5"
    fdinfo.unlink()
    os.mkfifo(fdinfo)
    data = json.loads(
        snapshot("--json", lib_dir=fake_nvml_dir, sysfs=sysfs, gpus=1, procfs=procfs.root)
    )
    gpus = {gpu["bus_id"]: gpu for gpu in data["gpus"]}
    assert len(gpus) == 1 + 10 + 2 and all(gpu["state"] == "ok" for gpu in gpus.values())
    assert gpus["0000:03:00.0"]["utilization_percent"] is None
    assert gpus["0000:e3:00.0"]["power_limit_w"] is None
    assert gpus["0000:e3:00.0"]["power_w"] is not None  # its other readings are there
    [process] = gpus[MI300X_BUS_IDS[0]]["processes"]
    assert process["pid"] == 4242
    assert gpus[MI300X_BUS_IDS[1]]["processes"] == []  # its client cannot be read
