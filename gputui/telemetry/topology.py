"""The GPU topology as ``gputui topo`` prints it: a matrix as ``nvidia-smi topo -m`` draws
it, with its legend, or JSON. The monitor's topology screen draws the same lines."""

from __future__ import annotations

import json
from typing import Any

from gputui.telemetry.readings import GpuTopology

LEGEND = (
    ("X", "the GPU itself"),
    ("NV#", "joined by # NVLink links (direct, or through NVSwitches)"),
    ("PIX", "through one PCIe switch at most"),
    ("PXB", "through several PCIe switches, not a host bridge"),
    ("PHB", "through a PCIe host bridge (a CPU)"),
    ("NODE", "through the host bridges of one NUMA node"),
    ("SYS", "across NUMA nodes, through the CPUs' interconnect (UPI, xGMI)"),
    ("BRD", "on one board (a card with two GPUs)"),
    ("n/a", "NVML does not say"),
)
"""Each word of the matrix, and what it means."""


def topology_matrix(topology: GpuTopology) -> list[str]:
    """The matrix: a header of GPUs, then one row each (empty without GPUs)."""
    if not topology.gpus:
        return []
    names = [f"GPU{index}" for index in topology.gpus]
    cells = [[path.label for path in row] for row in topology.paths]
    width = max(len(text) for text in [*names, *(cell for row in cells for cell in row)]) + 2
    head = " " * width + "".join(name.center(width) for name in names)
    rows = [
        name.ljust(width) + "".join(cell.center(width) for cell in row)
        for name, row in zip(names, cells, strict=True)
    ]
    return [head.rstrip(), *(row.rstrip() for row in rows)]


def legend_lines() -> list[str]:
    """The legend, a word a line."""
    return [f"  {word:<4} = {meaning}" for word, meaning in LEGEND]


def render_topology_text(topology: GpuTopology) -> str:
    """The matrix and its legend, or the sentence that says why there is none."""
    if topology.error is not None:
        return topology.error
    return "\n".join([*topology_matrix(topology), "", "Legend:", *legend_lines()])


def topology_as_dict(topology: GpuTopology) -> dict[str, Any]:
    """The topology as JSON-ready data: the GPUs, the matrix's words, and each ordered
    pair's common ancestor and NVLink links (``null`` where NVML does not say)."""
    pairs = [
        {"gpu": gpu, "peer": peer, "ancestor": path.ancestor, "nvlinks": path.nvlinks}
        for gpu, row in zip(topology.gpus, topology.paths, strict=True)
        for peer, path in zip(topology.gpus, row, strict=True)
        if peer != gpu
    ]
    return {
        "gpus": list(topology.gpus),
        "matrix": [[path.label for path in row] for row in topology.paths],
        "pairs": pairs,
        "error": topology.error,
    }


def render_topology_json(topology: GpuTopology) -> str:
    """:func:`topology_as_dict` as indented JSON text."""
    return json.dumps(topology_as_dict(topology), indent=2)
