"""The connections ``gputui serve`` holds: few enough that a scrape always finds a file
descriptor and a thread, and none for long, whatever the client sends or does not send.

A scrape sends its request at once and is answered in milliseconds; a client that holds a
connection is either slow or hostile. So each connection gets one deadline for all of it
(a per-read timeout lets a client that sends a header line every few seconds stay for
ever), and when the limit is reached the oldest connection still sending its request is
dropped to make room: the slow ones go first, and a request already read is answered.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

MAX_HELD = 128
"""The most connections held at once (fewer under a low open-file limit, see
:func:`held_limit`)."""

DEADLINE_S = 10.0
"""A connection is dropped this long after it was accepted, however it is doing."""


def held_limit(open_files: int | None = None) -> int:
    """How many connections to hold: :data:`MAX_HELD`, or half the open-file limit (default:
    this process's soft ``RLIMIT_NOFILE``) where that is lower (the other half is for the
    samplers, NVML's device files among them, the listening socket and the runtime)."""
    if open_files is None:
        open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if open_files == resource.RLIM_INFINITY or open_files <= 0:
        return MAX_HELD
    return max(1, min(MAX_HELD, open_files // 2))


@dataclass(slots=True)
class _Held:
    since: float
    """When it was accepted."""
    answering: bool = False
    """Its request has been read: it is being answered."""


class Connections:
    """The connections being served, oldest first, bounded in number and in time.

    The server's thread admits each connection it accepts and drops the overdue ones; a
    connection's own thread says when its request is read and releases it at the end. A
    dropped connection is shut down, not closed: its thread wakes from whatever read or
    write it is in, fails, and closes it.
    """

    def __init__(
        self,
        limit: int | None = None,
        deadline_s: float = DEADLINE_S,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Hold at most ``limit`` connections (default: :func:`held_limit`), none for longer
        than ``deadline_s`` from its accept on ``clock``."""
        self.limit = limit if limit is not None else held_limit()
        self.deadline_s = deadline_s
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[socket.socket, _Held] = {}  # in the order they came

    def __len__(self) -> int:
        return len(self._held)

    def admit(self, connection: socket.socket) -> bool:
        """Hold a connection just accepted; False when it must be closed at once instead.

        While the limit is reached, the oldest connection still sending its request is
        dropped to make room; when every one held is being answered, the new one is refused.
        """
        with self._lock:
            while len(self._held) >= self.limit:
                reading = next((c for c, held in self._held.items() if not held.answering), None)
                if reading is None:
                    return False
                self._drop(reading)
            self._held[connection] = _Held(self._clock())
            return True

    def answering(self, connection: socket.socket) -> None:
        """The connection's request is read: from now on only the deadline drops it."""
        with self._lock:
            held = self._held.get(connection)
            if held is not None:
                held.answering = True

    def release(self, connection: socket.socket) -> None:
        """The connection is done with (about to be closed); no-op if it was dropped."""
        with self._lock:
            self._held.pop(connection, None)

    def drop_overdue(self) -> None:
        """Drop every connection held for longer than the deadline."""
        now = self._clock()
        with self._lock:
            for connection, held in list(self._held.items()):
                if now - held.since < self.deadline_s:
                    break  # the rest came later
                self._drop(connection)

    def drop_oldest(self) -> None:
        """Drop the connection held longest, if any (to free a file descriptor)."""
        with self._lock:
            if self._held:
                self._drop(next(iter(self._held)))

    def _drop(self, connection: socket.socket) -> None:
        del self._held[connection]
        # socket.socket's own shutdown, not SSLSocket's, which would unset the TLS state under
        # the thread that is reading with it. OSError: the client is gone already.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(connection, socket.SHUT_RDWR)
