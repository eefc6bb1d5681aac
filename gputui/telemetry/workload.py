"""What a GPU process runs in, from its cgroup (``/proc/PID/cgroup``: one ``0::PATH`` line on
cgroup v2, a line per hierarchy on v1): a container, a Kubernetes pod, a Slurm job, a systemd
unit. Each runtime names its cgroups its own way:

- Docker: ``/docker/<id>`` with its cgroupfs driver, ``/system.slice/docker-<id>.scope``
  with its systemd driver (Docker's "Runtime metrics" page).
- Kubernetes: the pod's ``/kubepods/<qos>/pod<uid>`` (cgroupfs; a guaranteed pod has no
  ``<qos>``) or ``/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice``
  (systemd, the UID's dashes written as underscores); its container under it, containerd's
  ``cri-containerd-<id>.scope``, CRI-O's ``crio-<id>.scope`` (``crio-<id>`` with cgroupfs),
  else a bare ``<id>``.
- Podman: ``libpod-<id>.scope`` (``/libpod_parent/libpod-<id>`` with cgroupfs); nerdctl
  (containerd): ``nerdctl-<id>.scope``.
- Slurm: ``/slurm/uid_<uid>/job_<id>/step_<step>`` on v1, ``/system.slice/slurmstepd.scope/
  job_<id>/step_<step>`` on v2 (``slurm_<node>``, ``<node>_slurmstepd.scope`` where one host
  runs several slurmd; cgroup.conf's ``CgroupSlice`` for another slice).
- systemd: the innermost ``.service`` or ``.scope``.

A pod or a Slurm job is named only where its cgroup sits where the kubelet or slurmstepd puts
it, in slices only root can create: a user's delegated cgroups (under ``user@UID.service``,
where rootless Podman's containers live) can name a container, not pass for a pod or a job.

Names come from files, never from a runtime's socket (a call that can hang), read under the
procfs's ``1/root`` (the host's root, for a container given the host's ``/proc``): a
Kubernetes container's pod, namespace and name from the kubelet's log links, else its pod's
from the pod's log folder (both open to every user); a Docker or Podman container's from the
runtime's state file (root's alone). What cannot be read is ``None``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from gputui.files import read_regular
from gputui.telemetry.procstat import read_stat
from gputui.telemetry.readings import NO_WORKLOAD, Workload
from gputui.telemetry.sysfs import PROCFS_ENV, procfs_root

CGROUP_LIMIT = 64 * 1024
"""The most read of one ``/proc/PID/cgroup`` (a line per hierarchy, each a path)."""
STATE_LIMIT = 4 * 1024 * 1024
"""The most read of one runtime's state file; a larger one is not read at all."""
SHORT_ID = 12
"""Characters of a container id shown where its name is not known, as ``docker ps`` does."""

_CONTAINER = re.compile(
    r"(?:(docker|cri-containerd|crio|libpod|nerdctl)-)?([0-9a-f]{64})(?:\.scope)?\Z"
)
"""A container's cgroup: ``<prefix>-<id>.scope`` (systemd), ``<prefix>-<id>`` or ``<id>``."""
_RUNTIMES = {
    "docker": "docker",
    "cri-containerd": "containerd",
    "nerdctl": "containerd",
    "crio": "cri-o",
    "libpod": "podman",
}
_KUBEPODS = frozenset({"kubepods", "kubepods.slice"})
_POD = re.compile(r"(?:kubepods-(?:[a-z]+-)?pod([0-9a-f_]{32,36})\.slice|pod([0-9a-f-]{32,36}))\Z")
"""A pod's cgroup (the UID: 36 characters, or a static pod's 32-digit hash)."""
_SLURM = re.compile(
    r"/(?:slurm(?:_[^/]+)?/uid_\d+|(?:[^/]+\.slice/)*(?:[^/]+_)?slurmstepd\.scope)"
    r"/job_(\d+)(?:/step_(\w+))?(?:/|\Z)"
)
"""A Slurm job's cgroup from the root: v1's, then v2's (in slices alone: none a user owns)."""
_UNIT = re.compile(r"[A-Za-z0-9:_.@\\-]+\.(?:service|scope)\Z")
"""A systemd unit that holds processes, in the characters systemd allows in a unit's name."""


