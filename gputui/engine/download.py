"""Fetching CIFAR-10's binary distribution: download, verify, extract, all-or-nothing.

- The archive is downloaded with a socket timeout into a temporary file beside its
  final name, its MD5 checked while it streams, and only then renamed into place
  (``os.replace``), so an interrupted or corrupt download never leaves a file under
  the final name. A short or corrupt download is fetched once more before giving up.
- An archive already there is checked against the MD5 before use; a bad one is
  deleted and fetched again.
- Extraction takes only the expected members, by exact name, as regular files, and
  writes them to paths of our choosing; an archive with an absolute path, a ``..``
  or a link in it is refused whole. Files go to a temporary folder that is renamed
  into place once every file has the right size.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TextIO

from gputui import __version__
from gputui.engine.cifar import (
    BINARY_FOLDER,
    BINARY_TEST_FILE,
    BINARY_TRAIN_FILES,
    RECORDS_PER_FILE,
    DatasetError,
    binary_record_count,
)
from gputui.format import fmt_bytes, fmt_counted, fmt_rate
from gputui.jobs.events import DataProgress, Emit
from gputui.jobs.folders import make_folder

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
"""Where the binary distribution lives."""
CIFAR10_MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
"""Its published MD5."""
CIFAR10_ARCHIVE = "cifar-10-binary.tar.gz"
"""The archive's file name in the data folder."""
CIFAR10_ARCHIVE_BYTES = 170_052_171
"""Its size, for the progress bar when the server sends no length."""
DOWNLOAD_TIMEOUT_S = 30.0
"""Seconds a connection or a read may stall before the download fails."""

REQUIRED_MEMBERS = (*BINARY_TRAIN_FILES, BINARY_TEST_FILE)
"""Archive members that must be there, under ``cifar-10-batches-bin/``."""
OPTIONAL_MEMBERS = ("batches.meta.txt",)
"""Archive members that are extracted when there; all others are skipped."""

Progress = Callable[[int, int], None]
"""``progress(done_bytes, total_bytes)``; total is 0 when unknown. A finished download
ends with ``progress(done, done)``."""

DOWNLOAD_REPORT_S = 0.25
"""Least seconds between two download progress events."""
_CHUNK_BYTES = 1 << 20
_STALE_PART_S = 3600.0


class _IncompleteDownload(DatasetError):
    """A download that ended early or does not match its checksum: worth one retry."""


def file_md5(path: Path) -> str:
    """The MD5 of a file, read in chunks."""
    digest = hashlib.md5()
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _reason(error: BaseException) -> str:
    """Why a download failed, in the error's own first line (a URL error's reason)."""
    text = str(getattr(error, "reason", None) or error) or type(error).__name__
    return text.splitlines()[0]


def _remove_stale_parts(dest: Path) -> None:
    """Delete temporary files that a killed download left beside ``dest`` long ago."""
    now = time.time()
    for part in dest.parent.glob(f".{dest.name}.*.part"):
        with contextlib.suppress(OSError):
            if now - part.stat().st_mtime > _STALE_PART_S:
                part.unlink()


