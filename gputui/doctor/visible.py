"""``CUDA_VISIBLE_DEVICES``, read the way torch and the CUDA driver read it.

The rules (torch's ``torch.cuda._parse_visible_devices``, which mirrors the driver):

- Unset: every GPU is visible. Set but empty: none is.
- A comma list of indexes (``0,2``) or of UUIDs (``GPU-...`` or ``MIG-...``, a
  unique prefix is enough); the kind of the first entry decides the kind of all.
- An index is read like C's ``strtoul``: ``1gpu`` reads as 1. The list stops at
  the first entry that is negative (``-1``), not a number, of the other kind, or
  (checked against the GPUs NVML reports) names a GPU that does not exist.
- An entry listed twice hides every GPU.

:func:`parse_visible_devices` is pure: it takes the variable's value and the
UUIDs NVML reports, so every case is tested without a GPU.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

UUID_PREFIXES = ("GPU-", "MIG-")
"""How a UUID entry starts: a whole GPU, or a MIG slice of one."""


@dataclass(frozen=True, slots=True)
class VisibleDevices:
    """What ``CUDA_VISIBLE_DEVICES`` leaves visible, and the mistakes in it."""

    raw: str | None
    """The variable as set; ``None`` when unset."""
    kept: tuple[str, ...]
    """The entries CUDA uses, as written, in order (``cuda:0`` is the first)."""
    dropped: tuple[str, ...]
    """The entries CUDA ignores: the one that stopped the list and all after it."""
    visible: tuple[int, ...] | None
    """NVML indexes of the visible GPUs, in ``cuda:N`` order; ``None`` when unknown
    (NVML unavailable, or MIG slices, which NVML's GPU list does not name)."""
    problems: tuple[str, ...]
    """Mistakes, one sentence each: a GPU that does not exist, an entry that is not one."""
    mig: bool = False
    """True when the entries are MIG slice UUIDs."""

    @property
    def is_set(self) -> bool:
        """True when the variable is set at all (even to the empty string)."""
        return self.raw is not None

    @property
    def hides_all(self) -> bool:
        """True when no GPU is left visible."""
        return self.raw is not None and not self.kept


def parse_visible_devices(value: str | None, uuids: Sequence[str | None] | None) -> VisibleDevices:
    """Read ``CUDA_VISIBLE_DEVICES`` (``value``; ``None``: unset) against ``uuids``, each
    GPU's UUID in NVML index order (``None``: NVML is unavailable, so only the syntax is
    checked)."""
    count = None if uuids is None else len(uuids)
    if value is None:
        visible = None if count is None else tuple(range(count))
        return VisibleDevices(None, (), (), visible, ())
    entries = value.split(",")
    if not value.strip():
        return VisibleDevices(value, (), (), (), ())
    if value.startswith(UUID_PREFIXES):
        return _parse_uuids(value, entries, uuids)
    return _parse_indexes(value, entries, count)


def _strtoul(text: str) -> int:
    """The number ``text`` starts with, as the driver reads it; -1 when it starts with none."""
    digits = 0
    for position, char in enumerate(text):
        if char.isdigit() or (position == 0 and char in "+-"):
            digits = position + 1
        else:
            break
    try:
        return int(text[:digits]) if digits else -1
    except ValueError:  # a lone sign
        return -1


def _parse_indexes(value: str, entries: list[str], count: int | None) -> VisibleDevices:
    # First the list as written (as torch parses it), then trimmed to the GPUs that exist.
    kept: list[str] = []
    indexes: list[int] = []
    problems: list[str] = []
    dropped: list[str] = []
    for position, entry in enumerate(entries):
        text = entry.strip()
        index = _strtoul(text)
        if index in indexes:
            problems.append(f"GPU {index} is listed twice, which hides every GPU")
            return VisibleDevices(value, (), tuple(entries), (), tuple(problems))
        if index < 0:
            reason = _not_an_index(text)
            if reason is not None:  # else -1 or another negative: the usual way to hide the rest
                problems.append(f"{reason} ends the list: it and what follows are ignored")
            dropped = entries[position:]
            break
        if not text.lstrip("+").isdigit():
            problems.append(f"{text!r} reads as {index}; write {index}")
        kept.append(text)
        indexes.append(index)
    if count is None:
        return VisibleDevices(value, tuple(kept), tuple(dropped), None, tuple(problems))
    for position, index in enumerate(indexes):
        if index >= count:
            problems.append(
                f"{kept[position]!r} names a GPU that does not exist ({_have(count)}); "
                "it ends the list: it and what follows are ignored"
            )
            dropped = [*kept[position:], *dropped]
            kept, indexes = kept[:position], indexes[:position]
            break
    return VisibleDevices(value, tuple(kept), tuple(dropped), tuple(indexes), tuple(problems))


def _not_an_index(text: str) -> str | None:
    """Why an entry that reads as no index is a mistake; ``None`` for a plain negative."""
    if re.fullmatch(r"-\d+", text):
        return None
    if not text:
        return "An empty entry"
    if text.startswith(UUID_PREFIXES):
        return f"{text!r}, a UUID after indexes (write all indexes or all UUIDs),"
    return f"{text!r}, which is not a GPU index or UUID,"


def _parse_uuids(
    value: str, entries: list[str], uuids: Sequence[str | None] | None
) -> VisibleDevices:
    prefix = value[:4]
    mig = prefix == "MIG-"
    kept: list[str] = []
    problems: list[str] = []
    dropped: list[str] = []
    for position, entry in enumerate(entries):
        if entry in kept:
            problems.append(f"{entry} is listed twice, which hides every GPU")
            return VisibleDevices(value, (), tuple(entries), (), tuple(problems), mig)
        if not entry.startswith(prefix):
            if not entry.strip():
                what = "An empty entry"
            elif entry.strip().startswith(prefix):
                what = f"{entry!r}, which starts with a space,"
            else:
                what = f"{entry!r}, not a {prefix} UUID,"
            problems.append(f"{what} ends the list: it and what follows are ignored")
            dropped = entries[position:]
            break
        kept.append(entry)
    if mig or uuids is None:
        return VisibleDevices(value, tuple(kept), tuple(dropped), None, tuple(problems), mig)

    indexes: list[int] = []
    for position, entry in enumerate(kept):
        matches = [i for i, uuid in enumerate(uuids) if uuid is not None and uuid.startswith(entry)]
        stop = None
        if not matches:
            stop = f"{entry} matches no GPU NVML reports"
        elif len(matches) > 1:
            stop = f"{entry} matches {len(matches)} GPUs (write more of the UUID)"
        elif matches[0] in indexes:
            problems.append(f"{entry} names GPU {matches[0]} again, which hides every GPU")
            return VisibleDevices(value, (), tuple(entries), (), tuple(problems))
        if stop is not None:
            problems.append(f"{stop}; it ends the list: it and what follows are ignored")
            dropped = [*kept[position:], *dropped]
            return VisibleDevices(
                value, tuple(kept[:position]), tuple(dropped), tuple(indexes), tuple(problems)
            )
        indexes.append(matches[0])
    return VisibleDevices(value, tuple(kept), tuple(dropped), tuple(indexes), tuple(problems))


def _have(count: int) -> str:
    if count == 0:
        return "NVML reports no GPU"
    if count == 1:
        return "NVML reports 1 GPU, index 0"
    return f"NVML reports {count} GPUs, indexes 0 to {count - 1}"
