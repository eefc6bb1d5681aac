"""The question before quitting while a run is going: quitting stops it.

``y`` or Enter quits (the trainer is stopped on the way out, as ever), ``n`` or Escape
stays. A second Ctrl+C quits too: the app's Ctrl+C asked the question, and Ctrl+C again is
the answer (:meth:`gputui.ui.monitor.app.MonitorApp.action_quit`).
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label


class QuitDialog(ModalScreen[bool]):
    """Asks whether to quit and stop the run; dismissed with True (quit) or False (stay)."""

    DEFAULT_CSS = """
    QuitDialog { align: center middle; }
    QuitDialog > Vertical {
        width: 64; height: auto; padding: 1 2; border: round $warning; background: $panel;
    }
    QuitDialog Label { width: 100%; }
    QuitDialog #quit-question { text-style: bold; margin-bottom: 1; }
    QuitDialog #quit-keys { margin-top: 1; color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,enter", "answer(True)", "Quit"),
        Binding("n,escape", "answer(False)", "Stay"),
    ]

    def __init__(self, run: str) -> None:
        """Ask about quitting while ``run`` (a few words: "a training run") is going."""
        super().__init__()
        self.run = run

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Quit gputui and stop the run?", id="quit-question")
            yield Label(f"{self.run.capitalize()} is going in the runner pane.", markup=False)
            yield Label("y or Enter quits and stops it · n or Escape stays", id="quit-keys")

    def action_answer(self, leave: bool) -> None:
        """``y`` or Enter: quit; ``n`` or Escape: stay."""
        self.dismiss(leave)
