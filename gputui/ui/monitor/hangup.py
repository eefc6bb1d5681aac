"""Leaving when the terminal goes: SIGHUP (the SSH connection was lost), SIGTERM, or a
terminal that closed without a signal. The app stops the trainer and quits; a terminal that
is gone may block its last writes, so a daemon watchdog ends the process ``HANGUP_EXIT_S``
after the signal, with the status a shell reports for a process the signal ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

HANGUP_EXIT_S = 2.0
"""After SIGHUP or SIGTERM, longest wait for a graceful exit before the process ends itself."""
HANGUP_EXIT_CODE = 128 + 1
"""Exit status after SIGHUP (as a shell reports a process killed by it)."""
STOP_SIGNALS = ("SIGHUP", "SIGTERM")
"""Signals that stop the trainer and quit gracefully, handing the terminal back (SIGTERM's
default would end the process at once, leaving the terminal in the app's screen modes)."""


def _exit_after(seconds: float, code: int) -> None:
    time.sleep(seconds)
    os._exit(code)


def start_watchdog(code: int) -> None:
    """End the process with ``code`` after ``HANGUP_EXIT_S``, unless it has ended by then."""
    threading.Thread(target=_exit_after, args=(HANGUP_EXIT_S, code), daemon=True).start()


def input_terminal() -> int | None:
    """The file descriptor of the terminal the app reads its keys from; None if stdin is not one."""
    stdin = sys.__stdin__
    if stdin is None:
        return None
    try:
        fd = stdin.fileno()
    except (AttributeError, ValueError, OSError):  # a closed or fake one
        return None
    return fd if os.isatty(fd) else None


def terminal_gone(fd: int) -> bool:
    """Whether the terminal on ``fd`` has hung up (``isatty`` is then False), though no SIGHUP
    may have come: the kernel sends it only to the process that controls the terminal (not
    one started by ``setsid``), and without it Textual's input thread would read end-of-file
    in a busy loop, its writer thread die, and the app block using a core for ever."""
    return not os.isatty(fd)


class StopSignals:
    """The handlers of ``STOP_SIGNALS`` while the app runs, and the ones they replaced."""

    def __init__(self) -> None:
        self._previous: dict[int, Callable[..., object] | int | None] = {}

    def install(self, loop: asyncio.AbstractEventLoop, quit: Callable[[int], object]) -> None:
        """On SIGHUP or SIGTERM: start the watchdog at once, then ``quit(code)`` on ``loop``.

        A plain signal handler, not the event loop's: Python runs it even while the loop is
        blocked (a stalled SSH connection has filled Textual's write queue). Outside the main
        thread (some test runners) nothing is installed.
        """

        def stop(signum: int, frame: object) -> None:
            code = 128 + signum  # as a shell reports a process ended by the signal
            start_watchdog(code)
            with contextlib.suppress(RuntimeError):  # the loop has closed: the watchdog ends it
                loop.call_soon_threadsafe(quit, code)

        for name in STOP_SIGNALS:
            with contextlib.suppress(ValueError, AttributeError, OSError):  # not the main thread
                signum = getattr(signal, name)
                self._previous[signum] = signal.signal(signum, stop)

    def restore(self) -> None:
        """Put back the handlers ``install`` replaced."""
        for signum, previous in self._previous.items():
            with contextlib.suppress(ValueError, TypeError, OSError):
                signal.signal(signum, previous)
        self._previous.clear()
