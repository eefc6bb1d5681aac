"""Issue 40: what set a run's pace, judged from its measured figures: the steady epochs by
the wall clock and the device's events (median and spread), the busy share, the verdict."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputui.device import CPU, Device
from gputui.format import fmt_decimal
from gputui.jobs.bench.report import bench_json, pace_lines, render_table
from gputui.jobs.conclusions import pace_verdict
from gputui.jobs.config import RunConfig
from gputui.jobs.events import GRAPHS_OFF, EpochFinished, Finished, Note
from gputui.jobs.results import RunRecord, speedup
from gputui.ui.render.runner import speedup_text
from tests.jobs.test_bf16_gain import EPOCH_IMAGES, _started

GPU = Device("cuda", 0)
FLOPS = 10_959_984


@pytest.mark.parametrize(
    ("device", "busy", "pipeline", "kind", "words"),
    [
        (
            GPU,
            0.31,
            "resident",
            "launch-bound",
            "busy 31% of its steps' time: launch-bound, the host issues",
        ),
        (GPU, 0.31, "classic", "waiting on data", "busy 31% of its steps' time: waiting on data"),
        (GPU, 0.92, "resident", "compute-bound", "busy 92% of its steps' time: compute-bound"),
        (GPU, 0.8, "classic", "compute-bound", "busy 80% of its steps' time: compute-bound"),
        (CPU, 1.0, "classic", "compute-bound", "On cpu, compute-bound, busy = wall"),
    ],
)
def test_each_verdict_follows_the_busy_share_and_the_pipeline(
    device: Device, busy: float, pipeline: str, kind: str, words: str
) -> None:
    verdict = pace_verdict(device, busy, pipeline)
    assert verdict is not None and verdict.kind == kind
    assert words in verdict.sentence and verdict.sentence.endswith("would help.")
    assert ". " not in verdict.sentence  # one sentence
    if device == CPU:
        assert "GPU busy" not in verdict.sentence and "%" not in verdict.sentence


def test_a_launch_bound_run_already_replaying_a_cuda_graph_is_not_told_to_use_one() -> None:
    eager = pace_verdict(GPU, 0.31, "resident")
    graphed = pace_verdict(GPU, 0.31, "resident", graphed=True)
    assert eager is not None and "or CUDA graphs would help" in eager.sentence
    assert graphed is not None and graphed.kind == "launch-bound"
    assert "even with each step one CUDA graph" in graphed.sentence
    assert "or CUDA graphs would help" not in graphed.sentence
    assert graphed.sentence.endswith("a larger batch would help.")


def test_no_verdict_without_a_busy_share() -> None:
    """A GPU whose busy time was not profiled (XPU, MPS, no CUPTI): events give elapsed
    time, not busy time, so there is nothing to judge by."""
    assert pace_verdict(GPU, None, "resident") is None


def record(
    device: Device,
    seconds: list[float],
    *,
    clock: str,
    device_seconds: list[float] | None = None,
    joules: float | None = None,
    busy: float | None = None,
) -> RunRecord:
    """A finished run of these epochs (the first the warm-up): typed, as a GPU run cannot be
    recorded here; its figures are chosen for the rule under test."""
    config = RunConfig(device=device, epochs=len(seconds))
    run = RunRecord(config)
    run.absorb(replace(_started(config, "IEEE fp32", False), flops_per_image=FLOPS))
    for index, wall in enumerate(seconds):
        run.absorb(
            EpochFinished(
                epoch=index + 1,
                seconds=wall,
                images_per_second=EPOCH_IMAGES / wall,
                loss=2.0,
                accuracy=0.5,
                warmup=index == 0,
                eval_seconds=0.1,
                images=EPOCH_IMAGES,
                device_seconds=device_seconds[index] if device_seconds else None,
                device_clock=clock,
                energy_joules=joules,
            )
        )
    run.absorb(Finished(epochs_completed=len(seconds), busy_share=busy))
    return run


def test_a_gpu_run_s_steady_epochs_by_median_and_spread_on_both_clocks() -> None:
    gpu = record(
        GPU,
        [9.0, 2.4, 2.0, 2.1],
        clock="events",
        device_seconds=[8.0, 2.3, 1.9, 2.0],
        joules=500.0,
        busy=0.31,
    )
    pace = gpu.pace
    assert pace is not None and pace.epochs == 3  # the warm-up left out
    assert (pace.wall_s, pace.wall_spread_s) == (2.1, pytest.approx(0.4))
    assert (pace.device_s, pace.device_spread_s) == (2.0, pytest.approx(0.4))
    assert pace.busy_share == 0.31
    steady = gpu.steady
    assert steady is not None and steady.images_per_second is not None
    assert pace.flops_per_second == FLOPS * steady.images_per_second
    assert pace.images_per_joule == EPOCH_IMAGES / 500.0
    assert pace.verdict is not None and pace.verdict.kind == "launch-bound"
    figures, verdict = pace_lines(gpu, "cuda:0")
    assert figures == (
        "cuda:0 pace: median epoch 2.100 s (spread 0.400 s, 3 epochs) by the wall clock, "
        "2.000 s (spread 0.400 s) by its events; busy 31% of a profiled sample of steps; "
        f"{fmt_decimal(pace.flops_per_second, 'FLOP/s')} achieved (11.0 MFLOP an image); "
        "100 images/J"
    )
    assert verdict == pace.verdict.sentence
    # the comparison's line says it too
    cpu = record(CPU, [40.0, 30.0, 31.0, 30.5], clock="wall")
    result = speedup(cpu, gpu)
    assert result.verdict == pace.verdict.sentence
    assert pace.verdict.sentence in speedup_text(result).plain


def test_a_run_from_an_engine_before_the_clocks_gets_figures_but_no_verdict() -> None:
    """The recorded streams carry no clock: the wall's median still stands, nothing is
    judged, and the runner's comparison shows what it showed."""
    old = record(CPU, [3.0, 2.0, 2.2], clock="")
    pace = old.pace
    assert pace is not None and (pace.wall_s, pace.device_s, pace.busy_share) == (2.1, None, None)
    assert pace.verdict is None and speedup(old, old).verdict is None


def test_a_graphed_run_says_so_and_a_capture_that_failed_undoes_it() -> None:
    """Issue 40 item 3, on the parent's side: ``RunStarted.graphs`` and the trainer's note
    of a failed capture decide what the table, ``--json`` and the verdict say."""
    graphed = record(GPU, [2.0, 1.0, 1.0], clock="cuda events", busy=0.31)
    graphed.started = replace(graphed.started, graphs=True) if graphed.started else None
    assert graphed.graphed
    assert "cuda:0: each step replayed from a CUDA graph once warm" in render_table([graphed])
    assert bench_json([graphed])["runs"][0]["graphs"] is True
    pace = graphed.pace
    assert pace is not None and pace.verdict is not None
    assert "even with each step one CUDA graph" in pace.verdict.sentence

    graphed.absorb(Note(f"{GRAPHS_OFF}, the step runs eagerly: capture failed"))
    assert not graphed.graphed
    assert "each step replayed from a CUDA graph" not in render_table([graphed])
    pace = graphed.pace
    assert pace is not None and pace.verdict is not None
    assert "or CUDA graphs would help" in pace.verdict.sentence
