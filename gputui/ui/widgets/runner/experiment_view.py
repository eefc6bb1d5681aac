"""The experiment view: one experiment (batch-sweep, sync-stall, pipelines) on the
baseline and the chosen device, as its rows arrive.

Its progress row is an indeterminate bar with the experiment's latest line; its body
(table, chart, conclusion) is :func:`gputui.ui.render.runner.experiment_body`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from gputui.ui.widgets.runner.status import ProgressShown
from gputui.ui.widgets.runner.view import PaneState, RunView

if TYPE_CHECKING:  # loaded once the pane is built
    from rich.console import RenderableType

    from gputui.jobs.events import Error


class ExperimentView(RunView):
    """An experiment's measurements, its chart and what they show."""

    def status_line(self, state: PaneState) -> Text:
        """What the experiment is doing, or how it ended."""
        from gputui.ui.render.runner import experiment_status

        result = state.experiment
        if result is None:
            return Text()
        return experiment_status(result, state.experiment_running)

    def progress(self, state: PaneState) -> ProgressShown:
        """While it runs, a moving bar and its latest step (its steps are not counted)."""
        return ProgressShown(state.experiment_running, None, 0, state.experiment_progress)

    def error(self, state: PaneState) -> Error | None:
        """The experiment's error."""
        return state.experiment.error if state.experiment is not None else None

    def body(self, state: PaneState, width: int) -> RenderableType:
        """The experiment's table, chart and conclusion."""
        from gputui.ui.render.runner import experiment_body

        result = state.experiment
        return experiment_body(result, width, state.cores) if result is not None else Text()
