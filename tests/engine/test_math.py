"""Which math a run does is set, never left to torch's defaults, and every run says it."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from gputui.device import Device, DeviceError
from gputui.engine.devices import check_precision
from gputui.engine.step import BF16, IEEE_FP32, TF32, set_math, set_tf32, tf32_taken
from gputui.jobs.events import RunStarted
from tests.engine.test_trainer import tiny, train

DEFAULTS = ("none", "none", "tf32", "tf32")
"""torch's own: matmuls and cuDNN as a whole inherit (IEEE), its convolutions and RNNs TF32."""


def knobs() -> tuple[object, ...]:
    """Where torch 2.9 and later keep the math: matmul, cuDNN, its convolutions, its RNNs."""
    cudnn = torch.backends.cudnn
    return torch.backends.cuda.matmul, cudnn, cudnn.conv, cudnn.rnn


def precisions() -> tuple[str, ...]:
    return tuple(knob.fp32_precision for knob in knobs())  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def torch_s_own_defaults() -> Iterator[None]:
    """Each test starts from torch's defaults (IEEE matmuls, TF32 cuDNN convolutions)."""
    before = precisions()
    for knob, value in zip(knobs(), DEFAULTS, strict=True):
        knob.fp32_precision = value  # type: ignore[attr-defined]
    yield
    for knob, value in zip(knobs(), before, strict=True):
        knob.fp32_precision = value  # type: ignore[attr-defined]


def test_fp32_is_ieee_for_convolutions_too() -> None:
    assert set_math("fp32", torch.device("cuda", 0)) == IEEE_FP32
    assert precisions() == ("ieee",) * 4  # torch's default leaves cuDNN on TF32


def test_tf32_turns_it_on_for_both_on_cuda_and_says_a_cpu_has_none() -> None:
    assert set_math("tf32", torch.device("cuda", 0)) == TF32
    assert precisions() == ("tf32",) * 4
    on_cpu = set_math("tf32", torch.device("cpu"))
    assert on_cpu.startswith(IEEE_FP32) and "cpu has none" in on_cpu


def test_a_torch_with_fp32_precision_gets_no_legacy_flag_set() -> None:
    # torch 2.9 warns that allow_tf32 is deprecated; a mix of the two APIs then
    # makes torch's checks (Inductor's among them) raise
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        set_math("tf32", torch.device("cuda", 0))
        set_math("fp32", torch.device("cuda", 0))
    assert not [w for w in caught if "tf32" in str(w.message).lower()]
    assert precisions() == ("ieee",) * 4  # the legacy flags would leave "none" here


def test_a_torch_without_fp32_precision_gets_the_legacy_flags() -> None:
    old = SimpleNamespace(  # torch before 2.9: the allow_tf32 flags alone
        cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=False)),
        cudnn=SimpleNamespace(allow_tf32=True),
    )
    set_tf32(True, old)  # type: ignore[arg-type]
    assert (old.cuda.matmul.allow_tf32, old.cudnn.allow_tf32) == (True, True)
    set_tf32(False, old)  # type: ignore[arg-type]
    assert (old.cuda.matmul.allow_tf32, old.cudnn.allow_tf32) == (False, False)
    assert vars(old.cuda.matmul).keys() == {"allow_tf32"}  # nothing new was set


