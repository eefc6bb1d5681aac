"""A GPU's name from its PCI ids, for a card whose driver gives none in sysfs.

libdrm's ``amdgpu.ids`` names AMD cards as they are sold (``744C, C8, AMD Radeon RX 7900
XTX``: device id and revision, since one chip is sold under several names); ``pci.ids`` (the
hwdata package) names every vendor's chips (``e20b  Battlemage G21 [Arc B580]``), the part
in brackets being the product. Each table is read once, when a card first needs it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from gputui.telemetry.readings import VENDOR_NAMES, Vendor

log = logging.getLogger(__name__)

AMDGPU_IDS = (Path("/usr/share/libdrm/amdgpu.ids"), Path("/opt/amdgpu/share/libdrm/amdgpu.ids"))
"""Where libdrm installs its table of AMD product names."""
PCI_IDS = (
    Path("/usr/share/hwdata/pci.ids"),
    Path("/usr/share/misc/pci.ids"),
    Path("/usr/share/pci.ids"),
)
"""Where the PCI id database is installed (hwdata, pciutils)."""


class PciNames:
    """Product names by PCI id, from whichever of the tables is installed."""

    def __init__(
        self, amdgpu_ids: Sequence[Path] = AMDGPU_IDS, pci_ids: Sequence[Path] = PCI_IDS
    ) -> None:
        """Look in the first of the candidates for each table that exists."""
        self._amdgpu_ids = amdgpu_ids
        self._pci_ids = pci_ids
        self._amd: dict[tuple[int, int], str] | None = None
        self._chips: dict[int, dict[int, str]] = {}

    def name(self, vendor: Vendor, vendor_id: int, device_id: int, revision: int | None) -> str:
        """The card's product name (``AMD Radeon RX 7900 XTX``), or its vendor and PCI ids
        where no table names it (``AMD GPU 1002:744c``)."""
        if vendor is Vendor.AMD and revision is not None:
            name = self._amd_names().get((device_id, revision))
            if name:
                return name
        chip = self._chip_names(vendor_id).get(device_id)
        brand = VENDOR_NAMES[vendor]
        if chip:
            product = chip.rpartition("[")[2].rstrip("]") if chip.endswith("]") else chip
            return product if product.startswith(brand) else f"{brand} {product}"
        return f"{brand} GPU {vendor_id:04x}:{device_id:04x}"

    def _amd_names(self) -> dict[tuple[int, int], str]:
        if self._amd is None:
            self._amd = {}
            for line in _lines(self._amdgpu_ids):
                parts = [part.strip() for part in line.split(",", 2)]
                if len(parts) == 3 and all(parts):
                    try:
                        self._amd[int(parts[0], 16), int(parts[1], 16)] = parts[2]
                    except ValueError:
                        continue
        return self._amd

    def _chip_names(self, vendor_id: int) -> dict[int, str]:
        """The vendor's chips in ``pci.ids``: its section alone is kept."""
        if vendor_id not in self._chips:
            chips = self._chips[vendor_id] = {}
            inside = False
            for line in _lines(self._pci_ids):
                if not line.startswith("\t"):
                    if inside:
                        break  # the next vendor: the section is over
                    inside = line[:4].lower() == f"{vendor_id:04x}"
                elif inside and not line.startswith("\t\t"):
                    device, _, name = line.strip().partition(" ")
                    try:
                        chips[int(device, 16)] = name.strip()
                    except ValueError:
                        continue
        return self._chips[vendor_id]


def _lines(candidates: Sequence[Path]) -> list[str]:
    """The lines of the first candidate that can be read, comments and blanks left out."""
    for path in candidates:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return []
