"""The runner pane with a REAL trainer: tiny CPU runs through ChildProcess, seen in the app.

Each run is synthetic data, a few hundred images, batch 32, one torch thread, no run
folder. The monitor's samplers are fakes (they are not what is under test here).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from textual.pilot import Pilot

from gputui.commands import checked_runner_setup
from gputui.device import CPU, Device
from gputui.format import fmt_bytes, fmt_times
from gputui.jobs.bench.report import render_table
from gputui.jobs.config import ConfigError, ExperimentConfig, RunConfig
from gputui.jobs.events import DevicesListed, Error, Event, Finished, RunStarted
from gputui.jobs.process import DEFAULT_GRACE_S, ChildProcess
from gputui.jobs.results import Phase, Session
from gputui.jobs.runner import RunnerSetup, runner_defaults, runner_setup, ui_friendly
from gputui.ui.monitor.app import MonitorApp
from gputui.ui.render.draw import Line
from gputui.ui.widgets.process_table import ProcessTable
from gputui.ui.widgets.runner.pane import RunnerPane
from tests.engine.limited import LIMITED, OOM_BATCH
from tests.ui.fakes import fake_app, screen_text, wait_until
from tests.ui.runner_fakes import TINY_RUN
from tests.ui.streams.replay import (
    RECORDED_TORCH,
    Replay,
    ReplayedJob,
    devices,
    in_flight,
    replayed_setup,
)
from tests.ui.streams.scenarios import BY_NAME, RECORDED

pytestmark = [pytest.mark.timeout(120), pytest.mark.long_module]

TINY = TINY_RUN

RUN_TIMEOUT_S = 60.0
WIDE = (160, 50)
CHILD_POLL_S = 0.1
"""How often a wait on a real child looks. Its events are seconds apart, and each look walks
every widget of the app (a message to each): at :func:`wait_until`'s hundred a second, the
app spent more CPU waiting than a tiny run spends training."""


def gone_soon(pid: int, timeout_s: float = 2.0) -> bool:
    """Whether process ``pid`` is gone (reaped, not a zombie) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while psutil.pid_exists(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def rows(table: ProcessTable) -> tuple[Line, ...]:
    """The process table's rows as drawn (its heading left out)."""
    return table.lines[1:]


def real_app(
    defaults: RunConfig = TINY,
    python: list[str] | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    **monitor: Any,
) -> MonitorApp:
    """The app with fake samplers, this machine's device list as recorded and the REAL trainer
    (run by ``python``: by default this interpreter; SIGKILLed ``grace_s`` after a stop's
    SIGTERM if it has not ended by then).

    ``monitor`` goes to :func:`fake_app` (other samplers, an interval, a clock).
    """
    setup = RunnerSetup(
        trainer=functools.partial(ChildProcess, python=python, grace_s=grace_s),
        list_devices=devices,
        installed=lambda: RECORDED_TORCH,
        defaults=defaults,
        drain_interval_s=0.05,
    )
    return fake_app(runner=setup, **monitor)


async def wait_on_child(
    pilot: Pilot[Any], condition: Callable[[], bool], timeout_s: float = RUN_TIMEOUT_S
) -> None:
    """:func:`wait_until` for what a real child brings: ``condition`` looked at every
    :data:`CHILD_POLL_S`."""
    await wait_until(pilot, condition, timeout_s, every_s=CHILD_POLL_S)


async def train_once(pilot: Pilot[Any], pane: RunnerPane) -> Session:
    """Wait for the device list, press ``r``, and wait until the run has ended."""
    await wait_until(pilot, lambda: bool(pane.devices))
    await pilot.press("r")
    await wait_on_child(pilot, lambda: pane.session is not None and not pane.busy)
    assert pane.session is not None
    return pane.session


async def test_compare_cpu_with_cpu_shows_real_epochs_and_forms_a_speedup() -> None:
    """Two real runs (no accelerator here: compare runs the CPU twice, the same code path)."""
    app = real_app()
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        await pilot.press("c")
        assert pane.busy
        await wait_on_child(
            pilot, lambda: pane.session is not None and not pane.busy, 2 * RUN_TIMEOUT_S
        )
        session = pane.session
        assert session is not None and session.phase is Phase.FINISHED, session.runs[-1].error
        assert [run.device for run in session.runs] == [CPU, CPU]
        for run in session.runs:
            assert [epoch.epoch for epoch in run.epochs] == [1, 2]
            assert run.epochs[0].warmup and not run.epochs[1].warmup
            assert run.started is not None and run.started.nice == 10
            assert run.placement is not None and run.memory is not None
            assert gone_soon(run.started.pid)  # reaped by its owner thread's next poll
        result = session.speedup
        assert result is not None and result.steady is not None
        assert [epoch for epoch, _ in result.per_epoch] == [1, 2]
        assert 0.2 < result.steady < 5.0  # the same work twice: about 1x
        assert pane.trainer is None
        await pilot.pause()
        text = screen_text(app)
        assert "1 warm-up" in text
        assert "finished: cpu (baseline) 2 epochs, cpu 2 epochs" in text
        assert "Speedup of cpu over cpu (baseline)" in text
        assert "Placement on cpu" in text


async def compare_once(pilot: Pilot[Any], pane: RunnerPane) -> Session:
    """Wait for the device list, press ``c``, and wait until both runs have ended."""
    await wait_until(pilot, lambda: bool(pane.devices))
    await pilot.press("c")
    await wait_on_child(
        pilot, lambda: pane.session is not None and not pane.busy, 2 * RUN_TIMEOUT_S
    )
    assert pane.session is not None
    return pane.session


def speedup_line(app: MonitorApp) -> str:
    """The runner's speedup line as drawn, the rest of it that the pane wrapped joined on."""
    rows = screen_text(app).splitlines()
    first = next(index for index, row in enumerate(rows) if "Speedup of" in row)
    start = rows[first].index("Speedup of")  # the pane's left edge
    parts = [rows[first][start:].rstrip("│ ")]
    for row in rows[first + 1 :]:
        rest = row[start:].rstrip("│ ").strip()
        if not rest or rest.startswith("Per epoch"):
            break
        parts.append(rest)
    return " ".join(parts)


async def test_a_one_epoch_comparison_finishes_its_speedup_line_as_bench_does() -> None:
    """Two real one-epoch runs: the speedup comes from the only epoch, marked as including
    warm-up, and ``gputui bench``'s table (the same runs) says the same."""
    app = real_app(TINY.with_changes(epochs=1))
    async with app.run_test(size=WIDE) as pilot:
        session = await compare_once(pilot, app.runner)
        assert session.phase is Phase.FINISHED, session.runs[-1].error
        result = session.speedup
        assert result is not None and result.steady is not None
        assert result.steady_includes_warmup
        ratio = fmt_times(result.steady, precision=2)
        await pilot.pause()
        assert speedup_line(app) == (
            f"Speedup of cpu over cpu (baseline): {ratio} over the only epoch, warm-up included"
        )
        table = render_table(session.runs)
        rows = [row for row in table.splitlines() if row.startswith("cpu ") and row.endswith("x")]
        assert [row.split()[-1] for row in rows] == ["1.00x", ratio]
        assert "* only epoch 1 ran, so these include warm-up" in table


async def test_a_comparison_stopped_before_an_epoch_ends_says_it_has_no_speedup() -> None:
    """The second run stopped as soon as it starts: its child has seconds of torch to load
    before it can train a step, so its first epoch never ends, whatever the load (nor does
    it load them: SIGKILLed a moment after the SIGTERM). No figure is coming, so the line
    says ``n/a`` and why instead of ``forming…``. (A second run stopped mid-epoch, whose
    progress the stop clears: test_runner_render's recorded
    ``test_a_second_run_stopped_mid_epoch_leaves_no_figure_forming``.)"""
    app = real_app(TINY.with_changes(epochs=1), grace_s=0.2)
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        await pilot.press("c")

        def started() -> list[bool]:
            return [run.started is not None for run in pane.session.runs] if pane.session else []

        await wait_on_child(pilot, lambda: started()[:1] == [True])  # the baseline's torch is in
        await wait_until(pilot, lambda: len(started()) == 2, RUN_TIMEOUT_S)  # then the next child
        await pilot.press("s")
        await wait_on_child(pilot, lambda: not pane.busy)
        session = pane.session
        assert session is not None and session.phase is Phase.STOPPED
        assert len(session.runs[0].epochs) == 1 and not session.runs[1].epochs
        await pilot.pause()
        assert speedup_line(app) == (
            "Speedup of cpu over cpu (baseline): n/a (a run ended before its first epoch did)"
        )


async def test_a_failed_run_shows_one_line_and_the_detail_on_demand() -> None:
    """A real out-of-memory: the trainer's child under an address-space limit."""
    app = real_app(TINY.with_changes(batch_size=OOM_BATCH, limit=OOM_BATCH), LIMITED)
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        session = await train_once(pilot, pane)
        assert session.phase is Phase.FAILED
        error = session.runs[0].error
        assert isinstance(error, Error) and error.kind == "oom"
        await pilot.pause()
        text = screen_text(app)
        assert f"✗ cpu: out of memory on cpu at batch size {OOM_BATCH}" in text  # its line
        assert "(e: details)" in text
        assert not app.query_one("#runner-detail").display
        await pilot.press("e")
        assert app.query_one("#runner-detail").display
        assert app.monitor.is_attached  # the monitor keeps running
        assert app.handled["cpu"] >= 1


async def test_stop_ends_a_real_run() -> None:
    app = real_app(TINY.with_changes(limit=4096, epochs=5))
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        await pilot.press("r")

        def training() -> bool:
            run = pane.session.current if pane.session else None
            return run is not None and run.progress is not None

        await wait_on_child(pilot, training)
        pid = pane.trainer_pid
        assert pid is not None and psutil.pid_exists(pid)
        assert "epoch 1/5" in screen_text(app)
        await wait_on_child(pilot, lambda: pane.watched is not None)
        assert pane.watched is not None and pane.watched.pid == pid
        await wait_on_child(
            pilot, lambda: "trainer pid" in str(app.monitor.cpu_panel.border_subtitle), 5.0
        )
        assert f"pid {pid} · CPU" in screen_text(app)
        await pilot.press("s")
        await wait_on_child(pilot, lambda: not pane.busy)
        assert pane.session is not None and pane.session.phase is Phase.STOPPED
        finished = pane.session.runs[0].finished
        assert isinstance(finished, Finished) and finished.stopped
        assert finished.epochs_completed < 5
        await pilot.pause()
        text = screen_text(app)
        assert "■ stopped" in text
        progress_row = next(line for line in text.splitlines() if "━" in line and "%" in line)
        assert "100%" not in progress_row  # the bar stays where the run stopped
        run = pane.session.runs[0]
        last = run.last_progress
        assert last is not None
        share = round(100 * run.share_done)
        assert 0 < share < 100 and f" {share}%" in progress_row
        if last.epoch > len(run.epochs):
            where = f"in epoch {last.epoch}/5 · step {last.step}/{last.steps_per_epoch}"
        else:
            where = f"after epoch {len(run.epochs)}/5"
        assert f"cpu stopped {where}" in progress_row
        assert not psutil.pid_exists(pid)


async def test_an_unusable_device_is_refused_with_its_reason() -> None:
    """The choice greyed as the monitor sees it is refused once torch has said why."""
    app = real_app(TINY.with_changes(device=Device("cuda")))
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        pane.query_one("#runner-device").value = Device("cuda")  # type: ignore[attr-defined]
        await pilot.press("r")
        await wait_until(pilot, lambda: not pane.busy)
        assert pane.session is None and pane.trainer is None
        cuda = next(option for option in devices().devices if option.name == Device("cuda"))
        assert pane.runner.message == f"✗ cuda is unusable: {cuda.reason}"
        assert "cuda is unusable: this torch 2.13.0+cpu was built without CUDA" in screen_text(app)


async def test_the_placement_table_never_cuts_a_number_at_80x24() -> None:
    """The runner in place of the monitor at 80x24, after a real run (recorded: test_streams
    holds it to the trainer): every byte count of the placement table whole (a heading
    takes two lines instead)."""
    setup = replayed_setup("cpu_one_epoch", defaults=RECORDED.with_changes(epochs=1))
    app = fake_app(runner=setup)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("t")
        session = await train_once(pilot, app.runner)
        placement = session.runs[0].placement
        assert placement is not None
        app.query_one("#runner-scroll").scroll_end(animate=False)
        await pilot.pause()
        text = screen_text(app)
        for row in placement.rows:
            name = "total (Adam)" if row.kind == "param_group" else row.group
            line = next(line for line in text.splitlines() if f"│ {name} " in line)
            params = row.param_bytes + row.buffer_bytes
            total = fmt_bytes(params + row.state_bytes)
            assert fmt_bytes(params) in line and fmt_bytes(row.state_bytes) in line
            assert line.rstrip("│ ").endswith(total), line
            assert "…" not in line


async def test_narrow_screens_swap_monitor_and_runner() -> None:
    app = real_app()
    async with app.run_test(size=(80, 24)) as pilot:
        assert not app.runner.display or app.runner.region.width == 0
        await pilot.press("t")
        await pilot.pause()
        assert app.runner.region.width > 0 and app.monitor.region.width == 0
        await pilot.press("t")
        await pilot.pause()
        assert app.monitor.region.width > 0 and app.runner.region.width == 0


def test_defaults_come_from_the_environment() -> None:
    config = runner_defaults(
        {"GPUTUI_RUNNER_DEFAULTS": '{"dataset": "synthetic", "limit": 64, "batch_size": 32}'}
    )
    assert config.dataset == "synthetic" and config.limit == 64 and config.nice == 10
    with pytest.raises(ValueError, match="batch size 256 is larger than the 64 training images"):
        runner_defaults({"GPUTUI_RUNNER_DEFAULTS": '{"limit": 64}'})
    assert runner_defaults({}) == ui_friendly(RunConfig())
    with pytest.raises(ValueError, match="GPUTUI_RUNNER_DEFAULTS is not JSON"):
        runner_defaults({"GPUTUI_RUNNER_DEFAULTS": "{"})
    with pytest.raises(ValueError, match="batch size"):
        runner_defaults({"GPUTUI_RUNNER_DEFAULTS": '{"batch_size": 0}'})
    with pytest.raises(ValueError, match="epochs must be a whole number from 1 to 1000, got 1001"):
        runner_defaults({"GPUTUI_RUNNER_DEFAULTS": '{"epochs": 1001}'})
    assert runner_defaults({"GPUTUI_RUNNER_DEFAULTS": '{"num_workers": 0}'}).workers == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"epoch": 1}', "unknown key 'epoch' (did you mean 'epochs'?); known: batch_size, "),
        ('{"batchsize": 64}', "unknown key 'batchsize' (did you mean 'batch_size'?); known: "),
        ('{"epochs": 1, "lr": 0.1}', "unknown key 'lr'; known: batch_size, collective_timeout_s, "),
    ],
)
def test_an_unknown_key_in_the_defaults_is_refused(text: str, message: str) -> None:
    """``{"epoch": 1}`` was ignored: the pane trained 2 epochs, and nothing said why."""
    with pytest.raises(ConfigError) as caught:
        runner_defaults({"GPUTUI_RUNNER_DEFAULTS": text})
    assert str(caught.value).startswith(f"GPUTUI_RUNNER_DEFAULTS: {message}")
    assert str(caught.value).endswith(", threads, workers")  # every key, in order


