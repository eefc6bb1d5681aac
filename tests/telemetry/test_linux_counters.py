"""The host sampler's Linux counters (gputui/telemetry/host.py ``LinuxCounters``): each
kernel file read once a sample, against psutil's figures on this machine's real /proc, and
against trees written as the kernel lays them out (proc(5), the cpufreq documentation)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from gputui.telemetry import host
from gputui.telemetry.host import CPUINFO_TTL_S, LinuxCounters

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's /proc")

TICKS = os.sysconf("SC_CLK_TCK")


def test_the_real_proc_gives_psutil_s_figures(worked_sleeper: psutil.Process) -> None:
    counters = LinuxCounters("/proc", worked_sleeper.pid)
    try:
        cores = counters.cores()
        times = psutil.cpu_times(percpu=True)
        assert cores is not None and len(cores) == len(times)
        for (total, idle), theirs in zip(cores, times, strict=True):
            their_total = sum(theirs) - theirs.guest - theirs.guest_nice
            assert total == pytest.approx(their_total, abs=0.5)  # read moments apart
            assert idle == pytest.approx(theirs.idle + theirs.iowait, abs=0.5)
        memory = counters.memory()
        assert memory is not None
        used, total, swap_used, swap_total = memory
        virtual, swap = psutil.virtual_memory(), psutil.swap_memory()
        assert total == virtual.total and swap_total == swap.total
        assert used == pytest.approx(virtual.total - virtual.available, rel=0.1)
        assert 0 <= swap_used <= swap_total
        process = counters.process()
        assert process is not None
        their = worked_sleeper.cpu_times()
        assert process[0] == pytest.approx(their.user + their.system, abs=1e-9)
        assert process[0] > 0 and process[1] == worked_sleeper.memory_info().rss
    finally:
        counters.close()


def test_kept_open_files_are_read_afresh_each_sample() -> None:
    """On the real procfs the files stay open between samples (one ``pread`` each), and a
    second read still gives the kernel's new figures, not the first's."""
    counters = LinuxCounters("/proc", os.getpid())
    try:
        first = counters.cores()
        mine = counters.process()
        open_before = len(os.listdir("/proc/self/fd"))
        deadline = time.monotonic() + 20
        while time.process_time() < (mine[0] if mine else 0) + 0.1:  # spin a little
            pass
        while (later := counters.cores()) == first and time.monotonic() < deadline:
            time.sleep(0.02)
        after = counters.process()
        assert first is not None and later is not None and later != first
        assert mine is not None and after is not None and after[0] > mine[0]
        assert len(os.listdir("/proc/self/fd")) == open_before  # no file opened anew
    finally:
        counters.close()


def proc_tree(base: Path, *, cpus: list[list[int]], meminfo: str, cpuinfo: str = "") -> Path:
    """A procfs tree with the files the counters read."""
    proc = base / "proc"
    proc.mkdir()
    total = [sum(column) for column in zip(*cpus, strict=True)]
    lines = ["cpu  " + " ".join(map(str, total))]
    lines += [f"cpu{n} " + " ".join(map(str, fields)) for n, fields in enumerate(cpus)]
    lines += ["intr 1462898 0 9 0", "ctxt 5742960", "btime 1764000000", "cpu_but_not_a_cpu 1"]
    (proc / "stat").write_text("\n".join(lines) + "\n")
    (proc / "meminfo").write_text(meminfo)
    (proc / "cpuinfo").write_text(cpuinfo)
    return proc


MEMINFO = (
    "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    6000000 kB\n"
    "Buffers:          100000 kB\nSwapTotal:       2000000 kB\nSwapFree:        1500000 kB\n"
    "HugePages_Total:       0\n"
)


def test_guest_time_is_counted_once_and_iowait_as_idle(tmp_path: Path) -> None:
    #        user nice system idle iowait irq softirq steal guest guest_nice
    cpus = [[500, 10, 90, 300, 100, 0, 0, 0, 200, 50], [100, 0, 0, 900, 0, 0, 0, 0, 0, 0]]
    proc = proc_tree(tmp_path, cpus=cpus, meminfo=MEMINFO)
    counters = LinuxCounters(str(proc), 4242, sysfs=str(tmp_path / "sys"))
    assert counters.cores() == [(1000 / TICKS, 400 / TICKS), (1000 / TICKS, 900 / TICKS)]
    assert counters.memory() == (
        10_000_000 * 1024,
        16_000_000 * 1024,
        500_000 * 1024,
        2_000_000 * 1024,
    )
    assert counters.process() is None  # no such process in the tree
    assert counters.frequency_mhz(0.0) is None  # neither cpufreq nor cpu MHz


def test_a_copied_tree_is_read_by_path_each_time(tmp_path: Path) -> None:
    """A tree refreshed by renaming files in (as rsync does) is read anew, not from the
    file first opened."""
    proc = proc_tree(tmp_path, cpus=[[1, 0, 0, 1]], meminfo=MEMINFO)
    counters = LinuxCounters(str(proc), 4242, sysfs=str(tmp_path / "sys"))
    assert counters.memory() is not None
    fresh = tmp_path / "meminfo.new"
    fresh.write_text(MEMINFO.replace("MemAvailable:    6000000", "MemAvailable:    7000000"))
    fresh.rename(proc / "meminfo")
    memory = counters.memory()
    assert memory is not None and memory[0] == 9_000_000 * 1024


def test_meminfo_without_memavailable_is_none_so_psutil_answers(tmp_path: Path) -> None:
    """A kernel before 3.14 has no MemAvailable: psutil then estimates it."""
    old = "\n".join(line for line in MEMINFO.splitlines() if "Available" not in line)
    proc = proc_tree(tmp_path, cpus=[[1, 0, 0, 1]], meminfo=old + "\n")
    assert LinuxCounters(str(proc), 1, sysfs=str(tmp_path / "sys")).memory() is None


def test_the_frequency_is_the_mean_of_every_cpufreq_policy(tmp_path: Path) -> None:
    proc = proc_tree(tmp_path, cpus=[[1, 0, 0, 1]], meminfo=MEMINFO, cpuinfo="cpu MHz : 1.0\n")
    cpufreq = tmp_path / "sys" / "devices" / "system" / "cpu" / "cpufreq"
    for n, khz in enumerate([2_000_000, 3_000_000, 3_500_000]):
        (cpufreq / f"policy{n}").mkdir(parents=True)
        (cpufreq / f"policy{n}" / "scaling_cur_freq").write_text(f"{khz}\n")
    (cpufreq / "boost").write_text("1\n")  # not a policy
    counters = LinuxCounters(str(proc), 1, sysfs=str(tmp_path / "sys"))
    assert counters.frequency_mhz(0.0) == pytest.approx((2000 + 3000 + 3500) / 3)
    (cpufreq / "policy1" / "scaling_cur_freq").write_text("1200000\n")
    assert counters.frequency_mhz(1.0) == pytest.approx((2000 + 1200 + 3500) / 3)


def test_without_cpufreq_cpuinfo_is_read_at_most_every_ttl(tmp_path: Path) -> None:
    """A virtual machine: no cpufreq policy, the kernel's ``cpu MHz`` in /proc/cpuinfo."""
    cpuinfo = "processor\t: 0\ncpu MHz\t\t: 2599.998\n\nprocessor\t: 1\ncpu MHz\t\t: 2400.002\n"
    proc = proc_tree(tmp_path, cpus=[[1, 0, 0, 1]], meminfo=MEMINFO, cpuinfo=cpuinfo)
    counters = LinuxCounters(str(proc), 1, sysfs=str(tmp_path / "sys"))
    assert counters.frequency_mhz(100.0) == pytest.approx(2500.0)
    (proc / "cpuinfo").write_text(cpuinfo.replace("2599.998", "3599.998"))
    assert counters.frequency_mhz(100.0 + CPUINFO_TTL_S - 0.1) == pytest.approx(2500.0)
    assert counters.frequency_mhz(100.0 + CPUINFO_TTL_S) == pytest.approx(3000.0)


