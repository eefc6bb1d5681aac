"""Each experiment's result in one plain sentence, built only from its measured rows; and
what bf16 gained over fp32 in ``gputui bench`` (:func:`bf16_clause`).

Pure: the child sends the sentence (``ExperimentConcluded``), a UI or test can rebuild it.
Every word that states a direction ("falling", "slower", "as fast as") is chosen from the
numbers it sits next to, so the sentence stays true whichever way a trend goes; differences
too small to trust are called that, not given a direction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from gputui.device import Device
from gputui.format import fmt_count, fmt_ms, fmt_share, fmt_signed_share, fmt_times
from gputui.jobs.events import BatchSweepRow, PipelineRow, Row, SyncStallRow

RowT = TypeVar("RowT", BatchSweepRow, SyncStallRow, PipelineRow)

SHARE_SAME = 0.02
"""Data shares closer than this (2 percentage points) are "about the same"."""
THROUGHPUT_SAME = 1.05
"""Throughputs within this ratio are "about the same"."""
SLOWDOWN_MIN = 0.02
"""A per-step read must cost at least this fraction (2%), and more than the noise, to count;
a larger difference within the noise is too noisy to tell."""
PIPELINE_SAME = 1.1
"""Pipelines (or speedups) within this ratio run "at about the same speed"."""
BF16_GAIN_MIN = 1.1
"""bf16 must train at least this much faster than fp32 to count as a gain (steady epochs on
one device differ by a few percent run to run)."""
BUSY_MIN = 0.8
"""A device busy running kernels this share of its steps' time or more is compute-bound."""
NOISE = "noise (a busy machine, a slow first run)"
"""What a figure no hardware can explain measures: a device's speedup over itself, a
scaling efficiency over 100%."""


def conclude(experiment: str, rows_by_device: Mapping[Device, Sequence[Row]]) -> str:
    """The experiment's one-sentence result, from each device's rows (in the order the
    devices ran)."""
    devices = {device: list(rows) for device, rows in rows_by_device.items() if rows}
    if not devices:
        return "No measurement finished."
    if experiment == "batch-sweep":
        clauses = [
            batch_sweep_clause(device, _only(rows, BatchSweepRow))
            for device, rows in devices.items()
        ]
    elif experiment == "sync-stall":
        clauses = [
            sync_stall_clause(device, _only(rows, SyncStallRow)) for device, rows in devices.items()
        ]
    elif experiment == "pipelines":
        pipelines = {device: _only(rows, PipelineRow) for device, rows in devices.items()}
        clauses = [pipelines_clause(device, rows) for device, rows in pipelines.items()]
        clauses += speedup_clauses(pipelines)
    else:
        raise ValueError(f"unknown experiment {experiment!r}")
    return sentence(clauses)


def sentence(clauses: Sequence[str]) -> str:
    """Join clauses with semicolons into one capitalised sentence ending in a full stop."""
    text = "; ".join(clause for clause in clauses if clause)
    return (text[:1].upper() + text[1:] + ".") if text else "No measurement finished."


# -- batch-sweep ----------------------------------------------------------------------------


def batch_sweep_clause(device: Device, rows: Sequence[BatchSweepRow]) -> str:
    """What share of each step went to data, smallest batch against largest, and the best batch.

    On an accelerator the data phase is the ``.to(device)`` copy; on the CPU nothing
    is copied, so it is the host's batch preparation, and the clause says so.
    """
    ok = sorted(
        (r for r in rows if r.error is None and r.data_share is not None and r.images_per_second),
        key=lambda r: r.batch_size,
    )
    failed = [r for r in rows if r.error is not None]
    if not ok:
        why = f" ({failed[0].error})" if failed else ""
        return f"on {device}, no batch size could be measured{why}"
    what = (
        "preparing each batch on the host (a CPU copies nothing)"
        if device.kind == "cpu"
        else "copying each batch to the device"
    )
    first, last = ok[0], ok[-1]
    assert first.data_share is not None and last.data_share is not None
    text = f"on {device}, {what} took {fmt_share(first.data_share)} of each step at batch "
    if first is last:
        text += f"{first.batch_size} ({fmt_count(first.images_per_second)} images/s)"
    else:
        change = last.data_share - first.data_share
        if abs(change) < SHARE_SAME:  # too small a change to call a trend
            trend = f" and {fmt_share(last.data_share)}"
        else:
            trend = f", {'rising' if change > 0 else 'falling'} to {fmt_share(last.data_share)}"
        text += f"{first.batch_size}{trend} at batch {last.batch_size}; " + _best_batch(ok)
    if failed:
        text += f"; batch {failed[0].batch_size} did not run ({failed[0].error})"
    return text