def test_the_defaults_device_is_checked_by_a_child_and_spelled_as_torch_does() -> None:
    """``{"device": "cuda:7"}`` silently became cpu once the pane listed the devices."""
    with pytest.raises(ConfigError) as caught:
        checked_runner_setup({"GPUTUI_RUNNER_DEFAULTS": '{"device": "cuda:7"}'})
    assert str(caught.value).startswith("GPUTUI_RUNNER_DEFAULTS: cuda:7: ")
    assert "usable here: cpu" in str(caught.value)
    checked = checked_runner_setup({"GPUTUI_RUNNER_DEFAULTS": '{"device": "cpu:0"}'})
    assert checked.defaults.device == CPU and checked.device_named


async def test_the_trainer_is_highlighted_in_the_gpu_process_table() -> None:
    """Scripted trainer (pid 40321) that NVML lists on GPU 0."""
    from tests.ui.fakes import ScriptedSampler
    from tests.ui.runner_fakes import gpu_run_events, scripted_setup
    from tests.ui.test_runner_snapshots import TRAINER_ON_GPU0

    app = fake_app(  # NOT RECORDABLE WITHOUT A GPU: a trainer on cuda:0
        nvml=ScriptedSampler(TRAINER_ON_GPU0),
        runner=scripted_setup(lambda config: gpu_run_events(config, upto_epoch=1)),
    )
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        table = app.monitor.process_table
        await wait_until(pilot, lambda: bool(pane.devices) and bool(table.shown))
        await pilot.press("r")
        await wait_until(pilot, lambda: table.trainer_pid == 40_321)
        styles = {line.plain.split()[1]: {style for _, style in line.parts} for line in rows(table)}
        assert styles["40321"] == {"bold reverse"} and styles["41000"] == {""}
        await pilot.press("s")
        await wait_until(pilot, lambda: table.trainer_pid is None)
        assert all(line.styled() == [] for line in rows(table))


