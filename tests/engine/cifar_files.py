"""Writes CIFAR-10 files in the real binary and pickle formats, for the tests.

The tests need CIFAR-10-format folders without the 170 MB download, so these writers
lay out ``cifar-10-batches-bin`` and ``cifar-10-batches-py`` as the real
distributions do (the pickles byte for byte as Python 2's cPickle wrote the
originals), with as many images per file as a test asks for. The readers they feed
are in :mod:`gputui.engine.cifar`.
"""

from __future__ import annotations

import struct
from pathlib import Path

import torch

from gputui.engine.cifar import (
    BINARY_TEST_FILE,
    BINARY_TRAIN_FILES,
    CLASSES,
    IMAGE_BYTES,
    PICKLED_TEST_FILE,
    PICKLED_TRAIN_FILES,
    Batches,
)

# --------------------------------------------------------------------------- binary


def _writable_bytes(tensor: torch.Tensor) -> bytearray:
    """The bytes of a uint8 tensor, without numpy."""
    buffer = bytearray(tensor.numel())
    if buffer:
        torch.frombuffer(buffer, dtype=torch.uint8).copy_(tensor.reshape(-1))
    return buffer


def _check_batch(images: torch.Tensor, labels: torch.Tensor) -> None:
    """Raise ``ValueError`` unless ``images`` and ``labels`` are a CIFAR-shaped batch."""
    if images.dtype != torch.uint8 or tuple(images.shape[1:]) != (3, 32, 32):
        raise ValueError(f"images must be uint8 (N, 3, 32, 32), got {images.dtype} {images.shape}")
    if labels.shape != (len(images),) or not bool(((labels >= 0) & (labels < 10)).all()):
        raise ValueError("labels must be (N,) with values 0 to 9")


def write_binary_batch(path: Path, images: torch.Tensor, labels: torch.Tensor) -> None:
    """Write one batch file in the binary distribution's format.

    Args:
        path: the file to write.
        images: uint8 ``(N, 3, 32, 32)``.
        labels: ``(N,)``, values 0 to 9.
    """
    _check_batch(images, labels)
    records = torch.cat((labels.to(torch.uint8)[:, None], images.reshape(len(images), -1)), 1)
    Path(path).write_bytes(_writable_bytes(records))


def write_binary_batches(
    folder: Path,
    train: Batches,
    test: Batches,
) -> None:
    """Write a whole ``cifar-10-batches-bin`` folder: five training files and the test file.

    The training set is split into five files as evenly as possible; with 50000 images
    the files are the real distribution's size.

    Args:
        folder: the folder to create or fill (usually named ``cifar-10-batches-bin``).
        train: ``(images, labels)`` for the five training files.
        test: ``(images, labels)`` for ``test_batch.bin``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, images, labels in zip(
        BINARY_TRAIN_FILES, train[0].tensor_split(5), train[1].tensor_split(5), strict=True
    ):
        write_binary_batch(folder / name, images, labels)
    write_binary_batch(folder / BINARY_TEST_FILE, *test)
    (folder / "batches.meta.txt").write_text("\n".join(CLASSES) + "\n")


# --------------------------------------------------------------------------- pickled


# Protocol 2 opcodes, as Python 2's cPickle wrote the real batches.
_PROTO2, _STOP, _MARK = b"\x80\x02", b".", b"("
_EMPTY_DICT, _EMPTY_LIST, _SETITEMS, _APPENDS = b"}", b"]", b"u", b"e"
_TUPLE, _TUPLE1, _TUPLE2, _TUPLE3 = b"t", b"\x85", b"\x86", b"\x87"
_REDUCE, _BUILD, _NONE, _NEWFALSE = b"R", b"b", b"N", b"\x89"


def _pickle_str(value: bytes) -> bytes:
    """A Python 2 ``str``: SHORT_BINSTRING or BINSTRING."""
    if len(value) < 256:
        return b"U" + bytes((len(value),)) + value
    return b"T" + struct.pack("<I", len(value)) + value


def _pickle_int(value: int) -> bytes:
    """A small int: BININT1, BININT2 or BININT."""
    if 0 <= value < 256:
        return b"K" + bytes((value,))
    if 0 <= value < 65536:
        return b"M" + struct.pack("<H", value)
    return b"J" + struct.pack("<i", value)


def _pickle_global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _pickle_uint8_array(rows: int, raw: bytes | bytearray) -> bytes:
    """A numpy uint8 ``(rows, 3072)`` array, laid out as numpy's ``__reduce__`` pickles it."""
    dtype = (
        _pickle_global("numpy", "dtype")
        + _pickle_str(b"u1")
        + _pickle_int(0)
        + _pickle_int(1)
        + _TUPLE3
        + _REDUCE
        + _MARK  # dtype state: (3, '|', None, None, None, -1, -1, 0)
        + _pickle_int(3)
        + _pickle_str(b"|")
        + _NONE * 3
        + _pickle_int(-1) * 2
        + _pickle_int(0)
        + _TUPLE
        + _BUILD
    )
    return (
        _pickle_global("numpy.core.multiarray", "_reconstruct")
        + _pickle_global("numpy", "ndarray")
        + _pickle_int(0)
        + _TUPLE1
        + _pickle_str(b"b")
        + _TUPLE3
        + _REDUCE
        + _MARK  # array state: (1, (rows, 3072), dtype, False, rawdata)
        + _pickle_int(1)
        + _pickle_int(rows)
        + _pickle_int(IMAGE_BYTES)
        + _TUPLE2
        + dtype
        + _NEWFALSE
        + _pickle_str(bytes(raw))
        + _TUPLE
        + _BUILD
    )


