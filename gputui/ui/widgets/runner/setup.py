"""Where the runner pane gets its child processes, its device list and its starting config.

Production uses the defaults (real children); tests inject scripted ones through
:class:`RunnerSetup`, so the pane never knows which it drives. A job beside the live
monitor leaves a core spare and runs at a lower priority (:func:`ui_friendly`);
``GPUTUI_RUNNER_DEFAULTS`` changes where the pane starts (:func:`runner_setup`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from gputui.jobs.config import (
    ConfigError,
    ExperimentConfig,
    JobConfig,
    RunConfig,
    available_cores,
)

if TYPE_CHECKING:  # loaded once the pane is built (see the pane module's docstring)
    from gputui.jobs.events import DevicesListed, Error, Event

J = TypeVar("J", bound=JobConfig)

UI_NICE = 10
"""Niceness of a job started beside the live monitor, so the screen stays responsive."""
RUNNER_DEFAULTS_ENV = "GPUTUI_RUNNER_DEFAULTS"
"""Environment variable: a JSON object of :class:`RunConfig` fields the runner pane starts
from (e.g. ``{"dataset": "synthetic", "limit": 256, "epochs": 1, "threads": 1}``)."""


def ui_friendly_threads() -> int:
    """Threads for CPU work beside a live UI: every core but one, at least 1."""
    return max(1, available_cores() - 1)


def ui_friendly(config: J) -> J:
    """``config`` as a job beside the live monitor runs it: a core spare, lower priority."""
    return config.with_changes(threads=ui_friendly_threads(), nice=UI_NICE)


def runner_defaults(environ: Mapping[str, str]) -> RunConfig:
    """The runner pane's starting config: a run beside the monitor (:func:`ui_friendly`),
    changed by ``GPUTUI_RUNNER_DEFAULTS``. Its device is parsed here; whether it is here
    needs torch (``gputui`` asks a child before the app starts).

    Raises:
        ConfigError: naming the variable, when it is not a JSON object of known, valid fields.
    """
    config = ui_friendly(RunConfig())
    text = environ.get(RUNNER_DEFAULTS_ENV)
    if not text:
        return config
    config = config.changed_by_json(text, RUNNER_DEFAULTS_ENV)
    try:
        config.validate()
    except ConfigError as exc:
        raise ConfigError(f"{RUNNER_DEFAULTS_ENV}: {exc}") from None
    return config


class JobHandle(Protocol):
    """What the pane needs of a job's child process: a trainer or an experiment (the real
    one, or a scripted one in tests)."""

    @property
    def pid(self) -> int | None:
        """The child's process id."""
        ...

    def start(self) -> JobHandle:
        """Start the run."""
        ...

    def drain(self) -> list[Event]:
        """Every event received so far, without waiting."""
        ...

    def stop(self, *, wait: bool = True) -> None:
        """Stop the run."""
        ...


def _real_child(config: RunConfig | ExperimentConfig) -> JobHandle:
    from gputui.jobs.process import ChildProcess

    return ChildProcess(config)


def _real_devices() -> DevicesListed | Error:
    from gputui.jobs.process import list_devices

    return list_devices()


@dataclass(frozen=True)
class RunnerSetup:
    """Where the pane gets its trainers and devices; production uses the defaults."""

    trainer: Callable[[RunConfig], JobHandle] = _real_child
    """Builds a (not yet started) trainer for a config."""
    experiment: Callable[[ExperimentConfig], JobHandle] = _real_child
    """Builds a (not yet started) experiment process (issue 6's experiments)."""
    list_devices: Callable[[], DevicesListed | Error] = _real_devices
    """Lists the candidate devices (blocking; called from a thread worker)."""
    defaults: RunConfig = field(default_factory=lambda: ui_friendly(RunConfig()))
    """The config the pane's choices start from (a core spare, a lower priority); ``gputui``
    reads it from ``GPUTUI_RUNNER_DEFAULTS`` (:func:`runner_defaults`)."""
    device_named: bool = False
    """Whether ``defaults`` names its device on purpose (``GPUTUI_RUNNER_DEFAULTS`` did): the
    pane then chooses it; else the first usable accelerator, as the runner is for GPUs."""
    drain_interval_s: float = 0.1
    """How often the pane drains the trainer's events."""
    experiment_budget_s: float = 2.0
    """About how long each measurement of an experiment may take."""
    watch_interval_s: float = 1.0
    """How often the pane reads the trainer process's CPU use (psutil)."""
    cores: int = field(default_factory=available_cores)
    """The CPU cores the jobs may use (this process's), against which the views say how
    many threads a CPU run had, and whether ranks are oversubscribed."""


def runner_setup(environ: Mapping[str, str]) -> RunnerSetup:
    """The real runner, its choices starting from :func:`runner_defaults`. A device that
    ``GPUTUI_RUNNER_DEFAULTS`` names is the one chosen once the devices are listed, the CPU
    beside a GPU included.

    Raises:
        ConfigError: as :func:`runner_defaults` does.
    """
    defaults = runner_defaults(environ)
    named = "device" in json.loads(environ.get(RUNNER_DEFAULTS_ENV) or "{}")
    return RunnerSetup(defaults=defaults, device_named=named)
