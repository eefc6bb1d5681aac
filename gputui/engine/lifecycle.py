"""What keeps an engine child safe beside a UI, whatever its job: the event stream on a
private copy of standard output, death with the parent, stop signals (the first stops after
the current step, a second exits at once), priority, and the allocator setting that CPU
training needs. Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
import signal
import sys
import threading
from typing import IO

from gputui.jobs.events import Event

PR_SET_PDEATHSIG = 1
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 2**20
"""glibc's largest allowed mmap threshold on 64-bit: blocks below it come from the heap."""
TRIM_THRESHOLD_BYTES = 2**30
"""Free heap kept before glibc gives memory back to the kernel."""
WATCHDOG_PERIOD_S = 1.0


class EventStream:
    """Writes events as JSON lines to a private copy of the original standard output."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    @classmethod
    def take_stdout(cls) -> EventStream:
        """Keep fd 1 for events and point fd 1 (and ``print``) at standard error."""
        sys.stdout.flush()
        events_fd = os.dup(1)
        os.dup2(2, 1)
        return cls(os.fdopen(events_fd, "w", encoding="utf-8", buffering=1))

    def emit(self, event: Event) -> None:
        """Write one event line and flush it."""
        line = event.to_json() + "\n"
        with self._lock:
            try:
                self._stream.write(line)
                self._stream.flush()
            except (BrokenPipeError, ValueError):  # the parent is gone: the watchdog ends us
                pass


def keep_freed_memory() -> bool:
    """Linux glibc: keep freed blocks up to 32 MiB in the heap rather than unmapping them.

    Without it, glibc serves each multi-megabyte activation from a fresh ``mmap``
    (or trims the heap after freeing it), so every training step on the CPU
    page-faults its activations back in. Call it before torch allocates. Returns whether the
    allocator took the settings (False elsewhere, e.g. musl or macOS).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )


def exit_now(code: int) -> None:
    """Flush standard output and error, then end the process without interpreter teardown
    (tearing torch down does nothing for a process that is about to go)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def lower_priority(nice: int) -> None:
    """Add ``nice`` to this process's niceness (best effort)."""
    if nice > 0 and hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(nice)


def install_stop_signals() -> threading.Event:
    """SIGTERM, SIGHUP, SIGINT: the first sets the returned event (the training loop polls
    it), the second exits at once."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():
            os._exit(128 + signum)
        stop.set()

    for name in ("SIGTERM", "SIGHUP", "SIGINT"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), on_signal)
    return stop


def die_with_parent(parent_pid: int) -> None:
    """Linux: have the kernel SIGKILL this process when its parent dies.

    The kernel sends it when the parent *thread* that started this process ends,
    which is why :class:`gputui.jobs.process.ChildProcess` starts it from a
    thread that lives exactly as long as the child.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the prctl took effect
        _kill_own_group()


def start_parent_watchdog(parent_pid: int) -> threading.Thread:
    """Watch standard input for EOF and the parent pid for change; either kills us.

    Portable fallback for :func:`die_with_parent`: the parent holds the write end
    of our standard input, so EOF means it is gone, however it died.
    """

    def watch() -> None:
        fd = sys.stdin.fileno()
        while True:
            readable, _, _ = select.select([fd], [], [], WATCHDOG_PERIOD_S)
            if readable and not os.read(fd, 4096):
                break
            if os.getppid() != parent_pid:
                break
        _kill_own_group()

    thread = threading.Thread(target=watch, name="parent-watchdog", daemon=True)
    thread.start()
    return thread


def _kill_own_group() -> None:
    """SIGKILL this process and, when it leads its group, every DataLoader worker with it."""
    if hasattr(os, "killpg") and os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(1)
