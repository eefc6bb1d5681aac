"""``gputui bench``'s runs: each device in each precision in turn, each an engine child of
its own, or one rank of a job torchrun started. Ctrl+C stops the run in hand after its
current step (a second one at once); the runs after it are kept as never begun.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

from gputui.device import Device
from gputui.format import fmt_counted, one_line
from gputui.jobs.bench.report import ProgressLine
from gputui.jobs.config import ConfigError, DeviceQuery, RunConfig
from gputui.jobs.events import DevicesListed, Error, Event, Note
from gputui.jobs.interrupt import AgentWatch, CtrlC
from gputui.jobs.process import ChildProcess, list_devices
from gputui.jobs.results import RunRecord
from gputui.jobs.world import World

PROG = "gputui bench"


@dataclass
class BenchOutcome:
    """What came of a bench: its runs, in order, and how it ended."""

    runs: list[RunRecord] = field(default_factory=list)
    """Every run asked for, those stopped or never begun included."""
    warnings: list[str] = field(default_factory=list)
    """What was said on standard error before the runs began, a line each."""
    failure: str | None = None
    """Why nothing ran: torch could not even list the devices."""
    interrupted: bool = False
    """Ctrl+C stopped it."""
    lost_agent_pid: int | None = None
    """A rank's torchrun agent, gone while the rank trained (the rank then stopped)."""

    @property
    def data_error(self) -> Error | None:
        """The error of a run that could not have its data (the same for every device)."""
        return next((run.error for run in self.runs if _is_data_error(run.error)), None)

    @property
    def ok(self) -> bool:
        """Whether every run finished."""
        return all(run.status == "ok" for run in self.runs)


def run_bench(
    base: RunConfig,
    requested: Sequence[Device],
    precisions: Sequence[str],
    unused_gpus: Callable[[DevicesListed], str | None],
) -> BenchOutcome:
    """Train ``base`` on each device in each precision, in turn.

    Args:
        base: The config every run shares (its device and precision are replaced).
        requested: The devices named, in order (one named twice trains twice); none: cpu
            and every usable accelerator. One is checked by its trainer; several, or
            none, are first checked by a child that lists them.
        precisions: The precisions each device trains in, in order.
        unused_gpus: The warning, if any, when the driver reports NVIDIA GPUs that this
            torch (as listed) can use none of (:func:`unused_gpus_warning`); asked only
            for the default devices.

    Raises:
        ConfigError: a device or config the engine refused: bad input, and nothing to show.
    """
    child_checks = len(requested) == 1  # the trainer checks it: no child to list devices
    warnings: list[str] = []
    if child_checks:
        devices = list(requested)
    else:
        listed = list_devices(DeviceQuery(check=tuple(dict.fromkeys(requested))))
        if isinstance(listed, Error) and listed.kind in {"config", "device"}:
            raise ConfigError(listed.message)  # a device that cannot be used: bad input
        if isinstance(listed, Error):  # torch would not even list them: nothing can run
            return BenchOutcome(failure=listed.message)
        devices = list(requested) or list(listed.chosen)  # each trainer spells its own
        # the default set: say so when it leaves NVIDIA GPUs out
        if not requested and (warning := unused_gpus(listed)) is not None:
            warnings.append(warning)
            sys.stderr.write(one_line(f"{PROG}: warning: {warning}") + "\n")

    progress = ProgressLine(sys.stderr)
    runs: list[RunRecord] = []
    config = base
    with CtrlC() as ctrl_c:
        for device, precision in itertools.product(devices, precisions):
            wanted = config.with_changes(device=device, precision=precision)
            if ctrl_c.pressed:  # the runs after the one stopped: stopped before they began
                runs.append(RunRecord(wanted))
                continue
            run = _run_one(wanted, progress, child_checks, ctrl_c)
            if _is_usage_error(run.error, child_checks):
                raise ConfigError(run.error.message)
            runs.append(run)
            if _is_data_error(run.error):
                break  # the same data fails on every device
            if run.started is not None:  # every device trains on the data the first one got
                config = config.with_changes(dataset=run.started.dataset)
    return BenchOutcome(runs, warnings, interrupted=bool(ctrl_c.pressed))


def run_rank(config: RunConfig, world: World) -> BenchOutcome:
    """Train ``config`` as one rank of a job torchrun started: rank 0 shows the progress,
    the others their notes alone; a rank whose torchrun agent goes stops.

    Raises:
        ConfigError: the trainer refused the config or the device.
    """
    progress = ProgressLine(sys.stderr) if world.leader else RankNotes(world.rank)
    agent = AgentWatch() if AgentWatch.wanted(os.environ) else None
    with CtrlC() as ctrl_c, agent or contextlib.nullcontext():
        run = _run_one(config, progress, True, ctrl_c, agent)
    if agent is not None and agent.gone:  # nobody is left to read the result
        return BenchOutcome([run], lost_agent_pid=agent.agent_pid)
    if _is_usage_error(run.error, True):
        raise ConfigError(run.error.message)
    return BenchOutcome([run], interrupted=bool(ctrl_c.pressed))


class RankNotes:
    """What a rank other than 0 shows while it runs: its notes alone, a line each on
    standard error (rank 0 shows the progress for the job)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def show(self, config: RunConfig, event: Event) -> None:
        if isinstance(event, Note):
            sys.stderr.write(one_line(f"{PROG}: rank {self.rank}: note: {event.message}") + "\n")
            sys.stderr.flush()

    def end(self) -> None:
        pass


def unused_gpus_warning(listed: DevicesListed, gpu_count: int | None) -> str | None:
    """One line when NVML reports NVIDIA GPUs but the child's torch chose none of them
    (a CPU-only build, or a driver it cannot run on); ``None`` otherwise."""
    if not gpu_count or any(device.kind == "cuda" for device in listed.chosen):
        return None
    them = "it" if gpu_count == 1 else "them"
    return (
        f"NVML reports {fmt_counted(gpu_count, 'NVIDIA GPU')}, but this torch "
        f"{listed.torch_version} cannot use {them}: benching {', '.join(map(str, listed.chosen))} "
        "only; `gputui doctor` says why and how to fix it"
    )


def _is_usage_error(error: Error | None, child_checks: bool) -> TypeGuard[Error]:
    """Whether the trainer refused the input (a usage error: exit 2, one line).

    A config it refuses (a batch larger than the data) is bad input on any device.
    A device it refuses is bad input when the trainer was the one to check the device
    (``child_checks``: one ``--device``); with several, they were checked first.
    """
    if error is None:
        return False
    return error.kind == "config" or (child_checks and error.kind == "device")


def _is_data_error(error: Error | None) -> TypeGuard[Error]:
    """Whether the run failed for its data (CIFAR-10 asked for and not to be had): the
    same on every device, so it is said once, not as a device's failure."""
    return error is not None and error.kind == "data"


def _run_one(
    config: RunConfig,
    progress: ProgressLine | RankNotes,
    child_checks: bool,
    ctrl_c: CtrlC,
    agent: AgentWatch | None = None,
) -> RunRecord:
    """Train one run, showing its progress; ``agent``, a rank's launcher, stops it when it
    goes."""
    run = RunRecord(config)
    trainer = ctrl_c.watch(ChildProcess(config).start())
    if agent is not None:
        agent.watch(trainer)
    try:
        for event in trainer.events():
            run.absorb(event)
            if not (
                isinstance(event, Error)
                and (_is_usage_error(event, child_checks) or _is_data_error(event))
            ):
                progress.show(config, event)  # these errors become the one line instead
    finally:
        trainer.stop()
        progress.end()
    return run
