"""The HTTP side of ``gputui serve``: ``GET /metrics`` and ``GET /snapshot``, nothing else.

``/metrics`` is prometheus_client's own WSGI app (content negotiation, gzip, ``name[]``
filters) over a :class:`~gputui.serve.metrics.LatestCollector`; ``/snapshot`` is exactly
what ``gputui snapshot --json`` prints, from the same latest readings. Every other path is
404, ``HEAD`` answers as ``GET`` without the body (health checks), and every other method
is 405: nothing can be changed through the endpoint. Connections
are bounded in number and in time (:mod:`gputui.serve.connections`), a request's head in
bytes (:data:`MAX_HEAD_BYTES`), and the answers do not say which server or Python wrote them.
"""

from __future__ import annotations

import errno
import io
import logging
import socket
import socketserver
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from http import HTTPStatus
from typing import Any
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from gputui.serve.connections import Connections
from gputui.serve.listen import ListenAddress
from gputui.serve.metrics import LatestCollector
from gputui.telemetry.polling import Latest
from gputui.telemetry.readings import GpuReading
from gputui.telemetry.snapshot import render_snapshot_json

log = logging.getLogger(__name__)

ROUTES = ("/metrics", "/snapshot")
"""The only paths served."""

REQUEST_TIMEOUT_S = 10.0
"""A read or write that waits this long fails (the connection's deadline drops it sooner)."""

LISTEN_BACKLOG = 1024
"""Connections the kernel queues before they are accepted (it caps this at
``net.core.somaxconn``): socketserver's 5 had the kernel drop connections under 50
concurrent scrapers."""

MAX_HEAD_BYTES = 32 * 1024
"""The most bytes a request's head may have, its request line and header lines together:
past it the answer is 431 (414 when the request line alone is past it) and the connection
is closed. http.server bounds each line (64 KiB) and how many there are (100), not their
sum: 99 lines of 64 KiB held 6.3 MB a connection, and a few hundred such clients took the
exporter to gigabytes. A scrape's head is a few hundred bytes, a long bearer token a few
KiB; nginx allows 4 buffers of 8 KiB by default (``large_client_header_buffers``), Go's
server 1 MiB (``DefaultMaxHeaderBytes``). The connections held (at most
:data:`~gputui.serve.connections.MAX_HELD`) hold at most 4 MiB of heads together."""

