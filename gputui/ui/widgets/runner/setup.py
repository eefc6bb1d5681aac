"""Where the runner pane gets its child processes and its device list.

Production uses the defaults (real children); tests inject scripted ones through
:class:`RunnerSetup`, so the pane never knows which it drives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from gputui.jobs.config import ExperimentConfig, RunConfig, available_cores, ui_friendly

if TYPE_CHECKING:  # loaded once the pane is built (see the pane module's docstring)
    from gputui.jobs.events import DevicesListed, Error, Event


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
    reads it from ``GPUTUI_RUNNER_DEFAULTS`` (:func:`~gputui.jobs.config.runner_defaults`)."""
    drain_interval_s: float = 0.1
    """How often the pane drains the trainer's events."""
    experiment_budget_s: float = 2.0
    """About how long each measurement of an experiment may take."""
    watch_interval_s: float = 1.0
    """How often the pane reads the trainer process's CPU use (psutil)."""
    cores: int = field(default_factory=available_cores)
    """The CPU cores the jobs may use (this process's), against which the views say how
    many threads a CPU run had, and whether ranks are oversubscribed."""
