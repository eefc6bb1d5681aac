"""What torch says about this machine, asked in a child process with a time limit.

The child is ``python -m gputui.training.probe`` (the only place torch is
imported); it prints JSON lines, which :func:`parse_probe_output` merges into
:class:`TorchFacts`. :func:`run_probe` never raises and never hangs: a child that
does not finish within ``timeout_s`` (a hung CUDA init) is killed with its whole
process group, and the facts keep whatever it said before, plus the step it was on.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import gputui
from gputui.doctor.checks import DeviceReport

PROBE_MODULE = "gputui.training.probe"
"""The child's module, run with ``python -m``."""

DEFAULT_TIMEOUT_S = 60.0
"""How long the child may take: importing torch and initialising CUDA can take a while."""

KILL_WAIT_S = 2.0
"""How long to wait for a killed child's last output (a process stuck in the driver may
not die at once; it is then left behind rather than waited for)."""

STDERR_TAIL_LINES = 20
"""Lines of the child's stderr kept for the report."""


@dataclass(frozen=True, slots=True)
class Pitfall:
    """One tutorial mistake, made for real in the child."""

    name: str
    """``cross-device``, ``numpy`` or ``device-string``."""
    shown_on: str | None
    """Where it was made: ``cuda:0``, ``mps``, ``meta`` (no GPU here), or the device string."""
    error: str | None
    """torch's error text, e.g. ``RuntimeError: Invalid device string: 'cuda0'``; ``None``
    when torch did not raise."""
    cpu_error: str | None = None
    """For ``numpy``: the error ``.numpy()`` raises on a CPU tensor (``None``: it works)."""


@dataclass(frozen=True, slots=True)
class TorchFacts:
    """What the probe child reported; ``None`` where it never said."""

    completed: bool = False
    """True when the child got to the end."""
    failure: str | None = None
    """Why it did not (timed out, crashed, printed nothing), as a sentence."""
    timed_out: bool = False
    """True when it was killed for taking longer than the timeout."""
    last_step: str | None = None
    """The step it started last, e.g. ``initialising CUDA``."""
    imported: bool | None = None
    """Whether ``import torch`` worked."""
    missing: bool = False
    """True when torch is not installed at all."""
    import_error: str | None = None
    """The import's error text."""
    import_warnings: tuple[str, ...] = ()
    """Warnings raised while importing torch (e.g. NumPy missing)."""
    version: str | None = None
    """``torch.__version__``."""
    cuda_version: str | None = None
    """``torch.version.cuda``: the CUDA version torch was built with; ``None`` for CPU-only."""
    hip_version: str | None = None
    """``torch.version.hip`` (ROCm builds)."""
    mps_built: bool | None = None
    """``torch.backends.mps.is_built()``."""
    numpy_installed: bool | None = None
    """Whether NumPy is importable (torch's ``.numpy()`` needs it)."""
    companions: tuple[str, ...] = ()
    """Installed packages built against torch that must be reinstalled with it."""
    cuda_available: bool | None = None
    """``torch.cuda.is_available()``."""
    cuda_device_count: int | None = None
    """``torch.cuda.device_count()``."""
    cuda_init_error: str | None = None
    """What ``torch.cuda.init()`` raised when CUDA is not available."""
    cuda_warnings: tuple[str, ...] = ()
    """Warnings from asking CUDA (``CUDA initialization: ...``)."""
    cudnn_version: int | None = None
    """``torch.backends.cudnn.version()``."""
    mps_available: bool | None = None
    """``torch.backends.mps.is_available()``."""
    mps_warnings: tuple[str, ...] = ()
    """Warnings from asking MPS (they say why it is not available)."""
    platform_machine: str | None = None
    """``platform.machine()`` in the child: ``arm64``, ``x86_64``..."""
    pitfalls: tuple[Pitfall, ...] = ()
    """The tutorials' mistakes, with torch's own error text."""
    devices: tuple[DeviceReport, ...] = ()
    """Each usable device, with what was measured."""
    stderr_tail: str = ""
    """The last lines the child wrote to stderr."""
    elapsed_s: float | None = None
    """How long the child ran."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else the child sent (kept for debugging, not shown)."""


def parse_probe_output(lines: Iterable[str]) -> TorchFacts:
    """Merge the probe's JSON lines into :class:`TorchFacts`.

    Lines that are not JSON objects with a ``stage`` are skipped, so library noise
    cannot break the report; unknown stages and keys are ignored.
    """
    facts: dict[str, Any] = {}
    devices: dict[str, dict[str, Any]] = {}
    pitfalls: list[Pitfall] = []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if not isinstance(item, dict):
            continue
        _merge(item, facts, devices, pitfalls)
    facts["pitfalls"] = tuple(pitfalls)
    facts["devices"] = tuple(
        _device(entry) for entry in devices.values() if "name" in entry or "error" in entry
    )
    return TorchFacts(**facts)


