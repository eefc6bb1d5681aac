"""The replay's question for ``g``: which time to go to.

Enter goes there, Escape leaves it; a time that cannot be read is said under the field
without closing the dialog.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class GotoDialog(ModalScreen[float | None]):
    """Asks for a time in the recording; dismissed with it (seconds since the start) or None."""

    DEFAULT_CSS = """
    GotoDialog { align: center middle; }
    GotoDialog > Vertical {
        width: 64; height: auto; padding: 1 2; border: round $accent; background: $panel;
    }
    GotoDialog Label { width: 100%; }
    GotoDialog #goto-keys { color: $text-muted; }
    GotoDialog #goto-error { color: $error; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, parse: Callable[[str], float], shown: str) -> None:
        """Read the answer with ``parse`` (``ValueError`` says what is wrong with it);
        ``shown`` is the time shown now, offered to edit."""
        super().__init__()
        self._parse = parse
        self._shown = shown

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(  # (a bare 03:00:00 is an offset)
                "Go to: an offset from the start (1:02:03), a UTC time written with UTC "
                "(03:00:00 UTC), start or end"
            )
            yield Input(self._shown, id="goto-time")
            yield Label("", id="goto-error", markup=False)
            yield Label("Enter goes there · Escape cancels", id="goto-keys")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: go to that time, or say what is wrong with it."""
        event.stop()
        try:
            t = self._parse(event.value)
        except ValueError as error:
            self.query_one("#goto-error", Label).update(str(error))
            return
        self.dismiss(t)

    def action_cancel(self) -> None:
        """Escape: stay where the replay is."""
        self.dismiss(None)
