"""The reports of training runs and experiments, as text and JSON: what ``gputui bench``
and ``gputui experiment`` print, and what the runner pane shows of an experiment.

Torch-free and Textual-free, from the results model (:mod:`gputui.jobs.results`).
Progress goes to standard error as it arrives (:class:`ProgressLine` for runs, one
rewritten line on a terminal; :class:`ProgressLines` for experiments); the tables and
JSON go to standard output once the job ended.

Every line that holds a path or a message goes through :func:`gputui.format.one_line`:
a value with a newline or a terminal escape cannot break the display.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, TextIO

from gputui.format import (
    fmt_bytes,
    fmt_columns,
    fmt_count,
    fmt_counted,
    fmt_fraction,
    fmt_ms,
    fmt_number,
    fmt_share,
    fmt_times,
    one_line,
)
from gputui.jobs.conclusions import bf16_clause, sentence
from gputui.jobs.config import RunConfig
from gputui.jobs.events import (
    BatchSweepRow,
    DataProgress,
    DeviceFailed,
    EpochFinished,
    Error,
    Event,
    ExperimentDevice,
    ExperimentStarted,
    Note,
    PipelineRow,
    Placement,
    Progress,
    Row,
    RunStarted,
    SyncStallRow,
    WorldJoined,
)
from gputui.jobs.results import (
    ExperimentResult,
    RunRecord,
    bf16_gain,
    run_marks,
    run_names,
    speedup,
)

# -- training runs ------------------------------------------------------------------------


class ProgressLine:
    """Compact progress on standard error: one rewritten line on a terminal.

    Every line goes through :func:`one_line`: a path or message holding a newline or
    a terminal escape cannot break the display.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._open = False

    def show(self, config: RunConfig, event: Event, label: str | None = None) -> None:
        """Show what ``event`` says about the run on ``config.device`` (or ``label``)."""
        device = label or config.device
        if isinstance(event, DataProgress) and self.tty:
            total = f"/{fmt_bytes(event.total_bytes)}" if event.total_bytes else ""
            self._rewrite(f"downloading CIFAR-10: {fmt_bytes(event.done_bytes)}{total}")
        elif isinstance(event, Progress) and self.tty:
            self._rewrite(
                f"{device}: epoch {event.epoch}/{config.epochs}  step {event.step}/"
                f"{event.steps_per_epoch}  {event.images_per_second:,.0f} img/s  "
                f"loss {event.loss:.3f}"
            )
        elif isinstance(event, RunStarted):
            self._line(
                f"{device}: {event.device_name}; {event.dataset} ({event.train_images} images), "
                f"{event.pipeline}, {event.precision}, batch {event.batch_size}"
            )
        elif isinstance(event, EpochFinished):
            warm = " (warm-up)" if event.warmup else ""
            self._line(
                f"{device}: epoch {event.epoch}/{config.epochs}  {event.seconds:.2f} s{warm}  "
                f"{event.images_per_second:,.0f} img/s  loss {event.loss:.3f}  "
                f"accuracy {fmt_fraction(event.accuracy)}"
            )
        elif isinstance(event, Note):
            self._line(f"{device}: note: {event.message}")
        elif isinstance(event, Error):
            self._line(f"{device}: error: {event.message}")

    def end(self) -> None:
        """Finish a rewritten line, if one is open."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False

    def _rewrite(self, text: str) -> None:
        self.stream.write("\r\033[K" + one_line(text))
        self.stream.flush()
        self._open = True

    def _line(self, text: str) -> None:
        if self._open:
            self.stream.write("\r\033[K")
            self._open = False
        self.stream.write(one_line(text) + "\n")
        self.stream.flush()


def _speedup(runs: list[RunRecord], run: RunRecord) -> float | None:
    """``run``'s speedup over the first run (by the steady-epoch rule)."""
    return speedup(runs[0], run).steady if runs else None


