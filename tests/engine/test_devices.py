"""Device strings as the tutorials write them, checked against this machine and others."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gputui.engine.devices import (
    DeviceError,
    DeviceInventory,
    chosen_devices,
    cpu_bf16,
    current_inventory,
    device_options,
    make_current,
    parse_device,
    usable_devices,
)

CPU_ONLY_BUILD = torch.version.cuda is None and getattr(torch.version, "hip", None) is None
needs_cpu_only_linux = pytest.mark.skipif(
    not CPU_ONLY_BUILD or not Path("/proc").is_dir(), reason="for a CPU-only torch on Linux"
)


def inventory(**changes: object) -> DeviceInventory:
    base = {
        "torch_version": "2.13.0+cu124",
        "cuda_built": True,
        "cuda_version": "12.4",
        "cuda_names": ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
        "mps_built": False,
        "mps_available": False,
        "system": "Linux",
        "cpu_name": "Test CPU",
    }
    base.update(changes)
    return DeviceInventory(**base)  # type: ignore[arg-type]


def error_for(text: str, inv: DeviceInventory | None = None) -> str:
    with pytest.raises(DeviceError) as caught:
        parse_device(text, inv)
    message = str(caught.value)
    assert "\n" not in message
    return message


# -- this machine: torch 2.13.0+cpu on Linux ---------------------------------------------------


def test_cpu_is_always_usable() -> None:
    assert parse_device("cpu") == "cpu"
    assert parse_device(" cpu ") == "cpu"
    assert usable_devices()[0] == "cpu"


@needs_cpu_only_linux
def test_on_a_cpu_only_build_only_the_cpu_is_usable() -> None:
    assert usable_devices() == ["cpu"]


@needs_cpu_only_linux
@pytest.mark.parametrize("text", ["cuda", "cuda:0", "cuda:7"])
def test_cuda_on_a_cpu_only_build_says_so_and_names_the_cpu(text: str) -> None:
    message = error_for(text)
    assert message.startswith(f"{text}: this torch {torch.__version__} was built without CUDA")
    assert "(usable here: cpu)" in message


@needs_cpu_only_linux
def test_mps_on_linux_says_it_needs_macos() -> None:
    message = error_for("mps")
    assert "MPS needs Apple silicon and macOS; this is Linux" in message
    assert "(usable here: cpu)" in message


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("cuda0", "did you mean cuda:0?"),
        ("gpu", "an NVIDIA GPU is cuda"),
        ("gpu1", "did you mean cuda:1?"),
        ("CUDA", "did you mean cuda?"),
        ("random", "write cpu, cuda, cuda:N or mps"),
        ("", "write cpu, cuda, cuda:N or mps"),
    ],
)
def test_a_misspelt_device_names_the_spellings_and_what_is_usable(text: str, hint: str) -> None:
    message = error_for(text)
    assert message.startswith(f"{text!r} is not a device: write cpu, cuda, cuda:N or mps")
    assert hint in message
    assert "usable here: cpu" in message


def test_cpu_0_is_the_cpu_as_torch_accepts_it() -> None:
    """torch takes ``cpu:0`` (a tensor made there is on ``cpu``); ``cpu:1`` is refused as
    ``mps:1`` is: there is one CPU device."""
    assert parse_device("cpu:0") == "cpu"
    assert chosen_devices(("cpu", "cpu:0")) == ("cpu",)
    message = error_for("cpu:1")
    assert message.startswith("cpu:1: the CPU is one device, cpu (or cpu:0) (usable here: cpu")


@needs_cpu_only_linux
def test_device_options_list_every_candidate_with_reasons() -> None:
    options = {option.name: option for option in device_options()}
    assert list(options) == ["cpu", "cuda", "mps"]
    assert options["cpu"].usable and options["cpu"].reason is None
    assert options["cpu"].description == current_inventory().cpu_name
    assert not options["cuda"].usable and "built without CUDA" in (options["cuda"].reason or "")
    assert not options["mps"].usable and "this is Linux" in (options["mps"].reason or "")


def test_cpu_bf16_detection_matches_proc_cpuinfo() -> None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    flags = next(line for line in text.splitlines() if line.startswith("flags")).split()
    found = cpu_bf16()
    assert found.avx512_bf16 == ("avx512_bf16" in flags)
    assert found.amx_bf16 == ("amx_bf16" in flags)
    assert found.capability == torch.backends.cpu.get_cpu_capability()
    assert found.fast == (found.avx512_bf16 or found.amx_bf16 or "AMX" in found.capability)


# -- other machines, through an inventory --------------------------------------------------------


def test_two_gpus_plain_cuda_reads_cuda_0() -> None:
    inv = inventory()
    assert parse_device("cuda", inv) == "cuda:0"
    assert parse_device("cuda:1", inv) == "cuda:1"
    assert usable_devices(inv) == ["cpu", "cuda:0", "cuda:1"]


def test_an_index_past_the_gpu_count_names_the_gpus() -> None:
    message = error_for("cuda:7", inventory())
    assert message == (
        "cuda:7: there is no GPU 7; torch sees 2 GPUs, cuda:0 to cuda:1 "
        "(usable here: cpu, cuda:0, cuda:1)"
    )
    one = error_for("cuda:1", inventory(cuda_names=("A100",)))
    assert "torch sees 1 GPU, cuda:0" in one


def test_a_cuda_build_without_a_driver_points_at_the_doctor() -> None:
    message = error_for("cuda", inventory(cuda_names=()))
    assert "built for CUDA 12.4 but sees no GPU" in message
    assert "gputui doctor" in message
    assert "(usable here: cpu)" in message


def test_mps_on_a_mac() -> None:
    mac = inventory(system="Darwin", cuda_built=False, cuda_version=None, cuda_names=())
    assert "built without MPS" in error_for("mps", mac)
    not_now = inventory(system="Darwin", mps_built=True, cuda_names=())
    assert "macOS 12.3" in error_for("mps", not_now)
    ready = inventory(system="Darwin", mps_built=True, mps_available=True, cuda_names=())
    assert parse_device("mps", ready) == "mps"
    assert usable_devices(ready) == ["cpu", "mps"]
    names = [(o.name, o.usable) for o in device_options(ready)]
    assert names == [("cpu", True), ("cuda", False), ("mps", True)]


def test_device_options_list_each_gpu_by_name() -> None:
    options = device_options(inventory())
    assert [(o.name, o.usable, o.description) for o in options[:3]] == [
        ("cpu", True, "Test CPU"),
        ("cuda:0", True, "NVIDIA H100 80GB HBM3"),
        ("cuda:1", True, "NVIDIA H100 80GB HBM3"),
    ]
    assert options[3].name == "mps" and not options[3].usable


def test_a_cuda_device_is_made_current_and_no_other_is(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "set_device", made.append)
    for text in ("cuda:1", "cpu", "mps"):
        make_current(torch.device(text))
    assert made == [torch.device("cuda:1")]
