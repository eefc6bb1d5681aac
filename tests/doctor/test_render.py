"""The report as text (80 columns) and as JSON (a schema scripts rely on)."""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import replace

import pytest

from gputui.device import Device
from gputui.doctor.checks import Check, DeviceReport, DoctorReport, Status
from gputui.doctor.diagnose import diagnose
from gputui.doctor.render import is_command, render_json, render_text, report_as_dict
from gputui.doctor.torch_facts import TorchFacts
from gputui.format import fmt_bandwidth, fmt_tflops
from gputui.telemetry.readings import NvmlReading, NvmlStatus
from tests.doctor.doctor_facts import CUDA_TORCH, NO_CUDA, facts, nvml
from tests.readme import keys_of, readme_json

CHECK_KEYS = {"name", "status", "message", "fix"}
DEVICE_KEYS = {
    "device",
    "name",
    "compute_capability",
    "memory_bytes",
    "uuid",
    "nvml_index",
    "copy_bytes_per_s",
    "h2d_pageable_bytes_per_s",
    "h2d_pinned_bytes_per_s",
    "d2h_pageable_bytes_per_s",
    "d2h_pinned_bytes_per_s",
    "matmul_fp32_tflops",
    "matmul_bf16_tflops",
    "notes",
}

FACT_TYPES: dict[str, type] = {
    "torch_version": str,
    "torch_build": str,
    "torch_cuda_version": str,
    "cuda_available": bool,
    "cuda_device_count": int,
    "driver_version": str,
    "driver_cuda_version": str,
    "gpu_count": int,
    "nvml_error_code": int,
}
"""Each fact's type in the JSON (any may be null)."""

GPU = DeviceReport(
    device=Device("cuda", 0),
    name="NVIDIA H100 80GB HBM3",
    compute_capability="9.0",
    memory_bytes=85_520_809_984,
    copy_bytes_per_s=1.4e12,
    h2d_pageable_bytes_per_s=9.5e9,
    h2d_pinned_bytes_per_s=2.4e10,
    d2h_pageable_bytes_per_s=7.1e9,
    d2h_pinned_bytes_per_s=2.5e10,
    matmul_fp32_tflops=48.2,
    matmul_bf16_tflops=612.0,
    notes=("transfers: 256 MiB each way",),
)
CPU = DeviceReport(
    device=Device("cpu"),
    name="Intel(R) Xeon(R)",
    memory_bytes=2**34,
    copy_bytes_per_s=5e9,
    matmul_fp32_tflops=0.19,
    matmul_bf16_tflops=None,
    notes=("bf16 matmul: RuntimeError: not here",),
)


def validate_schema(data: dict) -> None:
    """Assert ``data`` is the doctor's JSON: exact keys, the right types, finite numbers."""
    assert set(data) == {"checks", "devices", "facts", "summary"}
    assert data["checks"], "a report always has checks"
    for item in data["checks"]:
        assert set(item) == CHECK_KEYS
        assert item["status"] in {"ok", "warn", "fail", "skip", "info"}
        assert isinstance(item["name"], str) and item["name"]
        assert isinstance(item["message"], str) and item["message"]
        assert item["fix"] is None or (isinstance(item["fix"], str) and item["fix"])
    for device in data["devices"]:
        assert set(device) == DEVICE_KEYS
        assert isinstance(device["device"], str) and isinstance(device["name"], str)
        assert isinstance(device["notes"], list)
        assert device["uuid"] is None or device["uuid"].startswith(("GPU-", "MIG-"))
        for key in DEVICE_KEYS - {"device", "name", "compute_capability", "notes", "uuid"}:
            value = device[key]
            assert value is None or (isinstance(value, (int, float)) and math.isfinite(value))
    assert set(data["facts"]) == FACT_TYPES.keys()
    for key, kind in FACT_TYPES.items():
        value = data["facts"][key]
        assert value is None or type(value) is kind, key  # type(): a bool is no count
    assert data["facts"]["torch_build"] in {None, "cuda", "rocm", "cpu"}
    statuses = [item["status"] for item in data["checks"]]
    assert data["summary"] == {s: statuses.count(s) for s in ("ok", "warn", "fail", "skip", "info")}


