"""CIFAR-10 on disk: the binary distribution and torchvision's pickled batches.

Both formats are read into uint8 ``(N, 3, 32, 32)`` images and int64 labels with no
per-image Python loop, and both are validated so that a truncated or corrupt file
gives a one-line :class:`DatasetError` naming it.

- Binary (``cifar-10-batches-bin``): each record is 1 label byte and 3072 pixel
  bytes (the red plane, then green, then blue, each 32x32 row-major). A file holds
  10000 records; its record count is derived from its size, which must be a whole
  number of records, and checked against the standard count separately.
- Pickled (``cifar-10-batches-py``, what the tutorials' torchvision download leaves
  in ./data): a dict with ``data``, a numpy uint8 ``(N, 3072)`` array, and
  ``labels``, a list of ints. It is read by a restricted unpickler that runs no
  pickled code and needs no numpy: the few numpy globals an ndarray pickle names are
  mapped to small stand-ins that only collect the array's raw bytes.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

import torch

NUM_CLASSES = 10
"""CIFAR-10 labels are 0 to 9."""
CLASSES = ("plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
"""The class names, as the tutorials print them."""
IMAGE_BYTES = 3 * 32 * 32
"""Pixel bytes in one image: three 32x32 planes."""
RECORD_BYTES = 1 + IMAGE_BYTES
"""Bytes in one binary record: the label, then the pixels."""
RECORDS_PER_FILE = 10_000
"""Records in each file of the real distribution."""

BINARY_FOLDER = "cifar-10-batches-bin"
"""The folder the binary archive unpacks to."""
BINARY_TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
"""The binary training files, in order."""
BINARY_TEST_FILE = "test_batch.bin"
"""The binary held-out file."""
PICKLED_FOLDER = "cifar-10-batches-py"
"""The folder torchvision's download unpacks to."""
PICKLED_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
"""The pickled training files, in order."""
PICKLED_TEST_FILE = "test_batch"
"""The pickled held-out file."""


class DatasetError(Exception):
    """A dataset cannot be found, fetched or read; the message is one line for the user."""


Batches = tuple[torch.Tensor, torch.Tensor]
"""``(images, labels)``: uint8 ``(N, 3, 32, 32)`` and int64 ``(N,)``."""


# --------------------------------------------------------------------------- binary


def binary_record_count(path: Path, records_per_file: int | None = RECORDS_PER_FILE) -> int:
    """The number of records in a binary file, from its size, after checking that size.

    Args:
        path: a CIFAR-10 binary batch file.
        records_per_file: the count the file must hold; ``None`` accepts any whole,
            non-zero number of records (small files written by tests).

    Raises:
        DatasetError: the file is missing, empty, not a whole number of records, or
            not the expected size (a truncated download, for instance).
    """
    try:
        size = path.stat().st_size
    except OSError as error:
        raise DatasetError(f"cannot read CIFAR-10 file {path}: {error.strerror}") from None
    if size == 0 or size % RECORD_BYTES:
        raise DatasetError(
            f"CIFAR-10 file {path} is {size} bytes, not a whole number of {RECORD_BYTES}-byte"
            " records: it is truncated or corrupt; delete it and fetch it again"
        )
    if records_per_file is not None and size != records_per_file * RECORD_BYTES:
        raise DatasetError(
            f"CIFAR-10 file {path} holds {size // RECORD_BYTES} records, not {records_per_file}"
            f" ({size} of {records_per_file * RECORD_BYTES} bytes): it is truncated or corrupt;"
            " delete it and fetch it again"
        )
    return size // RECORD_BYTES


def _check_labels(labels: torch.Tensor, path: Path) -> None:
    """Raise unless every label is a CIFAR-10 class."""
    bad = (labels < 0) | (labels >= NUM_CLASSES)
    if bool(bad.any()):
        index = int(bad.nonzero()[0, 0])
        raise DatasetError(
            f"CIFAR-10 file {path} holds label {int(labels[index])} at record {index}, outside"
            f" 0 to {NUM_CLASSES - 1}: it is corrupt; delete it and fetch it again"
        )


def read_binary_batches(
    paths: Sequence[Path],
    *,
    records_per_file: int | None = RECORDS_PER_FILE,
    limit: int | None = None,
) -> Batches:
    """Read binary batch files into one pair of tensors, in file order.

    Every file's size is checked first, so a truncated file is reported even when
    ``limit`` means it would not be read.

    Args:
        paths: the files, e.g. the five training batches.
        records_per_file: see :func:`binary_record_count`.
        limit: read only the first ``limit`` records in all.

    Raises:
        DatasetError: a file is missing, truncated or holds a label outside 0..9.
    """
    counts = [binary_record_count(path, records_per_file) for path in paths]
    total = sum(counts) if limit is None else min(limit, sum(counts))
    images = torch.empty(total, 3, 32, 32, dtype=torch.uint8)
    labels = torch.empty(total, dtype=torch.int64)
    start = 0
    for path, count in zip(paths, counts, strict=True):
        take = min(count, total - start)
        if take <= 0:
            break
        buffer = bytearray(take * RECORD_BYTES)
        try:
            with path.open("rb") as file:
                got = file.readinto(buffer)
        except OSError as error:
            raise DatasetError(f"cannot read CIFAR-10 file {path}: {error.strerror}") from None
        if got != len(buffer):  # the file shrank since it was sized
            raise DatasetError(f"CIFAR-10 file {path} changed while it was read; try again")
        records = torch.frombuffer(buffer, dtype=torch.uint8).view(take, RECORD_BYTES)
        labels[start : start + take] = records[:, 0]
        _check_labels(labels[start : start + take], path)
        images[start : start + take] = records[:, 1:].view(take, 3, 32, 32)
        start += take
    return images, labels


