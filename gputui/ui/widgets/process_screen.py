"""The process screen (Enter on the process table): one GPU process's GPU memory and SM %
over time, and who it is. The app calls :meth:`ProcessScreen.update` each beat; once the
process has left its GPUs the screen says it ended and keeps what it had.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import Footer

from gputui.telemetry.process_history import ProcessHistory, ProcessTrack
from gputui.ui.render.draw import Line
from gputui.ui.render.process_history import process_screen_lines, process_title
from gputui.ui.widgets.lines import LinesWidget, set_border_subtitle, set_border_title

TrainerNote = Callable[[ProcessTrack], str | None]
"""What the runner's trainer is running, where the process is that trainer; else ``None``."""


class ProcessHistoryView(LinesWidget):
    """The process's details and its two charts, drawn to the view's size."""

    DEFAULT_CSS = """
    ProcessHistoryView {
        height: 1fr;
        border: round $panel-lighten-2;
        border-title-color: $accent;
        padding: 0 1;
    }
    """

    def __init__(self, track: ProcessTrack, trainer: str | None) -> None:
        super().__init__(id="process-history")
        self.track = track
        self.trainer = trainer

    def build_lines(self, width: int) -> list[Line]:
        return process_screen_lines(
            self.track, width, self.content_size.height, trainer=self.trainer
        )

    def update(self, track: ProcessTrack, trainer: str | None) -> None:
        """Draw ``track`` anew (a new sample, or it ended)."""
        self.track, self.trainer = track, trainer
        set_border_title(self, process_title(track))
        set_border_subtitle(self, "ended" if track.ended else None)
        self.rebuild()


class ProcessScreen(ModalScreen[None]):
    """A GPU process's history, full screen over the monitor (which keeps sampling)."""

    DEFAULT_CSS = """
    ProcessScreen { background: $background; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Back"),
    ]

    def __init__(
        self,
        track: ProcessTrack,
        history: ProcessHistory,
        trainer: TrainerNote = lambda track: None,
    ) -> None:
        """Show ``track``, looked up again by key in ``history`` each beat; ``trainer`` says
        which run the process is, where it is the runner's trainer."""
        super().__init__()
        self.track = track
        self._history = history
        self._trainer = trainer
        self._trainer_note = trainer(track)  # kept once the run has ended
        self.view = ProcessHistoryView(track, self._trainer_note)

    def compose(self) -> ComposeResult:
        yield self.view
        yield Footer()

    def on_mount(self) -> None:
        self.view.update(self.track, self._trainer_note)

    def update(self) -> None:
        """Draw the process's history as it is now (the one shown stays while the history
        holds none, as after a replay seeks to before the process was seen)."""
        self.track = self._history.get(self.track.key) or self.track
        note = self._trainer(self.track)
        if note is not None:
            self._trainer_note = note
        self.view.update(self.track, self._trainer_note)

    def action_close(self) -> None:
        self.dismiss(None)
