"""What one experiment run is asked to do: a frozen, JSON-portable ``ExperimentConfig``.

Torch-free: the CLI and the UI build and validate it, then hand it to the child
process as JSON. Devices are checked in the child (that needs torch); an empty
``devices`` means cpu and every usable accelerator.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputui.training.config import DATASETS, NICE_MAX, ConfigError

EXPERIMENTS = ("batch-sweep", "sync-stall", "pipelines")
"""Every experiment, in the order the help lists them."""
DEFAULT_BATCH_SIZES = (32, 64, 128, 256, 512, 1024, 2048)
"""Batch sizes ``batch-sweep`` tries by default."""
MAX_IMAGES = 50_000
"""Most training images an experiment loads (CIFAR-10's training split)."""


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment on one or more devices."""

    experiment: str
    """``batch-sweep``, ``sync-stall`` or ``pipelines``."""
    devices: tuple[str, ...] = ()
    """Devices as the tutorials write them; empty: cpu and every usable accelerator."""
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
    dataset: str = "auto"
    """``auto``, ``cifar10`` or ``synthetic``, as for ``gputui bench``."""
    data_dir: str | None = None
    """Folder holding CIFAR-10; ``None`` for the default cache folder."""
    download: bool = True
    """Whether CIFAR-10 may be downloaded (``dataset="cifar10"`` only)."""
    limit: int | None = None
    """Training images to load; ``None``: what the experiment needs (see :func:`images_needed`)."""
    threads: int | None = None
    """torch threads in the child; ``None``: every core."""
    workers: int = 2
    """DataLoader worker processes for the classic pipeline (seed 001 uses 2)."""
    pin_memory: bool = True
    """``batch-sweep`` on CUDA: copy from pinned host batches (as the classic pipeline does);
    ``False`` copies from pageable memory, as seed 001's DataLoader hands them out."""
    nice: int = 0
    """Added to the child's niceness (0 to 19); the runner pane uses 10."""
    seed: int = 0
    """Seed for the model's weights and the data order."""
    simulate_oom_from_batch: int | None = None
    """TEST HOOK: steps with at least this many images raise a simulated out-of-memory error."""

    def validate(self) -> None:
        """Check every field that needs no torch.

        Raises:
            ConfigError: one line naming the bad value and what to use.
        """
        if self.experiment not in EXPERIMENTS:
            raise ConfigError(
                f"unknown experiment {self.experiment!r}: choose {', '.join(EXPERIMENTS)}"
            )
        for device in self.devices:
            if not isinstance(device, str) or not device.strip():
                raise ConfigError("a device is empty: use cpu, cuda, cuda:N or mps")
        if not self.batch_sizes:
            raise ConfigError("no batch sizes given: list some, e.g. 32,64,128")
        for size in self.batch_sizes:
            _at_least("batch size", size, 1)
        _at_least("batch size", self.batch_size, 1)
        _at_least("steps", self.steps, 1)
        _at_least("warm-up steps", self.warmup_steps, 1)
        if isinstance(self.budget_s, bool) or not (
            isinstance(self.budget_s, int | float) and 0 < self.budget_s < float("inf")
        ):
            raise ConfigError(f"budget must be a number of seconds above 0, got {self.budget_s!r}")
        if self.dataset not in DATASETS:
            raise ConfigError(f"dataset {self.dataset!r} is not one of {', '.join(DATASETS)}")
        if self.data_dir is not None and not Path(self.data_dir).expanduser().is_dir():
            raise ConfigError(
                f"data dir {self.data_dir} does not exist: create it, or leave it out to use "
                "the default cache folder"
            )
        if self.limit is not None:
            _at_least("limit", self.limit, 1)
        if self.threads is not None:
            _at_least("threads", self.threads, 1)
        _at_least("workers", self.workers, 0)
        if (
            isinstance(self.nice, bool)
            or not isinstance(self.nice, int)
            or not (0 <= self.nice <= NICE_MAX)
        ):
            raise ConfigError(f"nice must be 0 to {NICE_MAX}, got {self.nice!r}")
        if self.simulate_oom_from_batch is not None:
            _at_least("simulated OOM batch", self.simulate_oom_from_batch, 1)

    @property
    def sizes(self) -> tuple[int, ...]:
        """The batch sizes this experiment runs: sorted sweep sizes, or ``(batch_size,)``."""
        if self.experiment == "batch-sweep":
            return tuple(sorted(set(self.batch_sizes)))
        return (self.batch_size,)

    def with_changes(self, **changes: Any) -> ExperimentConfig:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        """One line of JSON; :meth:`from_json` reads it back."""
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ExperimentConfig:
        """Read :meth:`to_json`'s output; unknown keys are ignored, lists become tuples.

        Raises:
            ConfigError: when ``text`` is not a JSON object of config fields.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"experiment config is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError("experiment config is not a JSON object")
        known = {spec.name for spec in dataclasses.fields(cls)}
        values = {
            key: tuple(value) if isinstance(value, list) else value
            for key, value in data.items()
            if key in known
        }
        try:
            return cls(**values)
        except TypeError as exc:
            raise ConfigError(f"experiment config is incomplete: {exc}") from None


MIN_STEPS = 3
"""Fewest timed steps a measurement takes, however slow (unless ``steps`` is smaller)."""


def steps_within(estimate_s: float, steps: int, budget_s: float) -> int:
    """Timed steps for a measurement: ``steps``, or fewer when they would overrun the budget.

    Args:
        estimate_s: Seconds one step took at the end of the warm-up.
        steps: The most steps asked for.
        budget_s: Seconds the timed steps should take at most.

    Returns:
        Between ``min(MIN_STEPS, steps)`` and ``steps``.
    """
    least = min(MIN_STEPS, steps)
    if not estimate_s > 0:
        return steps
    return max(least, min(steps, int(budget_s / estimate_s)))


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


def _at_least(name: str, value: object, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{name} must be a whole number of at least {least}, got {value!r}")
