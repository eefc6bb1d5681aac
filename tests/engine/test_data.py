"""The data layer: CIFAR-10 readers, the download, and the synthetic dataset.

Everything runs offline. CIFAR-10 files are written in the real formats (by
tests/engine/cifar_files.py), with 20 records per file instead of 10000; numpy-written
pickles come from
tests/data/cifar10_pickles; the download is served from a local HTTP server on
127.0.0.1 in a thread.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import os
import pickle
import re
import socket
import sys
import tarfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy
import pytest
import torch

from gputui.engine import cifar, synthetic
from gputui.engine.cifar import DatasetError
from gputui.engine.data import (
    MEAN,
    STD,
    Dataset,
    default_data_dir,
    load_dataset,
    normalize,
    search_dirs,
)
from gputui.engine.download import (
    CIFAR10_ARCHIVE,
    CIFAR10_URL,
    download_file,
    extract_cifar10,
)
from tests.engine import cifar_files

PER_FILE = 20
FIXTURES = Path(__file__).parent.parent / "data" / "cifar10_pickles"


# --------------------------------------------------------------------------- helpers


def random_batches(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (count, 3, 32, 32), dtype=torch.uint8, generator=generator)
    return images, torch.randint(0, 10, (count,), generator=generator)


@dataclass
class Cifar:
    """A small CIFAR-10 made here: 5 x 20 training images and 20 held-out ones."""

    train: tuple[torch.Tensor, torch.Tensor] = field(
        default_factory=lambda: random_batches(5 * PER_FILE, 1)
    )
    test: tuple[torch.Tensor, torch.Tensor] = field(
        default_factory=lambda: random_batches(PER_FILE, 2)
    )

    def assert_loaded(self, data: Dataset, source: Path) -> None:
        assert data.name == "cifar10"
        assert data.source == str(source)
        assert data.note is None
        assert torch.equal(data.train_images, self.train[0])
        assert torch.equal(data.train_labels, self.train[1])
        assert torch.equal(data.test_images, self.test[0])
        assert torch.equal(data.test_labels, self.test[1])
        assert data.train_images.is_contiguous() and data.test_images.is_contiguous()
        assert data.train_labels.dtype == torch.int64


@pytest.fixture
def small() -> Cifar:
    return Cifar()


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """The tensors here are small: one thread spares OpenMP's waits on a busy 2-core box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A safety net: any URL a test opens must be on 127.0.0.1."""
    real_urlopen = urllib.request.urlopen

    def urlopen(request: urllib.request.Request, *args: object, **kwargs: object) -> object:
        host = urllib.parse.urlsplit(request.full_url).hostname
        if host != "127.0.0.1":
            raise urllib.error.URLError(f"tests may not reach {host}")
        return real_urlopen(request, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache folder and an empty working folder (so ./data is empty)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def binary_archive(small: Cifar, extra: list[tarfile.TarInfo] | None = None) -> bytes:
    """A tar.gz laid out as cifar-10-binary.tar.gz, with ``extra`` members appended."""
    folder_bytes = {}
    for index, name in enumerate(cifar.BINARY_TRAIN_FILES):
        rows = slice(index * PER_FILE, (index + 1) * PER_FILE)
        folder_bytes[name] = record_bytes(small.train[0][rows], small.train[1][rows])
    folder_bytes[cifar.BINARY_TEST_FILE] = record_bytes(*small.test)
    folder_bytes["batches.meta.txt"] = "\n".join(cifar.CLASSES).encode()
    folder_bytes["readme.html"] = b"<html></html>"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        top = tarfile.TarInfo(cifar.BINARY_FOLDER)
        top.type = tarfile.DIRTYPE
        tar.addfile(top)
        for name, payload in folder_bytes.items():
            info = tarfile.TarInfo(f"{cifar.BINARY_FOLDER}/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
        for info in extra or []:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    return buffer.getvalue()


def record_bytes(images: torch.Tensor, labels: torch.Tensor) -> bytes:
    """Binary records built independently of the reader: label byte, then R, G, B planes."""
    out = bytearray()
    for image, label in zip(images.tolist(), labels.tolist(), strict=True):
        out.append(label)
        for plane in image:  # channel-major, then rows, then columns
            for row in plane:
                out.extend(row)
    return bytes(out)


def md5(payload: bytes) -> str:
    return hashlib.md5(payload).hexdigest()


class ArchiveServer:
    """Serves ``payload`` at /cifar.tar.gz on 127.0.0.1, whole or cut off half-way."""

    def __init__(self) -> None:
        self.payload = b""
        self.cut_off = False
        self.requests = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests += 1
                body = server.payload[: len(server.payload) // 2] if server.cut_off else None
                self.send_response(200)
                self.send_header("Content-Length", str(len(server.payload)))
                self.end_headers()
                self.wfile.write(body if body is not None else server.payload)
                self.close_connection = True

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/cifar.tar.gz"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def server() -> Iterator[ArchiveServer]:
    served = ArchiveServer()
    yield served
    served.close()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/cifar-10-binary.tar.gz"


def leftovers(folder: Path) -> list[str]:
    """Hidden temporary files or folders a download or extraction left behind."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# --------------------------------------------------------------------------- binary format


def test_binary_folder_is_read_in_the_real_layout(small: Cifar, tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    for index, name in enumerate(cifar.BINARY_TRAIN_FILES):
        rows = slice(index * PER_FILE, (index + 1) * PER_FILE)
        (folder / name).write_bytes(record_bytes(small.train[0][rows], small.train[1][rows]))
    (folder / cifar.BINARY_TEST_FILE).write_bytes(record_bytes(*small.test))
    data = load_dataset("cifar10", tmp_path, records_per_file=PER_FILE, download=False)
    small.assert_loaded(data, folder)


def test_binary_writer_round_trips_and_matches_the_layout(small: Cifar, tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-bin"
    cifar_files.write_binary_batches(folder, small.train, small.test)
    assert (folder / "data_batch_1.bin").read_bytes() == record_bytes(
        small.train[0][:PER_FILE], small.train[1][:PER_FILE]
    )
    small.assert_loaded(load_dataset("auto", tmp_path, records_per_file=PER_FILE), folder)


def test_a_folder_given_directly_is_used(small: Cifar, tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    cifar_files.write_binary_batches(folder, small.train, small.test)
    small.assert_loaded(load_dataset("auto", folder, records_per_file=PER_FILE), folder)


def test_limits_take_the_first_images(small: Cifar, tmp_path: Path) -> None:
    cifar_files.write_binary_batches(tmp_path / "cifar-10-batches-bin", small.train, small.test)
    data = load_dataset("auto", tmp_path, records_per_file=PER_FILE, limit=33, test_limit=5)
    assert torch.equal(data.train_images, small.train[0][:33])
    assert torch.equal(data.train_labels, small.train[1][:33])
    assert torch.equal(data.test_images, small.test[0][:5])


def test_the_standard_file_size_is_enforced(small: Cifar, tmp_path: Path) -> None:
    cifar_files.write_binary_batches(tmp_path / "cifar-10-batches-bin", small.train, small.test)
    with pytest.raises(DatasetError) as caught:
        load_dataset("auto", tmp_path)  # real files hold 10000 records
    message = str(caught.value)
    assert "data_batch_1.bin holds 20 records, not 10000" in message
    assert "\n" not in message


def test_a_truncated_binary_file_is_named(small: Cifar, tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-bin"
    cifar_files.write_binary_batches(folder, small.train, small.test)
    victim = folder / "data_batch_3.bin"
    victim.write_bytes(victim.read_bytes()[:-1000])
    with pytest.raises(DatasetError, match=r"data_batch_3\.bin is 60460 bytes, not a whole number"):
        load_dataset("auto", tmp_path, records_per_file=None)
    with pytest.raises(DatasetError, match=r"data_batch_3\.bin is 60460 bytes"):
        load_dataset("auto", tmp_path, records_per_file=None, limit=5)  # checked, though not read


def test_a_corrupt_binary_label_is_named(small: Cifar, tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-bin"
    cifar_files.write_binary_batches(folder, small.train, small.test)
    victim = folder / cifar.BINARY_TEST_FILE
    raw = bytearray(victim.read_bytes())
    raw[7 * cifar.RECORD_BYTES] = 200
    victim.write_bytes(bytes(raw))
    with pytest.raises(DatasetError, match=r"test_batch\.bin holds label 200 at record 7"):
        load_dataset("auto", tmp_path, records_per_file=PER_FILE)


def test_a_missing_binary_file_is_named(small: Cifar, tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-bin"
    cifar_files.write_binary_batches(folder, small.train, small.test)
    (folder / "data_batch_5.bin").unlink()
    with pytest.raises(DatasetError, match=r"cannot read CIFAR-10 file .*data_batch_5\.bin"):
        load_dataset("auto", tmp_path, records_per_file=PER_FILE)


# --------------------------------------------------------------------------- torchvision format


def test_the_tutorials_pickled_folder_in_dot_data_is_found(small: Cifar, isolated: Path) -> None:
    folder = isolated / "data" / "cifar-10-batches-py"
    cifar_files.write_pickled_batches(folder, small.train, small.test)
    small.assert_loaded(load_dataset(records_per_file=PER_FILE), folder)


def test_pickled_files_are_laid_out_as_python2_cpickle_wrote_them(small: Cifar) -> None:
    payload = cifar_files.pickled_batch_bytes(small.test[0], small.test[1], "testing batch 1 of 1")
    assert payload.startswith(b"\x80\x02}(U\x0bbatch_labelU\x14testing batch 1 of 1U\x06labels]")
    assert (
        b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85U\x01b\x87R(" in payload
    )
    assert b"cnumpy\ndtype\nU\x02u1K\x00K\x01\x87R(K\x03U\x01|NNNJ\xff\xff\xff\xff" in payload
    # A plain unpickler that records the globals (and builds nothing) sees numpy's layout.
    names = []

    class Stub:
        def __init__(self, *args: object) -> None:
            self.args = args

        def __setstate__(self, state: tuple[object, ...]) -> None:
            self.state = state

    class Recorder(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            names.append(f"{module}.{name}")
            return Stub

    batch = Recorder(io.BytesIO(payload), encoding="bytes").load()
    assert list(batch) == [b"batch_label", b"labels", b"data", b"filenames"]
    assert batch[b"labels"] == small.test[1].tolist()
    version, shape, dtype, fortran, raw = batch[b"data"].state
    assert (version, shape, fortran) == (1, (PER_FILE, 3072), False)
    assert dtype.args == (b"u1", 0, 1) and dtype.state == (3, b"|", None, None, None, -1, -1, 0)
    records = record_bytes(*small.test)  # the same pixels, less each record's label byte
    assert raw == b"".join(records[i * 3073 + 1 : (i + 1) * 3073] for i in range(PER_FILE))
    assert names == ["numpy.core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype"]


def test_pickled_files_load_with_real_numpy_as_torchvision_loads_them(
    small: Cifar, tmp_path: Path
) -> None:
    payload = cifar_files.pickled_batch_bytes(small.test[0], small.test[1], "testing batch 1 of 1")
    batch = pickle.loads(payload, encoding="latin1")  # torchvision's CIFAR10 does this
    assert isinstance(batch["data"], numpy.ndarray) and batch["data"].dtype == numpy.uint8
    assert batch["data"].tobytes() == bytes(cifar_files._writable_bytes(small.test[0]))
    assert batch["labels"] == small.test[1].tolist()
    for protocol in (2, 4, 5):  # and what numpy writes, we read
        path = tmp_path / f"protocol_{protocol}"
        path.write_bytes(pickle.dumps({"data": batch["data"], "labels": batch["labels"]}, protocol))
        images, labels = cifar.read_pickled_batch(path, records_per_file=None)
        assert torch.equal(images, small.test[0]) and torch.equal(labels, small.test[1])


def expected_fixture() -> tuple[torch.Tensor, torch.Tensor]:
    """What every numpy-written fixture holds (see make_fixtures.py)."""
    pixels = bytearray((i * 7 + i // 3072) % 256 for i in range(2 * 3072))
    return torch.frombuffer(pixels, dtype=torch.uint8).view(2, 3, 32, 32), torch.tensor([3, 8])


@pytest.mark.parametrize(
    "fixture",
    [
        "numpy_protocol2.pkl",
        "numpy_protocol4.pkl",
        "numpy_protocol5.pkl",
        "numpy_fortran_int64_labels.pkl",
    ],
)
def test_pickles_written_by_numpy_are_read(fixture: str) -> None:
    images, labels = cifar.read_pickled_batch(FIXTURES / fixture, records_per_file=None)
    expected_images, expected_labels = expected_fixture()
    assert torch.equal(images, expected_images) and images.is_contiguous()
    assert torch.equal(labels, expected_labels) and labels.dtype == torch.int64


class RunsCommand:
    """Unpickling this would run a shell command: the classic malicious pickle."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_the_restricted_unpickler_refuses_os_system(
    small: Cifar, tmp_path: Path, isolated: Path
) -> None:
    folder = isolated / "data" / "cifar-10-batches-py"
    cifar_files.write_pickled_batches(folder, small.train, small.test)
    marker = tmp_path / "pwned"
    evil = {b"data": RunsCommand(marker), b"labels": [0]}
    (folder / "data_batch_1").write_bytes(pickle.dumps(evil, protocol=2))
    with pytest.raises(
        DatasetError, match=r"refusing to load .*data_batch_1: it names \w+\.system"
    ):
        load_dataset(records_per_file=PER_FILE)
    assert not marker.exists()


@pytest.mark.parametrize(
    "target",
    [
        "builtins.eval",
        "subprocess.Popen",
        "numpy.load",
        "numpy.frombuffer",
        "numpy._core.multiarray.scalar",
        "_codecs.decode",
    ],
)
def test_only_the_array_rebuilders_are_allowed(tmp_path: Path, target: str) -> None:
    module, name = target.rsplit(".", 1)
    path = tmp_path / "data_batch_1"
    path.write_bytes(b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"U\x011\x85R.")
    with pytest.raises(DatasetError, match=rf"it names {target}, which a CIFAR-10 batch never"):
        cifar.read_pickled_batch(path)


@pytest.mark.parametrize("allowed", sorted(cifar.RestrictedUnpickler.ALLOWED))
def test_a_pickle_cannot_tamper_with_the_allowed_globals(
    tmp_path: Path, allowed: tuple[str, str]
) -> None:
    module, name = allowed
    path = tmp_path / "data_batch_1"
    # BUILD with slot state on what find_class returned: setattr(it, "polluted", 1).
    build = b"N}X\x08\x00\x00\x00pollutedK\x01s\x86b."
    path.write_bytes(b"\x80\x02c" + f"{module}\n{name}\n".encode() + build)
    with pytest.raises(DatasetError, match="data_batch_1"):
        cifar.read_pickled_batch(path)
    for shared in cifar._allowed_globals().values():  # numpy's objects, which every file uses
        assert not hasattr(shared, "polluted")
    images, _ = cifar.read_pickled_batch(FIXTURES / "numpy_protocol4.pkl", records_per_file=None)
    assert torch.equal(images, expected_fixture()[0])  # the next file still reads


def write_batch(tmp_path: Path, data: object, labels: object, protocol: int = 4) -> Path:
    """A batch dict pickled by this numpy, as a ``data_batch_1`` in ``tmp_path``."""
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({"data": data, "labels": labels}, protocol))
    return path


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("label_dtype", [">i8", ">u2", "<i2", ">f8"])
def test_arrays_are_read_in_either_order_and_byte_order(
    tmp_path: Path, protocol: int, order: str, label_dtype: str
) -> None:
    expected_images, expected_labels = expected_fixture()
    data = numpy.asarray(expected_images.reshape(2, 3072).numpy(), order=order)
    labels = numpy.array(expected_labels.tolist(), dtype=label_dtype)
    path = write_batch(tmp_path, data, labels, protocol)
    images, read_labels = cifar.read_pickled_batch(path, records_per_file=None)
    assert torch.equal(images, expected_images) and images.is_contiguous()
    assert torch.equal(read_labels, expected_labels) and read_labels.dtype == torch.int64


def refused_arrays() -> dict[str, tuple[numpy.ndarray, str]]:
    """Arrays that are not plain numbers, and the error each gives."""
    bytes_of_int32 = {name: (numpy.uint8, offset) for offset, name in enumerate("rgba")}
    arrays = {
        "objects": numpy.array([1, "two"], dtype=object),
        "structured": numpy.zeros(2, [("r", "u1"), ("g", "u1")]),
        "int32 with fields": numpy.zeros(2, (numpy.int32, bytes_of_int32)),
        "unicode": numpy.array(["a", "b"]),
        "bytes": numpy.array([b"a", b"b"]),
        "complex": numpy.zeros(2, numpy.complex64),
        "datetime": numpy.zeros(2, "M8[s]"),
    }
    expected = {
        name: re.escape(f"has dtype '{array.dtype.str}'") + ".*, not a number type$"
        for name, array in arrays.items()
    }
    expected["objects"] = "holds objects, not numbers$"
    return {name: (array, expected[name]) for name, array in arrays.items()}


@pytest.mark.parametrize("key", ["data", "labels"])
@pytest.mark.parametrize("kind", sorted(refused_arrays()))
def test_arrays_of_anything_but_numbers_are_refused(tmp_path: Path, key: str, kind: str) -> None:
    array, message = refused_arrays()[kind]
    batch = {"data": numpy.zeros((2, 3072), numpy.uint8), "labels": [0, 1]}
    batch[key] = array
    path = write_batch(tmp_path, batch["data"], batch["labels"])
    with pytest.raises(
        DatasetError, match=rf"CIFAR-10 file .*data_batch_1: an array in the pickle {message}"
    ):
        cifar.read_pickled_batch(path, records_per_file=None)


def test_an_object_array_s_items_pass_the_allow_list_too(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = write_batch(tmp_path, numpy.array([RunsCommand(marker)], dtype=object), [0])
    with pytest.raises(DatasetError, match=r"it names \w+\.system, which a CIFAR-10 batch never"):
        cifar.read_pickled_batch(path, records_per_file=None)
    assert not marker.exists()


@pytest.mark.skipif(numpy.dtype(numpy.longdouble).itemsize == 8, reason="long double is double")
def test_a_number_type_torch_lacks_is_refused(tmp_path: Path) -> None:
    path = write_batch(tmp_path, numpy.zeros((2, 3072), numpy.uint8), numpy.zeros(2, "g"))
    with pytest.raises(DatasetError, match=r"data_batch_1: .* not a number type torch reads$"):
        cifar.read_pickled_batch(path, records_per_file=None)


@pytest.mark.parametrize("encoding", ["utf-8", "rot13"])
def test_codecs_encode_is_allowed_for_latin1_only(tmp_path: Path, encoding: str) -> None:
    def text(value: str) -> bytes:  # BINUNICODE
        return b"X" + len(value.encode()).to_bytes(4, "little") + value.encode()

    path = tmp_path / "data_batch_1"
    path.write_bytes(b"\x80\x02c_codecs\nencode\n" + text("abc") + text(encoding) + b"\x86R.")
    with pytest.raises(DatasetError, match="encodes text in a way a CIFAR-10 batch never does"):
        cifar.read_pickled_batch(path)


@pytest.mark.parametrize(
    ("data", "labels", "message"),
    [
        (numpy.zeros((2, 3072), numpy.int64), [0, 1], r"'data' is int64 \(2, 3072\), not uint8"),
        (numpy.zeros((2, 3071), numpy.uint8), [0, 1], r"'data' is uint8 \(2, 3071\), not uint8"),
        (numpy.zeros(6144, numpy.uint8), [0, 1], r"'data' is uint8 \(6144,\), not uint8"),
        (numpy.zeros((2, 3072), numpy.uint8), [0, "1"], "'labels' are not ints"),
        (numpy.zeros((2, 3072), numpy.uint8), [0, 1.0], "'labels' are not ints"),
        (numpy.zeros((2, 3072), numpy.uint8), [0, 2**70], "'labels' are not ints"),
        (numpy.zeros((2, 3072), numpy.uint8), [0, numpy.array(1)], "'labels' are not ints"),
        (numpy.zeros((2, 3072), numpy.uint8), numpy.zeros(3, numpy.int64), "has 3 labels for 2"),
        (numpy.zeros((2, 3072), numpy.uint8), [0], "has 1 labels for 2 images"),
    ],
)
def test_a_pickle_of_the_wrong_shape_is_named(
    tmp_path: Path, data: numpy.ndarray, labels: object, message: str
) -> None:
    path = write_batch(tmp_path, data, labels)
    with pytest.raises(DatasetError, match=rf"data_batch_1 .*{message}"):
        cifar.read_pickled_batch(path, records_per_file=None)


def test_reading_a_pickle_without_numpy_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_batch(tmp_path, numpy.zeros((2, 3072), numpy.uint8), [0, 1])
    monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy raises ImportError
    with pytest.raises(DatasetError, match=r"data_batch_1: .* need numpy, which is not installed"):
        cifar.read_pickled_batch(path, records_per_file=None)


class ShortArray:
    """Pickles as numpy's rebuilders would a uint8 (2, 3072) array, but with 100 bytes."""

    def __init__(self, protocol: int) -> None:
        self.protocol = protocol

    def __reduce__(self) -> tuple[object, ...]:
        uint8 = numpy.dtype(numpy.uint8)
        if self.protocol >= 5:  # numpy's _frombuffer, as this numpy names it
            frombuffer = numpy.zeros(1).__reduce_ex__(5)[0]
            return frombuffer, (bytearray(100), uint8, (2, 3072), "C")
        reconstruct, args, _ = numpy.zeros(1, uint8).__reduce__()  # numpy's _reconstruct
        return reconstruct, args, (1, (2, 3072), uint8, False, bytes(100))


@pytest.mark.parametrize("protocol", [2, 5])
def test_an_array_with_too_few_bytes_is_named(tmp_path: Path, protocol: int) -> None:
    path = write_batch(tmp_path, ShortArray(protocol), [0, 1], protocol)
    with pytest.raises(DatasetError, match=r"^corrupt CIFAR-10 batch file \S+/data_batch_1 "):
        cifar.read_pickled_batch(path, records_per_file=None)


def test_a_truncated_pickle_is_named(small: Cifar, isolated: Path) -> None:
    folder = isolated / "data" / "cifar-10-batches-py"
    cifar_files.write_pickled_batches(folder, small.train, small.test)
    victim = folder / "data_batch_2"
    victim.write_bytes(victim.read_bytes()[:5000])
    with pytest.raises(DatasetError, match=r"^corrupt CIFAR-10 batch file \S+/data_batch_2 "):
        load_dataset(records_per_file=PER_FILE)


def test_a_corrupt_pickle_is_named(small: Cifar, isolated: Path) -> None:
    folder = isolated / "data" / "cifar-10-batches-py"
    cifar_files.write_pickled_batches(folder, small.train, small.test)
    (folder / "test_batch").write_bytes(bytes(range(256)) * 40)
    with pytest.raises(
        DatasetError, match=r"^corrupt CIFAR-10 batch file \S+/test_batch "
    ) as caught:
        load_dataset(records_per_file=PER_FILE)
    assert "\n" not in str(caught.value)
    assert "load key" not in str(caught.value)  # the unpickler's words are not the user's


def test_a_pickle_with_the_wrong_image_count_is_named(small: Cifar, isolated: Path) -> None:
    cifar_files.write_pickled_batches(
        isolated / "data" / "cifar-10-batches-py", small.train, small.test
    )
    with pytest.raises(DatasetError, match=r"data_batch_1 holds 20 images, not 10000"):
        load_dataset()


# --------------------------------------------------------------------------- download


def test_cifar10_is_downloaded_verified_extracted_and_kept(
    small: Cifar, server: ArchiveServer, tmp_path: Path
) -> None:
    server.payload = binary_archive(small)
    calls: list[tuple[int, int]] = []
    target = tmp_path / "dl" / "new"  # made by the download

    def load() -> Dataset:
        return load_dataset(
            "cifar10",
            target,
            url=server.url,
            md5=md5(server.payload),
            progress=lambda done, total: calls.append((done, total)),
            records_per_file=PER_FILE,
        )

    small.assert_loaded(load(), target / "cifar-10-batches-bin")
    assert (target / "cifar-10-binary.tar.gz").read_bytes() == server.payload
    assert sorted(p.name for p in (target / "cifar-10-batches-bin").iterdir()) == sorted(
        [*cifar.BINARY_TRAIN_FILES, cifar.BINARY_TEST_FILE, "batches.meta.txt"]
    )  # readme.html is not an expected member
    assert leftovers(target) == []
    size = len(server.payload)
    assert calls[0] == (0, size) and calls[-1] == (size, size)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    small.assert_loaded(load(), target / "cifar-10-batches-bin")
    assert server.requests == 1  # downloaded once


def test_the_cache_folder_is_the_default_target(
    small: Cifar, server: ArchiveServer, tmp_path: Path
) -> None:
    server.payload = binary_archive(small)
    data = load_dataset(
        "cifar10", url=server.url, md5=md5(server.payload), records_per_file=PER_FILE
    )
    small.assert_loaded(data, tmp_path / "cache" / "gputui" / "cifar-10-batches-bin")
    small.assert_loaded(load_dataset(records_per_file=PER_FILE), Path(data.source))  # then auto


def test_an_interrupted_download_leaves_no_file(
    small: Cifar, server: ArchiveServer, tmp_path: Path
) -> None:
    server.payload = binary_archive(small)
    server.cut_off = True
    target = tmp_path / "dl"
    target.mkdir()
    with pytest.raises(DatasetError, match=r"broke off after \d+ of \d+ bytes \(tried 2 times\)"):
        load_dataset(
            "cifar10",
            target,
            url=server.url,
            md5=md5(server.payload),
            records_per_file=PER_FILE,
        )
    assert server.requests == 2
    assert list(target.iterdir()) == []


def test_a_bad_checksum_is_fetched_again_then_refused(
    small: Cifar, server: ArchiveServer, tmp_path: Path
) -> None:
    server.payload = binary_archive(small)
    target = tmp_path / "dl"
    with pytest.raises(DatasetError, match=r"failed its checksum .*\(tried 2 times\)"):
        download_file(server.url, target / "a.tar.gz", md5="0" * 32)
    assert server.requests == 2
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_archive_is_fetched_again(
    small: Cifar, server: ArchiveServer, tmp_path: Path, damage: str
) -> None:
    server.payload = binary_archive(small)
    archive = tmp_path / "cifar-10-binary.tar.gz"
    archive.write_bytes(b"junk" * 100 if damage == "garbage" else server.payload[:-100])
    data = load_dataset(
        "cifar10", tmp_path, url=server.url, md5=md5(server.payload), records_per_file=PER_FILE
    )
    small.assert_loaded(data, tmp_path / "cifar-10-batches-bin")
    assert server.requests == 1
    assert archive.read_bytes() == server.payload


def test_a_damaged_archive_is_not_touched_offline(small: Cifar, tmp_path: Path) -> None:
    payload = binary_archive(small)
    archive = tmp_path / "cifar-10-binary.tar.gz"
    archive.write_bytes(payload[:-100])
    data = load_dataset(
        "auto", tmp_path, md5=md5(payload), records_per_file=PER_FILE, limit=10, test_limit=10
    )
    assert data.name == "synthetic"
    assert data.note is not None and "failed its checksum" in data.note
    assert archive.read_bytes() == payload[:-100]


def test_a_damaged_download_folder_is_rebuilt_from_the_kept_archive(
    small: Cifar, server: ArchiveServer, tmp_path: Path
) -> None:
    server.payload = binary_archive(small)
    load = functools.partial(
        load_dataset,
        data_dir=tmp_path,
        url=server.url,
        md5=md5(server.payload),
        records_per_file=PER_FILE,
    )
    folder = Path(load("cifar10").source)
    victim = folder / "data_batch_2.bin"
    victim.write_bytes(victim.read_bytes()[:100])
    small.assert_loaded(load("cifar10"), folder)
    victim.write_bytes(victim.read_bytes()[:100])
    small.assert_loaded(load("auto"), folder)
    assert server.requests == 1  # rebuilt offline both times
    (tmp_path / "cifar-10-binary.tar.gz").unlink()
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.raises(DatasetError, match=r"data_batch_2\.bin is 100 bytes"):
        load("auto")


def test_an_archive_already_in_the_data_folder_is_unpacked_offline(
    small: Cifar, tmp_path: Path
) -> None:
    payload = binary_archive(small)
    (tmp_path / "cifar-10-binary.tar.gz").write_bytes(payload)
    data = load_dataset(
        "auto", tmp_path, md5=md5(payload), url=closed_port_url(), records_per_file=PER_FILE
    )
    small.assert_loaded(data, tmp_path / "cifar-10-batches-bin")


def evil_members() -> dict[str, tarfile.TarInfo]:
    dotdot = tarfile.TarInfo("cifar-10-batches-bin/../../evil")
    dotdot.size = 4
    absolute = tarfile.TarInfo("/tmp/gputui-test-evil")
    absolute.size = 4
    symlink = tarfile.TarInfo("cifar-10-batches-bin/batches.meta.txt")
    symlink.type, symlink.linkname = tarfile.SYMTYPE, "/etc/passwd"
    hardlink = tarfile.TarInfo("cifar-10-batches-bin/link")
    hardlink.type, hardlink.linkname = tarfile.LNKTYPE, "cifar-10-batches-bin/readme.html"
    device = tarfile.TarInfo("cifar-10-batches-bin/null")
    device.type = tarfile.CHRTYPE
    return {"dotdot": dotdot, "absolute": absolute, "symlink": symlink, "hardlink": hardlink,
            "device": device}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(evil_members()))
def test_an_archive_with_a_path_trick_is_refused(small: Cifar, tmp_path: Path, kind: str) -> None:
    member = evil_members()[kind]
    archive = tmp_path / "dl" / "cifar-10-binary.tar.gz"
    archive.parent.mkdir()
    archive.write_bytes(binary_archive(small, extra=[member]))
    with pytest.raises(DatasetError, match=rf"refusing the archive: member '{member.name}'"):
        extract_cifar10(archive, archive.parent / "cifar-10-batches-bin", records_per_file=None)
    assert sorted(p.name for p in archive.parent.iterdir()) == ["cifar-10-binary.tar.gz"]
    assert not (tmp_path / "evil").exists() and not Path("/tmp/gputui-test-evil").exists()


def test_a_refused_download_is_an_error_not_the_synthetic_set(
    small: Cifar, server: ArchiveServer, tmp_path: Path
) -> None:
    server.payload = binary_archive(small, extra=[evil_members()["dotdot"]])
    with pytest.raises(DatasetError) as raised:
        load_dataset(
            "cifar10",
            tmp_path,
            url=server.url,
            md5=md5(server.payload),
            records_per_file=PER_FILE,
            limit=10,
            test_limit=10,
        )
    assert str(raised.value).startswith("CIFAR-10 download failed: refusing the archive: member")


def test_no_network_is_an_error_that_says_how_to_get_the_data(tmp_path: Path) -> None:
    """Issue 18: CIFAR-10 asked for by name silently became the synthetic set."""
    url = closed_port_url()
    target = tmp_path / "dl"
    target.mkdir()
    with pytest.raises(DatasetError) as raised:
        load_dataset("cifar10", target, url=url, limit=10, test_limit=10)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("CIFAR-10 download failed: cannot reach 127.0.0.1:")
    assert message.endswith(f": try again, or save {CIFAR10_URL} in {target} yourself")
    assert list(target.iterdir()) == []


def test_auto_never_downloads(server: ArchiveServer, tmp_path: Path) -> None:
    data = load_dataset("auto", tmp_path, url=server.url, limit=10, test_limit=10)
    assert data.name == "synthetic" and data.note is None
    assert server.requests == 0


def test_cifar10_without_downloading_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as raised:
        load_dataset("cifar10", download=False, limit=10, test_limit=10)
    assert str(raised.value) == (
        f"CIFAR-10 is not in {tmp_path / 'cache' / 'gputui'} or {tmp_path / 'work' / 'data'}"
        f" and downloading is off: allow the download, or save {CIFAR10_URL} in "
        f"{tmp_path / 'cache' / 'gputui'}"
    )


def test_a_bad_archive_with_downloading_off_says_so(tmp_path: Path) -> None:
    (tmp_path / CIFAR10_ARCHIVE).write_bytes(b"not an archive")
    with pytest.raises(DatasetError, match=r"^the CIFAR-10 archive is unusable and downloading"):
        load_dataset("cifar10", tmp_path, download=False)
    note = load_dataset("auto", tmp_path, limit=10, test_limit=10).note  # auto: its fallback
    assert note is not None and note.endswith("; using the synthetic dataset")


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"unknown dataset 'mnist': choose one of auto, cifar10"):
        load_dataset("mnist")  # type: ignore[arg-type]
    assert load_dataset("auto", tmp_path / "nowhere", limit=10).name == "synthetic"
    with pytest.raises(DatasetError, match=r"^CIFAR-10 is not in .*nowhere and downloading is off"):
        load_dataset("cifar10", tmp_path / "nowhere", download=False)
    assert not (tmp_path / "nowhere").exists()
    with pytest.raises(ValueError, match="limit must be at least 1"):
        load_dataset("synthetic", limit=0)


