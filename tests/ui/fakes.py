"""Deterministic readings and tiny fake samplers for the UI's pilot and snapshot tests.

The real samplers are tested in tests/telemetry against psutil and the stand-in
NVML library; here the app is fed fixed readings so that what it draws can be
checked exactly (and snapshots never change from run to run).
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import Generic, TypeVar

from rich.console import Console
from textual.app import App
from textual.pilot import Pilot

from gputui.jobs.runner import RunnerSetup
from gputui.recording.recorder import Recorder
from gputui.telemetry.history import CPU_METRIC, History, memory_metric, util_metric
from gputui.telemetry.polling import NoDrmGpus, Samplers
from gputui.telemetry.readings import (
    CpuReading,
    GpuProcess,
    GpuReading,
    GpuState,
    MpsReading,
    NvmlReading,
    NvmlStatus,
    Vendor,
)
from gputui.telemetry.selection import GpuSelection
from gputui.ui.monitor.app import MonitorApp
from gputui.ui.widgets.gpu_area import GpuArea
from tests.helpers import FakeClock
from tests.ui.runner_fakes import scripted_setup

R = TypeVar("R")

GiB = 1024**3
MiB = 1024**2
T0 = 1000.0
"""The fake clock's start, and every fixed reading's ``taken_at``."""


def cpu_reading(
    utilization: float = 37.5,
    *,
    cores: int = 16,
    taken_at: float = T0,
    **changes: object,
) -> CpuReading:
    """A host with ``cores`` cores whose loads follow a fixed pattern."""
    pattern = (12.0, 85.0, 43.0, 3.0, 97.0, 61.0, 28.0, 0.0)
    reading = CpuReading(
        utilization_percent=utilization,
        per_core_percent=tuple(pattern[i % len(pattern)] for i in range(cores)),
        logical_cores=cores,
        physical_cores=cores // 2,
        model_name="AMD EPYC 7763 64-Core Processor",
        load_average=(3.42, 2.91, 2.05),
        frequency_mhz=2450.0,
        frequency_max_mhz=3500.0,
        memory_used_bytes=int(41.3 * GiB),
        memory_total_bytes=int(125.7 * GiB),
        swap_used_bytes=int(0.2 * GiB),
        swap_total_bytes=8 * GiB,
        self_cpu_percent=0.7,
        self_rss_bytes=43 * MiB,
        taken_at=taken_at,
    )
    return replace(reading, **changes) if changes else reading


def gpu_reading(index: int, **changes: object) -> GpuReading:
    """An H100 whose readings differ by ``index`` (and any field overridden)."""
    utilization = (92.0, 47.0, 3.0, 71.0, 100.0, 18.0, 55.0, 0.0)[index % 8]
    used = (61.2, 20.5, 0.6, 44.0, 79.1, 8.0, 33.3, 0.0)[index % 8]
    reading = GpuReading(
        index=index,
        vendor=Vendor.NVIDIA,
        name="NVIDIA H100 80GB HBM3",
        uuid=f"GPU-{index:08d}-0000-0000-0000-000000000000",
        bus_id=f"00000000:{0x17 + index:02X}:00.0",
        state=GpuState.OK,
        utilization_percent=utilization,
        memory_utilization_percent=utilization / 2,
        memory_used_bytes=int(used * GiB),
        memory_total_bytes=80 * GiB,
        temperature_c=(71.0, 58.0, 34.0, 77.0, 88.0, 45.0, 62.0, 31.0)[index % 8],
        power_w=(612.0, 340.0, 71.0, 455.0, 698.0, 160.0, 390.0, 69.0)[index % 8],
        power_limit_w=700.0,
        sm_clock_mhz=(1980.0, 1755.0, 345.0, 1980.0, 1980.0, 1410.0, 1830.0, 345.0)[index % 8],
        sm_clock_max_mhz=1980.0,
        fan_percent=None,  # H100 SXM boards are passively cooled
        pcie_rx_bytes_per_s=(2.1e9, 5.5e8, 0.0, 1.2e9, 9.0e9, 3.0e7, 7.7e8, 0.0)[index % 8],
        pcie_tx_bytes_per_s=(3.3e8, 1.1e8, 0.0, 2.0e8, 1.5e9, 1.0e6, 9.9e7, 0.0)[index % 8],
        performance_state=0 if utilization > 5 else 8,
        memory_clock_mhz=2619.0,
        memory_clock_max_mhz=2619.0,
        pcie_link_gen=5 if utilization > 5 else 1,  # an idle GPU's link drops to Gen1
        pcie_link_gen_max=5,
        pcie_link_width_lanes=16,
        pcie_link_width_max_lanes=16,
        energy_joules=(1.234e6, 6.8e5, 1.42e5, 9.1e5, 1.4e6, 3.2e5, 7.8e5, 1.38e5)[index % 8],
        processes=(
            ()
            if used < 1
            else (
                GpuProcess(
                    pid=41000 + index,
                    user="ada",
                    command=f"python train.py --model vit-h/14 --shard {index} [run 7]",
                    gpu_memory_bytes=int((used - 0.5) * GiB),
                    sm_utilization_percent=utilization,  # the GPU's only process
                    cpu_percent=(101.0, 99.0, 12.0, 100.0, 104.0, 35.0, 98.0, 3.0)[index % 8],
                    rss_bytes=int((7.5 + index % 8) * GiB),
                    elapsed_s=3 * 3600 + 25 * 60 + 61 * index,
                ),
            )
        ),
    )
    return replace(reading, **changes) if changes else reading


NOT_READ = {
    field.name: None
    for field in fields(GpuReading)
    if field.name not in {"index", "vendor", "name", "uuid", "state", "processes"}
}
"""Every reading of a GPU, and its bus id, unknown: ``gpu_reading(index, **NOT_READ)``."""


def lost_gpu(index: int) -> GpuReading:
    """A GPU that answered GpuIsLost: identity kept, every reading ``None``."""
    return gpu_reading(index, state=GpuState.LOST, processes=(), **NOT_READ)


def unsupported_gpu(index: int) -> GpuReading:
    """A GPU that answers, but supports none of the optional fields (every one is ``None``)."""
    return replace(lost_gpu(index), state=GpuState.OK, name="NVIDIA GeForce GT 710")


OK_STATUS = NvmlStatus(available=True, driver_version="550.54.15", cuda_driver_version="12.4")
"""NVML up, with versions."""

NO_DRIVER = NvmlStatus(
    available=False,
    error=(
        "No NVIDIA driver library (libnvidia-ml.so.1) was found; "
        "install the NVIDIA driver to monitor NVIDIA GPUs."
    ),
)
"""NVML down, with the sentence the real sampler gives."""


def nvml_reading(
    gpus: Sequence[GpuReading] = (), *, status: NvmlStatus = OK_STATUS, taken_at: float = T0
) -> NvmlReading:
    """An NVML reading of ``gpus``."""
    return NvmlReading(status=status, gpus=tuple(gpus), taken_at=taken_at)


def h100s(count: int, *, taken_at: float = T0) -> NvmlReading:
    """``count`` H100s."""
    return nvml_reading([gpu_reading(i) for i in range(count)], taken_at=taken_at)


MPS_ON_LINUX = MpsReading(
    supported_platform=False,
    message="MPS is Apple's GPU backend for Macs; this machine runs Linux.",
    taken_at=T0,
)
"""What the real MPS sampler says on Linux."""


def seeded_history(gpu_count: int, length: int = 120) -> History:
    """A history with ``length`` fixed, varied samples per GPU, for snapshots."""
    history = History(300)
    for step in range(length):
        history.append(CPU_METRIC, 30.0 + (step * 11) % 45)
    for index in range(gpu_count):
        for step in range(length):
            wave = (step * (7 + index) + index * 13) % 100
            history.append(util_metric(index), float(wave))
            history.append(memory_metric(index), 20.0 + (step * 3 + index * 11) % 60)
    return history


class ScriptedSampler(Generic[R]):
    """Returns its readings in order, then repeats the last one; counts its calls."""

    def __init__(self, *readings: R) -> None:
        self._readings = list(readings)
        self.calls = 0
        self.closed = False

    def sample(self) -> R:
        reading = self._readings[min(self.calls, len(self._readings) - 1)]
        self.calls += 1
        return reading

    def close(self) -> None:
        self.closed = True


class SettableSampler(Generic[R]):
    """Returns ``reading``, which the test may change at any time."""

    def __init__(self, reading: R) -> None:
        self.reading = reading
        self.calls = 0

    def sample(self) -> R:
        self.calls += 1
        return self.reading


class CountingCpuSampler:
    """A host whose utilization is the number of the sample: 1%, 2%, 3%..."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.calls = 0
        self._clock = clock

    def sample(self) -> CpuReading:
        self.calls += 1
        taken_at = self._clock() if self._clock else T0
        return cpu_reading(float(self.calls), taken_at=taken_at)


