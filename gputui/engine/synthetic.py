"""A synthetic, CIFAR-shaped dataset generated locally: offline, deterministic, learnable.

Each image is a sine grating whose orientation and spatial frequency name its class
(5 orientations x 2 frequencies = 10 classes), drawn in a random colour at a random
phase and contrast over a random background, with a second grating of random
orientation and frequency as a distractor and Gaussian noise on top.

- Random phase and colour make every single pixel's value (and its class-wise mean)
  uninformative, so no pixel or linear rule on raw pixels separates the classes.
- Orientation and frequency are exactly what small convolutions detect, so the
  tutorials' CNN learns it, far above chance (10%) within an epoch.
- Images are generated in chunks of ``CHUNK`` from a seed per (seed, split, chunk):
  the first ``n`` images of a split are the same whatever the split's total size, so
  a ``limit`` is a prefix of the full set, and train and test never share an image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

NUM_CLASSES = 10
"""Classes: 5 grating orientations x 2 spatial frequencies."""
TRAIN_SIZE = 50_000
"""Default number of training images, as in CIFAR-10."""
TEST_SIZE = 10_000
"""Default number of held-out images, as in CIFAR-10."""
CHUNK = 1000
"""Images generated together from one seed; labels are balanced within a chunk."""

_SIDE = 32
_ORIENTATIONS_DEG = (0.0, 36.0, 72.0, 108.0, 144.0)
_CYCLES_PER_IMAGE = (2.5, 5.0)
_ORIENTATION_JITTER_DEG = 9.0
_FREQUENCY_JITTER = 0.12
_NOISE_SIGMA = 55.0
_NOISE_BANK = 1024
_SPLIT_IDS = {"train": 0, "test": 1}

Split = Literal["train", "test"]


def _seed(seed: int, split: Split, stream: int) -> int:
    """A distinct 63-bit generator seed for each (seed, split, stream)."""
    return (seed * 1_000_003 + _SPLIT_IDS[split] * 7_919 + stream) % (2**63)


def _gratings(angle: torch.Tensor, cycles: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """Unit sine gratings, ``(m, 32*32)``, built separably from rows and columns."""
    coord = torch.arange(_SIDE, dtype=torch.float32) - (_SIDE - 1) / 2
    wavenumber = 2 * math.pi * cycles / _SIDE
    along_x = (wavenumber * torch.cos(angle))[:, None] * coord + phase[:, None]
    along_y = (wavenumber * torch.sin(angle))[:, None] * coord
    # sin(x + y) = sin x cos y + cos x sin y, with y down the rows and x across them.
    grating = torch.sin(along_x)[:, None, :] * torch.cos(along_y)[:, :, None]
    grating += torch.cos(along_x)[:, None, :] * torch.sin(along_y)[:, :, None]
    return grating.reshape(len(angle), _SIDE * _SIDE)


@dataclass(frozen=True)
class _Draws:
    """The random choices behind a run of images, one row per image."""

    labels: torch.Tensor
    """Classes, ``(m,)``."""
    signal: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    """The class grating's angle, cycles per image and phase, each ``(m,)``."""
    distractor: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    """The distractor grating's angle, cycles per image and phase."""
    colours: torch.Tensor
    """Per-channel amplitudes of the two gratings, ``(m, 3, 2)``."""
    background: torch.Tensor
    """Per-channel background level, ``(m, 3, 1)``."""
    noise_picks: torch.Tensor
    """Which noise field of the bank each image gets, ``(m,)``."""

    def __getitem__(self, rows: slice) -> _Draws:
        return _Draws(
            self.labels[rows],
            (self.signal[0][rows], self.signal[1][rows], self.signal[2][rows]),
            (self.distractor[0][rows], self.distractor[1][rows], self.distractor[2][rows]),
            self.colours[rows],
            self.background[rows],
            self.noise_picks[rows],
        )


