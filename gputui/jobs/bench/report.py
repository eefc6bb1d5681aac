"""The report of ``gputui bench``'s training runs, as text and JSON, and their progress as it
arrives (:class:`ProgressLine`, which ``gputui scale`` shows its runs with too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, TextIO

from gputui.device import Device, plain
from gputui.format import (
    fmt_bytes,
    fmt_columns,
    fmt_counted,
    fmt_decimal,
    fmt_fraction,
    fmt_number,
    fmt_share,
    fmt_times,
    one_line,
)
from gputui.jobs.conclusions import bf16_clause, sentence
from gputui.jobs.config import RunConfig
from gputui.jobs.events import (
    DataProgress,
    EpochFinished,
    Error,
    Event,
    Note,
    Placement,
    Progress,
    RunStarted,
    WorldJoined,
)
from gputui.jobs.results import (
    RunRecord,
    bf16_gain,
    dataset_origin,
    run_marks,
    run_names,
    speedup,
)
from gputui.jobs.world import backend_text


class ProgressLine:
    """Compact progress on standard error: one rewritten line on a terminal. Every line goes
    through :func:`one_line`: a newline or an escape in a path or message cannot break it."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._open = False

    def show(self, config: RunConfig, event: Event, label: str | None = None) -> None:
        """Show what ``event`` says about the run on ``config.device`` (or ``label``)."""
        device = label or str(config.device)
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


def noise_warnings(runs: list[RunRecord]) -> list[str]:
    """Each speedup over the first run that measures noise (``Speedup.warning``), once."""
    return list(dict.fromkeys(w for run in runs[1:] if (w := speedup(runs[0], run).warning)))


