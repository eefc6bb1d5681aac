"""Whether a device is usable, checked against this machine and others; the calls that
differ by kind (XPU's through ``torch.xpu``, where the build has it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from gputui.device import CPU, Device, DeviceError
from gputui.engine import devices
from gputui.engine.devices import (
    DeviceInventory,
    allocator_memory,
    check_device,
    chosen_devices,
    cpu_bf16,
    current_inventory,
    device_name,
    device_of,
    device_options,
    empty_cache,
    make_current,
    reset_peak_memory,
    synchronize,
    torch_build,
    usable_devices,
)

CPU_ONLY_BUILD = torch.version.cuda is None and getattr(torch.version, "hip", None) is None
needs_cpu_only_linux = pytest.mark.skipif(
    not CPU_ONLY_BUILD or not Path("/proc").is_dir(), reason="for a CPU-only torch on Linux"
)
CUDA_0, CUDA_1, MPS = Device("cuda", 0), Device("cuda", 1), Device("mps")


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
        check_device(Device.parse(text), inv)
    message = str(caught.value)
    assert "\n" not in message
    return message


# -- this machine: torch 2.13.0+cpu on Linux ---------------------------------------------------


def test_cpu_is_always_usable() -> None:
    assert check_device(CPU) == CPU
    assert usable_devices()[0] == CPU


@needs_cpu_only_linux
def test_on_a_cpu_only_build_only_the_cpu_is_usable() -> None:
    assert usable_devices() == [CPU]
    assert torch_build() == "cpu"


@needs_cpu_only_linux
@pytest.mark.parametrize("text", ["cuda", "cuda:0", "cuda:7"])
def test_cuda_on_a_cpu_only_build_says_so_and_names_the_cpu(text: str) -> None:
    message = error_for(text)
    assert message.startswith(f"{text}: this torch {torch.__version__} was built without CUDA")
    assert "(usable here: cpu)" in message


@needs_cpu_only_linux
def test_xpu_on_a_cpu_only_build_says_so() -> None:
    message = error_for("xpu:0")
    assert message.startswith(f"xpu:0: this torch {torch.__version__} was built without XPU")
    assert "(usable here: cpu)" in message


@needs_cpu_only_linux
def test_mps_on_linux_says_it_needs_macos() -> None:
    message = error_for("mps")
    assert "MPS needs Apple silicon and macOS; this is Linux" in message
    assert "(usable here: cpu)" in message


def test_cpu_0_is_the_cpu_as_torch_accepts_it() -> None:
    """torch takes ``cpu:0`` (a tensor made there is on ``cpu``): one device, listed once."""
    assert chosen_devices((CPU, Device.parse("cpu:0"))) == (CPU,)


@needs_cpu_only_linux
def test_device_options_list_every_candidate_with_reasons() -> None:
    options = {str(option.name): option for option in device_options()}
    assert list(options) == ["cpu", "cuda", "mps"]  # no xpu: this torch has no XPU build
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


def test_torch_names_a_device_as_the_type_does() -> None:
    assert device_of(torch.device("cpu")) == CPU
    assert device_of(torch.device("cuda", 1)) == CUDA_1
    assert device_of(torch.device("mps", 0)) == MPS  # a tensor's MPS device
    assert device_of(torch.device("xpu:2")) == Device("xpu", 2)


# -- other machines, through an inventory --------------------------------------------------------


def test_two_gpus_plain_cuda_reads_cuda_0() -> None:
    inv = inventory()
    assert check_device(Device("cuda"), inv) == CUDA_0
    assert check_device(CUDA_1, inv) == CUDA_1
    assert usable_devices(inv) == [CPU, CUDA_0, CUDA_1]


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


def test_a_rocm_build_lists_its_amd_gpus_as_cuda() -> None:
    rocm = inventory(
        torch_version="2.13.0+rocm6.4",
        cuda_version="6.4.43482",
        hip_version="6.4.43482",
        cuda_names=("AMD Instinct MI300X",) * 8,
    )
    assert check_device(Device("cuda"), rocm) == CUDA_0
    assert [str(o.name) for o in device_options(rocm)][:3] == ["cpu", "cuda:0", "cuda:1"]
    blind = inventory(cuda_version="6.4.43482", hip_version="6.4.43482", cuda_names=())
    message = error_for("cuda", blind)
    assert "built for ROCm (HIP 6.4.43482) but sees no GPU" in message
    [cuda] = [o for o in device_options(blind) if o.name.kind == "cuda"]
    assert (str(cuda.name), cuda.usable, cuda.description) == ("cuda", False, "AMD GPU (ROCm)")


def test_an_xpu_build_lists_its_intel_gpus_as_xpu() -> None:
    xpu = inventory(
        torch_version="2.13.0+xpu",
        cuda_built=False,
        cuda_version=None,
        cuda_names=(),
        xpu_built=True,
        xpu_names=("Intel(R) Data Center GPU Max 1550", "Intel(R) Data Center GPU Max 1550"),
    )
    assert check_device(Device("xpu"), xpu) == Device("xpu", 0)
    assert usable_devices(xpu) == [CPU, Device("xpu", 0), Device("xpu", 1)]
    assert "torch sees 2 GPUs, xpu:0 to xpu:1" in error_for("xpu:2", xpu)
    assert "built without CUDA" in error_for("cuda", xpu)
    options = [(str(o.name), o.usable) for o in device_options(xpu)]
    assert options == [
        ("cpu", True),
        ("cuda", False),
        ("xpu:0", True),
        ("xpu:1", True),
        ("mps", False),
    ]
    blind = device_options(dataclasses.replace(xpu, xpu_names=()))
    [none] = [o for o in blind if o.name.kind == "xpu"]
    assert not none.usable and "sees no Intel GPU" in (none.reason or "")


def test_mps_on_a_mac() -> None:
    mac = inventory(system="Darwin", cuda_built=False, cuda_version=None, cuda_names=())
    assert "built without MPS" in error_for("mps", mac)
    not_now = inventory(system="Darwin", mps_built=True, cuda_names=())
    assert "macOS 12.3" in error_for("mps", not_now)
    ready = inventory(system="Darwin", mps_built=True, mps_available=True, cuda_names=())
    assert check_device(Device.parse("mps:0"), ready) == MPS
    assert usable_devices(ready) == [CPU, MPS]
    names = [(str(o.name), o.usable) for o in device_options(ready)]
    assert names == [("cpu", True), ("cuda", False), ("mps", True)]


def test_device_options_list_each_gpu_by_name() -> None:
    options = device_options(inventory())
    assert [(o.name, o.usable, o.description) for o in options[:3]] == [
        (CPU, True, "Test CPU"),
        (CUDA_0, True, "NVIDIA H100 80GB HBM3"),
        (CUDA_1, True, "NVIDIA H100 80GB HBM3"),
    ]
    assert options[3].name == MPS and not options[3].usable


# -- the calls that differ by kind ---------------------------------------------------------------


def test_a_gpu_is_made_current_and_no_other_device_is(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "set_device", made.append)
    monkeypatch.setattr(torch.xpu, "set_device", made.append)
    for text in ("cuda:1", "cpu", "mps", "xpu:1"):
        make_current(torch.device(text))
    assert made == [torch.device("cuda:1"), torch.device("xpu:1")]


class FakeXpu:
    """``torch.xpu`` as an XPU build's: every call recorded, the allocator's figures made up."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> object:
        figures = {"memory_allocated": 1, "memory_reserved": 2, "max_memory_allocated": 3}

        def call(*args: object) -> object:
            self.calls.append(name)
            return figures.get(name, f"Intel GPU {args}" if name == "get_device_name" else None)

        return call