def parse_cgroup(text: str) -> Workload:
    """The workload a ``/proc/PID/cgroup`` text names: ids alone, no name looked up (the
    container and pod read as their id and UID).

    Each of the container, the pod, the Slurm job and the unit comes from the first path that
    names it: v2's, then v1's ``name=systemd``, then the other hierarchies' in their order
    (a v1 Slurm job shows in its controllers' hierarchies only).
    """
    fields: dict[str, str | None] = {}
    for path in _paths(text):
        parts = [part for part in path.split("/") if part]
        container = _container(parts)
        if container is not None and "container_id" not in fields:
            cid, runtime, _ = container
            fields.update(container=cid[:SHORT_ID], container_id=cid, runtime=runtime)
        uid = _pod_uid(parts)
        if uid is not None and "pod_uid" not in fields:
            fields.update(pod=uid, pod_uid=uid)
        slurm = _SLURM.match(path)
        if slurm is not None and "slurm_job" not in fields:
            fields.update(slurm_job=slurm[1], slurm_step=slurm[2])
        # the innermost unit, the cgroups a container makes inside its own apart
        outside = parts if container is None else parts[: container[2] + 1]
        unit = next((part for part in reversed(outside) if _UNIT.match(part)), None)
        if unit is not None and "unit" not in fields:
            fields["unit"] = unit
    return Workload(**fields) if fields else NO_WORKLOAD


def _container(parts: list[str]) -> tuple[str, str | None, int] | None:
    """The first container in a cgroup path's parts: its id, its runtime, and its part's
    index."""
    for index, part in enumerate(parts):
        match = _CONTAINER.match(part)
        if match is not None:
            prefix, cid = match.groups()
            if prefix:
                return cid, _RUNTIMES[prefix], index
            return cid, "docker" if index and parts[index - 1] == "docker" else None, index
    return None


def _pod_uid(parts: list[str]) -> str | None:
    """The UID of the pod a cgroup path is in, where the path starts where the kubelet's
    pods are."""
    if not parts or parts[0] not in _KUBEPODS:
        return None
    for part in parts[1:]:
        match = _POD.match(part)
        if match is not None:
            return (match[1] or match[2]).replace("_", "-")
    return None


def _paths(text: str) -> list[str]:
    """The cgroup paths of a ``/proc/PID/cgroup`` text, v2's first, then v1's
    ``name=systemd``, then the other hierarchies' in their order."""
    ranked: list[tuple[int, str]] = []
    # On "\n" alone: a cgroup's name may hold "\r", "\x1c" or U+2028, which splitlines()
    # also breaks on, and a user who names a cgroup so would write a line of their choosing
    for line in text.split("\n"):
        hierarchy, _, rest = line.partition(":")
        controllers, colon, path = rest.partition(":")
        if colon and path.startswith("/"):
            unified = hierarchy == "0" and not controllers
            ranked.append((0 if unified else 1 if controllers == "name=systemd" else 2, path))
    return [path for _, path in sorted(ranked, key=lambda each: each[0])]  # (a stable sort)


