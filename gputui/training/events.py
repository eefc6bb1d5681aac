"""Typed events the trainer streams to its parent, one JSON object per line.

Torch-free: the UI process imports this module to read the stream.

Every line is ``{"v": SCHEMA_VERSION, "type": "<event type>", ...fields}``. A
reader built for this version tolerates what a newer trainer may send:
unknown event types and unknown fields are skipped, and so is any line that is
not an event at all (a stray print, a half-written line); see
:func:`parse_event`.

Order of a normal run::

    DataProgress*            only while CIFAR-10 downloads
    RunStarted
    DataReady                the training data is where the pipeline reads it
    Placement Memory         after the first optimizer step (Adam's state exists)
    (Progress* EpochFinished Memory)  per epoch
    Finished

A run that fails ends with ``Error`` instead of ``Finished``; ``Note`` may come
at any time. :class:`gputui.training.runner.TrainerProcess` guarantees that the
stream it hands on ends with exactly one ``Finished`` or ``Error``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar

SCHEMA_VERSION = 1
"""Bumped when a field changes meaning or a required field is added."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    """Base of every trainer event."""

    TYPE: ClassVar[str] = ""

    def to_json(self) -> str:
        """This event as one line of JSON (no newline)."""
        body = {"v": SCHEMA_VERSION, "type": self.TYPE, **dataclasses.asdict(self)}
        return json.dumps(body, separators=(",", ":"))  # a diverged loss is NaN: kept

    @staticmethod
    def from_json(line: str | bytes) -> Event | None:
        """Same as :func:`parse_event`."""
        return parse_event(line)


@dataclass(frozen=True)
class PlacementRow:
    """Where one group's tensors live: a top-level module or an optimizer param group."""

    group: str
    """``conv``, ``fc`` (top-level modules) or ``param_groups[N]`` (optimizer groups)."""
    kind: str
    """``module`` or ``param_group``."""
    device: str | None
    """Device(s) of the parameters, comma-separated if mixed; ``None`` when there are none."""
    dtype: str | None
    """Dtype(s) of the parameters."""
    param_tensors: int
    """Number of parameter tensors."""
    params: int
    """Number of parameter elements."""
    param_bytes: int
    """Bytes of the parameters."""
    buffer_device: str | None
    """Device(s) of the buffers (this CNN has none)."""
    buffers: int
    """Number of buffer elements."""
    buffer_bytes: int
    """Bytes of the buffers."""
    state_device: str | None
    """Device(s) of the optimizer state (Adam's ``exp_avg`` and ``exp_avg_sq``)."""
    state_dtype: str | None
    """Dtype(s) of the optimizer state."""
    state_tensors: int
    """Number of optimizer state tensors, step counters excluded."""
    state_elements: int
    """Elements of optimizer state, step counters excluded."""
    state_bytes: int
    """Bytes of optimizer state, step counters excluded."""
    step_device: str | None
    """Device(s) of Adam's ``step`` counters (a scalar each; stock Adam keeps them on the CPU)."""


@dataclass(frozen=True)
class DeviceOption:
    """One device a run could ask for, and whether it can be used here."""

    name: str
    """Device string, e.g. ``cpu``, ``cuda:0``, ``mps`` (``cuda`` when none is usable)."""
    usable: bool
    """Whether a run on it can start."""
    description: str
    """What it is, e.g. ``NVIDIA H100 80GB HBM3`` or the CPU's model name."""
    reason: str | None = None
    """Why it is not usable (one line), ``None`` when usable."""


@dataclass(frozen=True)
class DevicesListed(Event):
    """Answer to ``child --devices``: every candidate device."""

    TYPE: ClassVar[str] = "devices_listed"
    devices: tuple[DeviceOption, ...] = field(metadata={"items": DeviceOption})
    """Every candidate: cpu, each CUDA device (or ``cuda`` with its reason), ``mps``."""
    torch_version: str
    """``torch.__version__`` in the child."""


@dataclass(frozen=True)
class DataProgress(Event):
    """CIFAR-10 download progress (only while downloading)."""

    TYPE: ClassVar[str] = "data_progress"
    done_bytes: int
    """Bytes downloaded so far."""
    total_bytes: int
    """Bytes expected (0 when unknown)."""


