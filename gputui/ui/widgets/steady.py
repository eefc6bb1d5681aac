"""Widgets that give the compositor the strips they gave it last, while nothing in them changed.

On every frame Textual asks each widget whose clip overlaps the changed area for all of its
lines (about ten widgets at 160x50, though a beat changes a few lines of two), and each
answer walks the widget's styles, its ancestors' backgrounds and the line filters. A widget
that mixes in :class:`SteadyRender` answers from its last strips until it is refreshed.
"""

from __future__ import annotations

from textual.containers import Horizontal
from textual.filter import LineFilter
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget


class SteadyRender(Widget):
    """Repeats a widget's last strips while it has no dirty line.

    Listed after the widget's own base (``class Monitor(Vertical, SteadyRender)``): Textual
    takes a widget's default CSS from its first base only.
    """

    _last_render: tuple[Region, tuple[LineFilter, ...], list[Strip]] | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        """The last strips while neither the widget, the crop nor the line filters changed;
        else rendered as Textual does."""
        filters = tuple(self.get_line_filters())
        last = self._last_render
        # Whatever changes a widget's look calls refresh() (a resize too), which marks lines
        # of its styles cache dirty; they stay dirty until rendered.
        if last is not None and not self._styles_cache._dirty_lines and last[:2] == (crop, filters):
            return last[2]
        strips = super().render_lines(crop)
        self._last_render = (crop, filters, strips)
        return strips


class SteadyScreen(Screen[object], SteadyRender):
    """A screen that repeats its background while it has not changed."""


class SteadyHorizontal(Horizontal, SteadyRender):
    """A ``Horizontal`` that repeats its background while it has not changed."""
