"""The trainer's data: CIFAR-10 when it is here or asked for, else a synthetic stand-in.

:func:`load_dataset` is the entry point. ``auto`` never touches the network; ``cifar10``,
asked for by name, is CIFAR-10 or a one-line :class:`DatasetError`, never the synthetic set.
Whatever it returns says which dataset it is and where it came from.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import torch

from gputui.engine import synthetic
from gputui.engine.cifar import (
    BINARY_FOLDER,
    BINARY_TEST_FILE,
    BINARY_TRAIN_FILES,
    PICKLED_FOLDER,
    PICKLED_TEST_FILE,
    PICKLED_TRAIN_FILES,
    RECORDS_PER_FILE,
    DatasetError,
    read_binary_batches,
    read_pickled_batches,
)
from gputui.engine.download import (
    CIFAR10_ARCHIVE,
    CIFAR10_MD5,
    CIFAR10_URL,
    Progress,
    fetch_cifar10,
)
from gputui.jobs.config import ALLOW_DOWNLOAD
from gputui.jobs.folders import user_folder

MEAN = (0.5, 0.5, 0.5)
"""Per-channel mean subtracted after scaling pixels to 0..1, as the tutorials' Normalize."""
STD = (0.5, 0.5, 0.5)
"""Per-channel standard deviation divided by after that: pixels end up in -1..1."""

DatasetKind = Literal["auto", "cifar10", "synthetic"]
"""What ``load_dataset`` may be asked for."""
DATASET_KINDS: tuple[str, ...] = get_args(DatasetKind)
"""The same, as a tuple, for argument parsers."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """Images and labels for training and for a held-out split, on the CPU.

    Compared by identity: tensors have no single truth value to compare by.
    """

    name: str
    """``"cifar10"`` or ``"synthetic"``."""
    train_images: torch.Tensor
    """uint8 ``(N, 3, 32, 32)``, contiguous, on the CPU."""
    train_labels: torch.Tensor
    """int64 ``(N,)``, class indices 0 to 9."""
    test_images: torch.Tensor
    """The held-out split's images, laid out as ``train_images``."""
    test_labels: torch.Tensor
    """The held-out split's labels."""
    source: str
    """The folder the data was read from, or ``"generated"``."""
    note: str | None = None
    """One line for the user when this is not the dataset asked for, else ``None``."""

    def __post_init__(self) -> None:
        for images, labels in (
            (self.train_images, self.train_labels),
            (self.test_images, self.test_labels),
        ):
            if images.dtype != torch.uint8 or tuple(images.shape[1:]) != (3, 32, 32):
                raise ValueError(f"images must be uint8 (N, 3, 32, 32), not {images.shape}")
            if not images.is_contiguous():
                raise ValueError("images must be contiguous")
            if labels.dtype != torch.int64 or labels.shape != (len(images),):
                raise ValueError("labels must be int64 (N,), one per image")

    @property
    def nbytes(self) -> int:
        """The bytes of its four tensors."""
        tensors = (self.train_images, self.train_labels, self.test_images, self.test_labels)
        return sum(t.numel() * t.element_size() for t in tensors)


def default_data_dir() -> Path:
    """gputui's cache folder: ``$XDG_CACHE_HOME/gputui`` (if absolute, as the XDG spec says),
    else ``~/.cache/gputui``."""
    return user_folder("XDG_CACHE_HOME", ".cache")


def search_dirs(data_dir: Path | None = None) -> list[Path]:
    """The folders searched for CIFAR-10, in order: ``[data_dir]`` (a folder the user named),
    or the cache folder and then ``./data``."""
    if data_dir is not None:
        return [Path(data_dir).expanduser().absolute()]
    dirs = [default_data_dir(), Path.cwd() / "data"]
    return dirs if dirs[0] != dirs[1] else dirs[:1]


@dataclass(frozen=True)
class Cifar10Location:
    """A folder of CIFAR-10 batch files and their format."""

    folder: Path
    """The folder holding the batch files."""
    format: Literal["binary", "pickled"]
    """``"binary"`` (``*.bin``) or ``"pickled"`` (torchvision's ``cifar-10-batches-py``)."""


