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
  ``labels``, a list of ints, read by :class:`RestrictedUnpickler`, which runs no
  pickled code.
"""

from __future__ import annotations

import functools
import importlib
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar

import torch

if TYPE_CHECKING:
    import numpy as np

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
    """The number of records in a binary file, from its size, after checking that size
    against ``records_per_file`` (``None``: any whole, non-zero number, as tests write).

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
    """Read binary batch files into one pair of tensors, in file order, the first ``limit``
    records in all.

    Every file's size is checked first (:func:`binary_record_count`), so a truncated file is
    reported even when ``limit`` means it would not be read.

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


def _text(value: object) -> str:
    """A pickled Python 2 ``str`` arrives as bytes: decode it for comparison."""
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def _latin1_encode(text: object, encoding: object = "latin-1") -> bytes:
    """``_codecs.encode`` for latin-1 only: how Python 3 pickles bytes at protocol 2."""
    if not isinstance(text, str) or _text(encoding).lower().replace("-", "") != "latin1":
        raise DatasetError("the pickle encodes text in a way a CIFAR-10 batch never does")
    return text.encode("latin-1")


def _numpy_function(module: str, name: str) -> Callable[..., Any]:
    """numpy's ``_core.<module>.<name>``, wherever this numpy keeps it.

    numpy 2 moved ``numpy.core`` to ``numpy._core`` and warns when ``numpy.core`` is
    imported, so ``numpy._core`` is tried first; numpy 1.26 has only part of it
    (``multiarray``, not ``numeric``) and 1.24 and 1.25 have none of it.
    """
    for package in ("numpy._core", "numpy.core"):
        try:
            found: Callable[..., Any] = getattr(
                importlib.import_module(f"{package}.{module}"), name
            )
            return found
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"this numpy has no {module}.{name}")


@functools.cache
def _allowed_globals() -> dict[tuple[str, str], Any]:
    """numpy's real object for each of :attr:`RestrictedUnpickler.ALLOWED`, looked up once."""
    import numpy as np  # optional: only torchvision's pickles need it (see read_pickled_batch)

    found: dict[tuple[str, str], Any] = {}
    for module, name in RestrictedUnpickler.ALLOWED:
        if (module, name) == ("_codecs", "encode"):
            found[(module, name)] = _latin1_encode
        elif module == "numpy":
            found[(module, name)] = getattr(np, name)
        else:  # numpy 1 pickles name numpy.core.<module>, numpy 2 numpy._core.<module>
            found[(module, name)] = _numpy_function(module.rpartition(".")[2], name)
    return found


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles a CIFAR-10 batch and nothing else: it runs no code the pickle names.

    ``find_class`` resolves only the globals an ndarray pickle uses, to numpy's own
    objects: ``ndarray``, ``dtype``, the rebuilders ``_reconstruct`` (protocols 2 to 4)
    and ``_frombuffer`` (protocol 5) under either of numpy's module names, and
    ``_codecs.encode``, which Python 3 writes for bytes at protocol 2, here limited to
    latin-1. numpy is imported when the first unpickler is made. Any other global,
    such as ``os.system`` or ``numpy.load``, raises :class:`DatasetError`.

    What it returns may still hold any array numpy can rebuild, objects and strings
    included: :func:`read_pickled_batch` accepts only arrays of plain numbers.
    """

    ALLOWED: ClassVar[frozenset[tuple[str, str]]] = frozenset(
        {
            ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "_reconstruct"),
            ("numpy.core.numeric", "_frombuffer"),
            ("numpy._core.numeric", "_frombuffer"),
            ("numpy", "ndarray"),
            ("numpy", "dtype"),
            ("_codecs", "encode"),
        }
    )
    """The ``(module, name)`` globals a pickle may name."""

    def __init__(self, file: BinaryIO, path: Path) -> None:
        super().__init__(file, encoding="bytes")
        self.path = path
        self._allowed = _allowed_globals()

    def find_class(self, module: str, name: str) -> Any:
        """Resolve an allowed global to numpy's object; refuse anything else."""
        if (module, name) not in self.ALLOWED:
            raise DatasetError(
                f"refusing to load {self.path}: it names {module}.{name}, which a CIFAR-10"
                " batch never does (it may run code); delete it or use another data folder"
            )
        found = self._allowed[(module, name)]
        # The pickle's BUILD opcode can set attributes on what find_class returns.
        # numpy's classes are immutable built-in types, but functions written in Python
        # (numpy's _frombuffer, the latin-1 encoder) are not: each lookup gets a fresh
        # partial of them, so that nothing a pickle does reaches the shared functions.
        # (A BUILD on the partial can only swap in another callable the pickle holds,
        # and it holds none but these.)
        return found if isinstance(found, type) else functools.partial(found)


def _entry(batch: dict[Any, Any], key: str) -> Any:
    """``batch[key]`` whether the pickle's keys are bytes (Python 2) or str."""
    for candidate in (key.encode(), key):
        if candidate in batch:
            return batch[candidate]
    return None


