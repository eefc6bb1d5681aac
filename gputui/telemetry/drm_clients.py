"""The processes on AMD and Intel GPUs, from the DRM client usage statistics in fdinfo (the
kernel's Documentation/gpu/drm-usage-stats.rst).

Over 600 lines: the parser, the sweep (whose caching keeps a steady sweep to a few opens)
and the per-client arithmetic are one reader of one kernel interface, best read together.

Each open file of a DRM node (``/dev/dri/card*``, ``renderD*``) is a client of one GPU, known
by (``drm-pdev``, ``drm-client-id``) however many fds show it (``dup``, a forked child); it
is counted for the earliest-started process holding it. Per process and GPU:

- **Engine busy** (``sm_utilization_percent``): each engine's busy time (``drm-engine-``, ns;
  xe's ``drm-cycles-`` over ``drm-total-cycles-``) between two samples over the time between
  them, over ``drm-engine-capacity-``; the busiest engine, its clients added up, at most 100.
  ``None`` on a client's first sample and for one that reports no engine (amdgpu prints only
  engines that ran, and does not count ROCm's ``/dev/kfd`` queues: ``n/a``, not 0).
- **Memory** (``gpu_memory_bytes``): per region, the resident size (``drm-resident-``, or
  amdgpu's older ``drm-memory-``), else ``drm-total-``: device memory (``vram``, ``vram0``,
  i915's ``local0``) where a client reports it; elsewhere, and on an APU (a small VRAM
  carve-out, its models in GTT), the system memory the GPU maps (all but TTM's unmapped
  region: amdgpu's ``cpu``, xe's ``system``).
- **Kind**: ``graphics`` for a process whose clients ran only a graphics engine, else
  ``compute``.

Clients without ``drm-pdev`` (platform GPUs, not on PCI) are passed over. Linux only.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gputui.telemetry.commandline import command_line
from gputui.telemetry.procstat import CLOCK_TICKS, parse_stat, read_head, read_stat
from gputui.telemetry.readings import GpuProcess
from gputui.telemetry.sysfs import procfs_root

log = logging.getLogger(__name__)

RESCAN_EVERY = 10
"""Sweeps between two listings of a process's fds where the procfs does not count them
(Linux before 6.2): how late a process that opens a GPU long after it started may show."""
RESCAN_EVERY_COUNTED = 60
"""The same where it counts them: a new count lists them at once, so this only finds an fd
closed and a DRM node opened in its place between two sweeps. Where fds are not counted, the
sweeps between two listings that read every fd's link again (see ``DrmClientSampler``)."""
FDINFO_LIMIT = 64 * 1024
"""The most read of one fdinfo (a DRM client's is under 2 KiB)."""

ClientKey = tuple[str, int]
"""A client as the kernel counts it: (PCI bus id, ``drm-client-id``)."""

_DRM_NODE = re.compile(r"(?:^|/)dev/dri/(?:renderD|card)\d+\Z")
"""An fd's link target that is a DRM node (the suffix, so that a test tree's own works)."""
_PCI_BUS_ID = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_DEVICE_REGION = re.compile(r"(?:vram|local)\d*")
"""Regions of the GPU's own memory: amdgpu's ``vram``, xe's ``vram0``, i915's ``local0``."""
_UNMAPPED_REGIONS = {"amdgpu": frozenset({"cpu"}), "xe": frozenset({"system"})}
"""Per driver, the system memory regions the GPU has no mapping for (TTM's system placement)."""
_GRAPHICS_ENGINES = frozenset({"gfx", "render", "rcs"})
_COMPUTE_ENGINES = frozenset({"compute", "ccs"})

_IDENTITY_KEY = re.compile(r"drm-(driver|pdev|client-id):[ \t]*(.*?)[ \t]*$", re.M)
"""An identity key and its value; a key only at a line's start (blanks before it allowed),
which the caller checks: a pattern that starts with its literal is searched for fast."""
_COUNTER_LINE = re.compile(
    r"^[ \t]*drm-(engine-capacity|engine|total-cycles|cycles|resident|memory|total)-"
    r"([^:\s]+):[ \t]*(\d+)(?:[ \t]+(\S+))?[ \t]*$",
    re.M,
)
"""A counter's line: its kind, name, number and unit (alternatives longest first, so that
``drm-engine-capacity-vcs`` is no engine and ``drm-total-cycles-rcs`` no memory region)."""
_BYTES = {"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_COUNTER_UNITS = {
    "engine-capacity": {"": 1},
    "engine": {"": 1, "ns": 1},
    "total-cycles": {"": 1},
    "cycles": {"": 1},
    "resident": _BYTES,
    "memory": _BYTES,
    "total": _BYTES,
}
"""Each kind of counter's units, and what each is in base units (ns, cycles, bytes)."""

