"""``gputui snapshot``: the JSON schema, the 80-column table, and one real sample of each."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import re
import socket
import time
import types
import typing
from collections.abc import Callable
from enum import Enum
from typing import Any

import psutil
import pytest

from gputui.commands.output import TEXT_WIDTH_MAX as WIDTH
from gputui.commands.snapshot import render_snapshot_table, take_snapshot
from gputui.telemetry.apple import MpsSampler
from gputui.telemetry.host import HostSampler
from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.readings import (
    NOT_IN_JSON,
    CpuReading,
    GpuProcess,
    GpuState,
    MpsReading,
    NvmlReading,
    NvmlStatus,
    Snapshot,
    Vendor,
    Workload,
    nvml_hung,
)
from gputui.telemetry.snapshot import (
    gpu_as_dict,
    gpus_from_list,
    render_snapshot_json,
    snapshot_as_dict,
    snapshot_from_dict,
)
from tests.fakenvml import FakeNvml
from tests.ui.fakes import gpu_reading, lost_gpu

GPU_KEYS = {
    "index",
    "name",
    "uuid",
    "state",
    "utilization_percent",
    "memory_utilization_percent",
    "memory_used_bytes",
    "memory_total_bytes",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "energy_j",
    "energy_joules",
    "fan_percent",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "memory_clock_max_mhz",
    "pcie_rx_bytes_per_s",
    "pcie_tx_bytes_per_s",
    "pcie_link_gen",
    "pcie_link_gen_max",
    "pcie_link_width_lanes",
    "pcie_link_width_max_lanes",
    "processes",
}
WORKLOAD_KEYS = {
    "container": None,
    "container_id": None,
    "runtime": None,
    "pod": None,
    "pod_uid": None,
    "namespace": None,
    "slurm_job": None,
    "slurm_step": None,
    "unit": None,
}
"""A process's workload keys, as written for one that runs in nothing known."""
PROCESS_KEYS = {
    "pid",
    "user",
    "command",
    "gpu_memory_bytes",
    "sm_utilization_percent",
    "cpu_percent",
    "rss_bytes",
    "elapsed_s",
    *WORKLOAD_KEYS,
}
NVML_KEYS = {
    "available",
    "driver_version",
    "cuda_driver_version",
    "error",
    "error_code",
    "host_pids",
    "hung_call",
    "hung_seconds",
}

CPU = CpuReading(
    utilization_percent=37.5,
    per_core_percent=(25.0, 50.0),
    logical_cores=2,
    physical_cores=1,
    model_name="Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz",
    load_average=(0.5, 0.25, 0.125),
    frequency_mhz=2300.0,
    frequency_max_mhz=None,
    memory_used_bytes=3 * 2**30,
    memory_total_bytes=16 * 2**30,
    swap_used_bytes=0,
    swap_total_bytes=0,
    self_cpu_percent=1.5,
    self_rss_bytes=40 * 2**20,
    taken_at=1.0,
)

GPU = gpu_reading(
    0,
    uuid="GPU-6f1c2a9e-3b7d-4c5e-9a1f-2d8e7b6c5a40",
    utilization_percent=87.0,
    memory_utilization_percent=41.0,
    memory_used_bytes=60 * 2**30,
    temperature_c=66.0,
    power_w=512.25,
    sm_clock_mhz=1755.0,
    pcie_rx_bytes_per_s=3.5 * 2**30,
    pcie_tx_bytes_per_s=None,
    processes=(
        GpuProcess(
            pid=4242,
            user="alice",
            command="python train.py --model resnet152 --batch-size 512 --epochs 90 "
            "--data /datasets/imagenet/train --workers 16",
            gpu_memory_bytes=58 * 2**30,
            cpu_percent=97.5,
            rss_bytes=6 * 2**30,
            elapsed_s=4000.0,
            workload=Workload(slurm_job="1234", slurm_step="batch", unit="slurmstepd.scope"),
        ),
        GpuProcess(pid=77, user=None, command=None, gpu_memory_bytes=None),
    ),
)

