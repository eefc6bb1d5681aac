"""Fake procfs trees, built at test time as the kernel lays procfs out: each process a folder
with ``stat``, ``status``, ``cmdline``, ``comm``, its fds as real symlinks (to the tree's own
``dev/dri`` nodes, sockets, pipes) and their fdinfo files in the DRM client usage format.

Importable from outside pytest (benchmarks/drm_clients.py builds its trees with it).

Where each fdinfo's form comes from (the builders follow them line for line):

- amdgpu before Linux 6.11: ``amdgpu_show_fdinfo`` (drivers/gpu/drm/amd/amdgpu/amdgpu_fdinfo.c)
  prints ``pasid``, the TTM pools as ``drm-memory-vram/gtt/cpu`` in KiB (with a space
  before the tab after ``gtt:`` and ``cpu:``), the ``amd-*`` extras, and an engine's
  ``drm-engine-<ip>`` only once it has run.
- amdgpu from Linux 6.11: ``drm_show_fdinfo`` and ``drm_print_memory_stats`` give
  ``drm-total/shared/active/resident/purgeable-<region>`` for cpu, gtt and vram (0 has no
  unit), still beside ``drm-memory-*``; the sample output of the commit "drm/amdgpu: Use
  drm_print_memory_stats helper from fdinfo".
- i915 from Linux 6.7: the sample in the "drm/i915: Implement fdinfo memory stats printing"
  series and proc_pid_fdinfo(5): ``system0`` and ``stolen-system0`` regions, engines
  ``render``, ``copy``, ``video`` (with ``drm-engine-capacity-video: 2``), ``video-enhance``.
- xe: the DOC comment of drivers/gpu/drm/xe/xe_drm_client.c
  (Documentation/gpu/xe/xe-drm-usage-stats.rst): ``drm-cycles-<class>`` against
  ``drm-total-cycles-<class>``, capacities for vcs, vecs and ccs, regions system, gtt,
  vram0 and stolen.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

BTIME = 1_764_000_000
"""The fake box's boot time (``btime`` in its ``/proc/stat``)."""
TICKS = os.sysconf("SC_CLK_TCK")
KIB = 1024

AMD_0 = "0000:03:00.0"
AMD_1 = "0000:83:00.0"
INTEL_IGPU = "0000:00:02.0"
INTEL_ARC = "0000:4d:00.0"

NOT_DRM_FDINFO = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t4242\n"
"""A socket's fdinfo: what every fd that is not a DRM client shows."""


# ---------------------------------------------------------------- fdinfo, as each driver prints it


def amdgpu_6_8(
    client_id: int,
    pdev: str,
    *,
    vram_kib: int | None,
    gtt_kib: int = 2720,
    engines: dict[str, int] | None = None,
) -> str:
    """amdgpu before 6.11 (see the module); ``vram_kib=None`` leaves the VRAM keys out, as
    it does on an APU whose memory is all GTT (``gmc.is_app_apu``)."""
    vram = (
        ""
        if vram_kib is None
        else f"drm-memory-vram:\t{vram_kib} KiB\namd-memory-visible-vram:\t{vram_kib} KiB\n"
        "amd-evicted-vram:\t0 KiB\namd-evicted-visible-vram:\t0 KiB\n"
        f"amd-requested-vram:\t{vram_kib} KiB\namd-requested-visible-vram:\t11072 KiB\n"
    )
    return (
        "pos:\t0\nflags:\t02100002\nmnt_id:\t25\nino:\t1071\n"
        f"pasid:\t32770\ndrm-driver:\tamdgpu\ndrm-pdev:\t{pdev}\ndrm-client-id:\t{client_id}\n"
        f"drm-memory-gtt: \t{gtt_kib} KiB\ndrm-memory-cpu: \t0 KiB\n"
        + vram
        + f"amd-requested-gtt:\t{gtt_kib} KiB\n"
        + "".join(f"drm-engine-{ip}:\t{ns} ns\n" for ip, ns in (engines or {}).items() if ns)
    )


