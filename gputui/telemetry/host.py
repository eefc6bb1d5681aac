"""The host: CPUs, memory, swap, and gputui's own footprint, from the kernel's counters on
Linux and psutil elsewhere.

Static facts (core counts, model name, maximum frequency) are read once, when the
sampler is built; each ``sample()`` reads only what changes: on Linux a handful of kernel
files (:class:`LinuxCounters`), each with one ``pread`` of a descriptor kept open.
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

from gputui.system import read_sysctl
from gputui.telemetry.procstat import CLOCK_TICKS, parse_stat, parse_statm
from gputui.telemetry.readings import CpuReading
from gputui.telemetry.sysfs import DeviceGone, SysfsFiles, mount_type, on_sysfs

SHORTEST_SPAN_S = 0.1
"""The least time a sample covers; one asked for sooner waits out the rest (the first, in
practice). The kernel counts CPU time in ticks of 10 ms (``USER_HZ``), so over a millisecond
a core reads 0% or 100% and gputui's own use 0% or over 1000%; over 0.1 s one tick is
10% of a core."""

_CPUINFO_MODEL_KEYS = ("model name", "Model", "Hardware", "cpu model", "cpu", "Processor")
"""``/proc/cpuinfo`` keys that name the processor, by architecture, most telling first."""


def parse_cpuinfo_model(text: str) -> str | None:
    """The processor's model name from the text of ``/proc/cpuinfo``: the first of the keys
    that name it on x86 (``model name``), ARM boards (``Model``, ``Hardware``), MIPS and POWER
    (``cpu model``, ``cpu``) that has a value; ``None`` when none has."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if sep and value and key in _CPUINFO_MODEL_KEYS and key not in found:
            found[key] = value
    for key in _CPUINFO_MODEL_KEYS:
        if key in found:
            return found[key]
    return None


def read_cpu_model_name(
    cpuinfo: Path = Path("/proc/cpuinfo"), system: str = sys.platform
) -> str | None:
    """The processor's model name: ``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS,
    ``platform.processor()`` elsewhere; ``None`` when it does not say. Call it once: it may
    start a process."""
    if system.startswith("linux"):
        try:
            return parse_cpuinfo_model(cpuinfo.read_text(errors="replace"))
        except OSError:
            return None
    if system == "darwin":
        return read_sysctl("machdep.cpu.brand_string", timeout_s=5.0) or None
    return platform.processor() or None


def busy_percent(before: Any, after: Any) -> float:
    """Share of time a CPU was busy between two ``psutil`` CPU-times samples, 0-100."""
    return _busy_percent(_total_and_idle(before), _total_and_idle(after))


def _total_and_idle(times: Any) -> tuple[float, float]:
    # psutil's own rule: busy is all but idle and iowait, and guest time is
    # already counted in user time on Linux, so it is not counted twice.
    total = float(sum(times)) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    return total, float(times.idle + getattr(times, "iowait", 0.0))


_LINUX = sys.platform.startswith("linux")

CPUINFO_TTL_S = 10.0
"""How often the frequency is read from ``/proc/cpuinfo``, where no cpufreq policy gives it
(a virtual machine): the kernel builds that file anew at each read, a page per CPU, for one
figure that such a machine seldom changes."""
_MEMINFO_KEYS = (b"MemTotal:", b"MemAvailable:", b"SwapTotal:", b"SwapFree:")


