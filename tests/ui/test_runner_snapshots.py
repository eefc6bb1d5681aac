"""SVG snapshots of the runner pane's states: idle, running, finished, stopped, failed.

Deterministic: the pane replays event streams recorded from the real trainer on this
machine's CPU (tests/ui/streams), all at once, without real time. Only the comparison
with a GPU plays a typed stream (tests/ui/runner_fakes.py): it is not recordable here.
Regenerate with ``--snapshot-update`` and look at the SVGs before committing them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Select

from gputui.jobs.config import RunConfig
from gputui.jobs.events import Event
from gputui.jobs.results import Phase
from gputui.jobs.runner import RunnerSetup
from gputui.telemetry.readings import GpuProcess
from gputui.ui.monitor.app import MonitorApp
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
from tests.ui.runner_fakes import DEVICES, gpu_run_events, scripted_setup
from tests.ui.streams.replay import in_flight, replayed_setup
from tests.ui.streams.scenarios import RECORDED

SMALL = (80, 24)
MEDIUM = (120, 40)
LARGE = (160, 50)

ANOTHER_JOB = GpuProcess(41_000, "ada", "python train.py --model vit-h/14", 60 * GiB)
"""Someone else's training on GPU 0."""

TRAINER_ON_GPU0 = nvml_reading(
    [
        gpu_reading(
            0,
            processes=(
                GpuProcess(40_321, "ada", "python -m gputui.engine train", int(1.3 * GiB)),
                ANOTHER_JOB,
            ),
        ),
        gpu_reading(1),
    ]
)
"""Two H100s; the scripted trainer (pid 40321) runs on GPU 0."""

TRAINER_ON_THE_CPU = nvml_reading([gpu_reading(0, processes=(ANOTHER_JOB,)), gpu_reading(1)])
"""Two H100s this CPU-only torch cannot use; the recorded trainer ran on the CPU."""


def app_with(runner: RunnerSetup, nvml: object = None) -> MonitorApp:
    return fake_app(
        history=seeded_history(2),
        runner=runner,
        nvml=ScriptedSampler(nvml or TRAINER_ON_THE_CPU),
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
            return session is not None and session.phase is phase and pane.runner.events_seen > 0

        await wait_until(pilot, reached)
        await pilot.pause()

    return run_before


def back_to_the_monitor(key: str, phase: Phase) -> Callable[[Pilot[object]], Awaitable[None]]:
    """As :func:`pressing` (on a narrow screen the runner shows in place of the monitor), then
    ``t``: the monitor again, the runner's brief under it."""

    async def run_before(pilot: Pilot[object]) -> None:
        await pressing(key, phase)(pilot)
        await pilot.press("t")
        await pilot.pause()

    return run_before


def second_run_in_flight(index: int, events: list[Event]) -> list[Event]:
    """The first CPU run has finished; the second is half-way through epoch 2."""
    return events if index == 0 else in_flight(events, epoch=2, step=8)


async def idle(pilot: Pilot[object]) -> None:
    await settled(pilot)
    app = pilot.app
    assert isinstance(app, MonitorApp)
    await wait_until(pilot, lambda: bool(app.runner.devices))
    await pilot.pause()


def test_runner_idle_160x50(snap_compare: Any) -> None:
    assert snap_compare(app_with(replayed_setup("cpu_run")), terminal_size=LARGE, run_before=idle)


def test_runner_comparison_running_160x50(snap_compare: Any) -> None:
    assert snap_compare(
        app_with(replayed_setup("cpu_vs_cpu", cut=second_run_in_flight)),
        terminal_size=LARGE,
        run_before=pressing("c", Phase.RUNNING),
    )


def test_runner_comparison_finished_160x50(snap_compare: Any) -> None:
    assert snap_compare(
        app_with(replayed_setup("cpu_vs_cpu")),
        terminal_size=LARGE,
        run_before=pressing("c", Phase.FINISHED),
    )


def test_runner_comparison_with_a_gpu_finished_160x50(snap_compare: Any) -> None:
    """NOT RECORDABLE WITHOUT A GPU: the recorded CPU run against a typed run on cuda:0."""

    def on_gpu(config: RunConfig) -> list[Event]:
        return gpu_run_events(config)

    runner = scripted_setup(on_gpu, devices=DEVICES, defaults=RECORDED)
    assert snap_compare(
        app_with(runner, TRAINER_ON_GPU0),
        terminal_size=LARGE,
        run_before=pressing("c", Phase.FINISHED),
    )


def test_runner_finished_80x24(snap_compare: Any) -> None:
    """Narrow: pressing r shows the runner in place of the monitor."""
    assert snap_compare(
        app_with(replayed_setup("cpu_run")),
        terminal_size=SMALL,
        run_before=pressing("r", Phase.FINISHED),
    )


def test_runner_brief_comparison_finished_120x40(snap_compare: Any) -> None:
    """The monitor, the runner's brief under it: its state, the speedup, each run's
    throughput; the GPU panel says this CPU-only torch cannot use the two H100s."""
    assert snap_compare(
        app_with(replayed_setup("cpu_vs_cpu")),
        terminal_size=MEDIUM,
        run_before=back_to_the_monitor("c", Phase.FINISHED),
    )


def test_runner_brief_comparison_running_80x24(snap_compare: Any) -> None:
    """The monitor, the runner's brief in one line: the run in flight and its figure."""
    assert snap_compare(
        app_with(replayed_setup("cpu_vs_cpu", cut=second_run_in_flight)),
        terminal_size=SMALL,
        run_before=back_to_the_monitor("c", Phase.RUNNING),
    )


def test_runner_stopped_160x50(snap_compare: Any) -> None:
    """A run stopped (SIGTERM, as s sends) once its first epoch had finished."""
    assert snap_compare(
        app_with(replayed_setup("cpu_stopped")),
        terminal_size=LARGE,
        run_before=pressing("r", Phase.STOPPED),
    )


def test_runner_error_160x50(snap_compare: Any) -> None:
    """A trainer SIGKILLed after its first epoch (as the OOM killer does), its detail shown."""

    async def run_before(pilot: Pilot[object]) -> None:
        await pressing("r", Phase.FAILED)(pilot)
        await pilot.press("e")
        await pilot.pause()

    assert snap_compare(
        app_with(replayed_setup("cpu_killed")), terminal_size=LARGE, run_before=run_before
    )


def test_runner_experiment_160x50(snap_compare: Any) -> None:
    """Issue 6 in the pane: a sync-stall experiment on the CPU (baseline and chosen)."""

    async def run_before(pilot: Pilot[object]) -> None:
        await settled(pilot)
        app = pilot.app
        assert isinstance(app, MonitorApp)
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        pane.query_one("#runner-experiment", Select).value = "sync-stall"
        await pilot.press("x")
        await wait_until(pilot, lambda: not pane.busy and pane.runner.events_seen > 0)
        await pilot.pause()

    assert snap_compare(
        app_with(replayed_setup("sync_stall_cpu")), terminal_size=LARGE, run_before=run_before
    )


def test_runner_scaling_160x50(snap_compare: Any) -> None:
    """Issue 15 in the pane: weak scaling over 1 and 2 CPU ranks, the 2-rank run half-way
    through epoch 2 (the dialog's answer is given to the pane directly)."""

    def two_ranks_in_flight(index: int, events: list[Event]) -> list[Event]:
        return events if index == 0 else in_flight(events, epoch=2, step=4)

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

    runner = replayed_setup("cpu_scaling", cut=two_ranks_in_flight)
    assert snap_compare(app_with(runner), terminal_size=LARGE, run_before=run_before)
