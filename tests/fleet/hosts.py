"""Stand-in hosts for fleet tests, all on real loopback sockets: an exporter that serves a
fixed exposition, a port with nothing listening, a host that accepts and never answers, and
hostile ones written byte by byte (trickling, redirecting, endless)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"

DCGM_EXPOSITION = Path(__file__).with_name("dcgm_exposition.txt")
"""dcgm-exporter's answer on a two-GPU node (its default counters)."""


_A = 'gpu="0",uuid="GPU-a"'
_B = 'gpu="1",uuid="GPU-b"'

HOSTILE_EXPOSITION = f"""\
# TYPE gputui_sample_age_seconds gauge
gputui_sample_age_seconds +Inf
gputui_gpu_info{{{_A},name="NVIDIA H100 80GB HBM3",bus_id="",driver="550"}} 1
gputui_gpu_info{{{_B},name="NVIDIA H100 80GB HBM3",bus_id="",driver="550"}} 1
gputui_gpu_up{{{_A}}} 1
gputui_gpu_up{{{_B}}} 1
gputui_gpu_utilization_ratio{{{_A}}} 0.5
gputui_gpu_utilization_ratio{{{_B}}} 1.5
gputui_gpu_memory_used_bytes{{{_A}}} 1e308
gputui_gpu_memory_total_bytes{{{_A}}} 85520809984
gputui_gpu_temperature_celsius{{{_A}}} -273
gputui_gpu_power_watts{{{_A}}} NaN
gputui_gpu_performance_state{{{_A}}} 1e300
gputui_gpu_performance_state{{{_B}}} 2.5
gputui_gpu_sm_clock_hertz{{{_A}}} 1.98e9
gputui_gpu_process_memory_bytes{{{_A},pid="4242",user="u",command="python",kind="compute"}} NaN
gputui_gpu_process_memory_bytes{{{_A},pid="²",user="u",command="x",kind="compute"}} 1024
gputui_gpu_up{{gpu="²",uuid="GPU-c"}} 1
"""
"""``gputui serve``'s names with values no GPU has, and labels that are not numbers."""

HUNG_EXPOSITION = """\
# HELP gputui_gpu_up 1 when the GPU answers, 0 when it is lost or the driver stopped answering.
# TYPE gputui_gpu_up gauge
gputui_gpu_up{gpu="0",uuid="GPU-a"} 1
gputui_gpu_up{gpu="1",uuid="GPU-b"} 0
# HELP gputui_gpu_hung 1 when the GPU's NVML calls hang, 0 otherwise.
# TYPE gputui_gpu_hung gauge
gputui_gpu_hung{gpu="0",uuid="GPU-a"} 0
gputui_gpu_hung{gpu="1",uuid="GPU-b"} 1
# TYPE gputui_gpu_info gauge
gputui_gpu_info{gpu="0",uuid="GPU-a",name="NVIDIA H100 80GB HBM3",bus_id="",driver="550"} 1
gputui_gpu_info{gpu="1",uuid="GPU-b",name="NVIDIA H100 80GB HBM3",bus_id="",driver="550"} 1
# TYPE gputui_gpu_temperature_celsius gauge
gputui_gpu_temperature_celsius{gpu="0",uuid="GPU-a"} 45
# TYPE gputui_sample_age_seconds gauge
gputui_sample_age_seconds 7.2
"""
"""``gputui serve`` with GPU 1's NVML calls hanging for 7 s."""

AGE_INF_EXPOSITION = """\
gputui_gpu_info{gpu="0",uuid="GPU-a",name="NVIDIA H100 80GB HBM3",bus_id="",driver="550"} 1
gputui_gpu_up{gpu="0",uuid="GPU-a"} 1
gputui_gpu_utilization_ratio{gpu="0",uuid="GPU-a"} 0.5
gputui_sample_age_seconds +Inf
"""
"""One GPU, fine, served as infinitely old."""


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024
    """socketserver's 5 had the kernel drop connections when 256 hosts' scrapes came at once."""


Answer = Callable[[str], "tuple[str, bytes] | None"]
"""A stand-in server's answer to ``GET path``: its content type and body; ``None``: 404."""