def render_table(runs: list[RunRecord]) -> str:
    """The result as text: which dataset ran, one row per device (and precision, when there
    are several), what bf16 gained over fp32, placement verdicts."""
    lines: list[str] = []
    precisions = list(dict.fromkeys(run.config.precision for run in runs))
    several = len(precisions) > 1
    first = next((run.started for run in runs if run.started is not None), None)
    if first is not None:
        where = (
            "generated locally"
            if first.dataset_source == "generated"
            else f"from {first.dataset_source}"
        )
        lines.append(f"dataset: {first.dataset} ({where})")
        if first.dataset_note:
            lines.append(f"note: {first.dataset_note}")
        lines.append(
            f"{first.train_images} training / {first.test_images} held-out images, "
            f"{first.pipeline} pipeline, {' and '.join(precisions)}, batch {first.batch_size}, "
            f"{fmt_counted(first.epochs, 'epoch')}"
            f"{', compiled' if first.compile else ''}"
        )
        if first_world := next((run.world for run in runs if run.world), None):
            lines.append(world_line(first_world))
        maths = {
            label: run.started.math
            for run, label in zip(runs, run_names(runs, with_precision=several), strict=True)
            if run.started and run.started.math
        }
        if len(set(maths.values())) == 1:
            lines.append(f"math: {next(iter(maths.values()))}")
        elif maths:
            lines.append("math: " + "; ".join(f"{label}: {m}" for label, m in maths.items()))
        lines.append("")
    single = any(run.steady is not None and run.steady.includes_warmup for run in runs)
    mark = "*" if single else ""
    rows = [
        [
            "device",
            "name",
            *(["precision"] if several else []),
            "warm-up s",
            f"epoch s{mark}",
            f"images/s{mark}",
            "loss",
            "accuracy",
            "speedup",
        ]
    ]
    marks = run_marks(runs, with_precision=several)
    for run, mark in zip(runs, marks, strict=True):
        name = run.started.device_name if run.started is not None else ""
        which = [run.device + mark, name, *([run.config.precision] if several else [])]
        if run.error is not None:
            rows.append([*which, f"error: {run.error.message}"])
            continue
        if run.status == "stopped" and not run.epochs:
            began = run.started is not None or run.finished is not None
            rows.append([*which, "stopped" if began else "not run"])
            continue
        last = run.epochs[-1] if run.epochs else None
        steady = run.steady
        rows.append(
            [
                *which,
                fmt_number(run.epochs[0].seconds if run.epochs else None, "{:.2f}"),
                fmt_number(steady.seconds if steady else None, "{:.2f}"),
                fmt_number(steady.images_per_second if steady else None, "{:,.0f}"),
                fmt_number(last.loss if last else None, "{:.3f}"),
                fmt_fraction(last.accuracy if last else None),
                fmt_times(_speedup(runs, run), precision=2),
            ]
        )
    figures = 3 if several else 2  # the first right-aligned column
    lines += fmt_columns(rows, right=set(range(figures, figures + 6)))
    lines.append("")
    legend = "warm-up s: epoch 1 (cuDNN autotune, compilation); epoch s, images/s: epochs 2+"
    if single:
        legend += "; * only epoch 1 ran, so these include warm-up"
    names = run_names(runs, with_precision=several)
    if runs:
        legend += f"; speedup: over {names[0]}"
    lines.append(legend)
    stopped = [
        _stopped_after(run, label)
        for run, label in zip(runs, names, strict=True)
        if run.status == "stopped"
    ]
    if stopped:
        lines.append(f"stopped: {'; '.join(stopped)}")
    lines += [verdict for run in runs if (verdict := bf16_verdict(runs, run))]
    for run, mark in zip(runs, marks, strict=True):
        verdict = placement_verdict(run, run.device + mark)
        if verdict:
            lines.append(verdict)
    recorded = [run.run_dir for run in runs if run.run_dir]
    if recorded:
        lines.append(f"run folders: {', '.join(recorded)}")
    return "\n".join(lines)