# --------------------------------------------------------------------------- pickled


class _NdarrayMarker:
    """Stands in for ``numpy.ndarray``, which a pickle passes to ``_reconstruct``."""


def _text(value: object) -> str:
    """A pickled Python 2 ``str`` arrives as bytes: decode it for comparison."""
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


_DTYPES = {"u1": torch.uint8, "i1": torch.int8, "i2": torch.int16, "i4": torch.int32}
_DTYPES |= {"i8": torch.int64, "f4": torch.float32, "f8": torch.float64}


class _PickledDtype:
    """Stands in for ``numpy.dtype``: keeps the type code and the byte order."""

    def __init__(self, code: object, align: object = False, copy: object = False) -> None:
        self.code = _text(code)
        self.byteorder = "|" if self.code.endswith("1") else "="

    def __setstate__(self, state: object) -> None:
        if isinstance(state, tuple) and len(state) >= 2:
            self.byteorder = _text(state[1])

    def torch_dtype(self) -> torch.dtype | None:
        """The matching torch dtype, or ``None`` for one CIFAR-10 never uses."""
        if self.byteorder == ">":  # big-endian: torch.frombuffer reads native order only
            return None
        return _DTYPES.get(self.code.lstrip("<=|"))


@dataclass
class _PickledArray:
    """Stands in for an ndarray being unpickled: its shape, dtype and raw bytes."""

    shape: tuple[int, ...] = ()
    dtype: _PickledDtype | None = None
    fortran_order: bool = False
    data: bytes | bytearray = field(default=b"", repr=False)

    def __setstate__(self, state: object) -> None:
        # numpy's ndarray state: (version, shape, dtype, is_fortran, rawdata); version
        # 0 pickles leave the version out.
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise DatasetError("an array in the pickle has an unknown layout")
        shape, dtype, fortran_order, data = state[-4:]
        if isinstance(data, str):  # a Python 2 str read with encoding="latin1"
            data = data.encode("latin-1")
        if not isinstance(dtype, _PickledDtype) or not isinstance(data, bytes | bytearray):
            raise DatasetError("an array in the pickle holds objects, not numbers")
        self.shape = tuple(int(n) for n in shape)
        self.dtype, self.fortran_order, self.data = dtype, bool(fortran_order), data

    def to_tensor(self) -> torch.Tensor:
        """The array as a CPU tensor that owns its memory."""
        dtype = self.dtype.torch_dtype() if self.dtype is not None else None
        if dtype is None:
            code = self.dtype.code if self.dtype is not None else "?"
            raise DatasetError(f"an array in the pickle has dtype {code!r}, not a number type")
        count = 1
        for n in self.shape:
            count *= n
        if len(self.data) != count * dtype.itemsize:
            raise DatasetError(
                f"an array in the pickle has {len(self.data)} bytes for shape {self.shape}:"
                " it is truncated or corrupt"
            )
        flat = (
            torch.frombuffer(bytearray(self.data), dtype=dtype)
            if count
            else torch.empty(0, dtype=dtype)
        )
        if self.fortran_order:
            return flat.view(*reversed(self.shape)).permute(*reversed(range(len(self.shape))))
        return flat.view(*self.shape)


def _reconstruct(subtype: object, shape: object, dtype_code: object) -> _PickledArray:
    """Stands in for ``numpy.core.multiarray._reconstruct``: an empty array to fill."""
    if not isinstance(subtype, _NdarrayMarker):
        raise DatasetError("the pickle rebuilds something other than a numpy array")
    return _PickledArray()


def _frombuffer(buffer: object, dtype: object, shape: object, order: object) -> _PickledArray:
    """Stands in for ``numpy.core.numeric._frombuffer``, which protocol 5 pickles name."""
    array = _PickledArray()
    array.__setstate__((shape, dtype, _text(order) == "F", bytes(buffer)))  # type: ignore[arg-type]
    return array