@dataclass(frozen=True)
class RunStarted(Event):
    """The run is configured: device, dataset, pipeline and precision are settled."""

    TYPE: ClassVar[str] = "run_started"
    device: str
    """Canonical device string (``cuda`` reads ``cuda:0``)."""
    device_name: str
    """What the device is: GPU name or CPU model."""
    torch_version: str
    """``torch.__version__``."""
    dataset: str
    """``cifar10`` or ``synthetic``: which dataset actually runs."""
    dataset_source: str
    """Where the data came from (a path, or how it was generated)."""
    dataset_note: str | None
    """Why this dataset ran, e.g. the synthetic fallback's reason."""
    train_images: int
    """Training images used."""
    test_images: int
    """Held-out images used for accuracy."""
    pipeline: str
    """``resident`` or ``classic``."""
    precision: str
    """``fp32`` or ``bf16``."""
    batch_size: int
    """Images per step."""
    epochs: int
    """Epochs asked for."""
    steps_per_epoch: int
    """Optimizer steps per epoch."""
    compile: bool
    """Whether the model runs through ``torch.compile``."""
    channels_last: bool
    """Whether the model and its inputs use the channels_last memory format."""
    cpu_bf16: bool
    """Whether this CPU has AVX512-BF16 or AMX (fast bf16)."""
    num_threads: int
    """``torch.get_num_threads()`` in the trainer."""
    num_workers: int
    """DataLoader workers (classic pipeline; 0 for resident)."""
    nice: int
    """The trainer process's niceness."""
    pid: int
    """The trainer's process id (highlight it in the process tables)."""
    run_dir: str | None
    """The run folder the trainer records into, ``None`` when not recording."""


@dataclass(frozen=True)
class DataReady(Event):
    """The training data is where the pipeline reads batches from; not part of any epoch."""

    TYPE: ClassVar[str] = "data_ready"
    device: str
    """Where the dataset lives: the device (resident) or ``cpu`` (classic)."""
    seconds: float
    """Time to put it there, device synchronized."""
    nbytes: int
    """Bytes of training and held-out images and labels there."""


@dataclass(frozen=True)
class Placement(Event):
    """Where every group of tensors lives; what a user checks so nothing stayed on the CPU."""

    TYPE: ClassVar[str] = "placement"
    rows: tuple[PlacementRow, ...] = field(metadata={"items": PlacementRow})
    """One row per top-level module, then one per optimizer param group."""
    inputs_device: str
    """Device of the input batch the model sees."""
    inputs_dtype: str
    """Dtype of that batch (autocast converts inside the model)."""
    inputs_memory_format: str
    """``channels_last`` or ``contiguous``."""
    labels_device: str
    """Device of the label batch."""
    dataset_device: str
    """Where the whole dataset lives (the device when resident, ``cpu`` when classic)."""
    pinned: bool
    """Whether host batches are in pinned memory (classic pipeline on CUDA)."""


@dataclass(frozen=True)
class Progress(Event):
    """Where an epoch is, read at most a few times a second (each read is one device sync)."""

    TYPE: ClassVar[str] = "progress"
    epoch: int
    """Epoch, from 1."""
    step: int
    """Steps finished in this epoch."""
    steps_per_epoch: int
    """Steps in a whole epoch."""
    images_per_second: float
    """Training throughput so far in this epoch."""
    loss: float
    """Mean training loss so far in this epoch."""


@dataclass(frozen=True)
class EpochFinished(Event):
    """One epoch trained and evaluated."""

    TYPE: ClassVar[str] = "epoch_finished"
    epoch: int
    """Epoch, from 1."""
    seconds: float
    """Training time of the epoch, device synchronized at both ends (evaluation excluded)."""
    images_per_second: float
    """Training images per second."""
    loss: float
    """Mean training loss over the epoch."""
    accuracy: float | None
    """Fraction of held-out images classified right (``None`` without a held-out split)."""
    warmup: bool
    """True for epoch 1: it includes cuDNN autotune, compilation and allocator warm-up."""
    eval_seconds: float
    """Time the accuracy took."""
    images: int
    """Training images seen in the epoch."""


