"""Apple MPS: the GPU's load from the IORegistry (``ioreg``, no sudo needed), and whether
PyTorch can use it, asked once of the engine's probe in a child process (the UI process never
imports torch). Anywhere but macOS the reading says in a sentence that there is none.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeGuard

from gputui.format import exception_line
from gputui.telemetry.readings import MpsReading

if TYPE_CHECKING:
    from gputui.jobs.process import Outcome

IOREG_COMMAND = ("ioreg", "-a", "-r", "-d", "1", "-c", "IOAccelerator")
"""The IORegistry query; ``-a`` prints an XML property list (an array of dictionaries, one per
GPU) that :mod:`plistlib` reads, where ioreg's text form has no spec and clips long lines."""

IOREG_TIMEOUT_S = 5.0
"""How long one ``ioreg`` run may take before the sample gives up on it."""

_PLATFORM_NAMES = {"linux": "Linux", "win32": "Windows", "cygwin": "Windows", "darwin": "macOS"}


@dataclass(frozen=True, slots=True)
class IoregAccelerator:
    """One ``IOAccelerator`` entry of the IORegistry, as far as ioreg gave it."""

    io_class: str | None
    """The driver class, e.g. ``AGXAcceleratorG13X``."""
    model: str | None
    """The GPU's model, e.g. ``Apple M1``; Intel Macs keep it on the parent PCI device."""
    core_count: int | None
    """``gpu-core-count``, on Apple silicon."""
    utilization_percent: float | None
    """``Device Utilization %``."""
    memory_in_use_bytes: int | None
    """``In use system memory``."""


def parse_ioreg(data: bytes | str) -> tuple[IoregAccelerator, ...]:
    """The accelerators in what :data:`IOREG_COMMAND` printed: one per dictionary of the
    plist's array (none for blank output, or a root that is no array), a key ioreg did not
    give (or gave in another shape) ``None``.

    Raises:
        ValueError: ``data`` is not a property list (cut short, not XML, ...).
    """
    # Only macOS parses plists: the monitor elsewhere does not pay plistlib's import.
    import plistlib
    from xml.parsers.expat import ExpatError

    # plistlib lets a malformed plist out as any of these, IndexError and AttributeError
    # included (a <key> outside any <dict>, an unreadable <date>): callers get one error.
    try:
        raw = data.encode() if isinstance(data, str) else data
        if not raw.strip():
            return ()  # ioreg prints nothing at all when no object matches
        root = plistlib.loads(raw)
    except (ValueError, ExpatError, IndexError, AttributeError) as error:
        raise ValueError(
            f"ioreg's output is not a property list: {exception_line(error)}"
        ) from error
    if not isinstance(root, list):
        return ()
    return tuple(_accelerator(entry) for entry in root if isinstance(entry, dict))


def _accelerator(entry: dict[Any, Any]) -> IoregAccelerator:
    statistics = entry.get("PerformanceStatistics")
    if not isinstance(statistics, dict):
        statistics = {}
    utilization = statistics.get("Device Utilization %")
    memory = statistics.get("In use system memory")
    cores = entry.get("gpu-core-count")
    # IOClass is the driver's own word on its class; IOObjectClass, which ioreg adds to each
    # entry, is the class name its text output shows in the entry's header.
    io_class = entry.get("IOClass")
    if not isinstance(io_class, str):
        io_class = entry.get("IOObjectClass")
    return IoregAccelerator(
        io_class=io_class if isinstance(io_class, str) else None,
        model=_text(entry.get("model")),
        core_count=cores if isinstance(cores, int) and not isinstance(cores, bool) else None,
        utilization_percent=float(utilization) if _is_number(utilization) else None,
        memory_in_use_bytes=int(memory) if _is_number(memory) else None,
    )


def _text(value: object) -> str | None:
    if isinstance(value, bytes):  # <data>: a C string stored as data, NUL-terminated
        value = value.split(b"\0", 1)[0].decode("utf-8", errors="replace")
    return (value.strip() or None) if isinstance(value, str) else None


def _is_number(value: object) -> TypeGuard[int | float]:
    # ioreg's numbers fit in 64 bits; a plist can still hold a bigger <integer>, or an inf or
    # nan <real>, which are no reading (and which float() or int() would raise on).
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) < 1 << 64
    return isinstance(value, float) and math.isfinite(value)


