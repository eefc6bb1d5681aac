"""SVG snapshots of the monitor at 80x24 and 160x50, fed fixed readings and a fixed history.

Regenerate with ``python -m pytest tests/ui/test_snapshots.py --snapshot-update``
and look at the SVGs in ``__snapshots__`` before committing them.

Determinism: every reading is fixed, the clock is frozen at the readings'
``taken_at`` (nothing is stale unless a test says so), the sparklines read a
seeded history, and the interval is long enough that each source is sampled once.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from textual.pilot import Pilot

from gputui.telemetry.nvml.calls import UNKNOWN, describe_handle_error
from gputui.telemetry.readings import GpuProcess, GpuState, MigDeviceReading
from gputui.ui.monitor.app import MonitorApp
from tests.ui.fakes import (
    NO_DRIVER,
    T0,
    FakeClock,
    GiB,
    ScriptedSampler,
    cpu_reading,
    fake_app,
    gpu_reading,
    h100s,
    lost_gpu,
    nvml_reading,
    seeded_history,
    settled,
    unsupported_gpu,
)

SMALL = (80, 24)
LARGE = (160, 50)


def eight_gpus() -> MonitorApp:
    return fake_app(nvml=ScriptedSampler(h100s(8)), history=seeded_history(8))


def test_two_gpus_80x24(snap_compare: Any) -> None:
    assert snap_compare(
        fake_app(history=seeded_history(2)), terminal_size=SMALL, run_before=settled
    )


def test_eight_gpus_80x24(snap_compare: Any) -> None:
    assert snap_compare(eight_gpus(), terminal_size=SMALL, run_before=settled)


def test_eight_gpus_160x50(snap_compare: Any) -> None:
    assert snap_compare(eight_gpus(), terminal_size=LARGE, run_before=settled)


def test_lost_and_unsupported_gpus_160x50(snap_compare: Any) -> None:
    reading = nvml_reading([gpu_reading(0), lost_gpu(1), unsupported_gpu(2), gpu_reading(3)])
    app = fake_app(
        cpu=ScriptedSampler(cpu_reading(cores=64, load_average=None)),
        nvml=ScriptedSampler(reading),
        history=seeded_history(4),
    )
    assert snap_compare(app, terminal_size=LARGE, run_before=settled)


def test_nvml_unavailable_80x24(snap_compare: Any) -> None:
    app = fake_app(nvml=ScriptedSampler(nvml_reading(status=NO_DRIVER)))
    assert snap_compare(app, terminal_size=SMALL, run_before=settled)


def test_stale_gpus_80x24(snap_compare: Any) -> None:
    """The clock says NVML last answered 150 s ago (stale past two intervals of 60 s)."""
    app = fake_app(
        nvml=ScriptedSampler(h100s(4)), history=seeded_history(4), clock=FakeClock(T0 + 150)
    )
    assert snap_compare(app, terminal_size=SMALL, run_before=settled)


UNREACHABLE_ERROR, UNREACHABLE_BRIEF = describe_handle_error(2, UNKNOWN, "Unknown Error")
"""What the sampler says of GPU 2 when NVML answers Unknown Error for its handle."""


def unhealthy_app() -> MonitorApp:
    """A healthy GPU, a throttled one in MIG mode (two MIG devices, one with the GPU's
    process), one with ECC errors and a pending row remap, and one NVML will not open."""
    healthy = replace(
        gpu_reading(0), throttle_reasons=(), ecc_uncorrected_errors=0, remapped_rows_pending=False
    )
    throttled = replace(gpu_reading(1), throttle_reasons=("power cap", "thermal"), mig_mode=True)
    devices = (
        MigDeviceReading(0, 1, 0, int(19.5 * GiB), 40 * GiB, throttled.processes),
        MigDeviceReading(1, 2, 0, 0, 40 * GiB, ()),
    )
    throttled = replace(throttled, mig_devices=devices)
    failing = replace(gpu_reading(3), ecc_uncorrected_errors=3, remapped_rows_pending=True)
    unreachable = replace(
        lost_gpu(2),
        state=GpuState.UNREACHABLE,
        error=UNREACHABLE_ERROR,
        error_brief=UNREACHABLE_BRIEF,
    )
    reading = nvml_reading([healthy, throttled, unreachable, failing])
    return fake_app(nvml=ScriptedSampler(reading), history=seeded_history(4))


def test_unhealthy_gpus_80x24(snap_compare: Any) -> None:
    assert snap_compare(unhealthy_app(), terminal_size=SMALL, run_before=settled)


def test_unhealthy_gpus_160x50(snap_compare: Any) -> None:
    assert snap_compare(unhealthy_app(), terminal_size=LARGE, run_before=settled)


def processes_app() -> MonitorApp:
    """Two GPUs with three processes between them."""
    started = 1_700_000_000.0  # a start time, so k and K may ask
    train = GpuProcess(41000, "ada", "python train.py --model vit-h/14", 40 * GiB, "compute")
    serve = GpuProcess(41007, "bob", "python serve.py --port 8000", 12 * GiB, "compute+graphics")
    jobs = (
        replace(train, create_time=started, cpu_percent=312.0, rss_bytes=21 * GiB, elapsed_s=9e4),
        replace(serve, create_time=started, cpu_percent=4.0, rss_bytes=3 * GiB, elapsed_s=4321),
    )
    kernel = GpuProcess(5150, "cy", "jupyter kernel", 6 * GiB, create_time=started)
    notebook = (replace(kernel, cpu_percent=0.0, rss_bytes=GiB // 2, elapsed_s=600),)
    reading = nvml_reading([gpu_reading(0, processes=jobs), gpu_reading(1, processes=notebook)])
    return fake_app(nvml=ScriptedSampler(reading), history=seeded_history(2))


async def sorted_filtered_and_selected(pilot: Pilot[object]) -> None:
    """Sorted by GPU memory (o), filtered to the python processes (/), the first selected."""
    await settled(pilot)
    await pilot.press("o", "slash", *"python", "enter")
    await pilot.pause()


async def asked_to_kill(pilot: Pilot[object]) -> None:
    """The second row selected, then K: the question before SIGKILL."""
    await settled(pilot)
    await pilot.press("down", "down", "K")
    await pilot.pause()


def test_processes_sorted_filtered_and_selected_80x24(snap_compare: Any) -> None:
    assert snap_compare(
        processes_app(), terminal_size=SMALL, run_before=sorted_filtered_and_selected
    )


def test_the_question_before_a_signal_80x24(snap_compare: Any) -> None:
    assert snap_compare(processes_app(), terminal_size=SMALL, run_before=asked_to_kill)
