"""The exporter's and recorder's :class:`~gputui.serve.sampling.Poller`: a source whose sample
cannot block (MPS off macOS, AMD and Intel with no such card) is sampled on the polling thread,
reading as it did on a thread of its own; the others keep their threads."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gputui.serve.sampling import Poller
from gputui.telemetry.apple import MpsSampler
from gputui.telemetry.drm import DrmSampler
from gputui.telemetry.polling import Samplers
from gputui.telemetry.readings import NvmlReading, NvmlStatus
from tests.telemetry.sysfs_trees import mi300x_box
from tests.ui.fakes import cpu_reading, h100s

WAIT_S = 30.0
"""A deadline against a hang, not a timing."""


class Threads:
    """A sampler that notes the thread each sample runs on, and what the
    reading is."""

    def __init__(self, reading: object) -> None:
        self.reading = reading
        self.on: list[str] = []

    def sample(self) -> object:
        self.on.append(threading.current_thread().name)
        return self.reading


class Noted:
    """Wraps a real sampler (its ``never_blocks`` too), noting each sample's thread."""

    def __init__(self, sampler: MpsSampler | DrmSampler) -> None:
        self.sampler = sampler
        self.on: list[str] = []

    def never_blocks(self) -> bool:
        return self.sampler.never_blocks()

    def sample(self) -> object:
        self.on.append(threading.current_thread().name)
        return self.sampler.sample()


def poll_until_answered(poller: Poller, polls: int) -> None:
    for _ in range(polls):
        poller.poll()
        deadline = time.monotonic() + WAIT_S
        while poller.latest().snapshot() is None or poller._busy:
            assert time.monotonic() < deadline, "a sampler never answered"
            time.sleep(0.01)


def test_samples_that_cannot_block_are_taken_on_the_polling_thread(tmp_path: Path) -> None:
    mps = Noted(MpsSampler(platform="linux"))
    drm = Noted(DrmSampler(tmp_path / "no-sysfs", procfs=tmp_path / "no-proc"))
    cpu = Threads(cpu_reading())
    nvml = Threads(NvmlReading(NvmlStatus(available=True), h100s(2).gpus, taken_at=1.0))
    poller = Poller(Samplers(cpu=cpu, nvml=nvml, mps=mps, drm=drm), interval_s=1.0)
    poller.start(paced=False)
    poll_until_answered(poller, 3)
    here = threading.current_thread().name
    assert (mps.on, drm.on) == ([here] * 3, [here] * 3)
    assert (cpu.on, nvml.on) == (["gputui-serve-cpu"] * 3, ["gputui-serve-nvml"] * 3)
    names = {thread.name for thread in threading.enumerate()}
    assert not names & {"gputui-serve-mps", "gputui-serve-drm", "gputui-serve-pacer"}
    snapshot = poller.latest().snapshot()
    assert snapshot is not None
    assert snapshot.mps.supported_platform is False
    assert snapshot.mps.message == MpsSampler(platform="linux").sample().message
    assert snapshot.drm.gpus == ()
    assert poller.close()


def test_a_card_moves_the_amd_and_intel_source_to_its_thread(tmp_path: Path) -> None:
    drm = Noted(DrmSampler(mi300x_box(tmp_path / "sys"), procfs=tmp_path / "no-proc"))
    assert drm.never_blocks()  # no card known before the first sample lists them
    cpu = Threads(cpu_reading())
    nvml = Threads(NvmlReading(NvmlStatus(available=True), (), taken_at=1.0))
    poller = Poller(
        Samplers(cpu=cpu, nvml=nvml, mps=MpsSampler(platform="linux"), drm=drm), interval_s=1.0
    )
    poller.start(paced=False)
    poll_until_answered(poller, 3)
    assert not drm.never_blocks()
    assert drm.on == [threading.current_thread().name] + ["gputui-serve-drm"] * 2
    snapshot = poller.latest().snapshot()
    assert snapshot is not None and len(snapshot.drm.gpus) == 8
    assert poller.close()
