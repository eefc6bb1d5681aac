"""The MPS line: Apple's GPU, or one plain sentence where there is none."""

from __future__ import annotations

from gputui.telemetry.readings import MpsReading
from gputui.ui.render.draw import Line
from gputui.ui.render.mps import mps_line
from gputui.ui.widgets.lines import LinesWidget


class MpsPanel(LinesWidget):
    """One line for Apple MPS."""

    def __init__(self, *, id: str | None = None) -> None:
        """Start with ``checking…`` until the first reading."""
        super().__init__(id=id)
        self.reading: MpsReading | None = None

    def show(self, reading: MpsReading) -> None:
        """Paint ``reading``."""
        self.reading = reading
        self.rebuild()

    def build_lines(self, width: int) -> list[Line]:
        """The one line."""
        return [mps_line(self.reading, width)]