class LinuxCounters:
    """What a host sample reads on Linux: every CPU's times (``/proc/stat``), memory and swap
    (``/proc/meminfo``), a process's CPU time and memory (its ``stat`` and ``statm``) and the
    frequency (each cpufreq policy's ``scaling_cur_freq``), each one ``pread`` of a
    descriptor kept open on a real procfs and sysfs, where psutil opens each file again for
    each figure. A figure is ``None`` where its file cannot be read: the sampler then asks
    psutil.
    """

    def __init__(self, procfs: str, pid: int, sysfs: str = "/sys") -> None:
        """Read the host under ``procfs`` (psutil's ``PROCFS_PATH``), process ``pid``'s
        figures, and the frequency under ``sysfs``."""
        self._proc = SysfsFiles(keep_open=True)
        self._sys = SysfsFiles(keep_open=on_sysfs(Path(sysfs)))
        self._stat = f"{procfs}/stat"
        self._meminfo = f"{procfs}/meminfo"
        self._cpuinfo = f"{procfs}/cpuinfo"
        self._process = f"{procfs}/{pid}"
        # each file's own mount: a container's LXCFS mounts FUSE files over /proc/stat and
        # /proc/meminfo, which are read by path as any file not procfs's own
        self._kept = {
            path: mount_type(path) == "proc"
            for path in (self._stat, self._meminfo, f"{self._process}/stat")
        }
        self._kept[f"{self._process}/statm"] = self._kept[f"{self._process}/stat"]
        cpu = Path(sysfs) / "devices" / "system" / "cpu"
        self._policies = sorted(map(str, cpu.glob("cpufreq/policy[0-9]*/scaling_cur_freq")))
        if not self._policies:  # kernels before the policy folders: each CPU's own
            self._policies = sorted(map(str, cpu.glob("cpu[0-9]*/cpufreq/scaling_cur_freq")))
        self._cpuinfo_read_at: float | None = None
        self._cpuinfo_mhz: float | None = None

    def _data(self, path: str) -> bytes | None:
        """``path``'s bytes, from a descriptor kept open where it is procfs's own file."""
        try:
            return self._proc.data(path, quiet=True, keep=self._kept.get(path, False))
        except DeviceGone:  # not from procfs; as any other file that cannot be read
            return None

    def cores(self) -> list[tuple[float, float]] | None:
        """Each CPU's total and idle time (seconds), as :func:`_total_and_idle` counts psutil's;
        ``None`` where ``/proc/stat`` cannot be read."""
        data = self._data(self._stat)
        if data is None:
            return None
        cores: list[tuple[float, float]] = []
        whole = False  # the cpu lines ended before the bytes read did
        for line in data.split(b"\n"):
            if not line.startswith(b"cpu"):
                if cores:
                    whole = True
                    break  # the cpu lines come first, then interrupts and the rest
                continue
            name, *fields = line.split()
            if name == b"cpu" or len(fields) < 4:
                continue  # the sum of every CPU
            ticks = [int(field) for field in fields]
            guests = sum(ticks[8:10])  # guest time is counted in user time already
            idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
            cores.append(((sum(ticks) - guests) / CLOCK_TICKS, idle / CLOCK_TICKS))
        return cores if whole else None  # cut short (thousands of CPUs): psutil reads it all

    def memory(self) -> tuple[int, int, int, int] | None:
        """Memory used and total, swap used and total, in bytes; ``None`` where a line is
        missing (an old kernel) or the file cannot be read."""
        data = self._data(self._meminfo)
        found: dict[bytes, int] = {}
        for line in (data or b"").split(b"\n"):
            fields = line.split()
            if len(fields) >= 2 and fields[0] in _MEMINFO_KEYS and fields[1].isdigit():
                found[fields[0]] = int(fields[1]) * 1024  # kB
                if len(found) == len(_MEMINFO_KEYS):
                    total, available = found[b"MemTotal:"], found[b"MemAvailable:"]
                    swap_total, swap_free = found[b"SwapTotal:"], found[b"SwapFree:"]
                    return total - available, total, swap_total - swap_free, swap_total
        return None

    def process(self) -> tuple[float, int | None] | None:
        """The process's CPU time (user and system, seconds) and resident memory; ``None``
        when it has gone."""
        data = self._data(f"{self._process}/stat")
        stat = None if data is None else parse_stat(data)
        if stat is None:
            return None
        statm = self._data(f"{self._process}/statm")
        return stat.cpu_ticks / CLOCK_TICKS, None if statm is None else parse_statm(statm)

    def frequency_mhz(self, now: float) -> float | None:
        """The CPUs' mean current frequency: from each cpufreq policy (listed once: a CPU
        brought online later is not counted), else from ``/proc/cpuinfo`` at most every
        :data:`CPUINFO_TTL_S`; ``None`` where neither says."""
        if self._policies:
            khz = []
            for path in self._policies:
                try:
                    data = self._sys.data(path, quiet=True, keep=True)
                except DeviceGone:
                    continue
                if data is not None and data.strip().isdigit():
                    khz.append(int(data))
            return sum(khz) / len(khz) / 1000 if khz else None
        if self._cpuinfo_read_at is None or now - self._cpuinfo_read_at >= CPUINFO_TTL_S:
            self._cpuinfo_read_at = now
            self._cpuinfo_mhz = _cpuinfo_mhz(self._cpuinfo)
        return self._cpuinfo_mhz

    def close(self) -> None:
        """Close the files kept open."""
        self._proc.close()
        self._sys.close()


