"""The runner pane's model and renderers, without an app: speedup, chart, tables."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console, RenderableType

from gputui.device import Device
from gputui.jobs.bench.report import bench_json, render_table
from gputui.jobs.config import RunConfig
from gputui.jobs.events import Error, Finished, Memory, Progress
from gputui.jobs.results import ExperimentResult, Phase, RunRecord, Session, speedup
from gputui.ui.render.runner import (
    experiment_body,
    memory_line,
    placement_table,
    session_body,
    speedup_text,
    status_line,
    throughput_chart,
)
from tests.ui.runner_fakes import gpu_run_events
from tests.ui.streams.replay import in_flight, stream, streams
from tests.ui.streams.scenarios import RECORDED

CPU = RECORDED
GPU = RECORDED.with_changes(device=Device("cuda", 0))
"""NOT RECORDABLE WITHOUT A GPU: its runs are typed (tests/ui/runner_fakes.py)."""


def text_of(renderable: RenderableType, width: int = 100) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None, record=True)
    console.print(renderable)
    return console.export_text()


def record(config: RunConfig) -> RunRecord:
    """A finished run of ``config``: recorded on the CPU (``cpu_run``, or ``cpu_one_epoch``),
    typed on a GPU."""
    run = RunRecord(config)
    if config.device.kind == "cpu":
        events = stream("cpu_run" if config.epochs == CPU.epochs else "cpu_one_epoch")
    else:
        events = gpu_run_events(config)
    for event in events:
        run.absorb(event)
    return run


def test_steady_figures_leave_out_the_warm_up_epoch() -> None:
    run = record(CPU.with_changes(epochs=3))
    warm, *steady = run.epochs
    assert warm.warmup and not any(epoch.warmup for epoch in steady)
    assert run.steady is not None and not run.steady.includes_warmup
    assert run.steady.seconds == sum(e.seconds for e in steady) / 2
    images = sum(e.images for e in steady)
    assert run.steady.images_per_second == images / sum(e.seconds for e in steady)


def test_speedup_per_epoch_and_steady() -> None:
    result = speedup(record(CPU), record(GPU))
    cpu, gpu = record(CPU), record(GPU)
    assert result.baseline == "cpu" and result.other == "cuda:0"
    assert [epoch for epoch, _ in result.per_epoch] == [1, 2, 3]
    assert result.per_epoch[1][1] == cpu.epochs[1].seconds / gpu.epochs[1].seconds
    assert result.steady == cpu.steady.seconds / gpu.steady.seconds  # type: ignore[union-attr]
    assert result.warmup == cpu.epochs[0].seconds / gpu.epochs[0].seconds
    assert result.so_far is None


def test_speedup_forms_from_the_second_runs_progress() -> None:
    cpu = record(CPU)
    gpu = RunRecord(GPU)
    result = speedup(cpu, gpu)
    assert result.steady is None and result.so_far is None and result.per_epoch == ()
    gpu.absorb(Progress(1, 10, 195, 14_790.0, 2.0))
    result = speedup(cpu, gpu)
    assert result.so_far == 14_790.0 / cpu.steady.images_per_second  # type: ignore[operator,union-attr]
    assert "forming" in text_of(speedup_text(result))


def test_a_session_runs_its_configs_in_turn_and_stops_on_error() -> None:
    session = Session([CPU, GPU])
    assert session.next_config is CPU
    first = session.begin(CPU)
    assert session.next_config is None and session.phase is Phase.RUNNING
    first.absorb(Finished(epochs_completed=2))
    assert session.next_config is GPU and session.phase is Phase.RUNNING
    second = session.begin(GPU)
    second.absorb(Error(message="boom", kind="crash"))
    assert session.phase is Phase.FAILED and session.next_config is None
    assert "✗ cuda:0: boom" in text_of(status_line(session))


def test_a_finished_session_counts_its_epochs_in_words() -> None:
    """Issue 18: ``cpu 1 epochs``."""
    session = Session([CPU, GPU])
    session.begin(CPU).absorb(Finished(epochs_completed=1))
    session.begin(GPU).absorb(Finished(epochs_completed=2))
    assert text_of(status_line(session)).strip() == "✓ finished: cpu 1 epoch, cuda:0 2 epochs"


def test_a_stopped_session_starts_nothing_more() -> None:
    session = Session([CPU, GPU])
    session.begin(CPU).absorb(Finished(epochs_completed=0, stopped=True))
    session.stopped = True
    assert session.next_config is None and session.phase is Phase.STOPPED


def test_throughput_bars_share_one_scale() -> None:
    cpu, gpu = record(CPU).steady, record(GPU).steady
    assert cpu is not None and gpu is not None
    lines = text_of(throughput_chart([record(CPU), record(GPU)], 60)).splitlines()
    assert len(lines) == 2 and all(len(line.rstrip()) <= 60 for line in lines)
    cpu_bar, gpu_bar = (line.count("█") for line in lines)
    assert gpu_bar > cpu_bar > 0
    assert abs(cpu_bar - gpu_bar * cpu.images_per_second / gpu.images_per_second) <= 1
    assert "(steady)" in lines[0] and f"{gpu.images_per_second:,.0f} img/s" in lines[1]


def test_placement_table_shows_groups_state_and_batches() -> None:
    placement = record(GPU).placement
    assert placement is not None
    text = text_of(placement_table(placement), 120)
    assert "total (Adam)" in text and "Adam state" in text  # param_groups[0]: conv and fc
    assert "237.7 KiB" in text  # 30,422 params x 2 state tensors x 4 bytes
    assert "inputs on cuda:0 (float32, contiguous)" in text


def test_memory_line_leaves_out_what_the_device_cannot_report() -> None:
    line = text_of(memory_line(Memory(Device("cpu"), None, None, 900 * 2**20, None, 800 * 2**20)))
    assert "allocated" not in line and "peak 900.0 MiB" in line and "RSS 800.0 MiB" in line


def test_memory_line_says_what_the_peak_spans() -> None:
    cpu = Memory(Device("cpu"), None, None, 900 * 2**20, None, 800 * 2**20, "process")
    assert "process peak 900.0 MiB" in text_of(memory_line(cpu))
    gpu = Memory(Device("cuda", 0), 2**20, 2**21, 3 * 2**20, None, 800 * 2**20, "epoch")
    assert "epoch peak 3.0 MiB" in text_of(memory_line(gpu))


def test_the_body_before_any_run_says_what_will_appear() -> None:
    assert "Epoch times" in text_of(session_body(None, 80))


def test_a_one_epoch_comparison_compares_warm_up_with_warm_up() -> None:
    """A run that ended after its only epoch is compared by that epoch, marked as such,
    even against a run with steady epochs (like with like, never warm-up against steady)."""
    cpu = record(CPU.with_changes(epochs=1))
    gpu = record(GPU)
    result = speedup(cpu, gpu)
    assert result.steady_includes_warmup
    assert result.steady == cpu.epochs[0].seconds / gpu.epochs[0].seconds
    assert "over the only epoch, warm-up included" in text_of(speedup_text(result))


def cpu_vs_cpu() -> Session:
    """The recorded comparison of the CPU with itself, finished."""
    session = Session([CPU, CPU])
    for events in streams("cpu_vs_cpu"):
        run = session.begin(CPU)
        for event in events:
            run.absorb(event)
    return session


def test_the_cpu_compared_with_itself_labels_its_baseline() -> None:
    """Issue 26: two runs on ``cpu`` read as two unlabelled ``cpu`` rows; the first, the
    baseline, is marked wherever both are named."""
    session = cpu_vs_cpu()
    assert session.phase is Phase.FINISHED
    body = text_of(session_body(session, 100))
    table, chart = body.split("Throughput")
    devices = [line.split()[:2] for line in table.splitlines()[1:] if line.strip()]
    assert devices == [["cpu", "(baseline)"]] * 3 + [["cpu", "1"], ["cpu", "2"], ["cpu", "3"]]
    bars = [line.split()[:2] for line in chart.splitlines() if line.startswith("cpu")]
    assert [(bar[0], bar[1][0]) for bar in bars] == [("cpu", "("), ("cpu", "█")]
    assert bars[0][1] == "(baseline)"
    assert "Speedup of cpu over cpu (baseline):" in body
    assert text_of(status_line(session)).startswith(
        "✓ finished: cpu (baseline) 3 epochs, cpu 3 epochs"
    )
    # gputui bench --device cpu --device cpu reads alike
    lines = render_table(session.runs).splitlines()
    assert [line.split()[:2] for line in lines if line.startswith("cpu ")] == [
        ["cpu", "(baseline)"],  # the table's rows
        ["cpu", "0.27"],
        ["cpu", "(baseline)"],  # the pace lines (issue 40)
        ["cpu", "pace:"],
        ["cpu", "(baseline)"],  # the placement lines
        ["cpu", "placement:"],
    ]
    assert "; speedup: over cpu (baseline)" in render_table(session.runs)


def test_the_cpu_compared_with_itself_says_its_speedup_measures_noise() -> None:
    """Issue 40: a device's speedup over itself is noise, in scale's words, wherever it is
    shown: the pane, bench's table and its JSON; against a GPU, or bf16 against fp32 on the
    one CPU, it is a comparison."""
    session = cpu_vs_cpu()
    warning = (
        "cpu compared with itself: its speedup measures noise (a busy machine, a slow first "
        "run), not hardware"
    )
    assert f"⚠ {warning}" in " ".join(text_of(session_body(session, 100)).split())
    assert f"warning: {warning}" in render_table(session.runs).splitlines()
    assert bench_json(session.runs)["warnings"] == [warning]
    for other in (record(GPU), record(CPU.with_changes(precision="bf16"))):
        runs = [record(CPU), other]
        assert speedup(*runs).warning is None
        assert "noise" not in render_table(runs) and bench_json(runs)["warnings"] == []
        assert "noise" not in text_of(session_body(Session([CPU, other.config], runs=runs), 100))


def test_runs_on_distinct_devices_need_no_mark() -> None:
    session = Session([CPU, GPU], runs=[record(CPU), record(GPU)])
    assert "(baseline)" not in text_of(session_body(session, 100))
    assert "(baseline)" not in render_table(session.runs)


BENCH_NOTE = (
    "note: the CPU ran here on 1 thread of this machine's 2 cores (a core kept for the "
    "monitor); gputui bench uses all 2, so its CPU figures are higher, and speedups over the "
    "CPU lower, than these"
)


def test_a_cpu_run_with_a_core_less_than_bench_says_so() -> None:
    """Issue 26: the pane's CPU runs keep a core for the monitor, bench's use every core, so
    a speedup over the CPU reads higher here; the recorded run had 1 thread of 2 cores."""
    session = Session([CPU, GPU], runs=[record(CPU), record(GPU)])
    assert session.runs[0].started is not None and session.runs[0].started.num_threads == 1
    assert BENCH_NOTE in " ".join(text_of(session_body(session, 100, cores=2)).split())
    one_core = " ".join(text_of(session_body(session, 100, cores=1)).split())
    assert "note: the CPU ran here" not in one_core  # 1 thread of 1 core: all of them
    gpu_only = Session([GPU], runs=[record(GPU)])
    assert "note: the CPU ran here" not in text_of(session_body(gpu_only, 100, cores=2))


def test_fewer_threads_than_the_runner_s_default_are_not_blamed_on_the_monitor() -> None:
    session = Session([CPU], runs=[record(CPU)])
    text = " ".join(text_of(session_body(session, 100, cores=4)).split())
    assert "on 1 thread of this machine's 4 cores (as the runner's defaults ask)" in text


def test_an_experiment_on_the_cpu_says_its_threads() -> None:
    result = ExperimentResult("sync-stall")
    for event in stream("sync_stall_cpu"):
        result.absorb(event)
    text = " ".join(text_of(experiment_body(result, 100, cores=2)).split())
    assert (
        "note: the CPU ran here on 1 thread of this machine's 2 cores (a core kept for the "
        "monitor); gputui experiment uses all 2, so its CPU figures are higher than these"
    ) in text


def test_the_gpu_panel_s_note_is_one_printable_line_whatever_torch_says() -> None:
    """The reason is a torch install's own text (its version, from its files)."""
    from gputui.jobs.devices import device_options
    from gputui.ui.render.runner import unusable_gpus_note
    from tests.ui.runner_fakes import cuda_build

    hostile = replace(cuda_build("13.0"), cuda_built=False, torch_version="2.13\x1b[2J\n+cpu")
    note = unusable_gpus_note(device_options(hostile), 2)
    assert note is not None and note.isprintable() and "(d: Doctor)" in note


def test_a_second_run_stopped_mid_epoch_leaves_no_figure_forming() -> None:
    """The recorded baseline, then a run stopped at step 4 of its epoch 1 (the recorded
    ``cpu_stopped`` run, cut there, and its recorded end): while it trained the line was
    forming from its epoch so far; its stop clears that, so the line says ``n/a``."""
    baseline, stopped = RunRecord(RECORDED), RunRecord(RECORDED)
    for event in stream("cpu_run"):
        baseline.absorb(event)
    *ran, end = stream("cpu_stopped")
    assert isinstance(end, Finished) and end.stopped
    for event in in_flight(ran, epoch=1, step=4):
        stopped.absorb(event)
    assert speedup(baseline, stopped).so_far is not None  # forming, from the epoch so far
    stopped.absorb(end)
    result = speedup(baseline, stopped)
    assert result.so_far is None and result.steady is None
    assert "n/a (a run ended before its first epoch did)" in speedup_text(result).plain
