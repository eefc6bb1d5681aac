"""The recording format: a header line, then one frame a line, each either a whole reading
(``full``) or what changed since the last whole one (``delta``). README.md ("The recording
format") describes it for other tools; this module is its one implementation.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputui.format import ellipsize
from gputui.telemetry.snapshot import JSON_DECIMALS, json_number

FORMAT_VERSION = 1
"""The version this gputui writes and the newest it reads."""
HEADER_KEY = "gputui_recording"
"""The header's first member: its value is the format version."""
INDEX_KEY = "gputui_recording_index"
"""An index file's header member: its value is the format version."""
HOST = "host"
"""A recording of one machine: each frame is ``gputui snapshot --json``'s readings."""
FLEET = "fleet"
"""A recording of a fleet: each frame is ``gputui snapshot --hosts ... --json``'s hosts."""
KINDS = (HOST, FLEET)
"""The kinds of recording this gputui reads; a header without ``kind`` is a host's."""
FULL_EVERY = 60
"""A whole reading every this many frames (a minute at 1 s): a reader decodes at most this
many lines to reach any frame, and a damaged line costs at most the frames up to the next."""
DECIMALS = JSON_DECIMALS
"""Numbers are written to a thousandth (of a second, a watt, a joule, a percent), as
``snapshot --json`` writes them: finer digits are noise that would change in every frame
and not compress."""

REPLACE = "="
"""A change ``{"=": VALUE}`` replaces the value outright."""
LENGTH = "len"
"""A list's change gives its new length under this member when the length changed."""
RUNNER_KEY = "runner"
"""A frame's member listing what the runner pane received since the frame before, in order
(:func:`runner_entry`); a reader that knows it not skips it, so no format version hangs on it."""


INDEX_SUFFIX = ".idx"
_PART_SUFFIXES = re.compile(r"(\.(ndjson|jsonl))?(\.(zst|zstd|gz))?$", re.IGNORECASE)


def part_path(path: Path, part: int) -> Path:
    """The file of part ``part`` of the recording whose first file is ``path``: the part's
    number before the format's suffixes (``box.ndjson.zst``, ``box.1.ndjson.zst``...)."""
    if part == 0:
        return path
    name = path.name
    cut = _suffixes_at(name)
    return path.with_name(f"{name[:cut]}.{part}{name[cut:]}")


def _suffixes_at(name: str) -> int:
    """Where the format's suffixes start in ``name`` (its end where none do)."""
    suffixes = _PART_SUFFIXES.search(name)
    return suffixes.start() if suffixes is not None and suffixes.start() > 0 else len(name)


def oldest_part_path(path: Path) -> Path | None:
    """The earliest later part left of the recording whose first file is ``path``: where
    ``record --keep`` deleted the first parts, the one to read from; ``None`` where none is
    (or the folder cannot be read). Only a part of this user's or root's is taken: with no
    first file to go by, one planted below the real ones would lead (another user's
    recording is read by naming one of its parts)."""
    name = path.name
    cut = _suffixes_at(name)
    numbered = re.compile(re.escape(name[:cut]) + r"\.([1-9][0-9]{0,17})" + re.escape(name[cut:]))
    try:
        with os.scandir(path.parent) as entries:
            parts = [
                int(found.group(1))
                for entry in entries
                if (found := numbered.fullmatch(entry.name)) is not None
                and entry.is_file()
                and entry.stat().st_uid in (os.geteuid(), 0)
            ]
    except (OSError, ValueError):
        return None
    return part_path(path, min(parts)) if parts else None


def index_path(path: Path) -> Path:
    """The index beside a recording's file: its name with ``.idx`` added."""
    return path.with_name(path.name + INDEX_SUFFIX)


def first_part_path(path: Path, part: int) -> Path | None:
    """The first file of the recording whose part ``part`` is ``path``, where its name says
    it (:func:`part_path`); ``None`` where it was renamed."""
    if part == 0:
        return path
    name = path.name
    cut = _suffixes_at(name)
    number = f".{part}"
    if not name[:cut].endswith(number):
        return None
    return path.with_name(name[: cut - len(number)] + name[cut:])


