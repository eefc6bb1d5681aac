"""The tutorials' small CIFAR-10 CNN, exactly as seed 001 defines it."""

from __future__ import annotations

import torch


class CNN(torch.nn.Module):
    """Seed 001's CNN: a conv stack and an fc stack, sharing one ``MaxPool2d`` module.

    The pool is one module used three times, and it is also a top-level child
    (``self.pool``), as in the tutorial; it has no parameters.
    """

    def __init__(self) -> None:
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits, shape ``(N, 10)``, for images of shape ``(N, 3, 32, 32)``."""
        logits: torch.Tensor = self.fc(self.conv(x))
        return logits
