"""How batches reach the model: ``resident`` (the fast path) or ``classic`` (the tutorials').

Both hand out ``(images, labels)`` already on the device, images normalised
float32 in the model's memory format.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

import torch

from gputui.engine.data import MEAN, STD, Dataset
from gputui.engine.devices import synchronize
from gputui.engine.lifecycle import die_with_parent

Batch = tuple[torch.Tensor, torch.Tensor]


class Normaliser:
    """uint8 images to normalised float32 on their own device: ``(x / 255 - mean) / std``."""

    def __init__(self, device: torch.device, memory_format: torch.memory_format) -> None:
        mean = torch.tensor(MEAN, dtype=torch.float32, device=device).view(1, 3, 1, 1)
        std = torch.tensor(STD, dtype=torch.float32, device=device).view(1, 3, 1, 1)
        self._scale = 1.0 / (255.0 * std)
        self._shift = mean / std
        self.memory_format = memory_format

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """Normalise a uint8 batch ``(N, 3, 32, 32)`` on the device it is on."""
        x = images.to(dtype=torch.float32, memory_format=self.memory_format)
        return x.mul_(self._scale).sub_(self._shift)


@dataclass(frozen=True)
class Shard:
    """One rank's part of a distributed job's data (:mod:`gputui.engine.distributed`).

    Every rank draws the same permutation each epoch, from a generator seeded alike; step
    ``s`` of rank ``r`` takes images ``[s*G + r*B, s*G + (r+1)*B)`` of it, where ``B`` is
    the per-rank batch and ``G = B * count``. So ``count`` ranks at batch ``B`` see the
    batches one process at batch ``count*B`` sees, split ``count`` ways: with DDP's
    averaged gradients, the two train the same model (up to float rounding).
    """

    rank: int
    count: int
    """Ranks in the job."""
    seed: int
    """The job's seed: the permutations follow from it and the epoch."""

    def permutation(self, size: int, epoch: int, device: torch.device) -> torch.Tensor:
        """Epoch ``epoch``'s order of ``size`` images: the same on every rank."""
        generator = torch.Generator(device=device)
        generator.manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(size, device=device, generator=generator)


class ResidentPipeline:
    """The whole dataset on the device as uint8, copied once; each epoch's permutation is
    drawn there and its batches cut and normalised there: no data crosses the bus after the
    one copy, and nothing waits on the host."""

    name = "resident"
    pinned = False

    def __init__(
        self,
        data: Dataset,
        device: torch.device,
        batch_size: int,
        memory_format: torch.memory_format = torch.contiguous_format,
        shard: Shard | None = None,
    ) -> None:
        synchronize(device)
        started = time.perf_counter()
        self.train_images = data.train_images.to(device)
        self.train_labels = data.train_labels.to(device)
        self.test_images = data.test_images.to(device)
        self.test_labels = data.test_labels.to(device)
        synchronize(device)
        self.load_seconds = time.perf_counter() - started
        """Seconds to copy the dataset to the device, synchronized."""
        self.device = device
        self.dataset_device = str(device)
        self.batch_size = batch_size
        self.shard = shard
        ranks = shard.count if shard is not None else 1
        # drop_last: fixed shapes, and the same number of steps on every rank
        self.steps_per_epoch = len(self.train_labels) // (batch_size * ranks)
        self._epochs = 0
        self.normalise = Normaliser(device, memory_format)
        self.nbytes = data.nbytes

    def epoch(self) -> Iterator[Batch]:
        """One epoch's batches in a fresh on-device permutation; no host sync."""
        self._epochs += 1
        count = len(self.train_labels)
        size, first, stride = self.batch_size, 0, self.batch_size
        if self.shard is None:
            order = torch.randperm(count, device=self.device)
        else:
            order = self.shard.permutation(count, self._epochs, self.device)
            first, stride = self.shard.rank * size, size * self.shard.count
        for step in range(self.steps_per_epoch):
            start = step * stride + first
            index = order[start : start + size]
            images = self.train_images.index_select(0, index)
            yield self.normalise(images), self.train_labels.index_select(0, index)

    def test_batches(self, batch_size: int) -> Iterator[Batch]:
        """The held-out split in order, in batches, on the device; with a shard, every
        ``count``-th batch from this rank's own (the ranks' counts are then summed)."""
        ranks, rank = (self.shard.count, self.shard.rank) if self.shard else (1, 0)
        for number, start in enumerate(range(0, len(self.test_labels), batch_size)):
            if number % ranks != rank:
                continue
            end = start + batch_size
            yield self.normalise(self.test_images[start:end]), self.test_labels[start:end]


