"""Opens a recording, checks it, reads its frames back whole, and seeks to a time through
its index.

A file that is not a recording, one of a newer format or kind, or of a kind the caller does
not read (a fleet's where one machine's is wanted), is refused at :meth:`Recording.open` with
one line (:class:`RecordingError`). A damaged or cut-short line met later ends the
frames there: what came before it is read as usual, and :attr:`Recording.problem` says where
and what (:class:`Problem`), in one line.
"""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gputui.files import open_regular, read_regular
from gputui.format import ellipsize
from gputui.recording.codec import CodecMissing, CorruptData, Decoder, sniffed
from gputui.recording.frames import (
    FLEET,
    FORMAT_VERSION,
    HEADER_KEY,
    HOST,
    INDEX_KEY,
    KINDS,
    RUNNER_KEY,
    FormatError,
    Header,
    changed,
    first_part_path,
    index_path,
    oldest_part_path,
    parsed,
    part_path,
)
from gputui.telemetry.snapshot import json_number

CHUNK = 1 << 16
"""Bytes read from a file at a time."""
STEP = 1 << 10
"""Compressed bytes decoded at a time: what damaged data costs of the lines before it."""
HEADER_MAX = 1 << 16
"""The longest first line read while looking for a header: a file without a newline that
soon is not a recording."""
LINE_MAX = 8 << 20
"""The longest line read: a frame of a fleet of a thousand GPUs is under a megabyte. A longer
one stops the reading there (:class:`Problem`)."""
RATIO_MAX = 1000
"""The most a recording's data may decompress to, per byte read (past
:data:`RATIO_SLACK`): each frame is flushed whole, so a real recording's ratio is tens at
most."""
RATIO_SLACK = 1 << 20
"""What the data may decompress to beyond :data:`RATIO_MAX` times its size, for a first
block that compresses well."""
INDEX_MAX = 16 << 20
"""The largest index read (an entry a whole frame, a minute apart by default: a year of them
is under 30 MB); a larger one is ignored, as a missing one is."""


class RecordingError(Exception):
    """The file cannot be read as a recording at all; ``str()`` is one line that names it."""