def _latin1_encode(text: object, encoding: object = "latin-1") -> bytes:
    """Stands in for ``_codecs.encode``, which Python 3 protocol 2 pickles of bytes name."""
    if not isinstance(text, str) or _text(encoding).lower().replace("-", "") != "latin1":
        raise DatasetError("the pickle encodes text in a way a CIFAR-10 batch never does")
    return text.encode("latin-1")


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles a CIFAR-10 batch and nothing else: it runs no code the pickle names.

    ``find_class`` resolves only the globals an ndarray pickle uses (numpy's array
    and dtype rebuilders, and ``_codecs.encode``, which Python 3 writes for bytes at
    protocol 2) and only to local stand-ins that collect raw bytes: numpy is neither
    needed nor imported. Any other global, such as ``os.system``, raises
    :class:`DatasetError`.
    """

    ALLOWED: ClassVar[dict[tuple[str, str], Callable[..., Any]]] = {
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy.core.numeric", "_frombuffer"): _frombuffer,
        ("numpy._core.numeric", "_frombuffer"): _frombuffer,
        ("numpy", "ndarray"): _NdarrayMarker,
        ("numpy", "dtype"): _PickledDtype,
        ("_codecs", "encode"): _latin1_encode,
    }
    """The globals a pickle may name, and what each stands for here."""

    def __init__(self, file: BinaryIO, path: Path) -> None:
        super().__init__(file, encoding="bytes")
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        """Resolve an allowed numpy global to its stand-in; refuse anything else."""
        try:
            stand_in = self.ALLOWED[(module, name)]
        except KeyError:
            raise DatasetError(
                f"refusing to load {self.path}: it names {module}.{name}, which a CIFAR-10"
                " batch never does (it may run code); delete it or use another data folder"
            ) from None
        # A fresh object each time: the pickle's BUILD opcode can set attributes on what
        # find_class returns, and must not reach the shared functions and classes.
        if stand_in is _NdarrayMarker:
            return _NdarrayMarker()
        return functools.partial(stand_in)


def _entry(batch: dict[Any, Any], key: str) -> Any:
    """``batch[key]`` whether the pickle's keys are bytes (Python 2) or str."""
    for candidate in (key.encode(), key):
        if candidate in batch:
            return batch[candidate]
    return None


def read_pickled_batch(path: Path, records_per_file: int | None = RECORDS_PER_FILE) -> Batches:
    """Read one ``cifar-10-batches-py`` file with the restricted unpickler.

    Args:
        path: e.g. ``data/cifar-10-batches-py/data_batch_1``.
        records_per_file: the number of images it must hold; ``None`` accepts any.

    Raises:
        DatasetError: the file is missing, not a CIFAR-10 pickle, names a forbidden
            global, is truncated or corrupt, or holds a label outside 0..9.
    """
    try:
        with path.open("rb") as file:
            batch = RestrictedUnpickler(file, path).load()
    except DatasetError:
        raise
    except OSError as error:
        raise DatasetError(f"cannot read CIFAR-10 file {path}: {error.strerror}") from None
    except Exception as error:  # a damaged pickle raises many kinds of error
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DatasetError(
            f"CIFAR-10 file {path} is truncated or corrupt ({reason}); delete it and fetch it again"
        ) from None
    data = _entry(batch, "data") if isinstance(batch, dict) else None
    raw_labels = _entry(batch, "labels") if isinstance(batch, dict) else None
    if not isinstance(data, _PickledArray) or raw_labels is None:
        raise DatasetError(f"{path} is not a CIFAR-10 batch: it lacks 'data' or 'labels'")
    try:
        flat = data.to_tensor()
    except DatasetError as error:
        raise DatasetError(f"CIFAR-10 file {path}: {error}") from None
    if flat.dtype != torch.uint8 or flat.dim() != 2 or flat.shape[1] != IMAGE_BYTES:
        raise DatasetError(
            f"{path} is not a CIFAR-10 batch: 'data' is {flat.dtype} {tuple(flat.shape)},"
            f" not uint8 (N, {IMAGE_BYTES})"
        )
    if isinstance(raw_labels, _PickledArray):
        labels = raw_labels.to_tensor().to(torch.int64).reshape(-1)
    else:
        try:
            labels = torch.tensor(raw_labels, dtype=torch.int64)
        except (TypeError, ValueError, RuntimeError):
            raise DatasetError(f"{path} is not a CIFAR-10 batch: 'labels' are not ints") from None
    if labels.shape != (len(flat),):
        raise DatasetError(f"{path} has {len(labels)} labels for {len(flat)} images: it is corrupt")
    if records_per_file is not None and len(flat) != records_per_file:
        raise DatasetError(
            f"CIFAR-10 file {path} holds {len(flat)} images, not {records_per_file}: it is"
            " truncated or corrupt; delete it and fetch it again"
        )
    _check_labels(labels, path)
    return flat.contiguous().view(-1, 3, 32, 32), labels


def read_pickled_batches(
    paths: Sequence[Path],
    *,
    records_per_file: int | None = RECORDS_PER_FILE,
    limit: int | None = None,
) -> Batches:
    """Read pickled batch files into one pair of tensors, in file order.

    Args:
        paths: the files, e.g. the five training batches.
        records_per_file: see :func:`read_pickled_batch`.
        limit: keep only the first ``limit`` images; later files are not read.
    """
    for path in paths:
        if not path.is_file():
            raise DatasetError(f"CIFAR-10 file {path} is missing")
    parts: list[Batches] = []
    have = 0
    for path in paths:
        if limit is not None and have >= limit:
            break
        images, labels = read_pickled_batch(path, records_per_file)
        parts.append((images, labels))
        have += len(images)
    images = torch.cat([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    labels = torch.cat([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
    return images[:limit], labels[:limit]
