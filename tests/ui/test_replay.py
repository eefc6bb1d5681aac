"""``gputui replay FILE``: the monitor driven by a recording. Readings from the stand-in NVML
(readings that change, processes that come and go, a GPU lost on the way) are shown by the
live monitor and written by the real writer at the same time; the replay then shows each
frame as the live monitor showed it. Then the replay's keys, what it refuses, and a file
that ends early."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import pytest

from gputui.recording.frames import FORMAT_VERSION, Header
from gputui.recording.player import Player
from gputui.recording.reader import Frame, Recording, RecordingError
from gputui.recording.writer import RecordingWriter
from gputui.telemetry.history import History
from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.polling import Samplers
from gputui.telemetry.readings import CpuReading, GpuState, NvmlReading, Snapshot
from gputui.telemetry.snapshot import snapshot_as_dict
from gputui.ui.monitor.app import MonitorApp
from gputui.ui.monitor.replay import HERE_REFUSAL, RUNNER_REFUSAL, SIGNAL_REFUSAL, ReplayApp
from tests.helpers import ROOT
from tests.recording.made import STARTED, plain_lines, write
from tests.recording.made import header as made_header
from tests.recording.made import snapshot as made_snapshot
from tests.ui.fakes import (
    MPS_ON_LINUX,
    ScriptedSampler,
    cpu_reading,
    screen_text,
    wait_until,
)
from tests.ui.runner_fakes import scripted_setup

R = TypeVar("R")
STEPS = 9
HISTORY = 300


class SteppedSampler(Generic[R]):
    """Answers its first reading at once, each next one only once the test lets it."""

    def __init__(self, readings: Sequence[R]) -> None:
        self._readings = list(readings)
        self._go = threading.Semaphore(0)
        self.calls = 0

    def sample(self) -> R:
        if self.calls:
            self._go.acquire(timeout=60)
        reading = self._readings[min(self.calls, len(self._readings) - 1)]
        self.calls += 1
        return reading

    def next(self) -> None:
        self._go.release()


@dataclass
class Taped:
    """What the live monitor read at each step, and the recording of it."""

    cpu: list[CpuReading]
    nvml: list[NvmlReading]
    path: Path


def _stand_in_readings(env: pytest.MonkeyPatch, tmp_path: Path) -> list[NvmlReading]:
    """Readings from the stand-in, one a step: processes that come and go (this test's
    own pid among them), changing clocks and PCIe, and GPU 1 lost half way."""
    processes = tmp_path / "processes"
    env.setenv("FAKE_NVML_GPU_COUNT", "2")
    env.setenv("FAKE_NVML_PROCESSES_FILE", str(processes))
    env.setenv("FAKE_NVML_CLOCK_EVENTS", "0:0x4")
    env.setenv("FAKE_NVML_LOST", "1:80")
    sampler = NvmlSampler()
    readings = []
    me = os.getpid()
    for step in range(STEPS):
        listed = [f"0:{me}:{(step + 1) * 1024**3}"]
        if 2 <= step <= 5:
            listed.append(f"1:{me}:{2 * 1024**3}")
        if step >= 4:
            listed.append(f"0:999999:{512 * 1024**2}")  # a pid that is not there
        processes.write_text(",".join(listed))
        readings.append(sampler.sample())
    sampler.close()
    return readings


def _tape(env: pytest.MonkeyPatch, tmp_path: Path) -> Taped:
    """The live monitor's readings, recorded as ``gputui record`` writes them."""
    nvml = _stand_in_readings(env, tmp_path)
    cpu = [cpu_reading(float(step * 13 % 100), cores=8) for step in range(STEPS)]
    path = tmp_path / "live.ndjson"
    header = Header(FORMAT_VERSION, "replay-test", 0, "box-01", "0.1.0", 1.0, 4, STARTED)
    writer = RecordingWriter(path, header, codec="none")
    for step in range(STEPS):
        snapshot = Snapshot(cpu=cpu[step], nvml=nvml[step], mps=MPS_ON_LINUX)
        writer.write(float(step), snapshot_as_dict(snapshot))
    writer.close()
    return Taped(cpu, nvml, path)