@dataclass(frozen=True, slots=True)
class Problem:
    """Where reading stopped early, and why."""

    path: Path
    """The file."""
    line: int
    """The line (1 is the header), counted in the decompressed text."""
    message: str
    """What is wrong, in a few words."""
    cut: bool = False
    """True for a last line the file ends inside (a recorder stopped mid-write); False for
    a damaged one."""

    def __str__(self) -> str:
        return f"{self.path}: line {self.line}: {self.message}"


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a recording, whole."""

    t: float
    """Seconds since the recording started (its header's ``started_unix``)."""
    readings: Mapping[str, Any]
    """The readings, as ``gputui snapshot --json`` writes them (shared with other frames:
    not to be changed)."""
    part: int
    """The file of the recording it is in."""
    line: int
    """Its line in that file."""
    runner: tuple[Mapping[str, Any], ...] = ()
    """What the runner pane received since the frame before, in order
    (:func:`~gputui.recording.frames.runner_entry`); empty in most frames."""


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """Where a whole frame starts: its time, its block's byte offset and its line."""

    t: float
    offset: int
    line: int


class _StaleIndex(Exception):
    """The index names a place where no whole frame starts: read from the file's start."""


Report = Callable[[Problem], None]


@dataclass
class _Part:
    """One file of a recording, its header read."""

    path: Path
    header: Header
    codec: str
    size: int
    owner: int
    """Its owner's uid."""
    identity: tuple[int, int]
    """Its device and inode: the file read later must be the one opened here."""
    _index: list[IndexEntry] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, path: Path) -> _Part:
        """Read and check the header.

        Raises:
            RecordingError: not a recording, a newer format, or unreadable.
        """
        try:
            with os.fdopen(open_regular(path), "rb") as file:
                info = os.fstat(file.fileno())
                first = file.read(CHUNK)
                if not first:
                    raise RecordingError(f"{path} is empty: not a gputui recording")
                codec = sniffed(first)
                decoder = Decoder(codec)
                text = b""
                while first and b"\n" not in text and len(text) < HEADER_MAX:
                    text += decoder.decode(first[:STEP])
                    first = first[STEP:] or file.read(CHUNK)
        except CodecMissing as error:
            raise RecordingError(f"{path} is compressed with zstd: {error}") from None
        except CorruptData as error:
            raise RecordingError(
                f"{path}: line 1: not a gputui recording (its compressed data is damaged: {error})"
            ) from None
        except (OSError, ValueError) as error:  # ValueError: a name with a NUL in it
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            raise RecordingError(f"cannot read {path}: {reason}") from None
        line = text.split(b"\n", 1)[0][: HEADER_MAX + 1]
        identity = (info.st_dev, info.st_ino)
        return cls(path, _header(path, line), codec, info.st_size, info.st_uid, identity)

    def index(self) -> list[IndexEntry]:
        """The index's entries that can be trusted (none where it is missing, is not a
        regular file, or is larger than :data:`INDEX_MAX`), read once."""
        if self._index is None:
            self._index = _read_index(index_path(self.path), self.header, self.size)
        return self._index

    def lines(self, entry: IndexEntry | None, report: Report) -> Iterator[tuple[int, bytes, bool]]:
        """Each line from the block ``entry`` names (the start: ``None``) to the end:
        ``(line, bytes, whole)``, ``whole`` False for a last line without its newline.

        A line is joined once, when its end comes (time linear in its length). A line longer
        than :data:`LINE_MAX`, or data that decompresses to more than :data:`RATIO_MAX` times
        its size, ends the lines there, reported: a decompression bomb (of zeros, of empty or
        of short lines) costs at most that much memory and time.
        """
        line, offset = (1, 0) if entry is None else (entry.line, entry.offset)
        decoder = Decoder(self.codec)
        pending: list[bytes] = []  # the pieces of the line not ended yet
        size = 0  # their bytes
        read = decoded = 0
        try:
            with os.fdopen(open_regular(self.path), "rb") as file:
                info = os.fstat(file.fileno())
                if (info.st_dev, info.st_ino) != self.identity:
                    report(Problem(self.path, line, _REPLACED))
                    return
                file.seek(offset)
                while chunk := file.read(CHUNK):
                    for start in range(0, len(chunk), STEP):
                        piece = chunk[start : start + STEP]
                        try:
                            data = decoder.decode(piece)
                        except CorruptData as error:
                            damaged = f"the compressed data is damaged: {error}"
                            report(Problem(self.path, line, damaged))
                            return
                        read += len(piece)
                        past = RATIO_SLACK + RATIO_MAX * read - decoded  # what it may hold
                        decoded += len(data)
                        at = 0
                        while (end := data.find(b"\n", at)) >= 0:
                            if size + end - at > LINE_MAX or end > past:
                                why = _TOO_LONG if size + end - at > LINE_MAX else _BOMB
                                report(Problem(self.path, line, why))
                                return
                            whole = data[at:end]
                            yield line, b"".join([*pending, whole]) if pending else whole, True
                            line += 1
                            pending, size, at = [], 0, end + 1
                        if at < len(data):
                            pending.append(data[at:])
                            size += len(data) - at
                            if size > LINE_MAX or len(data) > past:
                                why = _TOO_LONG if size > LINE_MAX else _BOMB
                                report(Problem(self.path, line, why))
                                return
        except OSError as error:
            report(Problem(self.path, line, f"cannot be read: {error.strerror or error}"))
            return
        if size:
            yield line, b"".join(pending), False


_TOO_LONG = f"longer than {LINE_MAX:,} bytes, which no frame is (a damaged or hostile file)"
_REPLACED = "replaced by another file since it was opened: not read"
_BOMB = (
    f"it decompresses to over {RATIO_MAX:,} times its size, which no recording does: "
    "a decompression bomb"
)


