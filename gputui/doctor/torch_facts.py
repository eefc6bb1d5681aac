"""What torch says about this machine, asked in a child process with a time limit.

The child is the engine's ``probe`` mode (:mod:`gputui.engine.probe`), run through
the one :class:`~gputui.jobs.process.ChildProcess`; :func:`facts_from_events` folds
its events into :class:`TorchFacts`. :func:`run_probe` never raises and never hangs:
a child that does not finish within its time limit (a hung CUDA init) is killed with
its whole process group, and the facts keep whatever it said before, plus the step
it was on. The limit is ``timeout_s`` until the child says how many CUDA devices it
will measure, then grows by :attr:`ProbeConfig.TIMEOUT_PER_GPU_S` for each
(:meth:`ProbeConfig.time_limit_s`), so a hung CUDA init is still caught early.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields

from gputui.doctor.checks import DeviceReport
from gputui.jobs.config import ProbeConfig
from gputui.jobs.events import (
    CudaProbed,
    DeviceProbed,
    Error,
    Event,
    Finished,
    MpsProbed,
    PitfallShown,
    ProbeStep,
    TorchProbed,
)
from gputui.jobs.process import run_to_end

DEFAULT_TIMEOUT_S = ProbeConfig.TIMEOUT_S

STDERR_TAIL_LINES = 20
"""Lines of the child's stderr kept for the report."""


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
    cuda_arch_list: tuple[str, ...] = ()
    """``torch.cuda.get_arch_list()`` (``sm_90``, ``compute_90``); empty when not known."""
    mps_available: bool | None = None
    """``torch.backends.mps.is_available()``."""
    mps_warnings: tuple[str, ...] = ()
    """Warnings from asking MPS (they say why it is not available)."""
    platform_machine: str | None = None
    """``platform.machine()`` in the child: ``arm64``, ``x86_64``..."""
    pitfalls: tuple[PitfallShown, ...] = ()
    """The tutorials' mistakes, with torch's own error text."""
    devices: tuple[DeviceReport, ...] = ()
    """Each usable device, with what was measured."""
    stderr_tail: str = ""
    """The last lines the child wrote to stderr."""
    elapsed_s: float | None = None
    """How long the child ran."""


def facts_from_events(events: Iterable[Event | None]) -> TorchFacts:
    """Fold the probe's events into :class:`TorchFacts`.

    Values of the wrong type are dropped (``None``), so a confused child cannot break
    the report; ``None`` items (lines that were not events) and other events are skipped.
    """
    facts: dict[str, object] = {}
    devices: dict[str, dict[str, object]] = {}
    pitfalls: list[PitfallShown] = []
    for event in events:
        if isinstance(event, ProbeStep):
            facts["last_step"] = _text(event.step)
        elif isinstance(event, TorchProbed):
            platform = event.platform if isinstance(event.platform, dict) else {}
            companions = event.companions if isinstance(event.companions, dict) else {}
            facts.update(
                imported=_flag(event.imported),
                missing=event.missing is True,
                import_error=_text(event.import_error),
                import_warnings=_texts(event.import_warnings),
                version=_text(event.version),
                cuda_version=_text(event.cuda_version),
                hip_version=_text(event.hip_version),
                mps_built=_flag(event.mps_built),
                numpy_installed=_flag(event.numpy_installed),
                companions=tuple(sorted(name for name, version in companions.items() if version)),
                platform_machine=_text(platform.get("machine")),
            )
        elif isinstance(event, CudaProbed):
            count, cudnn = event.device_count, event.cudnn_version
            facts.update(
                cuda_available=_flag(event.available),
                cuda_device_count=count if _whole(count) and count >= 0 else None,  # type: ignore[operator]
                cuda_init_error=_text(event.init_error),
                cuda_warnings=_texts(event.warnings),
                cudnn_version=cudnn if _whole(cudnn) else None,
                cuda_arch_list=_texts(event.arch_list),
            )
        elif isinstance(event, MpsProbed):
            facts["mps_available"] = _flag(event.available)
            facts["mps_warnings"] = _texts(event.warnings)
        elif isinstance(event, PitfallShown):
            pitfalls.append(event)
        elif isinstance(event, DeviceProbed):
            merged = devices.setdefault(str(event.device), {"notes": ()})
            for name in ("name", "compute_capability", "memory_bytes", "uuid", "error"):
                if getattr(event, name) is not None:
                    merged[name] = getattr(event, name)
            if isinstance(event.figures, dict):
                merged.update(event.figures)
            merged["notes"] = (*merged["notes"], *_texts(event.notes))  # type: ignore[misc]
        elif isinstance(event, Finished):
            facts["completed"] = True
            facts["elapsed_s"] = event.total_seconds
    device_reports = tuple(
        _device(key, entry) for key, entry in devices.items() if "name" in entry or "error" in entry
    )
    return TorchFacts(**facts, pitfalls=tuple(pitfalls), devices=device_reports)  # type: ignore[arg-type]


