"""Apple MPS: the GPU's load from the IORegistry, and whether PyTorch can use it.

On macOS, ``ioreg -r -d 1 -c IOAccelerator`` prints each GPU's
``PerformanceStatistics`` (no sudo needed); :func:`parse_ioreg` reads that text.
Whether PyTorch's MPS backend is built and available is asked once, of the
engine's probe in a child process (the UI process never imports torch), in the
background; it is ``None`` until the answer comes. Anywhere but macOS there is
nothing to measure, and the reading says so in a sentence.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gputui.format import exception_line
from gputui.telemetry.readings import MpsReading

if TYPE_CHECKING:
    from gputui.jobs.process import Outcome

IOREG_COMMAND = ("ioreg", "-r", "-d", "1", "-w", "0", "-c", "IOAccelerator")
"""The IORegistry query; ``-w 0`` keeps ioreg from clipping the long statistics line."""

IOREG_TIMEOUT_S = 5.0
"""How long one ``ioreg`` run may take before the sample gives up on it."""

TORCH_PROBE_TIMEOUT_S = 60.0
"""How long the child process may take to import torch and answer."""

_IOREG_KEYS = frozenset({"IOClass", "model", "gpu-core-count", "PerformanceStatistics"})
"""The properties read; the others (dozens) are skipped unparsed."""

_PLATFORM_NAMES = {"linux": "Linux", "win32": "Windows", "cygwin": "Windows", "darwin": "macOS"}


@dataclass(frozen=True, slots=True)
class IoregAccelerator:
    """One ``IOAccelerator`` entry of the IORegistry, as far as ioreg printed it."""

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


def parse_ioreg(text: str) -> tuple[IoregAccelerator, ...]:
    """Read the accelerators out of ``ioreg -r -d 1 -c IOAccelerator`` output.

    Args:
        text: What ioreg printed.

    Returns:
        One entry per ``+-o`` object in the text, in order. A key ioreg did not
        print, or printed in a shape this parser does not know, is ``None``.
    """
    accelerators: list[IoregAccelerator] = []
    entry: dict[str, Any] | None = None
    io_class: str | None = None
    for line in text.splitlines():
        stripped = line.strip().lstrip("|").strip()
        if stripped.startswith("+-o "):
            if entry is not None:
                accelerators.append(_accelerator(io_class, entry))
            entry, io_class = {}, _entry_class(stripped)
            continue
        if entry is None or not stripped.startswith('"'):
            continue
        key, separator, value = stripped.partition('" = ')
        if not separator or key[1:] not in _IOREG_KEYS:
            continue
        try:
            entry[key[1:]] = _IoregValueParser(value).parse()
        except ValueError:
            continue  # a value clipped or in an unknown shape: leave that key out
    if entry is not None:
        accelerators.append(_accelerator(io_class, entry))
    return tuple(accelerators)


def _entry_class(header: str) -> str | None:
    # "+-o AGXAcceleratorG13X  <class AGXAcceleratorG13X, id 0x..., registered, ...>"
    _, found, rest = header.partition("<class ")
    if found:
        return rest.split(",", 1)[0].strip(" >") or None
    name = header[4:].split()
    return name[0] if name else None


def _accelerator(io_class: str | None, entry: dict[str, Any]) -> IoregAccelerator:
    statistics = entry.get("PerformanceStatistics")
    if not isinstance(statistics, dict):
        statistics = {}
    utilization = statistics.get("Device Utilization %")
    memory = statistics.get("In use system memory")
    model = entry.get("model")
    cores = entry.get("gpu-core-count")
    return IoregAccelerator(
        io_class=entry.get("IOClass") if isinstance(entry.get("IOClass"), str) else io_class,
        model=_text(model),
        core_count=cores if isinstance(cores, int) and not isinstance(cores, bool) else None,
        utilization_percent=float(utilization) if _is_number(utilization) else None,
        memory_in_use_bytes=int(memory) if _is_number(memory) else None,
    )


def _text(value: object) -> str | None:
    if isinstance(value, bytes):  # <4170706c6500>: a C string stored as data
        value = value.split(b"\0", 1)[0].decode("utf-8", errors="replace")
    return (value.strip() or None) if isinstance(value, str) else None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _IoregValueParser:
    """ioreg's property syntax: ``{"k"=v,...}``, ``(a,b)``, ``"text"``, ``<hex or "text">``,
    numbers, ``Yes``/``No``."""

    def __init__(self, text: str) -> None:
        self._text = text.strip()
        self._pos = 0

    def parse(self) -> Any:
        value = self._value()
        if self._pos != len(self._text):
            raise ValueError(f"trailing text at {self._pos}")
        return value

    def _peek(self) -> str:
        if self._pos >= len(self._text):
            raise ValueError("unexpected end of value")
        return self._text[self._pos]

    def _expect(self, char: str) -> None:
        if self._peek() != char:
            raise ValueError(f"expected {char!r} at {self._pos}")
        self._pos += 1

    def _value(self) -> Any:
        char = self._peek()
        if char == "{":
            return self._dict()
        if char == "(":
            return self._list()
        if char == '"':
            return self._string()
        if char == "<":
            return self._data()
        return self._word()

    def _dict(self) -> dict[str, Any]:
        self._expect("{")
        result: dict[str, Any] = {}
        while self._peek() != "}":
            key = self._string()
            self._expect("=")
            result[key] = self._value()
            if self._peek() == ",":
                self._pos += 1
        self._pos += 1
        return result

    def _list(self) -> list[Any]:
        self._expect("(")
        result: list[Any] = []
        while self._peek() != ")":
            result.append(self._value())
            if self._peek() == ",":
                self._pos += 1
        self._pos += 1
        return result

    def _string(self) -> str:
        self._expect('"')
        end = self._text.find('"', self._pos)
        if end < 0:
            raise ValueError("unterminated string")
        value = self._text[self._pos : end]
        self._pos = end + 1
        return value

    def _data(self) -> str | bytes:
        self._expect("<")
        if self._peek() == '"':  # <"AMD Radeon Pro 5500M">: text stored as data
            value: str | bytes = self._string()
            self._expect(">")
            return value
        end = self._text.find(">", self._pos)
        if end < 0:
            raise ValueError("unterminated data")
        raw = self._text[self._pos : end]
        self._pos = end + 1
        return bytes.fromhex(raw) if len(raw) % 2 == 0 else raw.encode()

    def _word(self) -> Any:
        start = self._pos
        while self._pos < len(self._text) and self._text[self._pos] not in ",}) ":
            self._pos += 1
        word = self._text[start : self._pos]
        if word in ("Yes", "No"):
            return word == "Yes"
        try:
            return int(word, 0)
        except ValueError:
            pass
        try:
            return float(word)
        except ValueError:
            return word


def run_ioreg() -> str:
    """Run :data:`IOREG_COMMAND` and return what it printed.

    Raises:
        OSError: ioreg is missing or cannot start.
        subprocess.SubprocessError: it timed out or failed.
    """
    done = subprocess.run(
        IOREG_COMMAND, capture_output=True, text=True, timeout=IOREG_TIMEOUT_S, check=True
    )
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
    """Asks PyTorch about MPS once, in the engine's child process, on a background thread.

    ``result`` is ``None`` until the child has answered (a second or two, torch's
    import time), then the same :class:`TorchMpsStatus` for good.
    """

    def __init__(
        self, python: Sequence[str] | None = None, *, timeout_s: float = TORCH_PROBE_TIMEOUT_S
    ) -> None:
        """Prepare the probe; nothing runs until ``start()``.

        Args:
            python: The interpreter to ask, with any flags (default: this process's
                ``sys.executable``).
            timeout_s: How long the child may take before the probe gives up.
        """
        self._python = tuple(python) if python is not None else (sys.executable,)
        self._timeout_s = timeout_s
        self._result: TorchMpsStatus | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def result(self) -> TorchMpsStatus | None:
        """The answer, or ``None`` until it is known."""
        return self._result

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
        return self._result

    def _run_once(self) -> None:
        try:
            self._result = self.ask()
        finally:
            self._done.set()

    def ask(self) -> TorchMpsStatus:
        """Ask now, blocking until the child answers or times out. Never raises."""
        from gputui.jobs.config import ProbeConfig
        from gputui.jobs.process import run_to_end

        outcome = run_to_end(
            ProbeConfig(measure=False, torch_only=True),
            timeout_s=self._timeout_s,
            python=self._python,
        )
        return _status_from_outcome(outcome, self._python[0], self._timeout_s)


def _unknown(sentence: str) -> TorchMpsStatus:
    return TorchMpsStatus(built=None, available=None, error=sentence)


def _status_from_outcome(outcome: Outcome, python: str, timeout_s: float) -> TorchMpsStatus:
    from gputui.jobs.events import Error, MpsProbed, TorchProbed  # only on macOS, once

    if outcome.timed_out:
        return _unknown(
            f"PyTorch took over {timeout_s:g} s to say whether MPS is available, "
            "so gputui stopped asking; run `python -c 'import torch'` to see why."
        )
    error = outcome.last if isinstance(outcome.last, Error) else None
    if not outcome.started:
        reason = error.message.partition(": ")[2] if error is not None else "no reason given"
        return _unknown(f"Could not start {python} to ask PyTorch about MPS: {reason}.")
    torch = next((e for e in outcome.events if isinstance(e, TorchProbed)), None)
    mps = next((e for e in outcome.events if isinstance(e, MpsProbed)), None)
    if torch is None or (torch.imported and mps is None):
        last = (outcome.stderr_tail.strip().splitlines() or ["no output"])[-1]
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
    """A sentence on what stands between PyTorch and MPS, or ``None`` when nothing does.

    Args:
        status: The probe's answer, or ``None`` while it is not known yet.
    """
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
    """Samples Apple's GPU through the IORegistry, and tells whether PyTorch can use it.

    ``sample()`` blocks for one ``ioreg`` run on macOS (tens of milliseconds), so
    the app calls it off the event loop. Elsewhere it returns at once.
    """

    def __init__(
        self,
        *,
        platform: str = sys.platform,
        ioreg: Callable[[], str] = run_ioreg,
        torch_probe: TorchMpsProbe | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Set up the sampler; on macOS, start asking PyTorch about MPS in the background.

        Args:
            platform: ``sys.platform`` unless a test pretends to be elsewhere.
            ioreg: Returns the text of :data:`IOREG_COMMAND`; raises ``OSError``
                or ``subprocess.SubprocessError`` when it cannot.
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

    def sample(self) -> MpsReading:
        """Take one sample. Never raises."""
        if not self._macos:
            return replace(self._elsewhere, taken_at=self._clock())
        torch = self._torch_probe.result if self._torch_probe is not None else None
        sentences: list[str] = []
        accelerator: IoregAccelerator | None = None
        try:
            accelerators = parse_ioreg(self._ioreg())
        except (OSError, subprocess.SubprocessError, UnicodeError) as error:
            sentences.append(
                f"Could not read the GPU's load from the IORegistry ({exception_line(error)}); "
                "check that `ioreg -r -d 1 -c IOAccelerator` runs."
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