def _best_batch(ok: Sequence[BatchSweepRow]) -> str:
    best = max(ok, key=lambda r: r.images_per_second or 0.0)
    other = ok[-1] if best is ok[0] else ok[0]
    best_ips, other_ips = best.images_per_second or 0.0, other.images_per_second or 0.0
    if best_ips <= other_ips * THROUGHPUT_SAME:
        low = min(r.images_per_second or 0.0 for r in ok)
        return f"throughput stayed between {fmt_count(low)} and {fmt_count(best_ips)} images/s"
    return (
        f"throughput was highest at batch {best.batch_size} ({fmt_count(best_ips)} images/s, "
        f"against {fmt_count(other_ips)} at batch {other.batch_size})"
    )


# -- sync-stall -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SyncStallSummary:
    """What reading the loss every step cost on one device."""

    every_step_ms: float
    """ms per step with ``loss.item()`` every step."""
    once_ms: float
    """ms per step with the loss summed on the device and read once."""
    cost_ms: float
    """``every_step_ms - once_ms``: the cost of the per-step read (negative: none)."""
    slowdown: float
    """``cost_ms / once_ms``: the relative slowdown."""
    noise_ms: float
    """The larger of the two modes' spreads between rounds."""
    verdict: Literal["slower", "no_difference", "too_noisy", "faster"]
    """``slower`` (``faster``) when the cost (the saving) beats the noise and is at least
    ``SLOWDOWN_MIN``; ``no_difference`` when it is under ``SLOWDOWN_MIN``; ``too_noisy``
    when it is larger but within the noise."""


def sync_stall_summary(rows: Sequence[SyncStallRow]) -> SyncStallSummary | None:
    """Compare the two modes' rows; ``None`` unless both were measured."""
    by_mode = {r.mode: r for r in rows if r.error is None and r.ms_per_step is not None}
    every, once = by_mode.get("every_step"), by_mode.get("once")
    if every is None or once is None or not once.ms_per_step or every.ms_per_step is None:
        return None
    cost = every.ms_per_step - once.ms_per_step
    slowdown = cost / once.ms_per_step
    noise = max(every.spread_ms or 0.0, once.spread_ms or 0.0)
    verdict: Literal["slower", "no_difference", "too_noisy", "faster"]
    if abs(slowdown) < SLOWDOWN_MIN:
        verdict = "no_difference"
    elif abs(cost) <= noise:
        verdict = "too_noisy"
    else:
        verdict = "slower" if cost > 0 else "faster"
    return SyncStallSummary(every.ms_per_step, once.ms_per_step, cost, slowdown, noise, verdict)


def sync_stall_clause(device: Device, rows: Sequence[SyncStallRow]) -> str:
    """The cost per step of ``loss.item()`` every step, or that there was none to measure."""
    summary = sync_stall_summary(rows)
    if summary is None:
        failed = next((r.error for r in rows if r.error), None)
        return f"on {device}, the two ways could not both be measured" + (
            f" ({failed})" if failed else ""
        )
    pair = f"{fmt_ms(summary.every_step_ms)} vs {fmt_ms(summary.once_ms)} ms per step"
    if summary.verdict == "slower":
        return (
            f"on {device}, reading the loss every step (loss.item(), as add_scalar does) cost "
            f"{fmt_ms(summary.cost_ms)} ms per step, {fmt_share(summary.slowdown)} slower than "
            f"reading it once ({pair})"
        )
    if summary.verdict == "faster":
        text = f"on {device}, reading the loss every step was not slower ({pair})"
    elif summary.verdict == "too_noisy":
        text = (
            f"on {device}, the rounds varied too much to tell what reading the loss every step "
            f"cost ({pair}, {fmt_signed_share(summary.slowdown)}, but one way's rounds differed "
            f"by up to {fmt_ms(summary.noise_ms)} ms)"
        )
    else:
        text = (
            f"on {device}, reading the loss every step made no measurable difference ({pair}, "
            f"{fmt_signed_share(summary.slowdown)})"
        )
    if device.kind == "cpu":
        text += (
            ": a CPU finishes each step before the next starts, so the read has nothing to "
            "wait for; the stall is a GPU's, which runs behind the host"
        )
    return text


