"""Typed events an experiment child streams, one JSON object per line.

Torch-free. The same line format as :mod:`gputui.training.events`
(``{"v": 1, "type": "<type>", ...fields}``), with the same tolerance: lines that
are not events, unknown types and malformed events are skipped, never raised.
:func:`parse_experiment_event` reads these types and falls back to the
trainer's (``Note``, ``Error``, ``Finished``).

Order of a run::

    ExperimentStarted
    (ExperimentDevice (BatchSweepRow | SyncStallRow | PipelineRow)* DeviceFailed?)  per device
    ExperimentConcluded
    Finished                 (events.Finished; stopped=True after a stop)

A run that cannot start ends with ``Error`` (``kind`` ``config``, ``device``
or ``data``) instead. Rows arrive as each measurement ends, so a UI can show
them one by one. A measurement that ran out of memory is a row with ``error``
set and its figures ``None``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

from gputui.training.events import Event, parse_event

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExperimentStarted(Event):
    """The experiment is set up: which devices and data, how many steps."""

    TYPE: ClassVar[str] = "experiment_started"
    experiment: str
    """``batch-sweep``, ``sync-stall`` or ``pipelines``."""
    devices: tuple[str, ...]
    """Canonical devices, in the order they run."""
    batch_sizes: tuple[int, ...]
    """Batch sizes measured (one for ``sync-stall`` and ``pipelines``)."""
    steps: int
    """Most timed steps per measurement."""
    warmup_steps: int
    """Untimed steps before each measurement."""
    budget_s: float
    """Seconds of timed steps each measurement aims at."""
    dataset: str
    """``cifar10`` or ``synthetic``: the dataset that ran."""
    dataset_source: str
    """Where it came from (a folder, or ``generated``)."""
    dataset_note: str | None
    """Why this dataset ran when it is not the one asked for."""
    images: int
    """Training images loaded."""
    threads: int
    """``torch.get_num_threads()`` in the child."""
    workers: int
    """DataLoader workers (the classic pipeline)."""
    torch_version: str
    """``torch.__version__`` in the child."""
    pid: int
    """The child's process id."""


@dataclass(frozen=True)
class ExperimentDevice(Event):
    """One device's measurements begin."""

    TYPE: ClassVar[str] = "experiment_device"
    device: str
    """Canonical device string."""
    device_name: str
    """GPU name or CPU model."""
    data_phase: str | None
    """``batch-sweep``: what the data share measures on this device, in words."""
    pinned: bool
    """``batch-sweep``: whether host batches are pinned before ``.to(device)``."""


@dataclass(frozen=True)
class BatchSweepRow(Event):
    """``batch-sweep``: one batch size on one device."""

    TYPE: ClassVar[str] = "batch_sweep_row"
    device: str
    """Canonical device string."""
    batch_size: int
    """Images per step."""
    steps: int
    """Timed steps (0 when the measurement failed)."""
    images_per_second: float | None
    """Images over the timed steps' data and compute time."""
    data_ms: float | None
    """Mean milliseconds per step getting the batch where the model reads it
    (accelerators: the ``.to(device)`` copy; the CPU: preparing the batch)."""
    compute_ms: float | None
    """Mean milliseconds per step of forward, backward and optimizer step."""
    data_share: float | None
    """``data_ms / (data_ms + compute_ms)``, 0 to 1."""
    error: str | None = None
    """Why there are no figures (e.g. out of memory), else ``None``."""


@dataclass(frozen=True)
class SyncStallRow(Event):
    """``sync-stall``: one way of reading the loss on one device."""

    TYPE: ClassVar[str] = "sync_stall_row"
    device: str
    """Canonical device string."""
    mode: str
    """``every_step`` (``loss.item()`` each step, as ``add_scalar`` does) or ``once``
    (summed on the device, read at the end)."""
    batch_size: int
    """Images per step."""
    steps: int
    """Timed steps over all rounds (0 when the measurement failed)."""
    rounds: int
    """Rounds the steps were split into, alternating with the other mode."""
    ms_per_step: float | None
    """Mean milliseconds per step, device synchronized at both ends of each round."""
    images_per_second: float | None
    """Images per second over all rounds."""
    spread_ms: float | None
    """Slowest round's ms per step minus the fastest's: the noise to judge a difference by."""
    error: str | None = None
    """Why there are no figures, else ``None``."""


@dataclass(frozen=True)
class PipelineRow(Event):
    """``pipelines``: one way of feeding batches on one device."""

    TYPE: ClassVar[str] = "pipeline_row"
    device: str
    """Canonical device string."""
    pipeline: str
    """``classic`` (DataLoader workers, ``.to(device)`` per batch) or ``resident``
    (the uint8 dataset on the device, batches cut and normalised there)."""
    batch_size: int
    """Images per step."""
    steps: int
    """Timed steps (0 when the measurement failed)."""
    ms_per_step: float | None
    """Mean milliseconds per step, batch included, device synchronized at both ends."""
    images_per_second: float | None
    """Images per second over the timed steps."""
    workers: int
    """DataLoader worker processes (0 for resident)."""
    pinned: bool
    """Whether host batches were pinned (classic on CUDA)."""
    setup_s: float | None
    """Seconds spent before the first step: copying the dataset to the device (resident)."""
    error: str | None = None
    """Why there are no figures, else ``None``."""


@dataclass(frozen=True)
class DeviceFailed(Event):
    """A device's measurements stopped with an error; the other devices still run."""

    TYPE: ClassVar[str] = "experiment_device_failed"
    device: str
    """Canonical device string."""
    message: str
    """One line that says what happened."""
    detail: str = ""
    """The traceback, shown on demand."""


@dataclass(frozen=True)
class ExperimentConcluded(Event):
    """The result in one plain sentence, built from the rows (:mod:`.conclusions`)."""

    TYPE: ClassVar[str] = "experiment_concluded"
    experiment: str
    """The experiment."""
    conclusion: str
    """One sentence."""


Row = BatchSweepRow | SyncStallRow | PipelineRow
"""A result row of any experiment."""

EXPERIMENT_EVENT_TYPES: dict[str, type[Event]] = {
    cls.TYPE: cls
    for cls in (
        ExperimentStarted,
        ExperimentDevice,
        BatchSweepRow,
        SyncStallRow,
        PipelineRow,
        DeviceFailed,
        ExperimentConcluded,
    )
}
"""The experiment event types, by their ``type`` discriminator."""


def parse_experiment_event(line: str | bytes) -> Event | None:
    """Read one line of an experiment child's stream.

    Args:
        line: One line, with or without its newline.

    Returns:
        An experiment event, a trainer event (``Note``, ``Error``, ``Finished``...),
        or ``None`` for a line to skip (logged at debug level).
    """
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return parse_event(text)  # blank or not JSON: skipped there, the same way
    kind = data.get("type") if isinstance(data, dict) else None
    cls = EXPERIMENT_EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return parse_event(text)
    try:
        return _build(cls, data)
    except (TypeError, ValueError) as exc:
        log.debug("skipped a malformed %s event: %s", data["type"], exc)
        return None


def _build(cls: type[Event], data: dict[str, Any]) -> Event:
    values = {
        spec.name: tuple(data[spec.name]) if isinstance(data[spec.name], list) else data[spec.name]
        for spec in dataclasses.fields(cls)
        if spec.name in data
    }
    return cls(**values)  # a missing required field raises TypeError
