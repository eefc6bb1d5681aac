"""A process's ``/proc/PID/stat`` (when it started, the CPU time it has used, its flags) and
``statm`` (its resident memory), each read once, as proc(5) describes them.

The NVML sampler reads a GPU process's start time every sample, to tell it from a process
that took its pid over, and its CPU and memory to show them: two reads, where psutil would
read ``stat`` once to build a ``Process`` (and ``/proc/stat``, a line per CPU long on a large
box, for the boot time), and again with ``statm`` for the figures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gputui.files import open_regular

try:
    CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):
    CLOCK_TICKS = 100
"""The kernel's clock ticks a second, the unit of ``stat``'s times."""
try:
    PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):
    PAGE_SIZE = 4096
"""Bytes a page, the unit of ``statm``."""

STAT_LIMIT = 4096
"""Bytes of ``stat`` or ``statm`` read at most (``stat``: 52 numbers and a name of 16 bytes
at most)."""


@dataclass(frozen=True, slots=True)
class ProcStat:
    """What one ``/proc/PID/stat`` said."""

    start_ticks: int
    """Field 22, ``starttime``: clock ticks after boot. With the pid, it names the process."""
    cpu_ticks: int
    """Fields 14 and 15, ``utime`` + ``stime``: clock ticks of CPU it has used (its threads'
    too, not its children's)."""
    flags: int
    """Field 9, ``flags``: ``PF_*`` (``PF_KTHREAD`` marks a kernel thread)."""

    @property
    def cpu_s(self) -> float:
        """CPU seconds used."""
        return self.cpu_ticks / CLOCK_TICKS


def parse_stat(text: bytes | str) -> ProcStat | None:
    """``stat``'s fields; ``None`` when they are not there or not numbers. The name in field 2
    may hold spaces and parentheses, so fields are counted from its last ``)``."""
    if isinstance(text, str):
        text = text.encode()
    fields = text[text.rfind(b")") + 1 :].split()
    if len(fields) < 20:
        return None
    try:
        return ProcStat(
            start_ticks=int(fields[19]),
            cpu_ticks=int(fields[11]) + int(fields[12]),
            flags=int(fields[6]),
        )
    except ValueError:
        return None


def read_stat(folder: str) -> ProcStat | None:
    """The ``stat`` of the process whose folder is ``folder`` (``/proc/PID``); ``None`` when
    the process has gone, cannot be read (another user's under ``hidepid``) or the file says
    something else."""
    data = read_head(f"{folder}/stat")
    return None if data is None else parse_stat(data)


def resident_bytes(folder: str) -> int | None:
    """The resident memory of the process whose folder is ``folder`` (:func:`parse_statm`);
    ``None`` when it cannot be read."""
    data = read_head(f"{folder}/statm")
    return None if data is None else parse_statm(data)


def parse_statm(data: bytes) -> int | None:
    """``statm``'s second field, the resident memory, in bytes (psutil's ``rss``, ``top``'s
    ``RES``; ``stat``'s own ``rss`` field can lag behind it); ``None`` when it is not there."""
    fields = data.split(maxsplit=2)
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return int(fields[1]) * PAGE_SIZE


def read_head(path: str, limit: int = STAT_LIMIT) -> bytes | None:
    """The first ``limit`` bytes of the file (one read: a procfs file's first page); ``None``
    when it cannot be read (gone, another user's, not a regular file: a FIFO would block)."""
    try:
        fd = open_regular(path)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)