def run_ioreg() -> bytes:
    """What :data:`IOREG_COMMAND` printed.

    Raises:
        OSError: ioreg is missing or cannot start.
        subprocess.SubprocessError: it timed out or failed.
    """
    done = subprocess.run(IOREG_COMMAND, capture_output=True, timeout=IOREG_TIMEOUT_S, check=True)
    return done.stdout


@dataclass(frozen=True, slots=True)
class TorchMpsStatus:
    """What a child process said about PyTorch's MPS backend."""

    built: bool | None
    """``torch.backends.mps.is_built()``; ``None`` when torch could not be asked."""
    available: bool | None
    """``torch.backends.mps.is_available()``; ``None`` when torch could not be asked."""
    torch_version: str | None = None
    """``torch.__version__`` in the child."""
    error: str | None = None
    """A sentence on why torch could not be asked, with the fix; ``None`` when it answered."""


class TorchMpsProbe:
    """Asks PyTorch about MPS once, in the engine's child process, on a background thread;
    ``result`` is ``None`` until the child has answered (torch's import time)."""

    def __init__(
        self, python: Sequence[str] | None = None, *, timeout_s: float | None = None
    ) -> None:
        """Prepare the probe; nothing runs until ``start()``.

        Args:
            python: The interpreter to ask, with any flags (default: ``sys.executable``).
            timeout_s: How long the child may take (default: :attr:`ProbeConfig.TIMEOUT_S`).
        """
        self._python = tuple(python) if python is not None else (sys.executable,)
        self._timeout_s = timeout_s
        self.result: TorchMpsStatus | None = None
        """The answer, or ``None`` until it is known."""
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start asking in the background; later calls do nothing."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run_once, name="gputui-torch-mps-probe", daemon=True
                )
                self._thread.start()

    def wait(self, timeout_s: float | None = None) -> TorchMpsStatus | None:
        """Start if needed, then wait up to ``timeout_s`` for the answer."""
        self.start()
        self._done.wait(timeout_s)
        return self.result

    def _run_once(self) -> None:
        try:
            self.result = self.ask()
        finally:
            self._done.set()

    def ask(self) -> TorchMpsStatus:
        """Ask now, blocking until the child answers or times out. Never raises."""
        # only on macOS, once: the jobs' modules stay off every other start path
        from gputui.jobs.config import ProbeConfig
        from gputui.jobs.process import run_to_end

        timeout_s = ProbeConfig.TIMEOUT_S if self._timeout_s is None else self._timeout_s
        outcome = run_to_end(
            ProbeConfig(measure=False, torch_only=True), timeout_s=timeout_s, python=self._python
        )
        return _status_from_outcome(outcome, self._python[0], timeout_s)


def _unknown(sentence: str) -> TorchMpsStatus:
    return TorchMpsStatus(built=None, available=None, error=sentence)


def _status_from_outcome(outcome: Outcome, python: str, timeout_s: float) -> TorchMpsStatus:
    from gputui.jobs.events import Error, MpsProbed, TorchProbed  # as in TorchMpsProbe.ask

    if outcome.timed_out:
        return _unknown(
            f"PyTorch took over {timeout_s:g} s to say whether MPS is available, "
            "so gputui stopped asking; run `python -c 'import torch'` to see why."
        )
    if outcome.start_error is not None:
        return _unknown(
            f"Could not start {python} to ask PyTorch about MPS: {outcome.start_error}."
        )
    torch = next((e for e in outcome.events if isinstance(e, TorchProbed)), None)
    mps = next((e for e in outcome.events if isinstance(e, MpsProbed)), None)
    if torch is None or (torch.imported and mps is None):
        said = outcome.last.message if isinstance(outcome.last, Error) else None
        last = said if outcome.said_its_end and said else None
        last = last or (outcome.stderr_tail.strip().splitlines() or ["no output"])[-1]
        return _unknown(
            f"Asking PyTorch about MPS failed (exit code {outcome.returncode}: {last}); "
            f"run `{python} -c 'import torch'` to see why."
        )
    if not torch.imported:
        if torch.missing:
            return _unknown(
                f"PyTorch is not installed in {python}; install it with "
                "`pip install torch` to train on MPS."
            )
        return _unknown(
            f"PyTorch is installed but fails to import ({torch.import_error}); "
            "reinstall it with `pip install --force-reinstall torch`."
        )
    assert mps is not None
    return TorchMpsStatus(
        built=bool(torch.mps_built),
        available=bool(mps.available),
        torch_version=str(torch.version),
    )


