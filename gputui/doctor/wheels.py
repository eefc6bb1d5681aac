"""Which CUDA build of torch to install for a given NVIDIA driver.

PyTorch publishes CUDA wheels on one index per CUDA version ("channel"),
``https://download.pytorch.org/whl/cuXYZ``. A driver runs a build whose CUDA
version is at most the driver's own (``nvidia-smi``'s "CUDA Version"), so the
right channel is the newest one not newer than the driver.
"""

from __future__ import annotations

INDEX_URL = "https://download.pytorch.org/whl"
"""PyTorch's wheel index; a channel is a folder under it."""

CHANNELS: tuple[tuple[tuple[int, int], str], ...] = (
    ((13, 0), "cu130"),
    ((12, 9), "cu129"),
    ((12, 8), "cu128"),
    ((12, 6), "cu126"),
    ((12, 4), "cu124"),
    ((12, 1), "cu121"),
    ((11, 8), "cu118"),
)
"""CUDA wheel channels PyTorch has published, newest first: (CUDA version, folder).

Older torch releases are only on the older channels (torch 2.6 is the last on
cu124, 2.5 the last on cu121), so an old driver gets a working but older torch.
"""


def parse_cuda_version(text: str | None) -> tuple[int, int] | None:
    """``"12.4"`` -> ``(12, 4)``; ``None`` for ``None`` or anything else."""
    if not text:
        return None
    major, _, minor = text.strip().partition(".")
    minor = minor.split(".", 1)[0] or "0"
    if not (major.isdigit() and minor.isdigit()):
        return None
    return int(major), int(minor)


def channel_for_driver(driver_cuda: tuple[int, int]) -> str | None:
    """The newest channel a driver supporting CUDA ``driver_cuda`` can run; ``None`` if none."""
    for version, channel in CHANNELS:
        if version <= driver_cuda:
            return channel
    return None


def oldest_channel_version() -> str:
    """The CUDA version of the oldest channel, e.g. ``11.8``."""
    major, minor = CHANNELS[-1][0]
    return f"{major}.{minor}"


def install_command(
    channel: str,
    *,
    python: str = "python",
    packages: tuple[str, ...] = ("torch",),
    replace: bool = True,
) -> str:
    """The exact command that installs a CUDA build from ``channel``.

    Args:
        channel: e.g. ``cu124``.
        python: The interpreter to install into (``python``, or a full path).
        packages: What to install: ``torch``, and ``torchvision``/``torchaudio`` when
            they are installed (they are built against one torch and must match it).
        replace: Uninstall what is there first; without this, pip keeps an installed
            ``torch 2.x+cpu`` because it already satisfies ``torch``.
    """
    names = " ".join(packages)
    install = f"{python} -m pip install {names} --index-url {INDEX_URL}/{channel}"
    if replace:
        return f"{python} -m pip uninstall -y {names} && {install}"
    return install