def _header(path: Path, line: bytes) -> Header:
    """The header a first line holds.

    Raises:
        RecordingError: it is not one, or one of a newer format.
    """
    not_one = f"{path}: line 1: not a gputui recording (its first line is not a recording's header)"
    try:
        value = parsed(line)
    except FormatError:
        raise RecordingError(not_one) from None
    if not isinstance(value, dict) or type(value.get(HEADER_KEY)) is not int:
        raise RecordingError(not_one)
    version = value[HEADER_KEY]
    if version > FORMAT_VERSION:
        raise RecordingError(
            f"{path}: line 1: a recording of format version {ellipsize(str(version), 12)}, newer "
            "than this gputui "
            f"reads ({FORMAT_VERSION}): upgrade gputui to read it"
        )
    if version < 1:
        raise RecordingError(not_one)
    kind = value.get("kind", HOST)
    if kind not in KINDS:
        raise RecordingError(
            f"{path}: line 1: a recording of kind {ellipsize(repr(kind), 40)}, which this gputui "
            f"does not read (it reads {' and '.join(KINDS)} recordings): upgrade gputui to read it"
        )
    try:
        return Header.from_dict(value)
    except FormatError as error:
        raise RecordingError(f"{path}: line 1: a damaged header: {error}") from None


def _of_kind(path: Path, header: Header, kinds: Collection[str]) -> None:
    """Refuse, in one line, a recording whose kind the caller does not read.

    Raises:
        RecordingError: ``header``'s kind is not among ``kinds``.
    """
    if header.kind not in kinds:
        what = "a fleet's (gputui record --hosts)" if header.kind == FLEET else "one machine's"
        raise RecordingError(
            f"{path}: line 1: this is {what} recording, which is read with "
            f"{_READ_WITH.get(header.kind, 'a newer gputui')}"
        )


_READ_WITH = {
    HOST: "gputui replay FILE or gputui snapshot --from FILE",
    FLEET: "gputui replay FILE (the fleet view) or gputui snapshot --from FILE",
}


def _read_index(path: Path, header: Header, size: int) -> list[IndexEntry]:
    """The entries of an index that belongs to ``header``'s file, up to the first that does
    not fit (a recorder stopped mid-line, a stale file); none where it is missing."""
    try:
        lines = _each_line(read_regular(path, INDEX_MAX))
    except (OSError, ValueError):  # missing, not a file (a FIFO, /dev/zero), too large
        return []
    entries: list[IndexEntry] = []
    try:
        first = parsed(next(lines))
        if not (
            isinstance(first, dict)
            and first.get(INDEX_KEY) == header.version
            and first.get("recording") == header.recording
            and first.get("part") == header.part
        ):
            return []
        for raw in lines:
            value = parsed(raw)
            t, offset, line = json_number(value["t"]), value["offset"], value["line"]
            if type(offset) is not int or type(line) is not int or t is None:
                break
            if not 0 < offset < size or (
                entries and (t < entries[-1].t or line <= entries[-1].line)
            ):
                break
            entries.append(IndexEntry(t, offset, line))
    except (FormatError, TypeError, KeyError):  # a line cut short, or not an entry
        pass
    return entries


def _each_line(data: bytes) -> Iterator[bytes]:
    """``data``'s lines, one at a time (a list of a file of newlines would be millions)."""
    at = 0
    while (end := data.find(b"\n", at)) >= 0:
        yield data[at:end]
        at = end + 1
    yield data[at:]


