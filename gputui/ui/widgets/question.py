"""A yes-or-no question over the screen: the base of the quit and signal dialogs."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen


class Question(ModalScreen[bool]):
    """Its :meth:`lines` in a box; dismissed with True (yes) or False (no) by its bindings'
    ``answer`` action."""

    DEFAULT_CSS = """
    Question { align: center middle; }
    Question > Vertical { height: auto; padding: 1 2; background: $panel; }
    Question Label { width: 100%; }
    Question .question { text-style: bold; }
    Question .keys { margin-top: 1; color: $text-muted; }
    """

    def lines(self) -> ComposeResult:
        """The question (class ``question``), what it means, and the keys (class ``keys``)."""
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        with Vertical():
            yield from self.lines()

    def action_answer(self, yes: bool) -> None:
        """Dismiss the question with ``yes``."""
        self.dismiss(yes)
