"""The help screen: every key of an app, by area, read from the bindings themselves.

``?``, ``h`` or F1 opens it (:data:`gputui.ui.keys.HELP`); Escape, or the same keys, close
it. Each app hands it its bindings sorted into areas (:func:`key_rows` makes the rows), so
a key added to an app is listed without anyone writing it here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

KeyRow = tuple[str, str]
"""A row of the help: the keys as the footer shows them (``q ^c``), and what they do."""
KeyArea = tuple[str, list[KeyRow]]
"""An area's heading (``Runner``) and its rows."""


def action_name(binding: Binding) -> str:
    """The action a binding runs, without its arguments (``quit(True)``: ``quit``)."""
    return binding.action.partition("(")[0].rpartition(".")[2]


def key_rows(
    bindings: Iterable[Binding],
    key_display: Callable[[Binding], str],
    explain: Mapping[str, str],
) -> list[KeyRow]:
    """One row per action and description, its keys together, in the bindings' order.

    Args:
        bindings: Single-key bindings (as a ``BindingsMap`` holds them).
        key_display: How a key is shown (the app's ``get_key_display``).
        explain: What an action does, by :func:`action_name`; an action not in it is
            described by its binding's description.
    """
    rows: dict[tuple[str, str], list[Binding]] = {}
    for binding in bindings:
        rows.setdefault((action_name(binding), binding.description), []).append(binding)
    made = []
    for (action, description), keys in rows.items():
        keys = sorted(keys, key=lambda binding: bool(binding.parse_key()[0]))  # ^c after q
        shown = " ".join(dict.fromkeys(key_display(binding) for binding in keys))
        made.append((shown, explain.get(action, description)))
    return made


def _table(rows: Sequence[KeyRow], key_width: int) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True, min_width=key_width)
    table.add_column(ratio=1)
    for keys, what in rows:
        table.add_row(Text(keys), Text(what))
    return table


class KeysHelp(ModalScreen[None]):
    """Every key of the app, an area (monitor, runner, processes; fleet) at a time."""

    DEFAULT_CSS = """
    KeysHelp { align: center middle; }
    KeysHelp > VerticalScroll {
        width: 96; max-width: 100%; height: auto; max-height: 100%;
        padding: 0 1; border: round $accent; background: $panel;
    }
    KeysHelp #keys-title { text-style: bold; }
    KeysHelp .keys-area { text-style: bold; color: $accent; margin-top: 1; }
    KeysHelp #keys-close { margin-top: 1; color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,h,f1", "dismiss", "Close"),
        Binding("q,f10", "app.quit", "Quit"),  # as on the app (a modal screen hides the app's)
    ]

    def __init__(self, title: str, areas: Sequence[KeyArea]) -> None:
        """List ``areas`` under ``title``."""
        super().__init__()
        self.title_text = title
        self.areas = areas
        """What the screen lists (tests read it)."""

    def compose(self) -> ComposeResult:
        key_width = max((len(keys) for _, rows in self.areas for keys, _ in rows), default=1)
        with VerticalScroll():
            yield Label(self.title_text, id="keys-title", markup=False)
            for area, rows in self.areas:
                yield Label(area, classes="keys-area", markup=False)
                yield Static(_table(rows, key_width))
            yield Label("Escape closes this list · q quits", id="keys-close")