async def test_the_trainer_is_found_by_its_gpu_s_uuid_and_pid() -> None:
    """NVML lists pid 40321 on both GPUs (a pid namespace elsewhere reuses it): only the
    row on the trainer's GPU, named by UUID in RunStarted, is the trainer's."""
    from tests.ui.fakes import ScriptedSampler
    from tests.ui.runner_fakes import gpu_run_events, scripted_setup
    from tests.ui.test_runner_snapshots import TRAINER_ON_GPU0

    gpu0, gpu1 = TRAINER_ON_GPU0.gpus
    twin = dataclasses.replace(gpu0.processes[0], command="python other.py")
    reading = dataclasses.replace(
        TRAINER_ON_GPU0, gpus=(gpu0, dataclasses.replace(gpu1, processes=(twin,)))
    )

    def on_gpu1(config: RunConfig) -> list[Event]:  # NOT RECORDABLE WITHOUT A GPU
        return [
            dataclasses.replace(event, gpu_uuid=gpu1.uuid)
            if isinstance(event, RunStarted)
            else event
            for event in gpu_run_events(config, upto_epoch=1)
        ]

    app = fake_app(nvml=ScriptedSampler(reading), runner=scripted_setup(on_gpu1))
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        table = app.monitor.process_table
        await wait_until(pilot, lambda: bool(pane.devices) and len(table.shown) == 3)
        await pilot.press("r")
        await wait_until(pilot, lambda: table.trainer_gpu == gpu1.uuid)
        marked = [line.plain.split()[:2] for line in rows(table) if line.styled()]
        assert marked == [["1", "40321"]]


