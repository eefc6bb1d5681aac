"""One HTTP GET from a host gputui does not control: one total deadline, a size cap, no redirect.

Every socket operation (connecting, the TLS handshake, each read of the headers and the body)
waits at most for what is left of one deadline, so a host that trickles a byte a second is cut
off when the deadline passes, not when it stops. The body is read in chunks up to a cap (a
``Content-Length`` above the cap is refused before any of it is read). A redirect is not
followed: the host is reported with where it pointed, as Prometheus does by default.
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

from gputui.format import one_line

MIB = 1024**2

CHUNK_BYTES = 1024 * 1024
"""How much of the body one read asks for."""

LOCATION_MAX = 200
"""The most characters of a redirect's target an error message quotes."""


class FetchError(Exception):
    """The answer could not be read; the message says why in one line."""


class StatusError(FetchError):
    """The host answered with an HTTP status other than 200 (a redirect included)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status code."""


class Deadline:
    """When a read must be over: ``timeout_s`` after it was made."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        """The time allowed, as the user gave it (for messages)."""
        self._at = time.monotonic() + timeout_s

    def left_s(self) -> float:
        """Seconds left; raises :class:`TimeoutError` once there are none."""
        left = self._at - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        return left


def fetch(
    url: str,
    deadline: Deadline,
    *,
    max_bytes: int,
    headers: Mapping[str, str],
) -> bytes:
    """GET ``url`` (``http`` or ``https``) and return its body, all within ``deadline``.

    Raises:
        StatusError: for any status but 200 (a redirect names where it pointed).
        FetchError: for everything else (refused, no answer, too large, not HTTP...).
    """
    received = [0]
    raw: socket.socket | None = None
    try:
        connection = _connection(url, deadline)
    except (OSError, ValueError) as error:
        raise FetchError(in_words(error, deadline.timeout_s)) from None
    try:
        connection.connect()  # for https the handshake too, as a whole within the timeout
        raw = connection.sock
        assert raw is not None
        connection.sock = _DeadlineSocket(raw, deadline, received)
        connection.request("GET", _path(url), headers={"User-Agent": "gputui", **headers})
        response = connection.getresponse()
        if response.status != 200:
            raise _status_error(response)
        return _read_body(response, max_bytes)
    except FetchError:
        raise
    except (OSError, ValueError, http.client.HTTPException) as error:
        if isinstance(error, TimeoutError) and received[0]:
            raise FetchError(_unfinished(deadline.timeout_s, received[0])) from None
        raise FetchError(in_words(error, deadline.timeout_s)) from None
    finally:
        connection.close()
        if raw is not None:
            raw.close()


def _connection(url: str, deadline: Deadline) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port  # a port that is not a number raises ValueError
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError(f"cannot read {url!r}: only http:// and https:// URLs")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return kind(host, port, timeout=deadline.left_s())


def _path(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _status_error(response: http.client.HTTPResponse) -> StatusError:
    # Kept as sent (shortened): the error is shown through the one sanitiser, JSON exact.
    status, reason = response.status, (response.reason or "")[:80]
    if 300 <= status < 400:
        location = " ".join((response.getheader("Location") or "").split())
        if len(location) > LOCATION_MAX:
            location = location[: LOCATION_MAX - 3] + "..."
        where = f" to {location}" if location else ""
        return StatusError(
            f"redirected{where} (HTTP {status}): gputui follows no redirects; "
            "name the address it points to instead",
            status,
        )
    return StatusError(f"HTTP {status} {reason}".rstrip(), status)


def _read_body(response: http.client.HTTPResponse, max_bytes: int) -> bytes:
    too_large = f"the answer is larger than {max_bytes / MIB:g} MiB, the most gputui reads"
    declared = response.getheader("Content-Length")
    if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
        raise FetchError(too_large)
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = response.read(min(CHUNK_BYTES, max_bytes + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise FetchError(too_large)


class _DeadlineSocket:
    """A connected socket whose every send and read waits at most until the deadline."""

    def __init__(self, sock: socket.socket, deadline: Deadline, received: list[int]) -> None:
        self._sock = sock
        self._deadline = deadline
        self._received = received

    def sendall(self, data: bytes) -> None:
        self._sock.settimeout(self._deadline.left_s())
        self._sock.sendall(data)

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline, self._received))

    def close(self) -> None:
        """Nothing: http.client closes the connection while the response still reads from it
        (a socket's own ``close`` waits for its files); :func:`fetch` closes the socket."""


class _DeadlineReader(io.RawIOBase):
    """The socket's bytes, each read given only what is left of the deadline."""

    def __init__(self, sock: socket.socket, deadline: Deadline, received: list[int]) -> None:
        self._sock = sock
        self._deadline = deadline
        self._received = received

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]  # only memoryviews
        self._sock.settimeout(self._deadline.left_s())
        count = self._sock.recv_into(buffer)
        self._received[0] += count
        return count


def no_answer(timeout_s: float) -> str:
    """``no answer within 2 s``."""
    return f"no answer within {timeout_s:g} s"


def _unfinished(timeout_s: float, received: int) -> str:
    return f"the answer did not finish within {timeout_s:g} s ({received} bytes came)"


def in_words(error: BaseException, timeout_s: float) -> str:
    """A failed read in one line a user can act on."""
    if isinstance(error, (TimeoutError, socket.timeout)):
        return no_answer(timeout_s)
    if isinstance(error, ConnectionRefusedError):
        return "connection refused: nothing listens on that port"
    if isinstance(error, socket.gaierror):
        return "unknown host name"
    if isinstance(error, ssl.SSLError):
        return f"TLS failed: {one_line(str(error.reason or error))}"
    if isinstance(error, (ConnectionResetError, http.client.RemoteDisconnected)):
        return "the host closed the connection without answering"
    if isinstance(error, http.client.IncompleteRead):
        return "the host closed the connection in the middle of its answer"
    if isinstance(error, http.client.HTTPException):
        return f"not an HTTP answer ({one_line(str(error))[:120] or type(error).__name__})"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror[0].lower() + error.strerror[1:]
    return one_line(str(error))[:200] or type(error).__name__
