"""The process screen's lines: who the process is, then its GPU memory and SM % over time.
Text from outside (user, command, workload) goes through :func:`gputui.format.for_screen`
here, whoever fed the history.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from gputui.format import (
    NA,
    fmt_bytes,
    fmt_counted,
    fmt_elapsed,
    fmt_percent,
    for_screen,
    wrap_text,
)
from gputui.telemetry.process_history import ProcessTrack
from gputui.telemetry.readings import GpuProcess, Workload, shown_pid
from gputui.ui.render.draw import HOT, LABEL, MEMORY_SPARK, MUTED, OK, SPARKS, UTIL_SPARK, Line

COMMAND_ROWS = 3
"""Lines the command wraps over at most."""


def process_title(track: ProcessTrack) -> str:
    """``pid 41000 · python``: the screen's title (the command's first word)."""
    process = track.process
    pid = shown_pid(process) if process is not None else track.key[0]
    command = for_screen(process.command) if process is not None and process.command else ""
    name = command.split(" ", 1)[0].rsplit("/", 1)[-1] if command else ""
    return f"pid {pid}" + (f" · {name}" if name else "")


def fmt_workload(workload: Workload) -> str:
    """Everything known of where the process runs: ``slurm 1234.0 · pod ns/web · container
    3f2a… (docker) · unit foo.service``; ``n/a`` where nothing is."""
    workload = for_screen(workload)
    parts = []
    if workload.slurm_job is not None:
        step = workload.slurm_step
        parts.append(f"slurm job {workload.slurm_job}" + (f".{step}" if step else ""))
    if workload.pod is not None or workload.pod_uid is not None:
        name = workload.pod or workload.pod_uid or ""
        parts.append(f"pod {workload.namespace}/{name}" if workload.namespace else f"pod {name}")
    if workload.container is not None:
        runtime = f" ({workload.runtime})" if workload.runtime else ""
        parts.append(f"container {workload.container}{runtime}")
    if workload.unit is not None:
        parts.append(f"unit {workload.unit}")
    return " · ".join(parts) or NA


def fmt_started(process: GpuProcess | None) -> str:
    """``2026-11-27 00:31:02 (3:25:01 ago)`` in local time; ``n/a`` where unknown."""
    if process is None or process.create_time is None:
        return NA
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(process.create_time))
    ago = f" ({fmt_elapsed(process.elapsed_s)} ago)" if process.elapsed_s is not None else ""
    return started + ago


def chart(
    values: Sequence[float | None], top: float, width: int, height: int, style: str
) -> list[Line]:
    """``values`` (oldest first, newest on the right) as columns of block characters,
    ``height`` lines of ``width`` cells, scaled so that ``top`` fills a column; ``None`` is
    drawn blank and a value above zero always shows (a one-eighth block at least)."""
    if width <= 0 or height <= 0:
        return []
    shown = list(values[-width:])
    pad = width - len(shown)
    levels: list[int | None] = []
    for value in shown:
        if value is None or value != value:
            levels.append(None)
            continue
        eighths = round(min(max(value / top, 0.0), 1.0) * height * 8) if top > 0 else 0
        levels.append(max(eighths, 1) if value > 0 else 0)
    lines = []
    for row in range(height - 1, -1, -1):
        cells = "".join(
            " " if level is None else SPARKS[min(max(level - row * 8, 0), 8)] for level in levels
        )
        lines.append(Line(" " * pad, (cells, style)))
    return lines


def _field(label: str, value: str, style: str = "") -> Line:
    return Line((f"{label} ", LABEL), (value, style))


def process_screen_lines(
    track: ProcessTrack, width: int, height: int, *, trainer: str | None = None
) -> list[Line]:
    """Everything the process screen shows in ``width`` by ``height`` cells: who the process
    is (``trainer``: the runner's status line, where it is the runner's trainer), then its
    GPU memory and SM % charts, which take the lines left."""
    head = [*_identity_lines(track, width, trainer), Line()]
    rows = max((height - len(head) - 3) // 2, 1)  # less the charts' headings and the axis
    lines = [*head, *_chart_lines(track, width, rows)]
    return [line.fit(width) if line.width > width else line for line in lines[:height]]


def _identity_lines(track: ProcessTrack, width: int, trainer: str | None) -> list[Line]:
    """User and GPUs, start time, job, the runner's run, command, and whether it runs."""
    process = track.process
    user = for_screen(process.user) if process is not None and process.user else NA
    lines = [
        _field("User", user).add("   ").extend(_field("GPUs", ", ".join(track.gpus) or NA)),
        _field("Started", fmt_started(process)),
        _field("Job", fmt_workload(process.workload) if process is not None else NA),
    ]
    if trainer is not None:
        lines.append(_field("Runner", f"the trainer it started: {for_screen(trainer)}", OK))
    command = for_screen(process.command) if process is not None and process.command else NA
    wrapped = wrap_text(command, width, "Command ", "        ")
    if len(wrapped) > COMMAND_ROWS:
        wrapped = [*wrapped[: COMMAND_ROWS - 1], wrapped[COMMAND_ROWS - 1] + " …"]
    for number, text in enumerate(wrapped):
        label = "Command" if number == 0 else ""
        lines.append(Line((label, LABEL), text[len(label) :]))
    seen = fmt_counted(len(track.samples), "sample")
    if track.first_t is not None and track.last_t is not None:
        seen = f"seen for {fmt_elapsed(track.last_t - track.first_t)} ({seen})"
    if track.ended:
        gone = "no GPU lists it any more; its history is kept · "
        lines.append(Line(("■ ended: ", HOT), (gone + seen, MUTED)))
    else:
        lines.append(Line(("▶ running · ", OK), (seen, MUTED)))
    return lines


def _chart_lines(track: ProcessTrack, width: int, rows: int) -> list[Line]:
    """GPU memory (scaled to its peak) and SM % (to 100), ``rows`` each, with their figures,
    over one time axis."""
    samples = list(track.samples)
    latest = samples[-1] if samples else None
    memory = [s.gpu_memory_bytes for s in samples]
    sm = [s.sm_utilization_percent for s in samples]
    known_sm = [value for value in sm if value is not None]
    peak = track.peak_memory_bytes
    memory_head = Line(("GPU memory", "bold"), "  ")
    memory_head.extend(_field("now", fmt_bytes(latest.gpu_memory_bytes if latest else None)))
    memory_head.add("  ").extend(_field("peak", fmt_bytes(peak)))
    sm_head = Line(("SM %", "bold"), "  ")
    sm_head.extend(_field("now", fmt_percent(latest.sm_utilization_percent if latest else None)))
    mean = sum(known_sm) / len(known_sm) if known_sm else None
    sm_head.add("  ").extend(_field("mean", fmt_percent(mean)))
    sm_head.add("  ").extend(_field("peak", fmt_percent(max(known_sm) if known_sm else None)))
    shown = samples[-width:] if width > 0 else []
    span = shown[-1].t - shown[0].t if len(shown) > 1 else 0.0
    left, right = f"-{fmt_elapsed(span)}", "ended" if track.ended else "now"
    axis = Line((left, MUTED), " " * max(width - len(left) - len(right), 1), (right, MUTED))
    return [
        memory_head,
        *chart(memory, float(peak or 0), width, rows, MEMORY_SPARK),
        sm_head,
        *chart(sm, 100.0, width, rows, UTIL_SPARK),
        axis,
    ]