async def test_a_real_experiment_shows_its_table_and_sentence() -> None:
    """Issue 6 in the pane: sync-stall on the CPU (chosen and baseline: one device)."""
    app = fake_app(
        runner=RunnerSetup(
            list_devices=devices,
            defaults=TINY,
            drain_interval_s=0.05,
            experiment_budget_s=0.2,
        )
    )
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        pane.query_one("#runner-experiment").value = "sync-stall"  # type: ignore[attr-defined]
        await pilot.press("x")
        assert pane.busy
        await wait_on_child(pilot, lambda: pane.runner.experiment is not None)
        await wait_on_child(pilot, lambda: not pane.busy)
        result = pane.runner.experiment
        assert result is not None and result.error is None, result.error
        assert result.conclusion and result.conclusion.startswith("On cpu")
        rows = result.devices[CPU].rows
        assert {row.mode for row in rows} == {"every_step", "once"}  # type: ignore[attr-defined]
        await pilot.pause()
        text = screen_text(app)
        assert "experiment sync-stall finished" in text
        assert "every step" in text and "loss once" in text


@pytest.mark.parametrize("rows_in", [0, 1])
async def test_an_experiment_in_flight_is_running_not_stopped(rows_in: int) -> None:
    """Issue 26: while sync-stall runs (the recorded stream cut before its end), the view
    reads as running; it said "stopped: cpu after 0 rows" while the rows were coming."""

    def rows_so_far(index: int, events: list[Event]) -> list[Event]:
        return events[: 2 + rows_in]  # started, the device, then ``rows_in`` rows

    app = fake_app(runner=replayed_setup("sync_stall_cpu", cut=rows_so_far))
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        pane.query_one("#runner-experiment").value = "sync-stall"  # type: ignore[attr-defined]
        await pilot.press("x")
        await wait_until(pilot, lambda: pane.runner.events_seen == 2 + rows_in)
        await pilot.pause()
        text = screen_text(app)
        assert pane.experiment_running
        assert "experiment sync-stall" in text
        assert "stopped" not in text


