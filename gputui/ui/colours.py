"""How an app's colours follow the terminal: its own palette on 16 colours, none under
``NO_COLOR`` or on a terminal without colour (``TERM=dumb``). Both apps, the monitor and the
fleet view, draw through :class:`TerminalColours`."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import App
from textual.filter import LineFilter, NoColor


def theme_for(color_system: str | None) -> str | None:
    """The theme for a terminal's colour system: in 16 colours, the terminal's own palette.

    Textual's themes are truecolor; on a 16-colour terminal Rich would map each
    shade to its nearest ANSI colour (panels turn black, muted text vanishes).
    ``ansi-dark`` uses the terminal's 16 colours by name instead.

    Args:
        color_system: Rich's detected colour system (``standard``, ``256``,
            ``truecolor``, ``windows``, or ``None`` for no colour).

    Returns:
        A theme name, or ``None`` to keep Textual's default.
    """
    return "ansi-dark" if color_system in ("standard", "windows") else None


def wants_plain(no_color: bool, color_system: str | None) -> bool:
    """Whether to draw without colour: ``NO_COLOR`` is set, or the terminal has none.

    Textual alone leaves colour in both: under ``NO_COLOR`` it turns each colour into a
    grey, still written as a 24-bit or 256-colour escape, and where Rich finds no colour
    system (``TERM=dumb``) Textual writes 24-bit colour.

    Args:
        no_color: Textual's reading of ``NO_COLOR`` (``App.no_color``).
        color_system: Rich's detected colour system; ``None`` for a terminal without colour.
    """
    return no_color or color_system is None


class TerminalColours(App[int]):
    """An app whose colours follow the terminal (:func:`theme_for`, :func:`wants_plain`).

    Subclasses call :meth:`follow_terminal_colours` when mounted. Headless apps (tests) keep
    Textual's defaults, so that their screens do not depend on ``$TERM``.
    """

    _plain: tuple[LineFilter, ...] = ()

    def follow_terminal_colours(self) -> None:
        """Pick the theme and the plain filter for this terminal."""
        if self.is_headless:
            return
        theme = theme_for(self.console.color_system)
        if theme is not None:
            self.theme = theme
        if wants_plain(self.no_color, self.console.color_system):
            self._plain = (NoColor(),)  # every colour becomes the terminal's own

    def get_line_filters(self) -> Sequence[LineFilter]:
        """Textual's filters, then, on a plain screen (:func:`wants_plain`), one that drops
        every colour for the terminal's default."""
        filters = super().get_line_filters()
        return [*filters, *self._plain] if self._plain else filters
