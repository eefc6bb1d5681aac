"""Textual's Linux driver, with an input thread that sleeps until there is input.

Textual's input thread wakes ten times a second to look for keys and to tell a lone Escape
from the start of an escape sequence (``ESCDELAY``, 100 ms). In an idle monitor those
wakes are a large share of its CPU. This thread waits in ``select()`` for a
key, or for quitting to wake it through a pipe; only while a key has just come does it poll
as Textual does, so a lone Escape still arrives ``ESCDELAY`` after it was pressed, and
keys arrive as soon as they are read.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import time
from codecs import getincrementaldecoder
from threading import Event
from typing import TYPE_CHECKING

from textual import constants
from textual._parser import ParseError
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

if TYPE_CHECKING:
    from textual.app import App

POLL_S = 0.1
"""How often the thread looks at the clock while a key has just come (Textual's own rate)."""


class _WakingEvent(Event):
    """A ``threading.Event`` whose ``set()`` also wakes a ``select()`` on its pipe."""

    def __init__(self) -> None:
        super().__init__()
        self.wake_fd, self._write_fd = os.pipe()
        os.set_blocking(self.wake_fd, False)
        os.set_blocking(self._write_fd, False)

    def set(self) -> None:
        """Set the flag and wake the input thread."""
        super().set()
        with contextlib.suppress(OSError):  # a full pipe wakes it already; a closed one, none
            os.write(self._write_fd, b"\0")

    def drain(self) -> None:
        """Empty the pipe (before the thread waits again)."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake_fd, 512):
                pass

    def close(self) -> None:
        """Close the pipe (the driver is done with it)."""
        for fd in (self.wake_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class QuietLinuxDriver(LinuxDriver):
    """``LinuxDriver`` whose input thread waits for input instead of waking ten times a
    second."""

    def __init__(
        self,
        app: App[object],
        *,
        debug: bool = False,
        mouse: bool = True,
        size: tuple[int, int] | None = None,
    ) -> None:
        """As ``LinuxDriver``."""
        super().__init__(app, debug=debug, mouse=mouse, size=size)
        self.exit_event = _WakingEvent()

    def close(self) -> None:
        """As ``LinuxDriver``, and close the pipe that wakes the input thread."""
        super().close()
        assert isinstance(self.exit_event, _WakingEvent)
        self.exit_event.close()

    def run_input_thread(self) -> None:
        """Read keys and send their events to the app until ``exit_event`` is set."""
        exit_event = self.exit_event
        assert isinstance(exit_event, _WakingEvent)
        exit_event.drain()
        fileno = self.fileno
        selector = selectors.SelectSelector()  # as Textual: epoll refuses a regular file
        selector.register(fileno, selectors.EVENT_READ)
        selector.register(exit_event.wake_fd, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        polling_s = constants.ESCAPE_DELAY + POLL_S  # how long after a key to keep polling
        last_input = 0.0

        try:
            while not exit_event.is_set():
                recent = time.monotonic() - last_input < polling_s
                for key, _ in selector.select(POLL_S if recent else None):
                    if key.fd != fileno:
                        exit_event.drain()
                    elif data := decode(os.read(fileno, 1024 * 4)):
                        last_input = time.monotonic()
                        for event in parser.feed(data):
                            self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
        finally:
            selector.close()
            with contextlib.suppress(EOFError, ParseError):
                for _ in parser.feed(""):
                    pass
