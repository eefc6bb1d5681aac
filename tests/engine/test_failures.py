"""How a failure reads: the CUDA_LAUNCH_BLOCKING hint for CUDA errors, and only for them."""

from __future__ import annotations

import pytest

from gputui.engine.failures import LAUNCH_BLOCKING_HINT, failure_line, is_cuda_error

ILLEGAL_ACCESS = (
    "CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"
)
"""torch's message for a faulting kernel, as it reads from torch 2.1 on."""


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError(ILLEGAL_ACCESS),
        RuntimeError("CUDA error: device-side assert triggered"),
        RuntimeError("Loss.cu:250: block: [0,0,0], thread: [5,0,0] device-side assert"),
        RuntimeError("CUDA driver error: cudaErrorLaunchFailure (unspecified launch failure)"),
    ],
)
def test_a_cuda_error_gets_the_launch_blocking_hint_on_its_one_line(error: Exception) -> None:
    assert is_cuda_error(error)
    line = failure_line(error, environ={})
    assert line.startswith("RuntimeError: ") and "\n" not in line
    assert line.endswith(f"; {LAUNCH_BLOCKING_HINT}") and "CUDA_LAUNCH_BLOCKING=1" in line


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (256x400 and 256x120)"),
        RuntimeError("Torch not compiled with CUDA enabled"),
        ValueError("cuda error budget"),  # lower case: not torch's wording
    ],
)
def test_other_errors_get_no_hint(error: Exception) -> None:
    assert not is_cuda_error(error)
    assert "CUDA_LAUNCH_BLOCKING" not in failure_line(error, environ={})


def test_no_hint_when_launches_already_block() -> None:
    line = failure_line(RuntimeError(ILLEGAL_ACCESS), environ={"CUDA_LAUNCH_BLOCKING": "1"})
    assert line == "RuntimeError: CUDA error: an illegal memory access was encountered"
