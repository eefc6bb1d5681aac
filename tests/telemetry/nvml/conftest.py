"""What the NVML tests share: a sampler on the stand-in libnvidia-ml.so.1 (tests/fakenvml),
through the real nvidia-ml-py bindings, on a clock that moves only when told to."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.readings import GpuReading, NvmlReading
from tests.fakenvml import FakeNvml
from tests.helpers import FakeClock

H100 = "NVIDIA H100 80GB HBM3"
H100_MEMORY = 81559 * 1024 * 1024


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sampler(fake_nvml: FakeNvml, clock: FakeClock) -> Iterator[NvmlSampler]:
    """A sampler on the stand-in library; set FAKE_NVML_* before its first sample."""
    with NvmlSampler(clock=clock) as made:
        yield made


def gpu(reading: NvmlReading, index: int) -> GpuReading:
    (found,) = [g for g in reading.gpus if g.index == index]
    return found


def assert_one_sentence(text: str | None) -> None:
    assert text is not None
    assert "\n" not in text
    assert text.endswith(".")
    assert ". " not in text.rstrip(".")
