"""Issue 26: ``gputui scale``'s report flags the figures that cannot be scaling: an
efficiency over 100% (noise) and more ranks, or rank threads, than cores (oversubscription).

The runs are the real 1- and 2-rank gloo runs recorded for the UI (``cpu_scaling``).
"""

from __future__ import annotations

import dataclasses

import pytest

from gputui.jobs.events import EpochFinished
from gputui.jobs.results import RunRecord, Session
from gputui.jobs.scale.report import (
    OVERSUBSCRIBED,
    SUPERLINEAR,
    render_scale,
    scale_rows,
    scale_warnings,
)
from tests.ui.streams.replay import streams
from tests.ui.streams.scenarios import BY_NAME

SLOWER = 4.0
"""How much slower the 1-rank run's epochs are made in :func:`scaling_runs`."""


def scaling_runs(first_slower: float = 1.0) -> list[RunRecord]:
    """The recorded 1- and 2-rank runs; with ``first_slower``, the 1-rank run's epochs took
    that many times longer (a slow first run on a busy machine, as the issue's 5.13x for 2
    ranks on 2 shared cores was: no run here can be made that slow on purpose)."""
    scenario = BY_NAME["cpu_scaling"]
    runs = []
    jobs = zip(scenario.configs, streams(scenario.name), strict=True)
    for index, (config, events) in enumerate(jobs):
        run = RunRecord(config)
        for event in events:
            if index == 0 and isinstance(event, EpochFinished):
                event = dataclasses.replace(
                    event,
                    seconds=event.seconds * first_slower,
                    images_per_second=event.images_per_second / first_slower,
                )
            run.absorb(event)
        runs.append(run)
    return runs


def scaling_session(first_slower: float = 1.0) -> Session:
    """:func:`scaling_runs` as the runner pane's finished scaling session."""
    runs = scaling_runs(first_slower)
    return Session([run.config for run in runs], runs=runs, scaling="weak")


def test_the_recorded_scaling_has_no_warning_on_two_cores() -> None:
    rows = scale_rows(scaling_runs(), "weak", cores=2)
    assert [row["warnings"] for row in rows] == [[], []]
    assert 0.5 < rows[1]["efficiency"] < 1.0
    text = render_scale(scaling_runs(), "weak", cores=2)
    assert "warning" not in text and "!" not in text


def test_an_efficiency_over_100_percent_is_called_noise() -> None:
    runs = scaling_runs(first_slower=SLOWER)
    rows = scale_rows(runs, "weak", cores=2)
    assert rows[1]["efficiency"] > 1.0
    assert [row["warnings"] for row in rows] == [[], [SUPERLINEAR]]
    text = render_scale(runs, "weak", cores=2)
    efficiency = f"{100 * rows[1]['efficiency']:.1f}%"
    assert f"{efficiency}!" in text  # marked in the table
    [warning] = [line for line in text.splitlines() if line.startswith("warning:")]
    assert warning.startswith(f"warning: 2 ranks: efficiency {efficiency} (")
    assert "is more than the ranks can add: noise" in warning


@pytest.mark.parametrize(("cores", "flagged"), [(1, [[], [OVERSUBSCRIBED]]), (2, [[], []])])
def test_more_rank_threads_than_cores_is_oversubscribed(
    cores: int, flagged: list[list[str]]
) -> None:
    rows = scale_rows(scaling_runs(), "weak", cores=cores)
    assert [row["threads_per_rank"] for row in rows] == [1, 1]
    assert [row["warnings"] for row in rows] == flagged
    warnings = scale_warnings(rows)
    if cores == 1:
        assert warnings == [
            "2 ranks: oversubscribed, 2 ranks x 1 thread on 1 core: the ranks take turns on "
            "the cores, so the figures measure the contention"
        ]
    else:
        assert warnings == []


def test_without_the_core_count_only_the_figures_are_judged() -> None:
    rows = scale_rows(scaling_runs(first_slower=SLOWER), "weak")
    assert [row["warnings"] for row in rows] == [[], [SUPERLINEAR]]
    assert {row["cores"] for row in rows} == {None}


def test_nccl_on_a_rocm_build_reads_rccl_in_the_table() -> None:
    """The recorded gloo runs, as if run over NCCL by a ROCm build's trainer."""
    runs = scaling_runs()
    for run in runs:
        assert run.started is not None and run.world is not None
        run.started = dataclasses.replace(run.started, torch_build="rocm")
        run.world = dataclasses.replace(run.world, backend="nccl")
    rows = [line.split() for line in render_scale(runs, "weak").splitlines()]
    assert [row[:3] for row in rows if row[:1] in (["1"], ["2"])] == [
        ["1", "nccl", "(RCCL)"],
        ["2", "nccl", "(RCCL)"],
    ]
    assert [row["backend"] for row in scale_rows(runs, "weak")] == ["nccl", "nccl"]
