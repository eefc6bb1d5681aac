"""Run a terminal program in a pseudo-terminal and measure it, the way a person would see it.

Used by the benchmark scripts to run gputui and its peers (nvitop, glances) side by
side under identical conditions: same terminal size, same stand-in NVML library,
same interval.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
ENVS = REPO / "benchmarks" / ".envs"
_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]|\x1b\][^\x07]*\x07")


@dataclass(frozen=True)
class TerminalRun:
    """What one program cost, measured from outside."""

    name: str
    first_frame_s: float | None
    """Seconds from exec to the first frame showing the marker text; None if never seen."""
    cpu_s_per_min: float
    """CPU seconds (user + system, children included) per minute of steady state."""
    peak_rss_mib: float
    """Peak resident set size (VmHWM) of the main process."""
    steady_s: float
    """Length of the steady-state window measured."""


def run_in_terminal(
    name: str,
    argv: Sequence[str],
    *,
    marker: bytes,
    env: Mapping[str, str],
    settle_s: float = 5.0,
    steady_s: float = 60.0,
    size: tuple[int, int] = (120, 40),
    quit_keys: bytes = b"q",
) -> TerminalRun:
    """Start ``argv`` on a fresh pty of ``size`` (columns, rows) and measure it.

    The first frame is the first moment the screen output (ANSI stripped) contains
    ``marker``. Steady-state CPU is counted over ``steady_s`` seconds after
    ``settle_s`` seconds of settling.
    """
    program = PtyProgram(argv, env=env, size=size, keep_s=max(settle_s, 10.0) + 5.0)
    ps = psutil.Process(program.pid)
    try:
        hit = program.wait_for(marker, program.started, timeout_s=max(settle_s, 10.0))
        time.sleep(settle_s)
        before = _cpu_seconds(ps)
        t0 = time.perf_counter()
        time.sleep(steady_s)
        after = _cpu_seconds(ps)
        elapsed = time.perf_counter() - t0
        peak_rss = _peak_rss_bytes(program.pid)
    finally:
        program.close(quit_keys, timeout_s=5.0)
    return TerminalRun(
        name=name,
        first_frame_s=None if hit is None else hit[1] - program.started,
        cpu_s_per_min=(after - before) * 60.0 / elapsed,
        peak_rss_mib=peak_rss / 2**20,
        steady_s=elapsed,
    )


class PtyProgram:
    """A program on a fresh pseudo-terminal, driven through it the way a person would.

    A reader thread drains the terminal continuously (so the program never blocks on
    its output) and keeps the screen text, ANSI stripped, with arrival times, for the
    last ``keep_s`` seconds only: an hour-long run does not pile up its output.
    ``wait_for`` scans only what arrived since the last look, so waiting is cheap.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        size: tuple[int, int] = (120, 40),
        keep_s: float = 120.0,
        cwd: Path = REPO,
    ) -> None:
        """Start ``argv`` on a new pty of ``size`` (columns, rows), in its own session.

        Args:
            argv: The command.
            env: Variables added to this process's environment (TERM is xterm-256color).
            size: The terminal's columns and rows.
            keep_s: How long received text is kept for ``wait_for``.
            cwd: The working directory.
        """
        master, slave = os.openpty()
        cols, rows = size
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        full_env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(cols)}
        full_env.update({"LINES": str(rows), **env})
        self.started = time.perf_counter()
        """perf_counter() when the program was started."""
        self.proc = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=full_env,
            start_new_session=True,
            close_fds=True,
            cwd=cwd,
        )
        os.close(slave)
        self._master = master
        self._keep_s = keep_s
        self._lock = threading.Lock()
        self._times: list[float] = []
        self._chunks: list[bytes] = []
        self._base = 0  # sequence number of self._chunks[0]
        self.received_bytes = 0
        """Bytes the program has written to the terminal so far."""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        """The program's process id."""
        return self.proc.pid

    def _read(self) -> None:
        carry = b""
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:
                return
            if not chunk:
                return
            at = time.perf_counter()
            data = carry + chunk
            carry = b""
            cut = data.rfind(b"\x1b")
            if cut != -1 and len(data) - cut < 64 and not _ANSI.match(data, cut):
                data, carry = data[:cut], data[cut:]  # an escape sequence split across reads
            with self._lock:
                self.received_bytes += len(chunk)
                self._times.append(at)
                self._chunks.append(_ANSI.sub(b"", data))
                old = bisect.bisect_left(self._times, at - self._keep_s)
                if old > 1024:
                    del self._times[:old], self._chunks[:old]
                    self._base += old

    def wait_for(
        self,
        markers: bytes | Sequence[bytes],
        since: float,
        timeout_s: float,
        *,
        poll_s: float = 0.01,
    ) -> tuple[bytes, float] | None:
        """The first of ``markers`` to arrive after ``since`` (perf_counter), and when.

        Returns:
            ``(marker, arrival time)``, or ``None`` if none arrived within ``timeout_s``
            or the program closed its terminal.
        """
        wanted = (markers,) if isinstance(markers, bytes) else tuple(markers)
        overlap = max(len(m) for m in wanted) - 1
        deadline = time.perf_counter() + timeout_s
        with self._lock:
            cursor = self._base + bisect.bisect_left(self._times, since)
        tail = b""
        while True:
            with self._lock:
                start = max(cursor - self._base, 0)
                times = self._times[start:]
                chunks = self._chunks[start:]
                cursor = self._base + len(self._chunks)
            for at, chunk in zip(times, chunks, strict=True):
                seen = tail + chunk
                hits = [(seen.find(m), m) for m in wanted if m in seen]
                if hits:
                    return min(hits)[1], at
                tail = seen[-overlap:] if overlap else b""
            if time.perf_counter() >= deadline or not self._reader.is_alive():
                return None
            time.sleep(poll_s)

    def press(self, keys: bytes) -> float:
        """Type ``keys``; returns perf_counter() just before they were written."""
        at = time.perf_counter()
        os.write(self._master, keys)
        return at

    def close(self, quit_keys: bytes = b"q", timeout_s: float = 10.0) -> int | None:
        """Quit with ``quit_keys``; SIGKILL the program's process group if it has not
        exited within ``timeout_s``.

        Returns:
            The exit status, or ``None`` when the program had to be killed.
        """
        code: int | None
        try:
            if self.proc.poll() is None:
                os.write(self._master, quit_keys)
            code = self.proc.wait(timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            code = None
        os.close(self._master)
        return code


def _cpu_seconds(ps: psutil.Process) -> float:
    total = 0.0
    for p in [ps, *ps.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return psutil.Process(pid).memory_info().rss


def ensure_env(name: str, requirements: Sequence[str]) -> Path:
    """A private virtual environment under benchmarks/.envs/, created on first use.

    Peers such as nvitop are installed here, never into the project's own environment.
    Its modules are compiled each time (quick once done), as gputui's are before it is
    measured: a pip run under ``PYTHONDONTWRITEBYTECODE=1`` leaves none, and a peer that
    compiles itself at every start (nvitop: 0.39 s to its first frame instead of 0.14) would
    flatter gputui. Returns the environment's python.
    """
    env = ENVS / name
    python = env / "bin" / "python"
    if not python.exists():
        print(f"creating {env} with {' '.join(requirements)} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True)
    subprocess.run([str(python), "-m", "compileall", "-q", str(env / "lib")], check=True)
    return python


def machine_description() -> str:
    """One line naming the machine the figures come from."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = psutil.virtual_memory().total / 2**30
    return (
        f"{model}, {psutil.cpu_count()} logical cores, {mem:.0f} GiB RAM, "
        f"Linux {os.uname().release}, Python {sys.version.split()[0]}"
    )
