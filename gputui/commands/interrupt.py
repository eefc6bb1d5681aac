"""Ctrl+C during ``gputui bench`` or ``gputui experiment``: stop the job, keep what finished.

Inside ``with CtrlC() as ctrl_c:``, SIGINT no longer raises ``KeyboardInterrupt``. The
first one asks the child that :meth:`CtrlC.watch` was given to stop after its current
step (it then says what it finished, and its run folder is complete); a second one
kills it at once. The command then prints what finished and exits 130.
"""

from __future__ import annotations

import signal
from types import FrameType, TracebackType
from typing import Any

from gputui.jobs.process import ChildProcess


class CtrlC:
    """SIGINT, caught for the length of a ``with`` block, as a request to stop a child."""

    def __init__(self) -> None:
        self.pressed = 0
        """How many times Ctrl+C came so far."""
        self._child: ChildProcess | None = None
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> CtrlC:
        try:
            if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # `gputui bench &`
                self._previous = signal.signal(signal.SIGINT, self._on_sigint)
                self._installed = True
        except ValueError:  # not the main thread: Ctrl+C stays a KeyboardInterrupt
            pass
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def watch(self, child: ChildProcess) -> ChildProcess:
        """Make ``child`` the one Ctrl+C stops (at once, if Ctrl+C already came); returns it."""
        self._child = child
        if self.pressed:
            child.stop(wait=False)
        return child

    def _on_sigint(self, _signum: int, _frame: FrameType | None) -> None:
        self.pressed += 1
        child = self._child
        if child is None:
            return
        if self.pressed == 1:
            child.stop(wait=False)  # after its current step; it then says what it finished
        else:
            child.kill(wait_s=0)
