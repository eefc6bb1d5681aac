"""The question before a signal: ``k`` (SIGTERM), ``K`` (SIGKILL) or ``i`` (SIGINT) on the
selected process.

It names the process as the table showed it (pid, user, command); ``y`` sends, ``n`` or
Escape leaves it running. The signal itself is :func:`gputui.telemetry.signals.signal_process`'s,
which checks again that the pid still names that process.
"""

from __future__ import annotations

import signal
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Label

from gputui.format import NA, one_line
from gputui.telemetry.readings import GpuProcess, shown_pid
from gputui.ui.widgets.question import Question

EFFECTS = {
    signal.SIGTERM: "SIGTERM asks the process to end; it may clean up first.",
    signal.SIGKILL: "SIGKILL ends the process at once; it cannot clean up.",
    signal.SIGINT: "SIGINT interrupts the process, as Ctrl+C in its terminal would.",
}
"""What each signal does, in a few words."""


class SignalDialog(Question):
    """Asks whether to send ``signum`` to a process; dismissed with True (y) or False."""

    DEFAULT_CSS = """
    SignalDialog > Vertical { width: 72; border: round $error; }
    SignalDialog #signal-effect { margin-bottom: 1; color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Send"),
        Binding("n", "answer(False)", "Cancel"),
        Binding("escape", "answer(False)", "Cancel", show=False),
    ]

    def __init__(self, process: GpuProcess, signum: signal.Signals) -> None:
        """Ask about sending ``signum`` to ``process`` (as the table showed it)."""
        super().__init__()
        self.process = process
        self.signum = signum

    def lines(self) -> ComposeResult:
        process = self.process
        question = f"Send {self.signum.name} to pid {shown_pid(process)}?"
        yield Label(question, classes="question")
        yield Label(EFFECTS[self.signum], id="signal-effect")
        yield Label(f"user     {one_line(process.user or NA)}", markup=False)
        yield Label(f"command  {one_line(process.command or NA)}", markup=False)
        yield Label("y sends it · n or Escape leaves it running", classes="keys")