def test_xpu_calls_go_through_torch_xpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeXpu()
    monkeypatch.setattr(torch, "xpu", fake)
    xpu = torch.device("xpu:1")
    synchronize(xpu)
    empty_cache(xpu)
    reset_peak_memory(xpu)
    figures = allocator_memory(xpu)
    assert figures is not None
    assert (figures.allocated_bytes, figures.reserved_bytes, figures.peak_bytes) == (1, 2, 3)
    assert device_name(xpu).startswith("Intel GPU")
    assert fake.calls == [
        "synchronize",
        "empty_cache",
        "reset_peak_memory_stats",
        "memory_allocated",
        "memory_reserved",
        "max_memory_allocated",
        "get_device_name",
    ]


def test_a_torch_without_torch_xpu_still_runs_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch before 2.4 has no ``torch.xpu``: the inventory and every CPU call still work."""
    monkeypatch.delattr(torch, "xpu")
    monkeypatch.setattr(
        torch,
        "version",
        SimpleNamespace(**{k: v for k, v in vars(torch.version).items() if k != "xpu"}),
    )
    cpu = torch.device("cpu")
    synchronize(cpu)
    empty_cache(cpu)
    reset_peak_memory(cpu)
    assert allocator_memory(cpu) is None
    inv = current_inventory()
    assert not inv.xpu_built and inv.xpu_names == ()
    assert CPU in inv.usable()


def test_the_build_is_named_from_torch_s_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    for versions, build in (
        ({"hip": "6.4", "cuda": None}, "rocm"),
        ({"hip": None, "cuda": "12.4"}, "cuda"),
        ({"hip": None, "cuda": None, "xpu": "20250101"}, "xpu"),
        ({"hip": None, "cuda": None, "xpu": None}, "cpu"),
    ):
        monkeypatch.setattr(devices.torch, "version", SimpleNamespace(**versions))
        monkeypatch.setattr(devices.torch._C, "_has_xpu", False, raising=False)
        assert torch_build() == build, versions


def test_a_gpu_s_bus_id_comes_from_its_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA and ROCm builds give the PCI numbers; XPU builds the Level Zero UUID, which holds
    them for Intel GPUs. This torch has neither GPU: its properties are stood in for."""
    gpu_bus_id = devices.gpu_bus_id
    assert gpu_bus_id(torch.device("cpu")) is None
    mi300x = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x0C, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: mi300x)
    assert gpu_bus_id(torch.device("cuda", 0)) == "0000:0c:00.0"
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: object())
    assert gpu_bus_id(torch.device("cuda", 0)) is None  # an older torch: no PCI numbers
    uuid = [0x86, 0x80, 0x0B, 0xE2, 0, 0, 0, 0, 0x03, 0, 0, 0, 0, 0, 0, 0]  # an Arc B580
    arc = SimpleNamespace(uuid=uuid)
    monkeypatch.setattr(torch.xpu, "get_device_properties", lambda index: arc)
    assert gpu_bus_id(torch.device("xpu", 0)) == "0000:03:00.0"
