"""Write CIFAR-10-format files (both distributions) holding generated images.

The real CIFAR-10 cannot be downloaded here, so the benchmarks write files with
the real layout and size (50,000 training and 10,000 test images) and the same
pixels in both formats:

- ``cifar-10-batches-bin/``: the binary distribution gputui downloads
  (``data_batch_1.bin`` ... ``test_batch.bin``, records of 1 label byte + 3072 pixels);
- ``cifar-10-batches-py/``: the pickled distribution torchvision reads.

Needs numpy (for the pickles), so run it with benchmarks/.envs/torchvision's python.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np

PER_BATCH = 10_000
LABEL_NAMES = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]


def write(root: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    binary, pickled = root / "cifar-10-batches-bin", root / "cifar-10-batches-py"
    binary.mkdir(parents=True, exist_ok=True)
    pickled.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        labels = rng.integers(0, 10, PER_BATCH, dtype=np.uint8)
        # Smooth, label-dependent images rather than pure noise: closer to photographs.
        base = rng.integers(0, 256, (PER_BATCH, 3, 1, 1), dtype=np.uint8)
        noise = rng.integers(0, 64, (PER_BATCH, 3, 32, 32), dtype=np.uint8)
        data = (base + noise + labels[:, None, None, None] * 8).astype(np.uint8)
        data = data.reshape(PER_BATCH, 3072)
        records = np.concatenate([labels[:, None], data], axis=1)
        (binary / f"{name}.bin").write_bytes(records.tobytes())
        with open(pickled / name, "wb") as f:
            pickle.dump(
                {
                    "batch_label": name,
                    "labels": labels.tolist(),
                    "data": data,
                    "filenames": [f"{name}_{i}.png" for i in range(PER_BATCH)],
                },
                f,
                2,
            )
    (binary / "batches.meta.txt").write_text("\n".join(LABEL_NAMES) + "\n")
    with open(pickled / "batches.meta", "wb") as f:
        pickle.dump(
            {"label_names": LABEL_NAMES, "num_cases_per_batch": PER_BATCH, "num_vis": 3072}, f, 2
        )


if __name__ == "__main__":
    write(Path(sys.argv[1]))