def _merge(
    item: dict[str, Any],
    facts: dict[str, Any],
    devices: dict[str, dict[str, Any]],
    pitfalls: list[Pitfall],
) -> None:
    stage = item.get("stage")
    if stage == "step":
        facts["last_step"] = _text(item.get("step"))
    elif stage == "torch":
        platform = item.get("platform") if isinstance(item.get("platform"), dict) else {}
        companions = item.get("companions") if isinstance(item.get("companions"), dict) else {}
        facts.update(
            imported=_flag(item.get("imported")),
            missing=item.get("missing") is True,
            import_error=_text(item.get("import_error")),
            import_warnings=_texts(item.get("import_warnings")),
            version=_text(item.get("version")),
            cuda_version=_text(item.get("cuda_version")),
            hip_version=_text(item.get("hip_version")),
            mps_built=_flag(item.get("mps_built")),
            numpy_installed=_flag(item.get("numpy_installed")),
            companions=tuple(sorted(name for name, version in companions.items() if version)),
            platform_machine=_text(platform.get("machine")),
        )
    elif stage == "cuda":
        count = item.get("device_count")
        cudnn = item.get("cudnn_version")
        facts.update(
            cuda_available=_flag(item.get("available")),
            cuda_device_count=count if isinstance(count, int) and count >= 0 else None,
            cuda_init_error=_text(item.get("init_error")),
            cuda_warnings=_texts(item.get("warnings")),
            cudnn_version=cudnn if isinstance(cudnn, int) else None,
        )
    elif stage == "mps":
        facts["mps_available"] = _flag(item.get("available"))
        facts["mps_warnings"] = _texts(item.get("warnings"))
    elif stage == "pitfall" and isinstance(item.get("pitfall"), dict):
        raw = item["pitfall"]
        pitfalls.append(
            Pitfall(
                name=str(raw.get("name")),
                shown_on=_text(raw.get("shown_on")),
                error=_text(raw.get("error")),
                cpu_error=_text(raw.get("cpu_error")),
            )
        )
    elif stage == "device" and isinstance(item.get("device"), dict):
        entry = item["device"]
        key = str(entry.get("device"))
        merged = devices.setdefault(key, {"notes": []})
        for name, value in entry.items():
            if name == "notes":
                merged["notes"] += _texts(value)
            else:
                merged[name] = value
    elif stage == "done":
        facts["completed"] = True
        elapsed = item.get("elapsed_s")
        facts["elapsed_s"] = float(elapsed) if isinstance(elapsed, (int, float)) else None
    elif stage == "error":
        facts["failure"] = f"the probe failed: {_text(item.get('error'))}"
    else:
        facts.setdefault("extra", {})[str(stage)] = item


_FIGURES = tuple(
    f.name
    for f in fields(DeviceReport)
    if f.name.endswith(("_bytes_per_s", "_tflops")) or f.name == "memory_bytes"
)


def _device(entry: dict[str, Any]) -> DeviceReport:
    figures = {name: _positive(entry.get(name)) for name in _FIGURES}
    memory = figures.pop("memory_bytes")
    notes = list(entry.get("notes", ()))
    if entry.get("error"):
        notes.append(f"could not be read: {entry['error']}")
    return DeviceReport(
        device=str(entry.get("device")),
        name=str(entry.get("name") or entry.get("device")),
        compute_capability=_text(entry.get("compute_capability")),
        memory_bytes=int(memory) if memory is not None else None,
        notes=tuple(notes),
        **figures,
    )


def _positive(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _flag(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _texts(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(item for item in value if isinstance(item, str) and item)


def probe_command(config: Mapping[str, Any] | None = None) -> list[str]:
    """The command that runs the probe child with this interpreter."""
    return [sys.executable, "-m", PROBE_MODULE, json.dumps(dict(config or {}))]


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with the ``gputui`` we run from first on the child's path."""
    env = dict(environ)
    root = str(Path(gputui.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def run_probe(
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    config: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    command: Sequence[str] | None = None,
) -> TorchFacts:
    """Run the probe child and read what it says; never raises, never outlives ``timeout_s``.

    Args:
        timeout_s: Seconds the child may run before it is killed.
        config: The probe's config (see ``gputui.training.probe.DEFAULT_CONFIG``).
        environ: The child's environment (default: this process's); ``CUDA_VISIBLE_DEVICES``
            and the library path in it decide what torch sees.
        command: Run this instead of the probe (tests: a child that hangs or crashes).

    Returns:
        The facts; ``failure`` says why when the child did not complete.
    """
    argv = list(command) if command is not None else probe_command(config)
    env = child_env(os.environ if environ is None else environ)
    stdout: list[str] = []
    stderr: list[str] = []
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=env,
            start_new_session=True,
        )
    except OSError as error:
        return TorchFacts(failure=f"the torch probe could not start: {error}")
    readers = [
        threading.Thread(target=_read_lines, args=(proc.stdout, stdout), daemon=True),
        threading.Thread(target=_read_lines, args=(proc.stderr, stderr), daemon=True),
    ]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):  # stuck in the driver: leave it
            proc.wait(timeout=KILL_WAIT_S)
    for reader in readers:
        reader.join(timeout=KILL_WAIT_S if timed_out else None)
    facts = parse_probe_output(list(stdout))
    tail = "".join(stderr[-STDERR_TAIL_LINES:]).strip()
    failure = facts.failure
    if timed_out:
        where = f" while {facts.last_step}" if facts.last_step else ""
        failure = f"the torch probe timed out after {timeout_s:g} s{where}"
    elif not facts.completed and failure is None:
        code = proc.returncode
        last = tail.splitlines()[-1] if tail else "no output"
        failure = f"the torch probe exited with code {code} before it finished: {last}"
    return _replace(
        facts,
        failure=failure,
        timed_out=timed_out,
        stderr_tail=tail,
        elapsed_s=facts.elapsed_s if facts.elapsed_s is not None else time.monotonic() - started,
    )


def _replace(facts: TorchFacts, **changes: Any) -> TorchFacts:
    values = {f.name: getattr(facts, f.name) for f in fields(TorchFacts)}
    values.update(changes)
    return TorchFacts(**values)


def _read_lines(stream: Any, into: list[str]) -> None:
    try:
        for line in stream:
            into.append(line)
    except (OSError, ValueError):
        pass


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)
        else:  # Windows: no process groups
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
