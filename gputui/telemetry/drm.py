"""Every AMD and Intel GPU, read from sysfs: the sampler beside NVML's.

Each sample lists ``class/drm`` (one directory read), reads each card it knows with its own
reader (:mod:`gputui.telemetry.amdgpu`, :mod:`gputui.telemetry.intel`) and builds a reader
for a card it has not seen. A card keeps its index for as long as the sampler lives; one
that goes away, or that its driver says is gone mid-read, is kept as ``lost`` with the
reason, as NVML's lost GPUs are.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from gputui.telemetry.amdgpu import AmdgpuCard
from gputui.telemetry.bounds import in_range
from gputui.telemetry.drm_clients import DrmClientSampler
from gputui.telemetry.intel import IntelCard
from gputui.telemetry.pci_names import PciNames
from gputui.telemetry.readings import DrmReading, GpuProcess, GpuReading, Vendor
from gputui.telemetry.sysfs import (
    CardList,
    DeviceGone,
    DrmCard,
    SysfsCard,
    SysfsFiles,
    on_sysfs,
    sysfs_root,
)

GONE = (
    "its card is gone from /sys/class/drm (unplugged, its driver unloaded, or it fell off "
    "the bus); check `dmesg`"
)
"""Why a card that was read before is lost: no longer listed, or its folder went away while
it was read."""
DRIVER_SAYS_GONE = "the {driver} driver says the device is gone ({why}); check `dmesg`"
"""Why a card is lost whose driver answered ENODEV."""

_VENDOR_ORDER = {Vendor.AMD: 0, Vendor.INTEL: 1}


class DrmSampler:
    """Samples every AMD and Intel GPU under a sysfs root (``GPUTUI_SYSFS``, else ``/sys``)."""

    def __init__(
        self,
        sysfs: Path | None = None,
        *,
        procfs: Path | None = None,
        names: PciNames | None = None,
        clock: Callable[[], float] = time.monotonic,
        keep_open: bool | None = None,
    ) -> None:
        """Find nothing yet: the first sample lists the cards.

        Args:
            sysfs: The sysfs root (default: :func:`sysfs_root`).
            procfs: The procfs whose DRM clients are the cards' processes.
            names: Names the cards whose driver gives none (default: the system's tables).
            clock: Dates the samples (Intel's utilization and power are rates over it).
            keep_open: Keep the files read every sample open (default: on a real sysfs).
        """
        self._names = names if names is not None else PciNames()
        self._clock = clock
        root = sysfs if sysfs is not None else sysfs_root()
        self._files = SysfsFiles(keep_open=on_sysfs(root) if keep_open is None else keep_open)
        self._cards = CardList(root, self._files)
        self._readers: dict[str, SysfsCard] = {}
        self._procfs = procfs
        self._clients: DrmClientSampler | None = None
        """Made with the first card: a box without AMD or Intel GPUs sweeps no fdinfo."""

    def never_blocks(self) -> bool:
        """While no card is known a sample lists the cards' links and nothing else (a card
        that appears is read in that sample), so it may run on the caller's thread."""
        return not self._readers

    def sample(self) -> DrmReading:
        """Read every card once; never raises for what a card's files hold."""
        cards = self._cards.cards()
        listed = {card.bus_id for card in cards}
        for card in cards:
            reader = self._readers.get(card.bus_id)
            if reader is None or reader.card != card:  # new, or back under a new node
                index = reader.identity.index if reader else self._next_index(card.vendor)
                if reader is not None:
                    self._files.close_under(reader.card.path)
                try:
                    self._readers[card.bus_id] = self._reader(card, index)
                except DeviceGone:  # gone as it came: lost if it was known, else not yet seen
                    listed.discard(card.bus_id)
        processes = self._processes()
        readings = []
        for bus_id, reader in sorted(self._readers.items(), key=_order):
            if bus_id not in listed:
                self._files.close_under(reader.card.path)
                readings.append(reader.identity.lost(GONE))
                continue
            readings.append(in_range(self._read(reader, processes.get(bus_id))))
        return DrmReading(gpus=tuple(readings), taken_at=self._clock())

    def _read(self, reader: SysfsCard, processes: tuple[GpuProcess, ...] | None) -> GpuReading:
        """The card's reading, or its identity, ``lost`` and why when it went away."""
        files, card = self._files, reader.card
        try:
            reading = reader.read(self._clock(), processes)
        except DeviceGone as gone:
            files.close_under(card.path)
            if not os.path.isdir(card.device):
                return reader.identity.lost(GONE)
            return reader.identity.lost(DRIVER_SAYS_GONE.format(driver=card.driver, why=gone))
        # a folder gone mid-read reads n/a file by file, not ENODEV: look whether it went
        if not os.path.isdir(card.device):
            files.close_under(card.path)
            return reader.identity.lost(GONE)
        return reading

    def close(self) -> None:
        """Close the files kept open between samples."""
        self._files.close()

    def _processes(self) -> Mapping[str, tuple[GpuProcess, ...]]:
        """Each GPU's processes by PCI bus id (lowercase, ``0000:03:00.0``), from the DRM
        clients of ``/proc/*/fdinfo``; a GPU no process uses has none."""
        if not self._readers:
            return {}
        if self._clients is None:
            self._clients = DrmClientSampler(self._procfs)
        integrated = frozenset(bus for bus, reader in self._readers.items() if reader.integrated)
        found = self._clients.sample(integrated)
        return {bus_id: found.get(bus_id, ()) for bus_id in self._readers}

    def _next_index(self, vendor: Vendor) -> int:
        return sum(reader.identity.vendor is vendor for reader in self._readers.values())

    def _reader(self, card: DrmCard, index: int) -> SysfsCard:
        if card.vendor is Vendor.AMD:
            return AmdgpuCard(card, index, self._files, self._names)
        return IntelCard(card, index, self._files, self._names)


def _order(item: tuple[str, SysfsCard]) -> tuple[int, int]:
    identity = item[1].identity
    return (_VENDOR_ORDER.get(identity.vendor, 9), identity.index)
