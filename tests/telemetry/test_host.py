"""The host sampler, on this machine's real psutil."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import psutil
import pytest

from gputui.telemetry.host import (
    HostSampler,
    busy_percent,
    parse_cpuinfo_model,
    read_cpu_model_name,
)

X86_CPUINFO = """\
processor	: 0
vendor_id	: GenuineIntel
cpu family	: 6
model		: 106
model name	: Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz
cpu MHz		: 2300.000

processor	: 1
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz
"""

RASPBERRY_PI_CPUINFO = """\
processor	: 0
BogoMIPS	: 108.00
Features	: fp asimd evtstrm crc32 cpuid
CPU implementer	: 0x41
CPU part	: 0xd08

Hardware	: BCM2835
Revision	: c03111
Model		: Raspberry Pi 4 Model B Rev 1.1
"""

ARM_SERVER_CPUINFO = """\
processor	: 0
BogoMIPS	: 50.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
CPU implementer	: 0x41
CPU part	: 0xd0c
"""


@pytest.mark.parametrize(
    ("text", "model"),
    [
        (X86_CPUINFO, "Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz"),
        (RASPBERRY_PI_CPUINFO, "Raspberry Pi 4 Model B Rev 1.1"),
        ("cpu\t\t: POWER9 (raw), altivec supported\n", "POWER9 (raw), altivec supported"),
        (ARM_SERVER_CPUINFO, None),
        ("", None),
        ("model name\t:\n", None),
    ],
)
def test_model_name_from_cpuinfo(text: str, model: str | None) -> None:
    assert parse_cpuinfo_model(text) == model


def test_model_name_reads_the_file_and_survives_its_absence(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(X86_CPUINFO)
    assert read_cpu_model_name(cpuinfo, "linux") == "Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz"
    assert read_cpu_model_name(tmp_path / "missing", "linux") is None


_Times = type(psutil.cpu_times())


def _times(**values: float) -> object:
    fields = dict.fromkeys(_Times._fields, 0.0)
    fields.update(values)
    return _Times(**fields)


def test_busy_percent_counts_all_but_idle_and_iowait() -> None:
    before = _times(user=10, system=5, idle=100)
    assert busy_percent(before, _times(user=10, system=5, idle=110)) == 0.0
    assert busy_percent(before, _times(user=20, system=5, idle=100)) == 100.0
    assert busy_percent(before, _times(user=13, system=6, idle=104)) == pytest.approx(50.0)
    assert busy_percent(before, before) == 0.0  # no time passed: nothing to divide


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="iowait and guest are Linux's")
def test_busy_percent_on_linux_leaves_out_iowait_and_counts_guest_once() -> None:
    before = _times(user=0, idle=0, iowait=0, guest=0)
    assert busy_percent(before, _times(idle=5, iowait=5)) == 0.0
    # Guest time is part of user time on Linux: 10 s of user, 4 of which were a guest's.
    assert busy_percent(before, _times(user=10, guest=4, idle=10)) == pytest.approx(50.0)


def test_a_sample_is_whole_and_sane() -> None:
    sampler = HostSampler(clock=lambda: 123.0)
    reading = sampler.sample()
    assert 0.0 <= reading.utilization_percent <= 100.0
    assert len(reading.per_core_percent) == reading.logical_cores == psutil.cpu_count()
    assert all(0.0 <= value <= 100.0 for value in reading.per_core_percent)
    assert reading.physical_cores == psutil.cpu_count(logical=False)
    assert reading.model_name == read_cpu_model_name()
    assert 0 < reading.memory_used_bytes < reading.memory_total_bytes
    assert reading.memory_total_bytes == psutil.virtual_memory().total
    assert 0 <= reading.swap_used_bytes <= max(reading.swap_total_bytes, 0)
    assert reading.self_rss_bytes == pytest.approx(psutil.Process().memory_info().rss, rel=0.2)
    assert reading.taken_at == 123.0
    if hasattr(psutil, "getloadavg"):
        assert reading.load_average is not None
        assert all(value >= 0 for value in reading.load_average)


def test_frequency_is_none_where_psutil_has_none() -> None:
    reading = HostSampler().sample()
    frequency = psutil.cpu_freq()
    if frequency is None:
        assert reading.frequency_mhz is None
        assert reading.frequency_max_mhz is None
    else:
        assert reading.frequency_max_mhz == (frequency.max or None)
        assert reading.frequency_mhz is None or reading.frequency_mhz > 0


def test_own_cpu_use_is_measured_since_the_previous_sample() -> None:
    """On loaded cores the spin gets a share of one, and the reading says that share: the CPU
    time over the time between the two samples, which figures read around each bound."""
    sampler = HostSampler()
    time.sleep(0.3)
    wall0, cpu0 = time.monotonic(), time.process_time()
    idle = sampler.sample().self_cpu_percent
    wall1, cpu1 = time.monotonic(), time.process_time()
    while time.process_time() - cpu1 < 0.3:  # spin: this process is busy now
        pass
    wall2, cpu2 = time.monotonic(), time.process_time()
    busy = sampler.sample().self_cpu_percent
    wall3, cpu3 = time.monotonic(), time.process_time()
    assert idle is not None and busy is not None
    assert busy > idle
    tick = 1 / os.sysconf("SC_CLK_TCK")  # the sampler's figures are whole ticks
    least = max(cpu2 - cpu1 - 2 * tick, 0) / (wall3 - wall0) * 100
    assert least <= busy <= (cpu3 - cpu0 + 2 * tick) / (wall2 - wall1) * 100


def test_the_first_sample_covers_a_span_not_a_moment() -> None:
    """Issue 18: taken at once after the priming, as the app takes it, the first reading
    said ``CPU 0%`` and ``gputui 1611.1%`` (a 10 ms tick over half a millisecond)."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        reading = HostSampler().sample()
    finally:
        stop.set()
        spinner.join()
    assert reading.utilization_percent > 0.0  # this process was busy all along
    assert reading.self_cpu_percent is not None
    # Busy, on at most two cores at a time (one thread spins, the other reads /proc); a tick
    # (10 ms) either way is 10% of a core over the span.
    assert 0.0 < reading.self_cpu_percent <= 100.0 * min(reading.logical_cores, 2) + 20.0


