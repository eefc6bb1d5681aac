"""The report of ``gputui scale``: a row per world size, its speedup and efficiency, and
a warning for each figure that is noise or oversubscription; as text and JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from gputui.format import fmt_columns, fmt_counted, fmt_fraction, fmt_number, fmt_times
from gputui.jobs.conclusions import NOISE
from gputui.jobs.results import RunRecord
from gputui.jobs.world import backend_text

SUPERLINEAR = "efficiency_over_100"
"""A scale row's warning: more speedup than the ranks added can give (noise, not scaling)."""
OVERSUBSCRIBED = "oversubscribed"
"""A scale row's warning: its ranks (and their threads) want more cores than there are."""


def scale_rows(
    runs: Sequence[RunRecord], scaling: str, cores: int | None = None
) -> list[dict[str, Any]]:
    """One JSON-ready row per world size: its figures, and its speedup (images/s over the
    first run's, the 1-rank run by default) and efficiency (speedup over the ranks added).

    Each row's ``warnings`` lists :data:`SUPERLINEAR` (efficiency over 100%) and
    :data:`OVERSUBSCRIBED` (more ranks than ``cores``, or on the CPU more ranks times
    threads), when they hold; ``cores`` is the machine's (``None``: not checked).
    """
    base = runs[0] if runs else None
    base_rate = base.steady.images_per_second if base and base.steady else None
    base_ranks = _ranks(base) if base else 1
    rows = []
    for run in runs:
        steady, world, steps = run.steady, run.world, run.step_times
        rate = steady.images_per_second if steady else None
        ranks = _ranks(run)
        speedup = rate / base_rate if rate and base_rate else None
        efficiency = speedup / (ranks / base_ranks) if speedup is not None else None
        threads = run.started.num_threads if run.started else run.config.threads
        warnings = [SUPERLINEAR] if efficiency is not None and efficiency > 1.0 else []
        if cores is not None and _oversubscribed(run, ranks, threads, cores):
            warnings.append(OVERSUBSCRIBED)
        rows.append(
            {
                "world_size": ranks,
                "scaling": scaling,
                "status": run.status,
                "error": asdict(run.error) if run.error else None,
                "backend": world.backend if world else None,
                "nodes": world.nodes if world else None,
                "per_rank_batch": world.per_rank_batch if world else run.config.batch_size,
                "global_batch": world.global_batch if world else None,
                "threads_per_rank": threads,
                "warmup_seconds": run.epochs[0].seconds if run.epochs else None,
                "epoch_seconds": steady.seconds if steady else None,
                "images_per_second": rate,
                "speedup": speedup,
                "efficiency": efficiency,
                "allreduce_share": steps.allreduce_share if steps else None,
                "step_ms_p50": steps.step_ms_p50 if steps else None,
                "step_ms_p95": steps.step_ms_p95 if steps else None,
                "local_step_ms_p50": steps.local_step_ms_p50 if steps else None,
                "final_loss": run.epochs[-1].loss if run.epochs else None,
                "final_accuracy": run.epochs[-1].accuracy if run.epochs else None,
                "cores": cores,
                "warnings": warnings,
            }
        )
    return rows


def _oversubscribed(run: RunRecord, ranks: int, threads: int | None, cores: int) -> bool:
    """Whether one machine's share of the job wants more cores than it has: a process per
    rank, and on the CPU each rank's torch threads."""
    nodes = run.world.nodes if run.world is not None else 1
    here = -(-ranks // max(nodes, 1))
    on_cpu = run.device.kind == "cpu"
    return here * ((threads or 1) if on_cpu else 1) > cores


def scale_warnings(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One sentence per warning of :func:`scale_rows`' rows: why a figure cannot be taken
    as the job's scaling."""
    lines = []
    for row in rows:
        ranks = fmt_counted(row["world_size"], "rank")
        if SUPERLINEAR in row["warnings"]:
            lines.append(
                f"{ranks}: efficiency {fmt_fraction(row['efficiency'])} ("
                f"{fmt_times(row['speedup'], precision=2)} from {row['world_size']}x the ranks) "
                f"is more than the ranks can add: {NOISE}, not scaling; run again with more "
                "data or epochs"
            )
        if OVERSUBSCRIBED in row["warnings"]:
            threads = row["threads_per_rank"]
            wants = (
                f"{ranks} x {fmt_counted(threads, 'thread')}"
                if threads and row["backend"] == "gloo"
                else ranks
            )
            lines.append(
                f"{ranks}: oversubscribed, {wants} on {fmt_counted(row['cores'], 'core')}: "
                "the ranks take turns on the cores, so the figures measure the contention"
            )
    return lines


def render_scale(runs: Sequence[RunRecord], scaling: str, cores: int | None = None) -> str:
    """``gputui scale``'s table: a row per world size, then what the columns mean, then
    a warning for each figure that is noise or oversubscription (``cores``: the machine's)."""
    lines: list[str] = []
    first = next((run for run in runs if run.started is not None), None)
    if first is not None and first.started is not None:
        started = first.started
        lines.append(
            f"{started.dataset}, {fmt_counted(started.train_images, 'training image')}, "
            f"{fmt_counted(started.epochs, 'epoch')}, {started.device_name}, {started.math}"
        )
        keeps = "per-rank batch" if scaling == "weak" else "global batch"
        lines.append(f"{scaling} scaling: every world size keeps the {keeps}")
        lines.append("")
    rows = [
        [
            "ranks",
            "backend",
            "batch/rank",
            "batch",
            "epoch s",
            "images/s",
            "speedup",
            "efficiency",
            "all-reduce",
            "step ms p50",
            "p95",
        ]
    ]
    table = scale_rows(runs, scaling, cores)
    for run, row in zip(runs, table, strict=True):
        build = run.started.torch_build if run.started is not None else ""
        which = [str(row["world_size"]), backend_text(row["backend"] or "", build)]
        if run.error is not None:
            rows.append([*which, f"error: {run.error.message}"])
            continue
        if run.status == "stopped" and not run.epochs:
            rows.append([*which, "stopped" if run.started is not None else "not run"])
            continue
        rows.append(
            [
                *which,
                str(row["per_rank_batch"]),
                fmt_number(row["global_batch"], "{}"),
                fmt_number(row["epoch_seconds"], "{:.2f}"),
                fmt_number(row["images_per_second"], "{:,.0f}"),
                fmt_times(row["speedup"], precision=2),
                fmt_fraction(row["efficiency"]) + ("!" if SUPERLINEAR in row["warnings"] else ""),
                fmt_fraction(row["allreduce_share"]),
                fmt_number(row["step_ms_p50"], "{:.1f}"),
                fmt_number(row["step_ms_p95"], "{:.1f}"),
            ]
        )
    lines += fmt_columns(rows, right=set(range(2, 11)))
    lines.append("")
    base = fmt_counted(_ranks(runs[0]) if runs else 1, "rank")
    lines.append(
        f"speedup: images/s over {base}; efficiency: speedup / the ranks' multiple; "
        "all-reduce: the share of a step spent waiting on gradient communication "
        "(steps timed with and without DDP's all-reduce)"
    )
    single = any(run.steady is not None and run.steady.includes_warmup for run in runs)
    if single:
        lines.append("only epoch 1 ran, so epoch s and images/s include warm-up")
    lines += [f"warning: {warning}" for warning in scale_warnings(table)]
    return "\n".join(lines)


def _ranks(run: RunRecord) -> int:
    if run.world is not None:
        return run.world.world_size
    return int(getattr(run.config, "world_size", 1))
