"""The host, from psutil: CPUs, memory, swap, and gputui's own footprint.

Static facts (core counts, model name, maximum frequency) are read once, when the
sampler is built; each ``sample()`` reads only what changes, a handful of small
``/proc`` files on Linux.
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
from gputui.telemetry.readings import CpuReading

SHORTEST_SPAN_S = 0.1
"""The least time a sample covers; one asked for sooner waits out the rest (the first, in
practice). The kernel counts CPU time in ticks of 10 ms (``USER_HZ``), so over a millisecond
a core reads 0% or 100% and gputui's own use 0% or over 1000%; over 0.1 s one tick is
10% of a core."""

_CPUINFO_MODEL_KEYS = ("model name", "Model", "Hardware", "cpu model", "cpu", "Processor")
"""``/proc/cpuinfo`` keys that name the processor, by architecture, most telling first."""


def parse_cpuinfo_model(text: str) -> str | None:
    """The processor's model name from the text of ``/proc/cpuinfo``.

    Args:
        text: The file's contents.

    Returns:
        The first non-empty value among the keys that name the processor on x86
        (``model name``), ARM boards (``Model``, ``Hardware``), MIPS and POWER
        (``cpu model``, ``cpu``); ``None`` when there is none.
    """
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
    """The processor's model name, as the platform tells; ``None`` when it does not.

    Reads ``/proc/cpuinfo`` on Linux, asks ``sysctl`` on macOS, and falls back to
    ``platform.processor()`` elsewhere. Call it once: it may start a process.
    """
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


def _meminfo(path: Path) -> dict[bytes, int]:
    """``/proc/meminfo``'s lines, in bytes, by their name with its colon; none where it
    cannot be read."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    found = {}
    for line in data.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[1].isdigit():
            found[fields[0]] = int(fields[1]) * 1024  # kB (the few counts too; none is used)
    return found


def _summed(cores: Sequence[tuple[float, float]]) -> tuple[float, float]:
    return sum(total for total, _ in cores), sum(idle for _, idle in cores)


def _busy_percent(before: tuple[float, float], after: tuple[float, float]) -> float:
    total = after[0] - before[0]
    idle = after[1] - before[1]
    if total <= 0:
        return 0.0
    return min(100.0, max(0.0, 100.0 * (total - idle) / total))


