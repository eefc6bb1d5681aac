"""Writes the fixtures beside this file with real numpy; run by hand, never by the tests.

    python -m venv /tmp/np && /tmp/np/bin/pip install numpy
    /tmp/np/bin/python tests/data/cifar10_pickles/make_fixtures.py

Each fixture is a CIFAR-10 batch dict pickled by Python 3 and numpy at one protocol:
2 (bytes go through ``_codecs.encode``), 4 (BINBYTES) and 5 (numpy's ``_frombuffer``
with an in-band buffer), plus one with bytes keys, int64 labels and a Fortran-order
array. ``tests/engine/test_data.py`` rebuilds the expected values with
:func:`expected_batch`'s formula.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np  # type: ignore[import-not-found]

HERE = Path(__file__).parent
IMAGES = 2
LABELS = [3, 8]


def expected_pixels() -> bytes:
    """The pixel bytes every fixture holds, image after image."""
    return bytes((i * 7 + i // 3072) % 256 for i in range(IMAGES * 3072))


def main() -> None:
    data = np.frombuffer(expected_pixels(), dtype=np.uint8).reshape(IMAGES, 3072)
    batch = {
        "batch_label": "training batch 1 of 5",
        "labels": LABELS,
        "data": data,
        "filenames": ["a.png", "b.png"],
    }
    for protocol in (2, 4, 5):
        (HERE / f"numpy_protocol{protocol}.pkl").write_bytes(pickle.dumps(batch, protocol))
    odd = {b"data": np.asfortranarray(data), b"labels": np.array(LABELS, dtype=np.int64)}
    (HERE / "numpy_fortran_int64_labels.pkl").write_bytes(pickle.dumps(odd, 4))
    print("numpy", np.__version__)


if __name__ == "__main__":
    main()
