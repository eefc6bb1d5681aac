"""The trainer's child process: ``python -m gputui.training.child``.

Usage::

    python -m gputui.training.child [--parent-pid PID] [--watch-stdin] CONFIG_JSON
    python -m gputui.training.child [--parent-pid PID] [--watch-stdin] --devices

Events go to standard output as JSON lines (:mod:`gputui.training.events`);
anything else printed (by torch, a library, a stray ``print``) is redirected to
standard error, so the event stream stays clean. The parent reads standard
error only for an error's detail.

Staying safe beside a UI:

- ``SIGTERM``, ``SIGHUP`` and ``SIGINT`` ask the run to stop after the current
  step (it ends with ``Finished(stopped=True)``); a second one exits at once.
- With ``--parent-pid``, Linux's ``PR_SET_PDEATHSIG`` kills this process when
  the thread that started it dies; with ``--watch-stdin``, a watchdog thread
  kills this process group (DataLoader workers too) when standard input reaches
  EOF (the parent is gone, however it died) or the parent pid changes.
- The process lowers its priority (``RunConfig.nice``) and, on the CPU, trains
  with ``RunConfig.threads`` threads (default: every core but one).

Speed (see BENCHMARKS.md):

- Before torch loads, :func:`keep_freed_memory` tells glibc's allocator to keep
  freed blocks of up to 32 MiB instead of returning them to the kernel: each
  CPU training step frees and reallocates the same few megabytes of
  activations, and without this every step page-faults them back in (hundreds
  to thousands of faults a step, several per cent of the step).
- Run as ``python -m``, the process ends with ``os._exit`` once every event is
  written and the run folder closed: tearing down torch's modules at
  interpreter exit takes about a second and does nothing for a process that is
  about to go.
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
import traceback
import warnings
from collections.abc import Sequence
from typing import IO

from gputui.training.config import ConfigError, RunConfig, ui_friendly_threads
from gputui.training.events import Error, Event

PR_SET_PDEATHSIG = 1
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 2**20
"""glibc's largest allowed mmap threshold on 64-bit: blocks below it come from the heap."""
TRIM_THRESHOLD_BYTES = 2**30
"""Free heap kept before glibc gives memory back to the kernel."""
WATCHDOG_PERIOD_S = 1.0
EXIT_USAGE = 2
USAGE = (
    "usage: python -m gputui.training.child [--parent-pid PID] [--watch-stdin] "
    "(CONFIG_JSON | --devices)"
)


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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the child; returns its exit code."""
    keep_freed_memory()
    stream = EventStream.take_stdout()
    try:
        return _main(list(sys.argv[1:] if argv is None else argv), stream)
    except BaseException as exc:  # the last resort: never die without saying why
        stream.emit(
            Error(
                message=f"the trainer crashed: {type(exc).__name__}: {exc}".splitlines()[0],
                detail=traceback.format_exc(),
                kind="crash",
            )
        )
        return 1


def _main(args: list[str], stream: EventStream) -> int:
    parent_pid = None
    watch_stdin = False
    devices = False
    payload = None
    while args:
        arg = args.pop(0)
        if arg == "--parent-pid" and args and args[0].isdigit():
            parent_pid = int(args.pop(0))
        elif arg == "--watch-stdin":
            watch_stdin = True
        elif arg == "--devices":
            devices = True
        elif payload is None and not arg.startswith("--"):
            payload = arg
        else:
            stream.emit(Error(message=f"bad trainer argument {arg!r}; {USAGE}", kind="config"))
            return EXIT_USAGE
    if parent_pid is not None:
        die_with_parent(parent_pid)
    if watch_stdin:
        start_parent_watchdog(parent_pid if parent_pid is not None else os.getppid())
    stop = install_stop_signals()

    if devices:
        return _list_devices(stream)
    if payload is None:
        stream.emit(Error(message=f"no run config given; {USAGE}", kind="config"))
        return EXIT_USAGE
    try:
        config = RunConfig.from_json(payload)
        config.validate()
    except ConfigError as exc:
        stream.emit(Error(message=str(exc), kind="config"))
        return EXIT_USAGE
    lower_priority(config.nice)
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy
    import torch

    from gputui.training.trainer import run_training

    if config.device.strip().startswith("cpu"):
        torch.set_num_threads(config.threads or ui_friendly_threads())
    return run_training(config, stream.emit, stop.is_set)


def _list_devices(stream: EventStream) -> int:
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch

    from gputui.training.devices import device_options
    from gputui.training.events import DevicesListed

    stream.emit(DevicesListed(devices=tuple(device_options()), torch_version=torch.__version__))
    return 0


def keep_freed_memory() -> bool:
    """Linux glibc: keep freed blocks up to 32 MiB in the heap rather than unmapping them.

    Without it, glibc serves each multi-megabyte activation from a fresh ``mmap``
    (or trims the heap after freeing it), so every training step on the CPU
    page-faults its activations back in. Call it before torch allocates.

    Returns:
        Whether the allocator took the settings (False elsewhere, e.g. musl or macOS).
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
    """Flush standard output and error, then end the process without interpreter teardown."""
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
    """SIGTERM, SIGHUP, SIGINT: the first asks to stop, the second exits at once.

    Returns:
        The event the training loop polls.
    """
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
    which is why :class:`gputui.training.runner.TrainerProcess` starts it from a
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


if __name__ == "__main__":
    exit_now(main())