class NormalisedImages(torch.utils.data.Dataset[Batch]):
    """Per-image ToTensor + Normalize on the CPU, as the tutorial's transform does."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images = images
        self.labels = labels
        self.mean = torch.tensor(MEAN, dtype=torch.float32).view(3, 1, 1)
        self.std = torch.tensor(STD, dtype=torch.float32).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> Batch:
        image = self.images[index].to(torch.float32).div_(255.0)
        return image.sub_(self.mean).div_(self.std), self.labels[index]


class ClassicPipeline:
    """Seed 001's path: DataLoader workers build normalised float batches on the CPU (pinned on
    CUDA), each then copied with ``.to(device)``.

    Two departures from the seed, so that an epoch's time is the pipeline's and not its
    set-up: the workers persist from one epoch to the next (started again every epoch
    inside its timer, they cost seconds where processes spawn, as on macOS), and the last
    short batch is dropped, as the resident pipeline drops it (a batch of another shape
    makes ``torch.compile`` recompile and cuDNN autotune again).
    """

    name = "classic"

    def __init__(
        self,
        data: Dataset,
        device: torch.device,
        batch_size: int,
        memory_format: torch.memory_format,
        num_workers: int,
    ) -> None:
        self.device = device
        self.dataset_device = "cpu"
        self.pinned = device.type == "cuda"
        self.load_seconds = 0.0
        """Nothing moves up front: each batch is copied when it is used."""
        self.memory_format = memory_format
        self.loader = torch.utils.data.DataLoader(
            NormalisedImages(data.train_images, data.train_labels),
            batch_size=batch_size,
            shuffle=True,
            num_workers=num_workers,
            pin_memory=self.pinned,
            worker_init_fn=_die_with_parent,
            persistent_workers=num_workers > 0,
            drop_last=True,
        )
        self.steps_per_epoch = len(self.loader)
        self.test_images = data.test_images
        self.test_labels = data.test_labels
        self.normalise = Normaliser(device, memory_format)
        self.nbytes = data.nbytes

    def epoch(self) -> Iterator[Batch]:
        """One epoch of DataLoader batches, each copied to the device."""
        for images, labels in self.loader:
            x = images.to(self.device, non_blocking=self.pinned)
            y = labels.to(self.device, non_blocking=self.pinned)
            yield x.contiguous(memory_format=self.memory_format), y

    def test_batches(self, batch_size: int) -> Iterator[Batch]:
        """The held-out split in order: uint8 chunks copied, then normalised on the device."""
        for start in range(0, len(self.test_labels), batch_size):
            end = start + batch_size
            images = self.test_images[start:end].to(self.device)
            yield self.normalise(images), self.test_labels[start:end].to(self.device)


Pipeline = ResidentPipeline | ClassicPipeline


def endless(epoch: Callable[[], Iterator[Batch]]) -> Generator[Batch]:
    """Batches from one epoch after another."""
    while True:
        yield from epoch()


def _die_with_parent(_worker_id: int) -> None:
    """In each DataLoader worker: die with the job that started it, so a killed trainer or
    experiment leaves no worker behind."""
    die_with_parent(os.getppid())