def _download_once(
    url: str, dest: Path, md5: str | None, progress: Progress | None, timeout: float
) -> None:
    """Download ``url`` to ``dest`` atomically; raise :class:`DatasetError` on failure."""
    host = urllib.parse.urlsplit(url).netloc or url
    request = urllib.request.Request(url, headers={"User-Agent": f"gputui/{__version__}"})
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                response = urllib.request.urlopen(request, timeout=timeout)
            except urllib.error.HTTPError as error:
                raise DatasetError(f"{url} answered HTTP {error.code} {error.reason}") from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
                raise DatasetError(f"cannot reach {host}: {_reason(error)}") from None
            digest = hashlib.md5()
            done = 0
            with response:
                total = int(response.headers.get("Content-Length") or 0)
                if progress is not None:
                    progress(0, total)
                while True:
                    try:
                        chunk = response.read(_CHUNK_BYTES)
                    except (http.client.IncompleteRead, ConnectionError) as error:
                        raise _IncompleteDownload(
                            f"the download from {host} broke off after {fmt_bytes(done)}"
                            f" ({_reason(error)})"
                        ) from None
                    except (OSError, http.client.HTTPException) as error:  # a stalled read
                        raise DatasetError(
                            f"the download from {host} stalled after {fmt_bytes(done)}"
                            f" ({_reason(error)})"
                        ) from None
                    if not chunk:
                        break
                    out.write(chunk)  # OSError (disk full): download_file says so
                    digest.update(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
            if done == 0 or (total and done != total):
                raise _IncompleteDownload(
                    f"the download from {host} broke off after {done} of {total or '?'} bytes"
                )
            if md5 is not None and digest.hexdigest() != md5.lower():
                raise _IncompleteDownload(
                    f"{url} failed its checksum (MD5 {digest.hexdigest()}, expected {md5})"
                )
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp_name, dest)
        if progress is not None:
            progress(done, done)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def download_file(
    url: str,
    dest: Path,
    *,
    md5: str | None = None,
    progress: Progress | None = None,
    timeout: float = DOWNLOAD_TIMEOUT_S,
    attempts: int = 2,
) -> None:
    """Download ``url`` to ``dest``, all or nothing, checking its MD5.

    A download that breaks off or fails its checksum is tried again, up to
    ``attempts`` times; one that cannot connect is not. Nothing is left under
    ``dest`` unless the whole file arrived and matched.

    Args:
        url: what to download (``http``, ``https`` or ``file``).
        dest: where the file goes; its folder is created if needed.
        md5: the expected hex MD5, or ``None`` not to check.
        progress: called as bytes arrive; see :data:`Progress`.
        timeout: seconds a connection or a read may stall.
        attempts: tries in all for a broken-off or corrupt download.

    Raises:
        DatasetError: the download failed; the message says why, in one line.
    """
    try:
        make_folder(dest.parent)  # never a missing home folder
    except OSError as error:
        raise DatasetError(f"cannot create {dest.parent}: {error.strerror}") from None
    _remove_stale_parts(dest)
    failure: DatasetError | None = None
    for _ in range(max(1, attempts)):
        try:
            _download_once(url, dest, md5, progress, timeout)
            return
        except _IncompleteDownload as error:
            failure = error
        except OSError as error:  # writing: disk full, read-only folder
            raise DatasetError(f"cannot write {dest}: {error.strerror or _reason(error)}") from None
    assert failure is not None
    raise DatasetError(f"{failure} (tried {fmt_counted(max(1, attempts), 'time')})")


def _safe_member_name(member: tarfile.TarInfo) -> PurePosixPath:
    """The member's path, or :class:`DatasetError` if it could write outside the folder."""
    name = member.name
    path = PurePosixPath(name)
    if name.startswith(("/", "\\")) or path.is_absolute():
        raise DatasetError(f"refusing the archive: member {name!r} has an absolute path")
    if ".." in path.parts or "\\" in name:
        raise DatasetError(f"refusing the archive: member {name!r} points outside its folder")
    if member.issym() or member.islnk():
        raise DatasetError(f"refusing the archive: member {name!r} is a link")
    if not (member.isreg() or member.isdir()):
        raise DatasetError(f"refusing the archive: member {name!r} is not a regular file")
    return PurePosixPath(*(part for part in path.parts if part != "."))