_PF_KTHREAD = 0x00200000
"""``stat``'s flag of a kernel thread (include/linux/sched.h)."""


@dataclass(frozen=True, slots=True)
class DrmClient:
    """One DRM client, as its fdinfo describes it."""

    driver: str
    """``drm-driver``: ``amdgpu``, ``i915``, ``xe``..."""
    pci_bus_id: str
    """``drm-pdev``, lowercase: ``0000:03:00.0``."""
    client_id: int
    """``drm-client-id``."""
    engine_ns: dict[str, int]
    """``drm-engine-<name>``: busy nanoseconds per engine, since the client opened."""
    cycles: dict[str, int]
    """``drm-cycles-<name>``: busy GPU cycles per engine class (xe)."""
    total_cycles: dict[str, int]
    """``drm-total-cycles-<name>``: the GPU's cycle count, the base of ``cycles``."""
    capacity: dict[str, int]
    """``drm-engine-capacity-<name>``: engines of that class (1 where not told)."""
    memory_bytes: dict[str, int]
    """Per region, the resident size (``drm-resident-``/``drm-memory-``), else the total."""


def parse_fdinfo(text: str) -> DrmClient | None:
    """The DRM client an fdinfo describes; ``None`` when it is not one (no ``drm-driver``,
    ``drm-pdev`` or ``drm-client-id``). Lines that are not ``key: value`` in the
    documented form are skipped."""
    driver: str | None = None
    pci_bus_id: str | None = None
    client_id: int | None = None
    for match in _IDENTITY_KEY.finditer(text):
        start = match.start()
        if text[text.rfind("\n", 0, start) + 1 : start].strip(" \t"):
            continue  # within a line, not at its start
        key, value = match.groups()
        if key == "driver":
            driver = value or driver
        elif key == "pdev":
            value = value.lower()
            pci_bus_id = value if _PCI_BUS_ID.fullmatch(value) else pci_bus_id
        elif value.isascii() and value.isdigit():
            client_id = int(value)
    if driver is None or pci_bus_id is None or client_id is None:
        return None
    counters: dict[str, dict[str, int]] = {kind: {} for kind in _COUNTER_UNITS}
    for kind, name, digits, unit in _COUNTER_LINE.findall(text):
        scale = _COUNTER_UNITS[kind].get(unit)
        if scale is not None and digits.isascii():
            counters[kind][name] = int(digits) * scale
    return DrmClient(
        driver,
        pci_bus_id,
        client_id,
        counters["engine"],
        counters["cycles"],
        counters["total-cycles"],
        {name: count for name, count in counters["engine-capacity"].items() if count > 0},
        {**counters["total"], **counters["memory"], **counters["resident"]},
    )


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """Who runs a process, read from a procfs as psutil reads it (so that the start time
    matches what ``gputui.telemetry.signals`` checks before a signal)."""

    create_time: float | None
    """Start, seconds since the epoch: ``stat``'s start ticks over the clock rate, plus
    the boot time (psutil's ``create_time``)."""
    user: str | None
    """The real uid's name, or the uid itself where it has none (psutil's ``username``)."""
    command: str | None
    """The command line, secrets redacted (:mod:`gputui.telemetry.commandline`), else its
    name (``comm``)."""


def read_process_identity(
    procfs: str | os.PathLike[str], pid: int, *, raw_commands: bool = False
) -> ProcessIdentity | None:
    """The start time, user and command of process ``pid`` in ``procfs`` (a part that cannot
    be read is ``None``); ``None`` when it has gone (no ``stat``). ``raw_commands``: keep the
    secrets in its command line."""
    base = f"{os.fspath(procfs)}/{pid}"
    text = _read_text(f"{base}/stat")
    if text is None:
        return None
    create_time = None
    stat = parse_stat(text)
    boot = _boot_time(os.fspath(procfs)) if stat is not None else None
    if stat is not None and boot is not None:
        create_time = float(stat.start_ticks) / CLOCK_TICKS + boot  # psutil's arithmetic
    return ProcessIdentity(
        create_time, _user(_read_text(f"{base}/status")), _command(base, raw=raw_commands)
    )


