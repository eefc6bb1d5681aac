"""The device a user names (``--device cuda:1``), as one value: its kind and its index.

Torch-free, so that the commands, the app and the jobs' parent side read a device the way
the engine's child does: :meth:`Device.parse` is the one reader of a device's text, and
``str(device)`` its one spelling. A device travels (in a config, in an event) as that
text: :func:`plain` writes a record's devices so, :func:`parsed_fields` reads them back.
Whether a device is usable on this machine needs torch, and is the engine's to say.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["cpu", "cuda", "mps", "xpu"]
"""``cpu``; ``cuda``: an NVIDIA GPU, or an AMD one under a ROCm build of torch (it answers
to ``cuda`` too); ``mps``: an Apple GPU; ``xpu``: an Intel GPU."""
KINDS: tuple[Kind, ...] = ("cpu", "cuda", "mps", "xpu")
NUMBERED: tuple[Kind, ...] = ("cuda", "xpu")
"""Kinds of which a machine may have several, numbered by torch from 0 (``cuda:1``)."""
SPELLINGS = "cpu, cuda, cuda:N, mps, xpu or xpu:N"
"""How a device may be written, as an error says it."""

_TEXT = re.compile(r"(cpu|cuda|mps|xpu)(?::(\d+))?")


class DeviceError(ValueError):
    """A device that is not one, or cannot be used; ``str()`` is one line that says what to
    use instead."""


@dataclass(frozen=True, slots=True)
class Device:
    """A device as torch names it: a kind, and for a GPU of a numbered kind its index."""

    kind: Kind
    """``cpu``, ``cuda``, ``mps`` or ``xpu``."""
    index: int | None = None
    """Which GPU of a numbered kind (``cuda:1``); ``None`` for the CPU and MPS (one each),
    and for a plain ``cuda`` or ``xpu``: torch's current GPU (the first), or in a
    distributed job each rank's own."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise DeviceError(f"{self.kind!r} is not a kind of device: use {', '.join(KINDS)}")
        if self.index is not None and (self.kind not in NUMBERED or self.index < 0):
            raise DeviceError(f"{self.kind}:{self.index} is not a device: use {SPELLINGS}")

    @classmethod
    def parse(cls, text: str) -> Device:
        """Read a device as the tutorials and torch write it: ``cpu``, ``cuda``, ``cuda:N``,
        ``mps``, ``xpu`` or ``xpu:N``; also ``cpu:0`` and ``mps:0``, as torch names a tensor's
        device. Spaces around it are ignored.

        Raises:
            DeviceError: one line naming the spellings, with a guess where there is one
                (``'gpu0' is not a device: use ...; did you mean cuda:0?``).
        """
        if not isinstance(text, str):
            raise DeviceError(f"{text!r} is not a device: use {SPELLINGS}")
        spelled = text.strip()
        if not spelled:
            raise DeviceError(f"the device is empty: use {SPELLINGS}")
        match = _TEXT.fullmatch(spelled)
        if match is None:
            raise DeviceError(f"{text!r} is not a device: use {SPELLINGS}{_hint(spelled)}")
        kind = typing.cast(Kind, match.group(1))
        index = None if match.group(2) is None else int(match.group(2))
        if kind in NUMBERED or index is None:
            return cls(kind, index)
        if index != 0:
            one = "the CPU is one device, cpu" if kind == "cpu" else "a Mac has one GPU, mps"
            raise DeviceError(f"{spelled}: {one} (or {kind}:0)")
        return cls(kind)  # cpu:0 and mps:0, as torch names a tensor's device, are the same

    def __str__(self) -> str:
        """The device's one spelling: ``cpu``, ``mps``, ``cuda``, ``cuda:1``."""
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    def __format__(self, spec: str) -> str:
        """Its spelling, formatted as text is (``f"{device:<8}"``)."""
        return format(str(self), spec)

    @property
    def numbered(self) -> bool:
        """Whether it is a GPU of a kind torch numbers (``cuda``, ``xpu``)."""
        return self.kind in NUMBERED

    def indexed(self) -> Device:
        """The device with the index torch gives it: a plain ``cuda`` is ``cuda:0``, where a
        run starts (what ``torch.cuda.set_device`` needs); any other, itself."""
        return Device(self.kind, 0) if self.numbered and self.index is None else self


CPU = Device("cpu")


def _hint(text: str) -> str:
    """A guess at what a device that is not one meant, after ``; ``; empty without one."""
    lowered = text.lower()
    numbered = re.fullmatch(r"(?:cuda|gpu)(\d+)", lowered)
    if numbered:
        return f"; did you mean cuda:{numbered.group(1)}?"
    if lowered in {"gpu", "nvidia", "amd", "rocm", "hip"}:
        return "; an NVIDIA GPU (or an AMD one under ROCm) is cuda"
    if lowered == "intel":
        return "; an Intel GPU is xpu"
    if lowered in {"apple", "metal"}:
        return "; an Apple GPU is mps"
    if lowered != text and _TEXT.fullmatch(lowered):
        return f"; did you mean {lowered}?"
    return ""


# -- a device in JSON: its text ------------------------------------------------------------


def plain(value: Any) -> Any:
    """``value`` as ``json.dumps`` takes it: a dataclass as a dict of its fields (as
    ``dataclasses.asdict`` makes it, tuples kept), each :class:`Device` as its text."""
    if isinstance(value, Device):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {spec.name: plain(getattr(value, spec.name)) for spec in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return type(value)(plain(item) for item in value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


def parsed_fields(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (a dataclass's fields, read from JSON) with the text of each field that
    holds a device (``Device``, ``Device | None``, ``tuple[Device, ...]``) parsed.

    Raises:
        DeviceError: for a device that is not one.
    """
    readers = _device_readers(cls)
    return {
        name: readers[name](value) if name in readers else value for name, value in values.items()
    }


def _parse_or_none(text: Any) -> Device | None:
    return None if text is None else Device.parse(text)


def _parse_all(texts: Any) -> tuple[Device, ...]:
    if not isinstance(texts, list | tuple):
        raise DeviceError(f"{texts!r} is not a list of devices")
    return tuple(Device.parse(text) for text in texts)


@functools.cache
def _device_readers(cls: type) -> dict[str, Callable[[Any], Any]]:
    """Each of ``cls``'s fields that holds devices, with how to read its JSON value."""
    readers: dict[str, Callable[[Any], Any]] = {}
    for name, hint in typing.get_type_hints(cls).items():
        if hint == Device:
            readers[name] = Device.parse
        elif hint == Device | None:
            readers[name] = _parse_or_none
        elif hint == tuple[Device, ...]:
            readers[name] = _parse_all
    return readers
