"""The question before quitting while a run is going: quitting stops it.

``y`` or Enter quits (the trainer is stopped on the way out, as ever), ``n`` or Escape
stays. A second Ctrl+C quits too: the app's Ctrl+C asked the question, and Ctrl+C again is
the answer (:meth:`gputui.ui.monitor.app.MonitorApp.action_quit`).
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Label

from gputui.ui.widgets.question import Question


class QuitDialog(Question):
    """Asks whether to quit and stop the run; dismissed with True (quit) or False (stay)."""

    DEFAULT_CSS = """
    QuitDialog > Vertical { width: 64; border: round $warning; }
    QuitDialog .question { margin-bottom: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,enter", "answer(True)", "Quit"),
        Binding("n,escape", "answer(False)", "Stay"),
    ]

    def __init__(self, run: str) -> None:
        """Ask about quitting while ``run`` (a few words: "a training run") is going."""
        super().__init__()
        self.run = run

    def lines(self) -> ComposeResult:
        yield Label("Quit gputui and stop the run?", classes="question")
        yield Label(f"{self.run.capitalize()} is going in the runner pane.", markup=False)
        yield Label("y or Enter quits and stops it · n or Escape stays", classes="keys")
