"""The doctor's child process: what torch sees here, and how fast each device is.

Run as ``python -m gputui.training.probe [CONFIG_JSON]``. It prints JSON lines on
stdout, each an object with a ``stage`` key; the parent (:mod:`gputui.doctor.probe`)
merges them into one result. A ``step`` line goes out before each part that can
hang (importing torch, initialising CUDA, measuring a device), so a parent that
has to kill a hung probe can say where it hung, and keeps everything sent before.

Stages, in order::

    torch      version, build (CUDA/HIP/MPS), numpy, platform; or the import error
    cuda       is_available(), device_count(), the init error and warnings, cuDNN
    mps        is_available()
    pitfall    one per pitfall: the real error torch raises for a tutorial mistake
    device     per usable device: identity first, then its measured figures
    done

Library noise on stdout is sent to stderr, so stdout carries only these lines.
Every measurement warms up, synchronizes before reading the clock, and is bounded
by a share of ``budget_s``; a figure that cannot be taken is ``null`` with a note.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import torch

Emit = Callable[[dict[str, Any]], None]

DEFAULT_CONFIG: dict[str, Any] = {
    "measure": True,
    "budget_s": 3.0,
    "cpu_copy_mib": 64,
    "cpu_matmul_n": 1024,
    "gpu_copy_mib": 256,
    "gpu_matmul_n": 8192,
    "mps_copy_mib": 128,
    "mps_matmul_n": 4096,
}
"""What the probe measures, and how big. ``budget_s`` bounds all the timed loops
together (warm-ups and device set-up come on top)."""

MEASUREMENTS_PER_DEVICE = {"cpu": 3, "cuda": 7, "mps": 7}
"""Timed loops per device type: copy and two matmuls, plus four transfers off the CPU."""

ERROR_TEXT_MAX = 1000
"""Longest error text passed on; torch's CUDA errors can run to pages."""


def error_text(error: BaseException) -> str:
    """``RuntimeError: Invalid device string: 'cuda0'``: the type and torch's own words."""
    text = f"{type(error).__name__}: {error}".strip()
    return text if len(text) <= ERROR_TEXT_MAX else text[: ERROR_TEXT_MAX - 1] + "…"


@contextmanager
def recorded_warnings() -> Iterator[list[str]]:
    """Collect the text of every warning raised inside the block."""
    texts: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield texts
    texts.extend(str(item.message).strip() for item in caught)


def seconds_per_call(fn: Callable[[], object], sync: Callable[[], None], budget_s: float) -> float:
    """Time ``fn`` correctly: warm up, then repeat it for about ``budget_s``, synchronized.

    One warm-up call pays for lazy initialisation (allocations, kernel choice); one
    timed call sizes the loop; the loop then runs with one synchronize at its end,
    before the clock is read, so queued device work is counted.

    Returns:
        Seconds per call.
    """
    fn()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    once = time.perf_counter() - start
    if once >= budget_s:
        return once
    reps = max(1, min(100_000, int(budget_s / max(once, 1e-7))))
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - start) / reps


def _finite_positive(value: float) -> float | None:
    return value if math.isfinite(value) and value > 0 else None


class _Figures:
    """Measured figures of one device, with a note for each one that failed."""

    def __init__(self, sync: Callable[[], None], budget_s: float) -> None:
        self.sync = sync
        self.budget_s = budget_s
        self.values: dict[str, float | None] = {}
        self.notes: list[str] = []

    def rate(self, key: str, label: str, work: float, fn: Callable[[], object]) -> None:
        """Store ``work / seconds_per_call(fn)`` under ``key``, or ``None`` and a note."""
        try:
            self.values[key] = _finite_positive(
                work / seconds_per_call(fn, self.sync, self.budget_s)
            )
        except Exception as error:
            self.values[key] = None
            self.notes.append(f"{label}: {error_text(error)}")


