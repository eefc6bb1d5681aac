"""PCI bus ids as torch, NVML and sysfs give them."""

from __future__ import annotations

import uuid

import pytest

from gputui.pci import canonical_bus_id, intel_uuid_bus_id, pci_bus_id, uuid_bytes


def test_torch_s_numbers_read_as_sysfs_writes_the_bus_id() -> None:
    assert pci_bus_id(0, 0xC4, 0) == "0000:c4:00.0"
    assert pci_bus_id(0x10, 3, 0x1F, 1) == "0010:03:1f.1"


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("00000000:17:00.0", "0000:17:00.0"),  # NVML's
        ("0000:C4:00.0", "0000:c4:00.0"),
        ("03:00.0", "0000:03:00.0"),  # lspci's, without the domain
        ("not a bus id", None),
        ("", None),
        (None, None),
    ],
)
def test_every_spelling_reads_as_sysfs_s(text: str | None, canonical: str | None) -> None:
    assert canonical_bus_id(text) == canonical


def intel_uuid(domain: int, bus: int, device: int, function: int) -> bytes:
    """A Level Zero UUID as Intel's compute runtime builds it (an Arc B580, device e20b)."""
    return (
        (0x8086).to_bytes(2, "little")
        + (0xE20B).to_bytes(2, "little")
        + (0).to_bytes(2, "little")
        + domain.to_bytes(2, "little")
        + bytes([bus, device, function, 0, 0, 0, 0, 0])
    )


def test_an_intel_uuid_holds_the_gpu_s_bus_id() -> None:
    raw = intel_uuid(0, 0x03, 0, 0)
    assert intel_uuid_bus_id(raw) == "0000:03:00.0"
    assert intel_uuid_bus_id(intel_uuid(1, 0x4D, 2, 0)) == "0001:4d:02.0"
    assert intel_uuid_bus_id(bytes(16)) is None  # not Intel's layout
    assert intel_uuid_bus_id(raw[:8]) is None


def test_a_uuid_reads_however_torch_gives_it() -> None:
    raw = intel_uuid(0, 0x03, 0, 0)
    assert uuid_bytes(raw) == raw
    assert uuid_bytes(list(raw)) == raw
    assert uuid_bytes(str(uuid.UUID(bytes=raw))) == raw
    assert uuid_bytes("GPU-" + raw.hex()) == raw
    assert uuid_bytes([300] * 16) is None
    assert uuid_bytes(None) is None
    assert uuid_bytes("1234") is None
