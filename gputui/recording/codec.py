"""A recording's compression: zstd where the ``zstandard`` module imports, else gzip, or none.

A file is a run of independent blocks (a gzip member, a zstd frame), each starting at a whole
reading, so that a reader can start decoding at any block the index names. Inside a block,
every frame is flushed whole (zlib's sync flush, a zstd block), so that a file cut anywhere,
by SIGKILL or a full disk, still decodes up to its last whole frame.
"""

from __future__ import annotations

import importlib
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

ZSTD = "zstd"
GZIP = "gzip"
PLAIN = "none"
CODECS = (ZSTD, GZIP, PLAIN)

SUFFIXES = {".zst": ZSTD, ".zstd": ZSTD, ".gz": GZIP, ".ndjson": PLAIN, ".jsonl": PLAIN}
"""The compression a file's last suffix asks for; any other name gets :func:`default_codec`."""
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_LEVEL = 3
GZIP_LEVEL = 6
ZSTD_INSTALL = "pip install zstandard (or gputui[zstd])"
"""What to run where zstd is asked for and the module is missing."""


class CodecMissing(Exception):
    """zstd is needed and the ``zstandard`` module does not import; ``str()`` says so."""


class CorruptData(Exception):
    """The compressed data cannot be decoded; ``str()`` is the decoder's reason."""


def zstandard() -> ModuleType | None:
    """The ``zstandard`` module, or ``None`` where it is not installed."""
    try:
        return importlib.import_module("zstandard")
    except ImportError:
        return None


def default_codec() -> str:
    """zstd where the module imports (smaller, and cheaper to write), else gzip."""
    return ZSTD if zstandard() is not None else GZIP


def codec_for_name(path: Path) -> str:
    """The compression a new file's name asks for (:data:`SUFFIXES`), else the default."""
    return SUFFIXES.get(path.suffix.lower()) or default_codec()


def zstd_missing(path: Path, codec: str) -> str | None:
    """Why ``path`` cannot be written in ``codec`` here (zstd without its module), in one
    line that says what to do; ``None`` where it can."""
    if codec != ZSTD or zstandard() is not None:
        return None
    return (
        f"{path} asks for zstd, which needs the zstandard module ({ZSTD_INSTALL}); or name the "
        "file .ndjson.gz"
    )


def sniffed(start: bytes) -> str:
    """The compression of a file that starts with ``start``, by its magic number."""
    if start.startswith(ZSTD_MAGIC):
        return ZSTD
    if start.startswith(GZIP_MAGIC):
        return GZIP
    return PLAIN


def _zstd_module() -> Any:
    module = zstandard()
    if module is None:
        raise CodecMissing(f"zstd needs the zstandard module: {ZSTD_INSTALL}")
    return module


class Encoder:
    """Compresses a recording's lines, a block at a time, each frame flushed whole."""

    def __init__(self, codec: str) -> None:
        """Start with no block open.

        Raises:
            CodecMissing: zstd without the module.
        """
        self.codec = codec
        self._zstd = _zstd_module().ZstdCompressor(level=ZSTD_LEVEL) if codec == ZSTD else None
        self._block: Any = None

    def frame(self, data: bytes) -> bytes:
        """``data`` (whole lines) compressed and flushed, a block started first if none is
        open: what to append to the file."""
        if self.codec == PLAIN:
            return data
        if self._block is None:
            self._block = (
                self._zstd.compressobj()
                if self._zstd is not None
                else zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
            )
        if self._zstd is not None:
            flush = _zstd_module().COMPRESSOBJ_FLUSH_BLOCK
            return bytes(self._block.compress(data) + self._block.flush(flush))
        return bytes(self._block.compress(data) + self._block.flush(zlib.Z_SYNC_FLUSH))

    def end_block(self) -> bytes:
        """The end of the open block (its trailer), if one is open: what to append."""
        block, self._block = self._block, None
        if block is None:
            return b""
        return bytes(block.flush())


class Decoder:
    """Decodes a recording's bytes from the start of any block, across blocks, and as far
    as a file cut short allows."""

    def __init__(self, codec: str) -> None:
        """Start before a block.

        Raises:
            CodecMissing: zstd without the module.
        """
        self.codec = codec
        self._zstd = _zstd_module().ZstdDecompressor() if codec == ZSTD else None
        self._errors: tuple[type[Exception], ...] = (zlib.error,)
        if self._zstd is not None:
            self._errors += (_zstd_module().ZstdError,)
        self._block: Any = None

    def decode(self, data: bytes) -> bytes:
        """The lines' bytes that ``data``, the file's next bytes, holds.

        Raises:
            CorruptData: the data is not what the compression writes.
        """
        if self.codec == PLAIN:
            return data
        out = []
        try:
            while data:
                if self._block is None:
                    self._block = (
                        self._zstd.decompressobj()
                        if self._zstd is not None
                        else zlib.decompressobj(31)
                    )
                out.append(self._block.decompress(data))
                if not self._block.eof:
                    break
                data, self._block = self._block.unused_data, None
        except self._errors as error:
            raise CorruptData(str(error) or type(error).__name__) from None
        return b"".join(out)