class FormatError(ValueError):
    """A line that is JSON but not what the format says; ``str()`` says what is wrong."""


@dataclass(frozen=True, slots=True)
class Header:
    """The first line of every file of a recording."""

    version: int
    """The format version (:data:`FORMAT_VERSION` when written by this gputui)."""
    recording: str
    """An id shared by the files (parts) of one recording."""
    part: int
    """Which file of the recording this is: 0, then 1, 2... after each rotation."""
    host: str
    """The recorded machine's host name."""
    gputui_version: str
    """The gputui that wrote it."""
    interval_s: float
    """Seconds between the recorder's samples."""
    full_every: int
    """A whole reading every this many frames."""
    started_unix: float
    """When the recording started (seconds since the epoch); frames' ``t`` count from it."""
    kind: str = HOST
    """What each frame holds: :data:`HOST` or :data:`FLEET` (one of :data:`KINDS`)."""
    source: str | None = None
    """Where a fleet's readings came from: ``exporters`` (each host's own /metrics) or
    ``prometheus``; ``None`` for a host recording."""
    runner: bool = False
    """Whether its frames may carry the runner pane's jobs (``gputui --record``)."""

    @property
    def started_at(self) -> dt.datetime:
        """When the recording started, in UTC."""
        return dt.datetime.fromtimestamp(self.started_unix, dt.UTC)

    def as_dict(self) -> dict[str, Any]:
        """The header as its line holds it."""
        return {
            HEADER_KEY: self.version,
            "recording": self.recording,
            "part": self.part,
            "host": self.host,
            "gputui_version": self.gputui_version,
            "interval_s": self.interval_s,
            "full_every": self.full_every,
            "started_at": self.started_at.isoformat(),
            "started_unix": round(self.started_unix, DECIMALS),
            "kind": self.kind,
            "source": self.source,
        } | ({RUNNER_KEY: True} if self.runner else {})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Header:
        """Read a header line's object (the version already checked).

        Raises:
            FormatError: a member is missing or of the wrong kind.
        """
        try:
            header = cls(
                version=_whole(data[HEADER_KEY]),
                recording=_text(data["recording"]),
                part=_whole(data["part"]),
                host=_text(data["host"]),
                gputui_version=_text(data["gputui_version"]),
                interval_s=_number(data["interval_s"]),
                full_every=_whole(data["full_every"]),
                started_unix=_number(data["started_unix"]),
                kind=_text(data.get("kind", HOST)),
                source=None if data.get("source") is None else _text(data["source"]),
                runner=data.get(RUNNER_KEY, False) is True,
            )
        except KeyError as missing:
            raise FormatError(f"the header has no {missing.args[0]!r}") from None
        if header.interval_s <= 0 or header.full_every < 1 or header.part < 0:
            raise FormatError("the header's interval_s, full_every or part is out of range")
        return header


def runner_entry(t: float, **entry: object) -> dict[str, object]:
    """One entry of a frame's :data:`RUNNER_KEY` list: at ``t`` seconds, a job started
    (``start``: its kind, ``configs``: each run's config as sent to its child, ``scaling``),
    the events of one drain (``events``: each line as the child sent it), a stop asked
    (``stop``), or torch asked for the devices (``asked``)."""
    return {"t": round(t, DECIMALS), **entry}


def encode_line(value: Mapping[str, Any]) -> bytes:
    """One line of a recording: compact JSON (strings ASCII-escaped, so that any text the
    driver or a command line held survives), then a newline."""
    return _LINE_ENCODER.encode(value).encode("ascii") + b"\n"


