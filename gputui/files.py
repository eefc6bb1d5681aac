"""Opening a file that someone else may have put in the way.

A recording, its index, a sysfs or procfs tree: each path may name a FIFO (an ``open`` that
waits for a writer for ever), a device (``/dev/zero``: endless data) or a symbolic link
another user planted. :func:`open_regular` opens without blocking and refuses anything but
a regular file, so that such a path costs one line, never a hang; :func:`create_new` makes a
file that did not exist, never through a link and never over a file.

Torch-free and Textual-free, below every layer (recordings and telemetry share it).
"""

from __future__ import annotations

import errno
import os
import stat


class NotAFile(OSError):
    """The path names something other than a regular file (a FIFO, a device, a folder)."""


def open_regular(path: str | os.PathLike[str], flags: int = os.O_RDONLY) -> int:
    """A descriptor of the regular file at ``path``, opened with ``flags``: never blocked by
    a FIFO (``O_NONBLOCK``, which a regular file ignores), never made the controlling
    terminal by a tty (``O_NOCTTY``), never left open on anything else.

    Raises:
        NotAFile: it is a FIFO, a device, a socket or a folder (``strerror`` says which).
        OSError: it cannot be opened.
    """
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotAFile(errno.EINVAL, f"not a regular file (a {_kind(mode)})", os.fspath(path))
    return fd


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The contents of the regular file at ``path``, if they are at most ``limit`` bytes.

    Raises:
        NotAFile: it is not a regular file, or it holds more than ``limit`` bytes.
        OSError: it cannot be read.
    """
    fd = open_regular(path)
    try:
        data = os.read(fd, limit + 1)
        # a short read is the file's end on a disk; sysfs and procfs files may hand out a
        # page at a time, so read on until the end or past the limit
        while data and len(data) <= limit and (more := os.read(fd, limit + 1 - len(data))):
            data += more
    finally:
        os.close(fd)
    if len(data) > limit:
        raise NotAFile(errno.EFBIG, f"larger than {limit:,} bytes", os.fspath(path))
    return data


def create_new(path: str | os.PathLike[str], mode: int = 0o644) -> int:
    """A descriptor of a new, empty file at ``path``, open for writing: never through a
    symbolic link and never over a file that exists (``O_EXCL``).

    Raises:
        FileExistsError: something is at ``path`` already (a file, a link, a FIFO).
        OSError: it cannot be made.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(path, flags, mode)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISDIR, "folder"),
    ):
        if test(mode):
            return name
    return "special file"