def find_cifar10(dirs: Sequence[Path]) -> Cifar10Location | None:
    """The first CIFAR-10 folder in ``dirs``, or ``None``; nothing is read yet.

    In each folder: the binary distribution's ``cifar-10-batches-bin`` (what gputui
    downloads), torchvision's ``cifar-10-batches-py`` (the tutorials' ./data), or either's
    files in the folder itself.

    A folder counts as soon as it is there, so that a damaged one is reported
    (when it is read) rather than silently passed over.
    """
    for directory in dirs:
        candidates = (
            Cifar10Location(directory / BINARY_FOLDER, "binary"),
            Cifar10Location(directory / PICKLED_FOLDER, "pickled"),
        )
        for location in candidates:
            if location.folder.is_dir():
                return location
        if (directory / BINARY_TRAIN_FILES[0]).is_file():
            return Cifar10Location(directory, "binary")
        if (directory / PICKLED_TRAIN_FILES[0]).is_file():
            return Cifar10Location(directory, "pickled")
    return None


_CIFAR10_FILES = {
    "binary": (read_binary_batches, BINARY_TRAIN_FILES, BINARY_TEST_FILE),
    "pickled": (read_pickled_batches, PICKLED_TRAIN_FILES, PICKLED_TEST_FILE),
}
"""For each format: the reader of its batch files, then its training files and held-out file."""


def read_cifar10(
    location: Cifar10Location,
    *,
    limit: int | None = None,
    test_limit: int | None = None,
    records_per_file: int | None = RECORDS_PER_FILE,
) -> Dataset:
    """Read the CIFAR-10 batches at ``location``.

    Raises:
        DatasetError: a file is missing, truncated or corrupt; the message names it.
    """
    folder = location.folder
    read_batches, train_files, test_file = _CIFAR10_FILES[location.format]
    train = read_batches(
        [folder / name for name in train_files], records_per_file=records_per_file, limit=limit
    )
    test = read_batches([folder / test_file], records_per_file=records_per_file, limit=test_limit)
    return Dataset("cifar10", *train, *test, source=str(folder))


def synthetic_dataset(
    *,
    limit: int | None = None,
    test_limit: int | None = None,
    seed: int = 0,
    note: str | None = None,
) -> Dataset:
    """The synthetic dataset: 50000 training and 10000 held-out images, or the first ``limit``
    and ``test_limit``; another seed gives another (equally hard) dataset."""
    train_size = synthetic.TRAIN_SIZE if limit is None else min(limit, synthetic.TRAIN_SIZE)
    test_size = synthetic.TEST_SIZE if test_limit is None else min(test_limit, synthetic.TEST_SIZE)
    train = synthetic.generate(train_size, seed=seed, split="train")
    test = synthetic.generate(test_size, seed=seed, split="test")
    return Dataset("synthetic", *train, *test, source="generated", note=note)