# -- pipelines ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PipelinesSummary:
    """Which pipeline fed one device faster, judged against the noise as sync-stall is."""

    resident_over_classic: float
    """Resident images/s over classic images/s."""
    noise_ms: float | None
    """The larger of the two pipelines' spreads between rounds (ms per step); ``None`` when
    neither ran two rounds."""
    verdict: Literal["resident_faster", "classic_faster", "no_difference", "too_noisy"]
    """``no_difference`` within ``PIPELINE_SAME``; ``too_noisy`` when the steps' times differ
    by more than that but by no more than the noise."""


def pipelines_summary(rows: Sequence[PipelineRow]) -> PipelinesSummary | None:
    """Compare the two pipelines' rows; ``None`` unless both were measured."""
    by_name = {r.pipeline: r for r in rows if r.error is None and r.images_per_second}
    classic, resident = by_name.get("classic"), by_name.get("resident")
    if classic is None or resident is None:
        return None
    assert classic.images_per_second and resident.images_per_second
    ratio = resident.images_per_second / classic.images_per_second
    spreads = [r.spread_ms for r in (classic, resident) if r.spread_ms is not None]
    noise = max(spreads) if spreads else None
    apart = abs((classic.ms_per_step or 0.0) - (resident.ms_per_step or 0.0))
    verdict: Literal["resident_faster", "classic_faster", "no_difference", "too_noisy"]
    if 1 / PIPELINE_SAME < ratio < PIPELINE_SAME:
        verdict = "no_difference"
    elif noise is not None and apart <= noise:
        verdict = "too_noisy"
    else:
        verdict = "resident_faster" if ratio > 1 else "classic_faster"
    return PipelinesSummary(ratio, noise, verdict)


def pipelines_clause(device: Device, rows: Sequence[PipelineRow]) -> str:
    """Which pipeline was faster on one device, and by how much."""
    classic, resident = _rates(rows)
    if not classic or not resident:
        failed = next((f"{r.pipeline}: {r.error}" for r in rows if r.error), None)
        return f"on {device}, the two pipelines could not both be measured" + (
            f" ({failed})" if failed else ""
        )
    pair = f"{fmt_count(resident)} vs {fmt_count(classic)} images/s"
    ratio = resident / classic
    summary = pipelines_summary(rows)
    if summary is not None and summary.verdict == "too_noisy":
        return (
            f"on {device}, the rounds varied too much to tell which pipeline was faster "
            f"(resident data {fmt_count(resident)} vs the DataLoader {fmt_count(classic)} "
            f"images/s, but one pipeline's rounds differed by up to {fmt_ms(summary.noise_ms)} "
            "ms per step)"
        )
    if ratio >= PIPELINE_SAME:
        return (
            f"on {device}, resident data trained {fmt_times(ratio)} as fast as the "
            f"DataLoader ({pair})"
        )
    if ratio <= 1 / PIPELINE_SAME:
        return (
            f"on {device}, the DataLoader trained {fmt_times(1 / ratio)} as fast as resident data "
            f"({fmt_count(classic)} vs {fmt_count(resident)} images/s)"
        )
    return f"on {device}, resident data and the DataLoader ran at about the same speed ({pair})"


def speedup_clauses(pipelines: Mapping[Device, Sequence[PipelineRow]]) -> list[str]:
    """Each accelerator's speedup over the CPU with each pipeline: the tutorial's small speedup.

    With no CPU measured, an accelerator whose DataLoader lagged gets the reason;
    with no accelerator, the clause says what would show it.
    """
    rates = {device: _rates(rows) for device, rows in pipelines.items()}
    accelerators = [d for d in rates if d.kind != "cpu"]
    cpu_classic, cpu_resident = next((rates[d] for d in rates if d.kind == "cpu"), (None, None))
    clauses = []
    for device in accelerators:
        classic, resident = rates[device]
        if classic and resident and cpu_classic and cpu_resident:
            slow = classic / cpu_classic
            fast = resident / cpu_resident
            text = (
                f"{device} was {fmt_times(slow)} as fast as the CPU with the DataLoader and "
                f"{fmt_times(fast)} with resident data"
            )
            if fast >= slow * PIPELINE_SAME:
                text += ", which is why the tutorial's GPU speedup looks small"
            clauses.append(text)
        elif classic and resident and resident >= classic * PIPELINE_SAME:
            clauses.append(
                f"{device} spent most of the DataLoader's steps waiting for batches, which is "
                "why the tutorial's GPU speedup looks small"
                if resident >= 2 * classic
                else f"{device} waited for the DataLoader, which is part of why the tutorial's "
                "GPU speedup looks small"
            )
    if not accelerators:
        clauses.append(
            "add a GPU (--device cuda) to see why the tutorial's GPU speedup looks small"
        )
    return clauses