def _cpuinfo_mhz(path: str) -> float | None:
    """The mean of ``/proc/cpuinfo``'s ``cpu MHz`` lines (psutil's figure without cpufreq)."""
    try:
        with open(path, "rb") as file:
            lines = [line for line in file if line[:7].lower() == b"cpu mhz"]
    except OSError:
        return None
    try:
        mhz = [float(line.split(b":", 1)[1]) for line in lines]
    except (IndexError, ValueError):
        return None
    return sum(mhz) / len(mhz) if mhz else None


def _summed(cores: Sequence[tuple[float, float]]) -> tuple[float, float]:
    return sum(total for total, _ in cores), sum(idle for _, idle in cores)


def _busy_percent(before: tuple[float, float], after: tuple[float, float]) -> float:
    total = after[0] - before[0]
    idle = after[1] - before[1]
    if total <= 0:
        return 0.0
    return min(100.0, max(0.0, 100.0 * (total - idle) / total))


class HostSampler:
    """Samples the host; each ``sample()`` covers the time since the previous one (the
    constructor takes the first), at least ``SHORTEST_SPAN_S``. Not thread-safe."""

    def __init__(
        self,
        *,
        process: psutil.Process | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Read the static facts and prime the utilization counters.

        Args:
            process: The process whose CPU and RSS count as gputui's own (default: this one).
            clock: Gives ``taken_at``.
        """
        self._clock = clock
        self._process = process if process is not None else psutil.Process()
        self._linux = LinuxCounters(psutil.PROCFS_PATH, self._process.pid) if _LINUX else None
        self._model_name = read_cpu_model_name()
        self._physical_cores = psutil.cpu_count(logical=False)
        self._has_load_average = hasattr(psutil, "getloadavg")
        self._frequency_max_mhz: float | None = None
        self._has_frequency = True
        frequency = self._read_frequency()
        if frequency is None:
            self._has_frequency = False  # probed once; stop asking
        elif frequency.max:
            self._frequency_max_mhz = float(frequency.max)
        self._last_cores = self._cores()
        self._logical_cores = psutil.cpu_count(logical=True) or len(self._last_cores)
        own = self._own()
        self._last_own = (None if own is None else own[0], time.monotonic())
        self._last_at = time.monotonic()

    def never_blocks(self) -> bool:
        """A sample reads kernel counters (``/proc``, ``/sys``) and asks no driver or device,
        so it cannot block, unless it must first wait out ``SHORTEST_SPAN_S``: the pollers
        then take it on their own thread, not a thread of its own (one wake fewer a beat)."""
        return time.monotonic() - self._last_at >= SHORTEST_SPAN_S

    def sample(self) -> CpuReading:
        """Take one sample: utilization since the previous call, and the current values;
        blocks for up to ``SHORTEST_SPAN_S`` when the previous sample was that recent."""
        wait_s = self._last_at + SHORTEST_SPAN_S - time.monotonic()
        if wait_s > 0:
            time.sleep(wait_s)
        self._last_at = time.monotonic()
        cores = self._cores()
        before = self._last_cores
        if len(cores) == len(before):
            per_core = tuple(_busy_percent(b, a) for b, a in zip(before, cores, strict=True))
            total = _busy_percent(_summed(before), _summed(cores))
        else:  # a core went on- or offline: start over from here
            per_core, total = tuple(0.0 for _ in cores), 0.0
        self._last_cores = cores

        memory_used, memory_total, swap_used, swap_total = self._memory()
        frequency = self._frequency_mhz() if self._has_frequency else None
        self_cpu, self_rss = self._own_usage()
        return CpuReading(
            utilization_percent=total,
            per_core_percent=per_core,
            logical_cores=self._logical_cores,
            physical_cores=self._physical_cores,
            model_name=self._model_name,
            load_average=self._load_average(),
            frequency_mhz=frequency or None,
            frequency_max_mhz=self._frequency_max_mhz,
            memory_used_bytes=memory_used,
            memory_total_bytes=memory_total,
            swap_used_bytes=swap_used,
            swap_total_bytes=swap_total,
            self_cpu_percent=self_cpu,
            self_rss_bytes=self_rss,
            taken_at=self._clock(),
        )

    def close(self) -> None:
        """Close the files kept open between samples (so does the garbage collector)."""
        if self._linux is not None:
            self._linux.close()

    def _cores(self) -> list[tuple[float, float]]:
        """Each CPU's total and idle seconds."""
        cores = self._linux.cores() if self._linux is not None else None
        if cores is None:
            cores = [_total_and_idle(times) for times in psutil.cpu_times(percpu=True)]
        return cores

    def _frequency_mhz(self) -> float | None:
        if self._linux is not None:
            return self._linux.frequency_mhz(time.monotonic())
        frequency = self._read_frequency()
        return float(frequency.current) if frequency and frequency.current else None

    def _read_frequency(self) -> Any:
        try:
            return psutil.cpu_freq()
        except (OSError, NotImplementedError, AttributeError, RuntimeError):
            return None

    def _memory(self) -> tuple[int, int, int, int]:
        """Memory used and total, swap used and total, in bytes: on Linux from one read of
        ``/proc/meminfo``, where psutil reads it once for each and ``/proc/vmstat`` besides
        (for swap-in counts not shown); psutil's where a line is missing (an old kernel)."""
        found = self._linux.memory() if self._linux is not None else None
        if found is None:
            memory = psutil.virtual_memory()
            return (int(memory.total - memory.available), int(memory.total), *self._swap())
        return found

    def _swap(self) -> tuple[int, int]:
        try:
            swap = psutil.swap_memory()
        except (OSError, RuntimeError):  # some containers hide it: count it as none
            return 0, 0
        return int(swap.used), int(swap.total)

    def _load_average(self) -> tuple[float, float, float] | None:
        if not self._has_load_average:
            return None
        try:
            one, five, fifteen = psutil.getloadavg()
        except (OSError, RuntimeError):
            return None
        return (float(one), float(five), float(fifteen))

    def _own(self) -> tuple[float, int | None] | None:
        """gputui's CPU seconds (user and system) and RSS; ``None`` where it cannot be read."""
        if self._linux is not None:
            return self._linux.process()
        try:
            with self._process.oneshot():
                times = self._process.cpu_times()
                return float(times.user + times.system), int(self._process.memory_info().rss)
        except psutil.Error:
            return None

    def _own_usage(self) -> tuple[float | None, int | None]:
        """gputui's CPU (percent of one core, since the previous sample) and RSS."""
        found = self._own()
        if found is None:
            return None, None
        cpu_s, rss = found
        now = time.monotonic()
        last_cpu_s, last_at = self._last_own
        self._last_own = (cpu_s, now)
        if last_cpu_s is None or now <= last_at:
            return None, rss
        return max(0.0, 100.0 * (cpu_s - last_cpu_s) / (now - last_at)), rss
