"""The one protocol between the engine's child process and its parent: typed events, one
JSON object per line, ``{"v": SCHEMA_VERSION, "type": "<event type>", ...fields}``.

Over 600 lines: every event of every mode, each field documented, stands here, beside the
one registry and reader that know them all.

``class Note(Event, type="note")`` defines and registers an event type; :func:`parse_event`
is the one reader (a device travels as its text, and is parsed there), and skips what it
does not know (a newer engine's types and fields, a line that is no event). Each mode's
order is written above its events. A stream ends with exactly one ``Finished``, ``Error``
(a failed job) or ``DevicesListed``; a ``Note`` may come at any time.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, dataclass_transform

from gputui.device import Device, parsed_fields, plain

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")

SCHEMA_VERSION = 1
"""Bumped when a field changes meaning or a required field is added."""

log = logging.getLogger(__name__)

EVENT_TYPES: dict[str, type[Event]] = {}
"""Every event type this reader knows, by its ``type`` discriminator."""


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
@dataclass(frozen=True)
class Event:
    """Base of every event. A subclass names its type, ``class Note(Event, type="note")``,
    and is made a frozen dataclass of its fields and registered in :data:`EVENT_TYPES` by
    that alone, so no event can miss either."""

    TYPE: ClassVar[str] = ""
    """The ``type`` discriminator of the event's JSON lines."""

    def __init_subclass__(cls, type: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.TYPE = type
        dataclass(frozen=True)(cls)
        if type:
            if type in EVENT_TYPES:
                raise TypeError(f"two event types are called {type!r}")
            EVENT_TYPES[type] = cls

    def to_json(self) -> str:
        """This event as one line of JSON (no newline)."""
        body = {"v": SCHEMA_VERSION, "type": self.TYPE, **plain(self)}
        return json.dumps(body, separators=(",", ":"))  # a diverged loss is NaN: kept


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


# -- listing the devices (``devices`` mode): DevicesListed alone -------------------------


@dataclass(frozen=True)
class DeviceOption:
    """One device a run could ask for, and whether it can be used here."""

    name: Device
    """E.g. ``cpu``, ``cuda:0``, ``mps`` (a plain ``cuda`` when none is usable)."""
    usable: bool
    """Whether a run on it can start."""
    description: str
    """What it is, e.g. ``NVIDIA H100 80GB HBM3`` or the CPU's model name."""
    reason: str | None = None
    """Why it is not usable (one line), ``None`` when usable."""


class DevicesListed(Event, type="devices_listed"):
    """The answer of the engine's ``devices`` mode: every candidate device."""

    devices: tuple[DeviceOption, ...] = field(metadata={"items": DeviceOption})
    """Every candidate: cpu, each CUDA device (or ``cuda`` with its reason), ``mps``."""
    torch_version: str
    """``torch.__version__`` in the child."""
    chosen: tuple[Device, ...] = ()
    """The devices the query asked to check, indexed (``cuda`` reads ``cuda:0``), or every
    usable one when it named none."""
    cuda_version: str | None = None
    """``torch.version.cuda``: the CUDA version this torch was built for; ``None`` for a
    CPU-only or ROCm build."""
    torch_build: str = ""
    """What this torch was built for: ``cuda``, ``rocm``, ``xpu`` or ``cpu`` (empty from an
    engine that predates it)."""


# -- a training run (``train`` mode), in order ------------------------------------------
#
#   DataProgress*                     only while CIFAR-10 downloads
#   RunStarted
#   WorldJoined?                      one rank of a distributed job (rank 0 alone reports)
#   DataReady                         the training data is where the pipeline reads it
#   Placement Memory                  after the first optimizer step (Adam's state exists)
#   (Progress* EpochFinished Memory)  per epoch
#   StepTimes?                        a distributed job
#   Finished
#
# One world size of ``gputui scale`` (``scale`` mode): RanksStarted, then rank 0's events.


class DataProgress(Event, type="data_progress"):
    """CIFAR-10 download progress (only while downloading)."""

    done_bytes: int
    """Bytes downloaded so far."""
    total_bytes: int
    """Bytes expected (0 when unknown)."""


class RunStarted(Event, type="run_started"):
    """The run is configured: device, dataset, pipeline and precision are settled."""

    device: Device
    """The device, indexed (``cuda`` reads ``cuda:0``)."""
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
    """``fp32``, ``tf32`` or ``bf16``: what was asked for."""
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
    math: str = ""
    """The math that runs, in words: ``IEEE fp32``, ``TF32``, or bf16 autocast (empty from
    an engine that predates it)."""
    gpu_uuid: str | None = None
    """The CUDA device's UUID as NVML spells it (``GPU-...``), to find its GPU and process
    by UUID and pid; ``None`` off CUDA."""
    gpu_bus_id: str | None = None
    """The GPU's PCI bus id as sysfs writes it (``0000:03:00.0``), to find an AMD or Intel
    GPU, whose UUID torch and the driver spell differently; ``None`` off a GPU, or unknown."""
    torch_build: str = ""
    """What this torch was built for: ``cuda``, ``rocm`` (an AMD GPU answers to ``cuda``),
    ``xpu`` or ``cpu`` (empty from an engine that predates it)."""
    flops_per_image: int | None = None
    """FLOPs of one image's forward and backward pass, counted once by torch's
    ``FlopCounterMode`` (``None`` from an engine that predates it)."""
    graphs: bool = False
    """Whether the step is to be replayed from a CUDA graph once warm (a failed capture
    then says so in a :class:`Note` that starts with :data:`GRAPHS_OFF`)."""


GRAPHS_OFF = "CUDA graphs off"
"""How the note of a capture that failed begins (the run then trained eagerly)."""


class DataReady(Event, type="data_ready"):
    """The training data is where the pipeline reads batches from; not part of any epoch."""

    device: Device
    """Where the dataset lives: the device (resident) or ``cpu`` (classic)."""
    seconds: float
    """Time to put it there, device synchronized."""
    nbytes: int
    """Bytes of training and held-out images and labels there."""


class Placement(Event, type="placement"):
    """Where every group of tensors lives; what a user checks so nothing stayed on the CPU."""

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


class Progress(Event, type="progress"):
    """Where an epoch is, read at most a few times a second (each read is one device sync)."""

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


class EpochFinished(Event, type="epoch_finished"):
    """One epoch trained and evaluated."""

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
    """True for epoch 1, the warm-up (:func:`gputui.jobs.results.steady_figures`)."""
    eval_seconds: float
    """Time the accuracy took."""
    images: int
    """Training images seen in the epoch."""
    device_seconds: float | None = None
    """The same steps' seconds between two events on the device's stream (CUDA, XPU), read
    after the epoch's synchronize: elapsed time, not busy time; ``None`` elsewhere."""
    device_clock: str = ""
    """How the device timed the epoch: ``events``, or ``wall`` on the CPU (the host: its
    device time is ``seconds``); empty on MPS, or from an engine that predates it."""
    energy_joules: float | None = None
    """What the GPU's energy counter (NVML) rose by over the epoch; ``None`` without one."""


class Memory(Event, type="memory"):
    """The trainer's memory after an epoch; a field a device cannot report is ``None``."""

    device: Device
    """Device the figures describe."""
    allocated_bytes: int | None
    """Bytes held by tensors (CUDA allocated, MPS current)."""
    reserved_bytes: int | None
    """Bytes reserved by the caching allocator (CUDA)."""
    peak_bytes: int | None
    """Peak allocated (CUDA) or peak resident set size (CPU), over ``peak_scope``."""
    driver_bytes: int | None
    """Bytes the Metal driver holds for the process (MPS)."""
    rss_bytes: int | None
    """The trainer process's resident set size."""
    peak_scope: str | None = None
    """What ``peak_bytes`` spans: ``epoch`` (CUDA: reset as each epoch begins, evaluation
    included) or ``process`` (CPU: since the trainer started; it cannot be reset);
    ``None`` without a peak, or from an engine that did not say."""


class Note(Event, type="note"):
    """Something the user should know that does not stop the run (one line)."""

    message: str
    """One line."""


class RecordingStopped(Note, type="recording_stopped"):
    """The run folder could no longer be written (a full disk): it was removed and the run
    goes on unrecorded. A :class:`Note` (its ``message`` says so), which also names the
    folder: the one ``RunStarted`` announced is gone."""

    run_dir: str
    """The folder that was removed."""


class Error(Event, type="error"):
    """The run failed; this is the last event."""

    message: str
    """One line that says what happened and what to do."""
    detail: str = ""
    """Traceback or stderr tail, shown on demand."""
    kind: str = "crash"
    """``config``, ``device``, ``data``, ``oom``, ``compile``, ``toolchain`` (``--compile``
    on a machine without the C compiler or Python headers it needs), ``crash``, ``killed``,
    ``join`` (a rank could not join its distributed job), ``peer`` (a rank lost a peer
    of its job) or ``rank`` (a rank of the job failed; the message names it)."""
    suggested_batch_size: int | None = None
    """For ``oom``: a batch size that was probed and fits, if one was found."""


class Finished(Event, type="finished"):
    """The run ended without error (``stopped`` when asked to stop early); the last event."""

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
    busy_share: float | None = None
    """The share of a sample of steps, profiled after the last epoch, that the GPU spent
    running their kernels (CUDA); ``None`` elsewhere."""


class WorldJoined(Event, type="world_joined"):
    """The run is one job of ``world_size`` ranks (torch.distributed, DDP); after RunStarted.

    Only rank 0 reports it: the other ranks say nothing unless they fail. RunStarted's
    ``batch_size`` is the per-rank batch; an epoch's images and images/s are the job's.
    """

    world_size: int
    """Processes in the job."""
    nodes: int
    """Machines in the job."""
    backend: str
    """``nccl`` (CUDA) or ``gloo`` (CPU)."""
    per_rank_batch: int
    """Images per step on each rank."""
    global_batch: int
    """Images per step in the whole job (``per_rank_batch * world_size``)."""
    init_seconds: float
    """Seconds to join the process group (the rendezvous with every rank)."""


class RanksStarted(Event, type="ranks_started"):
    """``gputui scale``'s launcher started its ranks (before any of them says anything)."""

    pids: tuple[int, ...]
    """Each rank's process id, rank 0 first: the processes to mark on the GPUs."""


class StepTimes(Event, type="step_times"):
    """Steps timed one by one after the last epoch: with the gradients' all-reduce, and
    without it (DDP's ``no_sync``), alternating, each synchronized; before Finished."""

    steps: int
    """Steps timed of each kind."""
    step_ms_p50: float
    """Median milliseconds of a step with the all-reduce."""
    step_ms_p95: float
    """95th percentile milliseconds of a step with the all-reduce."""
    local_step_ms_p50: float
    """Median milliseconds of a step without it (``no_sync``)."""
    allreduce_share: float
    """The share of a step spent waiting on gradient communication:
    ``1 - local_step_ms_p50 / step_ms_p50``, at least 0."""


# -- an experiment (``experiment`` mode), in order ---------------------------------------
#
#   ExperimentStarted
#   (ExperimentDevice (BatchSweepRow | SyncStallRow | PipelineRow)* DeviceFailed?)  per device
#   ExperimentConcluded                                                   not after a stop
#   Finished


class ExperimentStarted(Event, type="experiment_started"):
    """The experiment is set up: which devices and data, how many steps."""

    experiment: str
    """``batch-sweep``, ``sync-stall`` or ``pipelines``."""
    devices: tuple[Device, ...]
    """The devices, indexed, in the order they run."""
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
    torch_build: str = ""
    """What this torch was built for: ``cuda``, ``rocm``, ``xpu`` or ``cpu`` (empty from an
    engine that predates it)."""


class ExperimentDevice(Event, type="experiment_device"):
    """One device's measurements begin."""

    device: Device
    """The device, indexed."""
    device_name: str
    """GPU name or CPU model."""
    data_phase: str | None
    """``batch-sweep``: what the data share measures on this device, in words."""
    pinned: bool
    """``batch-sweep``: whether host batches are pinned before ``.to(device)``."""


class BatchSweepRow(Event, type="batch_sweep_row"):
    """``batch-sweep``: one batch size on one device."""

    device: Device
    """The device, indexed."""
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


class SyncStallRow(Event, type="sync_stall_row"):
    """``sync-stall``: one way of reading the loss on one device."""

    device: Device
    """The device, indexed."""
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


class PipelineRow(Event, type="pipeline_row"):
    """``pipelines``: one way of feeding batches on one device."""

    device: Device
    """The device, indexed."""
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
    rounds: int = 0
    """Whole rounds the timed steps were split into, one after the other (0: none)."""
    spread_ms: float | None = None
    """Slowest round's ms per step minus the fastest's: the noise to judge a difference by
    (``None`` with fewer than two rounds)."""


class DeviceFailed(Event, type="experiment_device_failed"):
    """A device's measurements stopped with an error; the other devices still run."""

    device: Device
    """The device, indexed."""
    message: str
    """One line that says what happened."""
    detail: str = ""
    """The traceback, shown on demand."""


class ExperimentConcluded(Event, type="experiment_concluded"):
    """The result in one plain sentence, built from the rows (:mod:`.conclusions`)."""

    experiment: str
    """The experiment."""
    conclusion: str
    """One sentence."""


Row = BatchSweepRow | SyncStallRow | PipelineRow
"""A result row of any experiment."""


# -- the doctor's probe (``probe`` mode), in order, a ProbeStep before each part that can hang
#
#   TorchProbed CudaProbed MpsProbed XpuProbed PitfallShown* DeviceProbed* Finished


class ProbeStep(Event, type="probe_step"):
    """The probe starts a part that can hang; a parent that must kill it says where it hung."""

    step: str
    """E.g. ``importing torch``, ``initialising CUDA``, ``measuring cuda:0``."""


TORCH_COMPANIONS = ("torchvision", "torchaudio")
"""Packages built against one torch, which are reinstalled with it when installed."""


class TorchProbed(Event, type="probe_torch"):
    """What torch is: version, build, companions; or why it will not import."""

    imported: bool
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
    build: str | None = None
    """What this torch was built for: ``cuda``, ``rocm``, ``xpu`` or ``cpu``."""
    mps_built: bool | None = None
    """``torch.backends.mps.is_built()``."""
    numpy_installed: bool | None = None
    """Whether NumPy is importable (torch's ``.numpy()`` needs it)."""
    companions: dict[str, str | None] = field(default_factory=dict)
    """Packages built against torch (torchvision...), with their versions (``None``: absent)."""
    platform: dict[str, Any] = field(default_factory=dict)
    """``system``, ``machine``, ``mac_version``, ``python``, ``executable``."""


class CudaProbed(Event, type="probe_cuda"):
    """What CUDA says: available or not, how many devices, the init error."""

    available: bool | None
    """``torch.cuda.is_available()``."""
    device_count: int | None = None
    """``torch.cuda.device_count()``."""
    init_error: str | None = None
    """What ``torch.cuda.init()`` raised when CUDA is not available."""
    warnings: tuple[str, ...] = ()
    """Warnings from asking CUDA (``CUDA initialization: ...``)."""
    cudnn_version: int | None = None
    """``torch.backends.cudnn.version()``."""
    arch_list: tuple[str, ...] = ()
    """``torch.cuda.get_arch_list()``: the GPU code this build carries, ``sm_90`` compiled,
    ``compute_90`` as PTX; empty when CUDA is not available (or an older engine sent it)."""


class MpsProbed(Event, type="probe_mps"):
    """Whether MPS is available, and the warnings that say why not."""

    available: bool | None
    """``torch.backends.mps.is_available()``."""
    warnings: tuple[str, ...] = ()
    """Warnings from asking MPS."""


class XpuProbed(Event, type="probe_xpu"):
    """What ``torch.xpu`` says of Intel GPUs: available or not, how many, and why not."""

    available: bool | None
    """``torch.xpu.is_available()``; False in a torch without ``torch.xpu``."""
    device_count: int | None = None
    """``torch.xpu.device_count()``."""
    error: str | None = None
    """What asking raised, in torch's words."""


class PitfallShown(Event, type="probe_pitfall"):
    """One tutorial mistake, made for real, with torch's own error text."""

    name: str
    """``cross-device``, ``numpy`` or ``device-string``."""
    shown_on: str | None
    """Where it was made: ``cuda:0``, ``mps``, ``meta`` (no GPU here), or the device string."""
    error: str | None
    """torch's error text, e.g. ``RuntimeError: Invalid device string: 'cuda0'``; ``None``
    when torch did not raise."""
    cpu_error: str | None = None
    """For ``numpy``: the error ``.numpy()`` raises on a CPU tensor (``None``: it works)."""


class DeviceProbed(Event, type="probe_device"):
    """Part of what the probe learnt of one device: its identity, then its figures.

    Several may come for one device; a reader merges them by ``device``.
    """

    device: Device
    """``cpu``, ``cuda:N``, ``xpu:N`` or ``mps``."""
    name: str | None = None
    """What it is, e.g. ``NVIDIA H100 80GB HBM3``."""
    compute_capability: str | None = None
    """CUDA's ``major.minor``."""
    memory_bytes: int | None = None
    """Memory the device has (for MPS: what Metal recommends as the most)."""
    uuid: str | None = None
    """A CUDA device's UUID as NVML spells it (``GPU-...``)."""
    figures: dict[str, float | None] = field(default_factory=dict)
    """Measured figures, named as :class:`gputui.doctor.checks.DeviceReport`'s fields."""
    notes: tuple[str, ...] = ()
    """How each figure was taken, and why one is missing."""
    error: str | None = None
    """Why the device could not be read."""


TERMINAL_TYPES = (Finished, Error, DevicesListed)
"""Event types that end a job's stream."""

Emit = Callable[[Event], None]
"""Where an engine mode sends its events, one at a time, in order."""


def parse_event(line: str | bytes) -> Event | None:
    """One line of the stream (with or without its newline) as its event; ``None``, logged
    at debug level, for a line to skip: not JSON, not an event, an unknown event type (a
    newer engine), or a known type missing a field."""
    text = (line.decode("utf-8", "replace") if isinstance(line, bytes) else line).strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # (a recording's line may nest past Python's stack)
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


def _build(cls: type[T], data: dict[str, Any]) -> T:
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
        elif isinstance(value, list):  # JSON has no tuples
            value = tuple(value)
        values[spec.name] = value
    for name, fits in _scalar_checks(cls).items():
        if name in values and not fits(values[name]):
            raise TypeError(f"{name} is {type(values[name]).__name__}, not what it holds")
    return cls(**parsed_fields(cls, values))


WHOLE_MAX = 2**63
"""The largest magnitude a whole number in an event may have: far beyond any figure a run
has, where ``float()`` of a recording's ``10**400`` would overflow. (A float may be NaN: a
diverged loss is one.)"""


def _whole(value: Any) -> bool:
    return type(value) is int and -WHOLE_MAX <= value <= WHOLE_MAX


_SCALARS: dict[Any, Callable[[Any], bool]] = {
    float: lambda value: type(value) is float or _whole(value),
    int: _whole,
    str: lambda value: type(value) is str,
    bool: lambda value: type(value) is bool,
}


def _or_none(fits: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or fits(value)


@functools.cache
def _scalar_checks(cls: type) -> dict[str, Callable[[Any], bool]]:
    """Each of ``cls``'s fields that holds a number, text or a flag (or ``None``), with the
    test its JSON value must pass: an event from a recording is another's text, and a
    ``"seconds": "x"`` would fail far from here."""
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, hint in typing.get_type_hints(cls).items():
        arms = typing.get_args(hint) if typing.get_origin(hint) is types.UnionType else (hint,)
        kinds = [arm for arm in arms if arm is not type(None)]
        if len(kinds) == 1 and kinds[0] in _SCALARS:
            fits = _SCALARS[kinds[0]]
            checks[name] = _or_none(fits) if type(None) in arms else fits
    return checks


def _as_dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("a list item is not an object")
    return value
