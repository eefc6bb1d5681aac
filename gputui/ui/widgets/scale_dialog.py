"""The scaling run's question: which world sizes, and weak or strong scaling.

``w`` opens it over the monitor; Enter starts the run, Escape leaves it. The answer is
checked as ``gputui scale`` checks its flags (:func:`gputui.jobs.scale.plan.world_sizes_from`),
and a bad one is said under the field without closing the dialog.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Select

from gputui.jobs.config import ConfigError
from gputui.jobs.scale.plan import SCALINGS, world_sizes_from

ScaleChoice = tuple[tuple[int, ...], str]
"""The world sizes, in order, and ``weak`` or ``strong``."""


class ScaleDialog(ModalScreen[ScaleChoice | None]):
    """Asks for the world sizes and the kind of scaling; dismissed with the answer or None."""

    DEFAULT_CSS = """
    ScaleDialog { align: center middle; }
    ScaleDialog > Vertical {
        width: 64; height: auto; padding: 1 2; border: round $accent; background: $panel;
    }
    ScaleDialog Label { width: 100%; }  /* wrap: a label as wide as its text is cut */
    ScaleDialog #scale-keys { color: $text-muted; }
    ScaleDialog #scale-error { color: $error; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, sizes: tuple[int, ...], device: str) -> None:
        """Offer ``sizes`` (every GPU, or 1 and 2 CPU ranks) for training on ``device``."""
        super().__init__()
        self._sizes = sizes
        self._device = device

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"Scaling on {self._device}: world sizes, comma-separated")
            yield Input(",".join(map(str, self._sizes)), id="scale-sizes")
            yield Select(
                [(f"{kind} scaling", kind) for kind in SCALINGS],
                value="weak",
                allow_blank=False,
                compact=True,
                id="scale-mode",
            )
            yield Label(
                "weak: each rank keeps the batch size; strong: the ranks share it.",
                id="scale-help",
            )
            yield Label("", id="scale-error")
            yield Label("Enter starts the run · Escape cancels", id="scale-keys")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: start with these world sizes, or say what is wrong with them."""
        event.stop()
        try:
            sizes = world_sizes_from(event.value)
        except ConfigError as error:
            self.query_one("#scale-error", Label).update(str(error))
            return
        self.dismiss((sizes, str(self.query_one("#scale-mode", Select).value)))

    def action_cancel(self) -> None:
        """Escape: no scaling run."""
        self.dismiss(None)
