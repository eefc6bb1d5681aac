"""The exit codes every command and the engine's child process use, and how a long-running
command (``gputui serve``, ``gputui record``) is stopped: SIGTERM and Ctrl+C set one flag that
its loop waits on."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

EXIT_OK = 0
"""Everything asked for finished."""
EXIT_FAILED = 1
"""A run, a device or a check failed (the others still ran)."""
EXIT_USAGE = 2
"""Bad input: one line on standard error says what to do."""
EXIT_INTERRUPTED = 130
"""Ctrl+C (128 + SIGINT)."""


@dataclass
class Stop:
    """Set by a signal, a deadline or a caller (a test) to stop a long-running command
    (``serve``, ``record``), with its exit code."""

    event: threading.Event = field(default_factory=threading.Event)
    """Set once the command should stop."""
    code: int = EXIT_OK
    """The exit code: 0 for SIGTERM (and a deadline), 130 for Ctrl+C."""

    def __call__(self, code: int) -> None:
        """Stop with ``code`` (the first call wins)."""
        if not self.event.is_set():
            self.code = code
            self.event.set()


def stop_on_signals(stop: Stop) -> Callable[[], None]:
    """Route SIGTERM (exit 0) and SIGINT (exit 130) to ``stop``; returns how to undo it."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # only the main thread may set handlers; a caller stops us then
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, lambda *_: stop(EXIT_OK))}
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # `gputui serve &` ignores Ctrl+C
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, lambda *_: stop(EXIT_INTERRUPTED))

    def restore() -> None:
        for number, handler in previous.items():
            signal.signal(number, handler)

    return restore
