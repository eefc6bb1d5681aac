"""Issue 29: Enter on the process table opens a process's screen, its GPU memory and SM % over
time. The real app reads the stand-in NVML (tests/fakenvml) and fake sysfs and procfs trees
through the real samplers, with real processes; fixed readings feed the pid-reuse and bound
tests and the SVG snapshots at 80x24 and 160x50."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.polling import Samplers
from gputui.telemetry.process_history import ProcessHistory, ProcessTrack
from gputui.telemetry.readings import GpuProcess, GpuReading, Workload
from gputui.ui.monitor.app import NO_SELECTION, MonitorApp
from gputui.ui.render.process_history import chart
from gputui.ui.widgets.process_screen import ProcessScreen
from tests.fakenvml import FakeNvml
from tests.fakeprocfs import amdgpu_6_11
from tests.telemetry.sysfs_trees import build, names, radeon_rx_7900_xtx
from tests.ui.fakes import (
    MPS_ON_LINUX,
    NO_DRIVER,
    T0,
    GiB,
    ScriptedSampler,
    SettableSampler,
    cpu_reading,
    fake_app,
    gpu_reading,
    nvml_reading,
    screen_text,
    settled,
    wait_until,
)
from tests.ui.runner_fakes import scripted_setup
from tests.ui.test_processes import select_pid
from tests.ui.test_vendors import TRAINER_PID

SMALL = (80, 24)
LARGE = (160, 50)


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A real process (``sleep 600``) for the stand-in NVML to list; killed afterwards."""
    started = subprocess.Popen(["sleep", "600"])
    yield started
    if started.poll() is None:
        started.kill()
    started.wait()


def track_of(app: MonitorApp, pid: int) -> ProcessTrack | None:
    """The history of the latest process with ``pid``."""
    tracks = [app.process_history.get(key) for key in app.process_history if key[0] == pid]
    return tracks[-1] if tracks else None


def memory_of(app: MonitorApp, pid: int) -> int | None:
    track = track_of(app, pid)
    return track.samples[-1].gpu_memory_bytes if track and track.samples else None


def memory_steps(track: ProcessTrack) -> list[int | None]:
    """The memory samples, each run of equal values once."""
    steps: list[int | None] = []
    for sample in track.samples:
        if not steps or steps[-1] != sample.gpu_memory_bytes:
            steps.append(sample.gpu_memory_bytes)
    return steps