class WorkloadReader:
    """Reads what each process runs in, once per process: kept per (pid, start time) until
    the process is no longer asked about (:meth:`forget`). Not thread-safe."""

    def __init__(self, procfs: Path | None = None) -> None:
        """Read nothing yet; ``procfs`` is the proc file system to read (``GPUTUI_PROCFS``,
        else ``/proc``)."""
        self.host_procfs = procfs is not None or bool(os.environ.get(PROCFS_ENV))
        """Whether the procfs was named (``GPUTUI_PROCFS``): it is taken for the host's, and
        NVML's pids (the host's) are read there even from a pid namespace of our own."""
        self._root = procfs if procfs is not None else procfs_root()
        self._known: dict[int, tuple[float, Workload]] = {}

    def read(self, pid: int, create_time: float | None = None) -> Workload:
        """What process ``pid`` runs in: read once, then kept while the process is the one
        that started at ``create_time`` (where ``None``, at the start time the procfs gives).
        :data:`NO_WORKLOAD` where its cgroup cannot be read."""
        start = create_time if create_time is not None else self._start_ticks(pid)
        known = self._known.get(pid)
        if known is not None and start is not None and known[0] == start:
            return known[1]
        text = _read_text(self._root / str(pid) / "cgroup", CGROUP_LIMIT)
        workload = NO_WORKLOAD if text is None else self._named(parse_cgroup(text))
        if start is not None:
            self._known[pid] = (start, workload)
        return workload

    def forget(self, alive: Collection[int]) -> None:
        """Drop what is kept of every process but those in ``alive``."""
        for pid in self._known.keys() - set(alive):
            del self._known[pid]

    def _start_ticks(self, pid: int) -> float | None:
        """The process's start time in clock ticks since boot (``stat``'s field 22)."""
        stat = read_stat(f"{self._root}/{pid}")
        return None if stat is None else float(stat.start_ticks)

    def _named(self, workload: Workload) -> Workload:
        """``workload`` with the names the runtimes' files give."""
        host = self._root / "1" / "root"
        cid, uid = workload.container_id, workload.pod_uid
        if uid is not None:
            kube = _kube_container(host, cid) if cid is not None else None
            if kube is not None:
                pod, namespace, container = kube
                return replace(workload, pod=pod, namespace=namespace, container=container)
            names = _kube_pod(host, uid)
            if names is not None:
                workload = replace(workload, pod=names[0], namespace=names[1])
        lookup = None if cid is None else _NAME_LOOKUPS.get(workload.runtime or "")
        name = None if lookup is None or cid is None else lookup(host, cid)
        return workload if name is None else replace(workload, container=name)


def _kube_container(host: Path, cid: str) -> tuple[str, str, str] | None:
    """(pod, namespace, container) from the kubelet's link to the container's log,
    ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log``."""
    suffix = f"-{cid}.log"
    for name in _listing(host / "var" / "log" / "containers"):
        if name.endswith(suffix):
            # no "_" in a pod's, namespace's or container's name
            parts = name[: -len(suffix)].split("_")
            if len(parts) == 3 and all(parts):
                return parts[0], parts[1], parts[2]
    return None


def _kube_pod(host: Path, uid: str) -> tuple[str, str] | None:
    """(pod, namespace) from the kubelet's folder of the pod's logs,
    ``/var/log/pods/<namespace>_<pod>_<uid>``."""
    for name in _listing(host / "var" / "log" / "pods"):
        parts = name.split("_")
        if len(parts) == 3 and parts[2] == uid and parts[0] and parts[1]:
            return parts[1], parts[0]
    return None


def _docker_name(host: Path, cid: str) -> str | None:
    state = _read_json(host / "var" / "lib" / "docker" / "containers" / cid / "config.v2.json")
    name = state.get("Name") if isinstance(state, dict) else None
    return (name.lstrip("/") or None) if isinstance(name, str) else None


def _podman_name(host: Path, cid: str) -> str | None:
    storage = host / "var" / "lib" / "containers" / "storage"
    containers = _read_json(storage / "overlay-containers" / "containers.json")
    for entry in containers if isinstance(containers, list) else ():
        if isinstance(entry, dict) and entry.get("id") == cid:
            names = entry.get("names")
            if isinstance(names, list) and names and isinstance(names[0], str):
                return names[0] or None
    return None


_NAME_LOOKUPS: dict[str, Callable[[Path, str], str | None]] = {
    "docker": _docker_name,
    "podman": _podman_name,
}
"""Per runtime, how a container's name is found from its id under the host's root."""


def _listing(folder: Path) -> Iterator[str]:
    """The names in ``folder``; none where it cannot be listed."""
    try:
        with os.scandir(folder) as entries:
            yield from (entry.name for entry in entries)
    except OSError:
        return


def _read_json(path: Path) -> Any:
    """A JSON file's value; ``None`` where it cannot be read or parsed."""
    text = _read_text(path, STATE_LIMIT)
    try:
        return None if text is None else json.loads(text)
    except (ValueError, RecursionError):
        return None


def _read_text(path: Path, limit: int) -> str | None:
    """A file's text (bytes that are not UTF-8 kept as surrogates); ``None`` where it cannot
    be read, is not a regular file (a FIFO would block), or holds more than ``limit`` bytes."""
    try:
        data = read_regular(path, limit)
    except OSError:
        return None
    return data.decode(errors="surrogateescape")