class HangingSampler(Generic[R]):
    """Answers ``first`` (if given), then hangs in ``sample()`` until ``release`` is set.

    Like a driver call stuck in the kernel; after the release it answers ``then``.
    """

    def __init__(self, first: R | None, then: R | None = None) -> None:
        self._first = first
        self._then = then if then is not None else first
        self.calls = 0
        self.release = threading.Event()
        self.hanging = threading.Event()

    def sample(self) -> R:
        self.calls += 1
        if self.calls == 1 and self._first is not None:
            return self._first
        self.hanging.set()
        self.release.wait()
        assert self._then is not None
        return self._then


class RaisingSampler:
    """A sampler with a bug: it raises."""

    def __init__(self) -> None:
        self.calls = 0

    def sample(self) -> NvmlReading:
        self.calls += 1
        raise RuntimeError("driver said no")


def fake_app(
    *,
    cpu: object | None = None,
    nvml: object | None = None,
    mps: object | None = None,
    drm: object | None = None,
    interval: float = 60.0,
    clock: Callable[[], float] | None = None,
    history: History | None = None,
    stale_check_s: float | None = None,
    runner: RunnerSetup | None = None,
    readonly: bool = False,
    only: GpuSelection | None = None,
    recorder: Recorder | None = None,
) -> MonitorApp:
    """The real app fed by fakes (defaults: one fixed host, 2 H100s, Linux MPS, no AMD or
    Intel GPU; the runner lists fixed devices and plays scripted runs)."""
    samplers = Samplers(
        cpu=cpu if cpu is not None else ScriptedSampler(cpu_reading()),  # type: ignore[arg-type]
        nvml=nvml if nvml is not None else ScriptedSampler(h100s(2)),  # type: ignore[arg-type]
        mps=mps if mps is not None else ScriptedSampler(MPS_ON_LINUX),  # type: ignore[arg-type]
        drm=drm if drm is not None else NoDrmGpus(),  # type: ignore[arg-type]
    )
    return MonitorApp(
        samplers,
        interval=interval,
        clock=clock or FakeClock(),
        history=history,
        stale_check_s=stale_check_s,
        runner=runner if runner is not None else scripted_setup(),
        readonly=readonly,
        only=only,
        recorder=recorder,
    )