def test_a_busy_core_shows_in_the_per_core_figures() -> None:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        sampler = HostSampler()
        time.sleep(0.5)
        reading = sampler.sample()
    finally:
        spinner.kill()
        spinner.wait()
    # One core's worth of work: at least one core is mostly busy, and so is the total share.
    assert max(reading.per_core_percent) > 40.0
    assert reading.utilization_percent >= 100.0 / reading.logical_cores * 0.4


def test_static_facts_are_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    sampler = HostSampler()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a static fact was read again")

    monkeypatch.setattr(psutil, "cpu_count", refuse)
    monkeypatch.setattr("gputui.telemetry.host.read_cpu_model_name", refuse)
    monkeypatch.setattr(Path, "read_text", refuse)
    for _ in range(3):
        sampler.sample()


def test_a_gone_process_gives_none_for_its_own_figures() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sampler = HostSampler(process=psutil.Process(child.pid))
    finally:
        child.kill()
        child.wait()
    reading = sampler.sample()
    assert reading.self_cpu_percent is None
    assert reading.self_rss_bytes is None
    assert reading.memory_total_bytes > 0  # the rest of the reading is whole


def test_memory_and_swap_come_from_one_read_of_meminfo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psutil reads /proc/meminfo once for memory and again for swap, then /proc/vmstat for
    swap-in counts that are not shown; the sampler reads meminfo once, and no vmstat."""
    if not sys.platform.startswith("linux"):
        pytest.skip("/proc/meminfo is Linux's")
    (tmp_path / "stat").write_bytes(Path("/proc/stat").read_bytes())
    (tmp_path / "meminfo").write_text(
        "MemTotal:       16000000 kB\nMemFree:         1000000 kB\n"
        "MemAvailable:    6000000 kB\nSwapTotal:       2000000 kB\n"
        "SwapFree:        1500000 kB\nHugePages_Total:       0\n"
    )
    me = psutil.Process()
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # psutil warns where it finds no vmstat
        reading = HostSampler(process=me).sample()
    assert (reading.memory_used_bytes, reading.memory_total_bytes) == (
        10_000_000 * 1024,
        16_000_000 * 1024,
    )
    assert (reading.swap_used_bytes, reading.swap_total_bytes) == (500_000 * 1024, 2_000_000 * 1024)