# --------------------------------------------------------------------------- folders


def test_default_data_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert default_data_dir() == tmp_path / "cache" / "gputui"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert default_data_dir() == Path.home() / ".cache" / "gputui"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_data_dir() == Path.home() / ".cache" / "gputui"


def test_search_order(tmp_path: Path, isolated: Path) -> None:
    assert search_dirs() == [tmp_path / "cache" / "gputui", isolated / "data"]
    assert search_dirs(tmp_path / "x") == [tmp_path / "x"]


def test_the_cache_wins_over_dot_data(small: Cifar, tmp_path: Path, isolated: Path) -> None:
    other = Cifar(train=random_batches(5 * PER_FILE, 3), test=random_batches(PER_FILE, 4))
    cifar_files.write_pickled_batches(
        isolated / "data" / "cifar-10-batches-py", other.train, other.test
    )
    cached = tmp_path / "cache" / "gputui" / "cifar-10-batches-bin"
    cifar_files.write_binary_batches(cached, small.train, small.test)
    small.assert_loaded(load_dataset(records_per_file=PER_FILE), cached)


# --------------------------------------------------------------------------- synthetic


def test_synthetic_is_cifar_shaped_deterministic_and_balanced() -> None:
    data = load_dataset("synthetic", limit=2000, test_limit=500)
    assert (data.name, data.source, data.note) == ("synthetic", "generated", None)
    assert data.train_images.shape == (2000, 3, 32, 32)
    assert data.train_images.dtype == torch.uint8 and data.train_images.is_contiguous()
    assert data.test_images.shape == (500, 3, 32, 32)
    assert torch.bincount(data.train_labels).tolist() == [200] * 10
    again = load_dataset("synthetic", limit=2000, test_limit=500)
    assert torch.equal(data.train_images, again.train_images)
    assert torch.equal(data.test_labels, again.test_labels)
    prefix = synthetic.generate(1234)
    assert torch.equal(prefix[0], data.train_images[:1234])
    assert not torch.equal(data.test_images[:100], data.train_images[:100])  # held out
    other = synthetic.generate(100, seed=1)
    assert not torch.equal(other[0], data.train_images[:100])
    assert int(data.train_images.min()) == 0 and int(data.train_images.max()) == 255


