"""The GPU topology screen (``n``): the real app, its NVML sampler reading the stand-in NVML
(``tests/fakenvml``), and SVG snapshots at 80x24 and 160x50."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from textual.pilot import Pilot

from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.readings import DrmReading, GpuTopology, Vendor
from gputui.ui.monitor.app import MonitorApp
from gputui.ui.topology.screen import NVIDIA_ONLY, READING, TITLE, TopologyScreen
from tests.fakenvml import FakeNvml
from tests.ui.fakes import (
    ScriptedSampler,
    fake_app,
    gpu_reading,
    screen_settled,
    screen_text,
    settled,
    wait_until,
)

BOARD = {
    "FAKE_NVML_GPU_COUNT": "4",
    "FAKE_NVML_NVLINKS": "0:4,1:4,2:18,3:18",
    "FAKE_NVML_NVLINK_PEERS": "0:1/1/1/1,1:0/0/0/0",
    "FAKE_NVML_TOPOLOGY": "0:3:SYS",
}
"""GPUs 0 and 1 joined by four links, 2 and 3 by NVSwitches, 0 and 3 across NUMA nodes."""

NAMES = (["GPU0"], ["GPU1"], ["GPU2"], ["GPU3"])

HGX = {
    "FAKE_NVML_GPU_COUNT": "8",
    "FAKE_NVML_NVLINKS": ",".join(f"{i}:18" for i in range(8)),
}
"""Eight GPUs, each with 18 links to the NVSwitches, as an HGX H100 board."""


class ThreadNoted(NvmlSampler):
    """The real sampler, noting the thread its topology is read on."""

    threads: list[str]

    def topology(self) -> GpuTopology:
        self.threads.append(threading.current_thread().name)
        return super().topology()


def nvml_app(**changes: Any) -> tuple[MonitorApp, ThreadNoted]:
    sampler = ThreadNoted()
    sampler.threads = []
    return fake_app(nvml=sampler, **changes), sampler


async def open_topology(pilot: Pilot[Any], *, shown: str = "NV18") -> TopologyScreen:
    """Press ``n`` and wait for the topology, until ``shown`` (by default an NVLink cell of
    the matrix) is on the screen."""
    await pilot.press("n")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, TopologyScreen))
    screen = pilot.app.screen
    assert isinstance(screen, TopologyScreen)
    await wait_until(pilot, lambda: screen.answered)
    # The labels are laid out again for what came: until then the bar is cut to its old width
    await wait_until(pilot, lambda: TITLE in " ".join(screen_text(pilot.app).split()))
    # and the body painted, not only the title (a snapshot once caught its rows blank, and
    # a loaded run its note: the note is laid out after the bar, and two equal frames 50 ms
    # apart on a starved loop do not prove the layout came)
    await wait_until(pilot, lambda: shown in " ".join(screen_text(pilot.app).split()))
    await screen_settled(pilot)
    return screen


@pytest.mark.usefixtures("fake_nvml")
async def test_n_reads_the_topology_once_on_the_nvml_thread_and_escape_goes_back(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    for name, value in BOARD.items():
        fake_nvml_env.setenv(name, value)
    app, sampler = nvml_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        screen = await open_topology(pilot)
        text = screen_text(app)
        assert screen.topology is not None and screen.topology.gpus == (0, 1, 2, 3)
        rows = [words for line in text.splitlines() if (words := line.split())[:1] in NAMES]
        assert rows[:5] == [
            ["GPU0", "GPU1", "GPU2", "GPU3"],
            ["GPU0", "X", "NV4", "NODE", "SYS"],
            ["GPU1", "NV4", "X", "NODE", "NODE"],
            ["GPU2", "NODE", "NODE", "X", "NV18"],
            ["GPU3", "SYS", "NODE", "NV18", "X"],
        ]
        assert "NV#  = joined by # NVLink links" in text
        assert NVIDIA_ONLY not in text
        assert fake_nvml.calls("nvmlDeviceGetTopologyCommonAncestor") == 12  # read once
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, TopologyScreen))
    assert sampler.threads == ["gputui-nvml"]  # the sampler's own thread, not the loop's


async def test_without_nvml_the_screen_says_topology_is_read_for_nvidia_gpus_only() -> None:
    amd = gpu_reading(0, vendor=Vendor.AMD, name="AMD Instinct MI300X", processes=None)
    drm = ScriptedSampler(DrmReading(gpus=(amd,), taken_at=0.0))
    app = fake_app(drm=drm)  # its NVML is a scripted reading, with no topology to tell
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        await open_topology(pilot, shown=NVIDIA_ONLY)
        text = " ".join(screen_text(app).split())
    assert NVIDIA_ONLY in text
    assert "GPU0" not in text


@pytest.mark.usefixtures("fake_nvml")
async def test_a_topology_call_that_hangs_holds_only_the_nvml_thread(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_HANG", "topology=60")
    app, _ = nvml_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        await pilot.press("n")
        await wait_until(pilot, lambda: fake_nvml.calls_inside() == 1)
        screen = app.screen
        assert isinstance(screen, TopologyScreen) and not screen.answered
        assert READING in screen_text(app)
        await pilot.press("escape")  # the screen still answers its keys
        await wait_until(pilot, lambda: not isinstance(app.screen, TopologyScreen))


async def _topology_shown(pilot: Pilot[Any]) -> None:
    await settled(pilot)
    await open_topology(pilot)


@pytest.mark.usefixtures("fake_nvml")
def test_topology_snapshot_80x24(snap_compare: Any, fake_nvml_env: pytest.MonkeyPatch) -> None:
    for name, value in BOARD.items():
        fake_nvml_env.setenv(name, value)
    app, _ = nvml_app()
    assert snap_compare(app, terminal_size=(80, 24), run_before=_topology_shown)


@pytest.mark.usefixtures("fake_nvml")
def test_topology_snapshot_160x50(snap_compare: Any, fake_nvml_env: pytest.MonkeyPatch) -> None:
    for name, value in HGX.items():
        fake_nvml_env.setenv(name, value)
    app, _ = nvml_app()
    assert snap_compare(app, terminal_size=(160, 50), run_before=_topology_shown)