_LINE_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""Made once: ``json.dumps`` with these options makes an encoder at each call."""


def rounded(value: Any) -> Any:
    """``value`` (JSON-ready data) with every float to :data:`DECIMALS` places."""
    kind = type(value)
    if kind is float:
        return round(value, DECIMALS) if math.isfinite(value) else None
    if kind is dict:
        return {
            key: rounded(item) if type(item) in _ROUNDED else item for key, item in value.items()
        }
    if kind is list:
        return [rounded(item) if type(item) in _ROUNDED else item for item in value]
    return value


_ROUNDED = frozenset({float, dict, list})
"""The types :func:`rounded` looks into or changes; the others (ints, text...) are kept."""


def changes(old: Any, new: Any) -> Any:
    """What turns ``old`` into ``new`` (JSON-ready data, not equal), as :func:`changed` reads it.

    An object's change holds only its members that changed, each as its own change. A list of
    objects (GPUs, processes) changes by position: ``{"2": CHANGE, "len": 3}``, the length
    only where it changed. Anything else is its new value, an object among them wrapped as
    ``{"=": VALUE}``, as is an object that lost members.
    """
    if (
        isinstance(old, dict)
        and isinstance(new, dict)
        and old.keys() <= new.keys()
        and REPLACE not in new  # a member named like the marker: the object goes whole
    ):
        change: dict[str, Any] = {}
        for key, value in new.items():  # a loop, not calls a member: most members are numbers
            if key in old:
                before = old[key]
                if before == value:
                    continue
                if type(value) in _NESTED:
                    change[key] = changes(before, value)
                    continue
            change[key] = {REPLACE: value} if type(value) is dict else value
        return change
    if isinstance(old, list) and isinstance(new, list) and _of_objects(old, new):
        by_position: dict[str, Any] = {
            str(at): changes(old[at], item) if at < len(old) else _whole_value(item)
            for at, item in enumerate(new)
            if at >= len(old) or old[at] != item
        }
        if len(new) != len(old):
            by_position[LENGTH] = len(new)
        return by_position
    return _whole_value(new)


def parsed(line: bytes) -> Any:
    """One line of a recording or its index, as JSON: the one place a file's lines are
    parsed.

    Raises:
        FormatError: it is not JSON, or nested too deeply for Python to parse (an attacker's
            ``[[[[...``: ``RecursionError``, caught here).
    """
    try:
        return json.loads(line)
    except RecursionError:
        raise FormatError("nested too deeply") from None
    except ValueError:  # (a number of over 4,300 digits too)
        raise FormatError("not JSON") from None


def changed(old: Any, change: Any) -> Any:
    """``old`` with ``change`` (from :func:`changes`) made; ``old`` itself is left as it was,
    and what did not change is shared with it.

    Raises:
        FormatError: ``change`` does not fit ``old``.
    """
    if not isinstance(change, dict):
        return change
    if not change:
        return old
    if REPLACE in change:
        if len(change) != 1:
            raise FormatError(f"a {REPLACE!r} change holds other members")
        return change[REPLACE]
    if isinstance(old, dict):
        new = dict(old)
        for key, item in change.items():
            new[key] = changed(old.get(key), item)
        return new
    if isinstance(old, list):
        length = change.get(LENGTH, len(old))
        if type(length) is not int or not 0 <= length <= len(old) + len(change):
            raise FormatError(f"a list's {LENGTH!r} is {length!r}")
        items = old[:length] + [None] * (length - len(old))
        for key, item in change.items():
            if key == LENGTH:
                continue
            if not (key.isascii() and key.isdigit() and len(key) < 19) or int(key) >= length:
                raise FormatError(
                    f"a list's change names position {ellipsize(repr(key), 24)} of {length}"
                )
            items[int(key)] = changed(items[int(key)], item)
        return items
    raise FormatError("a change to an object or list where the value is neither")


_NESTED = frozenset({dict, list})
"""The types whose change may be smaller than their new value."""


def _whole_value(value: Any) -> Any:
    return {REPLACE: value} if isinstance(value, dict) else value


def _of_objects(old: list[Any], new: list[Any]) -> bool:
    return any(isinstance(item, dict) for item in old) or any(
        isinstance(item, dict) for item in new
    )


def _whole(value: Any) -> int:
    if type(value) is not int:
        raise FormatError(f"{value!r} is not a whole number")
    return value


def _number(value: Any) -> float:
    number = json_number(value)
    if number is None:
        raise FormatError(f"{ellipsize(repr(value), 40)} is not a number")
    return number


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise FormatError(f"{value!r} is not text")
    return value