def test_no_single_pixel_gives_the_class_away() -> None:
    images, labels = synthetic.generate(5000)
    pixels = images.float().view(5000, -1)
    class_means = torch.stack([pixels[labels == k].mean(0) for k in range(10)])
    spread = (class_means.max(0).values - class_means.min(0).values).max()
    assert spread < 0.4 * pixels.std()  # every pixel's class means nearly coincide


def test_synthetic_is_learnable_from_its_spectrum() -> None:
    """A logistic regression on each image's 2-D amplitude spectrum (which ignores the
    random phase) learns the classes: orientation and frequency carry them."""
    data = load_dataset("synthetic", limit=1000, test_limit=500)

    def spectrum(images: torch.Tensor) -> torch.Tensor:
        amplitude = torch.fft.rfft2(normalize(images).mean(1)).abs()
        low = torch.cat((amplitude[:, :9, :9], amplitude[:, -8:, :9]), 1)  # |frequency| <= 8
        return low.log1p().flatten(1)

    features, test_features = spectrum(data.train_images), spectrum(data.test_images)
    mean, std = features.mean(0), features.std(0)
    features, test_features = (features - mean) / std, (test_features - mean) / std
    weights = torch.zeros(features.shape[1], 10, requires_grad=True)
    optimizer = torch.optim.Adam([weights], lr=0.02)
    losses = []
    for _ in range(60):
        loss = torch.nn.functional.cross_entropy(features @ weights, data.train_labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        predicted = (test_features @ weights).argmax(1)
    accuracy = (predicted == data.test_labels).float().mean().item()
    assert losses[0] == pytest.approx(2.3026, abs=1e-3)  # ln 10: chance
    assert losses[-1] < 1.0
    assert accuracy > 0.25  # chance is 0.10; held-out images


# --------------------------------------------------------------------------- normalisation


def test_normalize_matches_totensor_then_normalize() -> None:
    images = torch.arange(256, dtype=torch.uint8).repeat(12).view(1, 3, 32, 32)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    expected = (images.float() / 255 - mean) / std
    assert torch.allclose(normalize(images), expected, atol=1e-6)
    assert normalize(images).min() == -1 and normalize(images).max() == 1
    assert normalize(images, torch.bfloat16).dtype == torch.bfloat16


def test_the_cache_folder_is_never_made_in_a_missing_home_folder(
    small: Cifar, server: ArchiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HOME=/nonexistent`` (as root): the download made ``/nonexistent/.cache/gputui``."""
    home = tmp_path / "nonexistent"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    server.payload = binary_archive(small)
    message = (
        f"cannot create {home}/.cache/gputui: the home folder {home} does not exist: "
        "use a data folder you can write to"
    )
    with pytest.raises(DatasetError, match=re.escape(message)):
        load_dataset("cifar10", url=server.url, md5=md5(server.payload))
    assert not home.exists() and server.requests == 0
