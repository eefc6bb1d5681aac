"""What a view in the runner's switcher is: a body it draws, and what it puts in the
status line and progress row above it (:mod:`.status`), all read from the pane's state.

A new view is a subclass of :class:`RunView` and one entry in the pane's ``_view_types()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from textual.widgets import Static

if TYPE_CHECKING:  # loaded once the pane is built
    from rich.console import RenderableType
    from rich.text import Text

    from gputui.jobs.events import Error
    from gputui.jobs.results import ExperimentResult, Session
    from gputui.telemetry.watched import ProcessReading
    from gputui.ui.widgets.runner.status import ProgressShown


class PaneState(Protocol):
    """What the views draw from: the runner pane's state (the pane is one)."""

    @property
    def session(self) -> Session | None:
        """The training or scaling session shown (the last one started)."""
        ...

    @property
    def watched(self) -> ProcessReading | None:
        """The latest reading of the trainer process (``None`` when none runs)."""
        ...

    @property
    def busy(self) -> bool:
        """Whether a session or an experiment is running."""
        ...

    @property
    def experiment(self) -> ExperimentResult | None:
        """The experiment shown (the last one started)."""
        ...

    @property
    def experiment_running(self) -> bool:
        """Whether the experiment is still running."""
        ...

    @property
    def experiment_progress(self) -> str:
        """The experiment's latest progress line."""
        ...

    @property
    def cores(self) -> int:
        """The CPU cores the jobs may use (the pane's setup says)."""
        ...


class RunView(Static):
    """One kind of run the pane shows; the pane paints only the view on screen."""

    def status_line(self, state: PaneState) -> Text:
        """The status line (unless the pane has a complaint to show instead)."""
        raise NotImplementedError

    def progress(self, state: PaneState) -> ProgressShown:
        """What the progress row shows."""
        raise NotImplementedError

    def error(self, state: PaneState) -> Error | None:
        """The error whose detail ``e`` shows, if any."""
        raise NotImplementedError

    def body(self, state: PaneState, width: int) -> RenderableType:
        """The view's tables and charts, ``width`` cells wide."""
        raise NotImplementedError
