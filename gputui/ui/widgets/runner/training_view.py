"""The training view: a run or a comparison, epoch by epoch.

Its progress row follows the run in flight; its body (progress, epochs table, throughput
chart, speedup, placement, memory) is :func:`gputui.ui.render.runner.session_body`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputui.format import fmt_bytes, fmt_percent
from gputui.ui.widgets.runner.status import ProgressShown
from gputui.ui.widgets.runner.view import PaneState, RunView

if TYPE_CHECKING:  # loaded once the pane is built
    from rich.console import RenderableType
    from rich.text import Text

    from gputui.jobs.events import Error


class TrainingView(RunView):
    """A training session's runs: their epochs, throughput, speedup and placement."""

    def status_line(self, state: PaneState) -> Text:
        """The session's phase; while it trains, the trainer's pid, CPU use and memory."""
        from gputui.ui.render.runner import status_line

        line = status_line(state.session)
        watched = state.watched
        if watched is not None and watched.alive and state.busy:
            cpu = fmt_percent(watched.cpu_percent)
            line = line.copy()
            line.append(
                f"  pid {watched.pid} · CPU {cpu} · RSS {fmt_bytes(watched.rss_bytes)}",
                style="not bold",
            )
        return line

    def progress(self, state: PaneState) -> ProgressShown:
        """The run in flight's step and epoch; once it ended, where it got to."""
        from gputui.ui.render.runner import ended_line, progress_line

        session = state.session
        run = session.current if session is not None else None
        if run is not None and not run.ended:
            progress = run.progress
            epochs = run.started.epochs if run.started is not None else run.config.epochs
            line = progress_line(progress, epochs, run.device)
            if progress is None:  # not training yet (torch import, data): a moving bar
                return ProgressShown(True, None, 0, line)
            return ProgressShown(True, progress.steps_per_epoch, progress.step, line)
        if run is None:
            return ProgressShown(session is not None, 100, 0, "")
        # ended: the bar stays where the run got to (a stopped run short of 100%)
        return ProgressShown(True, 100, round(100 * run.share_done), ended_line(run))

    def error(self, state: PaneState) -> Error | None:
        """The first failed run's error."""
        session = state.session
        if session is None:
            return None
        failed = next((run for run in session.runs if run.error), None)
        return failed.error if failed is not None else None

    def body(self, state: PaneState, width: int) -> RenderableType:
        """The session's epochs, throughput chart, speedup, placement and memory."""
        from gputui.ui.render.runner import session_body

        return session_body(state.session, width, state.cores)