def _stopped_after(run: RunRecord, label: str) -> str:
    """How far a stopped run got: ``cpu after 1 of 3 epochs``, ``cuda:0 not run``."""
    if run.started is None and run.finished is None:
        return f"{label} not run"
    total = fmt_counted(run.config.epochs, "epoch")
    return f"{label} after {len(run.epochs)} of {total}"


def bf16_verdict(runs: list[RunRecord], run: RunRecord) -> str | None:
    """One sentence on what bf16 ``run`` gained over fp32 on its device, from the measured
    speedup (:func:`bf16_gain`); ``None`` without both runs' figures."""
    gain = bf16_gain(runs, run)
    if gain is None:
        return None
    fast = run.started.cpu_bf16 if run.started is not None else None
    return sentence([bf16_clause(run.device, gain, cpu_fast_bf16=fast)])


def placement_verdict(run: RunRecord, label: str | None = None) -> str | None:
    """One line that says whether every tensor of the run sits on its device (the run named
    ``label``, else by its device)."""
    placement = run.placement
    if placement is None:
        return None
    device = placement.inputs_device
    where = {row.device for row in placement.rows} | {
        row.state_device for row in placement.rows if row.state_device
    }
    steps = {row.step_device for row in placement.rows if row.step_device}
    state_bytes = sum(row.state_bytes for row in placement.rows if row.kind == "module")
    param_bytes = sum(row.param_bytes for row in placement.rows if row.kind == "module")
    text = (
        f"{label or run.device} placement: parameters ({fmt_bytes(param_bytes)}), Adam state "
        f"({fmt_bytes(state_bytes)}) and input batches on {', '.join(sorted(where | {device}))}"
    )
    if steps - {device}:
        text += f" (Adam's step counters on {', '.join(sorted(steps))}, as stock Adam keeps them)"
    return text


_STARTED_FIELDS = (
    "dataset",
    "dataset_source",
    "dataset_note",
    "train_images",
    "test_images",
    "pipeline",
    "precision",
    "math",
    "batch_size",
    "compile",
    "channels_last",
    "num_threads",
    "torch_version",
)
"""What ``bench --json`` repeats of each run's ``RunStarted`` (``None`` before it came)."""


def bench_json(runs: list[RunRecord], warnings: Sequence[str] = ()) -> dict[str, Any]:
    """The result as a JSON-ready dict: ``{"runs": [...], "warnings": [...]}``, each
    warning one line (e.g. GPUs here that this torch cannot use)."""
    out = []
    for run in runs:
        started = run.started
        steady = run.steady
        out.append(
            {
                "device": run.device,
                "device_name": started.device_name if started else None,
                "status": run.status,
                "error": asdict(run.error) if run.error else None,
                **{name: getattr(started, name, None) for name in _STARTED_FIELDS},
                "data_seconds": run.data_ready.seconds if run.data_ready else None,
                "warmup_seconds": run.epochs[0].seconds if run.epochs else None,
                "epoch_seconds": steady.seconds if steady else None,
                "images_per_second": steady.images_per_second if steady else None,
                "speedup": _speedup(runs, run),
                "bf16_over_fp32": _bf16_json(runs, run),
                "epochs": [
                    {
                        "epoch": e.epoch,
                        "seconds": e.seconds,
                        "images_per_second": e.images_per_second,
                        "loss": e.loss,
                        "accuracy": e.accuracy,
                        "warmup": e.warmup,
                        "eval_seconds": e.eval_seconds,
                    }
                    for e in run.epochs
                ],
                "placement": [asdict(row) for row in run.placement.rows] if run.placement else [],
                "inputs": _inputs(run.placement),
                "memory": asdict(run.memory) if run.memory else None,
                "notes": run.notes,
                "run_dir": run.run_dir,
                "world": asdict(run.world) if run.world else None,
                "step_times": asdict(run.step_times) if run.step_times else None,
            }
        )
    return {"runs": out, "warnings": list(warnings)}


