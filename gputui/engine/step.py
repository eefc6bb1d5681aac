"""The one training step, used by the trainer and every experiment alike: seed 001's loss
and optimizer in their fastest form for the device.

An experiment that times "a step" times exactly the step ``gputui bench`` trains with,
but eagerly: on CUDA, bench replays that step from a CUDA graph (:class:`StaticStep`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType

import torch

from gputui.engine.failures import failure_line
from gputui.engine.memory import Step

IEEE_FP32 = "IEEE fp32"
TF32 = "TF32"
BF16 = "bf16 autocast, IEEE fp32 elsewhere"


def set_math(precision: str, device: torch.device) -> str:
    """Set the math a run does, whatever torch's defaults are; returns what it is, in words.

    torch's defaults differ by operation: matmuls are IEEE fp32, but cuDNN convolutions
    may use TF32. So ``fp32`` turns TF32 off for both, ``tf32`` turns it on for both (and
    for oneDNN on XPU), and ``bf16`` runs under autocast with the rest IEEE. The CPU and MPS
    have no TF32: there ``tf32`` is IEEE fp32, and says so, as it does where torch reads TF32
    back as off (:func:`tf32_taken`: a ROCm build without ``HIPBLASLT_ALLOW_TF32=1``).
    """
    tf32, xpu = precision == "tf32", device.type == "xpu"
    set_tf32(tf32, onednn=xpu)
    if precision == "bf16":
        return BF16
    if tf32 and device.type not in ("cuda", "xpu"):
        return f"{IEEE_FP32} (TF32 is CUDA's and XPU's; {device.type} has none)"
    if tf32 and not tf32_taken(onednn=xpu):
        hint = "" if xpu else ": ROCm takes it with HIPBLASLT_ALLOW_TF32=1"
        return f"{IEEE_FP32} (torch reads TF32 back as off{hint})"
    return TF32 if tf32 else IEEE_FP32


def tf32_taken(
    backends: ModuleType = torch.backends,
    environ: Mapping[str, str] = os.environ,
    *,
    onednn: bool = False,
) -> bool:
    """Whether torch takes the TF32 just asked for, read back through the API that
    :func:`set_tf32` set (torch 2.9 on refuses to read ``allow_tf32`` once ``fp32_precision``
    was set: "a mix of the legacy and new APIs"). A ROCm build's matmuls take it only with
    ``HIPBLASLT_ALLOW_TF32=1`` as well (torch 2.7 on; hipBLASLt, on the GPUs that have it),
    read as torch reads it: ``1``. ``onednn`` asks oneDNN's flag, XPU's, instead.
    """
    if onednn:
        return bool(backends.mkldnn.allow_tf32)
    matmul = backends.cuda.matmul
    taken = matmul.fp32_precision == "tf32" if _precision_api(backends) else matmul.allow_tf32
    rocm = getattr(torch.version, "hip", None)
    return bool(taken) and (not rocm or environ.get("HIPBLASLT_ALLOW_TF32") == "1")


def set_tf32(on: bool, backends: ModuleType = torch.backends, *, onednn: bool = False) -> None:
    """Turn TF32 on or off for CUDA matmuls and cuDNN alike, through one API.

    torch 2.9 added ``fp32_precision`` and deprecated the ``allow_tf32`` flags; a mix of
    the two makes torch's own checks (Inductor's among them) raise, so the flags are set
    only on a torch without the new API. The global ``torch.backends.fp32_precision`` is
    left alone: it reaches oneDNN on the CPU too. ``onednn`` (an XPU run) sets oneDNN's
    ``allow_tf32`` too: XPU's convolutions and matmuls read it (not its ``fp32_precision``,
    whose setter is the global one).
    """
    if _precision_api(backends):
        precision = "tf32" if on else "ieee"
        cudnn = backends.cudnn
        for knob in (backends.cuda.matmul, cudnn, cudnn.conv, cudnn.rnn):
            knob.fp32_precision = precision
    else:
        backends.cuda.matmul.allow_tf32 = on
        backends.cudnn.allow_tf32 = on
    if onednn:
        backends.mkldnn.allow_tf32 = on


def _precision_api(backends: ModuleType) -> bool:
    """Whether this torch sets CUDA's TF32 through ``fp32_precision`` (torch 2.9 on)."""
    return hasattr(backends.cuda.matmul, "fp32_precision") and hasattr(backends.cudnn, "conv")


def bf16_autocast(
    device: torch.device, bf16: bool, *, cache: bool = True
) -> AbstractContextManager[object]:
    """bf16 autocast on ``device`` when ``bf16``, else nothing at all; ``cache=False`` for a
    step captured in a CUDA graph (autocast's cast-weight cache must not outlive a capture).

    Never ``torch.autocast(..., enabled=False)``: torch before 2.5 refuses the ``mps``
    device type even when disabled, which would stop every MPS run, fp32 included.
    """
    if bf16:
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache)
    return nullcontext()


def make_optimizer(
    model: torch.nn.Module, device: torch.device, *, capturable: bool = False
) -> torch.optim.Adam:
    """Adam with default hyperparameters, in its fastest implementation for ``device``.

    CUDA, and MPS where this torch has the kernel: ``fused`` (one kernel for every
    parameter). ``capturable`` for a step captured in a CUDA graph: torch refuses to capture
    an optimizer without it (fused Adam keeps its step count on the device either way).
    CPU: ``foreach`` (each update stage is one call over the ten parameter tensors, not
    ten): the default loop's numbers, bit for bit, in less time. ``fused`` is faster still
    on the CPU but rounds differently from the tutorial's Adam.
    """
    if device.type in {"cuda", "mps"} and fused_adam_supported(device.type):
        return torch.optim.Adam(model.parameters(), fused=True, capturable=capturable)
    if device.type == "cpu":
        return torch.optim.Adam(model.parameters(), foreach=True)
    return torch.optim.Adam(model.parameters(), capturable=capturable)