async def _live_screens(taped: Taped, size: tuple[int, int]) -> list[list[str]]:
    """What the live monitor showed after each step, less its footer."""
    cpu, nvml = SteppedSampler(taped.cpu), SteppedSampler(taped.nvml)
    samplers = Samplers(cpu=cpu, nvml=nvml, mps=ScriptedSampler(MPS_ON_LINUX))  # type: ignore[arg-type]
    app = MonitorApp(
        samplers,
        interval=0.05,
        clock=lambda: taped.nvml[max(nvml.calls - 1, 0)].taken_at,  # as each reading came in
        history=History(HISTORY),
        runner=scripted_setup(),
    )
    screens = []
    async with app.run_test(size=size) as pilot:
        if app.runner.display:
            await pilot.press("t")  # the runner pane aside, as a replay shows none
        for step in range(STEPS):
            if step:
                cpu.next()
                nvml.next()
            painted = lambda step=step: min(app.handled["cpu"], app.handled["nvml"]) > step  # noqa: E731
            await wait_until(pilot, painted)
            await pilot.pause()
            screens.append(screen_text(app).splitlines()[:-1])
    return screens


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
async def test_the_replay_shows_each_frame_as_the_live_monitor_showed_it(
    fake_nvml_env: pytest.MonkeyPatch, tmp_path: Path, load_nvml: object, size: tuple[int, int]
) -> None:
    """The replay one row taller (its status line) shows what the live monitor showed,
    footer aside, frame by frame."""
    load_nvml()  # type: ignore[operator]
    taped = _tape(fake_nvml_env, tmp_path)
    states = [tuple(gpu.state for gpu in reading.gpus) for reading in taped.nvml]
    assert states[0] == (GpuState.OK, GpuState.OK) and GpuState.LOST in states[-1]
    live = await _live_screens(taped, size)
    assert any("LOST" in line for line in live[-1])
    if size[1] > 24:  # (at 80x24 the table shows one row, beside the runner's brief line)
        assert any("999999" in line for line in live[5])
        assert not any("999999" in line for line in live[3])
    width, height = size
    app = ReplayApp(
        Player(Recording.open(taped.path)),
        playing=False,
        history=History(HISTORY),
        runner=scripted_setup(),
    )
    async with app.run_test(size=(width, height + 1)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        for step in range(STEPS):
            if step:
                await pilot.press("right")
            await wait_until(pilot, lambda step=step: app.player.t == step)
            await pilot.pause()
            lines = screen_text(app).splitlines()
            assert lines[:-2] == live[step], step
            status = lines[-2]
            assert f"+0:00:0{step} of 0:00:08" in status and "box-01  1x" in status


def _made(tmp_path: Path, frames: int = 200) -> Path:
    path = tmp_path / "box.ndjson"
    write(path, frames)
    return path


def _app(path: Path, **options: object) -> ReplayApp:
    return ReplayApp(Player(Recording.open(path)), runner=scripted_setup(), **options)  # type: ignore[arg-type]


async def test_space_pauses_and_plays_and_the_arrows_step(tmp_path: Path) -> None:
    app = _app(_made(tmp_path), playing=False, speed=16.0)  # (a tick each 0.1 s)
    async with app.run_test(size=(80, 25)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        assert app.player.t == 0.5 and "paused" in screen_text(app)
        await pilot.press("right", "right", "right", "left")
        assert app.player.t == 2.5
        await pilot.press("space")
        assert "playing" in screen_text(app)
        await wait_until(pilot, lambda: app.player.t > 3.0)
        await pilot.press("space")
        stopped = app.player.t
        assert not app.playing and app._tick is None  # no tick left to move it on
        await pilot.pause()
        assert app.player.t == stopped and "paused" in screen_text(app)


async def test_brackets_seek_a_minute_and_fill_the_sparklines_again(tmp_path: Path) -> None:
    app = _app(_made(tmp_path), playing=False)
    async with app.run_test(size=(80, 25)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert app.player.t == 120.5
        assert "+0:02:00 of 0:03:19  2026-11-18 11:08:40 UTC" in screen_text(app)
        # As live after 121 frames: one value a frame, the frame shown last.
        assert app.history.series("cpu.util") == tuple(float(f % 100) for f in range(121))
        await pilot.press("left_square_bracket")
        assert app.player.t == 60.5
        assert app.history.series("cpu.util") == tuple(float(f % 100) for f in range(61))


async def test_a_seek_fills_each_process_history_again_and_the_open_screen_follows(
    tmp_path: Path,
) -> None:
    """As the sparklines: after a seek each process's history holds the frames of the window
    before the one shown, in order, and the process screen shows that (issue 29)."""
    from tests.ui.test_process_history import open_history

    app = _app(_made(tmp_path, 20), playing=False)  # pid 4000 on GPU 0 from +3.5 to +8.5
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        app.seek(6.0)
        screen = await open_history(pilot, app, 4000)
        assert [s.t for s in screen.track.samples] == [3.5, 4.5, 5.5]
        app.seek(4.0)  # back: the later samples are gone
        await pilot.pause()
        assert [s.t for s in screen.track.samples] == [3.5]
        assert screen.track is app.process_history.get(screen.track.key)
        app.seek(12.0)  # on, past its end
        await pilot.pause()
        assert [s.t for s in screen.track.samples] == [3.5, 4.5, 5.5, 6.5, 7.5, 8.5]
        assert screen.track.ended and screen.track.last_t == 8.5


async def test_a_recorded_nvml_hang_replays_as_stale_panels(tmp_path: Path) -> None:
    """Frames whose NVML reading is older than the frame (its age recorded) mark the NVIDIA
    panels stale as the live monitor did; a frame without ages is fresh (issue 29)."""
    path = tmp_path / "hung.ndjson"
    writer = RecordingWriter(path, made_header(), codec="none")
    for frame in range(8):
        readings = snapshot_as_dict(made_snapshot(frame))
        if frame >= 3:  # NVML hung after frame 2: its reading repeated, older each frame
            readings = snapshot_as_dict(made_snapshot(2)) | {"cpu": readings["cpu"]}
            readings["ages"] = {"nvml": float(frame - 2)}
        writer.write(float(frame), readings)
    writer.close()
    app = _app(path, playing=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        app.seek(7.0)
        await pilot.pause()
        assert "stale 5s" in screen_text(app)
        app.seek(2.0)
        await pilot.pause()
        assert "stale" not in screen_text(app)


async def test_g_goes_to_an_offset_or_a_utc_time_and_says_what_it_cannot_read(
    tmp_path: Path,
) -> None:
    app = _app(_made(tmp_path), playing=False)
    async with app.run_test(size=(80, 25)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        await pilot.press("g")  # a bare 03:00:00 is an offset: the dialog says so
        assert "written with UTC (03:00:00 UTC)" in screen_text(app)
        await pilot.press("escape")
        for typed, t in (("1:02", 61.5), ("2026-11-18 11:08:00 UTC", 79.5), ("end", 199.5)):
            await pilot.press("g", "ctrl+a", "ctrl+k", *typed, "enter")
            await pilot.pause()
            assert app.player.t == t, typed
        await pilot.press("g", "ctrl+a", "ctrl+k", *"soon", "enter")
        await pilot.pause()
        assert "'soon' is not a time in the recording" in screen_text(app)
        await pilot.press("escape")
        assert app.player.t == 199.5


async def test_speed_keys_stay_between_a_quarter_and_sixteen(tmp_path: Path) -> None:
    app = _app(_made(tmp_path), playing=False)
    async with app.run_test(size=(80, 25)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        await pilot.press(*"+" * 6)
        assert app.speed == 16 and "  16x" in screen_text(app)
        await pilot.press(*"-" * 9)
        assert app.speed == 0.25 and "  0.25x" in screen_text(app)


async def test_loop_starts_again_after_the_last_frame(tmp_path: Path) -> None:
    app = _app(_made(tmp_path, 6), speed=16.0)
    async with app.run_test(size=(80, 25)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        await wait_until(pilot, lambda: not app.playing)  # the end: it stops there
        assert app.player.t == 5.5
        # loop, and play from the start again at 0.25x (a tick in 4 s: nothing moves on
        # before it is read, however loaded the machine), then at 16x again
        await pilot.press(*["minus"] * 6, "l", "space")
        assert "loop" in screen_text(app) and app.player.t == 0.5 and app.speed == 0.25
        await pilot.press(*["plus"] * 6)
        await wait_until(pilot, lambda: app.loops >= 2)  # past the end, twice
        assert app.playing
        await pilot.press("l")
        await wait_until(pilot, lambda: not app.playing)  # no loop: it stops at the end
        assert app.player.t == 5.5


@pytest.mark.parametrize(
    ("keys", "said"),
    [
        ("T", SIGNAL_REFUSAL),
        ("K", SIGNAL_REFUSAL),
        ("I", SIGNAL_REFUSAL),
        ("r", RUNNER_REFUSAL),
        ("c", RUNNER_REFUSAL),
        ("w", RUNNER_REFUSAL),
        ("t", RUNNER_REFUSAL),
        ("d", HERE_REFUSAL),
        ("n", HERE_REFUSAL),
    ],
)
async def test_signals_and_runs_are_refused_in_one_line(
    tmp_path: Path, keys: str, said: str
) -> None:
    app = _app(_made(tmp_path, 10), playing=False)
    async with app.run_test(size=(160, 51)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        await pilot.press("down", keys)
        await pilot.pause()
        assert [n.message for n in app._notifications] == [said]
        assert not app.runner.display and app.runner.trainer is None
        assert len(app.screen_stack) == 1  # no dialog asks


async def test_a_damaged_line_is_said_and_the_frames_before_it_replay(tmp_path: Path) -> None:
    path = _made(tmp_path, 30)
    lines = plain_lines(path)
    lines[20] = b'{"t": 19.5, "delta": {"cpu": '
    path.write_bytes(b"\n".join(lines))
    app = _app(path, speed=16.0)
    async with app.run_test(size=(80, 25)) as pilot:
        await wait_until(pilot, lambda: not app.playing)
        assert app.player.t == 18.5
        said = f"{path}: line 21: not JSON: the line is damaged"
        assert [n.message for n in app._notifications] == [said]
        assert "line 21 damaged" in screen_text(app).splitlines()[-2]


async def test_a_file_cut_short_replays_to_its_last_whole_frame(tmp_path: Path) -> None:
    path = _made(tmp_path, 30)
    data = path.read_bytes()
    path.write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 40])  # into the last line
    app = _app(path, playing=False)
    async with app.run_test(size=(80, 25)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        assert "of 0:00:28  " in screen_text(app)
        await pilot.press("g", "ctrl+a", "ctrl+k", *"end", "enter")
        await pilot.pause()
        assert app.player.t == 28.5
        assert "cut short" in app._notifications.__iter__().__next__().message


@pytest.mark.parametrize("size", [(80, 25), (160, 51)])
async def test_the_footer_the_palette_and_the_help_offer_the_replay_s_keys(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    app = _app(_made(tmp_path, 10), playing=False)
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        # The footer lays out its keys after a refresh of its own, which can come after
        # the first frame (seen in CI at 160x51): wait for its first key, then read it all.
        await wait_until(pilot, lambda: "space Pause" in screen_text(app).splitlines()[-1])
        footer = screen_text(app).splitlines()[-1]
        for shown in ("space Pause", "←→ Step", "[] Min", "g Go to", "-+ Speed", "? Help"):
            assert shown in footer
        for refused in ("Train", "Kill", "Runner", "Doctor"):
            assert refused not in footer
        helps = {command.title: command.help for command in app.get_system_commands(app.screen)}
        assert helps["Pause or play"] == "Pause the replay, or play it on (space)"
        assert helps["Go to a time"].endswith("(g)") and "Train" not in helps
        assert "Kill process" not in helps and "Sort processes" in helps
        await pilot.press("?")
        areas = dict(app.screen.areas)  # type: ignore[attr-defined]
        assert "Runner" not in areas and ("←", "The frame before") in areas["Replay"]
        assert not any(keys in ("T", "K", "I") for keys, _ in areas["GPU processes"])


def test_gputui_replay_runs_on_a_terminal_and_q_quits(tmp_path: Path) -> None:
    """The command itself, on a real pseudo-terminal: the recorded host and time show, and
    ``q`` ends it with exit code 0."""
    shown = replayed_on_a_pty(_made(tmp_path, 10), until="box-01")
    assert "paused" in shown and "2026-11-18 11:06:40 UTC" in shown


def replayed_on_a_pty(path: Path, *, until: str) -> str:
    """``gputui replay --paused PATH`` on a real pseudo-terminal, quit with ``q`` once
    ``until`` shows; returns what it showed, after checking it exited 0."""
    from tests.pty_run import run_on_a_pty, shown_text

    run = run_on_a_pty(
        [sys.executable, "-m", "gputui", "replay", "--paused", str(path)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        size=(100, 30),
        timeout_s=60,
        script=[(lambda shown: until in shown_text(shown), b"q")],
        exit_within_s=20,
    )
    assert run.returncode == 0, shown_text(run.shown)[-500:]
    return shown_text(run.shown)


def _box(lines: list[str], title: str) -> list[str]:
    """The lines of the panel whose top border holds ``title``."""
    start = next(at for at, line in enumerate(lines) if title in line)
    end = next(at for at in range(start + 1, len(lines)) if lines[at].startswith("╰"))
    return lines[start : end + 1]


async def test_the_monitor_records_what_it_shows_and_the_replay_shows_it_again(
    tmp_path: Path,
) -> None:
    """``gputui --record FILE``: the live monitor writes each painted beat; replayed to its
    end, the GPU processes and GPUs show as the live monitor showed them last."""
    from gputui.recording.recorder import Recorder
    from tests.ui.fakes import FakeClock, fake_app, gpu_reading, lost_gpu, nvml_reading

    readings = [
        nvml_reading([gpu_reading(0), gpu_reading(1)]),
        nvml_reading([gpu_reading(0, utilization_percent=13.0), gpu_reading(1)]),
        nvml_reading([gpu_reading(0, utilization_percent=64.0, processes=()), lost_gpu(1)]),
    ]
    path = tmp_path / "shown.ndjson.gz"
    clock = FakeClock()
    recorder = Recorder(path, interval_s=0.05, codec="gzip", runner=True, clock=clock)
    live = fake_app(nvml=ScriptedSampler(*readings), interval=0.05, recorder=recorder)
    async with live.run_test(size=(100, 31)) as pilot:
        await wait_until(pilot, lambda: live.handled["nvml"] >= 3)
        assert not live.runner.display  # (as in a replay, which shows none)
        shown = screen_text(live).splitlines()
    recorder.close()
    frames = list(Recording.open(path).frames())
    assert len(frames) >= 3
    assert frames[-1].readings["gpus"][1]["state"] == "lost"
    app = _app(path, playing=False)
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        await pilot.press("g", "ctrl+a", "ctrl+k", *"end", "enter")
        await pilot.pause()
        replayed = screen_text(app).splitlines()
    assert _box(replayed, "GPU processes") == _box(shown, "GPU processes")
    # The GPUs, their sparklines aside: the live ones also hold the beats painted before
    # every source had answered once, which no frame can hold.
    gpus, live_gpus = _box(replayed, "NVIDIA · 2 GPUs"), _box(shown, "NVIDIA · 2 GPUs")
    assert [line for line in gpus if "LOST" in line or "°C" in line] == [
        line for line in live_gpus if "LOST" in line or "°C" in line
    ]
    assert any("LOST" in line for line in gpus)


def test_gputui_record_flag_records_the_monitor_on_a_terminal(
    tmp_path: Path, fake_nvml_dir: Path
) -> None:
    """``gputui --record FILE`` on a real pseudo-terminal and the stand-in NVML: the monitor
    runs, ``q`` quits, one line says what was recorded, and the file replays."""
    from tests.pty_run import run_on_a_pty, shown_text

    path = tmp_path / "night\u202e.ndjson.gz"  # (the last line writes the user's path out)
    env = {name: value for name, value in os.environ.items() if not name.startswith("FAKE_")}
    env.update(PYTHONPATH=str(ROOT), LD_LIBRARY_PATH=str(fake_nvml_dir), FAKE_NVML_GPU_COUNT="2")
    run = run_on_a_pty(
        [sys.executable, "-m", "gputui", "--interval", "0.25", "--record", str(path)],
        env=env,
        cwd=ROOT,
        size=(100, 30),
        timeout_s=90,
        script=[
            (lambda shown: "NVIDIA · 2 GPUs" in shown_text(shown), b""),
            (lambda shown: path.exists() and len(_frames_in(path)) >= 3, b"q"),
        ],
        exit_within_s=30,
    )
    assert run.returncode == 0, shown_text(run.shown)[-500:]
    frames = _frames_in(path)
    assert f"frames recorded in {tmp_path}/night\\u202e.ndjson.gz" in shown_text(run.shown)
    assert len(frames) >= 3 and [gpu["index"] for gpu in frames[-1].readings["gpus"]] == [0, 1]


def _frames_in(path: Path) -> list[Frame]:
    try:
        return list(Recording.open(path).frames())
    except RecordingError:
        return []


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--record", "{here}"], "exists: name a new file (a recording never writes over one)"),
        (["--record", "{new}", "snapshot"], "--record records this machine's monitor"),
        (["--record", "{new}", "--hosts", "a:9400"], "--record records this machine's monitor"),
    ],
)
def test_a_bad_record_flag_is_one_usage_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    from gputui.commands import main

    here, new = tmp_path / "here.ndjson", tmp_path / "new.ndjson"
    here.write_text("")
    words = [word.format(here=here, new=new) for word in argv]
    try:
        code = main(words)
    except SystemExit as exited:
        code = exited.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert said.format(here=here) in err
    assert not new.exists()