LOST = lost_gpu(1)

NVML = NvmlReading(
    status=NvmlStatus(available=True, driver_version="550.54.15", cuda_driver_version="12.4"),
    gpus=(GPU, LOST),
    taken_at=1.0,
)
NO_NVML = NvmlReading(
    status=NvmlStatus(
        available=False,
        error="The NVIDIA driver is not loaded; install it or run `sudo modprobe nvidia`, "
        "then start gputui again.",
    ),
    gpus=(),
    taken_at=1.0,
)
LINUX_MPS = MpsReading(
    supported_platform=False,
    message="MPS is Apple's GPU backend for Macs; this machine runs Linux.",
)
MAC_MPS = MpsReading(
    supported_platform=True,
    message=None,
    gpu_name="Apple M2 Pro (19-core GPU)",
    utilization_percent=23.0,
    memory_in_use_bytes=1148452864,
    torch_mps_built=True,
    torch_mps_available=True,
)

SNAPSHOT = Snapshot(cpu=CPU, nvml=NVML, mps=LINUX_MPS)


# --- JSON -------------------------------------------------------------------------------


def test_json_has_the_documented_schema() -> None:
    data = json.loads(render_snapshot_json(SNAPSHOT))
    assert list(data) == ["host", "at", "cpu", "gpus", "nvml", "mps"]
    assert len(data["gpus"]) == 2
    for gpu in data["gpus"]:
        assert set(gpu) >= GPU_KEYS
        for process in gpu["processes"]:
            assert set(process) >= PROCESS_KEYS
    assert set(data["nvml"]) == NVML_KEYS


def test_json_says_where_and_when_and_rounds_away_float_noise() -> None:
    noisy = dataclasses.replace(
        CPU, utilization_percent=93.75000000000445, taken_at=time.monotonic()
    )
    data = json.loads(render_snapshot_json(dataclasses.replace(SNAPSHOT, cpu=noisy)))
    assert data["host"] == socket.gethostname()
    assert dt.datetime.fromisoformat(data["at"]).utcoffset() == dt.timedelta(0)
    assert data["cpu"]["utilization_percent"] == 93.75


def test_json_carries_the_values() -> None:
    data = snapshot_as_dict(SNAPSHOT)
    ok, lost = data["gpus"]
    assert ok["state"] == "ok"
    assert ok["utilization_percent"] == 87.0
    assert ok["memory_total_bytes"] == 80 * 2**30
    assert ok["power_w"] == 512.25
    assert ok["processes"][0] == {
        "pid": 4242,
        "local_pid": None,  # as built here; the sampler sets it (nvml/test_processes.py)
        "user": "alice",
        "command": GPU.processes[0].command,
        "gpu_memory_bytes": 58 * 2**30,
        "sm_utilization_percent": None,
        "kind": "compute",
        "create_time": None,
        "cpu_percent": 97.5,
        "rss_bytes": 6 * 2**30,
        "elapsed_s": 4000.0,
        **WORKLOAD_KEYS,
        "slurm_job": "1234",
        "slurm_step": "batch",
        "unit": "slurmstepd.scope",
    }
    assert lost["state"] == "lost"
    assert lost["index"] == 1
    assert data["nvml"] == {
        "available": True,
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "error": None,
        "error_code": None,
        "host_pids": False,
        "hung_call": None,
        "hung_seconds": None,
    }
    assert data["cpu"]["per_core_percent"] == [25.0, 50.0]
    assert data["mps"]["supported_platform"] is False


def test_json_unsupported_readings_are_null() -> None:
    text = render_snapshot_json(SNAPSHOT)
    ok, lost = json.loads(text)["gpus"]
    assert ok["fan_percent"] is None
    assert ok["pcie_tx_bytes_per_s"] is None
    assert ok["processes"][1] == {
        "local_pid": None,
        "pid": 77,
        "user": None,
        "command": None,
        "gpu_memory_bytes": None,
        "sm_utilization_percent": None,
        "kind": "compute",
        "create_time": None,
        "cpu_percent": None,
        "rss_bytes": None,
        "elapsed_s": None,
        **WORKLOAD_KEYS,
    }
    for key in GPU_KEYS - {"index", "name", "uuid", "state", "processes"}:
        assert lost[key] is None, key
    assert '"fan_percent": null' in text