class Recording:
    """A recording: its files (parts) in order, read as one.

    Example::

        recording = Recording.open(Path("box.ndjson.zst"))
        for frame in recording.frames():
            ...
        last = recording.at(math.inf)
        if recording.problem is not None:
            print(recording.problem)  # one line: the file, the line, what is wrong
    """

    def __init__(self, parts: list[_Part], later_problem: Problem | None) -> None:
        self._parts = parts
        self._later_problem = later_problem
        self.problem: Problem | None = None
        """Where the last read stopped early, and why; ``None`` while nothing stopped it."""

    @property
    def header(self) -> Header:
        """The header of the file opened."""
        return self._parts[0].header

    @property
    def paths(self) -> tuple[Path, ...]:
        """The files read, in order: the one opened and the parts after it."""
        return tuple(part.path for part in self._parts)

    @property
    def kind(self) -> str:
        """What its frames hold: ``host`` or ``fleet`` (:data:`~gputui.recording.frames.KINDS`)."""
        return self.header.kind

    def not_a_frame(self, frame: Frame, error: ValueError) -> Problem:
        """The problem of a ``frame`` whose readings do not decode (``error`` says why)."""
        path = self._parts[frame.part - self.header.part].path
        return Problem(path, frame.line, f"not a frame: {error}")

    @classmethod
    def open(cls, path: Path, kinds: Collection[str] = KINDS) -> Recording:
        """Open the recording whose file (or part) is ``path``, with the parts after it;
        where ``path`` is a first file that is gone, from the earliest part left. ``kinds``:
        those the caller reads (a host's replay: ``("host",)``).

        Raises:
            RecordingError: ``path`` cannot be read, is not a recording, is of a newer
                format, or of a kind not in ``kinds``; one line.
        """
        if not path.exists():  # its first parts may have been deleted (record --keep)
            path = oldest_part_path(path) or path
        first = _Part.open(path)
        _of_kind(path, first.header, kinds)
        parts = [first]
        base = first_part_path(path, first.header.part)
        problem = None
        while base is not None:
            later = part_path(base, parts[-1].header.part + 1)
            if not later.exists():
                break
            try:
                part = _Part.open(later)
            except RecordingError as error:
                problem = Problem(later, 1, str(error).removeprefix(f"{later}: line 1: "))
                break
            if part.header.recording != first.header.recording:
                break  # another recording's, under the same name
            if part.owner != first.owner:  # planted beside it: its frames are not read
                problem = Problem(
                    later,
                    1,
                    f"owned by uid {part.owner}, not by the recording's "
                    f"owner ({first.owner}): not read as its part",
                )
                break
            parts.append(part)
        return cls(parts, problem)

    def frames(self) -> Iterator[Frame]:
        """Every frame, whole, in order, across the parts; ends early at a damaged or
        cut-short line (then :attr:`problem` says where)."""
        self.problem = None
        yield from self._frames_on(0, None)

    def at(self, t: float) -> Frame | None:
        """The last frame at or before ``t`` seconds (``math.inf``: the last frame), reading
        only from the index's nearest whole frame; ``None`` before the first frame."""
        self.problem = None
        number, entry = self._start(t)
        part = self._parts[number]
        try:
            return self._last_until(part, entry, t)
        except _StaleIndex:
            self.problem = None
            return self._last_until(part, None, t)

    def frames_from(self, t: float) -> Iterator[Frame]:
        """Every frame from the last one at or before ``t`` (the first frame where none is) to
        the end, across the parts, reading from the index's nearest whole frame; ends early at
        a damaged or cut-short line (then :attr:`problem` says where)."""
        self.problem = None
        number, entry = self._start(t)
        frames = self._frames_on(number, entry)
        try:
            held = next(frames, None)
        except _StaleIndex:  # (raised before any frame is read, if at all)
            self.problem = None
            frames = self._frames_on(number, None)
            held = next(frames, None)
        for frame in frames:
            if held is not None and frame.t <= t:
                held = frame
                continue
            if held is not None:
                yield held
                held = None
            yield frame
        if held is not None:
            yield held

    def _start(self, t: float) -> tuple[int, IndexEntry | None]:
        """The part to read for ``t``, and its index's last whole frame at or before it."""
        number = 0
        for later in self._parts[1:]:
            first = self._first_t(later)
            if first is None or first > t:
                break
            number += 1
        entries = self._parts[number].index()
        at = bisect.bisect_right([entry.t for entry in entries], t) - 1
        return number, entries[at] if at >= 0 else None

    def _frames_on(self, number: int, entry: IndexEntry | None) -> Iterator[Frame]:
        """The frames of part ``number`` from ``entry`` (the start: ``None``), then those of
        the parts after it."""
        for at, part in enumerate(self._parts[number:]):
            yield from self._frames(part, entry if at == 0 else None)
            if self.problem is not None:
                return
        self._report(self._later_problem)

    def _last_until(self, part: _Part, entry: IndexEntry | None, t: float) -> Frame | None:
        found = None
        for frame in self._frames(part, entry):
            if frame.t > t:
                break
            found = frame
        is_last = part is self._parts[-1]
        if found is not None and math.isinf(t) and is_last and self.problem is None:
            self._report(self._later_problem)
        return found

    def _first_t(self, part: _Part) -> float | None:
        entries = part.index()
        if entries:
            return entries[0].t
        return next((frame.t for frame in self._frames(part, None)), None)

    def _report(self, problem: Problem | None) -> None:
        if self.problem is None:
            self.problem = problem

    def _frames(self, part: _Part, entry: IndexEntry | None) -> Iterator[Frame]:
        """The frames of one part from ``entry`` (the start: ``None``) to its end.

        Raises:
            _StaleIndex: ``entry`` names no whole frame at its time.
        """
        full: Any = None
        last_t = -math.inf
        problems: list[Problem] = []
        for number, raw, whole in part.lines(entry, problems.append):
            if number == 1:
                continue  # the header
            try:
                value = parsed(raw)
            except FormatError as error:
                value, why = _NOT_JSON, str(error)
            if entry is not None and number == entry.line and not _starts(value, entry):
                raise _StaleIndex
            if value is _NOT_JSON:
                message = f"{why}: the line is damaged" if whole else _CUT
                self._report(Problem(part.path, number, message, cut=not whole))
                return
            try:
                t = _frame_time(value, last_t)
                if "full" in value:
                    full = _readings(value["full"], part.header.kind)
                    readings = full
                elif "delta" in value:
                    if full is None:
                        raise FormatError("a change before any whole frame")
                    try:
                        readings = _readings(changed(full, value["delta"]), part.header.kind)
                    except RecursionError:  # a change nested as deep as parsing allows
                        raise FormatError("its change is nested too deeply") from None
                else:
                    continue  # a kind of line this version does not know: skipped
                runner = _runner(value.get(RUNNER_KEY, ()))
            except FormatError as error:
                self._report(Problem(part.path, number, f"not a frame: {error}"))
                return
            last_t = t
            yield Frame(t, readings, part.header.part, number, runner)
        if problems:
            if entry is not None and problems[0].line == entry.line:
                raise _StaleIndex  # nothing decodes where the index points
            self._report(problems[0])