def _boot_time(procfs: str) -> float | None:
    for line in (_read_text(f"{procfs}/stat") or "").splitlines():
        if line.startswith("btime"):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def _user(status: str | None) -> str | None:
    r"""The name of the real uid in ``/proc/PID/status``, else the uid (psutil's rule).

    Lines end at ``\n`` alone: the process's own name comes first, and may hold ``\x1c`` or
    U+2028 (``splitlines()`` would take ``x\x1cUid: 0`` for a line of its own)."""
    for line in (status or "").split("\n"):
        if line.startswith("Uid:"):
            fields = line.split()
            if len(fields) < 2 or not fields[1].isdigit():
                return None
            try:
                import pwd  # not on Windows, where no procfs is read

                return pwd.getpwuid(int(fields[1])).pw_name
            except (ImportError, KeyError):
                return fields[1]
    return None


def _command(base: str, *, raw: bool) -> str | None:
    argv = (_read_text(f"{base}/cmdline") or "").split("\0")
    while argv and not argv[-1]:
        argv.pop()
    if argv:
        return command_line(argv, raw=raw)
    return (_read_text(f"{base}/comm") or "").strip() or None


def _read_text(path: str) -> str | None:
    """The file's text (:func:`~gputui.telemetry.procstat.read_head`, ``FDINFO_LIMIT`` bytes);
    ``None`` when it cannot be read. Every file the sampler opens, it opens here."""
    data = read_head(path, FDINFO_LIMIT)
    return None if data is None else data.decode("utf-8", errors="replace")


def _scan_dir(path: str) -> list[tuple[str, int]] | None:
    """A directory's entries and their inode numbers; ``None`` when it cannot be listed."""
    try:
        with os.scandir(path) as entries:
            return [(entry.name, entry.inode()) for entry in entries]
    except OSError:
        return None


def _list_fds(fd_dir: str, known: frozenset[str]) -> tuple[frozenset[str], list[str]] | None:
    """An fd folder's fds, and those of them not in ``known`` whose link is a DRM node (the
    links of ``known`` fds are not read); ``None`` when it cannot be listed."""
    try:
        names = frozenset(os.listdir(fd_dir))
    except OSError:
        return None
    drm = []
    for name in names - known:
        target = _link(f"{fd_dir}/{name}")  # "": closed since the listing
        if "dev/dri/" in target and name.isdigit() and _DRM_NODE.search(target):
            drm.append(name)
    return names, drm


def _is_kernel_thread(procfs: str, pid: int) -> bool:
    """Whether ``pid`` is a kernel thread (``PF_KTHREAD`` in ``stat``'s flags, field 9),
    which never holds a file: a sweep passes it over for as long as it lives."""
    stat = read_stat(f"{procfs}/{pid}")
    return stat is not None and bool(stat.flags & _PF_KTHREAD)


@dataclass(slots=True)
class _Process:
    """What the sweep keeps of one process between sweeps."""

    pid: int
    """Its pid."""
    inode: int
    """The inode of ``/proc/PID``: a process that takes a pid over gets a new one."""
    kernel_thread: bool = False
    """A kernel thread: never listed."""
    fd_count: int | None = None
    """The fd count at the last listing, where the procfs counts fds."""
    next_scan: int = 0
    """The sweep at which its fds are listed again (0: never listed yet)."""
    scan_gap: int = 1
    """Sweeps from its next listing to the one after: doubles up to ``rescan_every``."""
    next_full_scan: int = 0
    """The sweep from which its next listing reads every fd's link again, not only those of
    fd numbers it did not have (where the procfs does not count fds)."""
    fd_names: frozenset[str] = frozenset()
    """Its fds at the last listing."""
    drm_fds: tuple[str, ...] = ()
    """Its fds on a DRM node at the last listing."""
    identity: ProcessIdentity | None = None
    """Read once it holds a client."""
    noted: set[str] = field(default_factory=set)
    """Its DRM fds whose fdinfo is no client, said once in the debug log."""


@dataclass(slots=True)
class _Counters:
    """A client's counters at its last reading: the largest yet seen of each, as the spec
    asks of a counter that reads lower for a while."""

    read_at_ns: int
    engine_ns: dict[str, int]
    cycles: dict[str, int]
    total_cycles: dict[str, int]