def test_json_never_holds_nan_or_infinity() -> None:
    odd = dataclasses.replace(GPU, power_w=math.nan, temperature_c=math.inf)
    snapshot = dataclasses.replace(SNAPSHOT, nvml=dataclasses.replace(NVML, gpus=(odd,)))
    (gpu,) = json.loads(render_snapshot_json(snapshot))["gpus"]
    assert gpu["power_w"] is None
    assert gpu["temperature_c"] is None


def test_json_without_nvml_says_why() -> None:
    data = snapshot_as_dict(dataclasses.replace(SNAPSHOT, nvml=NO_NVML))
    assert data["gpus"] == []
    assert data["nvml"]["available"] is False
    assert data["nvml"]["error"] == NO_NVML.status.error


# --- table ------------------------------------------------------------------------------


def _lines(snapshot: Snapshot) -> list[str]:
    text = render_snapshot_table(snapshot)
    lines = text.splitlines()
    too_wide = [line for line in lines if len(line) > WIDTH]
    assert not too_wide, too_wide
    assert all(line == line.rstrip() for line in lines)
    return lines


@pytest.mark.parametrize("width", [80, 60, 40, 32, 20])
def test_table_fits_the_width_and_wraps_rather_than_cuts(width: int) -> None:
    """Issue 18: ``COLUMNS=40 gputui snapshot`` ran to 80 columns. Narrower, the GPU's
    readings stack one a line, a value wraps under its column, a command goes under its
    row; a figure keeps its unit and nothing is cut but the command."""
    snapshot = dataclasses.replace(SNAPSHOT, mps=MAC_MPS)
    lines = render_snapshot_table(snapshot, width).splitlines()
    assert max(len(line) for line in lines) <= width, lines
    assert all(line == line.rstrip() for line in lines)
    text = "\n".join(lines)
    words = " ".join(text.split())
    for figure in ("60.0/80.0 GiB", "1755 / 1980 MHz", "512 W / 700 W", "58.0 GiB", "3.5 GiB/s"):
        assert figure in text or (width < 32 and figure in words), figure
    assert "2 GPUs, 1 lost" in text or width < 40
    assert "Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz" in words
    assert "Apple M2 Pro (19-core GPU)" in words
    assert "GPU-6f1c2a9e-3b7d-4c5e-9a1f-2d8e7b6c5a40" in re.sub(r"\n +", "", text)
    assert " 25%  50%" in text or width < 32
    if width <= 40:  # one reading a line; the command under its row
        assert _line(lines, "mem bw") != _line(lines, "utilization  87%")
        assert any(line.startswith("      python train") for line in lines)


def _line(lines: list[str], start: str) -> str:
    """The first line that starts with ``start``, after its indent."""
    return next(line for line in lines if line.strip().startswith(start))


def test_table_shows_each_section_within_80_columns() -> None:
    lines = _lines(SNAPSHOT)
    text = "\n".join(lines)
    assert lines[0] == "CPU     Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz"
    assert _line(lines, "CPUs").split()[1:] == ["2", "threads,", "1", "core"]
    assert "NVIDIA  driver 550.54.15, CUDA 12.4, 2 GPUs, 1 lost" in lines
    assert "MPS     MPS is Apple's GPU backend for Macs; this machine runs Linux." in lines
    assert "GPU-6f1c2a9e-3b7d-4c5e-9a1f-2d8e7b6c5a40" in text
    assert _line(lines, "per core").split()[2:] == ["25%", "50%"]
    assert _line(lines, "memory ").split()[1] == "3.0/16.0"


