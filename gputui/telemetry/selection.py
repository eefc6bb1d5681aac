"""``--only``: the GPUs the monitor shows, by NVML index or UUID, as nvitop's ``--only``
(NVIDIA's alone: the AMD and Intel GPUs are not shown beside them)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TypeVar

from gputui.telemetry.readings import DrmReading, GpuReading, NvmlReading, Vendor

ReadingT = TypeVar("ReadingT", NvmlReading, DrmReading)

UUID_PREFIXES = ("GPU-", "MIG-")


class SelectionError(ValueError):
    """``--only`` names no GPU the way NVML does; the message says what to write."""


@dataclass(frozen=True, slots=True)
class GpuSelection:
    """Some GPUs: NVML indexes (``nvidia-smi``'s numbers), or UUIDs, a prefix being enough
    (``GPU-5f0c``), as ``CUDA_VISIBLE_DEVICES`` takes them."""

    indexes: frozenset[int]
    uuids: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> GpuSelection:
        """``0,2`` or ``GPU-5f0c,GPU-77aa``.

        Raises:
            SelectionError: an empty entry, or one that is neither a number nor a UUID.
        """
        indexes: set[int] = set()
        uuids: list[str] = []
        for entry in (part.strip() for part in text.split(",")):
            if entry.isdecimal() and len(entry) <= 4:
                indexes.add(int(entry))
            elif entry.startswith(UUID_PREFIXES) and len(entry) > 4:
                uuids.append(entry)
            else:
                shown = entry if len(entry) <= 20 else entry[:17] + "..."
                raise SelectionError(
                    f"{shown!r} is not a GPU: give NVML indexes or UUIDs, e.g. --only 0,2"
                )
        return cls(frozenset(indexes), tuple(uuids))

    def keeps(self, gpu: GpuReading) -> bool:
        """Whether ``gpu`` is one of these (NVIDIA GPUs alone are named so)."""
        if gpu.vendor is not Vendor.NVIDIA:
            return False
        return gpu.index in self.indexes or any(
            gpu.uuid is not None and gpu.uuid.startswith(uuid) for uuid in self.uuids
        )

    def not_here(self, reading: NvmlReading) -> str | None:
        """Why the monitor cannot show these GPUs, in one line (``no GPU 7 here (0-3)``), when
        NVML lists GPUs and some of these are not among them; else ``None`` (NVML listing
        none, the monitor says why)."""
        here = sorted(gpu.index for gpu in reading.gpus)
        uuids = [gpu.uuid for gpu in reading.gpus]  # None: not read (a hung GPU) may be it
        missing = [str(i) for i in sorted(self.indexes) if i not in here] + [
            wanted
            for wanted in self.uuids
            if not any(uuid is None or uuid.startswith(wanted) for uuid in uuids)
        ]
        if not here or not missing:
            return None
        listed = f"{here[0]}-{here[-1]}" if len(here) > 1 else str(here[0])
        return f"no GPU {', '.join(missing)} here ({listed})"

    def of(self, reading: ReadingT) -> ReadingT:
        """``reading`` with only these GPUs (the rest are not shown, nor counted)."""
        return dataclasses.replace(reading, gpus=tuple(g for g in reading.gpus if self.keeps(g)))
