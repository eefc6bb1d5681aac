"""SVG snapshots of the runner pane's states: idle, running, finished, error.

Deterministic: the trainer is a scripted stand-in that hands out a fixed event stream
(tests/ui/runner_fakes.py); the real trainer is exercised in test_ui_runner.py.
Regenerate with ``--snapshot-update`` and look at the SVGs before committing them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Select

from gputui.jobs.config import RunConfig
from gputui.jobs.events import Error, Event, RanksStarted
from gputui.jobs.results import Phase
from gputui.telemetry.readings import GpuProcess
from gputui.ui.app import MonitorApp
from tests.ui.fakes import (
    GiB,
    ScriptedSampler,
    fake_app,
    gpu_reading,
    nvml_reading,
    seeded_history,
    settled,
    wait_until,
)
from tests.ui.runner_fakes import run_events, scripted_setup

SMALL = (80, 24)
LARGE = (160, 50)

OOM = Error(
    message="out of memory on cuda:0 at batch 4096: try batch 1024",
    detail=(
        "Traceback (most recent call last):\n"
        '  File "gputui/training/trainer.py", line 212, in train_epoch\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB."
    ),
    kind="oom",
    suggested_batch_size=1024,
)


TRAINER_ON_GPU0 = nvml_reading(
    [
        gpu_reading(
            0,
            processes=(
                GpuProcess(40_321, "ada", "python -m gputui.engine train", int(1.3 * GiB)),
                GpuProcess(41_000, "ada", "python train.py --model vit-h/14", 60 * GiB),
            ),
        ),
        gpu_reading(1),
    ]
)
"""Two H100s; the scripted trainer (pid 40321) runs on GPU 0."""


def app_with(script: Callable[[RunConfig], list[Event]], nvml: object = None) -> MonitorApp:
    return fake_app(
        history=seeded_history(2),
        runner=scripted_setup(script),
        nvml=ScriptedSampler(nvml or TRAINER_ON_GPU0),
    )


def pressing(key: str, phase: Phase) -> Callable[[Pilot[object]], Awaitable[None]]:
    """Settle the monitor, press ``key`` and wait until the session reaches ``phase``."""

    async def run_before(pilot: Pilot[object]) -> None:
        await settled(pilot)
        app = pilot.app
        assert isinstance(app, MonitorApp)
        pane = app.runner
        if pane.region.width:  # shown beside the monitor: it lists the devices when first shown
            await wait_until(pilot, lambda: bool(pane.devices))
        await pilot.press(key)
        await wait_until(pilot, lambda: bool(pane.devices))

        def reached() -> bool:
            session = pane.session
            return session is not None and session.phase is phase and pane.events_seen > 0

        await wait_until(pilot, reached)
        await pilot.pause()

    return run_before


def second_run_in_flight(config: RunConfig) -> list[Event]:
    """The CPU run finishes; the GPU run is half-way through epoch 2."""
    if config.device == "cpu":
        return run_events(config, pid=40_100)
    return run_events(config, upto_epoch=1, progress_step=97)


async def idle(pilot: Pilot[object]) -> None:
    await settled(pilot)
    app = pilot.app
    assert isinstance(app, MonitorApp)
    await wait_until(pilot, lambda: bool(app.runner.devices))
    await pilot.pause()


def test_runner_idle_160x50(snap_compare: Any) -> None:
    assert snap_compare(app_with(run_events), terminal_size=LARGE, run_before=idle)


def test_runner_comparison_running_160x50(snap_compare: Any) -> None:
    assert snap_compare(
        app_with(second_run_in_flight),
        terminal_size=LARGE,
        run_before=pressing("c", Phase.RUNNING),
    )


def test_runner_comparison_finished_160x50(snap_compare: Any) -> None:
    assert snap_compare(
        app_with(run_events), terminal_size=LARGE, run_before=pressing("c", Phase.FINISHED)
    )


def test_runner_finished_80x24(snap_compare: Any) -> None:
    """Narrow: pressing r shows the runner in place of the monitor."""
    assert snap_compare(
        app_with(run_events), terminal_size=SMALL, run_before=pressing("r", Phase.FINISHED)
    )


def test_runner_error_160x50(snap_compare: Any) -> None:
    def failing(config: RunConfig) -> list[Event]:
        return run_events(config, error=OOM)

    async def run_before(pilot: Pilot[object]) -> None:
        await pressing("r", Phase.FAILED)(pilot)
        await pilot.press("e")
        await pilot.pause()

    assert snap_compare(app_with(failing), terminal_size=LARGE, run_before=run_before)


def test_runner_experiment_160x50(snap_compare: Any) -> None:
    """Issue 6 in the pane: a (scripted) sync-stall experiment on cpu and cuda:0."""

    async def run_before(pilot: Pilot[object]) -> None:
        await settled(pilot)
        app = pilot.app
        assert isinstance(app, MonitorApp)
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        pane.query_one("#runner-experiment", Select).value = "sync-stall"
        await pilot.press("x")
        await wait_until(pilot, lambda: not pane.busy and pane.events_seen > 0)
        await pilot.pause()

    assert snap_compare(app_with(run_events), terminal_size=LARGE, run_before=run_before)


def test_runner_scaling_160x50(snap_compare: Any) -> None:
    """Issue 15 in the pane: weak scaling over 1 and 2 GPUs, the 2-rank run half-way through
    epoch 2 (scripted: the dialog's answer is given to the pane directly)."""

    def two_ranks_in_flight(config: RunConfig) -> list[Event]:
        if getattr(config, "world_size", 1) == 1:
            return run_events(config, pid=40_100)
        return [RanksStarted((40_200, 40_201)), *run_events(config, upto_epoch=1, progress_step=97)]

    async def run_before(pilot: Pilot[object]) -> None:
        await settled(pilot)
        app = pilot.app
        assert isinstance(app, MonitorApp)
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        assert pane.start_scaling((1, 2), "weak")
        await wait_until(pilot, lambda: pane.session is not None and len(pane.session.runs) == 2)
        await wait_until(pilot, lambda: pane.session.runs[1].progress is not None)  # type: ignore[union-attr]
        await pilot.pause()

    assert snap_compare(app_with(two_ranks_in_flight), terminal_size=LARGE, run_before=run_before)
