"""``/proc/PID/stat`` read once (gputui/telemetry/procstat.py): against psutil's figures for
real processes, and against names that hold spaces and parentheses."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gputui.telemetry.procstat import CLOCK_TICKS, parse_stat, read_stat, resident_bytes


def test_a_process_s_stat_gives_psutil_s_start_time_cpu_and_memory(
    worked_sleeper: psutil.Process,
) -> None:
    stat = read_stat(f"/proc/{worked_sleeper.pid}")
    assert stat is not None
    boot = psutil.boot_time()
    started = worked_sleeper.create_time()
    assert stat.start_ticks / CLOCK_TICKS + boot == pytest.approx(started, abs=1e-6)
    times = worked_sleeper.cpu_times()
    assert stat.cpu_s == pytest.approx(times.user + times.system, abs=1e-9)
    assert stat.cpu_s > 0
    assert resident_bytes(f"/proc/{worked_sleeper.pid}") == worked_sleeper.memory_info().rss
    assert stat.flags & 0x00200000 == 0  # not a kernel thread


def test_cpu_time_grows_as_a_process_spins() -> None:
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        first = read_stat(f"/proc/{child.pid}")
        deadline = time.monotonic() + 20
        while (now := read_stat(f"/proc/{child.pid}")) is not None and first is not None:
            if now.cpu_ticks >= first.cpu_ticks + 5 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert first is not None and now is not None
        assert now.cpu_ticks >= first.cpu_ticks + 5
        assert now.start_ticks == first.start_ticks
    finally:
        child.kill()
        child.wait()
    assert read_stat(f"/proc/{child.pid}") is None  # gone (and reaped)


@pytest.mark.parametrize("name", ["python3", "a b", "x) (y", ") 1 2 3 (", "(sd-pam)", ""])
def test_fields_count_from_the_name_s_last_parenthesis(name: str) -> None:
    rest = "S 1 7 7 0 -1 4194560 120 0 0 0 250 31 0 0 20 0 1 0 81234 25165824 2361 99"
    stat = parse_stat(f"4242 ({name}) {rest}\n")
    assert stat is not None
    assert (stat.start_ticks, stat.cpu_ticks, stat.flags) == (81234, 281, 4194560)


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b"4242 (python3) S 1 7",
        b"4242 (python3) S 1 7 7 0 -1 x 120 0 0 0 5 3 0 0 20 0 1 0 9 2 1",
    ],
)
def test_a_stat_cut_short_or_not_numbers_reads_as_none(text: bytes) -> None:
    assert parse_stat(text) is None


def test_a_stat_that_cannot_be_read_is_none(tmp_path: Path) -> None:
    assert read_stat("/proc/0") is None
    assert (read_stat(f"{tmp_path}/nothing"), resident_bytes(f"{tmp_path}/nothing")) == (None, None)
    (tmp_path / "statm").write_text("6144 lots 1460\n")
    assert resident_bytes(str(tmp_path)) is None
