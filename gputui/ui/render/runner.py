"""Pure renderers for the runner pane: Rich text and tables from a session, no app needed."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gputui.device import Device
from gputui.format import NA, fmt_bytes, fmt_counted, fmt_ips, fmt_times, one_line
from gputui.jobs.config import ALLOW_DOWNLOAD
from gputui.jobs.events import DeviceOption, Error, Memory, Placement, PlacementRow, Progress
from gputui.jobs.experiments.report import render_result
from gputui.jobs.results import (
    ExperimentResult,
    Phase,
    RunRecord,
    Session,
    Speedup,
    run_names,
)

MUTED = "dim"
BAR_CHAR = "█"
TRACK_CHAR = "·"
CHOOSE_SYNTHETIC = "choose the synthetic data set under Data"
"""What the pane says to do where a job's CIFAR-10 error says to allow the download: the
pane has no control for that (``GPUTUI_RUNNER_DEFAULTS`` turned it off), but it has this."""


def error_message(error: Error) -> str:
    """``error``'s line as the pane says it: a data error's way out in the pane's own
    controls (:data:`CHOOSE_SYNTHETIC`) rather than a command's."""
    if error.kind != "data":
        return error.message
    return error.message.replace(ALLOW_DOWNLOAD, CHOOSE_SYNTHETIC)


def device_label(option: DeviceOption) -> Text:
    """A device choice: usable ones plain, unusable ones greyed out with their reason."""
    if option.usable:
        return Text(f"{option.name} · {option.description}")
    return Text(f"{option.name} · unusable: {option.reason or 'unknown reason'}", style=MUTED)


def progress_line(progress: Progress | None, epochs: int, device: Device) -> Text:
    """``epoch 2/3 · step 40/196 · 18,204 img/s · loss 1.234``."""
    if progress is None:
        return Text(f"{device} · starting (torch import, data)…", style=MUTED)
    return Text(
        f"epoch {progress.epoch}/{epochs} · step {progress.step}/"
        f"{progress.steps_per_epoch} · {fmt_ips(progress.images_per_second)} · "
        f"loss {progress.loss:.3f}"
    )


def ended_line(run: RunRecord) -> Text:
    """Beside an ended run's bar: where a stopped run stopped (``stopped in epoch 2/3 · step
    40/196``); nothing for a run that finished or failed (the status line says)."""
    if run.status != "stopped":
        return Text("")
    epochs = run.started.epochs if run.started is not None else run.config.epochs
    last = run.last_progress
    if last is not None and last.epoch > len(run.epochs):
        where = f"in epoch {last.epoch}/{epochs} · step {last.step}/{last.steps_per_epoch}"
    elif run.epochs:
        where = f"after epoch {len(run.epochs)}/{epochs}"
    else:
        where = "before its first step"
    return Text(f"{run.device} stopped {where}", style=MUTED)


def status_line(session: Session | None) -> Text:
    """One line: what the pane is doing, or why it stopped (an error's one line)."""
    if session is None:
        return Text("Idle: choose a device, then r to train or c to compare.", style=MUTED)
    phase = session.phase
    current = session.current
    if phase is Phase.FAILED:
        failed = next(run for run in session.runs if run.error is not None)
        assert failed.error is not None
        where = str(failed.device)
        if session.scaling is not None:
            where = fmt_counted(getattr(failed.config, "world_size", 1), "rank")
        return Text.assemble(
            ("✗ ", "bold red"),
            (f"{where}: {error_message(failed.error)}", "red"),
            ("  (e: details)", MUTED),
        )
    if phase is Phase.RUNNING:
        which = f" (run {len(session.runs)} of {len(session.configs)})" if session.compare else ""
        if session.scaling is not None and current is not None:
            ranks = getattr(current.config, "world_size", 1)
            which = (
                f" · {fmt_counted(ranks, 'rank')}, {session.scaling} scaling "
                f"(world size {len(session.runs)} of {len(session.configs)})"
            )
        device = current.device if current is not None else "?"
        started = current.started if current is not None else None
        data = f" · {started.dataset}, {started.train_images:,} images" if started else ""
        data += f" · {started.math}" if started and started.math else ""
        return Text(f"▶ training on {device}{which}{data}", style="bold")
    if phase is Phase.STOPPED:
        return Text("■ stopped", style="yellow")
    if session.scaling is not None:
        sizes = ", ".join(str(getattr(run.config, "world_size", 1)) for run in session.runs)
        return Text(f"✓ scaling finished: {sizes} ranks", style="green")
    done = ", ".join(
        f"{name} {fmt_counted(run.finished.epochs_completed, 'epoch')}"
        for run, name in zip(session.runs, run_names(session.runs), strict=True)
        if run.finished is not None
    )
    return Text(f"✓ finished: {done}", style="green")