async def test_the_pane_says_its_cpu_run_had_fewer_threads_than_bench() -> None:
    """Issue 26: the recorded run (1 thread) in a pane on 2 cores: the view says so."""
    app = fake_app(runner=replayed_setup("cpu_run"))
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        assert pane.runner.cores == 2
        await wait_until(pilot, lambda: bool(pane.devices))
        await pilot.press("r")
        await wait_until(pilot, lambda: pane.session is not None and not pane.busy)
        await pilot.pause()
        text = " ".join(screen_text(app).replace("│", " ").split())
        assert "note: the CPU ran here on 1 thread of this machine's 2 cores" in text


async def test_the_pane_s_batch_sweep_keeps_to_the_sizes_its_limit_holds() -> None:
    """Defaults with a limit (256 images): the sweep is 32 to 256. Batches larger than the
    data are refused (one rule with bench), so sizes up to 2048 would not start at all."""
    asked: list[ExperimentConfig] = []

    def experiment(config: ExperimentConfig) -> ReplayedJob:
        asked.append(config)
        return ReplayedJob(())  # only the config matters: a job that has said nothing yet

    setup = dataclasses.replace(replayed_setup("cpu_run", defaults=TINY), experiment=experiment)
    app = fake_app(runner=setup)
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        pane.query_one("#runner-experiment").value = "batch-sweep"  # type: ignore[attr-defined]
        await pilot.press("x")
        await wait_until(pilot, lambda: bool(asked))
        assert pane.runner.message is None, pane.runner.message
        assert [config.sizes for config in asked] == [(32, 64, 128, 256)]


