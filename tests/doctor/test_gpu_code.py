"""A GPU's compute capability against the code the installed torch carries
(``torch.cuda.get_arch_list()``): the rule, and the doctor's check with its fix."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputui.device import Device
from gputui.doctor.checks import Check, Status
from gputui.doctor.diagnose import diagnose
from gputui.doctor.torch_facts import facts_from_events
from gputui.doctor.wheels import GpuCode, channels_for_gpu, gpu_code, parse_capability
from gputui.jobs.events import CudaProbed, parse_event
from tests.doctor.doctor_facts import (
    CU128_ARCHES,
    CUDA_BUILD,
    CUDA_TORCH,
    TWO_GPUS,
    WHEEL_ARCHES,
    cuda_devices,
    facts,
    nvml,
)

CU128 = (
    "python -m pip uninstall -y torch && "
    "python -m pip install torch --index-url https://download.pytorch.org/whl/cu128"
)
CU124 = CU128.replace("cu128", "cu124")
WHEEL = replace(TWO_GPUS, arch_list=WHEEL_ARCHES)
"""CUDA's answer in a cu118 to cu126 wheel."""


@pytest.mark.parametrize(
    ("capability", "arches", "code"),
    [
        ("9.0", WHEEL_ARCHES, GpuCode.COMPILED),  # H100 on any wheel up to cu126
        ("8.9", WHEEL_ARCHES, GpuCode.COMPILED),  # L4, RTX 4090: sm_86 runs on 8.9
        ("8.0", ("sm_86",), GpuCode.NONE),  # A100: code for a later minor does not run
        ("9.0", ("sm_70", "sm_75", "sm_80", "sm_86"), GpuCode.NONE),  # a wheel without sm_90
        ("9.0", ("sm_80", "compute_80"), GpuCode.PTX),  # PTX compiles for any later GPU
        ("12.0", WHEEL_ARCHES, GpuCode.NONE),  # RTX 5090 with an old wheel
        ("10.0", WHEEL_ARCHES, GpuCode.NONE),  # B200 with an old wheel
        ("12.0", CU128_ARCHES, GpuCode.COMPILED),
        ("10.3", CU128_ARCHES, GpuCode.COMPILED),  # B300: sm_100 runs on 10.3
        ("7.0", CU128_ARCHES, GpuCode.NONE),  # V100: torch 2.11's cu128 dropped sm_70
        ("12.0", ("sm_90", "compute_90"), GpuCode.PTX),
        ("9.0", ("sm_90a",), GpuCode.COMPILED),
        ("10.0", ("sm_90a", "compute_90a"), GpuCode.NONE),  # "a" code: exactly its GPU
        ("8.7", ("sm_80", "sm_86"), GpuCode.NONE),  # Jetson Orin needs its own code
        ("8.7", ("sm_87",), GpuCode.COMPILED),
        ("9.0", (), GpuCode.NONE),
        ("9.0", ("gfx90a", "sm_x", "sm_90"), GpuCode.COMPILED),  # what it cannot read is skipped
    ],
)
def test_gpu_code(capability: str, arches: tuple[str, ...], code: GpuCode) -> None:
    parsed = parse_capability(capability)
    assert parsed is not None
    assert gpu_code(parsed, arches) is code


def test_the_channels_with_code_for_each_gpu() -> None:
    assert channels_for_gpu(120, "x86_64") == ("cu130", "cu129", "cu128")
    assert channels_for_gpu(90, "x86_64")[-1] == "cu118"
    assert channels_for_gpu(70, "x86_64") == ("cu126", "cu124", "cu121", "cu118")
    assert channels_for_gpu(90, "aarch64") == ("cu130", "cu129", "cu128", "cu126")
    assert channels_for_gpu(87, "aarch64") == ()


def gpu_check(**changes: object) -> Check:
    report = diagnose(facts(**changes))
    found = report.check("GPU code")
    assert found is not None
    return found


def test_a_wheel_with_code_for_the_gpus_is_ok() -> None:
    torch = replace(CUDA_TORCH, cuda=WHEEL, devices=cuda_devices())
    found = gpu_check(torch=torch)
    assert found.status is Status.OK
    assert found.message == (
        "torch 2.4.0+cu124 carries sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90: code for "
        "cuda:0 and cuda:1 (NVIDIA H100 80GB HBM3, 9.0)."
    )