@contextmanager
def serving(answer: Answer) -> Iterator[int]:
    """``GET`` answered by ``answer`` on a loopback port of its own, on a thread; yields the
    port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answered = answer(self.path)
            if answered is None:
                self.send_error(404)
                return
            content_type, data = answered
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def static_exporter(body: str) -> Iterator[str]:
    """An HTTP server on loopback answering ``GET /metrics`` with ``body``; yields HOST:PORT."""
    data = body.encode()

    def metrics(path: str) -> tuple[str, bytes] | None:
        return ("text/plain; version=0.0.4", data) if path.split("?")[0] == "/metrics" else None

    with serving(metrics) as port:
        yield f"127.0.0.1:{port}"


@contextmanager
def json_server(answer: Callable[[str], bytes]) -> Iterator[tuple[str, list[str]]]:
    """A stand-in Prometheus on loopback: ``GET`` any path is answered ``answer(path)`` as
    JSON; yields its ``http://`` URL and the paths asked so far."""
    asked: list[str] = []

    def recorded(path: str) -> tuple[str, bytes]:
        asked.append(path)
        return "application/json", answer(path)

    with serving(recorded) as port:
        yield f"http://127.0.0.1:{port}", asked


Serve = Callable[["RawHost", socket.socket, threading.Event], None]
"""What a :class:`RawHost` does with one connection (``closing``: the test is over)."""

TRICKLE_FOR_S = 15.0
"""How long a trickling host goes on at most (a reader with no total deadline waits it out)."""


class RawHost:
    """A loopback port whose every connection is handed, on a thread of its own, to
    ``serve(host, connection, closing)``: what it writes is all the client gets."""

    def __init__(self, serve: Serve) -> None:
        self._serve = serve
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.1)
        self.closing = threading.Event()
        """Set when the test is over: every connection's ``serve`` should end."""
        self.connections = 0
        """How many connections were accepted."""
        self.received = bytearray()
        """Everything any client sent (requests, logins)."""
        self.hung_up = 0
        """Connections the client closed while ``serve`` still wrote to them."""
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        """HOST:PORT."""
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(connection,), daemon=True).start()

    def _handle(self, connection: socket.socket) -> None:
        with connection:
            try:
                self._serve(self, connection, self.closing)
            except OSError:  # the client went away
                self.hung_up += 1

    def read_request(self, connection: socket.socket) -> bytes:
        """The request's head, up to its blank line (kept in ``received``)."""
        connection.settimeout(5)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = connection.recv(4096)
            if not chunk:
                break
            head += chunk
        self.received += head
        return head

    def close(self) -> None:
        self.closing.set()
        self._listener.close()


@contextmanager
def raw_host(serve: Serve) -> Iterator[RawHost]:
    """A :class:`RawHost` on loopback until the block ends."""
    host = RawHost(serve)
    try:
        yield host
    finally:
        host.close()


def trickling(head: bytes, pause_s: float = 0.1) -> Serve:
    """A host that answers ``head`` at once, then one more byte every ``pause_s`` (a header
    line that never ends, or a body), for :data:`TRICKLE_FOR_S` at most."""

    def serve(host: RawHost, connection: socket.socket, closing: threading.Event) -> None:
        host.read_request(connection)
        connection.sendall(head)
        stop = time.monotonic() + TRICKLE_FOR_S
        while not closing.wait(pause_s) and time.monotonic() < stop:
            connection.sendall(b"x")

    return serve