def world_line(world: WorldJoined) -> str:
    """``world: 2 ranks on 1 node (gloo), batch 64 per rank, 128 in all; ...``."""
    return (
        f"world: {fmt_counted(world.world_size, 'rank')} on {fmt_counted(world.nodes, 'node')} "
        f"({world.backend}), batch {world.per_rank_batch} per rank, {world.global_batch} in "
        "all; images/s are the whole job's"
    )


# -- gputui scale ---------------------------------------------------------------------


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
    on_cpu = run.device.strip().lower().startswith("cpu")
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
                "is more than the ranks can add: noise (a busy machine, a slow first run), "
                "not scaling; run again with more data or epochs"
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
            f"{started.dataset}, {started.train_images} training images, "
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
        which = [str(row["world_size"]), row["backend"] or ""]
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
    base = f"{_ranks(runs[0])} rank{'s' if _ranks(runs[0]) != 1 else ''}" if runs else "1 rank"
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


def _bf16_json(runs: list[RunRecord], run: RunRecord) -> dict[str, Any] | None:
    gain = bf16_gain(runs, run)
    return None if gain is None else {"speedup": gain, "verdict": bf16_verdict(runs, run)}


def _inputs(placement: Placement | None) -> dict[str, Any] | None:
    if placement is None:
        return None
    return {
        "device": placement.inputs_device,
        "dtype": placement.inputs_dtype,
        "memory_format": placement.inputs_memory_format,
        "labels_device": placement.labels_device,
        "dataset_device": placement.dataset_device,
        "pinned": placement.pinned,
    }


# -- experiments ---------------------------------------------------------------------------


