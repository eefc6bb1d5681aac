"""The readings as JSON: ``gputui snapshot --json``, serve's ``/snapshot``, a recording's
frames and a fleet's hosts write them so, and read them back so.

The schema is a contract for scripts: top-level ``cpu``, ``gpus`` (NVIDIA's, then AMD's and
Intel's, each with its ``vendor``), ``nvml`` and ``mps`` (after ``host`` and ``at`` in
``--json`` and ``/snapshot``); a reading that is not supported is ``null``. Each reading's
keys are its dataclass's fields, in order, but for those marked
:data:`~gputui.telemetry.readings.NOT_IN_JSON`; a process's ``workload`` is written as its
own keys (``container``, ``pod``...).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import json
import math
import socket
import time
import types
import typing
from collections.abc import Callable, Hashable
from enum import Enum
from operator import attrgetter
from typing import Any, TypeVar

from gputui.format import ellipsize
from gputui.telemetry.polling import SOURCES
from gputui.telemetry.readings import (
    NO_DRM_GPUS,
    NOT_IN_JSON,
    CpuReading,
    DrmReading,
    GpuReading,
    MpsReading,
    NvmlReading,
    NvmlStatus,
    Snapshot,
    Vendor,
)


def snapshot_as_dict(snapshot: Snapshot, *, decimals: int | None = None) -> dict[str, Any]:
    """The snapshot as plain JSON-ready data (the module's schema), every number that is not
    whole rounded to ``decimals`` places as it is converted (``None``: every digit kept)."""
    return {
        "cpu": _reading_as_dict(snapshot.cpu, decimals),
        "gpus": [_reading_as_dict(gpu, decimals) for gpu in snapshot.gpus],
        "nvml": _reading_as_dict(snapshot.nvml.status, decimals),
        "mps": _reading_as_dict(snapshot.mps, decimals),
    }


def gpu_as_dict(gpu: GpuReading) -> dict[str, Any]:
    """One GPU as ``gputui snapshot --json`` writes it (a fleet's hosts list theirs so too)."""
    return _reading_as_dict(gpu)


JSON_DECIMALS = 3
"""Places ``--json`` and ``/snapshot`` round numbers to: ``93.75``, not ``93.75000000000445``."""


def render_snapshot_json(snapshot: Snapshot) -> str:
    """The snapshot as indented JSON text (no trailing newline), its numbers rounded to
    :data:`JSON_DECIMALS` places, after ``host`` (this machine's name) and ``at`` (when the
    host was read, in ISO 8601, UTC)."""
    read_at = time.time() - (time.monotonic() - snapshot.cpu.taken_at)
    data = {
        "host": socket.gethostname(),
        "at": dt.datetime.fromtimestamp(read_at, dt.UTC).isoformat(timespec="milliseconds"),
        **snapshot_as_dict(snapshot, decimals=JSON_DECIMALS),
    }
    return json.dumps(data, indent=2, allow_nan=False)


def _nested(hint: Any) -> list[Any]:
    """``hint`` and every type in it (``tuple[GpuProcess, ...] | None``: each of the four)."""
    return [hint, *(inner for arg in typing.get_args(hint) for inner in _nested(arg))]


def _schema(*tops: type) -> dict[type, tuple[str, ...]]:
    """Each reading type written (``tops`` and those their fields hold), with its keys."""
    keys: dict[type, tuple[str, ...]] = {}
    waiting = list(tops)
    while waiting:
        kind = waiting.pop()
        if kind not in keys:
            fields = dataclasses.fields(kind)
            keys[kind] = tuple(field.name for field in fields if NOT_IN_JSON not in field.metadata)
            hints = typing.get_type_hints(kind).values()
            waiting += [t for hint in hints for t in _nested(hint) if _is_reading(t)]
    return keys


def _is_reading(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


_KEYS = _schema(CpuReading, GpuReading, NvmlStatus, MpsReading)
"""The schema: each reading type's keys, in the order they are written."""
_FLATTENED = frozenset({"workload"})
"""Keys whose reading's keys are written in its place (a process's ``container``, ``pod``...)."""
_READ_KEYS = {kind: attrgetter(*keys) for kind, keys in _KEYS.items()}
"""Each reading type's values in :data:`_KEYS`'s order, read in one call."""
assert all(len(keys) > 1 for keys in _KEYS.values()), "attrgetter of one key: no tuple"


def _reading_as_dict(reading: object, decimals: int | None = None) -> dict[str, Any]:
    """One reading as JSON-ready data, with the keys :data:`_KEYS` names for its type: the
    values read in one call, only those not written as they are converted after (a recorder
    converts a reading a second; most of its values are whole numbers, text or ``None``)."""
    kind = type(reading)
    data = dict(zip(_KEYS[kind], _READ_KEYS[kind](reading), strict=True))
    for key, value in data.items():  # values replaced in place: the keys stay as they are
        kind = type(value)
        if kind is float:  # the commonest to convert: here, not through _json_value
            if not math.isfinite(value):
                data[key] = None
            elif decimals is not None and not value.is_integer():  # round() is slow
                data[key] = round(value, decimals)
        elif kind not in _AS_IS:
            data[key] = _json_value(value, decimals)
    for key in _FLATTENED:
        if key in data:
            data.update(data.pop(key))
    return data


def _json_value(value: Any, decimals: int | None = None) -> Any:
    """A reading's attribute as JSON-ready data: a sequence as a list, an enum as its value,
    a number that is not whole to ``decimals`` places where given."""
    kind = type(value)
    if kind in _AS_IS:  # most values: looked up by their exact type before any isinstance
        return value
    if isinstance(value, float):  # JSON has no NaN or infinity: such a reading is not known
        if not math.isfinite(value):
            return None
        return value if decimals is None or value.is_integer() else round(value, decimals)
    if isinstance(value, (tuple, list)):
        return [_json_value(item, decimals) for item in value]
    if kind in _KEYS:
        return _reading_as_dict(value, decimals)
    if isinstance(value, Enum):
        return value.value
    return value


AGES = "ages"
"""A recorded frame's member: how old each source's reading was when the frame was written
(seconds, by source), for those a beat or more old (a hung NVML); any other is as old as the
frame."""


def source_ages(snapshot: Snapshot, at: float, *, older_than: float) -> dict[str, float]:
    """How long before ``at`` each source's reading was taken, for those at least
    ``older_than`` old (:data:`AGES`); a reading not sampled again (MPS off Apple, no AMD or
    Intel GPU's placeholder) has none."""
    ages: dict[str, float] = {}
    for source in SOURCES:
        reading = getattr(snapshot, source)
        if reading is NO_DRM_GPUS or getattr(reading, "supported_platform", True) is False:
            continue
        age = at - reading.taken_at
        if age >= older_than:
            ages[source] = round(age, 3)
    return ages


_AS_IS: frozenset[type] = frozenset({int, str, bool, type(None)})
"""The exact types a reading's attribute is written as it is."""


NUMBER_MAX = 1e30
"""The largest magnitude a number read back from JSON may have: far above every reading (an
NVLink counter in bytes reaches ``2**74``), far below where ``float()`` overflows (``10**400``
parses as JSON). A float, so that a float reading compares with it at a float's speed."""


def json_number(value: Any) -> float | None:
    """``value`` as a float where it is a JSON number a reading can hold (finite, at most
    :data:`NUMBER_MAX` either way, not a bool); ``None`` for anything else."""
    kind = type(value)
    if kind is float:
        return value if -NUMBER_MAX <= value <= NUMBER_MAX else None  # (NaN fails both)
    if kind is int and -NUMBER_MAX <= value <= NUMBER_MAX:
        return float(value)
    return None


def snapshot_from_dict(data: Any, *, taken_at: float = 0.0) -> Snapshot:
    """The snapshot that :func:`snapshot_as_dict` wrote (a recorded frame), read back, every
    value checked against its field's type; a key an older gputui did not write takes its
    field's default, and ``taken_at`` (not written) is given here, less a source's age where
    the frame says it (:data:`AGES`).

    Raises:
        ValueError: a key is missing or a value is of the wrong kind; says which.
    """
    if not isinstance(data, dict):
        raise ValueError("the readings are not an object")
    missing = {"cpu", "gpus", "nvml", "mps"} - data.keys()
    if missing:
        raise ValueError(f"the readings have no {sorted(missing)[0]!r}")
    at = _taken_at(data.get(AGES, {}), taken_at)
    status = _reading_from(NvmlStatus, data["nvml"], "nvml")
    gpus = gpus_from_list(data["gpus"])
    nvidia = tuple(gpu for gpu in gpus if gpu.vendor is Vendor.NVIDIA)
    others = tuple(gpu for gpu in gpus if gpu.vendor is not Vendor.NVIDIA)
    return Snapshot(
        cpu=_reading_from(CpuReading, data["cpu"], "cpu", taken_at=at["cpu"]),
        nvml=NvmlReading(status=status, gpus=nvidia, taken_at=at["nvml"]),
        mps=_reading_from(MpsReading, data["mps"], "mps", taken_at=at["mps"]),
        drm=DrmReading(gpus=others, taken_at=at["drm"]),
    )


def gpus_from_list(data: Any, where: str = "gpus") -> tuple[GpuReading, ...]:
    """GPUs as :func:`gpu_as_dict` wrote them, read back and checked.

    Raises:
        ValueError: a value is of the wrong kind; says which, under ``where``.
    """
    gpus: tuple[GpuReading, ...] = _reader(tuple[GpuReading, ...])(data, where)
    return gpus


def _taken_at(ages: Any, taken_at: float) -> dict[str, float]:
    """When each source's reading was taken, by :data:`AGES` (``ages``) before ``taken_at``."""
    if not isinstance(ages, dict):
        raise ValueError(f"{AGES} is not an object")
    at = dict.fromkeys(SOURCES, taken_at)
    for source in SOURCES:
        if source in ages:
            age = json_number(ages[source])
            if age is None or age < 0:
                raise ValueError(f"{AGES}.{source} is not an age in seconds")
            at[source] = taken_at - age
    return at


_Reading = TypeVar("_Reading", bound=Hashable)
_Read = Callable[[Any, str], Any]
"""Reads a JSON value (at the place a path names) as one type; ``ValueError`` where it is not."""


def _reading_from(kind: type[_Reading], data: Any, where: str, **extra: object) -> _Reading:
    """A reading of ``kind`` from its JSON object, each key checked by its field's type."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} is not an object")
    keys, flattened, required = _plan(kind)
    values: dict[str, object] = {}
    for key, as_is, read in keys:  # a loop, not a call a key: a summary reads every frame
        if key in data:
            value = data[key]
            kind_of = type(value)
            if kind_of in as_is and (kind_of not in _NUMBERS or -NUMBER_MAX <= value <= NUMBER_MAX):
                values[key] = value
            else:
                values[key] = read(value, f"{where}.{key}")
        elif key in required:
            raise ValueError(f"{where} has no {key!r}")
    for key, read in flattened:
        values[key] = read(data, where)
    return kind(**values, **extra)


@functools.cache
def _plan(
    kind: type,
) -> tuple[tuple[tuple[str, frozenset[type], _Read], ...], tuple[tuple[str, _Read], ...], set[str]]:
    """How :func:`_reading_from` reads a type: each key with the types its value is taken
    as it is (a number in range) and its reader; the flattened keys; those required."""
    hints = typing.get_type_hints(kind)
    keys = _KEYS[kind]
    return (
        tuple(
            (key, _taken_as_is(hints[key]), _reader(hints[key]))
            for key in keys
            if key not in _FLATTENED
        ),
        tuple((key, _reader(hints[key])) for key in keys if key in _FLATTENED),
        {
            field.name
            for field in dataclasses.fields(kind)
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        },
    )


_NUMBERS: frozenset[type] = frozenset({int, float})


def _taken_as_is(hint: Any) -> frozenset[type]:
    """The exact types a value of a field of type ``hint`` is read as it is (a number in
    range): ``float`` and ``None`` for ``float | None``."""
    return _NUMBERS.union(_AS_IS).intersection(_arms(hint))


def _arms(hint: Any) -> tuple[Any, ...]:
    """The types a union names (``X | None``: both), else ``hint`` alone."""
    union = typing.get_origin(hint) in (types.UnionType, typing.Union)
    return typing.get_args(hint) if union else (hint,)


@functools.cache
def _reader(hint: Any) -> _Read:
    """How a field of type ``hint`` is read from JSON (worked out once a type).

    Raises:
        TypeError: a type no reading's field should have (one a new field brought).
    """
    arms = _arms(hint)
    if len(arms) > 1:
        reads = [_reader(arm) for arm in arms if arm is not type(None)]
        nullable = len(reads) < len(arms)

        def read_union(value: Any, where: str) -> Any:
            if value is None and nullable:
                return None
            for read in reads[:-1]:
                with contextlib.suppress(ValueError):
                    return read(value, where)
            return reads[-1](value, where)  # its error says why (``X | None``: X's)

        return read_union
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        items = [_reader(arg) for arg in args if arg is not Ellipsis]
        simple = _taken_as_is(args[0])

        def read_tuple(value: Any, where: str) -> tuple[Any, ...]:
            if not isinstance(value, list):
                raise ValueError(f"{where} is not a list")
            if args[-1] is Ellipsis:
                kinds = set(map(type, value))  # (a host's 224 cores: checked at once)
                if kinds <= simple and (
                    kinds.isdisjoint(_NUMBERS)
                    or (kinds <= _NUMBERS and sum(map(abs, value)) <= NUMBER_MAX)
                ):
                    return tuple(value)
                return tuple([items[0](item, f"{where}[{at}]") for at, item in enumerate(value)])
            if len(value) != len(items):
                raise ValueError(f"{where} is not a list of {len(items)}")
            return tuple(
                read(item, f"{where}[{at}]")
                for at, (read, item) in enumerate(zip(items, value, strict=True))
            )

        return read_tuple
    if hint in _KEYS:
        return functools.partial(_reading_from, hint)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return functools.partial(_member, hint)
    if hint in _AS_IS or hint is float:
        return functools.partial(_scalar, hint)
    raise TypeError(f"no JSON reader for {hint!r}")


def _scalar(hint: type, value: Any, where: str) -> Any:
    """``value`` as an ``int``, ``float``, ``str``, ``bool`` or ``None``."""
    if type(value) is hint and (hint not in _NUMBERS or json_number(value) is not None):
        return value
    if hint is float and (number := json_number(value)) is not None:
        return number
    raise _wrong(value, where)


def _member(hint: type[Enum], value: Any, where: str) -> Enum:
    try:
        return hint(value)
    except ValueError:
        raise _wrong(value, where) from None


def _wrong(value: Any, where: str) -> ValueError:
    shown = "a number out of range" if type(value) in _NUMBERS else repr(value)
    return ValueError(f"{where} is {ellipsize(shown, 40)}")