async def wait_until(
    pilot: Pilot[object],
    condition: Callable[[], bool],
    timeout_s: float = 20.0,
    every_s: float = 0.01,
) -> None:
    """Let the app run until ``condition()`` holds, looked at every ``every_s``; fail after
    ``timeout_s`` (a backstop: on two loaded cores a pane's build has taken more than 5 s).

    Between looks the app runs on its own (a sleep): ``pilot.pause`` would send a message to
    every widget and wait for each, and a hundred of those a second cost the app more CPU than
    what it waited for."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {condition}")
        await asyncio.sleep(every_s)
    await pilot.pause()


async def settled(pilot: Pilot[object]) -> None:
    """Wait until every source has been sampled once and painted."""
    app = pilot.app
    assert isinstance(app, MonitorApp)
    await wait_until(pilot, lambda: all(count >= 1 for count in app.handled.values()))
    await pilot.pause()


async def screen_settled(pilot: Pilot[object], timeout_s: float = 5.0) -> None:
    """Let the app run until two frames 50 ms apart show the same screen."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    shown = screen_text(pilot.app)
    while True:
        await pilot.pause(0.05)
        now = screen_text(pilot.app)
        if now == shown:
            return
        if loop.time() > deadline:
            raise AssertionError(f"the screen still changed after {timeout_s}s")
        shown = now


def screen_text(app: App[object]) -> str:
    """What the terminal shows now, as plain text (one line per row)."""
    width, height = app.size
    console = Console(
        width=width,
        height=height,
        file=io.StringIO(),
        force_terminal=True,
        color_system=None,
        record=True,
        legacy_windows=False,
    )
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text(styles=False)


def footer_line(app: App[object]) -> str:
    """The footer's row, as drawn."""
    return screen_text(app).splitlines()[-1]


def card_text(app: MonitorApp, index: int) -> str:
    """The text of GPU ``index``'s card in the GPU list."""
    return app.query_one(GpuArea).gpu_list.gpu_text(index)
