"""A folder on a disk that is (nearly) full, for the tests of what a full disk does."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

PAGE = 4096
"""A tmpfs page: the unit its size is counted in."""


@contextlib.contextmanager
def small_disk(folder: Path, free_pages: int) -> Iterator[list[str]]:
    """``folder`` on a real file system with ``free_pages`` pages left; gives the prefix
    of a command that is to run on it. Where this process may mount (root with
    CAP_SYS_ADMIN), a 64 KiB tmpfs filled up to that (the kernel's ENOSPC); elsewhere
    ``prlimit --fsize`` lets the command write files of ``free_pages`` KiB at most (its
    EFBIG). Either way the kernel refuses the write that does not fit."""
    folder.mkdir(parents=True)
    mount = shutil.which("mount")
    command = [mount or "mount", "-t", "tmpfs", "-o", "size=64k", "gputui-test", str(folder)]
    if mount is None or subprocess.run(command, capture_output=True).returncode != 0:
        yield ["prlimit", f"--fsize={free_pages * 1024}"]
        return
    try:
        (folder / "filler").write_bytes(b"x" * (16 - free_pages) * PAGE)
        yield []
    finally:
        subprocess.run(["umount", str(folder)], check=False)