def streaming(bytes_per_s: int, content_length: int | None) -> Serve:
    """A host that streams a body at ``bytes_per_s`` (declaring ``content_length``, or not),
    for :data:`TRICKLE_FOR_S` at most."""

    def serve(host: RawHost, connection: socket.socket, closing: threading.Event) -> None:
        host.read_request(connection)
        length = b"" if content_length is None else b"Content-Length: %d\r\n" % content_length
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + length + b"\r\n")
        chunk = b"# padding\n" * (bytes_per_s // 16 // 10)
        stop = time.monotonic() + TRICKLE_FOR_S
        while not closing.wait(1 / 16) and time.monotonic() < stop:
            connection.sendall(chunk)

    return serve


def redirecting(location: str) -> Serve:
    """A host that answers every request with ``302 Found`` to ``location``."""

    def serve(host: RawHost, connection: socket.socket, closing: threading.Event) -> None:
        host.read_request(connection)
        connection.sendall(
            b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n"
            b"Connection: close\r\n\r\n" % location.encode()
        )

    return serve


def ftp_server(host: RawHost, connection: socket.socket, closing: threading.Event) -> None:
    """An FTP server's greeting; whatever the client sends (``USER anonymous``) is kept."""
    connection.sendall(b"220 ready\r\n")
    connection.settimeout(2)
    while not closing.is_set():
        data = connection.recv(4096)
        if not data:
            return
        host.received += data
        connection.sendall(
            b"331 send your password\r\n" if data.startswith(b"USER") else b"230 in\r\n"
        )


@contextmanager
def silent_host() -> Iterator[str]:
    """A port whose connections the kernel accepts and nobody ever answers; yields HOST:PORT."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # never accept(): connections wait in the backlog, unanswered
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def dead_port() -> str:
    """HOST:PORT of a loopback port nothing listens on (bound, then closed)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"127.0.0.1:{port}"


NVITOP_LABELS = ["hostname", "index", "devicename", "uuid"]


def nvitop_exposition() -> str:
    """What nvitop-exporter serves for one GPU: prometheus_client gauges declared with the
    names, units and labels nvitop-exporter gives them (the unit is appended to the name)."""
    registry = CollectorRegistry()
    labels = {
        "hostname": "node-n",
        "index": "0",
        "devicename": "NVIDIA A100-SXM4-40GB",
        "uuid": "GPU-11111111-2222-3333-4444-555555555555",
    }
    values = [
        ("gpu_utilization", "Percentage", 55.0),
        ("gpu_memory_utilization", "Percentage", 20.0),
        ("gpu_memory_total", "MiB", 40960.0),
        ("gpu_memory_used", "MiB", 10240.0),
        ("gpu_memory_free", "MiB", 30720.0),
        ("gpu_clock_sm", "MHz", 1410.0),
        ("gpu_clock_memory", "MHz", 1215.0),
        ("gpu_power_usage", "W", 250.5),
        ("gpu_power_limit", "W", 400.0),
        ("gpu_temperature", "C", 48.0),
        ("gpu_fan_speed", "Percentage", float("nan")),  # SXM: no fan, nvitop writes NaN
        ("gpu_pcie_tx_throughput", "MiBps", 100.0),
        ("gpu_pcie_rx_throughput", "MiBps", 200.0),
    ]
    gauges = {}
    for name, unit, value in values:
        gauges[name] = Gauge(
            name, f"{name} ({unit}).", unit=unit, labelnames=NVITOP_LABELS, registry=registry
        )
        gauges[name].labels(**labels).set(value)
    # A MIG device of that GPU, indexed as nvitop-exporter does ("0:1"): not a GPU of its own.
    gauges["gpu_utilization"].labels(**{**labels, "index": "0:1"}).set(99.0)
    return generate_latest(registry).decode()


@contextmanager
def running_fleet(lib_dir: Path) -> Iterator[dict[str, str]]:
    """A fleet on loopback, HOST:PORT by role: two ``gputui serve`` children on stand-in NVMLs
    of their own (``serve2``: 2 H100s, a process on GPU 1; ``serve4``: 4 A100s), dcgm-exporter
    and nvitop-exporter expositions, a dead port and a host that never answers."""
    from tests.serve.served import Served

    with ExitStack() as stack:
        servers = [
            Served.start(lib_dir, "--interval", "0.25", "--processes", knobs=knobs)
            for knobs in (
                {"FAKE_NVML_GPU_COUNT": "2", "FAKE_NVML_PROCESSES": "1:4242:1073741824"},
                {"FAKE_NVML_GPU_COUNT": "4", "FAKE_NVML_GPU_NAME": A100},
            )
        ]
        for server in servers:
            stack.callback(server.kill)
            server.wait_for_readings()
        yield {
            "serve2": f"127.0.0.1:{servers[0].port}",
            "serve4": f"127.0.0.1:{servers[1].port}",
            "dcgm": stack.enter_context(static_exporter(DCGM_EXPOSITION.read_text())),
            "nvitop": stack.enter_context(static_exporter(nvitop_exposition())),
            "dead": dead_port(),
            "silent": stack.enter_context(silent_host()),
        }
