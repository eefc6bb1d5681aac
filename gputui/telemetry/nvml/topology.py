"""The GPU-to-GPU topology, as ``nvidia-smi topo -m`` shows it: each pair's closest common
PCIe ancestor (``nvmlDeviceGetTopologyCommonAncestor``) and the NVLink links between them
(each link's far end, ``nvmlDeviceGetNvLinkRemotePciInfo``)."""

from __future__ import annotations

from collections.abc import Sequence

from gputui.telemetry.nvml.calls import GpuLost
from gputui.telemetry.nvml.queries import PAST_END, Queries, TrackedGpu, text
from gputui.telemetry.readings import GpuPath, GpuTopology

ANCESTORS = {0: "BRD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
"""NVML's ``nvmlGpuTopologyLevel_t`` in ``nvidia-smi topo -m``'s words (``BRD``: NVML's
INTERNAL, two GPUs on one board)."""
SELF = GpuPath(ancestor="X", nvlinks=None)
"""A GPU's path to itself."""


def read_topology(queries: Queries, gpus: Sequence[TrackedGpu]) -> GpuTopology:
    """Every pair of ``gpus`` that answers: their common ancestor and NVLink links.

    A link whose far end is no GPU here is taken for an NVSwitch (an HGX board's): two GPUs
    both on switches share as many links as the one with fewer has. What NVML does not
    answer is ``None``; a GPU lost meanwhile is left out.

    Raises:
        Stopped: The sampler is stopping (from ``queries``' calls).
    """
    shown: list[TrackedGpu] = []
    far_ends: dict[int, list[str] | None] = {}
    for gpu in gpus:
        if gpu.handle is None or gpu.lost_at is not None:
            continue
        try:
            if gpu.bus_id is None:
                bus_id = queries.ask(gpu, "bus_id")
                gpu.bus_id = text(bus_id) if bus_id is not None else None
            far_ends[gpu.index] = _far_ends(queries, gpu)
        except GpuLost:
            continue
        shown.append(gpu)
    bus_ids = {_bus(gpu.bus_id) for gpu in shown if gpu.bus_id is not None}
    paths = []
    for gpu in shown:
        row = []
        for other in shown:
            if other is gpu:
                row.append(SELF)
                continue
            try:
                level = queries.ask(gpu, "topology", other.handle)
            except GpuLost:
                level = None
            ancestor = ANCESTORS.get(int(level), str(level)) if level is not None else None
            nvlinks = _nvlinks(far_ends[gpu.index], far_ends[other.index], other, bus_ids)
            row.append(GpuPath(ancestor=ancestor, nvlinks=nvlinks))
        paths.append(tuple(row))
    return GpuTopology(gpus=tuple(gpu.index for gpu in shown), paths=tuple(paths))


def _far_ends(queries: Queries, gpu: TrackedGpu) -> list[str] | None:
    """The bus id at the far end of each of ``gpu``'s NVLink links that answers; empty
    without NVLink, ``None`` where NVML will not say (no such function, an error)."""
    ends: list[str] = []
    for link in range(queries.nvlink_max_links):
        bus_id = queries.ask(gpu, "nvlink_remote", link, past_end=PAST_END if link else None)
        if isinstance(bus_id, int):  # one past its last link
            break
        if bus_id is None:
            return [] if "nvlink_remote" in gpu.unsupported and link == 0 else None
        ends.append(_bus(text(bus_id)))
    return ends


def _nvlinks(
    mine: list[str] | None, theirs: list[str] | None, other: TrackedGpu, bus_ids: set[str]
) -> int | None:
    if mine is None or theirs is None:
        return None
    direct = sum(end == _bus(other.bus_id or "") for end in mine)
    switched = min(
        sum(end not in bus_ids for end in mine), sum(end not in bus_ids for end in theirs)
    )
    return direct + switched


def _bus(bus_id: str) -> str:
    """A PCI bus id as both NVML structs spell it (``00000000:18:00.0``), compared alike."""
    return bus_id.upper()