def normalize(images: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """uint8 images ``(N, 3, H, W)`` to the network's input, ``(x / 255 - MEAN) / STD`` per
    channel: the tutorials' ``ToTensor()`` then ``Normalize(MEAN, STD)``, for a whole batch."""
    mean = torch.tensor(MEAN, dtype=dtype, device=images.device).view(3, 1, 1)
    std = torch.tensor(STD, dtype=dtype, device=images.device).view(3, 1, 1)
    return images.to(dtype).div_(255).sub_(mean).div_(std)


def _check_limit(value: int | None, name: str) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")


def load_dataset(
    kind: DatasetKind = "auto",
    data_dir: Path | None = None,
    *,
    download: bool = True,
    progress: Progress | None = None,
    limit: int | None = None,
    test_limit: int | None = None,
    seed: int = 0,
    records_per_file: int | None = RECORDS_PER_FILE,
    url: str = CIFAR10_URL,
    md5: str = CIFAR10_MD5,
) -> Dataset:
    """Load the dataset to train on.

    Args:
        kind: ``"auto"``: CIFAR-10 if it is already here, else the synthetic set;
            ``"cifar10"``: CIFAR-10, downloaded if need be; ``"synthetic"``: the synthetic
            set (:mod:`gputui.engine.synthetic`).
        data_dir: the folder to search and download into instead of the cache folder
            and ./data; the download makes it.
        download: whether ``"cifar10"`` may download the archive when it is not here.
        progress: called as the download proceeds.
        limit: keep only the first ``limit`` training images (tests, quick runs).
        test_limit: keep only the first ``test_limit`` held-out images.
        seed: the synthetic set's seed.
        records_per_file: records each CIFAR-10 file must hold; ``None`` accepts any
            whole number (tests write small files).
        url: where to download the archive from.
        md5: the archive's expected MD5.

    Returns:
        The dataset; ``note`` is set when ``"auto"`` found an unusable archive and used
        the synthetic set.

    Raises:
        DatasetError: an unknown ``kind``, a CIFAR-10 file
            that is there but truncated or corrupt, or ``"cifar10"`` that cannot be had.
            The message is one line that says what to do.
    """
    if kind not in DATASET_KINDS:
        choices = ", ".join(DATASET_KINDS)
        raise DatasetError(f"unknown dataset {kind!r}: choose one of {choices}")
    _check_limit(limit, "limit")
    _check_limit(test_limit, "test_limit")
    if kind == "synthetic":
        return synthetic_dataset(limit=limit, test_limit=test_limit, seed=seed)
    dirs = search_dirs(data_dir)
    home = dirs[0]  # where gputui downloads to and may repair its own files
    sizes = {"limit": limit, "test_limit": test_limit, "records_per_file": records_per_file}

    damage: DatasetError | None = None
    location = find_cifar10(dirs)
    if location is not None:
        try:
            return read_cifar10(location, **sizes)
        except DatasetError as error:
            if location != Cifar10Location(home / BINARY_FOLDER, "binary"):
                raise  # someone else's files: say what is wrong, do not touch them
            damage = error  # our own download: rebuild it below
    if kind == "auto" and damage is None and not (home / CIFAR10_ARCHIVE).is_file():
        return synthetic_dataset(limit=limit, test_limit=test_limit, seed=seed)
    # "cifar10", or an archive to unpack, or our own damaged folder to rebuild.
    may_download = kind == "cifar10" and download
    try:
        folder = fetch_cifar10(
            home,
            download=may_download,
            url=url,
            md5=md5,
            progress=progress,
            records_per_file=records_per_file,
        )
        return read_cifar10(Cifar10Location(folder, "binary"), **sizes)
    except DatasetError as error:
        if kind == "auto" and damage is not None:
            raise damage from None
        if kind == "auto":
            note = f"the CIFAR-10 archive is unusable: {error}; using the synthetic dataset"
            return synthetic_dataset(limit=limit, test_limit=test_limit, seed=seed, note=note)
        if damage is not None:
            reason = f"{damage}; fetching it again failed: {error}"
        elif may_download:
            reason = f"CIFAR-10 download failed: {error}"
        elif (home / CIFAR10_ARCHIVE).is_file():
            reason = f"the CIFAR-10 archive is unusable and downloading is off: {error}"
        else:
            places = " or ".join(str(d) for d in dirs)
            reason = f"CIFAR-10 is not in {places} and downloading is off"
        raise DatasetError(f"{reason}: {how_to_get_cifar10(home, download=may_download)}") from None


def how_to_get_cifar10(home: Path, *, download: bool) -> str:
    """How to get CIFAR-10 into ``home`` (the folder gputui downloads to), for the end of
    the error that says why it could not be had."""
    elsewhere = f"use a data folder you can write to, or one you saved {CIFAR10_URL} in"
    if home.is_dir() and not os.access(home, os.W_OK):
        return f"{home} is not writable: {elsewhere}"
    if not download:
        return f"{ALLOW_DOWNLOAD}, or save {CIFAR10_URL} in {home}"
    if not home.is_dir():  # it could not be made
        return elsewhere
    return f"try again, or save {CIFAR10_URL} in {home} yourself"
