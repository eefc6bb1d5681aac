"""Which math a run does is set, never left to torch's defaults, and every run says it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gputui.engine.step import BF16, IEEE_FP32, TF32, set_math
from gputui.jobs.events import RunStarted
from tests.training.test_trainer import tiny, train


@pytest.fixture(autouse=True)
def torch_s_own_defaults() -> Iterator[None]:
    """Each test starts from torch's defaults (IEEE matmuls, TF32 cuDNN convolutions)."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def tf32_flags() -> tuple[bool, bool]:
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


def test_fp32_is_ieee_for_convolutions_too() -> None:
    assert set_math("fp32", torch.device("cuda", 0)) == IEEE_FP32
    assert tf32_flags() == (False, False)  # torch's default leaves cuDNN on TF32


def test_tf32_turns_it_on_for_both_on_cuda_and_says_a_cpu_has_none() -> None:
    assert set_math("tf32", torch.device("cuda", 0)) == TF32
    assert tf32_flags() == (True, True)
    on_cpu = set_math("tf32", torch.device("cpu"))
    assert on_cpu.startswith(IEEE_FP32) and "cpu has none" in on_cpu


def test_bf16_is_autocast_with_the_rest_ieee() -> None:
    assert set_math("bf16", torch.device("cuda", 0)) == BF16
    assert tf32_flags() == (False, False)


@pytest.mark.parametrize(
    ("precision", "math"),
    [("fp32", IEEE_FP32), ("tf32", "IEEE fp32 (TF32 is CUDA's; cpu has none)"), ("bf16", BF16)],
)
def test_a_run_says_which_math_ran(tmp_path: Path, precision: str, math: str) -> None:
    code, events = train(tiny(tmp_path, precision=precision, epochs=1, record=False))
    assert code == 0, events[-1]
    (started,) = [event for event in events if isinstance(event, RunStarted)]
    assert (started.precision, started.math) == (precision, math)