def list_processes(path: Path, text: str) -> None:
    """Rewrite the stand-in's process list at once (a sample never reads it half written)."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


async def open_history(pilot: Pilot[Any], app: MonitorApp, pid: int) -> ProcessScreen:
    await select_pid(pilot, app, pid)
    await pilot.press("enter")
    await wait_until(pilot, lambda: isinstance(app.screen, ProcessScreen))
    screen = app.screen
    assert isinstance(screen, ProcessScreen)
    return screen


async def test_enter_shows_a_process_memory_over_the_beats_and_that_it_ended(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    child: subprocess.Popen[bytes],
    tmp_path: Path,
) -> None:
    listed = tmp_path / "processes"
    list_processes(listed, f"0:{child.pid}:{1 * GiB}")
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES_FILE", str(listed))
    samplers = Samplers(
        cpu=ScriptedSampler(cpu_reading()),  # type: ignore[arg-type]
        nvml=NvmlSampler(),
        mps=ScriptedSampler(MPS_ON_LINUX),  # type: ignore[arg-type]
    )
    app = MonitorApp(samplers, interval=0.25, runner=scripted_setup())
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_until(pilot, lambda: memory_of(app, child.pid) == 1 * GiB)
        for gib in (3, 6, 2):
            list_processes(listed, f"0:{child.pid}:{gib * GiB}")
            await wait_until(pilot, lambda gib=gib: memory_of(app, child.pid) == gib * GiB)
        screen = await open_history(pilot, app, child.pid)
        track = screen.track
        assert track.key[1] is not None  # known by its start time, read through psutil
        assert memory_steps(track) == [1 * GiB, 3 * GiB, 6 * GiB, 2 * GiB]
        text = screen_text(app)
        assert f"pid {child.pid} · sleep" in text
        assert "now 2.0 GiB" in text and "peak 6.0 GiB" in text
        assert "Command sleep 600" in text and "GPUs 0" in text and "▶ running" in text
        list_processes(listed, f"0:{child.pid}:{4 * GiB}")  # the open screen follows it
        await wait_until(pilot, lambda: "now 4.0 GiB" in screen_text(app))

        child.kill()
        child.wait()
        list_processes(listed, "")
        await wait_until(pilot, lambda: track.ended)
        await wait_until(pilot, lambda: "■ ended" in screen_text(app))
        text = screen_text(app)
        assert "peak 6.0 GiB" in text and "now 4.0 GiB" in text  # its history is kept
        assert memory_steps(track) == [1 * GiB, 3 * GiB, 6 * GiB, 2 * GiB, 4 * GiB]
        await pilot.press("q")
        await wait_until(pilot, lambda: not isinstance(app.screen, ProcessScreen))
        assert app.is_running  # q closes the screen, not the app


def reading_of(*processes: GpuProcess, taken_at: float) -> Any:
    """Two H100s; ``processes`` on the first."""
    gpu = replace(gpu_reading(0), processes=processes)
    return nvml_reading([gpu, replace(gpu_reading(1), processes=())], taken_at=taken_at)


def proc(pid: int, gib: float, *, started: float | None = 1.0e9, **changes: Any) -> GpuProcess:
    process = GpuProcess(
        pid=pid,
        user="ada",
        command=f"python train.py --job {pid}",
        gpu_memory_bytes=int(gib * GiB),
        create_time=started,
        sm_utilization_percent=50.0,
    )
    return replace(process, **changes)


async def feed(
    pilot: Pilot[Any], app: MonitorApp, nvml: SettableSampler[Any], reading: Any
) -> None:
    """Let the app paint ``reading`` (its sampler answers it from now on)."""
    nvml.reading = reading
    await wait_until(pilot, lambda: app.monitor.nvml is reading)


async def test_a_reused_pid_is_a_new_process_with_a_history_of_its_own() -> None:
    nvml = SettableSampler(reading_of(proc(500, 1, started=100.0), taken_at=T0))
    app = fake_app(nvml=nvml, interval=0.05)
    async with app.run_test(size=SMALL) as pilot:
        await settled(pilot)
        for beat in range(1, 4):
            await feed(
                pilot, app, nvml, reading_of(proc(500, 1 + beat, started=100.0), taken_at=T0 + beat)
            )
        old = app.process_history.get((500, 100.0))
        assert old is not None and not old.ended and len(old.samples) == 4
        for beat in range(4, 6):  # pid 500 exited; a new process was given its pid
            await feed(
                pilot, app, nvml, reading_of(proc(500, 7, started=200.0), taken_at=T0 + beat)
            )
        assert old.ended
        screen = await open_history(pilot, app, 500)
        assert screen.track.key == (500, 200.0)
        assert [s.gpu_memory_bytes for s in screen.track.samples] == [7 * GiB] * 2
        text = screen_text(app)
        assert "peak 7.0 GiB" in text and "4.0 GiB" not in text and "▶ running" in text


async def test_the_history_keeps_a_bounded_number_of_processes_and_samples() -> None:
    nvml = SettableSampler(reading_of(taken_at=T0))
    bounded = ProcessHistory(4, max_processes=3)
    app = fake_app(nvml=nvml, interval=0.05)
    app.process_history = bounded  # (fake_app passes none)
    async with app.run_test(size=SMALL) as pilot:
        await settled(pilot)
        for beat in range(1, 11):  # a new process each beat beside one that stays
            reading = reading_of(proc(1, 1), proc(100 + beat, 2), taken_at=T0 + beat)
            await feed(pilot, app, nvml, reading)
            assert len(bounded) <= 3
        assert sorted(key[0] for key in bounded) == [1, 109, 110]  # those gone longest went
        stays = bounded.get((1, 1.0e9))
        assert stays is not None and len(stays.samples) == 4  # the newest four
        assert [s.t for s in stays.samples] == [T0 + 7, T0 + 8, T0 + 9, T0 + 10]
        screen = await open_history(pilot, app, 1)
        assert screen.track is stays and "4 samples" in screen_text(app)


async def test_enter_without_a_selected_process_says_how_to_select_one() -> None:
    app = fake_app()
    async with app.run_test(size=SMALL) as pilot:
        await settled(pilot)
        app.monitor.process_table.focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(app._notifications) == 1)
        assert [n.message for n in app._notifications] == [NO_SELECTION]
        assert not isinstance(app.screen, ProcessScreen)


async def test_an_amd_process_read_from_procfs_has_its_history_too(tmp_path: Path) -> None:
    from gputui.telemetry.drm import DrmSampler
    from tests.fakeprocfs import FakeProcfs

    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx()])
    procfs = FakeProcfs(tmp_path)
    procfs.process(TRAINER_PID, ("python3", "train.py"))
    procfs.drm_fd(TRAINER_PID, 7, "renderD128", amdgpu_6_11(3, "0000:03:00.0", vram_kib=2 << 20))
    drm = DrmSampler(sysfs, procfs=procfs.root, names=names(tmp_path / "ids"))
    app = fake_app(nvml=ScriptedSampler(nvml_reading(status=NO_DRIVER)), drm=drm, interval=0.25)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_until(pilot, lambda: memory_of(app, TRAINER_PID) == 2 * GiB)
        fdinfo = amdgpu_6_11(3, "0000:03:00.0", vram_kib=5 << 20)
        procfs.fdinfo(TRAINER_PID, 7, fdinfo)
        await wait_until(pilot, lambda: memory_of(app, TRAINER_PID) == 5 * GiB)
        screen = await open_history(pilot, app, TRAINER_PID)
        assert memory_steps(screen.track) == [2 * GiB, 5 * GiB]
        text = screen_text(app)
        assert "GPUs amd0" in text and "peak 5.0 GiB" in text and "python3 train.py" in text


# -- snapshots ------------------------------------------------------------------------------


@pytest.fixture
def utc() -> Iterator[None]:
    """Local time is UTC (the screen shows the start time in local time)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