ACCEPT_PAUSE_S = 0.05
"""How long accepting pauses when the process is out of file descriptors, rather than
retrying at once, for ever, on the connection still waiting."""

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def make_app(
    latest: Callable[[], Latest], *, interval_s: float, processes: bool, jobs: bool = False
) -> WsgiApp:
    """The WSGI app serving ``/metrics`` and ``/snapshot`` from what ``latest`` returns at
    once (``Poller.latest``; it never samples). The flags are :class:`LatestCollector`'s;
    without ``processes``, ``/snapshot`` lists none too, as their command lines may hold
    secrets."""
    registry = CollectorRegistry(auto_describe=False)
    collector = LatestCollector(latest, interval_s=interval_s, processes=processes, jobs=jobs)
    registry.register(collector)
    metrics = make_wsgi_app(registry)
    snapshot = _SnapshotBody(processes=processes)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path not in ROUTES:
            return _reply(
                start_response, "404 Not Found", "gputui serves GET /metrics and GET /snapshot.\n"
            )
        method = environ.get("REQUEST_METHOD")
        if method == "HEAD":
            return _headers_only(get, environ, start_response)
        if method != "GET":
            return _reply(
                start_response,
                "405 Method Not Allowed",
                f"{path} is read-only: use GET.\n",
                [("Allow", "GET, HEAD")],
            )
        return get(environ, start_response)

    def get(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO")
        if path == "/metrics":
            return metrics(environ, start_response)  # type: ignore[no-any-return]  # untyped app
        body = snapshot.body(latest())
        if body is None:
            return _reply(
                start_response,
                "503 Service Unavailable",
                "No reading yet: gputui serve has just started; try again in a second.\n",
                [("Retry-After", "1")],
            )
        return _reply(start_response, "200 OK", body, content_type="application/json")

    return app


class _SnapshotBody:
    """``/snapshot``'s body, made once per reading however often it is asked for."""

    def __init__(self, *, processes: bool) -> None:
        self._processes = processes
        self._made: tuple[Latest, bytes | None] | None = None

    def body(self, latest: Latest) -> bytes | None:
        made = self._made
        if made is not None and made[0] is latest:
            return made[1]
        snapshot = latest.snapshot()
        body = None
        if snapshot is not None:
            if not self._processes:
                gpus = tuple(_without_processes(gpu) for gpu in snapshot.nvml.gpus)
                snapshot = replace(snapshot, nvml=replace(snapshot.nvml, gpus=gpus))
            body = (render_snapshot_json(snapshot) + "\n").encode()
        self._made = (latest, body)
        return body


def _without_processes(gpu: GpuReading) -> GpuReading:
    """``gpu`` with its processes, and its MIG devices', not shown: ``null``, not known from
    here, rather than ``[]``, which reads as none."""
    mig_devices = gpu.mig_devices
    if mig_devices is not None:
        mig_devices = tuple(replace(device, processes=None) for device in mig_devices)
    return replace(gpu, processes=None, mig_devices=mig_devices)


def _headers_only(
    get: Callable[[dict[str, Any], StartResponse], Iterable[bytes]],
    environ: dict[str, Any],
    start_response: StartResponse,
) -> list[bytes]:
    """``HEAD``: what ``get`` answers, its status and headers with the body's length, no body."""
    answered: list[tuple[str, list[tuple[str, str]]]] = []

    def keep(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        answered.append((status, headers))
        return lambda data: None

    body = b"".join(get({**environ, "REQUEST_METHOD": "GET"}, keep))
    status, headers = answered[0]
    if not any(name.lower() == "content-length" for name, _ in headers):
        headers = [*headers, ("Content-Length", str(len(body)))]
    start_response(status, headers)
    return []


def _reply(
    start_response: StartResponse,
    status: str,
    body: str | bytes,
    headers: list[tuple[str, str]] | None = None,
    *,
    content_type: str = "text/plain; charset=utf-8",
) -> list[bytes]:
    data = body.encode() if isinstance(body, str) else body
    start_response(
        status,
        [("Content-Type", content_type), ("Content-Length", str(len(data))), *(headers or [])],
    )
    return [data]


class _Server(ThreadingWSGIServer):
    """prometheus_client's thread-per-request WSGI server, bound without a reverse DNS look-up,
    that holds few connections for little time and logs a failed request (a client gone, a
    failed TLS handshake, a connection dropped) instead of printing it."""

    request_queue_size = LISTEN_BACKLOG
    connections: Connections
    """The connections held (set by :func:`open_server`)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log a request that failed, at debug level: one bad client is no news for stderr."""
        log.debug("a request from %s failed", client_address, exc_info=True)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # HTTPServer's would call socket.getfqdn
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)
        self.setup_environ()

    def get_request(self) -> tuple[Any, Any]:
        try:
            return super().get_request()
        except OSError as error:
            if error.errno in (errno.EMFILE, errno.ENFILE):
                # The connection stays queued and the socket readable: without a pause the
                # loop would spin on it. Dropping the oldest frees a descriptor meanwhile.
                self.connections.drop_oldest()
                time.sleep(ACCEPT_PAUSE_S)
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.connections.admit(request):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.connections.release(request)
        super().shutdown_request(request)

    def service_actions(self) -> None:
        """Drop the overdue connections (``serve_forever`` calls this every ``poll_interval``
        or sooner)."""
        self.connections.drop_overdue()


class _AnonymousHandler(ServerHandler):
    """wsgiref's response writer, without the ``Server`` header (it named the exact
    Python version)."""

    server_software = None  # type: ignore[assignment]  # None: wsgiref sends no Server header


class _QuietHandler(WSGIRequestHandler):
    """Logs nothing per request, names no software, and tells the server once the request
    is read."""

    timeout = REQUEST_TIMEOUT_S
    server_version = "gputui"

    def handle(self) -> None:
        """Handle one request, as ``WSGIRequestHandler.handle`` does, but through
        :class:`_AnonymousHandler`, and reading at most :data:`MAX_HEAD_BYTES` of its head."""
        if not self._read_head():
            return
        server = self.server
        assert isinstance(server, _Server)
        server.connections.answering(self.request)
        handler = _AnonymousHandler(
            self.rfile,
            self.wfile,  # type: ignore[arg-type]  # a socket file, as wsgiref passes it
            self.get_stderr(),
            self.get_environ(),
            multithread=False,
        )
        handler.request_handler = self  # type: ignore[attr-defined]  # as wsgiref does
        app = server.get_app()
        assert app is not None  # set by make_server
        handler.run(app)

    def _read_head(self) -> bool:
        """Read and parse the request line and headers (``parse_request``), through a
        :class:`_HeadReader`; False when there is no request to answer: the head was too
        large (answered 414 or 431) or malformed (answered by ``parse_request``), or the
        connection ended before it did (not answered, and what was read of it let go at once
        rather than parsed: a connection dropped to make room, or at its deadline, ends so)."""
        connection_file = self.rfile
        head = _HeadReader(connection_file, MAX_HEAD_BYTES)
        try:
            self.raw_requestline = head.readline(MAX_HEAD_BYTES + 1)
        except _HeadTooLarge:
            self.requestline = self.request_version = self.command = ""
            self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
            return False
        except _HeadCutShort:
            return False
        self.rfile = head  # parse_request reads the headers from self.rfile
        try:
            return self.parse_request()  # False: an error was sent
        except _HeadTooLarge:
            self.send_error(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                explain=f"A request's head may have at most {MAX_HEAD_BYTES} bytes.",
            )
            return False
        except _HeadCutShort:
            return False
        finally:
            self.rfile = connection_file  # the body, if any, is read from the connection

    def send_response(self, code: int, message: str | None = None) -> None:
        """Start an error page as ``BaseHTTPRequestHandler`` does, without ``Server``."""
        self.log_request(code)
        self.send_response_only(code, message)
        self.send_header("Date", self.date_time_string())

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing."""


class _HeadTooLarge(Exception):
    """The request's head is past :data:`MAX_HEAD_BYTES`."""


class _HeadCutShort(Exception):
    """The connection ended in the middle of the request's head."""


class _HeadReader(io.BufferedIOBase):
    """A connection's file as http.server reads a request's head from it, line by line: no
    more than ``limit`` bytes in all, and only whole lines.

    ``readline`` raises :class:`_HeadTooLarge` once the lines read add up to more than
    ``limit`` (it reads one byte more, never the rest of a long line), and
    :class:`_HeadCutShort` for a line the connection ended in: http.client would take the
    end of the connection for the end of the head, and parse and answer what came.
    """

    def __init__(self, file: io.BufferedIOBase, limit: int) -> None:
        """Read from ``file``, ``limit`` bytes at most."""
        super().__init__()
        self._file = file
        self._left = limit
        self._started = False  # a line has been read: the connection's end now cuts it short

    def readable(self) -> bool:
        return True

    def readline(self, size: int | None = -1) -> bytes:
        """The next line, of at most ``size`` bytes (whole or not, as ``readline`` does);
        ``b""`` where the connection ended before a request line began."""
        wanted = self._left + 1
        if size is not None and 0 <= size < wanted:
            wanted = size
        line = self._file.readline(wanted)
        self._left -= len(line)
        if self._left < 0:
            raise _HeadTooLarge
        if len(line) < wanted and not line.endswith(b"\n") and (line or self._started):
            raise _HeadCutShort
        self._started = True
        return line


def open_server(
    address: ListenAddress,
    app: WsgiApp,
    tls: ssl.SSLContext | None = None,
    *,
    connections: Connections | None = None,
) -> WSGIServer:
    """Bind ``address`` (a host name is resolved here) and return the server of ``app``, not
    yet serving (``serve_forever`` serves): HTTPS with ``tls``, held to ``connections``.

    Raises:
        OSError: The address cannot be bound (in use, not this machine's, not allowed),
            or ``socket.gaierror`` when the host name does not resolve.
    """
    family, _, _, _, sockaddr = socket.getaddrinfo(
        address.host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    server_class = type("_FamilyServer", (_Server,), {"address_family": family})
    server: WSGIServer = make_server(
        str(sockaddr[0]), address.port, app, server_class=server_class, handler_class=_QuietHandler
    )
    assert isinstance(server, _Server)
    server.connections = connections if connections is not None else Connections()
    if tls is not None:
        # The handshake happens on the request's thread, not in accept(): a client that stalls
        # it holds only its own thread.
        server.socket = tls.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False
        )
    return server


def bound_address(server: WSGIServer) -> tuple[str, int]:
    """The IP address and port the server listens on (the port the system chose for 0)."""
    host, port = server.server_address[:2]
    return str(host), int(port)