def _draw(count: int, generator: torch.Generator) -> _Draws:
    """The random choices for ``count`` images, from one generator (small tensors only)."""
    labels = (torch.arange(count) % NUM_CLASSES)[torch.randperm(count, generator=generator)]
    two_pi = 2 * math.pi
    angles = torch.tensor([math.radians(a) for a in _ORIENTATIONS_DEG])
    cycles = torch.tensor(_CYCLES_PER_IMAGE)
    angle = angles[labels // len(cycles)]
    angle += math.radians(_ORIENTATION_JITTER_DEG) * torch.randn(count, generator=generator)
    cycle = cycles[labels % len(cycles)]
    cycle *= 1 + _FREQUENCY_JITTER * torch.randn(count, generator=generator)
    signal = (angle, cycle, two_pi * torch.rand(count, generator=generator))
    distractor = (
        math.pi * torch.rand(count, generator=generator),
        1.0 + 6.0 * torch.rand(count, generator=generator),
        two_pi * torch.rand(count, generator=generator),
    )
    contrast = 15.0 + 40.0 * torch.rand(count, 1, generator=generator)
    colour = (0.3 + 0.7 * torch.rand(count, 3, generator=generator)) * contrast
    distractor_colour = (0.3 + 0.7 * torch.rand(count, 3, generator=generator)) * contrast * 0.7
    # +0.5 so that truncation to uint8 rounds to nearest.
    background = 128.5 + 40.0 * (2 * torch.rand(count, 3, 1, generator=generator) - 1)
    picks = torch.randint(0, _NOISE_BANK, (count,), generator=generator)
    colours = torch.stack((colour, distractor_colour), dim=2)
    return _Draws(labels, signal, distractor, colours, background, picks)


def _render(draws: _Draws, noise: torch.Tensor, out: torch.Tensor) -> None:
    """Draw the images ``draws`` describes into ``out``, uint8 ``(m, 3, 32, 32)``."""
    count = len(draws.labels)
    # One fused multiply-add for both gratings: pixels = noise + [colour, distractor colour]
    # @ [signal, distractor], as (m, 3, 2) @ (m, 2, 1024).
    patterns = torch.stack((_gratings(*draws.signal), _gratings(*draws.distractor)), dim=1)
    pixels = noise[draws.noise_picks].baddbmm_(draws.colours, patterns).add_(draws.background)
    out.copy_(pixels.clamp_(0, 255).view(count, 3, _SIDE, _SIDE))


def generate(
    count: int, *, seed: int = 0, split: Split = "train"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generate ``count`` synthetic images and labels, deterministically.

    Args:
        count: how many images; the first ``n`` are the same for any ``count >= n``.
        seed: the dataset's seed; a different seed gives a different dataset.
        split: ``"train"`` or ``"test"``; the two splits share no image.

    Returns:
        ``(images, labels)``: uint8 ``(count, 3, 32, 32)`` and int64 ``(count,)`` in 0..9.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if split not in _SPLIT_IDS:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    noise_generator = torch.Generator().manual_seed(_seed(seed, split, 0))
    noise = torch.randn(_NOISE_BANK, 3, _SIDE * _SIDE, generator=noise_generator) * _NOISE_SIGMA
    images = torch.empty(count, 3, _SIDE, _SIDE, dtype=torch.uint8)
    labels = torch.empty(count, dtype=torch.int64)
    # Each chunk is drawn from its own seed and always whole, so that a short last chunk
    # is a prefix of the full one. One chunk at a time is no slower than several at once:
    # its pixels stay in cache.
    for start in range(0, count, CHUNK):
        generator = torch.Generator().manual_seed(_seed(seed, split, 1 + start // CHUNK))
        draws = _draw(CHUNK, generator)[: min(CHUNK, count - start)]
        stop = start + len(draws.labels)
        labels[start:stop] = draws.labels
        _render(draws, noise, images[start:stop])
    return images, labels