def test_an_h100_with_a_wheel_without_sm_90_fails_with_a_wheel_that_has_it() -> None:
    torch = replace(
        CUDA_TORCH,
        install=replace(CUDA_BUILD, version="2.4.0+cu124.custom"),
        cuda=replace(TWO_GPUS, arch_list=("sm_80", "sm_86")),
        devices=cuda_devices(),
    )
    found = gpu_check(torch=torch)
    assert found.status is Status.FAIL
    assert found.message == (
        "cuda:0 and cuda:1 (NVIDIA H100 80GB HBM3) have compute capability 9.0, but torch "
        "2.4.0+cu124.custom carries sm_80 sm_86: no sm_9x and no PTX it could compile, so "
        "every CUDA kernel fails with 'no kernel image is available for execution on the "
        "device'."
    )
    assert found.fix == CU124  # the newest channel with sm_90 this driver (CUDA 12.4) runs


def test_blackwell_with_an_old_wheel_fails_with_the_cu128_command() -> None:
    torch = replace(
        CUDA_TORCH,
        cuda=WHEEL,
        devices=cuda_devices(1, "NVIDIA GeForce RTX 5090", "12.0"),
    )
    found = gpu_check(torch=torch, nvml=nvml(1, cuda="12.8", driver="570.86.10"))
    assert found.status is Status.FAIL
    assert "cuda:0 (NVIDIA GeForce RTX 5090) has compute capability 12.0" in found.message
    assert "no sm_12x" in found.message
    assert found.fix == CU128
    assert diagnose(facts(torch=torch, nvml=nvml(1, cuda="12.8"))).failed


def test_blackwell_on_a_driver_too_old_for_any_wheel_with_its_code_says_to_update() -> None:
    torch = replace(CUDA_TORCH, cuda=WHEEL, devices=cuda_devices(1, "NVIDIA B200", "10.0"))
    found = gpu_check(torch=torch, nvml=nvml(1, cuda="12.4"))
    assert found.status is Status.FAIL
    assert found.fix == (
        "the driver supports CUDA 12.4, older than any build with code for this GPU: update "
        f"the NVIDIA driver (CUDA 12.8 or later), then `{CU128}`"
    )


def test_only_ptx_for_the_gpu_is_a_warning() -> None:
    torch = replace(
        CUDA_TORCH,
        cuda=replace(TWO_GPUS, arch_list=("sm_80", "compute_80")),
        devices=cuda_devices(1),
    )
    found = gpu_check(torch=torch)
    assert found.status is Status.WARN
    assert "only PTX, which the driver compiles at first use" in found.message
    assert found.fix == CU124


def test_a_gpu_no_wheel_has_code_for_says_to_build_torch() -> None:
    torch = replace(
        CUDA_TORCH,
        install=replace(CUDA_BUILD, platform={"machine": "aarch64"}),
        cuda=WHEEL,
        devices=cuda_devices(1, "Orin", "8.7"),
    )
    found = gpu_check(torch=torch)
    assert found.status is Status.FAIL
    assert found.fix is not None and "`TORCH_CUDA_ARCH_LIST=8.7`" in found.fix


def test_mixed_gpus_fail_on_the_one_without_code() -> None:
    devices = (
        *cuda_devices(1),
        replace(cuda_devices(1, "NVIDIA GeForce RTX 5090", "12.0")[1], device=Device("cuda", 1)),
    )
    torch = replace(CUDA_TORCH, cuda=WHEEL, devices=devices)
    found = gpu_check(torch=torch, nvml=nvml(2, cuda="12.8"))
    assert found.status is Status.FAIL
    assert found.message.startswith("cuda:1 (NVIDIA GeForce RTX 5090) has compute")


@pytest.mark.parametrize(
    "torch",
    [
        replace(CUDA_TORCH, devices=cuda_devices()),  # an older engine: no arch list
        replace(CUDA_TORCH, cuda=WHEEL),  # no device was read
        replace(
            CUDA_TORCH,
            install=replace(CUDA_BUILD, hip_version="6.2"),
            cuda=WHEEL,
            devices=cuda_devices(),
        ),
        replace(CUDA_TORCH, install=replace(CUDA_BUILD, cuda_version=None), devices=cuda_devices()),
    ],
)
def test_nothing_to_check_is_a_skip(torch: object) -> None:
    assert gpu_check(torch=torch).status is Status.SKIP


def test_the_arch_list_travels_in_cuda_probed_and_old_lines_still_parse() -> None:
    line = CudaProbed(True, 2, arch_list=("sm_80", "sm_90")).to_json()
    cuda = facts_from_events([parse_event(line)]).cuda
    assert cuda is not None and cuda.arch_list == ("sm_80", "sm_90")
    old = '{"v": 1, "type": "probe_cuda", "available": true, "device_count": 2}'
    event = parse_event(old)
    assert isinstance(event, CudaProbed) and event.arch_list == ()
    assert facts_from_events([event]).cuda == event
