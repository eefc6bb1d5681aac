"""The process table's rows: which match the filter, and in what order (pure: no widgets).

``o`` cycles the sort key (:data:`SORT_KEYS`), ``O`` reverses it, ``/`` filters by text
(any cell, those a narrow table leaves out included).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from gputui.format import NA, one_line
from gputui.telemetry.readings import GpuProcess, GpuReading, gpu_label, shown_pid
from gputui.ui.render.processes import ProcessCells, fmt_job, process_cells
from gputui.ui.row_order import RowOrder

SORT_KEYS = (
    "gpu",
    "memory",
    "sm",
    "cpu",
    "host_memory",
    "elapsed",
    "pid",
    "user",
    "job",
    "command",
    "type",
)
"""What ``o`` cycles through, the default (GPU, then pid) first; each a column's key
(:data:`gputui.ui.render.processes.PROCESS_COLUMNS`)."""
LARGEST_FIRST = frozenset({"memory", "sm", "cpu", "host_memory", "elapsed"})
"""Keys whose natural order is largest first (the biggest user of GPU memory, of its SMs,
of the host's CPU or memory, the oldest process, on top)."""


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """One process on one GPU, as the table shows it."""

    key: str
    """``gpu:pid:kind``: the row's identity across readings (the selection follows it)."""
    gpu: int
    """The GPU's place in the monitor's list (NVIDIA's by index, then AMD's and Intel's)."""
    process: GpuProcess
    """The process, with what the reading knew of it (its ``create_time`` among it)."""
    cells: ProcessCells
    """The row's text, a cell per column of the table."""


@dataclass(frozen=True, slots=True)
class ProcessOrder(RowOrder):
    """How the rows are shown: the sort key, its direction, and the filter (any cell, any
    case)."""

    KEYS: ClassVar[tuple[str, ...]] = SORT_KEYS
    key: str = SORT_KEYS[0]
    """One of :data:`SORT_KEYS`."""

    def next_key(self) -> ProcessOrder:
        """The next sort key, in its natural direction, with the same filter."""
        return replace(self, key=self.following_key(), reverse=False)

    @property
    def descending(self) -> bool:
        """Whether the largest value comes first."""
        return (self.key in LARGEST_FIRST) != self.reverse

    def describe(self, shown: int, total: int) -> str | None:
        """``filter 'py': 2 of 5``; ``None`` unfiltered (the sort is marked in the heading)."""
        if not self.filter:
            return None
        return f"filter '{one_line(self.filter)}': {shown} of {total}"


def process_rows(gpus: Sequence[GpuReading]) -> dict[str, ProcessRow]:
    """Every process on every GPU, by row key."""
    rows = (
        ProcessRow(
            f"{gpu_label(gpu)}:{process.pid}:{process.kind}",
            place,
            process,
            process_cells(gpu_label(gpu), process),
        )
        for place, gpu in enumerate(gpus)
        for process in gpu.processes or ()
    )
    return {row.key: row for row in rows}


def matches(row: ProcessRow, text: str) -> bool:
    """Whether any of the row's cells holds ``text``, in any case."""
    needle = text.casefold()
    return any(needle in cell.casefold() for cell in row.cells)


def _text(text: str | None) -> str | None:
    return None if text is None else text.casefold()


_VALUES: dict[str, Callable[[ProcessRow], float | str | None]] = {
    "gpu": lambda row: row.gpu,
    "memory": lambda row: row.process.gpu_memory_bytes,
    "sm": lambda row: row.process.sm_utilization_percent,
    "cpu": lambda row: row.process.cpu_percent,
    "host_memory": lambda row: row.process.rss_bytes,
    "elapsed": lambda row: row.process.elapsed_s,
    "pid": lambda row: shown_pid(row.process),
    "type": lambda row: row.process.kind,
    "job": lambda row: None if (job := fmt_job(row.process.workload)) == NA else job.casefold(),
    "user": lambda row: _text(row.process.user),
    "command": lambda row: _text(row.process.command),
}
"""Each sort key's value of a row (``None``: unknown); text sorts in any case."""


def ordered(rows: Iterable[ProcessRow], order: ProcessOrder) -> list[ProcessRow]:
    """The rows that match the filter, sorted; those whose value is unknown come last."""
    shown = [row for row in rows if not order.filter or matches(row, order.filter)]
    value = _VALUES[order.key]
    known = [row for row in shown if value(row) is not None]
    unknown = [row for row in shown if value(row) is None]
    known.sort(
        key=lambda row: (value(row), row.gpu, row.process.pid),
        reverse=order.descending,
    )
    unknown.sort(key=lambda row: (row.gpu, row.process.pid))
    return known + unknown
