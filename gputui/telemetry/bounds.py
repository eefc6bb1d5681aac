"""Which numbers a GPU's reading can hold: the one check of a GPU's numbers, for readings
from a driver (an NVML that answers ``2**64 - 1`` bytes), from another host and from a file
alike. A value no GPU can take reads ``None`` (``n/a``).

No Textual, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gputui.telemetry.readings import GpuReading


@dataclass(frozen=True, slots=True)
class Range:
    """The values a reading can take; any other is refused."""

    low: float
    high: float
    integer: bool = False
    """Only whole numbers (a P-state)."""

    def admits(self, value: float) -> bool:
        """Whether ``value`` is a finite number in range (of the right kind)."""
        if not self.low <= value <= self.high:  # NaN and the infinities included
            return False
        return not self.integer or value == int(value)

    def __str__(self) -> str:
        kind = "a whole number" if self.integer else "a number"
        return f"{kind} from {self.low:g} to {self.high:g}"


MAX_BYTES = 2.0**50
"""A PiB: more memory than any GPU (or process) has."""

NVLINK_RX = "nvlink_throughput.rx_bytes"
NVLINK_TX = "nvlink_throughput.tx_bytes"
"""The NVLink counters' readings, as ``gputui serve``'s series name them (parts of one field
of a reading, :class:`~gputui.telemetry.readings.NvlinkThroughput`)."""

RANGES: Mapping[str, Range] = {
    "utilization_percent": Range(0, 100),
    "memory_utilization_percent": Range(0, 100),
    "memory_used_bytes": Range(0, MAX_BYTES),
    "memory_total_bytes": Range(0, MAX_BYTES),
    "temperature_c": Range(-40, 150),
    "power_w": Range(0, 10_000),
    "power_limit_w": Range(0, 10_000),
    "energy_j": Range(0, 1e14),
    "sm_clock_mhz": Range(0, 10_000),
    "sm_clock_max_mhz": Range(0, 10_000),
    "memory_clock_mhz": Range(0, 100_000),
    "memory_clock_max_mhz": Range(0, 100_000),
    "fan_percent": Range(0, 200),  # NVML: "may exceed 100% in certain cases"
    "fan_rpm": Range(0, 100_000),
    "pcie_rx_bytes_per_s": Range(0, 1e12),
    "pcie_tx_bytes_per_s": Range(0, 1e12),
    "pcie_link_gen": Range(0, 16, integer=True),
    "pcie_link_gen_max": Range(0, 16, integer=True),
    "pcie_link_width_lanes": Range(0, 64, integer=True),
    "pcie_link_width_max_lanes": Range(0, 64, integer=True),
    "encoder_utilization_percent": Range(0, 100),
    "decoder_utilization_percent": Range(0, 100),
    "nvlink_links_active": Range(0, 64, integer=True),
    NVLINK_RX: Range(0, 2**64 * 1024, integer=True),
    NVLINK_TX: Range(0, 2**64 * 1024, integer=True),
    "performance_state": Range(0, 15, integer=True),
    "ecc_uncorrected_errors": Range(0, 2**53, integer=True),
    "remapped_rows_pending": Range(0, 1, integer=True),
}
"""What each of a GPU's readings can be, in gputui's units, whoever gives it: a driver (an
NVML that answers ``2**64 - 1`` bytes), an exporter, a file."""

PROCESS_MEMORY = Range(0, MAX_BYTES)
NVLINK_LINK = Range(0, RANGES["nvlink_links_active"].high - 1, integer=True)
"""An NVLink link's number (``gputui_gpu_nvlink_link_up``'s ``link``; a reading's
``nvlink_links_down``)."""


_CHECKED_FIELDS = tuple(
    (name, allowed.low, allowed.high, allowed.integer)
    for name, allowed in RANGES.items()
    if "." not in name
)
"""The fields of :data:`RANGES` that are a reading's own, as :func:`in_range` walks them."""
_CHECKED_PARTS = tuple(
    (name.partition("."), allowed) for name, allowed in RANGES.items() if "." in name
)
"""Those that are part of a field (``nvlink_throughput.rx_bytes``), split at the dot."""


def in_range(gpu: GpuReading) -> GpuReading:
    """``gpu`` with each value no GPU can take (:data:`RANGES`, a process's memory, an NVLink
    link's number) read as ``None`` (``n/a``): the one check of a GPU's numbers, for readings
    from a driver, from another host and from a file alike.

    Every NVML reading passes here once a sample: one in range is returned as it is (no
    copy), its values compared inline. An int is compared as it is, exactly (``float()`` of
    ``10**400`` overflows).
    """
    refused: dict[str, Any] = {}
    for name, low, high, whole in _CHECKED_FIELDS:
        value = getattr(gpu, name)
        if value is None or (low <= value <= high and (not whole or value == int(value))):
            continue  # (NaN fails the comparison)
        if isinstance(value, (int, float)):
            refused[name] = None
    for (top, _, part), allowed in _CHECKED_PARTS:
        holder = refused.get(top, getattr(gpu, top))
        value = getattr(holder, part, None)
        if isinstance(value, (int, float)) and not allowed.admits(value):
            refused[top] = replace(holder, **{part: None})
    down = gpu.nvlink_links_down
    if down and not all(NVLINK_LINK.admits(link) for link in down):
        refused["nvlink_links_down"] = None
    if gpu.processes and any(
        p.gpu_memory_bytes is not None and not PROCESS_MEMORY.admits(p.gpu_memory_bytes)
        for p in gpu.processes
    ):
        refused["processes"] = tuple(
            p
            if p.gpu_memory_bytes is None or PROCESS_MEMORY.admits(p.gpu_memory_bytes)
            else replace(p, gpu_memory_bytes=None)
            for p in gpu.processes
        )
    return replace(gpu, **refused) if refused else gpu
