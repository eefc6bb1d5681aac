"""The GPU process table: a ``ScrollView`` drawn line by line (Textual's Line API), its
heading pinned above the rows, which scroll by wheel or as the selection moves. Not a
DataTable: its import and component styles would cost the monitor's start more than the
table is worth.

Nothing is selected until a key or a click selects a row; the selection follows its process
(GPU, pid and kind) through new readings and orders, and is dropped when it leaves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.events import Click, Resize
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gputui.pci import canonical_bus_id
from gputui.telemetry.readings import GpuReading, gpu_label
from gputui.ui.monitor.process_rows import ProcessOrder, ProcessRow, ordered, process_rows
from gputui.ui.render.draw import Line
from gputui.ui.render.processes import ProcessCells, process_table_lines, process_table_title
from gputui.ui.widgets.lines import LineStyles, set_border_subtitle, set_border_title
from gputui.ui.widgets.steady import SteadyRender


class ProcessTable(ScrollView, SteadyRender, can_focus=True):
    """Processes on every GPU, a row each (the columns of
    :data:`gputui.ui.render.processes.PROCESS_COLUMNS`); one may be selected."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "select_step(-1)", "Previous process", show=False),  # k, j: as nvitop
        Binding("down,j", "select_step(1)", "Next process", show=False),
        Binding("pageup", "select_page(-1)", "Page up", show=False),
        Binding("pagedown", "select_page(1)", "Page down", show=False),
        Binding("home", "select_end(0)", "First process", show=False),
        Binding("end", "select_end(1)", "Last process", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: dict[str, ProcessRow] = {}
        self._shown: list[ProcessRow] = []  # the rows that pass the filter, in order
        self._order = ProcessOrder()
        self._selected: str | None = None  # the selected row's key
        self.host_pids = False
        """The pids are the host's (gputui runs in a pid namespace of its own)."""
        self._lines: list[Line] = []
        self._width = 0  # the width the lines were built for
        self._strips: dict[int, Strip] = {}
        self._styles = LineStyles(self)
        self.trainer_pid: int | None = None
        """The runner's trainer process, highlighted when it is on a GPU."""
        self.trainer_gpu: str | None = None
        """The UUID of the GPU the trainer trains on (``None``: match its pid on any GPU)."""
        self.trainer_bus_id: str | None = None
        """The PCI bus id of that GPU: how an AMD or Intel GPU is found, whose UUID torch
        and the driver spell differently."""
        self.rank_pids: tuple[int, ...] = ()
        """A scaling run's ranks, each marked on whatever GPU it trains on."""
        self._gpu_by_uuid: dict[str, str] = {}
        self._gpu_by_bus_id: dict[str, str] = {}
        set_border_title(self, "GPU processes")

    @property
    def shown(self) -> dict[str, ProcessCells]:
        """The rows on screen (those the filter keeps), in order, by row key (``gpu:pid:kind``)."""
        return {row.key: row.cells for row in self._shown}

    @property
    def order(self) -> ProcessOrder:
        return self._order

    @property
    def selected(self) -> ProcessRow | None:
        """The selected row; ``None`` until one is selected, or once its process has gone."""
        return next((row for row in self._shown if row.key == self._selected), None)

    def set_order(self, order: ProcessOrder) -> None:
        """Sort and filter by ``order``; the selection stays on its process if still shown."""
        if order != self._order:
            self._order = order
            self._rebuild()
            self._scroll_to_selected()

    def apply_filter(self, text: str) -> None:
        """Keep only the rows that hold ``text`` and select the first of them; empty: show
        every row again, the selection kept."""
        self.set_order(self._order.filtered(text))
        if text:
            self.select(self._shown[0].key if self._shown else None)

    def select(self, key: str | None) -> None:
        """Select the row with ``key`` (``None``: none) and scroll it into view."""
        if key != self._selected:
            self._selected = key
            self._rebuild()
        self._scroll_to_selected()

    def action_select_step(self, step: int) -> None:
        """Select the row ``step`` rows below the selected one (the first, if none is)."""
        if not self._shown:
            return
        index = self._selected_index()
        index = 0 if index is None else min(max(index + step, 0), len(self._shown) - 1)
        self.select(self._shown[index].key)

    def action_select_page(self, direction: int) -> None:
        """Select the row a page of rows up (``-1``) or down (``1``)."""
        self.action_select_step(direction * max(self._rows_in_view() - 1, 1))

    def action_select_end(self, last: int) -> None:
        """Select the first row (``0``) or the last (``1``)."""
        if self._shown:
            self.select(self._shown[-1 if last else 0].key)

    def on_click(self, event: Click) -> None:
        """A click on a row selects it."""
        offset = event.get_content_offset(self)
        if offset is None or offset.y < 1:  # the heading, or outside the rows
            return
        index = offset.y - 1 + round(self.scroll_y)
        if index < len(self._shown):
            self.select(self._shown[index].key)

    def _selected_index(self) -> int | None:
        keys = [row.key for row in self._shown]
        return keys.index(self._selected) if self._selected in keys else None

    def _rows_in_view(self) -> int:
        return max(self.scrollable_content_region.height - 1, 0)  # less the pinned heading

    def _scroll_to_selected(self) -> None:
        """Scroll just enough for the selected row to show under the heading."""
        index = self._selected_index()
        if index is None or not self._rows_in_view():
            return
        top = round(self.scroll_y)
        if index < top:
            self.scroll_to(y=index, animate=False)
        elif index >= top + self._rows_in_view():
            self.scroll_to(y=index - self._rows_in_view() + 1, animate=False)

    @property
    def lines(self) -> tuple[Line, ...]:
        """The heading, then the rows in order, as drawn (before scrolling)."""
        return tuple(self._lines)

    def highlight(
        self,
        pid: int | None,
        gpu_uuid: str | None = None,
        ranks: tuple[int, ...] = (),
        gpu_bus_id: str | None = None,
    ) -> None:
        """Highlight the runner's trainer: process ``pid`` (``None``: none) on the GPU with
        ``gpu_uuid``, else at ``gpu_bus_id`` (both ``None``: any GPU), and a scaling run's
        ``ranks``. Matching the GPU too keeps another container's process with the same pid,
        or the trainer's handle on another GPU (ROCm opens every render node), unmarked."""
        bus_id = canonical_bus_id(gpu_bus_id)
        wanted = (pid, gpu_uuid, bus_id, ranks)
        if wanted != (self.trainer_pid, self.trainer_gpu, self.trainer_bus_id, self.rank_pids):
            self.trainer_pid, self.trainer_gpu, self.trainer_bus_id, self.rank_pids = wanted
            self._rebuild()

    def show(self, gpus: Sequence[GpuReading], *, host_pids: bool = False) -> None:
        """Show the processes of ``gpus`` (``host_pids``: their pids are the host's);
        nothing is redrawn when they are the same."""
        wanted = process_rows(gpus)
        self.host_pids = host_pids
        self._gpu_by_uuid = {gpu.uuid: gpu_label(gpu) for gpu in gpus if gpu.uuid}
        self._gpu_by_bus_id = {
            bus_id: gpu_label(gpu) for gpu in gpus if (bus_id := canonical_bus_id(gpu.bus_id))
        }
        set_border_title(self, process_table_title(len(wanted), gpus, host_pids))
        if wanted != self._rows:
            self._rows = wanted
            self._rebuild()

    def _build(self, width: int) -> list[Line]:
        """The table's lines for ``width`` cells (remembered as the width built for)."""
        marked = "" if self.trainer_pid is None else str(self.trainer_pid)
        # An unknown GPU (no UUID or bus id the readings know, a MIG instance's) falls back to
        # the pid on any GPU.
        gpu = self._gpu_by_uuid.get(self.trainer_gpu or "") or self._gpu_by_bus_id.get(
            self.trainer_bus_id or ""
        )
        self._width = width
        ranks = {str(rank) for rank in self.rank_pids}
        cells = [row.cells for row in self._shown]
        selected, order = self._selected_index(), self._order
        return process_table_lines(
            cells,
            width,
            marked,
            gpu,
            ranks,
            selected,
            sort_key=order.key,
            descending=order.descending,
        )

    def _rebuild(self) -> None:
        """Order the rows, drop a selection whose process has gone, and build the lines for
        the current width; redraw the widget if any changed."""
        self._shown = ordered(self._rows.values(), self._order)
        if self._selected_index() is None:
            self._selected = None
        set_border_subtitle(self, self._order.describe(len(self._shown), len(self._rows)))
        width = self.scrollable_content_region.width
        if width <= 0:
            return  # built on the first resize, once the width is known
        old, old_width = self._lines, self._width
        lines = self._build(width)
        if lines == old:
            return
        self._lines = lines
        if len(lines) != len(old) or width != old_width:
            self._strips.clear()
            self.virtual_size = Size(width, len(lines))
            self.refresh()
            return
        # The same rows with new figures (each beat): repaint the lines that changed and are
        # in view, not the table's empty lines and border.
        top, rows = self.scroll_offset.y, self._rows_in_view()
        changed = [i for i, (new, was) in enumerate(zip(lines, old, strict=True)) if new != was]
        for index in changed:
            self._strips.pop(index, None)
        shown = [i - top for i in changed if 1 <= i - top <= rows]
        if changed[0] == 0:  # the heading, pinned on top
            shown.append(0)
        if shown:  # (no region at all would repaint the whole table)
            self.refresh(*(Region(0, y, width, 1) for y in shown))

    def on_resize(self, event: Resize) -> None:
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
