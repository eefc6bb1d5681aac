"""The Doctor screen's widgets: a check (:class:`CheckItem`) and a device
(:class:`DeviceCard`), each one focusable entry of the report drawn from a Rich grid.

Each check reads as a status word with a glyph (``✓ ok``, ``! warn``, ``✗ FAIL``,
``- skip``, ``i info``): colour helps, but the word carries the meaning under ``NO_COLOR``.
Their styles are in ``gputui/ui/doctor/doctor.tcss``.
"""

from __future__ import annotations

import re
from typing import ClassVar

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widget import Widget

from gputui.doctor.checks import Check, DeviceReport, Status
from gputui.doctor.render import figure_rows, is_command
from gputui.format import NA, fmt_bytes

STATUS_LABELS = {
    Status.OK: "✓ ok",
    Status.WARN: "! warn",
    Status.FAIL: "✗ FAIL",
    Status.SKIP: "- skip",
    Status.INFO: "i info",
}
"""Each status as a glyph and a word: the word alone must say it (``NO_COLOR``)."""

WIDE = 100
"""Terminals this wide or wider give a check's name a column of its own."""

NAME_WIDTH = 22
"""Width of the name column when there is one."""

STATUS_WIDTH = 6
"""Width of the status column (``✗ FAIL``)."""

LABEL_WIDTH = 15
"""Width of a device card's label column (``device → host``)."""

_BACKQUOTED = re.compile(r"`([^`]+)`")


def fix_to_copy(fix: str) -> str:
    """What ``c`` copies of a fix: the whole fix when it is a command, else the first
    `backquoted` command in it, else the whole sentence."""
    if is_command(fix):
        return fix
    found = _BACKQUOTED.search(fix)
    return found.group(1) if found else fix


def _with_commands(text: str, base: Style, command: Style) -> Text:
    """``text`` with each `backquoted` span in the ``command`` style (backquotes kept)."""
    result = Text(style=base)
    last = 0
    for found in _BACKQUOTED.finditer(text):
        result.append(text[last : found.start()])
        result.append(found.group(0), style=command)
        last = found.end()
    result.append(text[last:])
    return result


class ReportItem(Widget, can_focus=True):
    """One focusable entry of the report (a check or a device), drawn from a Rich grid."""

    DEFAULT_CSS = """
    ReportItem {
        height: auto;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("down,j", "screen.focus_item(1)", "Next", show=False),
        Binding("up,k", "screen.focus_item(-1)", "Previous", show=False),
    ]

    def style_of(self, name: str) -> Style:
        """The Rich style of one of this widget's component classes."""
        return self.get_component_rich_style(name, partial=False)


class CheckItem(ReportItem):
    """One check: status, name, message and fix."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "check--ok",
        "check--warn",
        "check--fail",
        "check--skip",
        "check--info",
        "check--name",
        "check--label",
        "check--command",
    }

    def __init__(self, check: Check, *, id: str | None = None) -> None:
        """Show ``check``.

        Args:
            check: The finding to show.
            id: The widget id.
        """
        super().__init__(id=id, classes=f"-{check.status.value}")
        self.check = check

    def render(self) -> RenderableType:
        """A grid: status, name and text side by side when wide; ``name · text`` when not."""
        check = self.check
        status_style = self.style_of(f"check--{check.status.value}")
        status = Text(STATUS_LABELS[check.status], style=status_style)
        name = Text(check.name, style=self.style_of("check--name"))
        command = self.style_of("check--command")
        message = status_style if check.status is Status.SKIP else Style()
        body = _with_commands(check.message, message, command)
        if check.fix:
            label = "fix " if check.status in (Status.FAIL, Status.WARN) else "tip "
            body.append("\n")
            body.append(label, style=self.style_of("check--label"))
            if is_command(check.fix):
                body.append(check.fix, style=command)
            else:
                body.append_text(_with_commands(check.fix, Style(), command))
        grid = Table.grid(padding=(0, 2, 0, 0))
        grid.add_column(width=STATUS_WIDTH, no_wrap=True)
        if self.screen.size.width >= WIDE:
            grid.add_column(width=NAME_WIDTH, overflow="fold")
            grid.add_column(ratio=1, overflow="fold")
            grid.add_row(status, name, body)
        else:
            grid.add_column(ratio=1, overflow="fold")
            grid.add_row(status, Text.assemble(name, " · ", body))
        return grid


class DeviceCard(ReportItem):
    """One device: identity, then its measured figures (``n/a`` when not measured)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"device--name", "device--label", "device--note"}

    def __init__(self, device: DeviceReport, *, id: str | None = None) -> None:
        """Show ``device``.

        Args:
            device: The device and its figures.
            id: The widget id.
        """
        super().__init__(id=id)
        self.device = device

    def render(self) -> RenderableType:
        """The device's line, then a label/value grid of its figures and its notes."""
        device = self.device
        label = self.style_of("device--label")
        head = Text.assemble(
            (f"{device.device}  ", self.style_of("device--name")),
            (device.name, self.style_of("device--name")),  # a tuple: plain text, not markup
        )
        grid = Table.grid(padding=(0, 2, 0, 0))
        grid.add_column(width=LABEL_WIDTH, no_wrap=True, style=label)
        grid.add_column(ratio=1, overflow="fold")
        for row_label, value in device_rows(device):
            grid.add_row(Text(row_label), Text(value))  # Text: figures and notes are not markup
        note_style = self.style_of("device--note")
        notes = Table.grid(padding=(0, 1, 0, 0))
        notes.add_column(width=1, style=note_style)
        notes.add_column(ratio=1, overflow="fold", style=note_style)
        for note in device.notes:
            notes.add_row("·", Text(note))
        return Group(head, Padding(Group(grid, notes), (0, 0, 0, 2)))


def device_rows(device: DeviceReport) -> list[tuple[str, str]]:
    """A device's card as (label, value) rows: what it is, then its figures
    (:func:`~gputui.doctor.render.figure_rows`); what was not measured reads ``n/a``."""
    return [
        *([("NVML's GPU", str(device.nvml_index))] if device.nvml_index is not None else []),
        ("compute", device.compute_capability or NA),
        ("memory", fmt_bytes(device.memory_bytes)),
        *figure_rows(device, plain=False),
    ]