def test_json_schema() -> None:
    report = DoctorReport(checks=diagnose(facts()).checks, devices=(CPU, GPU))
    data = json.loads(render_json(report))
    validate_schema(data)
    assert data == report_as_dict(report)
    build = next(item for item in data["checks"] if item["name"] == "torch build")
    assert build["status"] == "fail"
    assert build["fix"].endswith("--index-url https://download.pytorch.org/whl/cu124")
    assert data["devices"][1]["matmul_bf16_tflops"] == 612.0
    assert data["devices"][0]["matmul_bf16_tflops"] is None


def test_each_fix_is_printed_once() -> None:
    """Issue 43: a CPU-only torch beside a driver printed its install command under `torch
    build` and again under `torch.cuda`, as a driver too old for the build did under `driver
    vs build` and `torch.cuda`; the second now points at the first. The JSON keeps each
    check's own fix, for scripts."""
    too_old = replace(NO_CUDA, init_error=None, warnings=("The NVIDIA driver is too old",))
    old_driver = facts(torch=replace(CUDA_TORCH, cuda=too_old), nvml=nvml(cuda="11.8"))
    for report in (diagnose(facts()), diagnose(old_driver)):
        text = render_text(report)
        assert text.count("--index-url") == 1, text
        assert "fix: as for " in text
        assert [item["fix"] for item in report_as_dict(report)["checks"]] == [
            c.fix for c in report.checks
        ]


def test_the_readme_shows_the_json_as_it_is() -> None:
    """Its keys at every depth; its one check, facts and summary are these facts' own."""
    shown = readme_json("doctor-json")
    diagnosed = diagnose(facts())
    real = report_as_dict(DoctorReport(diagnosed.checks, (CPU,), diagnosed.facts))
    assert keys_of(shown) == keys_of(real)
    assert all(check in real["checks"] for check in shown["checks"])
    assert (shown["facts"], shown["summary"]) == (real["facts"], real["summary"])


def test_json_carries_the_facts_and_a_summary() -> None:
    """Issue 18: scripts had only sentences; now the facts, and the checks counted."""
    data = report_as_dict(diagnose(facts()))
    validate_schema(data)
    assert data["facts"] == {
        "torch_version": "2.13.0+cpu",
        "torch_build": "cpu",
        "torch_cuda_version": None,
        "cuda_available": False,
        "cuda_device_count": 0,
        "driver_version": "550.54.15",
        "driver_cuda_version": "12.4",
        "gpu_count": 2,
        "nvml_error_code": None,
    }
    assert data["summary"] == {"ok": 3, "warn": 0, "fail": 2, "skip": 3, "info": 3}


def test_facts_not_gathered_are_null() -> None:
    stopped = TorchFacts(timed_out=True, failure="the torch probe timed out after 1 s")
    mismatch = NvmlReading(
        NvmlStatus(available=False, error="versions differ", error_code=18), (), 0.0
    )
    data = report_as_dict(diagnose(facts(torch=stopped, nvml=mismatch)))
    validate_schema(data)
    assert data["facts"] == {**dict.fromkeys(FACT_TYPES, None), "nvml_error_code": 18}


def commands_in(text: str) -> list[list[str]]:
    """The shell words of each command on lines of its own under ``fix:``/``tip:``, read as
    a shell reads them pasted (`` \\`` and a newline continue the line)."""
    found, lines = [], text.splitlines()
    for index, line in enumerate(lines):
        if line.strip() in ("fix:", "tip:"):
            end = index + 1
            while lines[end].endswith(" \\"):
                end += 1
            found.append(shlex.split("\n".join(lines[index + 1 : end + 1]).replace("\\\n", " ")))
    return found


def words(text: str) -> str:
    """``text``'s words, one space apart: what wrapping must keep."""
    return " ".join(text.split())


@pytest.mark.parametrize("width", [80, 60, 40, 32])
def test_text_fits_the_width_and_loses_nothing(width: int) -> None:
    """Issue 18: the doctor ran to 80 columns (and a command past them) in a 40-column
    terminal. Every word is kept, no figure is parted from its unit, and a command too long
    for a line continues with `` \\`` and pastes back whole."""
    report = DoctorReport(checks=diagnose(facts()).checks, devices=(CPU, GPU))
    text = render_text(report, width)
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert all(len(line.split()) == 1 for line in too_wide), too_wide  # a URL wider than 32
    assert too_wide == [] or width < 40
    for check in report.checks:
        assert words(check.message) in words(text)
    fixes = dict.fromkeys(c.fix for c in report.checks if c.fix and is_command(c.fix))
    assert fixes and commands_in(text) == [shlex.split(fix) for fix in fixes]  # each once
    for figure in ("9.50 GB/s", "24.0 GB/s", "612 TFLOP/s", "79.6 GiB", "2 GPUs"):
        assert figure in text
    assert words(text).endswith("2 failed, 0 warnings, 3 ok, 3 skipped, 3 shown.")


