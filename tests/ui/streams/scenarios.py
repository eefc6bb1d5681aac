"""The scenarios recorded from the real trainer for the UI's tests and screenshots.

Each scenario is what the runner pane would start with :data:`RECORDED` as its defaults on
this CPU-only machine: the configs are built the way the pane builds them, so a replay can
insist that the pane asks for exactly what was recorded. Torch-free: the replay and the
tests import this module; only :mod:`.record` starts children.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputui.device import CPU
from gputui.jobs.config import ExperimentConfig, RunConfig, sweep_sizes
from gputui.jobs.runner import UI_NICE
from gputui.jobs.scale.plan import scaling_configs

RECORDED = RunConfig(
    nice=UI_NICE,
    device=CPU,
    epochs=3,
    batch_size=64,
    dataset="synthetic",
    limit=1024,
    test_limit=256,
    threads=1,
    record=False,
    progress_interval_s=0.001,
)
"""A real run of a few seconds here: 16 steps an epoch, a progress read after nearly each
one (so a replay can stop part-way through an epoch), epoch 1 the warm-up and 2 and 3
steady. One thread: the machine's other core is left to the tests beside it."""

RECORDED_CORES = 2
"""The cores of the machine the recordings are made on (:data:`RECORDED`'s one thread
leaves the other to the tests): a replayed pane's, so that what its views say of the CPU's
threads is the same on every machine."""

EXPERIMENT_BUDGET_S = 0.2
"""The pane's ``experiment_budget_s`` for the recorded experiment."""


def experiment_config(experiment: str, defaults: RunConfig = RECORDED) -> ExperimentConfig:
    """The experiment the pane starts from ``defaults`` on the CPU alone (its baseline and
    its chosen device are both ``cpu``), built as ``RunnerPane.start_experiment`` builds it."""
    return ExperimentConfig(
        **defaults.job_settings(),
        experiment=experiment,
        devices=(CPU,),
        batch_size=defaults.batch_size,
        batch_sizes=sweep_sizes(defaults.limit),
        budget_s=EXPERIMENT_BUDGET_S,
    )


@dataclass(frozen=True)
class Scenario:
    """One recording: the jobs the pane starts in turn, and how the last one ends."""

    name: str
    """The recording's file name, without ``.jsonl``."""
    configs: tuple[RunConfig | ExperimentConfig, ...]
    """The jobs, in the order the pane starts them (a comparison: baseline first)."""
    ending: str = "finish"
    """``finish`` (run to the end), ``stop`` (stopped once epoch 1 has finished, as ``s``
    does), ``kill`` (SIGKILLed once epoch 1 has finished, as the kernel's OOM killer
    does) or ``data`` (it fails for its data before it starts): how the last job ends."""


CIFAR10_NOT_HERE = RECORDED.with_changes(dataset="cifar10", data_dir="/tmp", download=False)
"""CIFAR-10 asked for by name, from a folder every machine has and none holds it in, with
downloading off (``GPUTUI_RUNNER_DEFAULTS``'s ``"download": false``): the run fails at once."""

DEVICES = "devices"
"""The recording of this machine's device listing (one ``DevicesListed``)."""

SCENARIOS = (
    Scenario("cpu_run", (RECORDED,)),
    Scenario("cpu_one_epoch", (RECORDED.with_changes(epochs=1),)),
    Scenario("cpu_vs_cpu", (RECORDED, RECORDED)),
    Scenario("cpu_stopped", (RECORDED,), ending="stop"),
    Scenario("cpu_killed", (RECORDED,), ending="kill"),
    Scenario("cpu_scaling", tuple(scaling_configs(RECORDED, (1, 2), "weak"))),
    Scenario("sync_stall_cpu", (experiment_config("sync-stall"),)),
    Scenario("cifar10_not_here", (CIFAR10_NOT_HERE,), ending="data"),
)
"""Every stream this machine can record; what needs a GPU is typed in runner_fakes.py."""

BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}
"""The scenarios by name."""