def test_tf32_is_read_back_through_the_api_that_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.9 on refuses to read ``allow_tf32`` once ``fp32_precision`` is set: TF32 asked
    for is read back through ``fp32_precision``, and a ROCm build takes it only with
    ``HIPBLASLT_ALLOW_TF32=1`` as well (torch 2.7 on; read as torch reads it: ``1``)."""
    set_tf32(True)
    with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
        _ = torch.backends.cuda.matmul.allow_tf32
    assert tf32_taken(environ={})  # a CUDA build
    monkeypatch.setattr(torch.version, "hip", "7.2.26015", raising=False)
    assert tf32_taken(environ={"HIPBLASLT_ALLOW_TF32": "1"})
    assert not tf32_taken(environ={})
    assert not tf32_taken(environ={"HIPBLASLT_ALLOW_TF32": "true"})  # torch warns, ignores it
    set_tf32(False)
    assert not tf32_taken(environ={"HIPBLASLT_ALLOW_TF32": "1"})
    for on in (True, False):  # torch 2.8: read through the legacy flag
        old = SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=on)))
        assert tf32_taken(old, {"HIPBLASLT_ALLOW_TF32": "1"}) is on  # type: ignore[arg-type]


def test_a_rocm_run_says_tf32_only_where_hipblaslt_takes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.version, "hip", "7.2.26015", raising=False)
    monkeypatch.setenv("HIPBLASLT_ALLOW_TF32", "1")
    assert set_math("tf32", torch.device("cuda", 0)) == TF32
    monkeypatch.delenv("HIPBLASLT_ALLOW_TF32")
    math = set_math("tf32", torch.device("cuda", 0))
    assert math.startswith(IEEE_FP32) and "HIPBLASLT_ALLOW_TF32=1" in math
    assert set_math("fp32", torch.device("cuda", 0)) == IEEE_FP32


def test_an_xpu_run_sets_onednn_s_tf32(monkeypatch: pytest.MonkeyPatch) -> None:
    """XPU's convolutions and matmuls take TF32 from oneDNN's ``allow_tf32`` (this CPU-only
    torch reads it back as None: an XPU build's stands in)."""
    onednn = SimpleNamespace(allow_tf32=False)
    monkeypatch.setattr(torch.backends, "mkldnn", onednn)
    assert set_math("tf32", torch.device("xpu", 0)) == TF32
    assert onednn.allow_tf32 is True
    assert set_math("fp32", torch.device("xpu", 0)) == IEEE_FP32
    assert onednn.allow_tf32 is False
    set_math("tf32", torch.device("cuda", 0))
    assert onednn.allow_tf32 is False  # oneDNN serves the CPU too: only an XPU run sets it


ARC_B580 = {"has_bfloat16_conversions": True, "has_subgroup_matrix_multiply_accumulate": True}
"""What ``torch.xpu.get_device_properties()`` says of an Arc B580 (Xe2: XMX, bf16)."""
IRIS_XE = {"has_bfloat16_conversions": False, "has_subgroup_matrix_multiply_accumulate": False}
"""... and of Tiger Lake's Iris Xe (Xe-LP: no XMX; bf16 only emulated)."""


def xpu_of(monkeypatch: pytest.MonkeyPatch, properties: dict[str, bool]) -> list[object]:
    """This CPU-only torch's own ``torch.xpu`` seeing one Intel GPU of ``properties``;
    returns the devices made current."""
    made: list[object] = []
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    monkeypatch.setattr(torch.xpu, "set_device", made.append)
    monkeypatch.setattr(
        torch.xpu, "get_device_properties", lambda *_: SimpleNamespace(**properties)
    )
    return made


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_xpu_refuses_tf32_and_bf16_its_gpu_lacks(
    monkeypatch: pytest.MonkeyPatch, precision: str
) -> None:
    """Never IEEE fp32 as TF32, nor emulated bf16 as bf16: ``is_bf16_supported()`` counts
    emulation unless told not to."""
    made = xpu_of(monkeypatch, IRIS_XE)
    with pytest.raises(DeviceError, match=f"^{precision} on xpu:1: .* use --precision fp32$"):
        check_precision(Device("xpu", 1), precision)
    assert made == [torch.device("xpu", 1)]  # asked of the run's own GPU
    check_precision(Device("xpu", 1), "fp32")
    xpu_of(monkeypatch, ARC_B580)
    check_precision(Device("xpu", 1), precision)


def test_an_xpu_torch_that_cannot_say_refuses_tf32(monkeypatch: pytest.MonkeyPatch) -> None:
    xpu_of(monkeypatch, ARC_B580)
    monkeypatch.delattr(torch.xpu, "is_tf32_supported")  # as before torch 2.10
    with pytest.raises(DeviceError, match="or this torch has none"):
        check_precision(Device("xpu", 0), "tf32")


def test_bf16_is_autocast_with_the_rest_ieee() -> None:
    assert set_math("bf16", torch.device("cuda", 0)) == BF16
    assert precisions() == ("ieee",) * 4


@pytest.mark.parametrize(
    ("precision", "math"),
    [
        ("fp32", IEEE_FP32),
        ("tf32", "IEEE fp32 (TF32 is CUDA's and XPU's; cpu has none)"),
        ("bf16", BF16),
    ],
)
def test_a_run_says_which_math_ran(tmp_path: Path, precision: str, math: str) -> None:
    code, events = train(tiny(tmp_path, precision=precision, epochs=1, record=False))
    assert code == 0, events[-1]
    (started,) = [event for event in events if isinstance(event, RunStarted)]
    assert (started.precision, started.math) == (precision, math)
