"""The trainer's device memory: readings, out-of-memory detection, and a batch size that fits.

Only :func:`memory_reading` runs in a normal run (once per epoch); the rest is
the out-of-memory path.
"""

from __future__ import annotations

import gc
import resource
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import psutil
import torch

from gputui.engine.devices import allocator_memory, device_of, empty_cache, synchronize
from gputui.jobs.events import Memory

Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""One optimizer step on ``(images, labels)``; returns the detached loss."""
T = TypeVar("T")

if TYPE_CHECKING:
    OutOfMemoryError = torch.OutOfMemoryError
else:
    OutOfMemoryError = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
"""torch's out-of-memory error: ``torch.OutOfMemoryError`` from torch 2.5, before that
``torch.cuda.OutOfMemoryError`` (pyproject admits torch 2.1, and many GPU images ship
2.1 to 2.4)."""

ALLOCATION_FAILURES = (
    "out of memory",
    "can't allocate memory",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "hipblas_status_alloc_failed",
    "miopenstatusallocfailed",
    "cudnn_status_internal_error_host_allocation_failed",
    "cudnn_status_internal_error_device_allocation_failed",
    "out_of_device_memory",
    "not enough workspace",
)
"""How a failed allocation reads when it is not an ``OutOfMemoryError``: the host
allocator's, MPS's, cuBLAS's, cuDNN's (8's and 9's names), hipBLAS's or MIOpen's own (their
workspace is allocated inside the library, which reports a status, not torch's error), and
Intel's Level Zero runtime's (``UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY``)."""
CUDNN_UNDER_PRESSURE = (
    "unable to find an engine",
    "cudnn_status_internal_error",
    "cudnn_status_alloc_failed",
    "cudnn_status_not_supported",
    "could not create a primitive",
)
"""How cuDNN fails when too little device memory is left for its workspace: no engine
found, or a status (internal error, not supported) that says nothing of memory: a
convolution with a few MiB left free fails with ``CUDNN_STATUS_INTERNAL_ERROR``. On the CPU,
oneDNN says ``could not create a primitive`` when its convolution cannot allocate (seen
probing under an address-space limit, in CI). See :func:`is_out_of_memory`'s ``probing``."""


def probe_batch_size(
    step: Step, device: torch.device, failed: int, memory_format: torch.memory_format
) -> int | None:
    """The largest of ``failed / 2``, ``failed / 4``, ... 1 with which one real step of the
    run's own ``step`` fits; ``None`` when not even 1 does.

    A cuDNN failure under memory pressure counts as not fitting (:func:`is_out_of_memory`
    with ``probing``): the device is still nearly full after the run's OOM.
    """
    size = failed // 2
    while size >= 1:
        try:
            x = torch.zeros((size, 3, 32, 32), device=device).contiguous(
                memory_format=memory_format
            )
            y = torch.zeros(size, dtype=torch.int64, device=device)
            step(x, y)
            synchronize(device)
            return size
        except Exception as exc:
            if not is_out_of_memory(exc, probing=True):
                raise
        release_memory(device)
        size //= 2
    return None


def is_out_of_memory(exc: BaseException, *, probing: bool = False) -> bool:
    """Whether ``exc`` is a device (or host allocator) running out of memory.

    ``probing``: a batch size is being probed after a real out-of-memory error. The device
    is then nearly full, and cuDNN, left without room for its workspace, fails with one of
    :data:`CUDNN_UNDER_PRESSURE` rather than torch's error: that too is out of memory. Not
    otherwise, since the same words can mean a real cuDNN fault (a bad build, an
    unsupported layout) that a smaller batch would hide.
    """
    if isinstance(exc, OutOfMemoryError):
        return True
    if not isinstance(exc, RuntimeError):
        return False
    text = str(exc).lower()
    words = ALLOCATION_FAILURES + CUDNN_UNDER_PRESSURE if probing else ALLOCATION_FAILURES
    return any(word in text for word in words)


def unless_out_of_memory(measure: Callable[[], T], device: torch.device) -> T | None:
    """``measure()``, or ``None`` when it ran out of memory on ``device``.

    The memory is released after the except block, once the failed attempt's frames
    (which held device tensors) are gone; any other error goes on up, and so does one
    from the release itself (:func:`release_memory`).
    """
    try:
        return measure()
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
    release_memory(device)
    return None


def release_memory(device: torch.device) -> None:
    """Collect garbage and hand cached device memory back after an OOM.

    On a device broken by a CUDA error this raises that error again (CUDA errors are
    sticky: every later call returns them): a caller that must go on catches it.
    """
    gc.collect()
    empty_cache(device)


def memory_reading(device: torch.device) -> Memory:
    """The trainer's memory on ``device``; what a device cannot say is ``None``.

    A GPU's peak is the epoch's: the trainer resets it as each epoch begins
    (:func:`gputui.engine.devices.reset_peak_memory`). The CPU's, the process's peak
    resident set, cannot be reset, and is labelled as the process's.
    """
    allocated = reserved = peak = driver = scope = None
    allocator = allocator_memory(device)
    if allocator is not None:
        allocated = allocator.allocated_bytes
        reserved = allocator.reserved_bytes
        peak = allocator.peak_bytes
        scope = "epoch"
    elif device.type == "mps":
        allocated = torch.mps.current_allocated_memory()
        driver = torch.mps.driver_allocated_memory()
    elif device.type == "cpu":
        peak = _peak_rss()
        scope = "process"
    return Memory(
        device=device_of(device),
        allocated_bytes=allocated,
        reserved_bytes=reserved,
        peak_bytes=peak,
        driver_bytes=driver,
        rss_bytes=_rss(),
        peak_scope=scope,
    )


def _rss() -> int | None:
    try:
        return int(psutil.Process().memory_info().rss)
    except Exception:
        return None


def _peak_rss() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS: bytes; Linux: KiB
