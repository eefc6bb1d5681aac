"""What a job in the engine's child process is asked to do: frozen, JSON-portable configs.

Torch-free on purpose: the commands and the UI build and validate a config in their own
process, then hand it to the child (:mod:`gputui.engine`) as JSON. A device's text is parsed
where it comes in; whether it is usable needs torch. Defaults are a headless command's
(every core, normal priority); the runner pane asks for less itself
(:func:`gputui.jobs.runner.ui_friendly`).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from gputui.device import CPU, Device, DeviceError, Kind, parsed_fields, plain
from gputui.format import fmt_counted

DATASETS = ("auto", "cifar10", "synthetic")
PIPELINES = ("resident", "classic")
PRECISIONS = ("fp32", "tf32", "bf16")
NICE_MAX = 19
EPOCHS_MAX = 1000
"""Most epochs a run may ask for: this small CNN learns nothing more after a few dozen, and
more than this is a slip of the keyboard (a day's training, even on a GPU)."""
EXPERIMENTS = ("batch-sweep", "sync-stall", "pipelines")
"""Every experiment, in the order the help lists them."""
DEFAULT_BATCH_SIZES = (32, 64, 128, 256, 512, 1024, 2048)
"""Batch sizes ``batch-sweep`` tries by default."""
MAX_IMAGES = 50_000
"""Most training images an experiment loads (CIFAR-10's training split)."""
ALLOW_DOWNLOAD = "allow the download"
"""What a job's CIFAR-10 error tells a command's user to do when downloading was off
(``--no-download``); the runner pane, which has no control for it, says its own words in
their place."""
MIN_STEPS = 3
"""Fewest timed steps an experiment's measurement takes, however slow (unless ``steps`` is
smaller)."""
_RENAMED = {"num_workers": "workers"}
"""Config keys that had another name once, still read (``GPUTUI_RUNNER_DEFAULTS``)."""

C = TypeVar("C", bound="Portable")


class ConfigError(ValueError):
    """A configuration that cannot work; ``str()`` is one line that says what to do."""


def closest(word: str, known: Iterable[str]) -> str | None:
    """The one of ``known`` that ``word`` is most likely a misspelling of, if any is close
    (``epoch`` for ``epochs``): for "did you mean" in an error."""
    found = difflib.get_close_matches(word, list(known), n=1)
    return found[0] if found else None


def available_cores() -> int:
    """CPU cores this process may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS has no sched_getaffinity
        return max(1, os.cpu_count() or 1)


def default_threads() -> int:
    """Threads CPU training takes unless told: ``OMP_NUM_THREADS`` where it is set to a
    count (as torch itself reads it), else every core this process may run on."""
    told = os.environ.get("OMP_NUM_THREADS", "").strip()
    if told.isdigit() and int(told) > 0:
        return int(told)
    return available_cores()


class Portable:
    """A frozen config dataclass that travels to the child as one line of JSON."""

    MODE: ClassVar[str] = ""
    """The engine's mode that runs this config (``python -m gputui.engine MODE``)."""
    NAME: ClassVar[str] = "config"
    """What the config is, in error messages."""
    WHAT: ClassVar[str] = "engine"
    """What the child that runs it is called, in its errors (``the trainer crashed``)."""
    STRICT: ClassVar[bool] = False
    """Refuse unknown keys (else they are ignored: a newer sender's)."""
    __dataclass_fields__: ClassVar[dict[str, Any]]  # every config is a dataclass

    def validate(self) -> None:
        """Check every field that needs no torch (each config adds its own checks).

        Raises:
            ConfigError: with a one-line message naming the bad value and what to use.
        """

    def with_changes(self: C, **changes: Any) -> C:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        """One line of JSON (devices as their text); :meth:`from_json` reads it back."""
        return json.dumps(plain(self), separators=(",", ":"))

    @classmethod
    def from_json(cls: type[C], text: str) -> C:
        """Read :meth:`to_json`'s output.

        Raises:
            ConfigError: when ``text`` is not a JSON object of config fields.
        """
        try:
            return cls(**cls._fields_in(text, cls.NAME))
        except TypeError as exc:
            raise ConfigError(f"{cls.NAME} is incomplete: {exc}") from None

    def changed_by_json(self: C, text: str, source: str) -> C:
        """A copy with the fields that ``text``, a JSON object from ``source``, sets.

        A person wrote it (``GPUTUI_RUNNER_DEFAULTS``), so an unknown key is refused, not
        ignored: ``{"epoch": 1}`` would otherwise train the default number of epochs.

        Raises:
            ConfigError: naming ``source`` when ``text`` is not a JSON object of fields.
        """
        return self.with_changes(**self._fields_in(text, source, strict=True))

    @classmethod
    def _fields_in(cls, text: str, source: str, *, strict: bool | None = None) -> dict[str, Any]:
        """The config fields a JSON object sets; lists become tuples, devices are parsed, and
        unknown keys are ignored (a newer sender's) unless ``strict`` (default: the config's
        ``STRICT``)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{source} is not JSON: {exc}") from None
        except (ValueError, RecursionError):  # a 5,000-digit number, nesting past the stack
            raise ConfigError(f"{source} is not JSON that gputui reads") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{source} is not a JSON object of {cls.NAME} fields")
        known = {spec.name for spec in dataclasses.fields(cls)}
        given: dict[str, Any] = data  # JSON's keys are text
        keys = {key: _RENAMED.get(key, key) for key in given}
        unknown = [key for key, name in keys.items() if name not in known]
        if unknown and (cls.STRICT if strict is None else strict):
            raise ConfigError(f"{source}: {_unknown_key(unknown[0], known)}")
        fields = {
            keys[key]: tuple(value) if isinstance(value, list) else value
            for key, value in given.items()
            if keys[key] in known
        }
        try:
            return parsed_fields(cls, fields)
        except DeviceError as exc:
            raise ConfigError(f"{source}: {exc}") from None


def _unknown_key(key: str, known: set[str]) -> str:
    """``unknown key 'epoch' (did you mean 'epochs'?); known: batch_size, ...``."""
    close = closest(key, known)
    hint = f" (did you mean {close!r}?)" if close is not None else ""
    return f"unknown key {key!r}{hint}; known: {', '.join(sorted(known))}"


@dataclass(frozen=True, kw_only=True)
class JobConfig(Portable):
    """What every job shares: where its data comes from and how it may use the machine."""

    dataset: str = "auto"
    """``auto`` (CIFAR-10 when present, else synthetic), ``cifar10`` (required: the run
    fails, saying how to get it, when it cannot be had), ``synthetic``."""
    data_dir: str | None = None
    """Folder holding CIFAR-10; ``None`` for the data module's default cache folder."""
    download: bool = True
    """Whether CIFAR-10 may be downloaded when it is not in ``data_dir``."""
    limit: int | None = None
    """Use only the first N training images (quick runs and tests)."""
    threads: int | None = None
    """torch threads in the child; ``None``: every core."""
    workers: int = 2
    """DataLoader worker processes for the classic pipeline (seed 001 uses 2)."""
    nice: int = 0
    """Added to the child's niceness (0 to 19)."""
    seed: int = 0
    """Seed for the model's initial weights and the data order."""

    def validate(self) -> None:
        _one_of("dataset", self.dataset, DATASETS)
        if self.limit is not None:
            _whole_number("limit", self.limit, 1)
        if self.threads is not None:
            _whole_number("threads", self.threads, 1)
        _whole_number("workers", self.workers, 0)
        _whole_number("nice", self.nice, 0, NICE_MAX)

    def job_settings(self) -> dict[str, Any]:
        """The fields every job shares, to start another kind of job the same way."""
        return {spec.name: getattr(self, spec.name) for spec in dataclasses.fields(JobConfig)}


@dataclass(frozen=True, kw_only=True)
class RunConfig(JobConfig):
    """One training run, as the UI or ``gputui bench`` asks for it."""

    MODE: ClassVar[str] = "train"
    NAME: ClassVar[str] = "run config"
    WHAT: ClassVar[str] = "trainer"

    device: Device = CPU
    """Where it trains; a plain ``cuda`` (or ``xpu``) is the first GPU, or in a distributed
    job each rank's own."""
    epochs: int = 2
    """Epochs to train; epoch 1 is the warm-up epoch."""
    batch_size: int = 256
    """Images per optimizer step (seed 001 uses 256)."""
    pipeline: str = "resident"
    """``resident`` (whole uint8 dataset on the device) or ``classic`` (DataLoader + ``.to``)."""
    precision: str = "fp32"
    """``fp32`` (IEEE: TF32 off for matmuls and cuDNN convolutions alike), ``tf32`` (TF32
    for both, on CUDA) or ``bf16`` (autocast; channels_last on CPUs with AVX512-BF16 or
    AMX)."""
    compile: bool = False
    """Wrap the model in ``torch.compile``."""
    graphs: bool = True
    """Replay each step from a CUDA graph once warm (CUDA, not ROCm; the resident pipeline,
    one process, not compiled); a capture that fails falls back to eager with a note."""
    test_limit: int | None = None
    """Use only the first N held-out images for accuracy."""
    record: bool = True
    """Write the run folder (events JSONL, epochs CSV, TensorBoard when installed)."""
    runs_dir: str | None = None
    """Parent of run folders; ``None`` for ``$XDG_STATE_HOME/gputui/runs``."""
    progress_interval_s: float = 0.25
    """Least wall-clock seconds between progress reads (each one is a device sync)."""
    collective_timeout_s: float = 120.0
    """One rank of a distributed job: seconds it waits on its peers (the rendezvous, a
    gradient all-reduce) before it gives up; torch's own default is 10 or 30 minutes."""

    def validate(self) -> None:
        _whole_number("epochs", self.epochs, 1, EPOCHS_MAX)
        _whole_number("batch size", self.batch_size, 1)
        super().validate()
        if self.limit is not None:
            check_batch_fits(self.batch_size, self.limit)
        _one_of("pipeline", self.pipeline, PIPELINES)
        _one_of("precision", self.precision, PRECISIONS)
        if self.test_limit is not None:
            _whole_number("test limit", self.test_limit, 0)
        _seconds_above_zero("progress interval", self.progress_interval_s)
        _seconds_above_zero("collective timeout", self.collective_timeout_s)

    def check_distributed(self) -> None:
        """What one rank of a distributed job needs besides: the resident pipeline (each
        rank keeps its own copy and takes its slice of every step) and a device by kind
        (``cuda`` becomes ``cuda:LOCAL_RANK``, ``xpu`` ``xpu:LOCAL_RANK``; gloo serves the
        CPU; MPS has no backend).

        Raises:
            ConfigError: one line naming what to use instead.
        """
        if self.pipeline != "resident":
            raise ConfigError(
                "a distributed job trains with the resident pipeline only: "
                "leave out --pipeline classic"
            )
        kind = self.device.kind
        if kind not in DISTRIBUTED_KINDS:
            raise ConfigError(
                f"torch.distributed has no backend for {kind}: use --device cpu (gloo), cuda "
                "(NCCL; RCCL on ROCm) or xpu (XCCL)"
            )
        if self.device.index is not None:
            raise ConfigError(
                f"device {self.device} in a distributed job: use --device {kind} (each rank "
                f"takes {kind}:LOCAL_RANK)"
            )


DISTRIBUTED_KINDS: tuple[Kind, ...] = ("cpu", "cuda", "xpu")
"""The devices a distributed job's ``--device`` may name, by kind alone: each rank picks
its own index."""
WORLD_SIZE_MAX = 64
"""The most ranks ``gputui scale`` starts on one machine."""


@dataclass(frozen=True, kw_only=True)
class ScaleConfig(RunConfig):
    """One world size of ``gputui scale``: the engine launches ``world_size`` ranks of the
    same training (torch.multiprocessing, torch.distributed) and reports rank 0's events.
    ``batch_size`` is the per-rank batch."""

    MODE: ClassVar[str] = "scale"
    NAME: ClassVar[str] = "scale config"
    WHAT: ClassVar[str] = "scaling job"

    world_size: int = 1
    """Ranks to start on this machine."""

    def validate(self) -> None:
        super().validate()
        _whole_number("world size", self.world_size, 1, WORLD_SIZE_MAX)
        self.check_distributed()
        if self.limit is not None:
            check_batch_fits(self.batch_size * self.world_size, self.limit)


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig(JobConfig):
    """One experiment on one or more devices."""

    MODE: ClassVar[str] = "experiment"
    NAME: ClassVar[str] = "experiment config"
    WHAT: ClassVar[str] = "experiment"

    experiment: str
    """``batch-sweep``, ``sync-stall`` or ``pipelines``."""
    devices: tuple[Device, ...] = ()
    """The devices, in order; empty: cpu and every usable accelerator."""
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    """Batch sizes for ``batch-sweep`` (run smallest first; duplicates run once)."""
    batch_size: int = 256
    """Batch size for ``sync-stall`` and ``pipelines`` (seed 001 uses 256)."""
    steps: int = 200
    """Most timed steps per measurement (a batch size, a way of reading the loss, a pipeline);
    ``budget_s`` usually ends a measurement first on a CPU."""
    warmup_steps: int = 2
    """Untimed steps before each measurement (cuDNN autotune, allocator, DataLoader workers)."""
    budget_s: float = 2.0
    """Seconds of timed steps a measurement aims at (``sync-stall``: both ways together):
    fewer steps than ``steps`` when they are slow, never fewer than ``MIN_STEPS``."""
    pin_memory: bool = True
    """``batch-sweep`` on CUDA: copy from pinned host batches (as the classic pipeline does);
    ``False`` copies from pageable memory, as seed 001's DataLoader hands them out."""

    def validate(self) -> None:
        if self.experiment not in EXPERIMENTS:
            raise ConfigError(
                f"unknown experiment {self.experiment!r}: choose {', '.join(EXPERIMENTS)}"
            )
        if not self.batch_sizes:
            raise ConfigError("no batch sizes given: list some, e.g. 32,64,128")
        for size in self.batch_sizes:
            _whole_number("batch size", size, 1)
        _whole_number("batch size", self.batch_size, 1)
        _whole_number("steps", self.steps, 1)
        _whole_number("warm-up steps", self.warmup_steps, 1)
        _seconds_above_zero("budget", self.budget_s)
        super().validate()
        if self.limit is not None:
            check_batch_fits(max(self.sizes), self.limit)

    @property
    def sizes(self) -> tuple[int, ...]:
        """The batch sizes this experiment runs: sorted sweep sizes, or ``(batch_size,)``."""
        if self.experiment == "batch-sweep":
            return tuple(sorted(set(self.batch_sizes)))
        return (self.batch_size,)


@dataclass(frozen=True, kw_only=True)
class ProbeConfig(Portable):
    """What the doctor's probe measures, and how big. ``budget_s`` is shared by all the timed
    loops (warm-ups and device set-up come on top), but each loop has a floor (the engine's
    ``MIN_LOOP_S`` and ``MIN_REPS``), so many GPUs take longer: :meth:`time_limit_s`."""

    MODE: ClassVar[str] = "probe"
    NAME: ClassVar[str] = "probe config"
    WHAT: ClassVar[str] = "torch probe"
    STRICT: ClassVar[bool] = True
    TIMEOUT_S: ClassVar[float] = 60.0
    """How long the probe may take by default before it says how many GPUs it will measure:
    importing torch and initialising CUDA can take a while."""
    TIMEOUT_PER_GPU_S: ClassVar[float] = 30.0
    """What each CUDA device it measures adds to the probe's time limit: its context, its
    buffers, seven warmed-up loops (a slow GPU's 8192-square bf16 matmul takes seconds)."""

    measure: bool = True
    """Measure bandwidth and matmuls, and show the pitfalls; ``False`` only identifies the
    devices (``--quick``)."""
    torch_only: bool = False
    """Stop once torch, CUDA and MPS have answered: no pitfalls, no devices (the monitor's
    question: can PyTorch use MPS here?)."""
    budget_s: float = 3.0
    """Seconds of timed loops, shared by every device's loops (each has a floor)."""
    cpu_copy_mib: int = 64
    cpu_matmul_n: int = 1024
    gpu_copy_mib: int = 256
    gpu_matmul_n: int = 8192
    mps_copy_mib: int = 128
    mps_matmul_n: int = 4096

    def validate(self) -> None:
        for spec in dataclasses.fields(self):
            if spec.name.endswith(("_mib", "_n")):
                _whole_number(spec.name, getattr(self, spec.name), 1)
        _seconds_above_zero("budget", self.budget_s)

    def time_limit_s(self, base_s: float, cuda_devices: int) -> float:
        """How long the probe may run once it said how many CUDA devices it sees: ``base_s``
        (``TIMEOUT_S``, or ``gputui doctor --timeout``: importing torch, initialising CUDA,
        the CPU's figures) plus ``TIMEOUT_PER_GPU_S`` for each CUDA device it will measure."""
        if not self.measure or self.torch_only:
            return base_s
        return base_s + self.TIMEOUT_PER_GPU_S * max(cuda_devices, 0)


@dataclass(frozen=True, kw_only=True)
class DeviceQuery(Portable):
    """Which devices there are, usable or not; with ``check``, whether these can be used."""

    MODE: ClassVar[str] = "devices"
    NAME: ClassVar[str] = "device query"
    WHAT: ClassVar[str] = "device listing"
    STRICT: ClassVar[bool] = True

    check: tuple[Device, ...] = ()
    """Devices to check and give their index (``cuda`` reads ``cuda:0``); empty: every
    usable device is chosen."""


def check_batch_fits(batch_size: int, images: int) -> None:
    """Refuse a batch larger than the training images, the one rule for a run and every
    experiment: checked here against ``limit``, and in the child against the data it loaded
    (only it knows how many images a dataset has). A step needs a whole batch of images.

    Raises:
        ConfigError: one line naming the largest batch that fits.
    """
    if batch_size > images:
        raise ConfigError(
            f"batch size {batch_size:,} is larger than the "
            f"{fmt_counted(images, 'training image')}: use a batch size of at most {images:,}"
        )


def sweep_sizes(limit: int | None) -> tuple[int, ...]:
    """The default batch sizes for ``batch-sweep`` that fit in ``limit`` training images (all
    of them without a limit; the limit itself when none fits)."""
    if limit is None:
        return DEFAULT_BATCH_SIZES
    return tuple(size for size in DEFAULT_BATCH_SIZES if size <= limit) or (limit,)


def steps_within(estimate_s: float, steps: int, budget_s: float) -> int:
    """Timed steps for a measurement: ``steps``, or fewer (never under ``MIN_STEPS``) when
    steps of ``estimate_s`` (one step at the end of the warm-up) would overrun ``budget_s``."""
    if not estimate_s > 0:
        return steps
    return max(min(MIN_STEPS, steps), min(steps, int(budget_s / estimate_s)))


def images_needed(config: ExperimentConfig) -> int:
    """Training images to load so no measurement runs out of data mid-way.

    ``pipelines`` wants one DataLoader epoch to hold every step (a new epoch restarts
    the workers); the others cycle through a few batches' worth.
    """
    if config.limit is not None:
        return config.limit
    largest = max(config.sizes)
    if config.experiment == "pipelines":
        return min(MAX_IMAGES, largest * (config.warmup_steps + config.steps))
    return min(MAX_IMAGES, 4 * largest)


def _whole_number(name: str, value: object, least: int, most: int | None = None) -> None:
    """Refuse ``value`` unless it is a whole number from ``least`` (to ``most``, if given)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < least
        or (most is not None and value > most)
    ):
        bounds = f"of at least {least}" if most is None else f"from {least} to {most}"
        raise ConfigError(f"{name} must be a whole number {bounds}, got {value!r}")


def _seconds_above_zero(name: str, value: object) -> None:
    if isinstance(value, bool) or not (isinstance(value, int | float) and 0 < value < float("inf")):
        raise ConfigError(f"{name} must be a number of seconds above 0, got {value!r}")


def _one_of(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} {value!r} is not one of {', '.join(choices)}")
