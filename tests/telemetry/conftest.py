"""Fixtures the telemetry tests share."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from gputui.telemetry.nvml import NvmlSampler
from tests.fakenvml import FakeNvml


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


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sampler(fake_nvml: FakeNvml, clock: FakeClock) -> Iterator[NvmlSampler]:
    """A sampler on the stand-in library; set FAKE_NVML_* before its first sample."""
    with NvmlSampler(clock=clock) as made:
        yield made