@dataclass(frozen=True)
class Memory(Event):
    """The trainer's memory after an epoch; a field a device cannot report is ``None``."""

    TYPE: ClassVar[str] = "memory"
    device: str
    """Device the figures describe."""
    allocated_bytes: int | None
    """Bytes held by tensors (CUDA allocated, MPS current)."""
    reserved_bytes: int | None
    """Bytes reserved by the caching allocator (CUDA)."""
    peak_bytes: int | None
    """Peak allocated (CUDA) or peak resident set size (CPU)."""
    driver_bytes: int | None
    """Bytes the Metal driver holds for the process (MPS)."""
    rss_bytes: int | None
    """The trainer process's resident set size."""


@dataclass(frozen=True)
class Note(Event):
    """Something the user should know that does not stop the run (one line)."""

    TYPE: ClassVar[str] = "note"
    message: str
    """One line."""


@dataclass(frozen=True)
class Error(Event):
    """The run failed; this is the last event."""

    TYPE: ClassVar[str] = "error"
    message: str
    """One line that says what happened and what to do."""
    detail: str = ""
    """Traceback or stderr tail, shown on demand."""
    kind: str = "crash"
    """``config``, ``device``, ``data``, ``oom``, ``compile``, ``crash`` or ``killed``."""
    suggested_batch_size: int | None = None
    """For ``oom``: a batch size that was probed and fits, if one was found."""


@dataclass(frozen=True)
class Finished(Event):
    """The run ended without error (``stopped`` when asked to stop early); the last event."""

    TYPE: ClassVar[str] = "finished"
    epochs_completed: int
    """Epochs trained to the end."""
    stopped: bool = False
    """True when the run was stopped before its last epoch ended."""
    warmup_seconds: float | None = None
    """Epoch 1's seconds (includes warm-up)."""
    steady_epoch_seconds: float | None = None
    """Mean seconds of epochs 2 and later; ``None`` with fewer than 2 epochs."""
    steady_images_per_second: float | None = None
    """Training images per second over epochs 2 and later."""
    final_loss: float | None = None
    """Last epoch's mean training loss."""
    final_accuracy: float | None = None
    """Last epoch's held-out accuracy."""
    total_seconds: float | None = None
    """Wall time from the trainer's start to the end, data loading included."""
    run_dir: str | None = None
    """The run folder, ``None`` when not recording."""


EVENT_TYPES: dict[str, type[Event]] = {
    cls.TYPE: cls
    for cls in (
        DevicesListed,
        DataProgress,
        RunStarted,
        DataReady,
        Placement,
        Progress,
        EpochFinished,
        Memory,
        Note,
        Error,
        Finished,
    )
}
"""Every event type this reader knows, by its ``type`` discriminator."""

TERMINAL_TYPES = (Finished, Error)
"""Event types that end a run's stream."""


def parse_event(line: str | bytes) -> Event | None:
    """Read one line of the stream.

    Args:
        line: One line, with or without its newline.

    Returns:
        The event, or ``None`` for a line to skip: not JSON, not an event, an
        unknown event type (a newer trainer), or a known type missing a field.
        Skipped lines are logged at debug level, never raised.
    """
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        log.debug("skipped a line that is not JSON: %.200s", text)
        return None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        log.debug("skipped a JSON line that is not an event: %.200s", text)
        return None
    cls = EVENT_TYPES.get(data["type"])
    if cls is None:
        log.debug("skipped an event of unknown type %r", data["type"])
        return None
    try:
        return _build(cls, data)
    except (TypeError, ValueError) as exc:
        log.debug("skipped a malformed %s event: %s", data["type"], exc)
        return None


def _build(cls: type[Any], data: dict[str, Any]) -> Any:
    values: dict[str, Any] = {}
    for spec in dataclasses.fields(cls):
        if spec.name not in data:
            continue  # a missing field with no default makes cls() raise TypeError
        value = data[spec.name]
        item_type = spec.metadata.get("items")
        if item_type is not None:
            if not isinstance(value, list):
                raise TypeError(f"{spec.name} is not a list")
            value = tuple(_build(item_type, _as_dict(item)) for item in value)
        values[spec.name] = value
    return cls(**values)


def _as_dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("a list item is not an object")
    return value
