"""Seed 001's notebook loop, as the tutorial runs it, on CIFAR-10-format files.

Run with an environment that has torchvision (benchmarks/.envs/torchvision):

    python benchmarks/seed001_loop.py DATA_ROOT --epochs 2

It is the tutorial's code: torchvision's CIFAR10 with ToTensor + Normalize, a
DataLoader with 2 workers and batch size 256, the seed's CNN and Adam, and the
loss read to the host every step (the tutorial's ``writer.add_scalar('Train/Loss',
loss, ...)`` does exactly that read; ``loss.item()`` stands in for it so the
baseline does not need TensorBoard). The one change: torchvision's MD5 check is
skipped, because the benchmark's files hold generated images, not the real ones.
Prints one JSON line: per-epoch seconds and the total.
"""

from __future__ import annotations

import argparse
import json
from time import time

import torch
import torchvision
import torchvision.transforms as transforms
from torchvision.datasets import cifar


class CNN(torch.nn.Module):
    """Seed 001's model, verbatim."""

    def __init__(self):
        super().__init__()
        self.pool = torch.nn.MaxPool2d(2, 2)
        self.conv = torch.nn.Sequential(
            torch.nn.Conv2d(3, 6, 5),
            torch.nn.ReLU(),
            self.pool,
            torch.nn.Conv2d(6, 16, 5, padding=3),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 16, 5),
            torch.nn.ReLU(),
            self.pool,
            torch.nn.Conv2d(16, 16, 3),
            torch.nn.ReLU(),
            self.pool,
            torch.nn.Flatten(),
        )
        self.fc = torch.nn.Sequential(
            torch.nn.Linear(64, 120),
            torch.nn.ReLU(),
            torch.nn.Linear(120, 84),
            torch.nn.ReLU(),
            torch.nn.Linear(84, 10),
        )

    def forward(self, x):
        x = self.conv(x)
        x = self.fc(x)
        return x


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    # The generated files are not the real CIFAR-10, so their MD5s differ.
    cifar.check_integrity = lambda *a, **k: True
    cifar.CIFAR10._check_integrity = lambda self: True

    transform = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))]
    )
    trainset = torchvision.datasets.CIFAR10(
        root=args.root, train=True, download=False, transform=transform
    )
    train_loader = torch.utils.data.DataLoader(
        trainset, batch_size=256, shuffle=True, num_workers=2
    )
    model = CNN()
    criterion = torch.nn.CrossEntropyLoss()
    optimiser = torch.optim.Adam(model.parameters())

    epoch_seconds = []
    start = time()
    for _epoch in range(args.epochs):
        epoch_start = time()
        for x, y in train_loader:
            h = model(x)
            loss = criterion(h, y)
            loss.backward()
            optimiser.step()
            optimiser.zero_grad()
            loss.item()  # the tutorial's per-step writer.add_scalar(loss) reads it to the host
        epoch_seconds.append(time() - epoch_start)
    total = time() - start
    print(
        json.dumps(
            {
                "epoch_seconds": epoch_seconds,
                "total_seconds": total,
                "torch": torch.__version__,
                "images": len(trainset),
            }
        )
    )


if __name__ == "__main__":
    main()