def pickled_batch_bytes(images: torch.Tensor, labels: torch.Tensor, batch_label: str) -> bytes:
    """One ``cifar-10-batches-py`` file's bytes: a protocol 2 pickle of the batch dict.

    The dict has the real files' keys (``batch_label``, ``labels``, ``data``,
    ``filenames``), and ``data`` is pickled as numpy pickles an ndarray, so numpy,
    torchvision and :func:`gputui.engine.cifar.read_pickled_batch` all read it.
    """
    _check_batch(images, labels)
    label_list = [int(v) for v in labels.tolist()]
    out = bytearray(_PROTO2 + _EMPTY_DICT + _MARK)
    out += _pickle_str(b"batch_label") + _pickle_str(batch_label.encode())
    out += _pickle_str(b"labels") + _EMPTY_LIST
    for start in range(0, len(label_list), 1000):  # cPickle batched APPENDS by 1000
        out += _MARK + b"".join(_pickle_int(v) for v in label_list[start : start + 1000])
        out += _APPENDS
    out += _pickle_str(b"data")
    out += _pickle_uint8_array(len(images), _writable_bytes(images))
    out += _pickle_str(b"filenames") + _EMPTY_LIST
    if len(images):
        out += _MARK + b"".join(_pickle_str(f"image_{i}.png".encode()) for i in range(len(images)))
        out += _APPENDS
    out += _SETITEMS + _STOP
    return bytes(out)


def write_pickled_batches(folder: Path, train: Batches, test: Batches) -> None:
    """Write a whole ``cifar-10-batches-py`` folder, as torchvision's download leaves it.

    torchvision checks each file's MD5 against the real distribution's, so it reads
    these files only with that check bypassed; gputui's reader
    (:func:`gputui.engine.cifar.read_pickled_batch`) needs no bypass.

    Args:
        folder: the folder to create or fill (usually named ``cifar-10-batches-py``).
        train: ``(images, labels)`` split over ``data_batch_1`` to ``data_batch_5``.
        test: ``(images, labels)`` for ``test_batch``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for index, (name, images, labels) in enumerate(
        zip(PICKLED_TRAIN_FILES, train[0].tensor_split(5), train[1].tensor_split(5), strict=True),
        start=1,
    ):
        label = f"training batch {index} of 5"
        (folder / name).write_bytes(pickled_batch_bytes(images, labels, label))
    test_bytes = pickled_batch_bytes(*test, "testing batch 1 of 1")
    (folder / PICKLED_TEST_FILE).write_bytes(test_bytes)
    (folder / "batches.meta").write_bytes(_pickled_meta_bytes(len(train[0]) // 5))


def _pickled_meta_bytes(per_batch: int) -> bytes:
    """``batches.meta``: the class names torchvision reads (as ``label_names``)."""
    names = ("airplane", "automobile", *CLASSES[2:])  # the distribution's spelling
    out = bytearray(_PROTO2 + _EMPTY_DICT + _MARK)
    out += _pickle_str(b"num_cases_per_batch") + _pickle_int(per_batch)
    out += _pickle_str(b"label_names") + _EMPTY_LIST + _MARK
    out += b"".join(_pickle_str(name.encode()) for name in names) + _APPENDS
    out += _pickle_str(b"num_vis") + _pickle_int(IMAGE_BYTES)
    return bytes(out + _SETITEMS + _STOP)
