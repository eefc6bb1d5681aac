"""The base of both apps, the monitor and the fleet view: colours that follow the terminal
(its own palette on 16 colours, none under ``NO_COLOR`` or ``TERM=dumb``), and a light timer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from textual.app import App
from textual.filter import LineFilter, NoColor


def theme_for(color_system: str | None) -> str | None:
    """The theme for Rich's ``color_system``: in 16 colours, ``ansi-dark``, the terminal's own
    palette by name (Rich would map Textual's truecolor shades to their nearest ANSI colour:
    panels turn black, muted text vanishes); else ``None``, Textual's default."""
    return "ansi-dark" if color_system in ("standard", "windows") else None


def wants_plain(no_color: bool, color_system: str | None) -> bool:
    """Whether to draw without colour: ``NO_COLOR`` is set (``App.no_color``), or the terminal
    has none (``color_system`` is ``None``). Textual alone leaves colour in both: under
    ``NO_COLOR`` it writes each colour as a grey escape, and under ``TERM=dumb`` 24-bit colour."""
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

    def _later(self, delay_s: float, callback: Callable[[], object]) -> asyncio.TimerHandle:
        """Call ``callback`` after ``delay_s`` straight from the event loop (a Textual timer
        adds a task and a message to each shot); an error still ends the app with its
        traceback, as it would from a Textual timer."""
        return asyncio.get_running_loop().call_later(delay_s, self._guarded, callback)

    def _guarded(self, callback: Callable[[], object]) -> None:
        try:
            callback()
        except Exception as error:  # as Textual treats an error in a timer's callback
            self._handle_exception(error)