def torch_mps_sentence(status: TorchMpsStatus | None) -> str | None:
    """A sentence on what stands between PyTorch and MPS; ``None`` when nothing does, or
    while the probe's answer (``status``) is not known."""
    if status is None:
        return None
    if status.error is not None:
        return status.error
    if not status.built:
        return (
            f"This PyTorch ({status.torch_version}) was built without MPS; install the macOS "
            "wheel with `pip install torch`."
        )
    if not status.available:
        return (
            "PyTorch's MPS backend is built but not available: it needs macOS 12.3 or later "
            "and a Metal GPU."
        )
    return None


def platform_name(platform: str) -> str:
    """``sys.platform`` as people say it: ``linux`` -> ``Linux``."""
    for prefix, name in _PLATFORM_NAMES.items():
        if platform.startswith(prefix):
            return name
    return platform


class MpsSampler:
    """Samples Apple's GPU through the IORegistry, and tells whether PyTorch can use it;
    ``sample()`` waits for one ``ioreg`` run on macOS, elsewhere it returns at once."""

    def __init__(
        self,
        *,
        platform: str = sys.platform,
        ioreg: Callable[[], bytes | str] = run_ioreg,
        torch_probe: TorchMpsProbe | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Set up the sampler; on macOS, start asking PyTorch about MPS in the background.

        Args:
            platform: ``sys.platform``.
            ioreg: Returns what :data:`IOREG_COMMAND` prints, bytes or text; raises
                ``OSError`` or ``subprocess.SubprocessError`` when it cannot.
            torch_probe: Asks PyTorch about MPS (default: a child process of this Python).
            clock: Gives ``taken_at``.
        """
        self._macos = platform == "darwin"
        self._ioreg = ioreg
        self._clock = clock
        self._torch_probe = torch_probe
        if self._macos:
            if self._torch_probe is None:
                self._torch_probe = TorchMpsProbe()
            self._torch_probe.start()
        self._elsewhere = MpsReading(
            supported_platform=False,
            message=(
                f"MPS is Apple's GPU backend for Macs; this machine runs {platform_name(platform)}."
            ),
        )

    def wait_for_torch(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for PyTorch's answer (``gputui snapshot`` does, once)."""
        if self._torch_probe is not None:
            self._torch_probe.wait(timeout_s)

    def never_blocks(self) -> bool:
        """Off macOS a sample only dates the reading that says so: it cannot block."""
        return not self._macos

    def sample(self) -> MpsReading:
        """Take one sample. Never raises."""
        if not self._macos:
            return replace(self._elsewhere, taken_at=self._clock())
        torch = self._torch_probe.result if self._torch_probe is not None else None
        sentences: list[str] = []
        accelerator: IoregAccelerator | None = None
        try:
            accelerators = parse_ioreg(self._ioreg())
        except (OSError, subprocess.SubprocessError, ValueError) as error:
            sentences.append(
                f"Could not read the GPU's load from the IORegistry ({exception_line(error)}); "
                f"check that `{' '.join(IOREG_COMMAND)}` runs."
            )
        else:
            accelerator = _first_measured(accelerators)
            if not accelerators:
                sentences.append("The IORegistry lists no GPU (no IOAccelerator).")
            elif accelerator is None or accelerator.utilization_percent is None:
                sentences.append(
                    "The IORegistry gives no GPU load (no Device Utilization % in its "
                    "PerformanceStatistics)."
                )
        torch_sentence = torch_mps_sentence(torch)
        if torch_sentence is not None:
            sentences.append(torch_sentence)
        return MpsReading(
            supported_platform=True,
            message=" ".join(sentences) or None,
            gpu_name=_gpu_name(accelerator),
            utilization_percent=accelerator.utilization_percent if accelerator else None,
            memory_in_use_bytes=accelerator.memory_in_use_bytes if accelerator else None,
            torch_mps_built=torch.built if torch else None,
            torch_mps_available=torch.available if torch else None,
            taken_at=self._clock(),
        )


def _first_measured(accelerators: Sequence[IoregAccelerator]) -> IoregAccelerator | None:
    """The first accelerator that reports a load (the same one every sample), else the first."""
    measured = (a for a in accelerators if a.utilization_percent is not None)
    return next(measured, accelerators[0] if accelerators else None)


def _gpu_name(accelerator: IoregAccelerator | None) -> str | None:
    if accelerator is None or accelerator.model is None:
        return None
    if accelerator.core_count:
        return f"{accelerator.model} ({accelerator.core_count}-core GPU)"
    return accelerator.model
