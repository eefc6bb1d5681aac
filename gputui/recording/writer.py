"""Writes a recording: a header line, then a frame a line, each file with its index beside it,
rotated to a new file (a part) once it reaches a size.

Every frame goes to the kernel as it is written (no buffer in this process), so a recorder
killed at any moment leaves every frame it had written; what a full disk cut short is the
reader's to drop.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gputui.files import create_new
from gputui.recording.codec import Encoder
from gputui.recording.frames import (
    DECIMALS,
    FORMAT_VERSION,
    INDEX_KEY,
    RUNNER_KEY,
    Header,
    changes,
    encode_line,
    index_path,
    part_path,
)


class RecordingWriter:
    """Writes the frames of one recording, rotating its files at ``max_size`` bytes.

    Example::

        writer = RecordingWriter(Path("box.ndjson.zst"), header, codec="zstd")
        writer.write(0.21, snapshot_as_dict(snapshot))  # every sample
        writer.close()

    Every method may raise ``OSError`` (a full disk: ``ENOSPC``); then :meth:`abandon`
    closes the files, keeping what reached them.
    """

    def __init__(
        self,
        path: Path,
        header: Header,
        *,
        codec: str,
        max_size: int | None = None,
        keep: int | None = None,
    ) -> None:
        """Create the first file, ``path``, and its index (neither may exist yet) and write
        ``header`` (later parts, named by :func:`part_path`, get their number in it).

        Args:
            codec: ``zstd``, ``gzip`` or ``none`` (:mod:`gputui.recording.codec`).
            max_size: Start a new part once a file reaches this many bytes (after the frame
                that took it there); ``None``: never.
            keep: Keep this many parts at most: before a new part starts, the oldest are
                deleted with their indexes (the reader starts at the earliest left);
                ``None``: keep every part.

        Raises:
            OSError: the file or its index exists (``FileExistsError``, its ``filename`` the
                one), or cannot be made.
            CodecMissing: zstd without the module.
            ValueError: ``keep`` below 1.
        """
        if keep is not None and keep < 1:
            raise ValueError("keep at least one part")
        self.path = path
        self.parts: list[Path] = []
        """Every file written so far, the first first (deleted ones too)."""
        self.deleted = 0
        """How many of the first ``parts`` were deleted (``keep``)."""
        self.frames = 0
        """Frames written, in every part."""
        self.size = 0
        """Bytes written to the recording's files (not their indexes)."""
        self.last_t: float | None = None
        """The latest frame's time."""
        self._header = header
        self._codec = codec
        self._max_size = max_size
        self.keep = keep
        """At most this many parts are kept (``None``: every one)."""
        self._encoder = Encoder(codec)
        self._fd: int | None = None
        self._index_fd: int | None = None
        self._part_size = 0
        self._line = 0
        self._since_full = 0
        self._full: Any = None
        self._open_part()

    def write(
        self,
        t: float,
        readings: dict[str, Any],
        runner: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """Write one frame: the ``readings`` (``snapshot --json``'s data, its numbers rounded
        by the caller to :data:`DECIMALS` places) at ``t`` seconds after the header's start,
        with what the ``runner`` pane received since the frame before; a whole one every
        ``full_every`` frames and at the start of a part, else what changed since the last
        whole one."""
        if self._fd is None:
            self._open_part()
        t = round(t, DECIMALS)
        extra = {RUNNER_KEY: list(runner)} if runner else {}
        if self._full is None or self._since_full >= self._header.full_every:
            out = self._encoder.end_block()
            offset = self._part_size + len(out)
            self._full, self._since_full = readings, 0
            out += self._encoder.frame(encode_line({"t": t, "full": readings, **extra}))
            self._emit(out)
            self._line += 1
            entry = {"t": t, "offset": offset, "line": self._line}
            self._index(encode_line(entry))
        else:
            delta = changes(self._full, readings)
            self._emit(self._encoder.frame(encode_line({"t": t, "delta": delta, **extra})))
            self._line += 1
        self._since_full += 1
        self.frames += 1
        self.last_t = t
        if self._max_size is not None and self._part_size >= self._max_size:
            self._close_part()

    def close(self) -> None:
        """End the open block and close the files."""
        if self._fd is not None:
            self._close_part()

    def abandon(self) -> None:
        """Close the files without writing more (after a failed write)."""
        for fd in (self._fd, self._index_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._index_fd = None

    def _open_part(self) -> None:
        part = len(self.parts)
        path = part_path(self.path, part)
        self._fd = create_new(path)  # never over a file nor through a link: each refused
        try:
            self._index_fd = create_new(index_path(path))
        except OSError:
            os.close(self._fd)
            self._fd = None
            with contextlib.suppress(OSError):
                path.unlink()  # (made just now: O_EXCL)
            raise
        self.parts.append(path)
        self._delete_oldest()  # once the new part is there: a part refused deletes none
        header = replace(self._header, part=part)
        self._part_size, self._line, self._full = 0, 1, None
        self._emit(self._encoder.frame(encode_line(header.as_dict())) + self._encoder.end_block())
        index = {INDEX_KEY: FORMAT_VERSION, "recording": header.recording, "part": part}
        self._index(encode_line(index))

    def _delete_oldest(self) -> None:
        """Delete the oldest parts until, with the part just started, ``keep`` are left;
        each file before its index (a reader never opens an index without its file)."""
        if self.keep is None:
            return
        while len(self.parts) - self.deleted > self.keep:
            oldest = self.parts[self.deleted]
            for each in (oldest, index_path(oldest)):
                with contextlib.suppress(FileNotFoundError):
                    each.unlink()
            self.deleted += 1

    def _close_part(self) -> None:
        self._emit(self._encoder.end_block())
        fd, index_fd = self._fd, self._index_fd
        self._fd = self._index_fd = None
        for each in (fd, index_fd):
            if each is not None:
                os.close(each)

    def _emit(self, data: bytes) -> None:
        assert self._fd is not None
        _write_all(self._fd, data)
        self._part_size += len(data)
        self.size += len(data)

    def _index(self, line: bytes) -> None:
        assert self._index_fd is not None
        _write_all(self._index_fd, line)


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``: a short write is followed by another, which raises what
    stopped the first (ENOSPC)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def cannot_write(error: OSError, path: Path) -> str:
    """``cannot write FILE: why``, in one line, for a recording's file that could not be made
    or written (the file the error names, else ``path``)."""
    reason = _REASONS.get(error.errno) or error.strerror or str(error)
    return f"cannot write {error.filename or path}: {reason}"


_REASONS: dict[int | None, str] = {
    errno.EEXIST: "it exists: gputui makes a new file, never writes over one nor through a link",
    errno.EFBIG: "the file may not grow any larger (File too large)",
}