def amdgpu_6_11(
    client_id: int,
    pdev: str,
    *,
    vram_kib: int,
    total_vram_kib: int | None = None,
    engines: dict[str, int] | None = None,
) -> str:
    """amdgpu from 6.11 (see the module); ``total_vram_kib`` above ``vram_kib``: buffers
    created but not resident (evicted)."""
    total = vram_kib if total_vram_kib is None else total_vram_kib
    return (
        "pos:\t0\nflags:\t02100002\nmnt_id:\t25\nino:\t1071\n"
        f"drm-driver:\tamdgpu\ndrm-client-id:\t{client_id}\ndrm-pdev:\t{pdev}\npasid:\t32771\n"
        "drm-total-cpu:\t0\ndrm-shared-cpu:\t0\ndrm-active-cpu:\t0\ndrm-resident-cpu:\t0\n"
        "drm-purgeable-cpu:\t0\n"
        "drm-total-gtt:\t2392 KiB\ndrm-shared-gtt:\t0\ndrm-active-gtt:\t0\n"
        "drm-resident-gtt:\t2392 KiB\ndrm-purgeable-gtt:\t0\n"
        f"drm-total-vram:\t{total} KiB\ndrm-shared-vram:\t31952 KiB\ndrm-active-vram:\t0\n"
        f"drm-resident-vram:\t{vram_kib} KiB\ndrm-purgeable-vram:\t0\n"
        f"drm-memory-vram:\t{vram_kib} KiB\ndrm-memory-gtt: \t2392 KiB\ndrm-memory-cpu: \t0 KiB\n"
        f"amd-memory-visible-vram:\t{vram_kib} KiB\namd-evicted-vram:\t0 KiB\n"
        "amd-evicted-visible-vram:\t0 KiB\n"
        f"amd-requested-vram:\t{vram_kib} KiB\namd-requested-visible-vram:\t11952 KiB\n"
        "amd-requested-gtt:\t2392 KiB\n"
        + "".join(f"drm-engine-{ip}:\t{ns} ns\n" for ip, ns in (engines or {}).items() if ns)
    )


def i915(client_id: int, *, render_ns: int, video_ns: int = 0, pdev: str = INTEL_IGPU) -> str:
    """i915 on an integrated GPU (see the module)."""
    return (
        "pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t685\n"
        f"drm-driver:\ti915\ndrm-client-id:\t{client_id}\ndrm-pdev:\t{pdev}\n"
        "drm-total-system0:\t6044 KiB\ndrm-shared-system0:\t0\ndrm-active-system0:\t0\n"
        "drm-resident-system0:\t6044 KiB\ndrm-purgeable-system0:\t1688 KiB\n"
        "drm-total-stolen-system0:\t0\ndrm-shared-stolen-system0:\t0\n"
        "drm-active-stolen-system0:\t0\ndrm-resident-stolen-system0:\t0\n"
        "drm-purgeable-stolen-system0:\t0\n"
        f"drm-engine-render:\t{render_ns} ns\ndrm-engine-copy:\t0 ns\n"
        f"drm-engine-video:\t{video_ns} ns\ndrm-engine-capacity-video:\t2\n"
        "drm-engine-video-enhance:\t0 ns\n"
    )


def xe(client_id: int, *, rcs: int, ccs: int, gpu_cycles: int, pdev: str = INTEL_ARC) -> str:
    """xe on a discrete card (see the module): busy cycles per class, the GPU's timestamp."""
    classes = (("rcs", rcs, 1), ("bcs", 0, 1), ("vcs", 0, 2), ("vecs", 0, 2), ("ccs", ccs, 4))
    return (
        "pos:\t0\nflags:\t0100002\nmnt_id:\t26\nino:\t685\n"
        f"drm-driver:\txe\ndrm-client-id:\t{client_id}\ndrm-pdev:\t{pdev}\n"
        "drm-total-system:\t0\ndrm-shared-system:\t0\ndrm-active-system:\t0\n"
        "drm-resident-system:\t0\ndrm-purgeable-system:\t0\n"
        "drm-total-gtt:\t192 KiB\ndrm-shared-gtt:\t0\ndrm-active-gtt:\t0\n"
        "drm-resident-gtt:\t192 KiB\n"
        "drm-total-vram0:\t23992 KiB\ndrm-shared-vram0:\t16 MiB\ndrm-active-vram0:\t0\n"
        "drm-resident-vram0:\t23992 KiB\ndrm-purgeable-vram0:\t0\n"
        "drm-total-stolen:\t0\ndrm-shared-stolen:\t0\ndrm-active-stolen:\t0\n"
        "drm-resident-stolen:\t0\n"
        + "".join(
            f"drm-cycles-{name}:\t{busy}\ndrm-total-cycles-{name}:\t{gpu_cycles}\n"
            + (f"drm-engine-capacity-{name}:\t{capacity}\n" if capacity > 1 else "")
            for name, busy, capacity in classes
        )
    )


