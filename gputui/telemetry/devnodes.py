"""Which local process is the one NVML names by its host pid, inside a pid namespace.

NVML reports the host's pids. In a container without ``--pid=host`` those numbers mean
nothing locally, so the monitor shows them as host pids and borrows no local process's
user or command for them (see ``NvmlStatus.host_pids``). One case is proven, though:

A process with a CUDA context on a GPU maps that GPU's device node, ``/dev/nvidiaN``
(N is NVML's minor number), into its memory; a monitor that only opens the node to ask
the driver (NVML, nvidia-smi, gputui) does not. So when NVML lists exactly one process on
a GPU and exactly one local process maps that GPU's node, they are the same process,
seen from two pid namespaces. Anything less certain (two processes on the GPU, two local
processes mapping it, a host pid matched to two local ones) stays unmatched.

No Textual, no torch: the sampler calls this on a slow schedule, since it reads every local
process's memory map.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from gputui.files import open_regular

NODE = re.compile(rb"/dev/nvidia(\d+)")
"""A GPU's device node as a memory map line's path names it, whole; the group is its minor
number. Lines end at ``\n`` alone and the path is the sixth field, all of it: a user's file
mapped as ``/tmp/x\r... /dev/nvidia0`` is not the node."""


def node_mappers(proc: Path = Path("/proc"), exclude: Iterable[int] = ()) -> dict[int, set[int]]:
    """For each GPU minor number, the local pids under ``proc`` whose memory maps
    ``/dev/nvidiaN``, but those in ``exclude`` (gputui's own); processes that vanish or hide
    their maps are passed over: they prove nothing."""
    skipped = set(exclude)
    found: dict[int, set[int]] = {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit() or int(entry.name) in skipped:
            continue
        try:
            with os.fdopen(open_regular(os.path.join(entry.path, "maps")), "rb") as maps:
                paths = (line.rstrip(b"\n").split(maxsplit=5)[5:] for line in maps)
                minors = {
                    int(match[1]) for path in paths if path and (match := NODE.fullmatch(path[0]))
                }
        except OSError:
            continue
        for minor in minors:
            found.setdefault(minor, set()).add(int(entry.name))
    return found


def match_host_pids(
    listed: Mapping[int, Iterable[int]], mappers: Mapping[int, set[int]]
) -> dict[int, int]:
    """Host pid -> local pid, for the processes proven to be the same: a GPU (by minor number)
    proves a pair when NVML ``listed`` one process on it and one local process maps it
    (``mappers``, :func:`node_mappers`). A pair another GPU contradicts is dropped."""
    pairs: set[tuple[int, int]] = set()
    for minor, pids in listed.items():
        hosts, locals_ = set(pids), mappers.get(minor, set())
        if len(hosts) == 1 and len(locals_) == 1:
            pairs.add((next(iter(hosts)), next(iter(locals_))))
    by_host: dict[int, set[int]] = {}
    by_local: dict[int, set[int]] = {}
    for host, local in pairs:
        by_host.setdefault(host, set()).add(local)
        by_local.setdefault(local, set()).add(host)
    return {
        host: local
        for host, local in pairs
        if len(by_host[host]) == 1 and len(by_local[local]) == 1
    }