def test_the_sampler_reads_its_own_figures_from_the_counters() -> None:
    """Through HostSampler: the reading's own CPU and memory are this process's."""
    sampler = host.HostSampler()
    try:
        reading = sampler.sample()
    finally:
        sampler.close()
    assert reading.self_rss_bytes == pytest.approx(psutil.Process().memory_info().rss, rel=0.2)
    assert reading.self_cpu_percent is not None and reading.self_cpu_percent >= 0
    assert len(reading.per_core_percent) == psutil.cpu_count()


def test_a_stat_cut_short_by_the_read_is_left_to_psutil(tmp_path: Path) -> None:
    """On a box of thousands of CPUs the cpu lines outgrow one read: the cut last line must
    not read as a core."""
    cpus = [[100, 0, 0, 900]] * 8
    proc = proc_tree(tmp_path, cpus=cpus, meminfo=MEMINFO)
    text = (proc / "stat").read_text()
    (proc / "stat").write_text(text[: text.index("intr")] + "cpu8 1 2 3 4 5 6 7 8 9 10\n" * 5000)
    counters = LinuxCounters(str(proc), 1, sysfs=str(tmp_path / "sys"))
    assert len((proc / "stat").read_bytes()) > 65536
    assert counters.cores() is None


def test_each_cpu_s_own_cpufreq_folder_where_there_is_no_policy_folder(tmp_path: Path) -> None:
    proc = proc_tree(tmp_path, cpus=[[1, 0, 0, 1]], meminfo=MEMINFO)
    cpu = tmp_path / "sys" / "devices" / "system" / "cpu"
    for n, khz in enumerate([1_000_000, 2_000_000]):
        (cpu / f"cpu{n}" / "cpufreq").mkdir(parents=True)
        (cpu / f"cpu{n}" / "cpufreq" / "scaling_cur_freq").write_text(f"{khz}\n")
    counters = LinuxCounters(str(proc), 1, sysfs=str(tmp_path / "sys"))
    assert counters.frequency_mhz(0.0) == pytest.approx(1500.0)


