"""The GPU process table, updated by row key: only changed cells are touched."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from gputui.telemetry.readings import GpuReading
from gputui.ui.render import process_cells
from gputui.ui.widgets.lines import set_border_title

Cells = tuple[str, str, str, str, str]
"""GPU, PID, user, GPU memory, command: as plain strings."""

COLUMNS: tuple[tuple[str, str], ...] = (
    ("GPU", "gpu"),
    ("PID", "pid"),
    ("User", "user"),
    ("GPU mem", "memory"),
    ("Command", "command"),
)
"""(label, key) of each column, in order."""

_RIGHT = frozenset({"gpu", "pid", "memory"})


TRAINER_STYLE = "bold reverse"
"""How the runner's trainer process stands out in the table."""


def _cell(column: str, value: str, style: str = "") -> Text:
    # Text, not str: DataTable would parse a str as markup, and commands hold brackets.
    return Text(value, style=style, justify="right" if column in _RIGHT else "left", no_wrap=True)


def _sort_key(values: tuple[Text, Text]) -> tuple[int, int]:
    gpu, pid = values
    return int(gpu.plain), int(pid.plain)


class ProcessTable(DataTable[Text]):
    """Processes on every GPU: GPU, PID, user, GPU memory, command."""

    def __init__(self, *, id: str | None = None) -> None:
        """An empty table with its columns."""
        super().__init__(id=id, show_cursor=False, cursor_type="none")
        self._rows: dict[str, Cells] = {}
        self._gpus: tuple[GpuReading, ...] = ()
        self.trainer_pid: int | None = None
        """The runner's trainer process, highlighted when it is on a GPU."""
        set_border_title(self, "GPU processes")

    def on_mount(self) -> None:
        """Add the columns."""
        for label, key in COLUMNS:
            self.add_column(label, key=key)

    @property
    def shown(self) -> dict[str, Cells]:
        """The rows on screen, by row key (``gpu:pid:kind``)."""
        return dict(self._rows)

    def highlight(self, pid: int | None) -> None:
        """Highlight the runner's trainer process ``pid`` (``None``: none); redraws the rows."""
        if pid == self.trainer_pid:
            return
        self.trainer_pid = pid
        self.clear()
        self._rows = {}
        self.show(self._gpus)

    def show(self, gpus: tuple[GpuReading, ...]) -> None:
        """Bring the table in line with ``gpus``: add, remove, and update changed cells only."""
        self._gpus = gpus
        wanted: dict[str, Cells] = {}
        for gpu in gpus:
            for process in gpu.processes:
                wanted[f"{gpu.index}:{process.pid}:{process.kind}"] = process_cells(
                    gpu.index, process
                )
        count = len(wanted)
        set_border_title(self, "GPU processes · " + ("none" if count == 0 else f"{count}"))
        if wanted == self._rows:
            return
        reorder = False
        with self.app.batch_update():
            for key in self._rows.keys() - wanted.keys():
                self.remove_row(key)
                reorder = True
            for key, cells in wanted.items():
                old = self._rows.get(key)
                if old is None:
                    style = TRAINER_STYLE if cells[1] == str(self.trainer_pid) else ""
                    row = (
                        _cell(column, value, style)
                        for (_, column), value in zip(COLUMNS, cells, strict=True)
                    )
                    self.add_row(*row, key=key)
                    reorder = True
                    continue
                style = TRAINER_STYLE if cells[1] == str(self.trainer_pid) else ""
                for (_, column), before, after in zip(COLUMNS, old, cells, strict=True):
                    if before != after:
                        cell = _cell(column, after, style)
                        self.update_cell(key, column, cell, update_width=True)
            if reorder and len(wanted) > 1:
                self.sort("gpu", "pid", key=_sort_key)
        self._rows = wanted
