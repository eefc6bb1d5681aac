"""The processes NVML lists on a GPU, and who runs each: psutil's user and command line, or,
in a pid namespace of our own, those of the local process a host pid is proven to be; with
the host CPU and memory each uses, how long ago it started, and the container, pod, Slurm job
and systemd unit it runs in (:mod:`gputui.telemetry.workload`)."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import psutil

from gputui.telemetry.commandline import command_line
from gputui.telemetry.devnodes import match_host_pids, node_mappers
from gputui.telemetry.nvml.queries import Queries, TrackedGpu
from gputui.telemetry.procstat import read_stat, resident_bytes
from gputui.telemetry.readings import NO_WORKLOAD, GpuProcess, GpuReading, Workload
from gputui.telemetry.workload import WorkloadReader

MATCH_TTL_S = 5.0
"""How often, in a pid namespace of our own, the local processes' memory maps are read
again to match NVML's host pids (:mod:`gputui.telemetry.devnodes`)."""
PROCESS_SAMPLES_WINDOW_US = 1_000_000
"""How far before the newest per-process utilization sample the next ask starts (µs): the
driver samples a busy process every so often, so asking only for what is newer than the last
answer would read a busy process as 0 % whenever a sample falls between two asks."""
_VALUE_NOT_AVAILABLE = 2**64 - 1

_INITIAL_PID_NAMESPACE = 0xEFFFFFFC
"""The inode of the host's (initial) pid namespace, PROC_PID_INIT_INO in the Linux kernel."""


def in_own_pid_namespace(path: str = "/proc/self/ns/pid") -> bool:
    """Whether this process runs in a pid namespace other than the host's (a container
    without ``--pid=host``), where NVML's pids, the host's, name other local processes;
    ``False`` where it cannot be told."""
    try:
        return os.stat(path).st_ino != _INITIAL_PID_NAMESPACE
    except OSError:
        return False


_LINUX = sys.platform.startswith("linux")


@dataclass(frozen=True, slots=True)
class _Figures:
    """What one look at a process says: when it started and the CPU time it has used."""

    started: float
    """On Linux ``stat``'s start time (clock ticks), elsewhere psutil's ``create_time``:
    with the pid, it names the process."""
    cpu_s: float
    """CPU seconds used (user and system)."""
    process: psutil.Process | None = None
    """psutil's process, off Linux, for its memory."""


def _figures(pid: int) -> _Figures | None:
    """A look at ``pid``: on Linux one read of its ``stat``, elsewhere psutil's; ``None``
    when it has gone or cannot be read."""
    if _LINUX:
        stat = read_stat(f"{psutil.PROCFS_PATH}/{pid}")
        return None if stat is None else _Figures(stat.start_ticks, stat.cpu_s)
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            times = process.cpu_times()
            return _Figures(process.create_time(), times.user + times.system, process)
    except (psutil.Error, OSError, ValueError):
        return None


def _resident_bytes(pid: int, figures: _Figures) -> int | None:
    """The process's resident memory: ``statm`` on Linux, psutil's elsewhere."""
    if figures.process is None:
        return resident_bytes(f"{psutil.PROCFS_PATH}/{pid}")
    try:
        return int(figures.process.memory_info().rss)
    except (psutil.Error, OSError):
        return None


@dataclass(slots=True)
class _Identity:
    """Who runs a process, cached until the PID is reused (its start time changes), with
    its latest look (:class:`_Figures`) and the CPU time its CPU percent counts from."""

    create_time: float | None
    user: str | None
    command: str | None
    started: float | None = None
    """:attr:`_Figures.started` when it was looked up: the pid's process is this one while
    a look at the pid says the same."""
    figures: _Figures | None = None
    """Its latest look: this sample's, for a process some GPU lists in it."""
    looked_at: float = 0.0
    """When :attr:`figures` was taken (``time.monotonic()``)."""
    pid: int | None = None
    """Its pid, where it was looked at (local: in a pid namespace of our own, not NVML's)."""
    counted: tuple[float, float] | None = None
    """The CPU seconds and the time of the last CPU percent; ``None`` before the first
    (which has nothing to count from)."""