async def test_the_runner_is_in_the_command_palette() -> None:
    app = fake_app()
    async with app.run_test(size=WIDE):
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert {"Train", "Compare", "Stop training", "Run experiment", "Toggle runner"} <= set(
            titles
        )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"epochs": 0}', "epochs must be a whole number from 1 to 1000, got 0"),
        ('{"epoch": 1}', "unknown key 'epoch' (did you mean 'epochs'?); known: batch_size, "),
        ('{"device": "cuda:7"}', "cuda:7: "),
    ],
)
def test_bad_runner_defaults_exit_2_with_one_line(text: str, message: str) -> None:
    """Refused as every usage error is, naming the variable, before the app starts."""
    import os
    import sys

    from tests.pty_run import run_on_a_pty

    env = {**os.environ, "GPUTUI_RUNNER_DEFAULTS": text}
    run = run_on_a_pty([sys.executable, "-m", "gputui"], env=env, timeout_s=60)
    assert run.returncode == 2
    [line] = run.shown.decode().strip().splitlines()
    assert line.startswith(f"gputui: error: GPUTUI_RUNNER_DEFAULTS: {message}"), line
    assert line.endswith(" (see 'gputui --help')"), line


async def test_w_scales_over_world_sizes_and_marks_the_ranks() -> None:
    """Issue 15: ``w`` asks for the world sizes, then runs a gloo job of each in turn (the
    real 1- and 2-rank jobs, recorded: ``test_streams`` holds them to the trainer); the bars
    fill per world size with speedup and efficiency, and the ranks are marked."""

    def two_ranks_in_flight(index: int, events: list[Event]) -> list[Event]:
        return events if index == 0 else in_flight(events, epoch=2, step=4)

    replay = Replay(BY_NAME["cpu_scaling"], cut=two_ranks_in_flight)
    app = fake_app(runner=dataclasses.replace(replayed_setup("cpu_scaling"), trainer=replay.job))
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        await pilot.press("w")
        await wait_until(pilot, lambda: app.screen.query("#scale-sizes"))
        field = app.screen.query_one("#scale-sizes")
        assert field.value == "1,2"  # type: ignore[attr-defined]
        field.value = "1,x"  # type: ignore[attr-defined]
        await pilot.press("enter")
        assert "not whole numbers of 1 to 64" in screen_text(app)  # said, and still asking
        field.value = "1,2"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(replay.jobs) == 2)
        await wait_until(pilot, lambda: len(app.monitor.process_table.rank_pids) == 2)
        marked = app.monitor.process_table.rank_pids  # both ranks marked while they run
        replay.jobs[1].release()
        await wait_until(pilot, lambda: pane.session is not None and not pane.busy)
        session = pane.session
        assert session is not None and session.scaling == "weak"
        assert session.phase is Phase.FINISHED, [run.error for run in session.runs]
        assert [len(run.rank_pids) for run in session.runs] == [1, 2]
        assert tuple(session.runs[1].rank_pids) == marked
        assert app.monitor.process_table.rank_pids == ()  # and unmarked once it ended
        await pilot.pause()
        text = screen_text(app)
        assert "scaling finished: 1, 2 ranks" in text
        assert "1.00x" in text and "weak scaling: every world size keeps" in " ".join(text.split())


