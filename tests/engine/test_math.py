"""Which math a run does is set, never left to torch's defaults, and every run says it."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from gputui.engine import step
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


def test_a_rocm_build_that_reads_tf32_back_as_off_says_its_math_is_ieee(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch's ROCm builds take TF32 in their matmuls only with HIPBLASLT_ALLOW_TF32=1 (torch
    2.7 on), and read ``allow_tf32`` back as False without it: the run must not say TF32."""
    refused = SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=False)))
    taken = SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=True)))
    assert tf32_taken(refused)  # type: ignore[arg-type]  # a CUDA build: not asked
    monkeypatch.setattr(torch.version, "hip", "6.4.43484", raising=False)
    assert not tf32_taken(refused)  # type: ignore[arg-type]
    assert tf32_taken(taken)  # type: ignore[arg-type]
    monkeypatch.setattr(step, "tf32_taken", lambda: False)
    math = set_math("tf32", torch.device("cuda", 0))
    assert math.startswith(IEEE_FP32) and "HIPBLASLT_ALLOW_TF32=1" in math
    assert set_math("fp32", torch.device("cuda", 0)) == IEEE_FP32


def test_bf16_is_autocast_with_the_rest_ieee() -> None:
    assert set_math("bf16", torch.device("cuda", 0)) == BF16
    assert precisions() == ("ieee",) * 4


@pytest.mark.parametrize(
    ("precision", "math"),
    [("fp32", IEEE_FP32), ("tf32", "IEEE fp32 (TF32 is CUDA's; cpu has none)"), ("bf16", BF16)],
)
def test_a_run_says_which_math_ran(tmp_path: Path, precision: str, math: str) -> None:
    code, events = train(tiny(tmp_path, precision=precision, epochs=1, record=False))
    assert code == 0, events[-1]
    (started,) = [event for event in events if isinstance(event, RunStarted)]
    assert (started.precision, started.math) == (precision, math)
