"""The GPU process table: one widget drawn line by line, its heading pinned above the rows.

Textual's Line API (a ``ScrollView`` with ``render_line``): the rows scroll under the
heading when there are more than fit, by wheel, or by keys once the table has focus.
A DataTable did this before, at a cost of about 60 ms at every start (its import, and a
style for each of its dozen component classes) for a table of five columns.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.events import Resize
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gputui.telemetry.readings import GpuReading
from gputui.ui.render import (
    Line,
    ProcessCells,
    process_cells,
    process_table_lines,
    process_table_title,
)
from gputui.ui.widgets.lines import LineStyles, set_border_title


def _order(cells: ProcessCells) -> tuple[int, int]:
    return int(cells[0]), int(cells[1])  # GPU, then PID


class ProcessTable(ScrollView, can_focus=True):
    """Processes on every GPU: GPU, PID, user, GPU memory, command."""

    def __init__(self, *, id: str | None = None) -> None:
        """An empty table."""
        super().__init__(id=id)
        self._rows: dict[str, ProcessCells] = {}
        self._lines: list[Line] = []
        self._width = 0  # the width the lines were built for
        self._strips: dict[int, Strip] = {}
        self._styles = LineStyles(self)
        self.trainer_pid: int | None = None
        """The runner's trainer process, highlighted when it is on a GPU."""
        self.trainer_gpu: str | None = None
        """The UUID of the GPU the trainer trains on (``None``: match its pid on any GPU)."""
        self.rank_pids: tuple[int, ...] = ()
        """A scaling run's ranks, each marked on whatever GPU it trains on."""
        self._gpu_by_uuid: dict[str, str] = {}
        set_border_title(self, "GPU processes")

    @property
    def shown(self) -> dict[str, ProcessCells]:
        """The rows on screen, by row key (``gpu:pid:kind``)."""
        return dict(self._rows)

    @property
    def lines(self) -> tuple[Line, ...]:
        """The heading, then the rows in order, as drawn (before scrolling)."""
        return tuple(self._lines)

    def highlight(
        self, pid: int | None, gpu_uuid: str | None = None, ranks: tuple[int, ...] = ()
    ) -> None:
        """Highlight the runner's trainer: process ``pid`` (``None``: none) on the GPU with
        ``gpu_uuid`` (``None``: on any GPU), and a scaling run's ``ranks`` on theirs.
        Matching the GPU too keeps another process that shares the pid (another
        container's) from being marked."""
        if (pid, gpu_uuid, ranks) != (self.trainer_pid, self.trainer_gpu, self.rank_pids):
            self.trainer_pid, self.trainer_gpu, self.rank_pids = pid, gpu_uuid, ranks
            self._rebuild()

    def show(self, gpus: Sequence[GpuReading], *, host_pids: bool = False) -> None:
        """Show the processes of ``gpus``; nothing is redrawn when they are the same.

        Args:
            gpus: The GPUs, each with its processes.
            host_pids: The pids are the host's (gputui is in a pid namespace of its own).
        """
        wanted = {
            f"{gpu.index}:{process.pid}:{process.kind}": process_cells(gpu.index, process)
            for gpu in gpus
            for process in gpu.processes or ()
        }
        self._gpu_by_uuid = {gpu.uuid: str(gpu.index) for gpu in gpus if gpu.uuid}
        set_border_title(self, process_table_title(len(wanted), gpus, host_pids))
        if wanted != self._rows:
            self._rows = wanted
            self._rebuild()

    def _build(self, width: int) -> list[Line]:
        """The table's lines for ``width`` cells (remembered as the width built for)."""
        rows = sorted(self._rows.values(), key=_order)
        marked = "" if self.trainer_pid is None else str(self.trainer_pid)
        # An unknown UUID (none from NVML, a MIG instance's) falls back to the pid on any GPU.
        gpu = None if self.trainer_gpu is None else self._gpu_by_uuid.get(self.trainer_gpu)
        self._width = width
        ranks = {str(rank) for rank in self.rank_pids}
        return process_table_lines(rows, width, marked, gpu, ranks)

    def _rebuild(self) -> None:
        """Build the lines for the current width; redraw the widget if any changed."""
        width = self.scrollable_content_region.width
        if width <= 0:
            return  # built on the first resize, once the width is known
        lines = self._build(width)
        if lines == self._lines:
            return
        self._lines = lines
        self._strips.clear()  # rows change seldom: no need to keep the unchanged ones
        self.virtual_size = Size(width, len(lines))
        self.refresh()

    def on_resize(self, event: Resize) -> None:
        """Lines are built for a width: build them again for the new one."""
        self._lines = []
        self._rebuild()

    def render_line(self, y: int) -> Strip:
        """Line ``y`` of the view: the heading on top, the rows scrolled under it."""
        width = self.scrollable_content_region.width
        if width != self._width:  # the scrollbar came or went since the lines were built
            self._lines = self._build(width)
            self._strips.clear()
        if self._styles.changed():  # theme or CSS changed: resolve styles again
            self._strips.clear()
        index = y if y == 0 else y + self.scroll_offset.y
        strip = self._strips.get(index)
        if strip is None:
            line = self._lines[index] if index < len(self._lines) else Line()
            strip = self._strips[index] = self._styles.strip(line, width)
        return strip
