"""The GPU process table: its cells, title and lines."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple

from rich.cells import cell_len

from gputui.format import (
    NA,
    ellipsize,
    fmt_bytes,
    fmt_counted,
    fmt_elapsed,
    fmt_percent,
    fmt_process_kind,
)
from gputui.telemetry.readings import (
    GpuProcess,
    GpuReading,
    Workload,
    gpu_label,
    shown_pid,
    unmatched_host_pids,
)
from gputui.ui.render.draw import GAP, LABEL, Line


class ProcessColumn(NamedTuple):
    """A column of the process table."""

    key: str
    """Its sort key (:data:`gputui.ui.monitor.process_rows.SORT_KEYS`)."""
    heading: str
    """Its heading; the sort column's gets ``▲`` or ``▼`` after it."""
    right: bool
    """Whether its values are right-aligned."""


PROCESS_COLUMNS = (
    ProcessColumn("gpu", "GPU", True),
    ProcessColumn("pid", "PID", True),
    ProcessColumn("type", "Type", False),
    ProcessColumn("user", "User", False),
    ProcessColumn("job", "Job", False),
    ProcessColumn("memory", "GPU mem", True),
    ProcessColumn("sm", "SM %", True),
    ProcessColumn("cpu", "CPU %", True),
    ProcessColumn("host_memory", "Host mem", True),
    ProcessColumn("elapsed", "Elapsed", True),
    ProcessColumn("command", "Command", False),
)
"""The process table's columns, in order; the command is last and takes what is left."""
DROPPED_FIRST = ("type", "host_memory", "elapsed", "job", "cpu", "sm", "user")
"""The columns a narrow table leaves out, least important first, until the command has
``COMMAND_ROOM`` cells (the sort column is kept)."""
SHOWN_WHEN_KNOWN = ("job",)
"""Columns left out where no row knows their value (and the rows are not sorted by them): a
box without containers, pods or Slurm jobs keeps its table as it was."""
COMMAND_ROOM = 24
"""Cells the command column gets before any other column is left out for it."""

ProcessCells = tuple[str, ...]
"""A process table row as plain strings, a cell per column of :data:`PROCESS_COLUMNS`."""

COMMAND_MAX = 200
"""Characters of a command line the process table keeps."""
UNKNOWN_NAMED = 3
"""Most GPUs whose processes are unknown that the title names; past it, it counts them."""
JOB_MAX = 24
"""Characters of a job's name the process table keeps."""
POD_UID_SHOWN = 8
"""Characters of a pod's UID shown where its name is not known."""


def process_cells(gpu: str, process: GpuProcess) -> ProcessCells:
    """The process table's cells as plain strings, in :data:`PROCESS_COLUMNS`' order; the GPU
    is its label (:func:`gpu_label`)."""
    return (
        gpu,
        str(shown_pid(process)),
        fmt_process_kind(process.kind),
        process.user or NA,
        ellipsize(fmt_job(process.workload), JOB_MAX),
        fmt_bytes(process.gpu_memory_bytes),
        fmt_percent(process.sm_utilization_percent),
        fmt_percent(process.cpu_percent),
        fmt_bytes(process.rss_bytes),
        fmt_elapsed(process.elapsed_s),
        ellipsize(process.command or NA, COMMAND_MAX),
    )


def fmt_job(workload: Workload) -> str:
    """What a process runs in, in a few words: ``slurm 1234.0``, a pod's ``namespace/name``
    (``pod`` and its UID's first characters where its name is not known), a container's name
    or short id, else its systemd unit; ``n/a`` where none is known."""
    job = workload.job
    if job is None:
        return workload.unit or NA
    kind, name = job
    if kind == "slurm_job":
        step = workload.slurm_step
        return f"slurm {name}" if step is None else f"slurm {name}.{step}"
    if kind == "pod" and workload.pod == workload.pod_uid:
        return f"pod {name[:POD_UID_SHOWN]}"
    return name


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
    *,
    sort_key: str | None = None,
    descending: bool = False,
) -> list[Line]:
    """The process table: its heading, then a line a row, each exactly ``width`` cells.

    Every column but the command is as wide as its widest value, so the columns line up;
    the command takes what is left, cropped with ``…``. Where it would get less than
    ``COMMAND_ROOM``, columns are left out (:data:`DROPPED_FIRST`).

    Args:
        rows: The rows, in order.
        width: Cells available.
        marked_pid: The PID whose row is drawn in ``TRAINER_STYLE`` (the runner's trainer).
        marked_gpu: The GPU (its label) that row must be on; ``None``: any GPU.
        ranks: The PIDs of a scaling run's other ranks, marked on whatever GPU they are.
        selected: The index of the selected row, drawn in ``SELECTED_STYLE``.
        sort_key: The column the rows are sorted by, marked in its heading (``▼``
            where ``descending``, else ``▲``).
        descending: Whether that sort puts the largest first.
    """
    arrow = "▼" if descending else "▲"
    headings = [c.heading + (arrow if c.key == sort_key else "") for c in PROCESS_COLUMNS]
    widths = {
        column: max([cell_len(headings[column]), *(cell_len(row[column]) for row in rows)])
        for column in range(len(PROCESS_COLUMNS) - 1)
    }
    keys = [c.key for c in PROCESS_COLUMNS]
    for key in SHOWN_WHEN_KNOWN:
        column = keys.index(key)
        if key != sort_key and all(row[column] == NA for row in rows):
            del widths[column]
    for key in DROPPED_FIRST:
        if width - sum(size + len(GAP) for size in widths.values()) >= COMMAND_ROOM:
            break
        if key != sort_key:
            widths.pop(keys.index(key), None)

    def line(cells: Sequence[str], style: str) -> Line:
        out = Line()
        for column, cell_width in widths.items():  # every column shown but the command
            text = cells[column]
            pad = " " * (cell_width - cell_len(text))
            right = PROCESS_COLUMNS[column].right
            out.add(pad + text if right else text + pad, style).add(GAP, style)
        out.add(cells[-1], style)
        if out.width < width:
            return out.add(" " * (width - out.width), style)
        return out.fit(width)

    def style(index: int, row: ProcessCells) -> str:
        if index == selected:
            return SELECTED_STYLE
        trainer = marked_pid and row[1] == marked_pid and marked_gpu in (None, row[0])
        return TRAINER_STYLE if trainer or row[1] in ranks else ""

    body = [line(row, style(index, row)) for index, row in enumerate(rows)]
    return [line(headings, PROCESS_HEADING), *body]
