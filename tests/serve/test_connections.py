"""Clients that hold connections: one deadline for all of a request, a bound on how many are
held, a listen queue deep enough for many scrapers at once, and answers that name no software.

Real sockets on loopback throughout; the exporter with the stand-in NVML where the whole
command matters (the open-file limit), the HTTP server in this process where it does not."""

from __future__ import annotations

import contextlib
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from wsgiref.simple_server import WSGIServer

import psutil
import pytest

from gputui.serve.connections import MAX_HELD, Connections, held_limit
from gputui.serve.listen import ListenAddress
from gputui.serve.server import WsgiApp, bound_address, make_app, open_server
from gputui.telemetry.polling import Latest
from tests.helpers import ROOT, gputui_env
from tests.serve.served import READY_TIMEOUT_S, Served

APP = make_app(lambda: Latest(started_at=time.monotonic()), interval_s=1.0, processes=False)
"""The endpoints over no readings at all: /metrics serves the age, /snapshot 503."""


@contextlib.contextmanager
def serving(connections: Connections | None = None, *, app: WsgiApp = APP) -> Iterator[int]:
    """The HTTP server in this process, on a free loopback port (yielded)."""
    with listening(connections, app=app) as (server, port):
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        thread.start()
        try:
            yield port
        finally:
            server.shutdown()


@contextlib.contextmanager
def listening(
    connections: Connections | None = None, *, app: WsgiApp = APP
) -> Iterator[tuple[WSGIServer, int]]:
    """The HTTP server bound and listening, not yet accepting, and its port."""
    server = open_server(ListenAddress("127.0.0.1", 0), app, connections=connections)
    try:
        yield server, bound_address(server)[1]
    finally:
        server.server_close()


def head(port: int, request: bytes) -> str:
    """The status line and headers the server answers ``request`` with."""
    with socket.create_connection(("127.0.0.1", port), timeout=READY_TIMEOUT_S) as client:
        client.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = client.recv(4096)
            assert chunk, answer
            answer += chunk
    return answer.split(b"\r\n\r\n")[0].decode("latin-1")


def wait_until_closed(client: socket.socket, *, within_s: float, trickle: bytes = b"") -> None:
    """Wait for the server to close ``client``'s connection, sending ``trickle`` every 0.2 s
    meanwhile; fails if it is still open after ``within_s``."""
    client.settimeout(0.2)
    deadline = time.monotonic() + within_s
    while True:
        assert time.monotonic() < deadline, "the server still holds the connection"
        try:
            if client.recv(1) == b"":
                return
        except TimeoutError:
            pass
        except ConnectionResetError:
            return
        if trickle:
            try:
                client.sendall(trickle)
            except (BrokenPipeError, ConnectionResetError):
                return


def test_a_client_that_trickles_its_request_is_dropped_at_the_deadline() -> None:
    """A header line every 0.2 s never lets a read time out (10 s): only a deadline for the
    whole request ends it. Here 1 s, with 8 s of trickle to notice it."""
    connections = Connections(limit=8, deadline_s=1.0)
    with serving(connections) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:
            slow.sendall(b"GET /metrics HTTP/1.1\r\n")
            wait_until_closed(slow, within_s=8.0, trickle=b"X-Slow: 1\r\n")
        assert head(port, b"GET /metrics HTTP/1.0\r\n\r\n").startswith("HTTP/1.0 200")


def test_the_listen_queue_holds_many_scrapers_at_once() -> None:
    """100 connections arrive before any is accepted: the kernel queues them all (a backlog of
    5 dropped the 7th's SYN, and its connect waited seconds), and each is then answered."""
    with listening() as (server, port), contextlib.ExitStack() as clients:
        queued = [
            clients.enter_context(socket.create_connection(("127.0.0.1", port), timeout=3))
            for _ in range(100)
        ]
        for client in queued:
            client.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        thread.start()
        try:
            for client in queued:
                client.settimeout(READY_TIMEOUT_S)
                assert client.recv(64).startswith(b"HTTP/1.0 200")
        finally:
            server.shutdown()