def brief_line(session: Session | None) -> Text:
    """The runner's state and last figure in one line, under the monitor: the progress of the
    run in flight (``▶ cpu · epoch 2/3 · step 8/16 · 3,957 img/s · loss 2.303``), where a
    stopped run stopped, a comparison's steady speedup (``✓ cuda:0 26.08x cpu``) or each
    run's throughput; a failed or idle runner's :func:`status_line`."""
    run = session.current if session is not None else None
    if session is None or run is None or session.phase is Phase.FAILED:
        return status_line(session)
    if session.phase is Phase.RUNNING:
        epochs = run.started.epochs if run.started is not None else run.config.epochs
        where = f"▶ {run.device} · " if run.progress is not None else "▶ "
        return Text.assemble((where, "bold"), progress_line(run.progress, epochs, run.device))
    if session.phase is Phase.STOPPED:
        return Text.assemble(status_line(session), " · ", ended_line(run))
    result, runs = session.speedup, session.runs
    if result is not None and result.steady is not None:
        figures = f"{result.other} {fmt_times(result.steady, precision=2)} {result.baseline}"
        warning = f" · ⚠ {result.warning}" if result.warning else ""
        return Text.assemble(("✓ ", "green"), figures, (warning, "yellow"))
    each = zip(runs, run_names(runs), strict=True)
    figures = " · ".join(f"{name} {fmt_ips(run.best_images_per_second)}" for run, name in each)
    return Text.assemble(("✓ ", "green"), figures)


def unusable_gpus_note(devices: Sequence[DeviceOption], shown: int) -> str | None:
    """The GPU panel's line where the installed torch cannot use GPUs it shows (``shown`` of
    them), with the Doctor's key and why (as the device choices say); ``None`` where torch
    can use them all."""
    gpus = [option for option in devices if option.name.kind in ("cuda", "xpu")]
    usable = sum(option.usable for option in gpus)
    if usable >= shown:
        return None
    which = f"{shown - usable} of these {shown} GPUs" if usable else "these GPUs"
    reason = next((option.reason for option in gpus if option.reason), None)
    why = f": {reason.partition(';')[0]}" if reason else ""
    return one_line(f"⚠ torch cannot use {which} (d: Doctor){why}")  # (a torch's own text)


def epochs_table(runs: Sequence[RunRecord]) -> Table:
    """Every finished epoch of every run: seconds, images/s, loss, accuracy; warm-up marked."""
    table = Table(box=None, pad_edge=False, header_style="bold", expand=False)
    table.add_column("Device")
    table.add_column("Epoch", justify="right")
    table.add_column("Seconds", justify="right")
    table.add_column("img/s", justify="right")
    table.add_column("Loss", justify="right")
    table.add_column("Acc", justify="right")
    for column in table.columns:
        column.no_wrap = True
    for run, name in zip(runs, run_names(runs), strict=True):
        for epoch in run.epochs:
            style = MUTED if epoch.warmup else ""
            table.add_row(
                name,
                f"{epoch.epoch}{' warm-up' if epoch.warmup else ''}",
                f"{epoch.seconds:.2f}",
                f"{epoch.images_per_second:,.0f}",
                f"{epoch.loss:.3f}",
                NA if epoch.accuracy is None else f"{epoch.accuracy:.1%}",
                style=style,
            )
    if not table.rows:
        table.add_row("", "", Text("no epoch finished yet", style=MUTED), "", "", "")
    return table