SNAPSHOT_PROCESS = proc(
    41000,
    0,
    started=1_795_000_000.0,
    command="python train.py --model vit-h/14 --data /datasets/imagenet --batch-size 512 "
    "--epochs 90 --lr 0.003 --warmup 10000 --mixed-precision bf16 --compile",
    elapsed_s=3 * 3600 + 25 * 60 + 7,
    workload=Workload(container="trainer-7", runtime="docker", slurm_job="81234", slurm_step="0"),
)
"""The process the snapshots show, on GPUs 0 and 1."""


def on_two_gpus(beat: int) -> tuple[GpuReading, ...]:
    """Both GPUs with the snapshot's process, its memory climbing then settling."""
    gib = min(2 + beat * 0.25, 31.0) + (beat % 7) * 0.4
    sm = float((beat * 13) % 60 + 35)
    processes = [
        replace(SNAPSHOT_PROCESS, gpu_memory_bytes=int(gib * GiB / 2), sm_utilization_percent=sm)
    ]
    return tuple(replace(gpu_reading(index), processes=tuple(processes)) for index in (0, 1))


def snapshot_app() -> MonitorApp:
    """The app with 150 beats of the process already recorded, and the same at its first."""
    history = ProcessHistory.for_window(1.0)
    for beat in range(150):
        history.record(T0 - 150 + beat, on_two_gpus(beat))
    reading = nvml_reading(on_two_gpus(150), taken_at=T0)
    app = fake_app(nvml=ScriptedSampler(reading))
    app.process_history = history
    return app


async def open_snapshot_screen(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, MonitorApp)
    await settled(pilot)
    await open_history(pilot, app, 41000)
    await pilot.pause()


def test_the_process_screen_80x24(snap_compare: Any, utc: None) -> None:
    assert snap_compare(snapshot_app(), terminal_size=SMALL, run_before=open_snapshot_screen)


def test_the_process_screen_160x50(snap_compare: Any, utc: None) -> None:
    assert snap_compare(snapshot_app(), terminal_size=LARGE, run_before=open_snapshot_screen)


async def test_the_runner_s_trainer_says_so_and_names_its_run() -> None:
    """NOT RECORDABLE WITHOUT A GPU: the scripted trainer (pid 40321) that NVML lists."""
    from tests.ui.runner_fakes import gpu_run_events
    from tests.ui.test_runner_snapshots import TRAINER_ON_GPU0

    app = fake_app(
        nvml=ScriptedSampler(TRAINER_ON_GPU0),
        runner=scripted_setup(lambda config: gpu_run_events(config, upto_epoch=1)),
        interval=0.1,
    )
    async with app.run_test(size=LARGE) as pilot:
        pane, table = app.runner, app.monitor.process_table
        await wait_until(pilot, lambda: bool(pane.devices) and bool(table.shown))
        await pilot.press("r")
        await wait_until(pilot, lambda: table.trainer_pid == 40_321)
        await open_history(pilot, app, 40_321)
        runner_line = "Runner the trainer it started: ▶ training on cuda:0 · synthetic"
        assert runner_line in screen_text(app)
        pane.stop()
        await wait_until(pilot, lambda: table.trainer_pid is None)
        painted = app.handled["nvml"]
        await wait_until(pilot, lambda: app.handled["nvml"] > painted + 1)  # drawn again since
        assert runner_line in screen_text(app)  # what it was is kept once the run ended
    other = fake_app(nvml=ScriptedSampler(TRAINER_ON_GPU0))
    async with other.run_test(size=LARGE) as pilot:
        await settled(pilot)
        await open_history(pilot, other, 40_321)
        assert "Runner " not in screen_text(other)  # no run: not the trainer


def test_a_chart_stacks_eighths_newest_on_the_right() -> None:
    lines = chart([0.0, 50.0, 100.0, None], 100.0, 6, 2, "$accent")
    assert [line.plain for line in lines] == ["    █ ", "   ██ "]
    assert [line.plain for line in chart([0.1, 300.0], 100.0, 2, 2, "")] == [" █", "▁█"]
    assert chart([1.0], 0.0, 3, 1, "")[0].plain == "  ▁"  # nothing to scale to: a floor
