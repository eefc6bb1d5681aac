"""The MPS paths, checked on any machine: fused Adam where torch has it, fp32 never entering
autocast, bf16 refused before macOS 14 and before torch 2.6, ``mps:0`` read as ``mps``, and the
Apple CPU's name from ``sysctl``."""

from __future__ import annotations

import platform
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.utils._foreach_utils as foreach_utils

from gputui.device import CPU, Device, DeviceError
from gputui.engine import devices, trainer
from gputui.engine.devices import check_device, check_precision, cpu_model_name
from gputui.engine.model import CNN
from gputui.engine.step import bf16_autocast, fused_adam_supported, make_optimizer
from gputui.jobs.config import RunConfig
from gputui.jobs.events import Error, Event
from tests.engine.test_devices import error_for, inventory
from tests.engine.test_trainer import tiny, train

MAC = inventory(system="Darwin", mps_built=True, mps_available=True, cuda_names=())
"""An Apple silicon Mac whose torch can use MPS."""
MPS = Device("mps")

# -- fused Adam ---------------------------------------------------------------------------------


def adam_for(device: str) -> dict[str, object]:
    """The implementation ``make_optimizer`` picks for ``device`` (built on CPU tensors)."""
    defaults = make_optimizer(CNN(), torch.device(device)).defaults
    return {"fused": bool(defaults["fused"]), "foreach": bool(defaults["foreach"])}


def test_mps_gets_fused_adam_where_this_torch_has_the_kernel() -> None:
    assert fused_adam_supported("mps")  # torch 2.13 lists mps among its fused devices
    assert adam_for("mps") == {"fused": True, "foreach": False}
    assert adam_for("cpu") == {"fused": False, "foreach": True}  # the tutorial's numbers


def test_a_torch_without_the_mps_kernel_gets_the_default_adam_on_mps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # torch 2.1 to 2.3: fused kernels on CUDA (and XPU) only
    monkeypatch.setattr(
        foreach_utils, "_get_fused_kernels_supported_devices", lambda: ["cuda", "xpu"]
    )
    assert adam_for("mps") == {"fused": False, "foreach": False}


def test_a_torch_without_the_list_fuses_on_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils._foreach_utils", None)  # import fails
    assert fused_adam_supported("cuda") and not fused_adam_supported("mps")


# -- autocast only for bf16 ---------------------------------------------------------------------


def test_fp32_trains_without_autocast_which_torch_before_2_5_refuses_for_mps(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def refuse(device_type: str, *_args: object, **_kwargs: object) -> None:
        # torch 2.1 to 2.4 on a Mac, even with enabled=False
        raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")

    monkeypatch.setattr(torch, "autocast", refuse)
    code, events = train(tiny(tmp_path, epochs=1, record=False))  # steps and held-out accuracy
    assert code == 0, events[-1]


def test_bf16_still_runs_under_autocast() -> None:
    cpu = torch.device("cpu")
    with bf16_autocast(cpu, True):
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    with bf16_autocast(cpu, False):
        assert not torch.is_autocast_enabled("cpu")


# -- bf16 before macOS 14 -----------------------------------------------------------------------


def mac_version(monkeypatch: pytest.MonkeyPatch, release: str) -> None:
    monkeypatch.setattr(platform, "mac_ver", lambda: (release, ("", "", ""), "arm64"))


def test_bf16_on_mps_before_sonoma_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    mac_version(monkeypatch, "13.6.1")
    with pytest.raises(DeviceError) as caught:
        check_precision(MPS, "bf16")
    assert str(caught.value) == (
        "bf16 on MPS needs macOS 14 or later; this is macOS 13.6.1: use --precision fp32"
    )
    check_precision(MPS, "fp32")  # fp32 runs anywhere
    check_precision(CPU, "bf16")  # and bf16 elsewhere is not MPS's


@pytest.mark.parametrize("release", ["14.0", "15.3.2", ""])  # "" when macOS does not say
def test_bf16_on_mps_from_sonoma_on_is_let_through(
    monkeypatch: pytest.MonkeyPatch, release: str
) -> None:
    mac_version(monkeypatch, release)
    check_precision(MPS, "bf16")


def test_bf16_on_mps_before_torch_2_6_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mac_version(monkeypatch, "15.3.2")
    with pytest.raises(DeviceError) as caught:  # 2.5's autocast would quietly run fp32
        check_precision(MPS, "bf16", replace(MAC, torch_version="2.5.1"))
    assert str(caught.value) == (
        "bf16 on MPS needs torch 2.6 or later; this is torch 2.5.1: upgrade torch to 2.6 or "
        "later, or use --precision fp32"
    )
    check_precision(MPS, "fp32", replace(MAC, torch_version="2.2.2"))  # Intel Macs' last


@pytest.mark.parametrize("version", ["2.6.0", "2.10.0", "2.13.0.dev20260101"])
def test_bf16_on_mps_from_torch_2_6_on_is_let_through(
    monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    mac_version(monkeypatch, "15.3.2")
    check_precision(MPS, "bf16", replace(MAC, torch_version=version))


def test_the_trainer_refuses_it_before_loading_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mac_version(monkeypatch, "13.2")
    monkeypatch.setattr(trainer, "check_device", lambda _device: MPS)  # as on such a Mac
    events: list[Event] = []
    config = RunConfig(device=MPS, precision="bf16", dataset="synthetic", limit=64, batch_size=32)
    code = trainer.run_training(config.with_changes(runs_dir=str(tmp_path)), events.append)
    assert code == 2
    [error] = events
    assert isinstance(error, Error) and error.kind == "device"
    assert error.message.startswith("bf16 on MPS needs macOS 14 or later; this is macOS 13.2")
    assert not list(tmp_path.iterdir())  # no run folder for a run that never started


# -- mps:0 --------------------------------------------------------------------------------------


def test_mps_0_is_mps_and_no_other_index_is() -> None:
    assert check_device(Device.parse("mps:0"), MAC) == MPS
    assert check_device(Device.parse(" mps "), MAC) == MPS
    assert error_for("mps:1", MAC).startswith("mps:1: a Mac has one GPU, mps (or mps:0)")
    assert "MPS needs Apple silicon and macOS; this is Linux" in error_for(
        "mps:0", inventory(cuda_names=())
    )


def test_every_spelling_of_the_mac_s_gpu_is_chosen_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "current_inventory", lambda: MAC)
    asked = (Device.parse("mps:0"), MPS, CPU)
    assert devices.chosen_devices(asked) == (MPS, CPU)


# -- the Apple CPU's name -----------------------------------------------------------------------


@pytest.fixture
def fresh_cpu_name() -> Iterator[None]:
    cpu_model_name.cache_clear()
    yield
    cpu_model_name.cache_clear()


def test_an_apple_cpu_is_named_by_sysctl(
    monkeypatch: pytest.MonkeyPatch, fresh_cpu_name: None
) -> None:
    asked: list[list[str]] = []

    def run(args: list[str], **_kwargs: object) -> subprocess.CompletedProcess[str]:
        asked.append(args)
        return subprocess.CompletedProcess(args, 0, stdout="Apple M2 Pro\n", stderr="")

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    assert cpu_model_name() == "Apple M2 Pro"
    assert asked == [["sysctl", "-n", "machdep.cpu.brand_string"]]


def test_without_sysctl_the_name_falls_back_to_the_platform_s(
    monkeypatch: pytest.MonkeyPatch, fresh_cpu_name: None
) -> None:
    def run(args: list[str], **_kwargs: object) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(args[0])

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    assert cpu_model_name() == "arm"