@pytest.mark.parametrize("width", [60, 64, 70, 79, 80, 150])
async def test_the_controls_fit_the_pane_from_60_columns(width: int) -> None:
    """Issue 32: below 80 columns the buttons ran off the pane's edge (``Expe``); the
    experiment now goes on a row of its own there, and every control is whole."""
    app = fake_app(runner=replayed_setup("cpu_run"))
    async with app.run_test(size=(width, 30)) as pilot:
        pane = app.runner
        if width < 150:  # the runner takes the monitor's place
            await pilot.press("t")
        await wait_until(pilot, lambda: bool(pane.devices))
        inside = pane.content_region
        for widget in pane.query_one("#runner-controls").query("Label, Select, Button"):
            assert inside.contains_region(widget.region), (widget, widget.region, inside)
        text = screen_text(app)
        for label in ("Data synthetic", "Train r", "Compare c", "Stop s", "Experiment x"):
            assert label in text


@pytest.mark.parametrize(
    ("text", "chosen"),
    [
        ('{"device": "cpu"}', "cpu"),
        ('{"device": "cuda:1"}', "cuda:1"),
        ('{"device": "cuda"}', "cuda:0"),  # the user's cuda is the first GPU, as listed
        ('{"epochs": 1}', "cuda:0"),  # no device named: the first accelerator
        ("", "cuda:0"),
    ],
)
async def test_a_device_the_defaults_name_is_the_one_chosen(text: str, chosen: str) -> None:
    """Issue 32: ``GPUTUI_RUNNER_DEFAULTS={"device": "cpu"}`` beside two GPUs chose cuda:0."""
    from tests.ui.runner_fakes import scripted_setup

    setup = runner_setup({"GPUTUI_RUNNER_DEFAULTS": text})
    assert setup.device_named == ("device" in text)
    app = fake_app(  # NOT RECORDABLE WITHOUT A GPU: the listing of two H100s
        runner=dataclasses.replace(
            scripted_setup(defaults=setup.defaults), device_named=setup.device_named
        )
    )
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        assert str(pane.choices().device) == chosen


async def test_a_cifar10_run_without_the_download_says_what_to_do_in_the_pane() -> None:
    """Issue 32: the run's error said "allow the download", which the pane has no control
    for (downloading was off in ``GPUTUI_RUNNER_DEFAULTS``); it names the pane's own choice."""
    from tests.ui.streams.scenarios import CIFAR10_NOT_HERE

    setup = replayed_setup("cifar10_not_here", defaults=CIFAR10_NOT_HERE)
    app = fake_app(runner=setup)
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        session = await train_once(pilot, pane)
        error = session.runs[0].error
        assert error is not None and "allow the download" in error.message  # the engine's words
        await pilot.press("e")
        await pilot.pause()
        left, right = pane.region.x, pane.region.right
        rows = [row[left:right] for row in screen_text(app).splitlines()]
        text = " ".join(" ".join(rows).replace("│", " ").split())  # the pane's, lines joined
        said = (
            "CIFAR-10 is not in /tmp and downloading is off: choose the synthetic data set "
            "under Data, or save https://"
        )
        assert f"✗ cpu: {said}" in text  # the status line
        assert text.count(said) == 2  # and the detail
        assert "allow the download" not in text


async def test_e_on_a_failed_run_with_no_more_to_say_shows_its_line_alone() -> None:
    """Issue 43: a trainer SIGKILLed with nothing on its stderr (as recorded); ``e`` showed
    "(no detail)" under its line, which is all the failure has to show."""
    app = fake_app(runner=replayed_setup("cpu_killed"))
    async with app.run_test(size=WIDE) as pilot:
        session = await train_once(pilot, app.runner)
        error = session.runs[0].error
        assert error is not None and error.kind == "killed" and not error.detail.strip()
        await pilot.press("e")
        await wait_until(pilot, lambda: app.query_one("#runner-detail").display)
        text = screen_text(app)
        assert f"{error.message} [killed]" in text
        assert "(no detail)" not in text