_NOT_JSON = object()
"""A line that did not parse."""


def _starts(value: Any, entry: IndexEntry) -> bool:
    """Whether a line is the whole frame an index entry names."""
    return isinstance(value, dict) and "full" in value and value.get("t") == entry.t


_CUT = "cut short: the file ends inside it (its recorder stopped while writing it)"


def _frame_time(value: Any, last_t: float) -> float:
    if not isinstance(value, dict):
        raise FormatError("the line is not an object")
    t = json_number(value.get("t"))
    if t is None or t < 0:
        raise FormatError(f"its time is {ellipsize(repr(value.get('t')), 40)}")
    if t < last_t:
        raise FormatError(f"its time {t} is before the frame above's, {last_t}")
    return float(t)


def _runner(value: Any) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(e, dict) for e in value):
        raise FormatError(f"its {RUNNER_KEY!r} is not a list of objects")
    return tuple(value)


def _readings(value: Any, kind: str) -> dict[str, Any]:
    """A frame's readings, checked to be what its kind holds: a host's GPUs, a fleet's hosts."""
    member, what = ("hosts", "hosts") if kind == FLEET else ("gpus", "GPUs")
    if not isinstance(value, dict) or not isinstance(value.get(member), list):
        raise FormatError(f"the readings are not an object with a list of {what}")
    return value
