"""PCI bus ids, the one name torch, NVML and sysfs share for a GPU.

torch gives a CUDA or ROCm device's ``pci_domain_id``, ``pci_bus_id`` and ``pci_device_id``
as numbers; an Intel GPU's through its Level Zero UUID (:func:`intel_uuid_bus_id`); NVML
writes ``00000000:17:00.0`` and sysfs ``0000:17:00.0``. :func:`canonical_bus_id` reads each
as sysfs writes it, so that a trainer's GPU is found among the monitor's by its bus id where
their UUIDs differ (an AMD or Intel GPU's).
"""

from __future__ import annotations

import re

_BUS_ID = re.compile(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])")
INTEL_VENDOR = 0x8086


def pci_bus_id(domain: int, bus: int, device: int, function: int = 0) -> str:
    """``0000:03:00.0``, as sysfs writes it (torch's own ``numa`` binding does the same)."""
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


def canonical_bus_id(text: str | None) -> str | None:
    """A bus id as sysfs writes it (``00000000:17:00.0`` -> ``0000:17:00.0``); ``None`` for
    ``None`` or text that is none."""
    match = _BUS_ID.fullmatch((text or "").strip().lower())
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return pci_bus_id(int(domain or "0", 16), int(bus, 16), int(device, 16), int(function))


def uuid_bytes(value: object) -> bytes | None:
    """A device UUID's 16 bytes, however torch gives it (bytes, a list of numbers, or hex
    text with dashes); ``None`` for anything else."""
    if isinstance(value, bytes | bytearray):
        raw = bytes(value)
    elif isinstance(value, list | tuple):
        try:
            raw = bytes(value)
        except (TypeError, ValueError):
            return None
    else:
        digits = str(value).strip().lower().removeprefix("gpu-").replace("-", "")
        try:
            raw = bytes.fromhex(digits)
        except ValueError:
            return None
    return raw if len(raw) == 16 else None


def intel_uuid_bus_id(uuid: bytes) -> str | None:
    """The bus id an Intel GPU's Level Zero UUID holds; ``None`` for a UUID of another layout.

    Intel's compute runtime builds it from the PCI address (``generateUuidFromPciBusInfo``):
    vendor, device and revision ids and the domain, 2 bytes each little-endian, then bus,
    device and function, a byte each.
    """
    if len(uuid) != 16 or int.from_bytes(uuid[0:2], "little") != INTEL_VENDOR:
        return None
    domain = int.from_bytes(uuid[6:8], "little")
    return pci_bus_id(domain, uuid[8], uuid[9], uuid[10] & 0x7)