def throughput_chart(runs: Sequence[RunRecord], width: int) -> Text:
    """A bar per run: its steady throughput (warm-up excluded when a steady epoch exists)."""
    rows = []
    for run, name in zip(runs, run_names(runs), strict=True):
        steady = run.steady
        if steady is not None and not steady.includes_warmup:
            kind = "steady"
        else:
            kind = "warm-up" if run.epochs else "so far"
        rows.append((name, run.best_images_per_second, f"({kind})"))
    return _bar_chart(rows, width, "green", after_width=len("(warm-up)"))


def _bar_chart(
    rows: Sequence[tuple[str, float | None, str]], width: int, first: str, after_width: int = 0
) -> Text:
    """A bar per ``(label, images/s, after)`` row on one scale, the figure beside it, then
    ``after`` (muted, ``after_width`` cells); the first bar in ``first``, the rest cyan."""
    top = max((value for _, value, _ in rows if value), default=0.0)
    label_width = max((len(label) for label, _, _ in rows), default=0)
    numbers = [fmt_ips(value) for _, value, _ in rows]
    number_width = max((len(number) for number in numbers), default=0)
    beside = number_width + 2 + (after_width + 1 if after_width else 0)
    bar_width = max(width - label_width - beside, 4)
    text = Text()
    for index, ((label, value, after), number) in enumerate(zip(rows, numbers, strict=True)):
        filled = round(bar_width * value / top) if value and top else 0
        if index:
            text.append("\n")
        text.append(label.ljust(label_width) + " ")
        text.append(BAR_CHAR * filled, style=first if index == 0 else "cyan")
        text.append(TRACK_CHAR * (bar_width - filled), style=MUTED)
        text.append(f" {number.rjust(number_width)}")
        if after:
            text.append(" ").append(after, style=MUTED)
    return text


def speedup_text(result: Speedup) -> Text:
    """``Speedup of cuda:0 over cpu: 3.42× steady``, the ratio of each epoch, and the
    comparison's warning (a device against itself measures noise).

    ``forming…`` only while a figure is on its way: once both runs ended without one,
    the line says ``n/a`` and why.
    """
    text = Text()
    text.append(f"Speedup of {result.other} over {result.baseline}: ", style="bold")
    if result.steady is not None:
        text.append(fmt_times(result.steady, precision=2), style="bold green")
        if result.steady_includes_warmup:
            text.append(" over the only epoch, warm-up included")
        else:
            text.append(" steady, warm-up excluded")
    elif result.so_far is not None:
        text.append(fmt_times(result.so_far, precision=2), style="bold yellow")
        text.append(" forming (this epoch so far)")
    elif result.ended:
        text.append(NA, style=MUTED)
        text.append(" (a run ended before its first epoch did)", style=MUTED)
    else:
        text.append("forming…", style=MUTED)
    if result.per_epoch:
        epochs = "  ".join(
            f"{epoch}{' (warm-up)' if epoch == 1 and result.warmup is not None else ''}: "
            f"{fmt_times(ratio, precision=2)}"
            for epoch, ratio in result.per_epoch
        )
        text.append(f"\nPer epoch: {epochs}", style=MUTED)
    if result.warning and not (result.ended and result.steady is None):  # a figure, or coming
        text.append(f"\n⚠ {result.warning}", style="yellow")
    if result.verdict:
        text.append(f"\n{result.verdict}", style=MUTED)
    return text


PLACEMENT_COLUMNS = (
    ("Group", False),
    ("Device", False),
    ("Dtype", False),
    ("Params", True),
    ("Adam state", True),
    ("State on", False),
    ("Total", True),
)
"""The placement table's headings, and whether the column holds numbers (right-aligned)."""


