"""Textual's footer, made to fit: every key stays on screen at 80 columns.

Textual lays out the monitor's dozen keys with a space either side of each; below about 96
columns that cut the last keys off the screen, where an SSH user at 80x24 looks for them.
So, narrower than the full footer needs, it turns compact (one space between keys), and
narrower still it drops the palette's hint (``^p`` still opens the palette, as the README
says).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.events import Resize
from textual.widgets import Footer
from textual.widgets._footer import FooterKey  # (the keys it makes: not exported)

from gputui.ui.widgets.steady import SteadyRender


class FittingFooter(Footer, SteadyRender):
    """A footer that turns compact, then drops the palette's hint, as the screen narrows."""

    DEFAULT_CSS = """
    FittingFooter.-compact FooterLabel {
        margin: 0 1 0 0;  /* a key group's label ("oO Sort") keeps its space, as each key does */
    }
    """

    def __init__(self, full_from: int, compact_with_palette_from: int) -> None:
        """Fit a footer whose keys need ``full_from`` columns laid out in full, and
        ``compact_with_palette_from`` compact with the palette's hint."""
        super().__init__()
        self._full_from = full_from
        self._compact_with_palette_from = compact_with_palette_from

    def compose(self) -> ComposeResult:
        """Textual's keys, each made in the footer's form: a key starts compact and is
        bound to the footer's form once mounted, and each change restyles it (in the full
        form, twice for every key at each of the start's few composes: a tenth of a second
        of the first frame here). The palette's key is bound to nothing: it stays compact."""
        for widget in super().compose():
            if isinstance(widget, FooterKey) and not widget.has_class("-command-palette"):
                widget.set_reactive(FooterKey.compact, self.compact)
                widget.set_class(self.compact, "-compact", update=False)
            yield widget

    def on_mount(self) -> None:
        """Fit the first layout's width (the screen's: the footer spans it)."""
        self._fit(self.app.size.width)

    def on_resize(self, event: Resize) -> None:
        self._fit(event.size.width)

    def _fit(self, width: int) -> None:
        compact = width < self._full_from
        palette = width >= self._full_from or width >= self._compact_with_palette_from
        if self.compact != compact:
            self.compact = compact
        if self.show_command_palette != palette:
            self.show_command_palette = palette
            self.refresh(recompose=True)  # Textual reads it only when composing the keys
