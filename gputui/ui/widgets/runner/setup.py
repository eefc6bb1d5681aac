"""Moved to :mod:`gputui.jobs.runner`; kept while the app and a few tests import from here."""

from gputui.jobs.runner import UI_NICE, RunnerSetup, ui_friendly, ui_friendly_threads

__all__ = ["UI_NICE", "RunnerSetup", "ui_friendly", "ui_friendly_threads"]