def test_a_command_that_fits_is_one_line() -> None:
    report = DoctorReport(checks=diagnose(facts()).checks, devices=())
    fix = next(c.fix for c in report.checks if c.fix and is_command(c.fix))
    text = render_text(report, len(fix) + 8)
    assert "    " + fix in text.splitlines()


def test_text_layout() -> None:
    report = DoctorReport(
        checks=(
            Check("torch", Status.OK, "torch 2.13.0+cpu imports."),
            Check(
                "CUDA_VISIBLE_DEVICES",
                Status.FAIL,
                "CUDA_VISIBLE_DEVICES='' hides all 2 GPUs from torch.",
                "`unset CUDA_VISIBLE_DEVICES`, or list GPUs that exist: "
                "`export CUDA_VISIBLE_DEVICES=0,1`",
            ),
        ),
        devices=(GPU,),
    )
    lines = render_text(report).splitlines()
    assert lines[0] == "Checks"
    assert lines[1] == "  ok    torch                 torch 2.13.0+cpu imports."
    assert lines[2].startswith("  FAIL  CUDA_VISIBLE_DEVICES  CUDA_VISIBLE_DEVICES='' hides")
    fix = [line for line in lines if "fix:" in line]
    assert fix == [" " * 30 + "fix: `unset CUDA_VISIBLE_DEVICES`, or list GPUs"]
    follow = lines[lines.index(fix[0]) + 1]
    assert follow == " " * 35 + "that exist: `export CUDA_VISIBLE_DEVICES=0,1`"  # `quoted`: whole
    assert "  cuda:0  NVIDIA H100 80GB HBM3, compute 9.0, memory 79.6 GiB" in lines
    assert "Devices (GB/s: 10^9 bytes/s; a copy counts bytes read + written)" in lines
    assert "          copy on device  1.40 TB/s read + write" in lines
    assert "          host -> device  pageable 9.50 GB/s, pinned 24.0 GB/s" in lines
    assert "          matmul bf16     612 TFLOP/s" in lines


def test_the_cpu_reads_as_the_host() -> None:
    text = render_text(DoctorReport(checks=(Check("x", Status.OK, "y"),), devices=(CPU,)))
    assert "host memcpy      5.00 GB/s read + write" in text
    assert "host <-> device  n/a (the CPU is the host)" in text
    assert "matmul fp32      190 GFLOP/s" in text
    assert "matmul bf16      n/a" in text
    assert "- bf16 matmul: RuntimeError: not here" in text


@pytest.mark.parametrize(
    ("fix", "command"),
    [
        ("python -m pip install numpy", True),
        ("/opt/env/bin/python -m pip install numpy", True),
        ("sudo apt install nvidia-utils-550", True),
        ("update macOS to 12.3 or later", False),
        ("`unset CUDA_VISIBLE_DEVICES` if torch should use every GPU", False),
    ],
)
def test_is_command(fix: str, command: bool) -> None:
    assert is_command(fix) is command


@pytest.mark.parametrize(
    ("bytes_per_s", "text"),
    [
        (3.02e12, "3.02 TB/s"),  # an H100's copy, read + written
        (2.5e10, "25.0 GB/s"),  # decimal: 25 GB/s, not 23.3 GiB/s
        (9.66e9, "9.66 GB/s"),
        (999.6e9, "1.00 TB/s"),  # the unit is chosen after rounding
        (8.5e8, "850 MB/s"),
        (0.0, "0 B/s"),
        (None, "n/a"),
    ],
)
def test_bandwidth_reads_in_decimal_units(bytes_per_s: float | None, text: str) -> None:
    assert fmt_bandwidth(bytes_per_s) == text


@pytest.mark.parametrize(
    ("tflops", "text"),
    [
        (612.0, "612 TFLOP/s"),
        (48.21, "48.2 TFLOP/s"),
        (0.9996, "1.00 TFLOP/s"),
        (0.216, "216 GFLOP/s"),
        (0.0557, "55.7 GFLOP/s"),
        (0.000968, "968 MFLOP/s"),  # the CPU bf16, once "0.000968 TFLOP/s"
        (None, "n/a"),
    ],
)
def test_flops_read_in_the_unit_that_fits(tflops: float | None, text: str) -> None:
    assert fmt_tflops(tflops) == text
