"""What the device did with a run's steps: the model's FLOPs, each epoch by the device's own
clock and energy counter, and a profiled sample of the time it was busy.

Only the FLOP count runs on the CPU. The rest is GPU-ONLY (CUDA; XPU for the events), thin
and untested without one: elsewhere it reads ``None``, and the CPU's clock is the wall's.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from functools import cache

import torch
from torch.utils.flop_counter import FlopCounterMode

from gputui.engine.devices import cuda_uuid, synchronize
from gputui.engine.memory import Step
from gputui.engine.model import CNN

BUSY_SAMPLE_STEPS = 20
"""Steps the profiler watches, once a run, after its last epoch (its figures are sent)."""


def training_flops_per_image() -> int:
    """FLOPs of one image's forward and backward pass through the CNN, as torch's
    ``FlopCounterMode`` counts them (convolutions and matmuls, 2 a multiply-add; Adam's
    elementwise update is not counted), on the meta device: nothing runs, no random number
    is drawn."""
    with torch.device("meta"):
        model, images = CNN(), torch.empty(1, 3, 32, 32)
    with FlopCounterMode(display=False) as counter:
        model(images).sum().backward()
    return int(counter.get_total_flops())


def device_clock(device: torch.device) -> str:
    """How :class:`EpochClock` times an epoch on ``device``: ``events``, ``wall`` (the CPU is
    the host: its device time is the wall time) or empty (MPS keeps no time of its own)."""
    if device.type in ("cuda", "xpu"):  # (torch.xpu.Event: torch 2.4 and later)
        return "events" if hasattr(getattr(torch, device.type), "Event") else ""
    return "wall" if device.type == "cpu" else ""


class EpochClock:
    """The steps of one epoch as the device saw them: two events on its stream (GPU-ONLY:
    CUDA, XPU) and its energy counter (GPU-ONLY: NVML), read after the epoch's own
    synchronize, so that they add none."""

    def __init__(self, device: torch.device) -> None:
        timed = device_clock(device) == "events"
        make = getattr(torch, device.type).Event if timed else None
        self.events = [make(enable_timing=True) for _ in range(2)] if make is not None else []
        self.energy = (
            energy_counter(cuda_uuid(device.index or 0)) if device.type == "cuda" else None
        )
        self.joules_before: float | None = None

    def start(self) -> None:
        if self.events:
            self.events[0].record()
        self.joules_before = self.energy() if self.energy else None

    def stop(self) -> None:
        """Mark the end, before the epoch's synchronize."""
        if self.events:
            self.events[1].record()

    def read(self) -> tuple[float | None, float | None]:
        """Seconds between the events and joules the GPU used, once the epoch synchronized."""
        seconds = self.events[0].elapsed_time(self.events[1]) / 1e3 if self.events else None
        after = self.energy() if self.energy else None
        before = self.joules_before
        return seconds, after - before if after is not None and before is not None else None


@cache
def energy_counter(uuid: str | None) -> Callable[[], float | None] | None:
    """GPU-ONLY. NVML's energy counter of the GPU with ``uuid`` in joules; ``None`` where
    there is none (no NVML: ROCm; a MIG slice; a GPU that does not count energy)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    except Exception:
        return None

    def joules() -> float | None:
        try:
            return float(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)) / 1e3
        except pynvml.NVMLError:
            return None

    return joules


def busy_share(
    step: Step, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], device: torch.device
) -> float:
    """GPU-ONLY (CUDA). The share of ``BUSY_SAMPLE_STEPS`` steps' elapsed time (between two
    events) that the GPU spent running their kernels and copies, summed by torch.profiler.
    The profiler slows the host a little, so a launch-bound step reads a little less busy."""
    from torch.profiler import DeviceType, ProfilerActivity, profile

    clock = EpochClock(device)
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        clock.start()
        for x, y in itertools.islice(batches, BUSY_SAMPLE_STEPS):
            step(x, y)
        clock.stop()
        synchronize(device)
    seconds, _ = clock.read()
    assert seconds, "CUDA events time every step"
    busy_us = sum(
        e.time_range.elapsed_us() for e in profiler.events() if e.device_type == DeviceType.CUDA
    )
    return min(float(busy_us) / 1e6 / seconds, 1.0)  # kernels on two streams at once: all
