"""Fixtures the telemetry tests share."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.fakeprocfs import readable_folder


@pytest.fixture
def readable_base() -> Iterator[Path]:
    """A folder another user may read (for a procfs that user reads), removed after."""
    with readable_folder() as base:
        yield base


@pytest.fixture
def worked_sleeper() -> Iterator[psutil.Process]:
    """A child that has done some work (4 MiB touched, 0.1 s of CPU) and now sleeps: its
    CPU time and memory hold still while they are compared."""
    code = (
        "import time\nb = bytearray(4 << 20)\nwhile time.process_time() < 0.1: pass\n"
        "print(1, flush=True)\ntime.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"1\n"
        yield psutil.Process(child.pid)
    finally:
        child.kill()
        child.wait()
