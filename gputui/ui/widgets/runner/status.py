"""The status line, progress row and error detail above the runner's views.

One of each, shared by every view (each view says what they show): the views switch
without moving them, and a hidden view never animates a progress bar of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import ProgressBar, Static

if TYPE_CHECKING:  # loaded once the pane is built
    from textual.timer import Timer, TimerCallback

    from gputui.jobs.events import Error


@dataclass(frozen=True)
class ProgressShown:
    """What the progress row shows."""

    shown: bool
    """Whether the row is on screen (the bar is set either way)."""
    total: float | None
    """The bar's total (``None``: an indeterminate bar that moves to say work goes on)."""
    step: float
    """How far the bar is filled, out of ``total``."""
    text: Text | str
    """The line beside the bar."""


class RunProgressBar(ProgressBar):
    """Textual's progress bar without its ETA's once-a-second refresh (it shows no ETA), so
    an idle runner pane never wakes the monitor between beats."""

    def set_interval(
        self,
        interval: float,
        callback: TimerCallback | None = None,
        *,
        name: str | None = None,
        repeat: int = 0,
        pause: bool = False,
    ) -> Timer:
        """As Textual's; the timer that would call ``update`` (the ETA's) never starts."""
        eta = callback == self.update
        return super().set_interval(
            interval, callback, name=name, repeat=repeat, pause=pause or eta
        )


class RunStatus(Vertical):
    """A status line, a progress bar with its line, and the error's detail on demand."""

    DEFAULT_CSS = """
    RunStatus {
        height: auto;
    }
    """

    def compose(self) -> ComposeResult:
        """Empty until the pane first paints (in the frame they are composed for)."""
        yield Static("", id="runner-status")
        with Horizontal(id="runner-progress-row"):
            yield RunProgressBar(total=None, show_eta=False, id="runner-progress")
            yield Static("", id="runner-progress-text")
        yield Static("", id="runner-detail")

    def show(self, line: Text, progress: ProgressShown, error: Error | None) -> None:
        """Show ``line``, ``progress`` and the detail of ``error`` (hidden when ``None``)."""
        self.query_one("#runner-status", Static).update(line)
        self.query_one("#runner-progress-row").display = progress.shown
        bar = self.query_one("#runner-progress", ProgressBar)
        bar.update(total=progress.total, progress=progress.step)
        self.query_one("#runner-progress-text", Static).update(progress.text)
        detail = self.query_one("#runner-detail", Static)
        detail.display = error is not None
        if error is not None:
            from gputui.ui.render.runner import error_detail

            detail.update(error_detail(error))
