"""A widget that paints a few pre-built lines, repainting only the lines that changed.

The monitor's hot path: every panel redraws once a sample, and Textual's general path
(wrapping, alignment, per-segment styles with selection offsets) is not needed. Each
:class:`~gputui.ui.render.draw.Line` is compared with the one on screen, turned into a
``Strip`` with styles resolved once per theme, and cached until it changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.content import Content
from textual.events import Resize
from textual.filter import ANSIToTruecolor, LineFilter
from textual.geometry import Region
from textual.strip import Strip
from textual.style import Style
from textual.widget import Widget

from gputui.ui.render.draw import Line
from gputui.ui.widgets.steady import SteadyRender


def set_border_title(widget: Widget, title: str | Content) -> None:
    """Set ``widget``'s border title as literal text (never markup), only if it changed."""
    content = Content(title) if isinstance(title, str) else title
    if widget.border_title != content.markup:
        widget.border_title = content


def set_border_subtitle(widget: Widget, subtitle: str | None) -> None:
    """Set ``widget``'s border subtitle as literal text (``None``: none), only if it changed."""
    markup = None if subtitle is None else Content(subtitle).markup
    if widget.border_subtitle != markup:
        widget.border_subtitle = None if subtitle is None else Content(subtitle)


class LineStyles:
    """Turns ``Line`` values into strips in a widget's styles: each style string (``bold
    $error``) parsed against the widget's own style once, until that changes (theme, CSS)."""

    def __init__(self, widget: Widget) -> None:
        self._widget = widget
        self._cache: dict[str, RichStyle] = {}
        self.base = Style()
        """The widget's own style, as of the last :meth:`changed` (call it before :meth:`strip`)."""

    def changed(self) -> bool:
        """Whether the widget's style changed since the last call (strips made before are stale)."""
        base = self._widget.visual_style
        if base is self.base:  # Textual hands out the same object until the style changes
            return False
        self.base = base
        self._cache.clear()
        return True

    def strip(self, line: Line, width: int) -> Strip:
        """``line`` as a strip exactly ``width`` cells wide, in the styles as of :meth:`changed`."""
        base_rich = self.base.rich_style
        segments = [
            Segment(text, self._rich(style) if style else base_rich) for text, style in line.parts
        ]
        return Strip(segments, line.width).adjust_cell_length(width, base_rich)

    def _rich(self, style: str) -> RichStyle:
        rich = self._cache.get(style)
        if rich is None:
            parsed = self._widget.app.stylesheet.parse_style(style)
            rich = self._cache[style] = (self.base + parsed).rich_style
        return rich


class LinesWidget(SteadyRender):
    """Paints ``build_lines(width)``; :meth:`rebuild` (called when the reading changes)
    repaints only the lines that changed. Heights come from CSS or the layout plan, so only a
    change in the number of lines (GPUs came or went) asks for a new layout."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._lines: tuple[Line, ...] = ()
        self._strips: dict[int, Strip] = {}
        self._styles = LineStyles(self)
        self._width = 0  # the width the lines were built for
        self._unbuilt = False  # a rebuild came before the width was known

    def build_lines(self, width: int) -> list[Line]:
        """The lines to paint for the content ``width``; override this."""
        raise NotImplementedError

    @property
    def lines(self) -> tuple[Line, ...]:
        return self._lines

    def rebuild(self) -> None:
        """Rebuild the lines; repaint those that differ from what is shown."""
        width = self.content_size.width
        if width <= 0:
            self._unbuilt = True  # built by the first render_line, once the width is known
            return
        self._unbuilt = False
        lines = tuple(self.build_lines(width))
        old = self._lines
        if len(lines) != len(old) or width != self._width:  # a new height, where it is auto
            self._lines, self._width = lines, width
            self._strips.clear()
            self.refresh(layout=len(lines) != len(old))
            return
        pairs = enumerate(zip(lines, old, strict=True))
        changed = [y for y, (new, was) in pairs if new != was]
        if not changed:
            return
        self._lines = lines
        for y in changed:
            self._strips.pop(y, None)
        # Only the changed lines: the border, title and unchanged lines stay as painted.
        self.refresh(*(Region(0, y, width, 1) for y in changed))

    def get_line_filters(self) -> Sequence[LineFilter]:
        """The app's line filters but the one that turns ANSI colours into truecolor: every
        colour here comes from the theme and the CSS, truecolor wherever that filter is on
        (a theme of ANSI colours turns it off), so it would only copy each changed line."""
        return [f for f in super().get_line_filters() if not isinstance(f, ANSIToTruecolor)]

    def render_lines(self, crop: Region) -> list[Strip]:
        """The strips for ``crop``. A widget drawn plain (the GPU list) hands
        over its cached lines, filtered and cropped: all that Textual's styles cache would
        do to them, without its walk through every style for each line. Otherwise, as
        Textual renders."""
        if not self._drawn_plain():
            return super().render_lines(crop)
        strips = [self.render_line(y) for y in crop.line_range]
        if filters := self.get_line_filters():
            background = self.background_colors[1]
            for line_filter in filters:
                strips = [strip.apply_filter(line_filter, background) for strip in strips]
        start, end = crop.column_span
        if (start, end) != (0, self._width):
            strips = [strip.crop(start, end) for strip in strips]
        return strips

    def _drawn_plain(self) -> bool:
        """Whether the widget has nothing of its own for Textual to draw around or over its
        lines: no border, outline, padding or scrollbar, no opacity, tint or hatch."""
        styles = self.styles
        return (
            not any(edge for edge, _ in (*styles.border, *styles.outline))
            and not any(styles.padding)
            and styles.opacity == styles.text_opacity == 1.0
            and not styles.tint.a
            and not (styles.has_rule("hatch") and styles.hatch != "none")
            and not (self.show_vertical_scrollbar or self.show_horizontal_scrollbar)
        )

    def render_line(self, y: int) -> Strip:
        """Line ``y`` as a strip, from the cache when it has not changed."""
        if self._unbuilt and self.content_size.width > 0:  # the reading came before the layout
            self._unbuilt = False
            self._width = self.content_size.width
            self._lines = tuple(self.build_lines(self._width))
            self._strips.clear()
        if self._styles.changed():  # theme or CSS changed: resolve styles again
            self._strips.clear()
        strip = self._strips.get(y)
        if strip is None:
            line = self._lines[y] if y < len(self._lines) else Line()
            strip = self._strips[y] = self._styles.strip(line, self._width)
        return strip

    def on_resize(self, event: Resize) -> None:
        self._strips.clear()
        self.rebuild()