_FIGURES = tuple(
    f.name for f in fields(DeviceReport) if f.name.endswith(("_bytes_per_s", "_tflops"))
)


def _device(key: str, entry: dict[str, object]) -> DeviceReport:
    figures = {name: _positive(entry.get(name)) for name in _FIGURES}
    memory = _positive(entry.get("memory_bytes"))
    notes = list(entry.get("notes", ()))  # type: ignore[call-overload]
    if entry.get("error"):
        notes.append(f"could not be read: {entry['error']}")
    return DeviceReport(
        device=key,
        name=str(entry.get("name") or key),
        compute_capability=_text(entry.get("compute_capability")),
        memory_bytes=int(memory) if memory is not None else None,
        uuid=_text(entry.get("uuid")),
        notes=tuple(notes),
        **figures,
    )


def _positive(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _flag(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _texts(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        return ()
    return tuple(item for item in value if isinstance(item, str) and item)


def run_probe(
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    config: ProbeConfig | None = None,
    environ: Mapping[str, str] | None = None,
    python: str | Sequence[str] | None = None,
) -> TorchFacts:
    """Run the probe child and read what it says; never raises, never outlives its limit.

    Args:
        timeout_s: Seconds the child may run before it is killed, until it reports the
            CUDA devices it will measure; each adds ``ProbeConfig.TIMEOUT_PER_GPU_S``.
        config: What the probe measures (default: :class:`ProbeConfig`'s defaults).
        environ: The child's environment (default: this process's); ``CUDA_VISIBLE_DEVICES``
            and the library path in it decide what torch sees.
        python: The interpreter, alone or with its flags (default: this one).

    Returns:
        The facts; ``failure`` says why when the child did not complete.
    """
    started = time.monotonic()
    config = config or ProbeConfig()

    def time_limit_for(event: Event) -> float | None:
        if isinstance(event, CudaProbed) and event.available is True:
            count = event.device_count
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                return config.time_limit_s(timeout_s, count)
        return None

    outcome = run_to_end(
        config,
        timeout_s=timeout_s,
        python=python,
        environ=environ,
        time_limit_for=time_limit_for,
    )
    facts = facts_from_events(outcome.events)
    tail = "\n".join(outcome.stderr_tail.splitlines()[-STDERR_TAIL_LINES:]).strip()
    ended = outcome.last
    failure = None
    if outcome.timed_out:
        where = f" while {facts.last_step}" if facts.last_step else ""
        failure = f"the torch probe timed out after {outcome.time_limit_s:g} s{where}"
    elif outcome.start_error is not None:
        failure = f"the torch probe could not start: {outcome.start_error}"
    elif isinstance(ended, Error) and outcome.said_its_end:  # it caught its own crash
        failure = ended.message if ended.kind == "crash" else f"the probe failed: {ended.message}"
        tail = "\n".join(filter(None, (tail, ended.detail.strip())))
    elif isinstance(ended, Error):  # it died without a word: its stderr says why
        last = tail.splitlines()[-1] if tail else "no output"
        failure = (
            f"the torch probe exited with code {outcome.returncode} before it finished: {last}"
        )
    return dataclasses.replace(
        facts,
        failure=failure,
        timed_out=outcome.timed_out,
        stderr_tail=tail,
        elapsed_s=facts.elapsed_s if facts.elapsed_s is not None else time.monotonic() - started,
    )