def _matmul(figures: _Figures, device: torch.device, n: int) -> None:
    import torch

    for dtype, key, label in (
        (torch.float32, "matmul_fp32_tflops", "fp32 matmul"),
        (torch.bfloat16, "matmul_bf16_tflops", "bf16 matmul"),
    ):
        try:
            a = torch.randn(n, n, device=device, dtype=dtype)
            b = torch.randn(n, n, device=device, dtype=dtype)
            c = torch.empty(n, n, device=device, dtype=dtype)
        except Exception as error:
            figures.values[key] = None
            figures.notes.append(f"{label}: {error_text(error)}")
            continue
        figures.rate(key, label, 2.0 * n**3 / 1e12, lambda a=a, b=b, c=c: torch.mm(a, b, out=c))
        del a, b, c
    precision = torch.get_float32_matmul_precision()
    tf32 = "no TF32" if precision == "highest" else "TF32 allowed"
    figures.notes.append(f"matmul: {n}x{n}; fp32 at torch's {precision!r} precision ({tf32})")


def _pinned(nbytes: int) -> tuple[torch.Tensor | None, str | None]:
    """A pinned host buffer, or ``None`` and torch's reason."""
    import torch

    try:
        return torch.ones(nbytes, dtype=torch.uint8).pin_memory(), None
    except Exception as error:
        return None, error_text(error)


def measure_device(device: torch.device, config: dict[str, Any], budget_s: float) -> dict[str, Any]:
    """Bandwidth and matmul figures of one device; the same code for CPU, CUDA and MPS.

    Args:
        device: ``cpu``, ``cuda:N`` or ``mps``.
        config: Sizes (``*_copy_mib``, ``*_matmul_n``).
        budget_s: Seconds for each timed loop.

    Returns:
        The :class:`~gputui.doctor.checks.DeviceReport` figure fields, and ``notes``.
    """
    import torch

    from gputui.training.devices import synchronize

    kind = "gpu" if device.type == "cuda" else device.type
    figures = _Figures(lambda: synchronize(device), budget_s)
    _copies(figures, device, int(config[f"{kind}_copy_mib"]) << 20)
    _matmul(figures, device, int(config[f"{kind}_matmul_n"]))
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {**figures.values, "notes": figures.notes}