class HostSampler:
    """Samples the host; each ``sample()`` covers the time since the previous one.

    The constructor takes the first, priming sample; a ``sample()`` that comes less
    than ``SHORTEST_SPAN_S`` after it (or after the previous sample) waits out the
    rest, so the first reading is never a near-empty span's 0% or 1600%. Not
    thread-safe: use one sampler from one thread.
    """

    def __init__(
        self,
        *,
        process: psutil.Process | None = None,
        clock: Callable[[], float] = time.monotonic,
        cpu_model_name: str | None = None,
    ) -> None:
        """Read the static facts and prime the utilization counters.

        Args:
            process: The process whose CPU and RSS count as gputui's own
                (default: this one).
            clock: Gives ``taken_at``; ``time.monotonic`` unless a test injects one.
            cpu_model_name: Overrides the model name read from the platform.
        """
        self._clock = clock
        self._process = process if process is not None else psutil.Process()
        self._model_name = cpu_model_name if cpu_model_name is not None else read_cpu_model_name()
        self._physical_cores = psutil.cpu_count(logical=False)
        self._has_load_average = hasattr(psutil, "getloadavg")
        self._frequency_max_mhz: float | None = None
        self._has_frequency = True
        frequency = self._read_frequency()
        if frequency is None:
            self._has_frequency = False  # probed once; stop asking
        elif frequency.max:
            self._frequency_max_mhz = float(frequency.max)
        self._last_cores = [_total_and_idle(times) for times in psutil.cpu_times(percpu=True)]
        self._logical_cores = psutil.cpu_count(logical=True) or len(self._last_cores)
        self._last_own = (self._own_cpu_seconds(), time.monotonic())
        self._last_at = time.monotonic()

    def never_blocks(self) -> bool:
        """A sample reads kernel counters (``/proc``, ``/sys``) and asks no driver or device,
        so it cannot block, unless it must first wait out ``SHORTEST_SPAN_S``: the pollers
        then take it on their own thread, not a thread of its own (one wake fewer a beat)."""
        return time.monotonic() - self._last_at >= SHORTEST_SPAN_S

    def sample(self) -> CpuReading:
        """Take one sample: utilization since the previous call, and the current values.

        Blocks for up to ``SHORTEST_SPAN_S`` when the previous sample was that recent.
        """
        wait_s = self._last_at + SHORTEST_SPAN_S - time.monotonic()
        if wait_s > 0:
            time.sleep(wait_s)
        self._last_at = time.monotonic()
        cores = [_total_and_idle(times) for times in psutil.cpu_times(percpu=True)]
        before = self._last_cores
        if len(cores) == len(before):
            per_core = tuple(_busy_percent(b, a) for b, a in zip(before, cores, strict=True))
            total = _busy_percent(_summed(before), _summed(cores))
        else:  # a core went on- or offline: start over from here
            per_core, total = tuple(0.0 for _ in cores), 0.0
        self._last_cores = cores

        memory_used, memory_total, swap_used, swap_total = self._memory()
        frequency = self._read_frequency() if self._has_frequency else None
        self_cpu, self_rss = self._own_usage()
        return CpuReading(
            utilization_percent=total,
            per_core_percent=per_core,
            logical_cores=self._logical_cores,
            physical_cores=self._physical_cores,
            model_name=self._model_name,
            load_average=self._load_average(),
            frequency_mhz=float(frequency.current) if frequency and frequency.current else None,
            frequency_max_mhz=self._frequency_max_mhz,
            memory_used_bytes=memory_used,
            memory_total_bytes=memory_total,
            swap_used_bytes=swap_used,
            swap_total_bytes=swap_total,
            self_cpu_percent=self_cpu,
            self_rss_bytes=self_rss,
            taken_at=self._clock(),
        )

    def _read_frequency(self) -> Any:
        try:
            return psutil.cpu_freq()
        except (OSError, NotImplementedError, AttributeError, RuntimeError):
            return None

    def _memory(self) -> tuple[int, int, int, int]:
        """Memory used and total, swap used and total, in bytes: on Linux from one read of
        ``/proc/meminfo``, where psutil reads it once for each and ``/proc/vmstat`` besides
        (for swap-in counts not shown); psutil's where a line is missing (an old kernel)."""
        meminfo = _meminfo(Path(psutil.PROCFS_PATH) / "meminfo") if _LINUX else {}
        try:
            total, available = meminfo[b"MemTotal:"], meminfo[b"MemAvailable:"]
            swap_total, swap_free = meminfo[b"SwapTotal:"], meminfo[b"SwapFree:"]
        except KeyError:
            memory = psutil.virtual_memory()
            return (int(memory.total - memory.available), int(memory.total), *self._swap())
        return total - available, total, swap_total - swap_free, swap_total

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

    def _own_cpu_seconds(self) -> float | None:
        try:
            times = self._process.cpu_times()
        except psutil.Error:
            return None
        return float(times.user + times.system)

    def _own_usage(self) -> tuple[float | None, int | None]:
        """gputui's CPU (percent of one core, since the previous sample) and RSS."""
        try:
            with self._process.oneshot():
                cpu_s = float(sum(self._process.cpu_times()[:2]))  # user + system
                rss = int(self._process.memory_info().rss)
        except psutil.Error:
            return None, None
        now = time.monotonic()
        last_cpu_s, last_at = self._last_own
        self._last_own = (cpu_s, now)
        if last_cpu_s is None or now <= last_at:
            return None, rss
        return max(0.0, 100.0 * (cpu_s - last_cpu_s) / (now - last_at)), rss