_UNKNOWN = _Identity(None, None, None)
"""A process psutil cannot see (or a host pid: not ours to look up)."""


class ProcessAttribution:
    """Lists a GPU's processes and says who runs each, caching what psutil said per (pid,
    start time); not thread-safe (the sampler's lock holds)."""

    def __init__(self, *, raw_commands: bool) -> None:
        """Start with nothing known; ``raw_commands``: keep the secrets in processes' command
        lines."""
        self.host_pids = False
        """Whether NVML's pids are the host's, not ours (a pid namespace of our own)."""
        self._raw_commands = raw_commands
        self._identities: dict[int, _Identity] = {}
        self._matched_at: float | None = None
        self._local_pids: dict[int, int] = {}  # host pid -> local pid (in a pid namespace)
        self._workloads = WorkloadReader()
        self._sample_started = math.inf  # every look is afresh until the first sample starts
        self._now = 0.0
        self._used: dict[int, tuple[float | None, int | None]] = {}
        self._read: set[int] = set()

    def new_sample(self) -> None:
        """A sample starts: a process's ``stat`` is read again, once however many GPUs list
        it (a process on every GPU, as a job of one process over 8 GPUs, or each rank's
        context on GPU 0), and so is its host use."""
        self._sample_started = time.monotonic()
        self._now = time.time()
        self._used = {}
        self._read = set()

    def read(self, queries: Queries, gpu: TrackedGpu) -> tuple[GpuProcess, ...] | None:
        """Compute, then graphics processes (a PID in both is listed once, as compute), each
        with its SM utilization, and where NVML's pids are ours, its details (see
        :meth:`with_details`); ``None`` when NVML could not list the compute processes
        (unknown, not none)."""
        compute = queries.ask(gpu, "compute_processes")
        if compute is None:
            return None
        listed = _listed(compute, queries.ask(gpu, "graphics_processes") or ())
        sm = _read_process_sm(queries, gpu) if listed else None
        return self._processes(listed, sm, detailed=not self.host_pids)

    def of_mig(self, infos: Any) -> tuple[GpuProcess, ...]:
        """A MIG device's processes from NVML's infos (no SM utilization per process there)."""
        return self._processes(_listed(infos, ()), None, detailed=False)

    def match_local(
        self, readings: tuple[GpuReading, ...], gpus: Sequence[TrackedGpu], now: float
    ) -> tuple[GpuReading, ...]:
        """In a pid namespace of our own: each host pid proven to be a local process
        (:mod:`gputui.telemetry.devnodes`) gets that process's pid, user and command; ``gpus``
        as the sampler keeps them (their device nodes' numbers), ``now`` its clock."""
        if self._matched_at is None or now - self._matched_at >= MATCH_TTL_S:
            self._matched_at = now
            minors = {gpu.index: gpu.minor for gpu in gpus if gpu.minor is not None}
            listed = {
                minors[reading.index]: [process.pid for process in reading.processes]
                for reading in readings
                if reading.index in minors and reading.processes is not None
            }
            mappers = node_mappers(exclude=(os.getpid(),)) if listed else {}
            self._local_pids = match_host_pids(listed, mappers)
        if not self._local_pids:
            return readings
        return tuple(self._with_local(reading) for reading in readings)

    def with_details(self, readings: tuple[GpuReading, ...]) -> tuple[GpuReading, ...]:
        """Each process with the host CPU and memory it uses (read once a sample however many
        GPUs list it), the time since it started and what it runs in (kept until no GPU lists
        it), MIG devices' too, at the end of a sample: a reading is copied once. Where NVML's
        pids are ours, :meth:`read` gave its processes these already."""
        detailed = []
        for reading in readings:
            changes: dict[str, Any] = {}
            if reading.processes and self.host_pids:  # after match_local: local pids known
                changes["processes"] = tuple(
                    self._detailed(process) for process in reading.processes
                )
            if reading.mig_devices:
                changes["mig_devices"] = tuple(
                    replace(
                        device,
                        processes=tuple(
                            self._with_workload(process) for process in device.processes
                        ),
                    )
                    if device.processes
                    else device
                    for device in reading.mig_devices
                )
            detailed.append(replace(reading, **changes) if changes else reading)
        self._workloads.forget(self._read)
        return tuple(detailed)

    def _detailed(self, process: GpuProcess) -> GpuProcess:
        """``process`` (a host pid, matched or not to a local one) with its details."""
        cpu, rss, elapsed, workload = self._details(
            process.pid, process.local_pid, process.create_time
        )
        return replace(
            process, cpu_percent=cpu, rss_bytes=rss, elapsed_s=elapsed, workload=workload
        )

    def _details(
        self, pid: int, local_pid: int | None, create_time: float | None
    ) -> tuple[float | None, int | None, float | None, Workload]:
        """A process's host CPU % and memory (this sample's, read once per local pid; none
        for a host pid, nor where the cached process is not the one shown), the time since
        it started, and what it runs in (:meth:`_workload`)."""
        if local_pid is not None and local_pid not in self._used:
            cached = self._identities.get(local_pid, _UNKNOWN)
            shown = cached.create_time is not None and cached.create_time == create_time
            self._used[local_pid] = _host_use(cached) if shown else (None, None)
        cpu, rss = (None, None) if local_pid is None else self._used[local_pid]
        elapsed = None if create_time is None else max(self._now - create_time, 0.0)
        return cpu, rss, elapsed, self._workload(pid, local_pid, create_time)

    def _with_workload(self, process: GpuProcess) -> GpuProcess:
        """``process`` with what it runs in (a MIG device's)."""
        workload = self._workload(process.pid, process.local_pid, process.create_time)
        return process if workload is NO_WORKLOAD else replace(process, workload=workload)

    def _workload(self, pid: int, local_pid: int | None, create_time: float | None) -> Workload:
        """What the process runs in, its pid kept for this sample (the others' are
        forgotten). NVML's pid is the host's: it is read as it is where the procfs is ours
        (no pid namespace of our own) or named as the host's (``GPUTUI_PROCFS``); else the
        local process it is proven to be, if any."""
        named = self._workloads.host_procfs
        read = local_pid if self.host_pids and not named else pid
        if read is None:
            return NO_WORKLOAD
        self._read.add(read)
        return self._workloads.read(read, create_time if read == local_pid else None)

    def forget(self, readings: Sequence[GpuReading]) -> None:
        """Drop cached identities of processes no GPU lists any more."""
        if not self._identities:
            return
        alive = {
            process.local_pid or process.pid
            for reading in readings
            for process in reading.processes or ()
        }
        for pid in self._identities.keys() - alive:
            del self._identities[pid]

    def _processes(
        self,
        listed: dict[int, tuple[str, Any]],
        sm: dict[int, float | None] | None,
        *,
        detailed: bool,
    ) -> tuple[GpuProcess, ...]:
        """The processes NVML listed (``_listed``), each joined with what psutil knows of it
        and its SM utilization (``None`` for all where ``sm`` is); ``detailed``: with its host
        use, elapsed time and workload (:meth:`_details`)."""
        found = []
        for pid, (kind, used) in listed.items():
            # a host pid seen from a pid namespace of our own is not the local one by that number
            identity = _UNKNOWN if self.host_pids else self._look_up(pid)
            memory = None if used is None or used >= _VALUE_NOT_AVAILABLE else int(used)
            local_pid = None if self.host_pids else pid
            cpu = rss = elapsed = None
            workload = NO_WORKLOAD
            if detailed:
                cpu, rss, elapsed, workload = self._details(pid, local_pid, identity.create_time)
            found.append(
                GpuProcess(
                    pid,
                    identity.user,
                    identity.command,
                    memory,
                    kind,
                    create_time=identity.create_time,
                    local_pid=local_pid,
                    sm_utilization_percent=None if sm is None else sm.get(pid, 0.0),
                    cpu_percent=cpu,
                    rss_bytes=rss,
                    elapsed_s=elapsed,
                    workload=workload,
                )
            )
        return tuple(found)

    def _with_local(self, gpu: GpuReading) -> GpuReading:
        if not gpu.processes:
            return gpu
        processes = []
        for process in gpu.processes:
            local = self._local_pids.get(process.pid)
            if local is not None:
                identity = self._look_up(local)
                process = replace(
                    process,
                    user=identity.user,
                    command=identity.command,
                    create_time=identity.create_time,
                    local_pid=local if identity.create_time is not None else None,
                )
            processes.append(process)
        return replace(gpu, processes=tuple(processes))

    def _look_up(self, pid: int) -> _Identity:
        """Start time, user and command of the local process ``pid``, cached while a look at
        it gives the same start time (on Linux one read of its ``stat`` a sample, which also
        gives its CPU time for :func:`_host_use`); psutil is asked its user and command only
        for a process not seen yet."""
        cached = self._identities.get(pid)
        if cached is not None and cached.pid == pid and cached.looked_at >= self._sample_started:
            return cached  # looked at this sample already, for another GPU
        figures = _figures(pid)
        if figures is None:
            return _UNKNOWN
        if cached is None or cached.started != figures.started:
            try:
                process = psutil.Process(pid)
                created = process.create_time()
            except (psutil.Error, ValueError, OSError):
                return _UNKNOWN
            command = _command(process, raw=self._raw_commands)
            cached = _Identity(created, _username(process), command, figures.started)
            self._identities[pid] = cached
        cached.figures, cached.looked_at, cached.pid = figures, time.monotonic(), pid
        return cached


