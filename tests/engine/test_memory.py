"""Out-of-memory detection, and the engine on a torch without ``torch.OutOfMemoryError``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from gputui.device import Device
from gputui.engine.devices import reset_peak_memory
from gputui.engine.memory import (
    OutOfMemoryError,
    is_out_of_memory,
    memory_reading,
    probe_batch_size,
)
from gputui.jobs.config import RunConfig
from gputui.jobs.events import Error, parse_event
from gputui.jobs.process import child_env
from tests.engine.limited import OOM_BATCH

OLD_TORCH = """
import sys
import torch
del torch.OutOfMemoryError  # as on torch 2.1 to 2.4, which pyproject admits
from tests.engine.limited import main
main(["-m", "gputui.engine", "train", sys.argv[1]])
"""
"""Runs the engine as ``python -m gputui.engine train CONFIG`` does, under an address-space
limit (:mod:`tests.engine.limited`), on a torch that lacks ``torch.OutOfMemoryError``."""


@pytest.mark.parametrize(
    "error",
    [
        OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError("MPS backend out of memory (MPS allocated: 17.00 GB)"),
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB"),
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
        RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
        RuntimeError("FIND was unable to find an engine: not enough workspace for any algorithm"),
        RuntimeError("HIP error: HIPBLAS_STATUS_ALLOC_FAILED when calling `hipblasCreate`"),
        RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED"),
        RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"),
        RuntimeError("MIOpen error: miopenStatusAllocFailed"),
        RuntimeError(
            "level_zero backend failed with error: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)"
        ),
    ],
)
def test_every_way_an_allocation_fails_is_out_of_memory(error: BaseException) -> None:
    assert is_out_of_memory(error)


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (256x400 and 256x120)"),
        RuntimeError("CUDA error: device-side assert triggered"),
        ValueError("out of memory"),  # not an error torch raises for memory
    ],
)
def test_other_errors_are_not_out_of_memory(error: BaseException) -> None:
    assert not is_out_of_memory(error)


CUDNN_UNDER_PRESSURE = [
    RuntimeError("GET was unable to find an engine to execute this computation"),
    RuntimeError("FIND was unable to find an engine to execute this computation"),
    RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR"),
    RuntimeError(
        "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
        "non-contiguous input."
    ),
    RuntimeError("could not create a primitive"),  # oneDNN, on the CPU
]
"""How cuDNN (and oneDNN) fail a convolution when there is no room left for a workspace."""


@pytest.mark.parametrize("error", CUDNN_UNDER_PRESSURE)
def test_cudnn_failing_is_out_of_memory_only_while_a_batch_size_is_probed(
    error: RuntimeError,
) -> None:
    assert is_out_of_memory(error, probing=True)
    assert not is_out_of_memory(error)  # outside a probe it may be a real cuDNN fault


def test_probing_counts_cudnn_failing_under_pressure_as_not_fitting() -> None:
    errors = iter(CUDNN_UNDER_PRESSURE)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[0] >= 64:  # 256, 128 and 64 fail, each in its own words
            raise next(errors)
        return x.sum()

    assert probe_batch_size(step, torch.device("cpu"), 512, torch.contiguous_format) == 32


def test_probing_still_raises_an_error_that_is_not_memory() -> None:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (256x400 and 256x120)")

    with pytest.raises(RuntimeError, match="mat1 and mat2"):
        probe_batch_size(step, torch.device("cpu"), 512, torch.contiguous_format)


def test_a_real_out_of_memory_names_a_batch_size_that_fits_even_on_an_older_torch() -> None:
    """The child's own allocator fails (on the CPU a ``RuntimeError``, on any torch): the run
    ends in one ``oom`` error naming the batch, and a smaller batch that a real step then
    trained, under the same limit, beside the same data."""
    config = RunConfig(
        dataset="synthetic",
        limit=OOM_BATCH,
        test_limit=64,
        batch_size=OOM_BATCH,
        epochs=1,
        threads=1,
        record=False,
    )
    done = subprocess.run(
        [sys.executable, "-c", OLD_TORCH, config.to_json()],
        capture_output=True,
        text=True,
        env=child_env(os.environ),
        timeout=120,
        check=False,
    )
    events = [parse_event(line) for line in done.stdout.splitlines()]
    last = events[-1] if events else None
    assert isinstance(last, Error), (done.stdout, done.stderr)
    assert (last.kind, done.returncode) == ("oom", 1), last
    fits = last.suggested_batch_size
    assert fits is not None and fits < OOM_BATCH, last
    assert last.message == (
        f"out of memory on cpu at batch size {OOM_BATCH}; batch size {fits} fits: try that"
    )
    assert "DefaultCPUAllocator: can't allocate memory" in last.detail  # torch's own words
    assert [type(e).__name__ for e in events[:2]] == ["RunStarted", "DataReady"]
    assert hasattr(torch, "OutOfMemoryError")  # this process's torch is untouched
    json.loads(done.stdout.splitlines()[0])  # the stream is JSON lines from its first line


def test_only_a_gpu_s_peak_is_reset_and_for_the_run_s_own_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reset: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset.append)
    monkeypatch.setattr(torch.xpu, "reset_peak_memory_stats", reset.append)
    for device in ("cuda:1", "cpu", "mps", "xpu:0"):
        reset_peak_memory(torch.device(device))
    assert reset == [torch.device("cuda:1"), torch.device("xpu:0")]


def test_an_xpu_torch_without_memory_statistics_reads_them_as_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch 2.4's ``torch.xpu`` has no memory statistics (they came in 2.5): an epoch's
    reset and reading must not raise there, and nothing is guessed."""
    monkeypatch.setattr(torch, "xpu", SimpleNamespace(is_available=lambda: True))
    xpu = torch.device("xpu:0")
    reset_peak_memory(xpu)
    reading = memory_reading(xpu)
    assert (reading.allocated_bytes, reading.reserved_bytes, reading.peak_bytes) == (None,) * 3
    assert reading.peak_scope is None and reading.device == Device("xpu", 0)


def test_the_peak_says_what_it_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA's peak is reset each epoch; the CPU's is the process's (ru_maxrss cannot be reset)."""
    asked: list[tuple[str, torch.device]] = []
    for name, value in (
        ("memory_allocated", 1 * 2**20),
        ("memory_reserved", 4 * 2**20),
        ("max_memory_allocated", 3 * 2**20),
    ):

        def figure(device: torch.device, name: str = name, value: int = value) -> int:
            asked.append((name, device))
            return value

        monkeypatch.setattr(torch.cuda, name, figure)
    cuda = memory_reading(torch.device("cuda:1"))
    assert (cuda.device, cuda.allocated_bytes, cuda.reserved_bytes) == (
        Device("cuda", 1),
        2**20,
        4 * 2**20,
    )
    assert (cuda.peak_bytes, cuda.peak_scope) == (3 * 2**20, "epoch")
    assert {device for _, device in asked} == {torch.device("cuda:1")}
    cpu = memory_reading(torch.device("cpu"))
    assert cpu.peak_scope == "process" and (cpu.peak_bytes or 0) > 0
