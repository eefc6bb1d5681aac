"""The GPU process table: its cells, title and lines."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from rich.cells import cell_len

from gputui.format import (
    NA,
    ellipsize,
    fmt_bytes,
    fmt_counted,
    fmt_percent,
)
from gputui.telemetry.readings import (
    GpuProcess,
    GpuReading,
    gpu_label,
    shown_pid,
    unmatched_host_pids,
)
from gputui.ui.render.draw import (
    GAP,
    LABEL,
    Line,
)

ProcessCells = tuple[str, str, str, str, str, str]
"""GPU, PID, user, GPU memory, SM %, command: a process table row, as plain strings."""

COMMAND_MAX = 200
"""Characters of a command line the process table keeps."""
UNKNOWN_NAMED = 3
"""Most GPUs whose processes are unknown that the title names; past it, it counts them."""


def process_cells(gpu: str, process: GpuProcess) -> ProcessCells:
    """The process table's cells as plain strings: GPU (its label, :func:`gpu_label`), PID,
    user, GPU memory, SM %, command."""
    return (
        gpu,
        str(shown_pid(process)),
        process.user or NA,
        fmt_bytes(process.gpu_memory_bytes),
        fmt_percent(process.sm_utilization_percent),
        ellipsize(process.command or NA, COMMAND_MAX),
    )


PROCESS_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("GPU", True),
    ("PID", True),
    ("User", False),
    ("GPU mem", True),
    ("SM %", True),
    ("Command", False),
)
"""The process table's columns: heading, and whether values are right-aligned."""
PROCESS_HEADING = f"bold {LABEL}"
"""Style of the process table's heading."""
TRAINER_STYLE = "bold reverse"
"""How the runner's trainer process stands out in the process table."""
SELECTED_STYLE = "bold $block-cursor-foreground on $block-cursor-background"
"""The selected row (the one ``k`` would end), as Textual draws a table's cursor."""


def process_table_title(count: int, gpus: Sequence[GpuReading], host_pids: bool = False) -> str:
    """``GPU processes · 3``, ``· none``, or ``· n/a`` where they could not be listed (never
    "none" beside a GPU whose processes are unknown)."""
    unknown = [gpu_label(gpu) for gpu in gpus if gpu.processes is None]
    if unknown and len(unknown) == len(gpus):
        return "GPU processes · n/a"
    shown = f"{count}" if count else ("none" if not unknown else "0")
    if len(unknown) > UNKNOWN_NAMED:
        shown += f" · n/a on {len(unknown)} GPUs"
    elif unknown:
        shown += f" · n/a on GPU {', '.join(unknown)}"
    hosts = unmatched_host_pids(process for gpu in gpus for process in gpu.processes or ())
    if host_pids and count and hosts:
        shown += f" · {fmt_counted(hosts, 'host pid')} (gputui is in a container's pid namespace)"
    return f"GPU processes · {shown}"


def process_table_lines(
    rows: Sequence[ProcessCells],
    width: int,
    marked_pid: str = "",
    marked_gpu: str | None = None,
    ranks: Collection[str] = (),
    selected: int | None = None,
) -> list[Line]:
    """The process table: its heading, then a line a row, each exactly ``width`` cells.

    Every column but the last is as wide as its widest value (or heading), so the
    columns line up; the command takes what is left and is cropped with ``…``.

    Args:
        rows: The rows, in order.
        width: Cells available.
        marked_pid: The PID whose row is drawn in ``TRAINER_STYLE`` (the runner's trainer).
        marked_gpu: The GPU (its label) that row must be on; ``None``: any GPU.
        ranks: The PIDs of a scaling run's other ranks, marked on whatever GPU they are.
        selected: The index of the selected row in ``rows``, drawn in ``SELECTED_STYLE``.
    """
    widths = [
        max([len(heading), *(cell_len(row[column]) for row in rows)])
        for column, (heading, _) in enumerate(PROCESS_COLUMNS[:-1])
    ]

    def line(cells: Sequence[str], style: str) -> Line:
        out = Line()
        # every column but the command, which is last (``widths`` has one fewer)
        for text, cell_width, (_, right) in zip(cells, widths, PROCESS_COLUMNS, strict=False):
            pad = " " * (cell_width - cell_len(text))
            out.add(pad + text if right else text + pad, style).add(GAP, style)
        out.add(cells[-1], style)
        if out.width < width:
            return out.add(" " * (width - out.width), style)
        return out.fit(width)

    headings = [heading for heading, _ in PROCESS_COLUMNS]

    def style(index: int, row: ProcessCells) -> str:
        if index == selected:
            return SELECTED_STYLE
        trainer = marked_pid and row[1] == marked_pid and marked_gpu in (None, row[0])
        return TRAINER_STYLE if trainer or row[1] in ranks else ""

    body = [line(row, style(index, row)) for index, row in enumerate(rows)]
    return [line(headings, PROCESS_HEADING), *body]