def _check_numbers(array: np.ndarray) -> None:
    """Raise unless ``array`` holds plain numbers: bools, ints or floats, with no fields.

    An object array's items were themselves unpickled through
    :meth:`RestrictedUnpickler.find_class`, so the allow-list guarded them too; they
    are refused here because they are not pixels or labels. Nothing but the dtype is
    read before this check passes: numpy trusts a pickled dtype's state, so a structured
    dtype can claim to hold no objects while a field is one, and reading that field
    would follow a pointer made of the file's bytes.
    """
    dtype = array.dtype
    if dtype.hasobject:
        raise DatasetError("an array in the pickle holds objects, not numbers")
    if dtype.kind not in "biuf" or dtype.fields is not None:
        # dtype.str, not str(dtype): it is short, and has no field names (which are
        # the pickle's own text, newlines included).
        fields = "" if dtype.fields is None else " with fields"
        raise DatasetError(
            f"an array in the pickle has dtype {dtype.str!r}{fields}, not a number type"
        )


def _to_tensor(array: np.ndarray) -> torch.Tensor:
    """A checked array as a C-ordered tensor in this machine's byte order, owning its memory.

    Always a copy: an unpickled array views the bytes object the pickle held (numpy
    marks it writable even so, and Python shares one-byte bytes objects process-wide),
    and ``torch.from_numpy`` reads neither Fortran order nor the other byte order.
    """
    _check_numbers(array)
    native = array.astype(array.dtype.newbyteorder("="), order="C")
    try:
        return torch.from_numpy(native)
    except TypeError:  # long double, or an unsigned type an older torch lacks
        raise DatasetError(
            f"an array in the pickle has dtype {array.dtype.str!r}, not a number type torch reads"
        ) from None


def read_pickled_batch(path: Path, records_per_file: int | None = RECORDS_PER_FILE) -> Batches:
    """Read one ``cifar-10-batches-py`` file with the restricted unpickler; it must hold
    ``records_per_file`` images (``None``: any number).

    The arrays' dtypes, shapes and counts are checked before they are copied into
    tensors, so a file of the wrong shape is refused without copying what it holds.

    Raises:
        DatasetError: the file is missing, not a CIFAR-10 pickle, names a forbidden
            global, is truncated or corrupt, holds arrays of anything but numbers or a
            label outside 0..9, or numpy is not installed.
    """
    try:
        import numpy as np  # here, not at the top: importing this module stays cheap
    except ImportError:
        raise DatasetError(
            f"cannot read CIFAR-10 file {path}: torchvision's pickled batches need numpy,"
            " which is not installed; install it (pip install numpy)"
        ) from None
    try:
        with path.open("rb") as file:
            batch = RestrictedUnpickler(file, path).load()
    except DatasetError:
        raise
    except OSError as error:
        raise DatasetError(f"cannot read CIFAR-10 file {path}: {error.strerror}") from None
    except Exception:  # a damaged pickle raises many kinds of error, none of them the user's
        raise DatasetError(
            f"corrupt CIFAR-10 batch file {path} (truncated or damaged): delete it and fetch it"
            " again"
        ) from None
    data = _entry(batch, "data") if isinstance(batch, dict) else None
    raw_labels = _entry(batch, "labels") if isinstance(batch, dict) else None
    if not isinstance(data, np.ndarray) or raw_labels is None:
        raise DatasetError(f"{path} is not a CIFAR-10 batch: it lacks 'data' or 'labels'")
    try:
        _check_numbers(data)
        if isinstance(raw_labels, np.ndarray):
            _check_numbers(raw_labels)
    except DatasetError as error:
        raise DatasetError(f"CIFAR-10 file {path}: {error}") from None
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != IMAGE_BYTES:
        raise DatasetError(
            f"{path} is not a CIFAR-10 batch: 'data' is {data.dtype} {data.shape},"
            f" not uint8 (N, {IMAGE_BYTES})"
        )
    if isinstance(raw_labels, np.ndarray):
        label_count = raw_labels.size
    elif isinstance(raw_labels, list | tuple) and all(isinstance(v, int) for v in raw_labels):
        label_count = len(raw_labels)  # the real files' form: a list of ints
    else:  # not handed to torch.tensor, which would look inside any arrays among them
        raise DatasetError(f"{path} is not a CIFAR-10 batch: 'labels' are not ints")
    if label_count != len(data):
        raise DatasetError(f"{path} has {label_count} labels for {len(data)} images: it is corrupt")
    if records_per_file is not None and len(data) != records_per_file:
        raise DatasetError(
            f"CIFAR-10 file {path} holds {len(data)} images, not {records_per_file}: it is"
            " truncated or corrupt; delete it and fetch it again"
        )
    try:
        images = _to_tensor(data).view(-1, 3, 32, 32)
        if isinstance(raw_labels, np.ndarray):
            labels = _to_tensor(raw_labels).to(torch.int64).reshape(-1)
    except DatasetError as error:
        raise DatasetError(f"CIFAR-10 file {path}: {error}") from None
    if not isinstance(raw_labels, np.ndarray):
        try:
            labels = torch.tensor(raw_labels, dtype=torch.int64)
        except (ValueError, RuntimeError):  # an int outside int64 (older torch: RuntimeError)
            raise DatasetError(f"{path} is not a CIFAR-10 batch: 'labels' are not ints") from None
    _check_labels(labels, path)
    return images, labels


def read_pickled_batches(
    paths: Sequence[Path],
    *,
    records_per_file: int | None = RECORDS_PER_FILE,
    limit: int | None = None,
) -> Batches:
    """Read pickled batch files into one pair of tensors, in file order; with ``limit``, only
    the first ``limit`` images (later files are not read)."""
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