def _copies(figures: _Figures, device: torch.device, nbytes: int) -> None:
    """Copy within the device, and (off the CPU) each way between host and device."""
    import torch

    source = torch.ones(nbytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    label = "host memcpy" if device.type == "cpu" else "copy in device memory"
    figures.rate("copy_bytes_per_s", label, nbytes, lambda: target.copy_(source))
    figures.notes.append(f"{label}: copy_ of {nbytes >> 20} MiB")
    if device.type == "cpu":
        _, why = _pinned(1)
        figures.notes.append(
            "pinned host memory: available"
            if why is None
            else f"pinned host memory: not available in this build ({why})"
        )
        return
    pageable = torch.ones(nbytes, dtype=torch.uint8)
    figures.rate("h2d_pageable_bytes_per_s", "H2D pageable", nbytes, lambda: target.copy_(pageable))
    figures.rate("d2h_pageable_bytes_per_s", "D2H pageable", nbytes, lambda: pageable.copy_(target))
    pinned, why = _pinned(nbytes)
    if pinned is None:
        figures.notes.append(f"pinned: not available ({why})")
    else:
        figures.rate(
            "h2d_pinned_bytes_per_s",
            "H2D pinned",
            nbytes,
            lambda: target.copy_(pinned, non_blocking=True),
        )
        figures.rate(
            "d2h_pinned_bytes_per_s",
            "D2H pinned",
            nbytes,
            lambda: pinned.copy_(target, non_blocking=True),
        )
    figures.notes.append(f"transfers: {nbytes >> 20} MiB each way")


def _cpu_identity() -> dict[str, Any]:
    import psutil
    import torch

    from gputui.training.devices import cpu_model_name

    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        capability = "unknown"
    return {
        "device": "cpu",
        "name": cpu_model_name(),
        "compute_capability": None,
        "memory_bytes": psutil.virtual_memory().total,
        "notes": [f"torch CPU kernels: {capability}, {torch.get_num_threads()} threads"],
    }


def _cuda_identity(index: int) -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(index)
    return {
        "device": f"cuda:{index}",
        "name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "memory_bytes": int(props.total_memory),
        "notes": [],
    }


def _mps_identity() -> dict[str, Any]:
    import torch

    memory = None
    recommended = getattr(torch.mps, "recommended_max_memory", None)
    if recommended is not None:
        try:
            memory = int(recommended())
        except Exception:
            memory = None
    chip = _sysctl("machdep.cpu.brand_string")
    return {
        "device": "mps",
        "name": f"{chip} GPU (MPS)" if chip else "Apple GPU (MPS)",
        "compute_capability": None,
        "memory_bytes": memory,
        "notes": ["memory: what Metal recommends as the most to use (shared with the CPU)"],
    }


def _sysctl(name: str) -> str | None:
    try:
        done = subprocess.run(
            ["sysctl", "-n", name], capture_output=True, text=True, timeout=2, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _platform() -> dict[str, Any]:
    return {
        "system": platform.system(),
        "machine": platform.machine(),
        "mac_version": platform.mac_ver()[0] or None,
        "python": platform.python_version(),
        "executable": sys.executable,
    }


def _torch_stage(emit: Emit) -> Any:
    """Import torch; emit what it is. Returns the module, or ``None`` when it will not import."""
    emit({"stage": "step", "step": "importing torch"})
    failure: BaseException | None = None
    with recorded_warnings() as import_warnings:
        try:
            import torch
        except (Exception, SystemExit) as error:  # a broken install can raise anything
            failure = error
    facts: dict[str, Any] = {
        "stage": "torch",
        "platform": _platform(),
        "import_warnings": import_warnings,
        "numpy_installed": importlib.util.find_spec("numpy") is not None,
        "companions": {name: _package_version(name) for name in ("torchvision", "torchaudio")},
    }
    if failure is not None:
        emit(
            {
                **facts,
                "imported": False,
                "missing": isinstance(failure, ModuleNotFoundError) and failure.name == "torch",
                "import_error": error_text(failure),
                "distribution_version": _package_version("torch"),
            }
        )
        return None
    mps = getattr(torch.backends, "mps", None)
    emit(
        {
            **facts,
            "imported": True,
            "version": torch.__version__,
            "cuda_version": torch.version.cuda,
            "hip_version": getattr(torch.version, "hip", None),
            "mps_built": bool(mps is not None and mps.is_built()),
        }
    )
    return torch


def _cuda_stage(torch: Any, emit: Emit) -> int:
    """Ask CUDA; emit what it says. Returns how many CUDA devices are usable."""
    emit({"stage": "step", "step": "initialising CUDA"})
    init_error = None
    with recorded_warnings() as cuda_warnings:
        available = bool(torch.cuda.is_available())
        count = int(torch.cuda.device_count())
        if not available:
            try:  # is_available() only says False; init() says why, in torch's words
                torch.cuda.init()
            except Exception as error:
                init_error = error_text(error)
    cudnn = None
    if available:
        try:
            cudnn = torch.backends.cudnn.version()
        except Exception:
            cudnn = None
    emit(
        {
            "stage": "cuda",
            "available": available,
            "device_count": count,
            "init_error": init_error,
            "warnings": cuda_warnings,
            "cudnn_version": cudnn,
        }
    )
    return count if available else 0


def _mps_stage(torch: Any, emit: Emit) -> bool:
    """Ask MPS; emit what it says. Returns whether it is usable."""
    emit({"stage": "step", "step": "asking MPS"})
    mps = getattr(torch.backends, "mps", None)
    with recorded_warnings() as mps_warnings:
        available = bool(mps is not None and mps.is_available())
    emit({"stage": "mps", "available": available, "warnings": mps_warnings})
    return available


def _attempt(action: Callable[[], object]) -> str | None:
    """Run a mistake on purpose; return torch's error text (``None`` if it did not raise)."""
    try:
        action()
    except Exception as error:
        return error_text(error)
    return None


def pitfalls(accelerator: str | None) -> list[dict[str, Any]]:
    """The tutorials' three mistakes, made for real; each with torch's own error text.

    Args:
        accelerator: A usable GPU (``cuda:0`` or ``mps``) to make them on; ``None``
            on a CPU-only machine, where the first two use torch's ``meta`` device,
            the only other device every build has (it fails the same kind of device check).

    Returns:
        ``{"name", "shown_on", "error"}`` per pitfall (``error`` is ``None`` when torch
        did not raise), plus ``cpu_error`` for ``.numpy()`` on a CPU tensor (NumPy missing).
    """
    import torch

    other = accelerator or "meta"
    return [
        {
            "name": "cross-device",
            "shown_on": other,
            "error": _attempt(lambda: torch.ones(2) + torch.ones(2, device=other)),
        },
        {
            "name": "numpy",
            "shown_on": other,
            "error": _attempt(lambda: torch.ones(2, device=other).numpy()),
            "cpu_error": _attempt(lambda: torch.ones(2).numpy()),
        },
        {
            "name": "device-string",
            "shown_on": "cuda0",
            "error": _attempt(lambda: torch.device("cuda0")),
        },
    ]


def run(config: dict[str, Any], emit: Emit) -> None:
    """Probe torch and the devices, emitting each stage as it is known."""
    started = time.perf_counter()
    torch = _torch_stage(emit)
    if torch is None:
        emit({"stage": "done", "elapsed_s": time.perf_counter() - started})
        return
    cuda_count = _cuda_stage(torch, emit)
    mps_available = _mps_stage(torch, emit)

    emit({"stage": "step", "step": "showing the pitfalls"})
    accelerator = "cuda:0" if cuda_count else ("mps" if mps_available else None)
    for pitfall in pitfalls(accelerator):
        emit({"stage": "pitfall", "pitfall": pitfall})

    devices: list[tuple[str, Callable[[], dict[str, Any]]]] = [("cpu", _cpu_identity)]
    devices += [(f"cuda:{i}", lambda i=i: _cuda_identity(i)) for i in range(cuda_count)]
    if mps_available:
        devices.append(("mps", _mps_identity))
    loops = sum(MEASUREMENTS_PER_DEVICE[name.split(":")[0]] for name, _ in devices)
    budget_s = float(config["budget_s"]) / max(loops, 1)
    for name, identity in devices:
        emit({"stage": "step", "step": f"reading {name}"})
        try:
            emit({"stage": "device", "device": identity()})
        except Exception as error:
            emit({"stage": "device", "device": {"device": name, "error": error_text(error)}})
            continue
        if not config["measure"]:
            emit({"stage": "device", "device": {"device": name, "notes": ["not measured (quick)"]}})
            continue
        emit({"stage": "step", "step": f"measuring {name}"})
        try:
            figures = measure_device(torch.device(name), config, budget_s)
        except Exception as error:
            figures = {"notes": [f"measurement failed: {error_text(error)}"]}
        emit({"stage": "device", "device": {"device": name, **figures}})
    emit({"stage": "done", "elapsed_s": time.perf_counter() - started})


def _json_channel() -> TextIO:
    """A private copy of stdout for the JSON lines; fd 1 itself now goes to stderr."""
    sys.stdout.flush()
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    return channel


def parse_config(argv: list[str]) -> dict[str, Any]:
    """The defaults, updated by the JSON object in ``argv[0]`` (when given).

    Raises:
        ValueError: ``argv[0]`` is not a JSON object of known keys.
    """
    config = dict(DEFAULT_CONFIG)
    if argv:
        given = json.loads(argv[0])
        if not isinstance(given, dict):
            raise ValueError("the probe's config must be a JSON object")
        unknown = sorted(set(given) - set(DEFAULT_CONFIG))
        if unknown:
            raise ValueError(f"unknown probe config keys: {', '.join(unknown)}")
        config.update(given)
    return config


def main(argv: list[str] | None = None) -> int:
    """Run the probe; JSON lines on stdout. Returns the exit code (2: a bad config)."""
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv)
    except ValueError as error:
        print(f"gputui.training.probe: {error}", file=sys.stderr)
        return 2
    channel = _json_channel()

    def emit(line: dict[str, Any]) -> None:
        channel.write(json.dumps(line, allow_nan=False, default=str) + "\n")
        channel.flush()

    try:
        run(config, emit)
    except Exception as error:  # a stage nobody foresaw: say so, keep what was sent
        emit({"stage": "error", "error": error_text(error)})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
