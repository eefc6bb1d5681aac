"""Fetching CIFAR-10's binary distribution: download, verify, extract, all-or-nothing.

The archive streams into a temporary file beside its final name, its MD5 checked as it
comes, and is renamed into place (``os.replace``) only then, so an interrupted or corrupt
download never leaves a file under the final name; the extraction does the same with a
folder. An archive with an absolute path, a ``..`` or a link in it is refused whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import shutil
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from gputui import __version__
from gputui.engine.cifar import (
    BINARY_FOLDER,
    BINARY_TEST_FILE,
    BINARY_TRAIN_FILES,
    RECORDS_PER_FILE,
    DatasetError,
    binary_record_count,
)
from gputui.format import fmt_bytes, fmt_counted
from gputui.jobs.events import DataProgress, Emit
from gputui.jobs.folders import make_folder

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
"""Where the binary distribution lives."""
CIFAR10_MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
"""Its published MD5."""
CIFAR10_ARCHIVE = "cifar-10-binary.tar.gz"
"""The archive's file name in the data folder."""
DOWNLOAD_TIMEOUT_S = 30.0
"""Seconds a connection or a read may stall before the download fails."""
DOWNLOAD_ATTEMPTS = 2
"""Tries in all for a download that breaks off or fails its checksum."""

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


def _download_once(url: str, dest: Path, md5: str, progress: Progress | None) -> None:
    host = urllib.parse.urlsplit(url).netloc or url
    request = urllib.request.Request(url, headers={"User-Agent": f"gputui/{__version__}"})
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                response = urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT_S)
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
            if digest.hexdigest() != md5.lower():
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


def download_file(url: str, dest: Path, *, md5: str, progress: Progress | None = None) -> None:
    """Download ``url`` (``http``, ``https`` or ``file``) to ``dest``, all or nothing, checking
    its hex MD5; its folder is made if need be.

    A download that breaks off or fails its checksum is tried again, up to
    :data:`DOWNLOAD_ATTEMPTS` times; one that cannot connect is not. Nothing is left under
    ``dest`` unless the whole file arrived and matched.

    Raises:
        DatasetError: the download failed; the message says why, in one line.
    """
    try:
        make_folder(dest.parent)  # never a missing home folder
    except OSError as error:
        raise DatasetError(f"cannot create {dest.parent}: {error.strerror}") from None
    _remove_stale_parts(dest)
    failure: DatasetError | None = None
    for _ in range(DOWNLOAD_ATTEMPTS):
        try:
            _download_once(url, dest, md5, progress)
            return
        except _IncompleteDownload as error:
            failure = error
        except OSError as error:  # writing: disk full, read-only folder
            raise DatasetError(f"cannot write {dest}: {error.strerror or _reason(error)}") from None
    assert failure is not None
    raise DatasetError(f"{failure} (tried {fmt_counted(DOWNLOAD_ATTEMPTS, 'time')})")


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
    """Extract the binary batches from ``archive`` into ``folder``, all or nothing; returns
    ``folder``.

    Only ``cifar-10-batches-bin/<name>`` members with an expected name are written,
    as regular files, to paths built here; ``folder`` appears only once every
    required file is there with the right size (an old ``folder`` is replaced).

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
    records_per_file: int | None = RECORDS_PER_FILE,
) -> Path:
    """Make ``data_dir/cifar-10-batches-bin`` from the archive, downloading it if needed;
    returns that folder.

    An archive already in ``data_dir`` is used when it matches ``md5``; otherwise,
    if ``download`` allows, it is deleted and downloaded again. The archive is kept
    after extraction, so a damaged batch folder can be rebuilt offline.

    Raises:
        DatasetError: no good archive and ``download`` is off, or the download or
            the extraction failed.
    """
    archive = data_dir / CIFAR10_ARCHIVE
    folder = data_dir / BINARY_FOLDER
    if archive.is_file():
        try:
            with archive.open("rb") as file:
                digest = hashlib.file_digest(file, "md5").hexdigest()
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
    download_file(url, archive, md5=md5, progress=progress)
    return extract_cifar10(archive, folder, records_per_file=records_per_file)


def download_reporter(emit: Emit) -> Callable[[int, int], None]:
    """CIFAR-10 download progress as ``DataProgress`` events, a few a second at most."""
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= DOWNLOAD_REPORT_S or (total and done >= total):
            last[0] = now
            emit(DataProgress(done_bytes=done, total_bytes=total))

    return report
