"""The CPU panel: total, per-core, load, clock, memory, swap, and gputui's own footprint."""

from __future__ import annotations

from collections.abc import Sequence

from textual.reactive import reactive

from gputui.telemetry.readings import CpuReading
from gputui.ui.render.cpu import (
    CORES_LABEL,
    core_grid,
    core_strip,
    cpu_memory_line,
    cpu_summary_line,
    cpu_title,
)
from gputui.ui.render.draw import LABEL, Line
from gputui.ui.widgets.lines import LinesWidget, set_border_title


class CpuPanel(LinesWidget):
    """Shows the latest host reading; the monitor sets its height and form."""

    grid: reactive[bool] = reactive(False, repaint=False)
    """True for a bar per core (roomy screens), False for one cell per core."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        """Start empty: the first reading arrives after the first frame."""
        super().__init__(id=id, classes=classes)
        self.reading: CpuReading | None = None
        self.history: Sequence[float | None] = ()
        set_border_title(self, cpu_title(None))

    def show(self, reading: CpuReading, history: Sequence[float | None] = ()) -> None:
        """Paint ``reading`` and the utilization ``history`` (repaints only what changed)."""
        self.reading = reading
        self.history = history
        set_border_title(self, cpu_title(reading))
        self.rebuild()

    def watch_grid(self) -> None:
        """The form changed: lay the lines out again."""
        self.rebuild()

    def build_lines(self, width: int) -> list[Line]:
        """Summary line, cores, memory line."""
        cpu = self.reading
        if cpu is None:
            return [Line(("Reading the CPU…", LABEL))]
        if self.grid:
            cores = core_grid(cpu.per_core_percent, width)
        else:
            strips = core_strip(cpu.per_core_percent, width - len(CORES_LABEL))
            cores = [
                Line((CORES_LABEL if row == 0 else " " * len(CORES_LABEL), LABEL))
                .extend(strip)
                .fit(width)
                for row, strip in enumerate(strips)
            ]
        return [cpu_summary_line(cpu, width, self.history), *cores, cpu_memory_line(cpu, width)]