def fused_adam_supported(device_type: str) -> bool:
    """Whether this torch has fused optimizer kernels for ``device_type``, as its optimizers
    themselves decide (MPS joined CUDA in torch 2.4).

    torch keeps the list in a private helper; a torch without it is older than them all
    and fuses on CUDA only.
    """
    try:
        # a private module that may move: asked only when choosing the optimizer
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:
        return device_type == "cuda"
    return device_type in _get_fused_kernels_supported_devices()


def make_step(
    forward: Callable[[torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    *,
    bf16: bool = False,
    graphed: bool = False,
) -> Step:
    """One optimizer step of ``forward`` (the model, or its compiled form) on a batch, its
    forward pass under bf16 autocast with ``bf16``; returns the detached loss, on the device.
    ``graphed``: the step is to be captured in a CUDA graph (:class:`StaticStep`)."""
    criterion = torch.nn.CrossEntropyLoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with bf16_autocast(device, bf16, cache=not graphed):
            loss = criterion(forward(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        detached: torch.Tensor = loss.detach()
        return detached

    return step


WARMUP_STEPS = 3
"""Steps run eagerly (on the capture's side stream, on CUDA) before the capture: cuDNN's
and cuBLAS's lazy set-up and the optimizer's state are made outside the graph, as torch's
docs ask."""


class StaticStep:
    """The step of one run replayed from a CUDA graph: each batch is copied into buffers
    that never move, and the whole step (forward, loss, backward, the fused optimizer) is
    one graph launch instead of a launch per kernel, the host's cost that bounds this small
    CNN's pace on a GPU.

    The first :data:`WARMUP_STEPS` batches train eagerly from the buffers; the next is
    captured, then replayed. Without ``capture`` (the CPU, where the path is tested against
    the eager step) every batch runs eagerly from the buffers. A batch of another shape
    runs eagerly. A capture that fails leaves the run eager, and ``fell_back`` is called
    with why, once. The loss returned is one tensor, overwritten by the next step: add it
    up, do not keep it.
    """

    def __init__(
        self,
        step: Step,
        device: torch.device,
        *,
        capture: bool,
        fell_back: Callable[[str], object] = lambda why: None,
    ) -> None:
        self.step, self.device, self.capture = step, device, capture
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.failed: str | None = None
        """Why the capture failed (its first cause, in one line); ``None`` while it has not."""
        self._fell_back = fell_back
        self._x: torch.Tensor | None = None
        self._y: torch.Tensor | None = None
        self._loss: torch.Tensor | None = None
        self._side: torch.cuda.Stream | None = None

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self._x is None or self._y is None:
            self._x = torch.empty_like(x)
            self._y = torch.empty_like(y)
        if x.shape != self._x.shape or y.shape != self._y.shape:
            return self.step(x, y)
        self._x.copy_(x)
        self._y.copy_(y)
        self.calls += 1
        if self.graph is not None:
            self.graph.replay()
            assert self._loss is not None
            return self._loss
        if not self.capture or self.failed is not None:
            return self.step(self._x, self._y)
        return self._warm_up_or_capture(self._x, self._y)  # GPU-ONLY

    def _warm_up_or_capture(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Warm up on the side stream the capture will use, then capture and replay once;
        a capture that fails is left (its stream too) and the step runs eagerly."""
        main = torch.cuda.current_stream(self.device)
        if self._side is None:
            self._side = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]  # torch's own
            _profiler_ready_for_graphs()
        side = self._side
        if self.calls <= WARMUP_STEPS:
            side.wait_stream(main)
            with torch.cuda.stream(side), warnings.catch_warnings():
                # "capturable=True ... without CUDA graph capture": these steps, on purpose
                warnings.filterwarnings("ignore", message=".*capturable=True.*")
                loss = self.step(x, y)
            main.wait_stream(side)
            return loss
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side):
                loss = self.step(x, y)
        except Exception as exc:  # torch raises RuntimeError; the run goes on eagerly
            torch.cuda.set_stream(main)  # a capture that failed to end leaves its own set
            self.failed = failure_line(_first_cause(exc))
        else:
            self.graph, self._loss = graph, loss
            graph.replay()
            return loss
        self._fell_back(self.failed)
        return self.step(x, y)


def _first_cause(exc: BaseException) -> BaseException:
    """The error a chain began with: a capture that failed inside raises again as it ends
    ("operation failed due to a previous error during capture")."""
    while (inner := exc.__cause__ or exc.__context__) is not None:
        exc = inner
    return exc


def _profiler_ready_for_graphs() -> None:
    """Start torch's profiler once before the capture, as torch does for its own graphs:
    profiling a graph captured before the profiler ever ran can fault (pytorch#75504), and
    the run's busy share is profiled after training (:func:`gputui.engine.pace.busy_share`).
    A torch without the helper (it is private), or whose profiler fails here, goes without:
    the busy share's own profiling then says what failed."""
    try:
        from torch.profiler import _utils  # a private helper that may move

        _utils._init_for_cuda_graphs()
    except Exception:  # best effort, never the run's end
        pass