def test_table_aligns_gpu_readings_in_columns() -> None:
    lines = _lines(SNAPSHOT)
    utilization = _line(lines, "utilization  87%")
    power = _line(lines, "power")
    assert utilization.index("mem bw") == power.index("fan")
    assert "512 W / 700 W" in power
    assert power.split()[-1] == "n/a"  # no fan on this board
    assert "1755 / 1980 MHz" in _line(lines, "SM clock")
    assert _line(lines, "PCIe rx").endswith("PCIe tx      n/a")
    memory_clock = _line(lines, "mem clock")
    assert memory_clock.split()[2:] == [
        "2619",
        "/",
        "2619",
        "MHz",
        "PCIe",
        "link",
        "Gen5/5",
        "x16/16",
    ]
    assert memory_clock.index("PCIe link") == power.index("fan")


def test_table_marks_a_lost_gpu_and_keeps_the_others() -> None:
    lines = _lines(SNAPSHOT)
    assert _line(lines, "GPU 1").endswith("lost")
    assert _line(lines, "GPU 0") == "  GPU 0  NVIDIA H100 80GB HBM3"


def test_table_lists_processes_with_long_commands_cut() -> None:
    lines = _lines(SNAPSHOT)
    header = _line(lines, "GPU   PID")
    assert " ".join(header.split()) == (
        "GPU PID USER GPU MEMORY HOST MEMORY ELAPSED COMMAND"
    )  # no CPU %: one sample has none
    alice = _line(lines, "0  4242")
    assert alice.split()[:8] == ["0", "4242", "alice", "58.0", "GiB", "6.0", "GiB", "1:06:40"]
    assert alice.endswith("…")
    assert len(alice) == WIDTH
    unknown = _line(lines, "0    77")
    assert unknown.split()[2:] == ["n/a"] * 5


def test_table_without_nvml_is_one_sentence_wrapped() -> None:
    lines = _lines(dataclasses.replace(SNAPSHOT, nvml=NO_NVML))
    start = lines.index(next(line for line in lines if line.startswith("NVIDIA")))
    assert lines[start].startswith("NVIDIA  The NVIDIA driver is not loaded;")
    assert lines[start + 1].startswith("        ")  # wrapped under the sentence
    assert "sudo modprobe nvidia" in " ".join(line.strip() for line in lines[start : start + 3])


def test_table_on_a_mac() -> None:
    lines = _lines(dataclasses.replace(SNAPSHOT, mps=MAC_MPS))
    assert "MPS     Apple M2 Pro (19-core GPU)" in lines
    assert _line(lines, "PyTorch MPS").split()[2:] == ["built", "yes,", "available", "yes"]
    assert _line(lines, "memory in use").endswith("1.1 GiB")
    unknown = dataclasses.replace(MAC_MPS, torch_mps_built=None, torch_mps_available=None)
    lines = _lines(dataclasses.replace(SNAPSHOT, mps=unknown))
    assert _line(lines, "PyTorch MPS").endswith("not known yet")


def test_table_shows_na_for_every_unknown() -> None:
    cpu = dataclasses.replace(
        CPU,
        model_name=None,
        physical_cores=None,
        load_average=None,
        frequency_mhz=None,
        self_cpu_percent=None,
        self_rss_bytes=None,
    )
    lines = _lines(dataclasses.replace(SNAPSHOT, cpu=cpu))
    assert lines[0] == "CPU     n/a"
    assert _line(lines, "CPUs").endswith("2 threads")
    assert _line(lines, "load average").endswith("n/a")
    assert _line(lines, "clock").endswith("n/a")
    assert _line(lines, "gputui").endswith("n/a CPU, n/a RSS")


def test_table_of_many_cores_wraps_within_80_columns() -> None:
    cpu = dataclasses.replace(
        CPU, logical_cores=128, per_core_percent=tuple(float(i % 101) for i in range(128))
    )
    lines = _lines(dataclasses.replace(SNAPSHOT, cpu=cpu))
    per_core = [line for line in lines if line.endswith("%") and "%" in line and "  " in line]
    assert sum(line.count("%") for line in per_core) >= 128


