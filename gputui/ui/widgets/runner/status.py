"""The status line, progress row and error detail above the runner's body, and what they
and the body show of the runner's last job: a training or scaling session, run by run, or an
experiment (the body's tables and charts are :mod:`gputui.ui.render.runner`'s and
:mod:`gputui.ui.render.scaling`'s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import ProgressBar, Static
from textual.widgets._progress_bar import Bar  # (what it draws: not exported)

from gputui.ui.render.runner import (
    brief_line,
    ended_line,
    error_detail,
    experiment_body,
    experiment_chart,
    experiment_status,
    progress_line,
    session_body,
    speedup_text,
    status_line,
    throughput_chart,
)
from gputui.ui.render.scaling import scaling_body

if TYPE_CHECKING:
    from rich.console import RenderableType
    from textual.timer import Timer, TimerCallback

    from gputui.jobs.events import Error
    from gputui.jobs.runner import Runner


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

    def on_resize(self) -> None:
        """Laid out: the fill again at the bar's width (one set before the bar had a width
        is drawn to the nearest half cell of none: a glyph off, and each run its own)."""
        self.query_one(Bar).percentage = self.percentage


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
            detail.update(error_detail(error))


def job_line(runner: Runner) -> Text:
    """The last job's status line: the session's phase, or what the experiment does."""
    if runner.kind != "experiment":
        return status_line(runner.session)
    result = runner.experiment
    return experiment_status(result, runner.experiment_running) if result is not None else Text()


def job_progress(runner: Runner) -> ProgressShown:
    """A session's run in flight: its step and epoch (once it ended, where it got to); an
    experiment: while it runs, a moving bar and its latest step (its steps are not counted)."""
    if runner.kind == "experiment":
        return ProgressShown(runner.experiment_running, None, 0, runner.experiment_progress)
    session = runner.session
    run = session.current if session is not None else None
    if run is None:
        return ProgressShown(session is not None, 100, 0, "")
    if not run.ended:
        progress = run.progress
        epochs = run.started.epochs if run.started is not None else run.config.epochs
        line = progress_line(progress, epochs, run.device)
        if progress is None:  # not training yet (torch import, data): a moving bar
            return ProgressShown(True, None, 0, line)
        return ProgressShown(True, progress.steps_per_epoch, progress.step, line)
    # ended: the bar stays where the run got to (a stopped run short of 100%)
    return ProgressShown(True, 100, round(100 * run.share_done), ended_line(run))


def job_brief(runner: Runner, status: Text, width: int, lines: int) -> Text:
    """The runner in ``lines`` lines ``width`` cells wide, under the monitor: in one, its
    state and last figure (:func:`~gputui.ui.render.runner.brief_line`); in more, ``status``
    (the pane's), the progress row's line, then the last job's figures (a comparison's
    speedup, each run's throughput, an experiment's bars) as far as they fit."""
    session, experiment, progress = runner.session, runner.experiment, job_progress(runner).text
    parts = [status, Text(progress) if isinstance(progress, str) else progress]
    if lines <= 1:
        if runner.kind == "experiment" or runner.message is not None or runner.checking:
            return Text(" · ").join(part for part in parts if part)
        return brief_line(session)
    if runner.kind == "experiment" and experiment is not None:
        parts.append(experiment_chart(experiment, width))
    elif session is not None:
        if session.speedup is not None:
            parts.append(speedup_text(session.speedup))
        if any(run.best_images_per_second for run in session.runs):
            parts.append(throughput_chart(session.runs, width))
    return Text("\n").join(part for part in parts if part)


def job_error(runner: Runner) -> Error | None:
    """The error whose detail ``e`` shows: the experiment's, or the first failed run's."""
    if runner.kind == "experiment":
        return runner.experiment.error if runner.experiment is not None else None
    runs = runner.session.runs if runner.session is not None else []
    return next((run.error for run in runs if run.error), None)


def job_body(runner: Runner, width: int) -> RenderableType:
    """The last job's tables and charts, ``width`` cells wide."""
    if runner.kind == "experiment":
        result = runner.experiment
        return experiment_body(result, width, runner.cores) if result is not None else Text()
    if runner.kind == "scaling" and runner.session is not None:
        return scaling_body(runner.session, width, runner.cores)
    return session_body(runner.session, width, runner.cores)
