"""Stand-in hosts for fleet tests, all on real loopback sockets: an exporter that serves a
fixed exposition, a port with nothing listening, and a host that accepts and never answers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"

DCGM_EXPOSITION = Path(__file__).with_name("dcgm_exposition.txt")
"""dcgm-exporter's answer on a two-GPU node (its default counters)."""


@contextmanager
def static_exporter(body: str) -> Iterator[str]:
    """An HTTP server on loopback answering ``GET /metrics`` with ``body``; yields HOST:PORT."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


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