# ---------------------------------------------------------------- a fake procfs


class FakeProcfs:
    """A procfs tree: ``proc/`` with the box's ``stat`` and a folder per process, and
    ``dev/`` with the DRM nodes the fds link to."""

    def __init__(self, base: Path) -> None:
        self.root = base / "proc"
        self.dev = base / "dev"
        (self.dev / "dri").mkdir(parents=True)
        self.root.mkdir()
        for node in ("card0", "card1", "renderD128", "renderD129", "renderD130"):
            (self.dev / "dri" / node).touch()
        (self.dev / "null").touch()
        (self.root / "stat").write_text(
            f"cpu  4705 356 584 3699 23 23 0 0 0 0\nintr 1462898\nctxt 5742960\n"
            f"btime {BTIME}\nprocesses 26442\nprocs_running 1\nprocs_blocked 0\n"
        )

    def process(
        self,
        pid: int,
        argv: tuple[str, ...] = ("python3", "train.py"),
        *,
        uid: int = 0,
        start_ticks: int = 5000,
        cpu_ticks: tuple[int, int] = (5, 3),
        rss_pages: int = 2361,
        comm: str | None = None,
        fdinfo: bool = True,
        at: Path | None = None,
    ) -> Path:
        """A process's folder (at ``at``, to move into place later), without fds yet;
        ``cpu_ticks``: its user and system CPU time (``stat``'s fields 14 and 15);
        ``rss_pages``: resident (``stat``'s field 24 and ``statm``'s second)."""
        folder = at if at is not None else self.root / str(pid)
        folder.mkdir()
        (folder / "fd").mkdir()
        if fdinfo:
            (folder / "fdinfo").mkdir()
        name = comm if comm is not None else Path(argv[0]).name[:15]
        # fields 3 to 21 of proc_pid_stat(5), then field 22: the start time, in clock ticks
        fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560", "120", "0", "0", "0"]
        fields += [*map(str, cpu_ticks), "0", "0", "20", "0", "1", "0", str(start_ticks)]
        fields += ["25165824", str(rss_pages), *["0"] * 28]  # to field 52, as psutil reads them
        (folder / "stat").write_text(f"{pid} ({name}) " + " ".join(fields) + "\n")
        (folder / "statm").write_text(f"6144 {rss_pages} 1460 1 0 3075 0\n")
        (folder / "status").write_text(
            f"Name:\t{name}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\n"
            f"PPid:\t1\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        )
        (folder / "cmdline").write_bytes(b"".join(arg.encode() + b"\0" for arg in argv))
        (folder / "comm").write_text(name + "\n")
        return folder

    def drm_fd(self, pid: int, fd: int, node: str, fdinfo: str | None) -> None:
        """An fd on ``dev/dri/<node>``, with its fdinfo (``None``: none)."""
        self._fd(pid, fd, str(self.dev / "dri" / node), fdinfo)

    def other_fd(self, pid: int, fd: int, target: str = "socket:[4242]") -> None:
        """An fd on something else: a socket or pipe (as procfs names them), or a file."""
        self._fd(pid, fd, target, NOT_DRM_FDINFO)

    def fdinfo(self, pid: int, fd: int, text: str) -> None:
        """Rewrite an fd's fdinfo: the counters as the next sample finds them."""
        (self.root / str(pid) / "fdinfo" / str(fd)).write_text(text)

    def _fd(self, pid: int, fd: int, target: str, fdinfo: str | None) -> None:
        (self.root / str(pid) / "fd" / str(fd)).symlink_to(target)
        if fdinfo is not None:
            self.fdinfo(pid, fd, fdinfo)

    def cgroup(self, pid: int, text: str) -> None:
        """The process's ``cgroup`` file: ``0::PATH`` on cgroup v2, ``ID:CONTROLLERS:PATH`` a
        hierarchy on v1 (cgroups(7), "/proc/pid/cgroup")."""
        (self.root / str(pid) / "cgroup").write_text(text)

    @property
    def host(self) -> Path:
        """The host's root as the tree's init sees it (``proc/1/root``)."""
        return self.root / "1" / "root"

    def host_file(self, path: str, text: str) -> Path:
        """A file of the host's root (``proc/1/root/PATH``)."""
        file = self.host / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
        return file

    def standard_fds(self, pid: int) -> None:
        """stdin, stdout and stderr: /dev/null and two sockets."""
        self.other_fd(pid, 0, str(self.dev / "null"))
        self.other_fd(pid, 1, "socket:[30571]")
        self.other_fd(pid, 2, "pipe:[30572]")


def started(ticks: int) -> float:
    return float(ticks) / TICKS + BTIME


# ---------------------------------------------------------------- jobs: containers, pods, Slurm

DOCKER_ID = "4b1f0c2d9e8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c"
"""A Docker container's id (64 hex digits, as ``docker inspect`` gives it)."""
CONTAINERD_ID = "9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c"
"""A Kubernetes container's id under containerd."""
POD_UID = "7c1e4a52-93d0-4f6b-8a2e-5b3c9d1f0e47"
"""That container's pod's UID."""
IN_DOCKER, IN_POD, IN_SLURM = 4242, 4343, 4444
"""The pids of :func:`jobs_tree`'s processes."""


def jobs_tree(base: Path) -> FakeProcfs:
    """A procfs with a GPU process in each kind of job, on cgroup v2, their names where the
    host's files give them:

    - ``IN_DOCKER`` in Docker container ``trainer`` (systemd cgroup driver:
      ``/system.slice/docker-<id>.scope``, Docker's "Runtime metrics" page), its name in
      ``/var/lib/docker/containers/<id>/config.v2.json``;
    - ``IN_POD`` in container ``resnet`` of pod ``ml/resnet-0`` (the kubelet's systemd
      driver: ``kubepods-burstable-pod<uid, its - as _>.slice``, containerd's
      ``cri-containerd-<id>.scope``), named by the kubelet's log link
      ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log``;
    - ``IN_SLURM`` in step 0 of Slurm job 1234 (Slurm's cgroup/v2 plugin:
      ``/system.slice/slurmstepd.scope/job_<id>/step_<step>/user/task_<n>``).
    """
    proc = FakeProcfs(base)
    for pid in (IN_DOCKER, IN_POD, IN_SLURM):
        proc.process(pid)
    proc.cgroup(IN_DOCKER, f"0::/system.slice/docker-{DOCKER_ID}.scope\n")
    proc.host_file(f"var/lib/docker/containers/{DOCKER_ID}/config.v2.json", '{"Name": "/trainer"}')
    pod = f"kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice"
    container = f"cri-containerd-{CONTAINERD_ID}.scope"
    proc.cgroup(IN_POD, f"0::/kubepods.slice/kubepods-burstable.slice/{pod}/{container}\n")
    log = proc.host_file(f"var/log/pods/ml_resnet-0_{POD_UID}/resnet/0.log", "")
    (proc.host / "var" / "log" / "containers").mkdir()
    (
        proc.host / "var" / "log" / "containers" / f"resnet-0_ml_resnet-{CONTAINERD_ID}.log"
    ).symlink_to(log)
    proc.cgroup(IN_SLURM, "0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n")
    return proc


# ---------------------------------------------------------------- as a user who owns nothing


def as_another_user(read: Callable[[], T]) -> T:
    """``read()``'s JSON-able result as a user who owns nothing in the tree: root reads any
    file, so as root it runs in a forked child that has given root up (uid 65534)."""
    if os.geteuid() != 0:
        return read()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        status = 1
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(write_end, json.dumps(read()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        data = answer.read()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    result: T = json.loads(data)
    return result


@contextmanager
def readable_folder() -> Iterator[Path]:
    """A folder another user may read (pytest's are its owner's alone), removed after."""
    base = Path(tempfile.mkdtemp(prefix="gputui-procfs-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for folder, _, _ in os.walk(base):
            os.chmod(folder, 0o755)
        shutil.rmtree(base)