class DrmClientSampler:
    """Sweeps a procfs for DRM clients and reads them as each GPU's processes.

    A sweep lists the procfs once and reads fdinfo only of fds linked to a DRM node. Each
    process is kept per pid and start (the inode of ``/proc/PID``, which the listing gives
    without an open); a kernel thread is passed over. Its fds are listed again (a
    ``readlink`` each) when their count changes (on Linux 6.2 and later the size of
    ``/proc/PID/fd``, one ``stat``), 1, 2, 4... sweeps after the last listing for a process
    started since the first sweep (a job opens its GPU in its first seconds), and every
    rescan period, spread over the sweeps by pid. Where fds are not counted, a periodic
    listing reads only the links of new fd numbers, and every ``RESCAN_EVERY_COUNTED``
    sweeps all of them (a GPU opened under the number of an fd closed since).

    What cannot be read (a process gone mid-sweep, another user's fdinfo, garbage) is passed
    over, never raised. Not thread-safe.
    """

    def __init__(
        self,
        procfs: Path | None = None,
        *,
        rescan_every: int | None = None,
        raw_commands: bool = False,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        """Prepare a sampler; nothing is read until the first sample.

        Args:
            procfs: The proc file system to read; ``GPUTUI_PROCFS``, else ``/proc``.
            rescan_every: Sweeps between two listings of a process's fds (default:
                ``RESCAN_EVERY_COUNTED`` where the procfs counts fds, else ``RESCAN_EVERY``).
            raw_commands: Keep the secrets in processes' command lines.
            clock_ns: Times each client's reading.
        """
        self._root = os.fspath(procfs if procfs is not None else procfs_root())
        self._rescan_asked = rescan_every
        self._rescan_every = RESCAN_EVERY
        self._full_rescan_every = RESCAN_EVERY_COUNTED
        self._counts_fds: bool | None = None  # probed at the first sweep
        self._raw_commands = raw_commands
        self._clock_ns = clock_ns
        self._sweep = 0
        self._listed_before = False
        self._processes: dict[str, _Process] = {}
        self._counters: dict[ClientKey, _Counters] = {}
        self._same_pid_namespace: bool | None = None

    def sample(self, integrated: frozenset[str] = frozenset()) -> dict[str, tuple[GpuProcess, ...]]:
        """One sweep: each GPU's PCI bus id (lowercase) and the processes using it (none: the
        GPU is absent); the GPUs ``integrated`` names (APUs) count every region mapped."""
        self._sweep += 1
        listed = _scan_dir(self._root)
        if listed is None:
            return {}
        if self._counts_fds is None:
            self._counts_fds = _fd_folder_size(f"{self._root}/self/fd") > 0
            default = RESCAN_EVERY_COUNTED if self._counts_fds else RESCAN_EVERY
            self._rescan_every = max(1, self._rescan_asked or default)
            self._full_rescan_every = max(self._rescan_every, RESCAN_EVERY_COUNTED)
        clients: dict[ClientKey, tuple[DrmClient, int]] = {}  # with when it was read
        holders: dict[ClientKey, set[int]] = {}
        parsed: dict[str, DrmClient | None] = {}  # this sweep's texts: dup'd fds show one
        processes: dict[str, _Process] = {}  # by the name of its folder
        known_before, sweep, counts_fds = self._processes, self._sweep, self._counts_fds
        for name, inode in listed:
            known = known_before.get(name)
            if known is None or known.inode != inode:
                if not name.isdigit():
                    continue  # not a process: self, stat, sys...
                known = _Process(int(name), inode, _is_kernel_thread(self._root, int(name)))
            processes[name] = known
            if sweep < known.next_scan and not counts_fds:  # not due: as last listed
                drm_fds = known.drm_fds
            else:
                drm_fds = self._drm_fds(known.pid, known)
            pid = known.pid
            for fd in drm_fds:
                client = self._read_client(pid, fd, known, parsed)
                if client is None:
                    continue
                key = (client.pci_bus_id, client.client_id)
                holders.setdefault(key, set()).add(pid)
                if key not in clients:
                    clients[key] = (client, self._clock_ns())
        self._processes = processes
        self._listed_before = True
        return self._readings(clients, holders, integrated)

    def _drm_fds(self, pid: int, known: _Process) -> tuple[str, ...]:
        """The process's fds on a DRM node: as last listed, or listed again when due."""
        if known.kernel_thread:
            return ()
        fd_dir = f"{self._root}/{pid}/fd"
        count = _fd_folder_size(fd_dir) if self._counts_fds else None
        if count == -1:
            return ()  # gone, or not a process
        if self._sweep < known.next_scan and count == known.fd_count:
            return known.drm_fds
        sweep, full_every = self._sweep, self._full_rescan_every
        # every link read: where fds are counted (a new count), while the process is young
        # (it opens and closes files, and its GPU may take a number a closed file had), and
        # every full_every sweeps; else only the links of fd numbers new since the last
        full = count is not None or known.scan_gap < self._rescan_every
        full = full or sweep >= known.next_full_scan
        if known.next_scan == 0 and not self._listed_before:  # there before the sampler
            known.next_scan = sweep + 1 + pid % self._rescan_every
            known.scan_gap = self._rescan_every
            known.next_full_scan = sweep + 1 + pid % full_every
        else:
            known.next_scan = sweep + known.scan_gap
            known.scan_gap = min(2 * known.scan_gap, self._rescan_every)
            if full:
                known.next_full_scan = sweep + full_every
        known.fd_count = count
        listed = _list_fds(fd_dir, frozenset() if full else known.fd_names)
        if listed is None:
            known.fd_names, known.drm_fds = frozenset(), ()
            return ()
        names, new_drm = listed
        kept = () if full else tuple(fd for fd in known.drm_fds if fd in names)
        known.fd_names, known.drm_fds = names, (*kept, *new_drm)
        return known.drm_fds

    def _read_client(
        self, pid: int, fd: str, known: _Process, parsed: dict[str, DrmClient | None]
    ) -> DrmClient | None:
        if not _DRM_NODE.search(_link(f"{self._root}/{pid}/fd/{fd}")):
            # closed, or another file now: list again, reading this fd's link
            known.next_scan = self._sweep + 1
            known.fd_names = known.fd_names - {fd}
            known.drm_fds = tuple(name for name in known.drm_fds if name != fd)
            return None
        text = _read_text(f"{self._root}/{pid}/fdinfo/{fd}")
        if text is None:
            return None  # exited, or another user's
        if text not in parsed:
            parsed[text] = parse_fdinfo(text)
        client = parsed[text]
        if client is None and fd not in known.noted:
            known.noted.add(fd)
            log.debug("%s/%d/fdinfo/%s is no DRM client usage record", self._root, pid, fd)
        return client

    def _readings(
        self,
        clients: Mapping[ClientKey, tuple[DrmClient, int]],
        holders: Mapping[ClientKey, set[int]],
        integrated: frozenset[str],
    ) -> dict[str, tuple[GpuProcess, ...]]:
        """Each client counted for one process, and each process's clients on a GPU added up."""
        owned: dict[tuple[str, int], list[tuple[DrmClient, dict[str, float] | None]]] = {}
        identities: dict[int, ProcessIdentity] = {}
        counters: dict[ClientKey, _Counters] = {}
        for key, (client, read_at_ns) in clients.items():
            shares, counters[key] = _engine_shares(self._counters.get(key), client, read_at_ns)
            owner = self._owner(holders[key])
            if owner is not None:
                pid, identities[pid] = owner
                owned.setdefault((client.pci_bus_id, pid), []).append((client, shares))
        self._counters = counters
        local = self._local_pids()
        found: dict[str, list[GpuProcess]] = {}
        for (bus_id, pid), its_clients in sorted(owned.items()):
            identity = identities[pid]
            found.setdefault(bus_id, []).append(
                GpuProcess(
                    pid,
                    identity.user,
                    identity.command,
                    _memory((client for client, _ in its_clients), bus_id in integrated),
                    _kind(client for client, _ in its_clients),
                    create_time=identity.create_time,
                    local_pid=pid if local else None,
                    sm_utilization_percent=_busy_percent(shares for _, shares in its_clients),
                )
            )
        return {bus_id: tuple(processes) for bus_id, processes in found.items()}

    def _owner(self, pids: set[int]) -> tuple[int, ProcessIdentity] | None:
        """The earliest-started of the processes holding a client (the one that opened it,
        before it forked), and who runs it; ``None`` when every one has gone."""
        candidates = []
        for pid in pids:
            known = self._processes[str(pid)]
            if known.identity is None:
                known.identity = read_process_identity(
                    self._root, pid, raw_commands=self._raw_commands
                )
            if known.identity is not None:
                started = known.identity.create_time
                first = started if started is not None else float("inf")
                candidates.append((first, pid, known.identity))
        if not candidates:
            return None
        _, pid, identity = min(candidates, key=lambda candidate: candidate[:2])
        return pid, identity

    def _local_pids(self) -> bool:
        """Whether the procfs is this pid namespace's (its ``self`` is this process), so
        that its pids are the ones to signal."""
        if self._same_pid_namespace is None:
            self._same_pid_namespace = _link(f"{self._root}/self") == str(os.getpid())
        return self._same_pid_namespace


def _fd_folder_size(path: str) -> int:
    """The size of an fd folder, which is its fd count on Linux 6.2 and later (0 before);
    -1 when it is gone."""
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _engine_shares(
    before: _Counters | None, client: DrmClient, read_at_ns: int
) -> tuple[dict[str, float] | None, _Counters]:
    """The share of each engine the client kept busy since ``before`` (``None`` with no
    ``before``), and its counters for the next sample.

    A counter that reads lower than before counts as not having moved, and the larger
    value is kept (the spec's rule). An engine ``before`` lacks starts from 0: amdgpu
    prints an engine only once it has run.
    """
    after = _Counters(
        read_at_ns,
        _kept_larger(before.engine_ns if before else {}, client.engine_ns),
        _kept_larger(before.cycles if before else {}, client.cycles),
        _kept_larger(before.total_cycles if before else {}, client.total_cycles),
    )
    if before is None:
        return None, after
    shares: dict[str, float] = {}
    for name, busy in client.cycles.items():
        total, total_before = client.total_cycles.get(name), before.total_cycles.get(name)
        if total is None or total_before is None or total <= total_before:
            continue
        moved = max(0, busy - before.cycles.get(name, 0))
        shares[name] = moved / (total - total_before) / client.capacity.get(name, 1)
    wall_ns = read_at_ns - before.read_at_ns
    if wall_ns > 0:
        for name, busy in client.engine_ns.items():
            if name not in shares:
                moved = max(0, busy - before.engine_ns.get(name, 0))
                shares[name] = moved / wall_ns / client.capacity.get(name, 1)
    return shares, after


def _kept_larger(before: dict[str, int], now: dict[str, int]) -> dict[str, int]:
    """``now``, each counter at least what it was ``before`` (neither is changed after)."""
    if not before or not now:
        return now
    return {name: max(value, before.get(name, 0)) for name, value in now.items()}


def _busy_percent(each_client: Iterable[dict[str, float] | None]) -> float | None:
    """The busiest engine's share, the clients' shares of it added up, 0-100; ``None``
    when no client's is known."""
    engines: dict[str, float] = {}
    known = False
    for shares in each_client:
        if shares:
            known = True
            for name, share in shares.items():
                engines[name] = engines.get(name, 0.0) + share
    if not known:
        return None
    return min(100.0, max(0.0, 100.0 * max(engines.values())))


def _memory(clients: Iterable[DrmClient], integrated: bool) -> int | None:
    """The clients' memory on the GPU added up (see the module); ``None`` when none says."""
    known = [size for client in clients if (size := _client_memory(client, integrated)) is not None]
    return sum(known) if known else None


def _client_memory(client: DrmClient, integrated: bool) -> int | None:
    regions = client.memory_bytes
    if not regions:
        return None
    device = [size for region, size in regions.items() if _is_device_region(region)]
    if device and not integrated:
        return sum(device)
    unmapped = _UNMAPPED_REGIONS.get(client.driver, frozenset())
    return sum(size for region, size in regions.items() if region not in unmapped)


@functools.lru_cache(maxsize=256)
def _is_device_region(region: str) -> bool:
    return _DEVICE_REGION.fullmatch(region) is not None


def _kind(clients: Iterable[DrmClient]) -> str:
    """``graphics`` when the clients ran a graphics engine and never a compute one."""
    ran = {
        name
        for client in clients
        for counts in (client.engine_ns, client.cycles)
        for name, value in counts.items()
        if value > 0
    }
    return "graphics" if ran & _GRAPHICS_ENGINES and not ran & _COMPUTE_ENGINES else "compute"
