"""The watched-process sampler against real processes."""

from __future__ import annotations

import subprocess
import sys
import time

from gputui.telemetry.watched import ProcessSampler


def test_a_busy_child_reads_its_cpu_then_reads_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        sampler = ProcessSampler(child.pid)
        first = sampler.sample()
        assert first.alive and first.cpu_percent is None and first.rss_bytes
        time.sleep(0.5)
        second = sampler.sample()
        assert second.alive and second.cpu_percent is not None and second.cpu_percent > 10
        assert second.threads is not None and second.threads >= 1
    finally:
        child.kill()
        child.wait()
    assert not sampler.sample().alive


def test_a_pid_that_does_not_exist_reads_gone() -> None:
    reading = ProcessSampler(2**22 + 12345).sample()
    assert not reading.alive and reading.cpu_percent is None