# -- bf16 against fp32 (gputui bench) ------------------------------------------------------


def bf16_clause(device: Device, speedup: float, *, cpu_fast_bf16: bool | None = None) -> str:
    """bf16 against fp32 on ``device``, from ``speedup`` (fp32's steady epoch seconds over
    bf16's: above 1, bf16 was faster); when bf16 gained nothing, why not, in that device's
    terms (a CPU's by ``cpu_fast_bf16``, ``RunStarted.cpu_bf16``: AVX512-BF16 or AMX)."""
    if speedup >= BF16_GAIN_MIN:
        return f"on {device}, bf16 trained {fmt_times(speedup, precision=2)} as fast as fp32"
    how = "slower than" if speedup * BF16_GAIN_MIN <= 1 else "no faster than"
    return (
        f"on {device}, bf16 trained {how} fp32 ({fmt_times(speedup, precision=2)} its speed): "
        + _no_bf16_gain(device, cpu_fast_bf16)
    )


def _no_bf16_gain(device: Device, cpu_fast_bf16: bool | None) -> str:
    kind = device.kind
    if kind == "cpu" and cpu_fast_bf16 is False:
        return "this CPU has no AVX512-BF16 or AMX, so its bf16 math is fp32 math plus conversions"
    if kind == "cpu":
        return "this model's layers are probably too small for bf16 math to repay autocast's casts"
    units = "tensor cores" if kind == "cuda" else "the GPU's bf16 math"
    return (
        f"this model's kernels are probably too small for {units} to matter: each step is "
        "bound by kernel launches, and autocast's casts add more of them"
    )


# -- what set a run's pace (gputui bench, a comparison) ------------------------------------


PaceKind = Literal["launch-bound", "compute-bound", "waiting on data"]


@dataclass(frozen=True)
class PaceVerdict:
    """What set a run's pace, judged from its measured figures (:func:`pace_verdict`)."""

    kind: PaceKind
    """What the steps waited on: the host's kernel launches, the device's math, the batches."""
    sentence: str
    """The busy share, the kind, why, and what would help, in one sentence."""


def pace_verdict(
    device: Device, busy_share: float | None, pipeline: str, *, graphed: bool = False
) -> PaceVerdict | None:
    """What set the pace of a run on ``device`` (``graphed``: its step replayed from a CUDA
    graph); ``None`` where its busy share is unknown.

    A GPU busy ``BUSY_MIN`` of its steps' time or more is compute-bound. Below that it
    waits on the host: for its batches where the host loads them (the classic pipeline),
    else for its kernels' launches. On the CPU the host is the device and its busy time its
    wall time (no device clock tells its compute from its waits): compute-bound, said so.
    """
    if busy_share is None:
        return None
    if device.kind == "cpu":
        clause = (
            f"on {device}, compute-bound, busy = wall: the CPU is the host, and no device clock "
            "tells its compute from its waits; more cores or a GPU would help"
        )
        return PaceVerdict("compute-bound", sentence([clause]))
    busy = f"on {device}, busy {fmt_share(busy_share)} of its steps' time"
    kind: PaceKind = "compute-bound" if busy_share >= BUSY_MIN else "launch-bound"
    if kind == "launch-bound" and pipeline == "classic":
        kind = "waiting on data"
    why = _GRAPHED_LAUNCH_BOUND if graphed and kind == "launch-bound" else _PACE_WHY[kind]
    return PaceVerdict(kind, sentence([f"{busy}: {kind}, {why}"]))


_PACE_WHY: dict[PaceKind, str] = {
    "compute-bound": "its kernels set the pace; only faster math (tf32, bf16) or a faster "
    "device would help",
    "waiting on data": "the host loads and copies each batch slower than the device trains "
    "on it; the resident pipeline would help",
    "launch-bound": "the host issues kernels slower than the device runs them; a larger batch "
    "(fewer, larger kernels) or CUDA graphs would help",
}
_GRAPHED_LAUNCH_BOUND = (
    "the host sets the pace even with each step one CUDA graph (its batch cut and copied, "
    "then the graph launched); a larger batch would help"
)


def _rates(rows: Sequence[PipelineRow]) -> tuple[float | None, float | None]:
    by_name = {r.pipeline: r.images_per_second for r in rows if r.error is None}
    return by_name.get("classic"), by_name.get("resident")


def _only(rows: Sequence[Row], kind: type[RowT]) -> list[RowT]:
    return [r for r in rows if isinstance(r, kind)]