# --- take_snapshot ----------------------------------------------------------------------


def test_take_snapshot_samples_each_part_once(fake_nvml: FakeNvml) -> None:
    with NvmlSampler(fake_nvml.path) as nvml:
        snapshot = take_snapshot(
            host=HostSampler(), nvml=nvml, mps=MpsSampler(platform="linux"), cpu_window_s=0.1
        )
    assert fake_nvml.calls("nvmlDeviceGetUtilizationRates") == 2  # once per GPU
    assert snapshot.nvml.status.available is True
    assert [gpu.index for gpu in snapshot.nvml.gpus] == [0, 1]
    assert snapshot.mps.supported_platform is False
    assert 0.0 <= snapshot.cpu.utilization_percent <= 100.0
    assert snapshot.cpu.taken_at >= snapshot.nvml.taken_at  # the window covered NVML's sample
    assert json.loads(render_snapshot_json(snapshot))["nvml"]["driver_version"] == "550.54.15"
    _lines(snapshot)


def test_json_health_read_through_the_stand_in(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    gone = next(pid for pid in range(4_000_000, 4_100_000) if not psutil.pid_exists(pid))
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", f"0:4242:1024,0:4343:2048,1/0:{gone}:2048")
    fake_nvml_env.setenv("FAKE_NVML_PROCESS_UTILIZATION", "0:4242:64")
    fake_nvml_env.setenv("FAKE_NVML_MIG_MODE", "1:1")
    fake_nvml_env.setenv("FAKE_NVML_MIG_DEVICES", "1:5:0:1024:9856")
    with NvmlSampler(fake_nvml.path) as nvml:
        first = take_snapshot(
            host=HostSampler(), nvml=nvml, mps=MpsSampler(platform="linux"), cpu_window_s=0.1
        )
        second = take_snapshot(
            host=HostSampler(), nvml=nvml, mps=MpsSampler(platform="linux"), cpu_window_s=0.1
        )
    before, after = (json.loads(render_snapshot_json(s))["gpus"][0] for s in (first, second))
    assert before["energy_joules"] == 0.0  # since the sampler's first reading
    assert after["energy_joules"] == pytest.approx(after["energy_j"] - before["energy_j"])
    assert after["energy_joules"] > 0.0
    busy, idle = after["processes"]
    assert (busy["pid"], busy["sm_utilization_percent"]) == (4242, 64.0)
    assert (idle["pid"], idle["sm_utilization_percent"]) == (4343, 0.0)  # no kernel ran
    assert after["mig_mode"] is False and after["mig_devices"] is None
    mig = json.loads(render_snapshot_json(second))["gpus"][1]
    assert mig["mig_mode"] is True
    assert mig["mig_devices"] == [
        {
            "index": 0,
            "gpu_instance_id": 5,
            "compute_instance_id": 0,
            "memory_used_bytes": 1024 * 2**20,
            "memory_total_bytes": 9856 * 2**20,
            "processes": [
                {
                    "pid": gone,
                    "local_pid": gone,
                    "user": None,  # no such local process
                    "command": None,
                    "gpu_memory_bytes": 2048,
                    "sm_utilization_percent": None,  # NVML has none per process in MIG mode
                    "kind": "compute",
                    "create_time": None,
                    "cpu_percent": None,  # not read for a MIG device's processes
                    "rss_bytes": None,
                    "elapsed_s": None,
                    **WORKLOAD_KEYS,
                }
            ],
        }
    ]


def test_memory_clock_and_pcie_link_read_through_the_stand_in(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    """GPU 1 answers NotSupported for its memory clock and its PCIe link: null, and n/a."""
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "1:mem_clock,1:pcie_link")
    with NvmlSampler(fake_nvml.path) as nvml:
        snapshot = take_snapshot(
            host=HostSampler(), nvml=nvml, mps=MpsSampler(platform="linux"), cpu_window_s=0.1
        )
    first, second = json.loads(render_snapshot_json(snapshot))["gpus"]
    keys = [
        "memory_clock_mhz",
        "memory_clock_max_mhz",
        "pcie_link_gen_max",
        "pcie_link_width_lanes",
        "pcie_link_width_max_lanes",
    ]
    assert [first[key] for key in keys] == [2619.0, 2619.0, 5, 16, 16]
    assert first["pcie_link_gen"] in (1, 5)  # Gen1 while idle
    assert all(second[key] is None for key in [*keys, "pcie_link_gen"])
    assert second["sm_clock_mhz"] is not None
    lines = _lines(snapshot)
    first_clock, second_clock = (line for line in lines if "mem clock" in line)
    assert "2619 / 2619 MHz" in first_clock and "x16/16" in first_clock
    assert second_clock.split() == ["mem", "clock", "n/a", "/", "n/a", "PCIe", "link", "n/a"]


def test_processes_nvml_cannot_list_are_n_a_not_none() -> None:
    unlisted = dataclasses.replace(SNAPSHOT.nvml.gpus[0], processes=None)
    snapshot = dataclasses.replace(
        SNAPSHOT, nvml=dataclasses.replace(SNAPSHOT.nvml, gpus=(unlisted,))
    )
    assert json.loads(render_snapshot_json(snapshot))["gpus"][0]["processes"] is None
    lines = render_snapshot_table(snapshot).splitlines()
    assert "  processes    n/a on GPU 0 (NVML cannot list them)" in lines
    assert not any(line.strip() == "processes    none" for line in lines)


def test_take_snapshot_ends_at_its_deadline_with_the_gpus_that_answered(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    """A GPU whose driver call does not return: the snapshot ends at its deadline anyway,
    GPU 0 read, GPU 1 marked hung with the call named, in the table and the JSON."""
    fake_nvml_env.setenv("FAKE_NVML_HANG", "1:temperature=600")
    nvml = NvmlSampler(fake_nvml.path)
    snapshot = take_snapshot(
        host=HostSampler(), nvml=nvml, mps=MpsSampler(platform="linux"), timeout_s=1.0
    )
    assert nvml_hung(snapshot.nvml)
    answered, hung = snapshot.nvml.gpus
    assert answered.state is GpuState.OK and answered.temperature_c is not None
    assert hung.state is GpuState.HUNG
    assert (hung.error or "").startswith("nvmlDeviceGetTemperature on GPU 1 has not returned")
    data = json.loads(render_snapshot_json(snapshot))
    assert data["gpus"][1]["state"] == "hung"
    assert data["nvml"]["hung_call"] == "nvmlDeviceGetTemperature"  # and for how long
    assert data["nvml"]["hung_seconds"] >= 0  # how long, up to the deadline (1 s)
    table = render_snapshot_table(snapshot)
    assert "2 GPUs, 1 hung" in table and "GPU 1  NVIDIA H100 80GB HBM3  hung" in table
    fake_nvml.release_hangs()  # the sample was told to stop: it makes no call after this one
    nvml.close()  # waits for the sample to end
    assert fake_nvml.calls("nvmlDeviceGetPowerUsage", 1) == 0
    assert fake_nvml.calls("nvmlShutdown") == 1


# --- read back from JSON (a recorded frame) --------------------------------------------


def test_json_reads_back_into_the_same_readings(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    """Processes, MIG devices, throttle reasons and a lost GPU included: the readings a
    recording gives back draw the same table and write the same JSON."""
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", f"0:{os.getpid()}:1024,1/0:4343:2048")
    fake_nvml_env.setenv("FAKE_NVML_PROCESS_UTILIZATION", f"0:{os.getpid()}:64")
    fake_nvml_env.setenv("FAKE_NVML_MIG_MODE", "1:1")
    fake_nvml_env.setenv("FAKE_NVML_MIG_DEVICES", "1:5:0:1024:9856")
    fake_nvml_env.setenv("FAKE_NVML_CLOCK_EVENTS", "0:0x24")
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_LOST", "2:0")
    with NvmlSampler(fake_nvml.path) as nvml:
        snapshot = take_snapshot(
            host=HostSampler(), nvml=nvml, mps=MpsSampler(platform="linux"), cpu_window_s=0.1
        )
    # the codec at full precision: --json's rounding to a thousandth may move a table's
    # last digit (2.6250001 shows 2.63, its 2.625 shows 2.62)
    data = json.loads(json.dumps(snapshot_as_dict(snapshot)))
    back = snapshot_from_dict(data, taken_at=12.5)
    assert snapshot_as_dict(back) == data
    assert render_snapshot_table(back) == render_snapshot_table(snapshot)
    assert back.cpu.taken_at == back.nvml.taken_at == back.mps.taken_at == 12.5
    assert back.nvml.gpus[2].state is GpuState.LOST
    assert back.nvml.gpus[0].throttle_reasons == ("power cap", "thermal")


def test_a_recorded_source_s_age_makes_its_reading_that_much_older() -> None:
    data = snapshot_as_dict(SNAPSHOT) | {"ages": {"nvml": 31.5, "drm": 2}}
    back = snapshot_from_dict(data, taken_at=100.0)
    assert (back.cpu.taken_at, back.nvml.taken_at, back.drm.taken_at) == (100.0, 68.5, 98.0)


def _filled(kind: Any) -> Any:
    """A value of type ``kind`` unlike any field's default: a reading with every field set."""
    if typing.get_origin(kind) in (types.UnionType, typing.Union):
        return _filled(next(arm for arm in typing.get_args(kind) if arm is not type(None)))
    if typing.get_origin(kind) is tuple:
        args = typing.get_args(kind)
        return tuple(_filled(arg) for arg in (args[:1] if args[-1] is Ellipsis else args))
    if dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        return kind(**{name: _filled(hint) for name, hint in hints.items()})
    if issubclass(kind, Enum):
        return list(kind)[-1]
    return {bool: True, int: 7, float: 2.5, str: "set"}[kind]


def _written(value: Any) -> Any:
    """``value`` with only what JSON holds: each reading's fields not marked NOT_IN_JSON."""
    if isinstance(value, tuple):
        return [_written(item) for item in value]
    if not dataclasses.is_dataclass(value):
        return value
    fields = dataclasses.fields(value)
    assert all(field.metadata[NOT_IN_JSON] for field in fields if NOT_IN_JSON in field.metadata)
    kept = [field.name for field in fields if NOT_IN_JSON not in field.metadata]
    return {name: _written(getattr(value, name)) for name in kept}


def test_every_field_of_every_reading_is_written_and_read_back_or_marked_not_in_json() -> None:
    """One schema, from the readings' fields, for snapshot --json, /snapshot, a recording,
    its replay and summary, and a fleet's hosts: a value set in every field of every reading
    comes back from JSON in each field not marked NOT_IN_JSON (with why). A field a reading
    gains reaches them all, or this fails (a type JSON cannot hold, a part of the snapshot
    the schema does not write)."""
    filled = _filled(Snapshot)
    gpu = filled.nvml.gpus[0]
    nvidia, amd = (dataclasses.replace(gpu, vendor=each) for each in (Vendor.NVIDIA, Vendor.AMD))
    snapshot = dataclasses.replace(
        filled,
        nvml=dataclasses.replace(filled.nvml, gpus=(nvidia,)),
        drm=dataclasses.replace(filled.drm, gpus=(amd,)),
    )
    back = snapshot_from_dict(json.loads(render_snapshot_json(snapshot)), taken_at=9.0)
    assert _written(back) == _written(snapshot)
    assert back.cpu.taken_at == back.nvml.taken_at == 9.0  # the frame's time, not written
    assert gpus_from_list([gpu_as_dict(gpu)]) == (gpu,)  # a fleet's host's GPUs, whole


def test_json_of_an_older_gputui_reads_with_the_defaults_of_what_it_lacks() -> None:
    data = snapshot_as_dict(SNAPSHOT)
    del data["gpus"][0]["pcie_link_gen"], data["gpus"][0]["processes"][0]["elapsed_s"]
    back = snapshot_from_dict(data)
    assert back.nvml.gpus[0].pcie_link_gen is None
    assert back.nvml.gpus[0].processes[0].elapsed_s is None


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            lambda d: d["gpus"][0].update(utilization_percent="high"),
            "gpus[0].utilization_percent is 'high'",
        ),
        (lambda d: d["gpus"][0].update(state="melted"), "gpus[0].state is 'melted'"),
        (lambda d: d["gpus"][0].update(index=True), "gpus[0].index is True"),
        (lambda d: d["gpus"][0].update(processes="none"), "gpus[0].processes is not a list"),
        (lambda d: d["gpus"][0]["processes"][0].pop("pid"), "gpus[0].processes[0] has no 'pid'"),
        (lambda d: d["cpu"].update(load_average=[1.0, 2.0]), "cpu.load_average is not a list of 3"),
        (lambda d: d.pop("mps"), "the readings have no 'mps'"),
        (lambda d: d.update(gpus={}), "gpus is not a list"),
        (lambda d: d.update(nvml=[]), "nvml is not an object"),
        (lambda d: d.update(ages=[]), "ages is not an object"),
        (lambda d: d.update(ages={"nvml": -1.0}), "ages.nvml is not an age in seconds"),
        (lambda d: d.update(ages={"cpu": "old"}), "ages.cpu is not an age in seconds"),
    ],
)
def test_json_that_does_not_fit_the_readings_says_where(
    change: Callable[[dict[str, Any]], object], said: str
) -> None:
    data = snapshot_as_dict(SNAPSHOT)
    change(data)
    with pytest.raises(ValueError, match=re.escape(said)):
        snapshot_from_dict(data)