def extract_cifar10(
    archive: Path, folder: Path, *, records_per_file: int | None = RECORDS_PER_FILE
) -> Path:
    """Extract the binary batches from ``archive`` into ``folder``, all or nothing.

    Only ``cifar-10-batches-bin/<name>`` members with an expected name are written,
    as regular files, to paths built here; ``folder`` appears only once every
    required file is there with the right size (an old ``folder`` is replaced).

    Args:
        archive: ``cifar-10-binary.tar.gz``.
        folder: the ``cifar-10-batches-bin`` folder to create.
        records_per_file: records each batch must hold (``None``: any whole number).

    Returns:
        ``folder``.

    Raises:
        DatasetError: the archive is unreadable, lacks a batch, or has an unsafe member.
    """
    wanted = set(REQUIRED_MEMBERS) | set(OPTIONAL_MEMBERS)
    try:
        staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    except OSError as error:
        raise DatasetError(f"cannot write to {folder.parent}: {error.strerror}") from None
    try:
        found: set[str] = set()
        try:
            with tarfile.open(archive, "r:gz") as tar:
                for member in tar:
                    path = _safe_member_name(member)
                    if path.parts[:1] != (BINARY_FOLDER,) or len(path.parts) != 2:
                        continue
                    if path.name not in wanted or not member.isreg():
                        continue
                    source = tar.extractfile(member)
                    assert source is not None  # a regular file always has a body
                    with source, (staging / path.name).open("wb") as target:
                        shutil.copyfileobj(source, target, _CHUNK_BYTES)
                    found.add(path.name)
        except (tarfile.TarError, EOFError, OSError, ValueError) as error:
            raise DatasetError(
                f"cannot unpack {archive}: {_reason(error)}; delete it and fetch it again"
            ) from None
        missing = [name for name in REQUIRED_MEMBERS if name not in found]
        if missing:
            raise DatasetError(f"{archive} is not CIFAR-10's binary archive: it lacks {missing[0]}")
        for name in REQUIRED_MEMBERS:
            binary_record_count(staging / name, records_per_file)
        if folder.exists():
            shutil.rmtree(folder)
        try:
            os.replace(staging, folder)
        except OSError:
            # Another process put a folder there first: keep one complete copy.
            if not folder.is_dir():
                raise
            shutil.rmtree(staging, ignore_errors=True)
        return folder
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def fetch_cifar10(
    data_dir: Path,
    *,
    download: bool = True,
    url: str = CIFAR10_URL,
    md5: str = CIFAR10_MD5,
    progress: Progress | None = None,
    timeout: float = DOWNLOAD_TIMEOUT_S,
    records_per_file: int | None = RECORDS_PER_FILE,
) -> Path:
    """Make ``data_dir/cifar-10-batches-bin`` from the archive, downloading it if needed.

    An archive already in ``data_dir`` is used when it matches ``md5``; otherwise,
    if ``download`` allows, it is deleted and downloaded again. The archive is kept
    after extraction, so a damaged batch folder can be rebuilt offline.

    Returns:
        The batch folder.

    Raises:
        DatasetError: no good archive and ``download`` is off, or the download or
            the extraction failed.
    """
    archive = data_dir / CIFAR10_ARCHIVE
    folder = data_dir / BINARY_FOLDER
    if archive.is_file():
        try:
            digest = file_md5(archive)
        except OSError as error:
            raise DatasetError(f"cannot read {archive}: {error.strerror}") from None
        if digest == md5.lower():
            return extract_cifar10(archive, folder, records_per_file=records_per_file)
        if not download:
            raise DatasetError(f"{archive} failed its checksum (MD5 {digest}, expected {md5})")
        with contextlib.suppress(OSError):
            archive.unlink()
    elif not download:
        raise DatasetError(f"there is no {archive} and downloading is off")
    download_file(url, archive, md5=md5, progress=progress, timeout=timeout)
    return extract_cifar10(archive, folder, records_per_file=records_per_file)


class TextProgressBar:
    """A one-line download progress bar on stderr, to pass as ``progress=``.

    On a terminal it redraws in place at most ``1 / min_interval_s`` times a second;
    elsewhere (a log, CI) it prints a line at the start, every 25%, and at the end.
    Call :meth:`close` (or use it as a context manager) after the download to end
    its line even if the download failed half-way.
    """

    def __init__(
        self,
        label: str = "Downloading CIFAR-10",
        stream: TextIO | None = None,
        *,
        width: int = 30,
        clock: Callable[[], float] = time.monotonic,
        min_interval_s: float = 0.1,
    ) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.clock = clock
        self.min_interval_s = min_interval_s
        self._started: float | None = None
        self._last_draw = float("-inf")
        self._last_quarter = -1
        self._open_line = False
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def render(self, done: int, total: int) -> str:
        """The bar's text for ``done`` of ``total`` bytes (``total`` 0: unknown)."""
        elapsed = self.clock() - self._started if self._started is not None else 0.0
        rate = f"  {fmt_rate(done / elapsed)}" if elapsed > 0 and done else ""
        if total <= 0:
            return f"{self.label}  {fmt_bytes(done)}{rate}"
        fraction = min(1.0, done / total)
        filled = int(fraction * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        return f"{self.label} [{bar}] {fraction:4.0%}  {fmt_bytes(done)} / {fmt_bytes(total)}{rate}"

    def __call__(self, done: int, total: int) -> None:
        """Report progress: ``done`` of ``total`` bytes; ``done == total`` ends the bar."""
        now = self.clock()
        if self._started is None:
            self._started = now
        finished = total > 0 and done >= total
        if self._tty:
            if finished or now - self._last_draw >= self.min_interval_s:
                self._last_draw = now
                self.stream.write("\r" + self.render(done, total) + "\x1b[K")
                self._open_line = True
        else:
            quarter = int(4 * done / total) if total > 0 else 0
            if quarter > self._last_quarter:
                self._last_quarter = quarter
                self.stream.write(self.render(done, total) + "\n")
        if finished:
            self.close()
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line, if one is open."""
        if self._open_line:
            self.stream.write("\n")
            self.stream.flush()
            self._open_line = False

    def __enter__(self) -> TextProgressBar:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def download_reporter(emit: Emit) -> Callable[[int, int], None]:
    """CIFAR-10 download progress as ``DataProgress`` events, a few a second at most."""
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= DOWNLOAD_REPORT_S or (total and done >= total):
            last[0] = now
            emit(DataProgress(done_bytes=done, total_bytes=total))

    return report
