"""One watched process (the trainer): its CPU use and memory, from psutil. No Textual, no torch.

The UI watches the trainer child by pid while it runs, to show its CPU% beside the
host's. A process that has exited reads as ``alive=False`` with every figure ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """One process's CPU use and memory at one moment."""

    pid: int
    """The process id."""
    alive: bool
    """False once the process has exited (or cannot be read)."""
    cpu_percent: float | None
    """CPU use since the previous sample, in percent of one core (400 = four busy cores)."""
    rss_bytes: int | None
    """Resident set size."""
    threads: int | None
    """Number of threads."""


class ProcessSampler:
    """Samples one process; the first ``sample()`` primes the CPU counter and reads ``None``."""

    def __init__(self, pid: int) -> None:
        """Watch ``pid`` (no error if it does not exist: it reads as not alive)."""
        self.pid = pid
        self._process: psutil.Process | None
        try:
            self._process = psutil.Process(pid)
            self._process.cpu_percent(None)
        except (psutil.Error, OSError):
            self._process = None
        self._primed = False

    def sample(self) -> ProcessReading:
        """Read the process now."""
        process = self._process
        if process is None:
            return ProcessReading(self.pid, False, None, None, None)
        try:
            with process.oneshot():
                cpu = process.cpu_percent(None)
                rss = process.memory_info().rss
                threads = process.num_threads()
                zombie = process.status() == psutil.STATUS_ZOMBIE
        except (psutil.Error, OSError):
            self._process = None
            return ProcessReading(self.pid, False, None, None, None)
        if zombie:
            return ProcessReading(self.pid, False, None, None, None)
        primed, self._primed = self._primed, True
        return ProcessReading(self.pid, True, cpu if primed else None, rss, threads)
