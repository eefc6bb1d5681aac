"""Drawing primitives every panel's renderer is built from: a styled :class:`Line`, bars,
sparklines, gauges and the theme's styles.

A line is a list of ``(text, style)`` parts whose styles are Textual theme variables,
resolved when a widget paints the line (so they follow the theme, ``NO_COLOR`` and 16-colour
terminals). The monitor builds every line once a second, so a line stays a list of small
tuples, compared and painted without building ``Content``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.cells import cell_len, set_cell_size
from textual.content import Content

from gputui.format import fmt_percent

MUTED = "$foreground 60%"
"""Text that stays in the background: ``$text-muted``'s look. Not ``$text-muted`` itself:
Textual drops the 60% of its value (``auto 60%``) when a style string names it, which
drew these full white."""
LABEL = MUTED
"""Style of a label in front of a value."""
OK = "$success"
"""A level comfortably inside its range."""
WARM = "$warning"
"""A level getting high."""
HOT = "$error"
"""A level at its limit, or something broken."""
UTIL_SPARK = "$accent"
"""Sparkline of GPU utilization."""
MEMORY_SPARK = "$secondary"
"""Sparkline of GPU memory in use."""
TRACK = MUTED
"""The unfilled part of a bar."""
RULE = "$panel-lighten-2"
"""The rule a card's title sits on (the colour of the panels' borders)."""

_EIGHTHS = " ▏▎▍▌▋▊▉"
SPARKS = " ▁▂▃▄▅▆▇█"
"""Blocks from empty to full, in eighths."""
_TRACK_CHAR = "·"
GAP = "  "
"""Space between the items of a line."""


class Line:
    """One line of styled text: ``(text, style)`` parts and their width in cells."""

    __slots__ = ("parts", "width")

    def __init__(self, *parts: str | tuple[str, str]) -> None:
        """Start a line with ``parts``."""
        self.parts: list[tuple[str, str]] = []
        self.width = 0
        for part in parts:
            if isinstance(part, str):
                self.add(part)
            else:
                self.add(*part)

    def add(self, text: str, style: str = "") -> Line:
        """Append ``text`` in ``style`` (joined to the last part when that has the same style,
        so a line has as few parts, and its strip as few segments, as it can); returns the line."""
        if text:
            parts = self.parts
            if parts and parts[-1][1] == style:
                parts[-1] = (parts[-1][0] + text, style)
            else:
                parts.append((text, style))
            self.width += len(text) if text.isascii() else cell_len(text)
        return self

    def extend(self, other: Line) -> Line:
        """Append every part of ``other``; returns the line."""
        parts, more = self.parts, other.parts
        if parts and more and parts[-1][1] == more[0][1]:
            parts[-1] = (parts[-1][0] + more[0][0], more[0][1])
            parts.extend(more[1:])
        else:
            parts.extend(more)
        self.width += other.width
        return self

    def fit(self, width: int) -> Line:
        """Pad with spaces, or crop ending in ``…``, to exactly ``width`` cells (returns self)."""
        if self.width < width:
            return self.add(" " * (width - self.width))
        if self.width == width:
            return self
        kept: list[tuple[str, str]] = []
        room = max(width - 1, 0)
        for text, style in self.parts:
            size = cell_len(text)
            if size > room:
                if room:
                    kept.append((set_cell_size(text, room), style))
                kept.append(("…", style))
                break
            kept.append((text, style))
            room -= size
        self.parts = kept if width > 0 else []
        self.width = max(width, 0)
        return self

    @property
    def plain(self) -> str:
        """The text without styles."""
        return "".join(text for text, _ in self.parts)

    @property
    def cell_length(self) -> int:
        """Width in cells."""
        return self.width

    def styled(self) -> list[tuple[str, str]]:
        """``(text, style)`` of each styled part (unstyled parts left out)."""
        return [(text, style) for text, style in self.parts if style]

    def content(self) -> Content:
        """The line as Textual ``Content``."""
        return Content.assemble(*self.parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Line) and self.parts == other.parts

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Line({self.plain!r})"


def join(lines: Iterable[Line], separator: str) -> Line:
    """``lines`` one after another, with ``separator`` between them."""
    joined = Line()
    for index, line in enumerate(lines):
        if index:
            joined.add(separator)
        joined.extend(line)
    return joined


def level_style(percent: float | None, warm: float = 60.0, hot: float = 85.0) -> str:
    """The style of a level: ``OK`` below ``warm``, ``WARM`` below ``hot``, else ``HOT``."""
    if percent is None:
        return LABEL
    if percent >= hot:
        return HOT
    if percent >= warm:
        return WARM
    return OK


def temperature_style(celsius: float | None) -> str:
    """Temperature colour: warm from 75 °C, hot from 85 °C (most GPUs throttle near 90)."""
    return "" if celsius is None else level_style(celsius, warm=75.0, hot=85.0)


def bar(percent: float | None, width: int, style: str | None = None) -> Line:
    """A bar ``width`` cells wide filled to ``percent`` (0-100; ``None``: the track alone), to
    an eighth of a cell, on a dotted track; ``style`` (default: :func:`level_style`) fills it."""
    if width <= 0:
        return Line()
    if percent is None:
        return Line((_TRACK_CHAR * width, TRACK))
    clamped = min(max(percent, 0.0), 100.0)
    full, part = divmod(round(clamped / 100.0 * width * 8), 8)
    filled = "█" * full + (_EIGHTHS[part] if part else "")
    track = _TRACK_CHAR * (width - len(filled))
    return Line((filled, style or level_style(percent)), (track, TRACK))


_SPARK_FOR_PERCENT = tuple(
    SPARKS[max(1, round(percent / 100.0 * (len(SPARKS) - 1)))] for percent in range(101)
)
"""The sparkline character for each whole percent (an idle GPU still shows a floor)."""


def spark_char(value: float | None) -> str:
    """The sparkline character for ``value`` (0-100, clamped); a blank for no reading."""
    if value is None or value != value:  # None or NaN: no reading
        return " "
    percent = int(value + 0.5)  # clamped by comparing: min() and max() cost twice the rest
    return _SPARK_FOR_PERCENT[percent if 0 <= percent <= 100 else 0 if percent < 0 else 100]


def sparkline(values: Sequence[float | None], width: int, style: str = UTIL_SPARK) -> Line:
    """The last ``width`` values (0-100, oldest first; ``None`` blank) as block characters in
    ``style``, newest on the right, padded on the left to exactly ``width`` cells."""
    if width <= 0:
        return Line()
    if not isinstance(values, (list, tuple)):
        values = tuple(values)
    chars = "".join([spark_char(value) for value in values[-width:]])
    return Line(" " * (width - len(chars)), (chars, style))


def labelled(label: str, value: str, value_style: str = "") -> Line:
    """``label value`` with the label muted."""
    return Line((label, LABEL), " ", (value, value_style))


def fit_line(required: Sequence[Line], optional: Sequence[Line], width: int) -> Line:
    """All of ``required`` (cropped if even they do not fit), then each of ``optional`` (most
    important first) that still fits in ``width`` cells, joined with ``GAP``."""
    line = join(required, GAP)
    for item in optional:
        needed = item.width + (len(GAP) if line.width else 0)
        if line.width + needed <= width:
            if line.width:
                line.add(GAP)
            line.extend(item)
    return line.fit(width) if line.width > width else line


def gauge_line(
    label: str,
    percent: float | None,
    width: int,
    *,
    spark: Sequence[float | None] = (),
    spark_style: str = UTIL_SPARK,
    detail: str = "",
) -> Line:
    """``LABEL ███··· 42% ▁▂▃ detail``, exactly ``width`` cells: the bar takes ~45% of the
    room, the sparkline of ``spark`` (none when empty) the rest, ``detail`` follows it
    (``20.1/80.0 GiB``)."""
    head = f"{label:<4}"
    number = f" {fmt_percent(percent):>4}"
    tail = f"  {detail}" if detail else ""
    room = width - len(head) - len(number) - cell_len(tail)
    if room < 6 and detail:
        room, tail = room + cell_len(tail), ""
    line = Line((head, LABEL))
    if spark and room >= 16:
        bar_width = max(8, room * 45 // 100)
        line.extend(bar(percent, bar_width)).add(number).add(" ")
        line.extend(sparkline(spark, room - bar_width - 1, spark_style))
    else:
        line.extend(bar(percent, max(room, 3))).add(number)
    return line.add(tail).fit(width)