def placement_table(placement: Placement) -> Group:
    """Each parameter group's device, dtype and bytes (optimizer state included), then batches.

    Where the pane is narrow (80 columns), the headings wider than their column's values
    (``Adam state``, ``State on``) take two lines: a number is never cut.
    """
    modules = sum(row.params for row in placement.rows if row.kind == "module")
    rows = [
        (
            _group_label(row, modules),
            row.device or NA,
            (row.dtype or NA).removeprefix("torch."),
            fmt_bytes(row.param_bytes + row.buffer_bytes),
            fmt_bytes(row.state_bytes),
            row.state_device or NA,
            fmt_bytes(row.param_bytes + row.buffer_bytes + row.state_bytes),
        )
        for row in placement.rows
    ]
    table = Table(box=None, pad_edge=False, header_style="bold", expand=False)
    for index, (heading, right) in enumerate(PLACEMENT_COLUMNS):
        widest = max((len(row[index]) for row in rows), default=0)
        wraps = len(heading) > widest  # only a heading wraps, onto a second line
        table.add_column(
            heading,
            justify="right" if right else "left",
            no_wrap=not wraps,
            min_width=widest if wraps else None,
        )
    for row in rows:
        table.add_row(*row)
    inputs = Text.assemble(
        ("Batches: ", "bold"),
        f"inputs on {placement.inputs_device} ({placement.inputs_dtype.removeprefix('torch.')}, "
        f"{placement.inputs_memory_format}) · labels on {placement.labels_device} · "
        f"dataset on {placement.dataset_device}" + (" · pinned" if placement.pinned else ""),
    )
    return Group(table, inputs)


def _group_label(row: PlacementRow, module_params: int) -> str:
    """A row's name; the optimizer's group that holds every module's parameters reads as
    their total (``param_groups[0]`` beside ``conv`` and ``fc`` read as a third part)."""
    if row.kind == "param_group" and row.params == module_params:
        return "total (Adam)"
    return row.group


def memory_line(memory: Memory) -> Text:
    """The trainer's memory on its device, each figure ``n/a`` where the device has none."""
    parts: list[str] = []
    if memory.allocated_bytes is not None:
        parts.append(f"allocated {fmt_bytes(memory.allocated_bytes)}")
    if memory.reserved_bytes is not None:
        parts.append(f"reserved {fmt_bytes(memory.reserved_bytes)}")
    if memory.driver_bytes is not None:
        parts.append(f"driver {fmt_bytes(memory.driver_bytes)}")
    peak = f"{memory.peak_scope} peak" if memory.peak_scope else "peak"  # epoch or process
    parts.append(f"{peak} {fmt_bytes(memory.peak_bytes)}")
    parts.append(f"process RSS {fmt_bytes(memory.rss_bytes)}")
    return Text.assemble((f"Memory on {memory.device}: ", "bold"), " · ".join(parts))


def error_detail(error: Error) -> Text:
    """The error's line in full, then its detail (traceback or stderr tail) where it has
    one: a job that said only its line has no more to show."""
    text = Text(f"{error_message(error)} [{error.kind}]", style="bold red")
    if error.suggested_batch_size:
        text.append(f"\nA batch size that fits: {error.suggested_batch_size}")
    if error.detail.strip():
        text.append(f"\n{error.detail.strip()}", style=MUTED)
    return text


def cpu_threads_note(threads: int | None, cores: int | None, command: str, effect: str) -> Text:
    """Why the CPU's figures here are not ``command``'s: the runner gave CPU work
    ``threads`` of ``cores`` (a core kept for the monitor), where ``command`` uses every
    core; empty when it had them all (or either count is unknown).

    Args:
        threads: The threads the CPU work had (a job's threads, all ranks together).
        cores: The cores it could have had.
        command: The command that uses every core (``gputui bench``).
        effect: What the difference does to the figures shown, after "so".
    """
    if threads is None or cores is None or threads >= cores:
        return Text()
    why = "a core kept for the monitor" if threads == cores - 1 else "as the runner's defaults ask"
    return Text(
        f"note: the CPU ran here on {fmt_counted(threads, 'thread')} of this machine's "
        f"{fmt_counted(cores, 'core')} ({why}); {command} uses all {cores}, so {effect}",
        style=MUTED,
    )