def test_answers_name_no_server_software() -> None:
    with serving() as port:
        heads = {
            "200": head(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            "503": head(port, b"GET /snapshot HTTP/1.1\r\nHost: x\r\n\r\n"),
            "404": head(port, b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"),
            "405": head(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            # An error page of http.server's own: over 100 header lines.
            "431": head(port, b"GET /metrics HTTP/1.1\r\n" + b"X-Many: 1\r\n" * 101 + b"\r\n"),
        }
    for status, text in heads.items():
        assert text.split(" ")[1] == status, text
        assert "server:" not in text.lower(), text
        assert "python" not in text.lower(), text


# --- the bound on connections held --------------------------------------------------------


def socket_pairs(count: int) -> list[tuple[socket.socket, socket.socket]]:
    """Connected pairs: the server's end, then the client's (which waits at most 10 s)."""
    pairs = [socket.socketpair() for _ in range(count)]
    for _, theirs in pairs:
        theirs.settimeout(10)
    return pairs


def test_when_full_the_oldest_still_sending_its_request_goes_first() -> None:
    pairs = socket_pairs(4)
    try:
        held = Connections(limit=3, deadline_s=60)
        first, second, third, fourth = (ours for ours, _ in pairs)
        assert held.admit(first) and held.admit(second) and held.admit(third)
        held.answering(first)  # its request is read: it is being answered

        assert held.admit(fourth)  # room is made by dropping the oldest still reading
        assert len(held) == 3
        assert pairs[1][1].recv(1) == b""  # the second's client sees it closed
        pairs[0][1].settimeout(0.2)
        with pytest.raises(TimeoutError):
            pairs[0][1].recv(1)  # the first is still open

        held.answering(third)
        held.answering(fourth)
        late, late_client = socket.socketpair()
        try:
            assert not held.admit(late)  # all three are being answered: the newcomer is refused
            assert len(held) == 3
        finally:
            late.close()
            late_client.close()
    finally:
        for ours, theirs in pairs:
            ours.close()
            theirs.close()


def test_the_deadline_drops_every_connection_held_too_long() -> None:
    now = [100.0]
    held = Connections(limit=8, deadline_s=10, clock=lambda: now[0])
    pairs = socket_pairs(3)
    try:
        old, answering, young = (ours for ours, _ in pairs)
        held.admit(old)
        held.admit(answering)
        held.answering(answering)
        now[0] = 105.0
        held.admit(young)
        now[0] = 110.0

        held.drop_overdue()
        assert len(held) == 1  # the deadline spares no one, answered or not
        assert pairs[0][1].recv(1) == b"" and pairs[1][1].recv(1) == b""
        held.release(young)
        assert len(held) == 0
    finally:
        for ours, theirs in pairs:
            ours.close()
            theirs.close()


def test_the_limit_leaves_half_the_open_files_to_the_rest() -> None:
    assert held_limit(128) == 64
    assert held_limit(10**6) == MAX_HELD
    assert held_limit(resource.RLIM_INFINITY) == MAX_HELD
    assert held_limit(1) == 1


# --- the exporter under many slow clients -------------------------------------------------


def test_slow_clients_past_the_open_file_limit_leave_room_for_scrapes(
    fake_nvml_dir: Path,
) -> None:
    """Issue 26's reproduction: 300 clients that send a header line every second and never
    end their request, against an open-file limit of 128. Before, they took every
    descriptor, each new connection waited in the queue for ever and accept() spun. Now the
    slowest are dropped for the newest, every scrape answers, and the server idles."""
    child = Served.start(fake_nvml_dir, "--interval", "60", open_files=128)
    slow = Trickling()
    try:
        child.wait_for_readings()
        for _ in range(300):
            slow.add(socket.create_connection(("127.0.0.1", child.port), timeout=5))
        # Answered once every connection queued before it was accepted.
        assert child.get("/metrics").status == 200
        server = psutil.Process(child.process.pid)
        before = server.cpu_times()
        time.sleep(1.0)
        after = server.cpu_times()
        spent = (after.user + after.system) - (before.user + before.system)
        assert spent < 0.25, f"{spent:.2f} CPU-s in 1 s: accept() is spinning"

        for _ in range(3):
            assert child.get("/metrics").status == 200
            assert child.get("/snapshot").status == 200
        held = [
            connection
            for connection in server.net_connections(kind="tcp")
            if connection.laddr.port == child.port and connection.status == psutil.CONN_ESTABLISHED
        ]
        assert len(held) <= held_limit(128)  # the others were shut down
    finally:
        slow.close()
        child.kill()


OUT_OF_FILES_SERVER = """
import resource, time
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
from gputui.serve.connections import Connections
from gputui.serve.listen import ListenAddress
from gputui.telemetry.polling import Latest
from gputui.serve.server import WsgiApp, bound_address, make_app, open_server
app = make_app(lambda: Latest(started_at=time.monotonic()), interval_s=1.0, processes=False)
held = Connections(limit=1000, deadline_s=60)  # a bound too loose for the open-file limit
server = open_server(ListenAddress("127.0.0.1", 0), app, connections=held)
print(bound_address(server)[1], flush=True)
server.serve_forever(poll_interval=0.1)
"""
"""The HTTP server alone, with no more than 64 open files and a limit on connections that
lets it run out of them."""


def test_out_of_file_descriptors_it_neither_spins_nor_stops_answering() -> None:
    """Should the descriptors run out all the same, accept() fails with EMFILE while the
    connection stays queued: retried at once, for ever, that was 100% CPU. It pauses, and
    drops the oldest connection to make room, so a scrape behind the slow ones is answered."""
    child = subprocess.Popen(
        [sys.executable, "-c", OUT_OF_FILES_SERVER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=gputui_env(),
    )
    slow = Trickling()
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        for _ in range(80):
            slow.add(socket.create_connection(("127.0.0.1", port), timeout=5))
        server = psutil.Process(child.pid)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while server.num_fds() < 60:  # until it is out of descriptors
            assert time.monotonic() < deadline, server.num_fds()
            time.sleep(0.01)
        before = server.cpu_times()
        time.sleep(1.0)
        after = server.cpu_times()
        spent = (after.user + after.system) - (before.user + before.system)
        assert spent < 0.25, f"{spent:.2f} CPU-s in 1 s: accept() is spinning"

        assert head(port, b"GET /metrics HTTP/1.0\r\n\r\n").startswith("HTTP/1.0 200")
    finally:
        slow.close()
        child.kill()
        child.communicate()


class Trickling:
    """Clients that each send a request line, then a header line every second, for ever."""

    def __init__(self) -> None:
        self._clients: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._trickle, daemon=True).start()

    def add(self, client: socket.socket) -> None:
        client.sendall(b"GET /metrics HTTP/1.1\r\n")
        with self._lock:
            self._clients.append(client)

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            for client in self._clients:
                client.close()

    def _trickle(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                for client in self._clients:
                    with contextlib.suppress(OSError):  # dropped by the server
                        client.send(b"X-Slow: 1\r\n")
