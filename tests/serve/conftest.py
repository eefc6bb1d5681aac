"""Fixtures of the ``gputui serve`` tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serve.served import Served, StartServe


@pytest.fixture
def start_serve(fake_nvml_dir: Path) -> Iterator[StartServe]:
    """Start ``gputui serve`` children on the stand-in library; any still running at the end
    is killed."""
    started: list[Served] = []

    def start(*args: str, **knobs: str) -> Served:
        started.append(Served.start(fake_nvml_dir, *args, knobs=knobs))
        return started[-1]

    yield start
    for child in started:
        child.kill()
