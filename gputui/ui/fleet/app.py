"""The fleet view: one compact line per GPU, grouped by host, for ``gputui --hosts ...``.

A :class:`~gputui.fleet.hosts.FleetSource` reads the hosts off the event loop; the app looks
at their latest readings once a second. The view paints through Textual's line API, so only
the rows on screen become strips, however many hosts there are.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Footer, Input, Static

from gputui.fleet.hosts import FleetSource, HostReading
from gputui.format import for_screen, one_line
from gputui.telemetry.readings import gpu_label
from gputui.ui.colours import TerminalColours
from gputui.ui.fleet.rows import (
    SORT_KEYS,
    FleetOrder,
    Row,
    fleet_rows,
    fleet_title,
    row_line,
)
from gputui.ui.keys import CTRL_C, HELP, QUIT, skip_if_copying
from gputui.ui.widgets.keys_help import KeyArea, KeysHelp, key_rows
from gputui.ui.widgets.lines import LineStyles

HISTORY_LENGTH = 60
"""Utilization samples kept per GPU for its sparkline."""

TICK_S = 1.0
"""How often the view looks for new readings (and ages the stale ones)."""

FLEET_KEYS_HELP = {
    "sort": f"Sort by the next key: {', '.join(SORT_KEYS)}",
    "reverse": "Reverse the order",
    "filter": "Show only what holds some text: a host, an exporter, a GPU's name or 'down'; "
    "Enter applies it",
    "clear_filter": "Show every host again",
    "help": "This list of keys",
    "command_palette": "The command palette: every command by name",
}
"""What the help screen says of the fleet view's keys (the rest: their descriptions)."""


class FleetView(ScrollView, can_focus=True):
    """Every row of the fleet, painted a screen at a time."""

    DEFAULT_CSS = """
    FleetView { height: 1fr; }
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(id="fleet")
        self._clock = clock
        self._rows: list[Row] = []
        self._history: dict[tuple[str, str], deque[float | None]] = {}
        self._seen: dict[str, float | None] = {}
        self._strips: dict[int, Strip] = {}
        self._styles = LineStyles(self)

    @property
    def rows(self) -> list[Row]:
        """The rows, in the order shown."""
        return self._rows

    def plain_lines(self) -> list[str]:
        """Every row's text, as painted at the current width (for tests and copies)."""
        width, now = self.scrollable_content_region.width, self._clock()
        return [row_line(row, self._history, now, width).plain.rstrip() for row in self._rows]

    def forget(self) -> None:
        """Start the sparklines over (a replay that seeks)."""
        self._history.clear()
        self._seen.clear()

    def show(self, hosts: Sequence[HostReading], order: FleetOrder) -> None:
        """Show ``hosts`` in ``order``; GPUs with a new reading add to their sparkline."""
        for host in hosts:
            if host.up and self._seen.get(host.host) != host.taken_at:
                self._seen[host.host] = host.taken_at
                for gpu in host.gpus:
                    spark = self._history.setdefault(
                        (host.host, gpu_label(gpu)), deque(maxlen=HISTORY_LENGTH)
                    )
                    spark.append(gpu.utilization_percent)
        self._rows = fleet_rows(hosts, order)
        self._strips.clear()
        self.virtual_size = Size(self.scrollable_content_region.width, len(self._rows))
        self.refresh()

    def render_line(self, y: int) -> Strip:
        """Row ``scroll_y + y``, built only when it comes on screen."""
        if self._styles.changed():
            self._strips.clear()
        index = self.scroll_offset.y + y
        strip = self._strips.get(index)
        if strip is None:
            width = self.scrollable_content_region.width
            if index < len(self._rows):
                line = row_line(self._rows[index], self._history, self._clock(), width)
                strip = self._styles.strip(line, width)
            else:
                strip = Strip.blank(width, self._styles.base.rich_style)
            self._strips[index] = strip
        return strip

    def on_resize(self) -> None:
        """Rows are laid out for a width: build the visible ones again."""
        self._strips.clear()
        self.virtual_size = Size(self.scrollable_content_region.width, len(self._rows))