def _read_process_sm(queries: Queries, gpu: TrackedGpu) -> dict[int, float | None] | None:
    """Each sampled process's SM utilization (its newest sample), from one ask for the
    samples since ``gpu.process_samples_since_us``; ``None`` when NVML does not say. (A
    process with no sample in the window ran no kernel in it: the caller reads it as 0.)"""
    samples = queries.ask(gpu, "process_utilization", gpu.process_samples_since_us, not_found=())
    if samples is None:
        return None
    newest: dict[int, Any] = {}
    for sample in samples:
        pid = int(sample.pid)
        if pid not in newest or sample.timeStamp >= newest[pid].timeStamp:
            newest[pid] = sample
    if newest:
        latest = max(int(sample.timeStamp) for sample in newest.values())
        gpu.process_samples_since_us = max(latest - PROCESS_SAMPLES_WINDOW_US, 0)
    return {
        pid: float(sample.smUtil) if 0 <= sample.smUtil <= 100 else None
        for pid, sample in newest.items()
    }


def _host_use(identity: _Identity) -> tuple[float | None, int | None]:
    """The process's CPU percent since the previous call (``None`` on the first; of one core,
    as psutil's ``cpu_percent`` and ``top``), from the look its look-up took this sample,
    and its resident memory; ``None`` for both where it could not be looked at (gone,
    hidden)."""
    figures, at = identity.figures, identity.looked_at
    if figures is None or identity.pid is None:
        return None, None
    cpu = None
    counted = identity.counted
    if counted is not None and at > counted[1]:
        cpu = max(figures.cpu_s - counted[0], 0.0) / (at - counted[1]) * 100.0
    if counted is None or at > counted[1]:
        identity.counted = (figures.cpu_s, at)
    return cpu, _resident_bytes(identity.pid, figures)


def _listed(compute: Any, graphics: Any) -> dict[int, tuple[str, Any]]:
    """NVML's process infos by pid, with their kind and memory (the driver's figure): a pid
    in both lists is listed once, as ``compute+graphics`` with its compute memory."""
    listed: dict[int, tuple[str, Any]] = {}
    for info in compute:
        listed.setdefault(int(info.pid), ("compute", info.usedGpuMemory))
    for info in graphics:
        kind, used = listed.get(int(info.pid), ("graphics", info.usedGpuMemory))
        listed[int(info.pid)] = ("compute+graphics" if kind == "compute" else kind, used)
    return listed


def _username(process: psutil.Process) -> str | None:
    try:
        return process.username()
    except (psutil.Error, OSError, KeyError):
        return None


def _command(process: psutil.Process, *, raw: bool) -> str | None:
    try:
        argv = process.cmdline()
    except (psutil.Error, OSError):
        argv = []
    if argv:
        return command_line(argv, raw=raw)
    try:
        return process.name() or None
    except (psutil.Error, OSError):
        return None