def test_a_file_mounted_over_procfs_is_read_by_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LXCFS mounts FUSE files over /proc/stat and /proc/meminfo in a container: only
    procfs's own files are kept open (each file's mount is looked up, not /proc's). Here the
    tree is "procfs" and its meminfo a FUSE file, as a mountinfo says: a meminfo renamed in
    is read, while the kept stat still reads the file first opened."""
    proc = proc_tree(tmp_path, cpus=[[1, 0, 0, 1]], meminfo=MEMINFO)
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        f"22 1 0:21 / {proc} rw,nosuid - proc proc rw\n"
        f"40 22 0:44 /proc/meminfo {proc}/meminfo rw - fuse.lxcfs lxcfs rw\n"
    )
    monkeypatch.setattr("gputui.telemetry.sysfs.MOUNTINFO", mountinfo)
    counters = LinuxCounters(str(proc), 1, sysfs=str(tmp_path / "sys"))
    try:
        before = (counters.cores(), counters.memory())
        for name, text in (
            ("meminfo", MEMINFO.replace("MemAvailable:    6000000", "MemAvailable:    7000000")),
            ("stat", (proc / "stat").read_text().replace("cpu0 1 0 0 1", "cpu0 5 0 0 5")),
        ):
            (tmp_path / name).write_text(text)
            (tmp_path / name).rename(proc / name)
        memory = counters.memory()
        assert memory is not None and before[1] is not None and memory[0] < before[1][0]
        assert counters.cores() == before[0]  # kept open: the old file, as procfs's own
    finally:
        counters.close()
