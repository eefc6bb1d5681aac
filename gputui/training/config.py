"""What one training run is asked to do: a frozen, JSON-portable ``RunConfig``.

Torch-free on purpose: the UI and ``gputui bench`` build and validate a config in
their own process, then hand it to the trainer's child process as JSON.
Device strings are checked only for shape here; whether the device is usable
needs torch and is checked by :mod:`gputui.training.devices`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATASETS = ("auto", "cifar10", "synthetic")
PIPELINES = ("resident", "classic")
PRECISIONS = ("fp32", "bf16")
NICE_MAX = 19


class ConfigError(ValueError):
    """A run configuration that cannot work; ``str()`` is one line that says what to do."""


def available_cores() -> int:
    """CPU cores this process may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS has no sched_getaffinity
        return max(1, os.cpu_count() or 1)


def ui_friendly_threads() -> int:
    """Threads for CPU training beside a live UI: every core but one, at least 1."""
    return max(1, available_cores() - 1)


@dataclass(frozen=True)
class RunConfig:
    """One training run, as the UI or ``gputui bench`` asks for it."""

    device: str = "cpu"
    """Device as the tutorials write it: ``cpu``, ``cuda``, ``cuda:N`` or ``mps``."""
    epochs: int = 2
    """Epochs to train; epoch 1 is the warm-up epoch."""
    batch_size: int = 256
    """Images per optimizer step (seed 001 uses 256)."""
    dataset: str = "auto"
    """``auto`` (CIFAR-10 when present or downloadable, else synthetic), ``cifar10``,
    ``synthetic``."""
    data_dir: str | None = None
    """Folder holding CIFAR-10; ``None`` for the data module's default cache folder."""
    download: bool = True
    """Whether CIFAR-10 may be downloaded when it is not in ``data_dir``."""
    pipeline: str = "resident"
    """``resident`` (whole uint8 dataset on the device) or ``classic`` (DataLoader + ``.to``)."""
    precision: str = "fp32"
    """``fp32`` or ``bf16`` (autocast; channels_last on CPUs with AVX512-BF16 or AMX)."""
    compile: bool = False
    """Wrap the model in ``torch.compile``."""
    limit: int | None = None
    """Use only the first N training images (quick runs and tests)."""
    test_limit: int | None = None
    """Use only the first N held-out images for accuracy."""
    num_workers: int = 2
    """DataLoader worker processes for the classic pipeline (seed 001 uses 2)."""
    threads: int | None = None
    """torch threads when training on the CPU; ``None``: every core but one (for a live UI)."""
    nice: int = 10
    """Added to the trainer process's niceness (0 to 19), so a UI beside it stays responsive."""
    seed: int = 0
    """Seed for the model's initial weights and the epoch permutations."""
    record: bool = True
    """Write the run folder (events JSONL, epochs CSV, TensorBoard when installed)."""
    runs_dir: str | None = None
    """Parent of run folders; ``None`` for ``$XDG_STATE_HOME/gputui/runs``."""
    progress_interval_s: float = 0.25
    """Least wall-clock seconds between progress reads (each one is a device sync)."""
    simulate_oom_from_batch: int | None = None
    """TEST HOOK: steps with at least this many images raise a simulated out-of-memory error."""

    def validate(self) -> None:
        """Check every field that needs no torch.

        Raises:
            ConfigError: with a one-line message naming the bad value and what to use.
        """
        if not isinstance(self.device, str) or not self.device.strip():
            raise ConfigError("device is empty: use cpu, cuda, cuda:N or mps")
        _at_least("epochs", self.epochs, 1)
        _at_least("batch size", self.batch_size, 1)
        _one_of("dataset", self.dataset, DATASETS)
        _one_of("pipeline", self.pipeline, PIPELINES)
        _one_of("precision", self.precision, PRECISIONS)
        if self.data_dir is not None and not Path(self.data_dir).expanduser().is_dir():
            raise ConfigError(
                f"data dir {self.data_dir} does not exist: create it, or leave it out to use "
                "the default cache folder"
            )
        if self.limit is not None:
            _at_least("limit", self.limit, 1)
        if self.test_limit is not None:
            _at_least("test limit", self.test_limit, 0)
        _at_least("workers", self.num_workers, 0)
        if self.threads is not None:
            _at_least("threads", self.threads, 1)
        if not isinstance(self.nice, int) or not 0 <= self.nice <= NICE_MAX:
            raise ConfigError(f"nice must be 0 to {NICE_MAX}, got {self.nice!r}")
        if not self.progress_interval_s > 0:
            raise ConfigError(
                f"progress interval must be above 0 seconds, got {self.progress_interval_s!r}"
            )
        if self.simulate_oom_from_batch is not None:
            _at_least("simulated OOM batch", self.simulate_oom_from_batch, 1)

    def with_changes(self, **changes: Any) -> RunConfig:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        """One line of JSON; :meth:`from_json` reads it back."""
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        """Read :meth:`to_json`'s output; unknown keys are ignored (newer senders).

        Raises:
            ConfigError: when ``text`` is not a JSON object of config fields.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"run config is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError("run config is not a JSON object")
        known = {field.name for field in dataclasses.fields(cls)}
        try:
            return cls(**{key: value for key, value in data.items() if key in known})
        except TypeError as exc:
            raise ConfigError(f"run config is incomplete: {exc}") from None


def _at_least(name: str, value: object, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{name} must be a whole number of at least {least}, got {value!r}")


def _one_of(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} {value!r} is not one of {', '.join(choices)}")