# --- NVLink's links (issue 30) ----------------------------------------------------------


def test_nvlink_links_down_are_numbered_in_the_json_and_the_table_and_read_back(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    """GPU 0 has 18 links, 0 and 17 down; GPU 1 has 4, all up; GPU 2 has no NVLink. The
    table names the links down beside the count, its columns where they were."""
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_NVLINKS", "0:18,1:4")
    fake_nvml_env.setenv("FAKE_NVML_NVLINKS_DOWN", "0:0x20001")
    with NvmlSampler(fake_nvml.path) as nvml:
        snapshot = take_snapshot(
            host=HostSampler(), nvml=nvml, mps=MpsSampler(platform="linux"), cpu_window_s=0.1
        )
    data = json.loads(render_snapshot_json(snapshot))
    assert [gpu["nvlink_links_down"] for gpu in data["gpus"]] == [[0, 17], [], None]
    back = snapshot_from_dict(data)
    assert [gpu.nvlink_links_down for gpu in back.nvml.gpus] == [(0, 17), (), None]
    assert snapshot_as_dict(back).items() <= data.items()  # (data also says where and when)
    lines = render_snapshot_table(snapshot).splitlines()
    nvlink = [line.split() for line in lines if line.strip().startswith("NVLink  ")]
    assert nvlink == [
        ["NVLink", "16", "up,", "2", "down", "links", "down", "0,", "17"],
        ["NVLink", "4", "up"],  # all up: as before
    ]
    down = next(line for line in lines if "links down" in line)
    power = next(line for line in lines if line.strip().startswith("power"))
    assert down.index("links down") == power.index("fan")
    del data["gpus"][0]["nvlink_links_down"]  # an older gputui's frame
    assert snapshot_from_dict(data).nvml.gpus[0].nvlink_links_down is None


def test_a_run_of_links_down_is_written_as_its_ends() -> None:
    gpu = gpu_reading(0, nvlink_links_active=12, nvlink_links_down=(0, 1, 2, 3, 8, 17))
    snapshot = dataclasses.replace(SNAPSHOT, nvml=dataclasses.replace(NVML, gpus=(gpu,)))
    (line,) = [line for line in _lines(snapshot) if "links down" in line]
    assert line.split()[-4:] == ["down", "0-3,", "8,", "17"]
