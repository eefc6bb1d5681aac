"""What torch says about this machine, asked in a child process with a time limit.

The child is the engine's ``probe`` mode (:mod:`gputui.engine.probe`), run through
the one :class:`~gputui.jobs.process.ChildProcess`; :func:`facts_from_events` folds
its events into :class:`TorchFacts`. :func:`run_probe` never raises and never hangs:
a child that does not finish within its time limit (a hung CUDA init) is killed with
its whole process group, and the facts keep whatever it said before, plus the step
it was on. The limit is ``timeout_s`` until the child says how many CUDA (or XPU) devices
it will measure, then grows by :attr:`ProbeConfig.TIMEOUT_PER_GPU_S` for each
(:meth:`ProbeConfig.time_limit_s`), so a hung CUDA init is still caught early.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gputui.device import Device
from gputui.doctor.checks import FIGURES, DeviceReport
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
    XpuProbed,
)
from gputui.jobs.process import run_to_end

DEFAULT_TIMEOUT_S = ProbeConfig.TIMEOUT_S

STDERR_TAIL_LINES = 20
"""Lines of the child's stderr kept for the report."""


@dataclass(frozen=True, slots=True)
class TorchFacts:
    """What the probe child said, in its own typed events (``None`` where it stopped before
    it sent one), the devices it measured, and how it ended."""

    install: TorchProbed | None = None
    """What torch is (version, build, companions), or why it did not import."""
    cuda: CudaProbed | None = None
    """What CUDA said: available or not, how many devices, the code this build carries."""
    mps: MpsProbed | None = None
    """Whether MPS is available, and why not."""
    xpu: XpuProbed | None = None
    """What ``torch.xpu`` said: available or not, how many Intel GPUs."""
    pitfalls: tuple[PitfallShown, ...] = ()
    """The tutorials' mistakes, with torch's own error text."""
    devices: tuple[DeviceReport, ...] = ()
    """Each usable device, with what was measured."""
    completed: bool = False
    """True when the child got to the end."""
    failure: str | None = None
    """Why it did not (timed out, crashed, printed nothing), as a sentence."""
    timed_out: bool = False
    """True when it was killed for taking longer than the timeout."""
    last_step: str | None = None
    """The step it started last, e.g. ``initialising CUDA``."""
    stderr_tail: str = ""
    """The last lines the child wrote to stderr."""
    elapsed_s: float | None = None
    """How long the child ran."""


def facts_from_events(events: Iterable[Event | None]) -> TorchFacts:
    """Fold the probe's events into :class:`TorchFacts`; ``None`` items (lines that were
    not events) and other events are skipped, and a device's parts are merged."""
    facts: dict[str, Any] = {}
    devices: dict[Device, dict[str, Any]] = {}
    pitfalls: list[PitfallShown] = []
    for event in events:
        if isinstance(event, ProbeStep):
            facts["last_step"] = event.step
        elif isinstance(event, TorchProbed):
            facts["install"] = event
        elif isinstance(event, CudaProbed):
            facts["cuda"] = event
        elif isinstance(event, MpsProbed):
            facts["mps"] = event
        elif isinstance(event, XpuProbed):
            facts["xpu"] = event
        elif isinstance(event, PitfallShown):
            pitfalls.append(event)
        elif isinstance(event, DeviceProbed):
            merged = devices.setdefault(event.device, {"notes": ()})
            for name in ("name", "compute_capability", "memory_bytes", "uuid", "error"):
                if getattr(event, name) is not None:
                    merged[name] = getattr(event, name)
            merged.update(event.figures)
            merged["notes"] = (*merged["notes"], *event.notes)
        elif isinstance(event, Finished):
            facts["completed"] = True
            facts["elapsed_s"] = event.total_seconds
    device_reports = tuple(
        _device(key, entry) for key, entry in devices.items() if "name" in entry or "error" in entry
    )
    return TorchFacts(**facts, pitfalls=tuple(pitfalls), devices=device_reports)


def _device(key: Device, entry: dict[str, Any]) -> DeviceReport:
    figures: dict[str, Any] = {name: _positive(entry.get(name)) for name in FIGURES}
    memory = _positive(entry.get("memory_bytes"))
    notes = list(entry["notes"])
    if entry.get("error"):
        notes.append(f"could not be read: {entry['error']}")
    return DeviceReport(
        device=key,
        name=entry.get("name") or str(key),
        compute_capability=entry.get("compute_capability") or None,
        memory_bytes=int(memory) if memory is not None else None,
        uuid=entry.get("uuid") or None,
        notes=tuple(notes),
        **figures,
    )


def _positive(value: float | None) -> float | None:
    """A figure worth showing: measured, finite and above zero."""
    return float(value) if value is not None and math.isfinite(value) and value > 0 else None


def run_probe(
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    config: ProbeConfig | None = None,
    environ: Mapping[str, str] | None = None,
    python: str | Sequence[str] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> TorchFacts:
    """Run the probe child and read what it says; never raises, never outlives its limit
    (``timeout_s``, see the module's text). ``failure`` says why the child did not complete.

    Args:
        config: What the probe measures (default: :class:`ProbeConfig`'s defaults).
        environ: The child's environment (default: this process's); ``CUDA_VISIBLE_DEVICES``
            and the library path in it decide what torch sees.
        python: The interpreter, alone or with its flags (default: this one).
        on_step: Called with each step the child starts (``importing torch``), as it starts.
    """
    started = time.monotonic()
    config = config or ProbeConfig()

    def time_limit_for(event: Event) -> float | None:  # called with each event as it comes
        if isinstance(event, ProbeStep) and on_step is not None:
            on_step(event.step)
        if isinstance(event, CudaProbed | XpuProbed) and event.available and event.device_count:
            return config.time_limit_s(timeout_s, event.device_count)
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