class FleetApp(TerminalColours):
    """Many hosts' GPUs on one screen."""

    TITLE = "gputui fleet"
    CSS = """
    #fleet-title { height: 1; background: $panel; padding: 0 1; }
    #filter { dock: bottom; display: none; }
    #filter.shown { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        QUIT,
        CTRL_C,
        HELP,
        Binding("s", "sort", "Sort"),
        Binding("r", "reverse", "Reverse"),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self, source: FleetSource, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.source = source
        self.order = FleetOrder()
        self._clock = clock
        self._printable: dict[str, tuple[HostReading, HostReading]] = {}
        """Each host's latest reading as it came, and its copy made printable."""

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-title", markup=False)  # it holds what hosts sent
        yield FleetView(self._clock)
        yield Input(placeholder="filter: host, exporter, GPU name or 'down'", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.follow_terminal_colours()
        self.source.start()
        self.update_view()
        self.set_interval(TICK_S, self.update_view)
        self.query_one(FleetView).focus()

    def on_unmount(self) -> None:
        self.source.stop()

    def update_view(self) -> None:
        """Show the latest readings (and the ages, which grow even without them); nothing
        once the screen's widgets are gone (a tick that comes while the app closes)."""
        hosts = self._shown(self.source.latest())
        error = self.source.error
        try:
            title, view = self.query_one("#fleet-title", Static), self.query_one(FleetView)
        except NoMatches:
            return
        title.update(fleet_title(hosts, self.order, None if error is None else one_line(error)))
        view.show(hosts, self.order)

    def _shown(self, hosts: Sequence[HostReading]) -> list[HostReading]:
        """``hosts`` with the text the exporters sent made printable (:func:`for_screen`): a
        GPU name, a label or an error cannot write to the terminal. A host's copy is made
        once per reading of it."""
        shown: list[HostReading] = []
        made: dict[str, tuple[HostReading, HostReading]] = {}
        for host in hosts:
            cached = self._printable.get(host.host)
            copy = cached[1] if cached is not None and cached[0] is host else for_screen(host)
            made[host.host] = (host, copy)
            shown.append(copy)
        self._printable = made
        return shown

    async def action_quit(self, ctrl_c: bool = False) -> None:
        """Quit (``q``, Ctrl+C, ``^q``, the palette); the source stops on the way out.

        Args:
            ctrl_c: Ctrl+C asked; while text is selected, it copies that instead.
        """
        if ctrl_c:
            skip_if_copying(self.screen)
        self.exit()

    def action_help(self) -> None:
        """List every key (:meth:`key_areas`)."""
        self.push_screen(KeysHelp("gputui fleet: every key", self.key_areas()))

    def key_areas(self) -> list[KeyArea]:
        """Every key of the fleet view, read from the app's bindings."""
        bindings = (binding for _, binding in self._bindings)
        return [("Fleet", key_rows(bindings, self.get_key_display, FLEET_KEYS_HELP))]

    def action_sort(self) -> None:
        """Sort by the next key."""
        self.order = self.order.next_key()
        self.update_view()

    def action_reverse(self) -> None:
        """Reverse the order."""
        self.order = self.order.reversed()
        self.update_view()

    def action_filter(self) -> None:
        """Open the filter line."""
        field = self.query_one("#filter", Input)
        field.add_class("shown")
        field.focus()

    def action_clear_filter(self) -> None:
        """Close the filter line and show every host again."""
        self.query_one("#filter", Input).value = ""
        self._filter_by("")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter applies the filter and goes back to the rows."""
        self._filter_by(event.value.strip())

    def _filter_by(self, text: str) -> None:
        self.order = self.order.filtered(text)
        self.query_one("#filter", Input).remove_class("shown")
        self.query_one(FleetView).focus()
        self.update_view()


def run_fleet_app(source: FleetSource) -> int:
    """Run the fleet view until the user quits; returns the exit code."""
    app = FleetApp(source)
    app.run()
    return app.return_code or 0
