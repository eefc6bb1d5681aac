"""``gputui serve`` run as users run it, in a child process, and scraped over real loopback
sockets. NVML is the stand-in library on the child's ``LD_LIBRARY_PATH``."""

from __future__ import annotations

import http.client
import json
import queue
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.helpers import ROOT, gputui_env

SCRAPE_TIMEOUT_S = 10.0
"""A scrape that takes this long has waited for something it must not (a hung driver)."""
READY_TIMEOUT_S = 60.0
"""How long a child may take to start listening and to have its first readings."""

_LISTENING = re.compile(r"^gputui serve: https?://(?P<host>.+):(?P<port>\d+)/metrics and /snapshot")


@dataclass
class Response:
    """One HTTP answer."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Served:
    """A running ``gputui serve`` child: scrape it, then stop it with a signal."""

    def __init__(self, process: subprocess.Popen[str], first_line: str) -> None:
        self.process = process
        self.first_line = first_line
        match = _LISTENING.match(first_line)
        assert match, first_line
        self.port = int(match["port"])

    @classmethod
    def start(
        cls,
        lib_dir: Path,
        *args: str,
        knobs: Mapping[str, str] | None = None,
        open_files: int | None = None,
    ) -> Served:
        """Start ``gputui serve --listen 127.0.0.1:0 ARGS`` and wait for its listening line.

        Args:
            lib_dir: Where the stand-in NVML library is.
            args: More arguments.
            knobs: ``FAKE_NVML_*`` variables.
            open_files: The child's open-file limit (``RLIMIT_NOFILE``), when not this one's.
        """

        def limit_open_files() -> None:
            if open_files is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

        process = subprocess.Popen(
            [sys.executable, "-m", "gputui", "serve", "--listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=gputui_env(lib_dir, knobs),
            preexec_fn=limit_open_files if open_files is not None else None,
        )
        assert process.stdout is not None
        lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
        try:
            first = lines.get(timeout=READY_TIMEOUT_S)
        except queue.Empty:
            process.kill()
            raise AssertionError("gputui serve never said where it listens") from None
        if not first:
            _, err = process.communicate(timeout=READY_TIMEOUT_S)
            raise AssertionError(f"gputui serve ended at once ({process.returncode}): {err}")
        return cls(process, first)

    def get(self, path: str, method: str = "GET") -> Response:
        """One request on a fresh connection; raises ``TimeoutError`` if it is not answered."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=SCRAPE_TIMEOUT_S)
        try:
            connection.request(method, path)
            answer = connection.getresponse()
            return Response(answer.status, dict(answer.getheaders()), answer.read())
        finally:
            connection.close()

    def metrics(self) -> dict[str, list[Sample]]:
        """``/metrics`` parsed by prometheus_client: each series' name and its samples."""
        answer = self.get("/metrics")
        assert answer.status == 200, answer
        found: dict[str, list[Sample]] = {}
        for family in text_string_to_metric_families(answer.body.decode()):
            for sample in family.samples:
                found.setdefault(sample.name, []).append(sample)
        return found

    def wait_for_readings(self) -> dict[str, Any]:
        """Wait until every source has answered once; returns the first ``/snapshot``."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            answer = self.get("/snapshot")
            if answer.status == 200:
                return answer.json()  # type: ignore[no-any-return]
            assert answer.status == 503, answer
            assert time.monotonic() < deadline, "no reading came"
            time.sleep(0.05)

    def stop(self, signal_number: int = signal.SIGTERM) -> tuple[int, str, str]:
        """Send the signal; returns the exit code, the rest of stdout and stderr."""
        self.process.send_signal(signal_number)
        out, err = self.process.communicate(timeout=READY_TIMEOUT_S)
        return self.process.returncode, out, err

    def kill(self) -> None:
        """End it however it is, if it still runs."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


StartServe = Callable[..., Served]
"""Starts ``gputui serve --listen 127.0.0.1:0 ARGS`` on the stand-in library, ``FAKE_NVML_*``
knobs as keywords: ``start_serve(*args, **knobs)`` (the fixture)."""


def gputui_serve(*args: str, lib_dir: Path) -> subprocess.CompletedProcess[str]:
    """``gputui serve ARGS`` run to its end: for the input that ends it at once."""
    return subprocess.run(
        [sys.executable, "-m", "gputui", "serve", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=gputui_env(lib_dir),
        timeout=60,
        check=False,
    )


def prometheus_tool(name: str = "promtool") -> str:
    """The path of ``promtool`` or ``prometheus`` (Debian's prometheus package)."""
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (apt-get install prometheus)")
    return found


def promtool() -> str:
    """The path of ``promtool``."""
    return prometheus_tool("promtool")


@contextmanager
def prometheus_scraping(targets: list[str], folder: Path) -> Iterator[str]:
    """A real Prometheus server (Debian's package) on loopback scraping ``targets`` each
    second, its data and log in ``folder``: its URL. It is killed at the end, and must not
    have ended before."""
    binary = prometheus_tool("prometheus")
    config = folder / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: gpus\n    static_configs:\n"
        f"      - targets: {json.dumps(targets)}\n"
    )
    probe = socket.socket()  # a free port: bound, then closed
    probe.bind(("127.0.0.1", 0))
    listen = f"127.0.0.1:{probe.getsockname()[1]}"
    probe.close()
    log = folder / "prometheus.log"
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address={listen}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    try:
        yield f"http://{listen}"
    finally:
        ended = process.poll()
        process.kill()
        process.wait()
        assert ended is None, f"prometheus ended ({ended}): {log.read_text()[-2000:]}"


def prometheus_query(base: str, query: str) -> list[dict[str, Any]]:
    """The series an instant query of the Prometheus at ``base`` returns (``OSError`` while
    it does not answer yet)."""
    address = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(address, timeout=5) as answer:  # loopback only
        return json.loads(answer.read())["data"]["result"]  # type: ignore[no-any-return]


def labels_of(samples: list[Sample], gpu: int) -> list[Sample]:
    """The samples of GPU ``gpu``."""
    return [sample for sample in samples if sample.labels.get("gpu") == str(gpu)]