class ProgressLines:
    """One line on standard error per device and per row, as they arrive.

    A run's :class:`Error` is left out: the handler writes it once, at the end.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._downloading = False

    def show(self, event: Event) -> None:
        """Write what ``event`` says, if it says anything worth a line."""
        if isinstance(event, Error):
            return
        if isinstance(event, DataProgress):
            line = None if self._downloading else "downloading CIFAR-10..."
            self._downloading = True
        else:
            line = experiment_progress_line(event)
        if line:
            self.stream.write(line + "\n")
            self.stream.flush()


def experiment_progress_line(event: Event) -> str | None:
    """One line for a progress display, or ``None`` for events that need none."""
    if isinstance(event, ExperimentStarted):
        return (
            f"{event.experiment}: {event.dataset} data ({event.images:,} images), "
            f"{fmt_counted(event.threads, 'thread')}, "
            f"devices {', '.join(event.devices)}"
        )
    if isinstance(event, ExperimentDevice):
        return f"{event.device}: {event.device_name}"
    if isinstance(event, BatchSweepRow):
        if event.error is not None or event.data_share is None:
            return f"{event.device}: batch {event.batch_size}: {event.error}"
        return (
            f"{event.device}: batch {event.batch_size}: {fmt_count(event.images_per_second)} "
            f"images/s, data {fmt_share(event.data_share)} of each step"
        )
    if isinstance(event, SyncStallRow):
        how = "every step" if event.mode == "every_step" else "once"
        if event.error is not None or event.ms_per_step is None:
            return f"{event.device}: loss read {how}: {event.error}"
        return f"{event.device}: loss read {how}: {fmt_ms(event.ms_per_step)} ms per step"
    if isinstance(event, PipelineRow):
        if event.error is not None or event.images_per_second is None:
            return f"{event.device}: {event.pipeline}: {event.error}"
        return f"{event.device}: {event.pipeline}: {fmt_count(event.images_per_second)} images/s"
    if isinstance(event, DeviceFailed):
        return f"{event.device}: error: {event.message}"
    if isinstance(event, Note):
        return f"note: {event.message}"
    if isinstance(event, Error) and event.kind not in {"config", "device"}:
        return f"error: {event.message}"
    return None


def render_result(result: ExperimentResult) -> str:
    """The result as text: what ran, one table row per measurement, the conclusion."""
    lines: list[str] = []
    started = result.started
    if started is not None:
        where = (
            "generated locally"
            if started.dataset_source == "generated"
            else f"from {started.dataset_source}"
        )
        lines.append(
            f"{result.experiment}: {started.dataset} data ({where}), {started.images:,} images; "
            f"up to {started.steps} timed steps per measurement after {started.warmup_steps} "
            f"warm-up, about {started.budget_s:g} s each; "
            f"{fmt_counted(started.threads, 'CPU thread')}"
        )
        if started.dataset_note:
            lines.append(f"note: {started.dataset_note}")
    for device in result.devices.values():
        if device.info is not None:
            lines.append(f"{device.device}: {device.info.device_name}")
            if device.info.data_phase:
                lines.append(f"  data = {device.info.data_phase}")
    lines.append("")
    lines += _table(result)
    failures = [d.failure for d in result.devices.values() if d.failure is not None]
    lines += [f"{failure.device}: error: {failure.message}" for failure in failures]
    if result.ended and result.status == "stopped":  # while it runs, nothing has stopped
        part = [d for d in result.devices.values() if result.device_status(d.device) == "stopped"]
        stopped = [f"{d.device} after {len(d.rows)} row{'s' * (len(d.rows) != 1)}" for d in part]
        stopped += [f"{device} not measured" for device in result.unreached]
        lines.append(f"stopped: {'; '.join(stopped) or 'before the first measurement'}")
    if result.conclusion:
        lines += ["", result.conclusion]
    return "\n".join(lines)


_TABLES = {
    "batch-sweep": (
        ("device", "batch", "steps", "images/s", "data ms", "compute ms", "data share"),
        None,
    ),
    "sync-stall": (
        ("device", "loss read", "batch", "steps", "ms/step", "images/s", "spread ms"),
        "spread ms: slowest round minus fastest (the noise)",
    ),
    "pipelines": (
        (
            "device",
            "pipeline",
            "batch",
            "steps",
            "ms/step",
            "images/s",
            "spread ms",
            "setup s",
            "workers",
        ),
        "spread ms: slowest round minus fastest (the noise); "
        "setup s: copying the dataset to the device before the first step",
    ),
}
"""Each experiment's table: its header (numbers from ``batch`` on) and its legend."""


def _table(result: ExperimentResult) -> list[str]:
    header, legend = _TABLES[result.experiment]
    rows = [_cells(row) for device in result.devices.values() for row in device.rows]
    lines = fmt_columns([list(header), *rows], right=range(header.index("batch"), len(header)))
    return [*lines, "", legend] if legend else lines


def _cells(row: Row) -> list[str]:
    """One table row: what was measured, then the figures (or why there are none)."""
    if isinstance(row, BatchSweepRow):
        what = [row.device, str(row.batch_size)]
        figures = [
            fmt_count(row.images_per_second),
            fmt_ms(row.data_ms),
            fmt_ms(row.compute_ms),
            fmt_share(row.data_share),
        ]
    elif isinstance(row, SyncStallRow):
        how = "every step" if row.mode == "every_step" else "once"
        what = [row.device, how, str(row.batch_size)]
        figures = [fmt_ms(row.ms_per_step), fmt_count(row.images_per_second), fmt_ms(row.spread_ms)]
    else:
        what = [row.device, row.pipeline, str(row.batch_size)]
        figures = [
            fmt_ms(row.ms_per_step),
            fmt_count(row.images_per_second),
            fmt_ms(row.spread_ms),
            fmt_number(row.setup_s, "{:.2f}"),
            str(row.workers),
        ]
    return [*what, row.error] if row.error is not None else [*what, str(row.steps), *figures]