@pytest.mark.parametrize("cuda", ["13.0", "12.4"])
async def test_a_cuda_build_the_driver_cannot_run_is_said_before_torch_is_asked(
    cuda: str,
) -> None:
    """Issue 32: where the monitor's NVML reading has a driver (550.54.15, CUDA 12.4) older
    than the build's CUDA (13.0, as torch's files say), the pane says so in one line with the
    doctor's command as soon as it shows, and greys the GPUs: no torch was imported for it.
    The line stays until a run starts (on the CPU: torch is asked first, then it runs)."""
    from tests.ui.runner_fakes import CUDA_BUILD_ON_AN_OLD_DRIVER, DEVICES, scripted_setup
    from tests.ui.streams.scenarios import RECORDED

    asked: list[object] = []
    listed = CUDA_BUILD_ON_AN_OLD_DRIVER if cuda == "13.0" else DEVICES

    def list_devices() -> DevicesListed:
        asked.append(listed)
        return listed

    setup = scripted_setup(defaults=RECORDED, cuda=cuda)  # NOT RECORDABLE WITHOUT A GPU
    app = fake_app(runner=dataclasses.replace(setup, list_devices=list_devices))
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        said = pane.runner.message
        assert not asked
        if cuda == "12.4":
            assert said is None and str(pane.choices().device) == "cuda:0"
            return
        assert said is not None and said.startswith(
            "⚠ this torch 2.13.0+cu130 needs a driver for CUDA 13.0 or later, and the driver "
            "here is 550.54.15 (CUDA 12.4): "
        )
        assert said.endswith(
            " -m pip install torch --index-url https://download.pytorch.org/whl/cu124"
        )
        assert "⚠ this torch 2.13.0+cu130 needs a driver for CUDA 13.0 or" in screen_text(app)
        [gpus] = [option for option in pane.devices if option.name.kind == "cuda"]
        assert not gpus.usable and gpus.reason == (
            "torch was built for CUDA 13.0 but sees no GPU; check the driver with nvidia-smi "
            "or gputui doctor"
        )
        assert pane.choices().device == CPU
        await pilot.press("r")  # a run on the CPU: the line has been read
        await wait_until(pilot, lambda: pane.session is not None)
        assert asked == [listed] and pane.runner.message is None


async def test_torch_is_asked_once_and_only_when_a_job_needs_it() -> None:
    """Step 6 of issue 41: a pane shown for a while asks no torch; its first job does, before
    it starts, and every job after it is checked against that answer."""
    from tests.ui.streams.scenarios import RECORDED

    setup = replayed_setup("cpu_vs_cpu", defaults=RECORDED)
    listing, asked = setup.list_devices, []

    def list_devices() -> DevicesListed | Error:
        asked.append(app.runner.session)  # (none yet: the job waits for the answer)
        return listing()

    app = fake_app(runner=dataclasses.replace(setup, list_devices=list_devices))
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        await wait_until(pilot, lambda: bool(pane.devices))  # built and shown
        assert not asked and not pane.runner.checked
        await pilot.press("r")
        await wait_until(pilot, lambda: pane.session is not None and not pane.busy)
        first = pane.session
        await pilot.press("r")
        assert pane.session is not first  # started at once
        await wait_until(pilot, lambda: not pane.busy)
        assert asked == [None] and pane.runner.checked


async def test_gpus_whose_first_reading_comes_after_the_pane_is_built_are_offered_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NVML's first answer comes after the pane stopped waiting for it: the pane offers the
    CPU alone, then the GPUs as soon as their reading is painted (torch not asked yet)."""
    import threading

    import gputui.ui.widgets.runner.pane as pane_module
    from tests.ui.fakes import h100s
    from tests.ui.runner_fakes import scripted_setup

    monkeypatch.setattr(pane_module, "READINGS_WAIT_S", 0.1)
    answer = threading.Event()

    class LateNvml:
        def sample(self) -> object:
            answer.wait(60)
            return h100s(2)

    app = fake_app(nvml=LateNvml(), runner=scripted_setup())
    async with app.run_test(size=WIDE) as pilot:
        pane = app.runner
        await wait_until(pilot, lambda: pane.built)
        assert not [o for o in pane.devices if o.name.kind == "cuda" and o.usable]
        assert pane.choices().device == CPU
        answer.set()
        await wait_until(pilot, lambda: any(o.name == Device("cuda", 0) for o in pane.devices))
        assert not pane.runner.checked and not pane.runner.checking