def render_table(runs: list[RunRecord]) -> str:
    """The result as text: which dataset ran on which devices, one row per device (and
    precision, when there are several), a failed run's error numbered below the table (its
    row says ``failed (1)``), what bf16 gained over fp32, placement verdicts. The devices'
    names are said above the table, so that its rows keep within 80 columns."""
    lines: list[str] = []
    precisions = list(dict.fromkeys(run.config.precision for run in runs))
    several = len(precisions) > 1
    first = next((run.started for run in runs if run.started is not None), None)
    names = run_names(runs, with_precision=several)
    if first is not None:
        lines.append(f"dataset: {first.dataset} ({dataset_origin(first.dataset_source)})")
        if first.dataset_note:
            lines.append(f"note: {first.dataset_note}")
        lines.append(
            f"{first.train_images:,} training / {first.test_images:,} held-out images, "
            f"{first.pipeline} pipeline, {' and '.join(precisions)}, batch {first.batch_size}, "
            f"{fmt_counted(first.epochs, 'epoch')}"
            f"{', compiled' if first.compile else ''}"
        )
        graphed = [name for run, name in zip(runs, names, strict=True) if run.graphed]
        if graphed:
            lines.append(f"{', '.join(graphed)}: each step replayed from a CUDA graph once warm")
        if first_world := next((run.world for run in runs if run.world), None):
            lines.append(world_line(first_world, first.torch_build))
        maths = {
            label: run.started.math
            for run, label in zip(runs, names, strict=True)
            if run.started and run.started.math
        }
        if len(set(maths.values())) == 1:
            lines.append(f"math: {next(iter(maths.values()))}")
        elif maths:
            lines.append("math: " + "; ".join(f"{label}: {m}" for label, m in maths.items()))
        lines.append(devices_line(runs))
        lines.append("")
    single = any(run.steady is not None and run.steady.includes_warmup for run in runs)
    mark = "*" if single else ""
    rows = [
        [
            "device",
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
    errors: dict[str, int] = {}
    """Each error's message, numbered in the order the runs failed (one said once)."""
    for run, mark in zip(runs, marks, strict=True):
        which = [f"{run.device}{mark}", *([run.config.precision] if several else [])]
        if run.error is not None:
            number = errors.setdefault(run.error.message, len(errors) + 1)
            rows.append([*which, f"failed ({number})"])
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
    figures = 2 if several else 1  # the first right-aligned column
    lines += fmt_columns(rows, right=set(range(figures, figures + 6)))
    lines += [one_line(f"({number}) {message}") for message, number in errors.items()]
    lines.append("")
    legend = f"warm-up s: epoch 1 ({_warm_up_of(runs)}); epoch s, images/s: epochs 2+"
    if single:
        legend += "; * only epoch 1 ran, so these include warm-up"
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
    lines += [f"warning: {warning}" for warning in noise_warnings(runs)]
    lines += [verdict for run in runs if (verdict := bf16_verdict(runs, run))]
    lines += [line for run, name in zip(runs, names, strict=True) for line in pace_lines(run, name)]
    placements = [
        placement_verdict(run, f"{run.device}{mark}") for run, mark in zip(runs, marks, strict=True)
    ]
    lines += dict.fromkeys(verdict for verdict in placements if verdict)  # each said once
    recorded = [run.run_dir for run in runs if run.run_dir]
    if recorded:
        lines.append(f"run folders: {', '.join(recorded)}")
    return "\n".join(lines)


def devices_line(runs: list[RunRecord]) -> str:
    """``devices: cpu: AMD EPYC 7763 64-Core Processor; cuda:0, cuda:1: NVIDIA H100 80GB
    HBM3``: what each device that started is."""
    named: dict[str, list[Device]] = {}
    for run in runs:
        if run.started is not None:
            devices = named.setdefault(run.started.device_name, [])
            if run.device not in devices:
                devices.append(run.device)
    return "devices: " + "; ".join(
        f"{', '.join(map(str, devices))}: {name}" for name, devices in named.items()
    )


def _warm_up_of(runs: list[RunRecord]) -> str:
    """What epoch 1 pays for beyond the steady epochs, for these runs' devices and flags."""
    paid = ["first allocations"]
    if any(run.device.kind == "cuda" for run in runs):
        paid.append("cuDNN autotune")
    if any(run.config.compile for run in runs):
        paid.append("torch.compile")
    if any(run.graphed for run in runs):
        paid.append("the CUDA graph's capture")
    return ", ".join(paid)


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


def pace_lines(run: RunRecord, label: str) -> list[str]:
    """``cpu pace: ...``: the steady epochs by the wall clock and the device's own, what the
    device did with them (busy share, FLOP/s, images per joule), then the verdict."""
    pace = run.pace
    if pace is None:
        return []
    epochs = fmt_counted(pace.epochs, "epoch")
    text = f"{label} pace: median epoch {pace.wall_s:.3f} s (spread {pace.wall_spread_s:.3f} s"
    text += f", {epochs}) by the wall clock"
    if pace.device_clock == "wall":
        text += ", the CPU's own; busy = wall"
    elif pace.device_s is not None:
        text += f", {pace.device_s:.3f} s (spread {pace.device_spread_s:.3f} s) by its events"
    if pace.busy_share is not None and pace.device_clock != "wall":
        text += f"; busy {fmt_share(pace.busy_share)} of a profiled sample of steps"
    if pace.flops_per_second is not None and run.started:
        per_image = fmt_decimal(run.started.flops_per_image, "FLOP")
        text += f"; {fmt_decimal(pace.flops_per_second, 'FLOP/s')} achieved ({per_image} an image)"
    if pace.images_per_joule is not None:
        text += f"; {pace.images_per_joule:,.0f} images/J"
    return [text, *([pace.verdict.sentence] if pace.verdict else [])]


def placement_verdict(run: RunRecord, label: str) -> str | None:
    """One line that says whether every tensor of the run named ``label`` sits on its device."""
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
    devices = ", ".join(sorted(filter(None, where | {device})))
    text = (
        f"{label} placement: parameters ({fmt_bytes(param_bytes)}), Adam state "
        f"({fmt_bytes(state_bytes)}) and input batches on {devices}"
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
    "torch_build",
    "flops_per_image",
)
"""What ``bench --json`` repeats of each run's ``RunStarted`` (``None`` before it came)."""


def bench_json(runs: list[RunRecord], warnings: Sequence[str] = ()) -> dict[str, Any]:
    """The result as a JSON-ready dict: ``{"runs": [...], "warnings": [...]}``, each
    warning one line (GPUs here that this torch cannot use, :func:`noise_warnings`)."""
    out = []
    for run in runs:
        started = run.started
        steady = run.steady
        out.append(
            {
                "device": str(run.device),
                "device_name": started.device_name if started else None,
                "status": run.status,
                "error": asdict(run.error) if run.error else None,
                **{name: getattr(started, name, None) for name in _STARTED_FIELDS},
                "graphs": run.graphed,  # replayed from a CUDA graph: asked, and no failure
                "data_seconds": run.data_ready.seconds if run.data_ready else None,
                "warmup_seconds": run.epochs[0].seconds if run.epochs else None,
                "epoch_seconds": steady.seconds if steady else None,
                "images_per_second": steady.images_per_second if steady else None,
                "speedup": _speedup(runs, run),
                "bf16_over_fp32": _bf16_json(runs, run),
                "pace": asdict(pace) if (pace := run.pace) else None,
                "epochs": [
                    {key: value for key, value in plain(e).items() if key != "images"}
                    for e in run.epochs
                ],
                "placement": [asdict(row) for row in run.placement.rows] if run.placement else [],
                "inputs": _inputs(run.placement),
                "memory": plain(run.memory) if run.memory else None,
                "notes": run.notes,
                "run_dir": run.run_dir,
                "world": asdict(run.world) if run.world else None,
                "step_times": asdict(run.step_times) if run.step_times else None,
            }
        )
    return {"runs": out, "warnings": [*warnings, *noise_warnings(runs)]}


def world_line(world: WorldJoined, torch_build: str = "") -> str:
    """``world: 2 ranks on 1 node (gloo), batch 64 per rank, 128 in all; ...``; NCCL on a
    ROCm build (``torch_build``) is named RCCL."""
    return (
        f"world: {fmt_counted(world.world_size, 'rank')} on {fmt_counted(world.nodes, 'node')} "
        f"({backend_text(world.backend, torch_build)}), batch {world.per_rank_batch} per rank, "
        f"{world.global_batch} in all; images/s are the whole job's"
    )


def _bf16_json(runs: list[RunRecord], run: RunRecord) -> dict[str, Any] | None:
    gain = bf16_gain(runs, run)
    return None if gain is None else {"speedup": gain, "verdict": bf16_verdict(runs, run)}


def _inputs(placement: Placement | None) -> dict[str, Any] | None:
    """Where the batches and the dataset live: ``placement`` but its rows, ``inputs_`` cut
    from the names (``device``, ``dtype``, ``memory_format``, ``labels_device``...)."""
    if placement is None:
        return None
    fields = plain(placement).items()
    return {key.removeprefix("inputs_"): value for key, value in fields if key != "rows"}