def session_threads_note(session: Session, cores: int | None) -> Text:
    """:func:`cpu_threads_note` for a training session's CPU runs (the fewest threads)."""
    threads = [
        run.started.num_threads
        for run in session.runs
        if run.started is not None and run.device.kind == "cpu"
    ]
    return cpu_threads_note(
        min(threads, default=None),
        cores,
        "gputui bench",
        "its CPU figures are higher, and speedups over the CPU lower, than these",
    )


def session_body(session: Session | None, width: int, cores: int | None = None) -> RenderableType:
    """Everything under the progress bar: epochs, chart, speedup, the CPU's threads against
    ``cores`` (:func:`session_threads_note`), placement, memory."""
    if session is None or not session.runs:
        return Text(
            "Epoch times, throughput, the speedup of a comparison and where each tensor "
            "lives appear here.",
            style=MUTED,
        )
    parts: list[RenderableType] = [epochs_table(session.runs), Text()]
    if any(run.best_images_per_second for run in session.runs):
        parts += [Text("Throughput", style="bold"), throughput_chart(session.runs, width), Text()]
    result = session.speedup
    if result is not None:
        parts += [speedup_text(result), Text()]
    note = session_threads_note(session, cores)
    if note.plain:
        parts += [note, Text()]
    current = session.current
    shown = current if current is not None and current.placement else None
    shown = shown or next((run for run in reversed(session.runs) if run.placement), None)
    if shown is not None and shown.placement is not None:
        parts += [
            Text(f"Placement on {shown.device}", style="bold"),
            placement_table(shown.placement),
        ]
    memory = next((run.memory for run in reversed(session.runs) if run.memory), None)
    if memory is not None:
        parts.append(memory_line(memory))
    for run in session.runs:
        if run.started is not None and run.started.dataset_note:  # not the data asked for: why
            parts.append(Text(f"note ({run.device}): {run.started.dataset_note}", style=MUTED))
        for said in run.notes:
            parts.append(Text(f"note ({run.device}): {said}", style=MUTED))
    return Group(*parts)


def experiment_status(result: ExperimentResult, running: bool) -> Text:
    """One line: the experiment running, finished, stopped, or its error."""
    if result.error is not None:
        return Text.assemble(
            ("✗ ", "bold red"),
            (f"{result.experiment}: {error_message(result.error)}", "red"),
            ("  (e: details)", MUTED),
        )
    if running:
        return Text(f"▶ experiment {result.experiment}", style="bold")
    if result.finished is not None and result.finished.stopped:
        return Text(f"■ experiment {result.experiment} stopped", style="yellow")
    return Text(f"✓ experiment {result.experiment} finished", style="green")


def experiment_chart(result: ExperimentResult, width: int) -> Text:
    """A bar per measurement: its images per second, on one scale."""
    bars: list[tuple[str, float | None, str]] = []
    for device in result.devices.values():
        for row in device.rows:
            value = getattr(row, "images_per_second", None)
            if value is None:
                continue
            what = (
                getattr(row, "pipeline", None)
                or {"every_step": "loss every step", "once": "loss once"}.get(
                    str(getattr(row, "mode", "")), ""
                )
                or f"batch {getattr(row, 'batch_size', '')}"
            )
            bars.append((f"{row.device} {what}", float(value), ""))
    return _bar_chart(bars, width, "cyan")


def experiment_body(
    result: ExperimentResult, width: int, cores: int | None = None
) -> RenderableType:
    """The experiment's table and conclusion (as the CLI prints them), the CPU's threads
    against ``cores`` (:func:`cpu_threads_note`), then a chart."""
    parts: list[RenderableType] = [Text(render_result(result))]
    started = result.started
    on_cpu = started is not None and any(d.kind == "cpu" for d in started.devices)
    note = cpu_threads_note(
        started.threads if started is not None and on_cpu else None,
        cores,
        "gputui experiment",
        "its CPU figures are higher than these",
    )
    if note.plain:
        parts += [Text(), note]
    chart = experiment_chart(result, width)
    if chart.plain:
        parts += [Text(), Text("Throughput", style="bold"), chart]
    return Group(*parts)
