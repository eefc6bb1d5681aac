"""``gputui record`` as a real process on the stand-in NVML: readings that change, a GPU lost
while it records, processes that come and go; killed with SIGKILL at random moments; stopped
by a full disk. Each recording is then read back, and summed up by ``gputui replay``."""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gputui.exits import Stop
from gputui.recording.frames import index_path, part_path, rounded
from gputui.recording.reader import Frame, Recording
from gputui.recording.recorder import record
from gputui.telemetry.apple import MpsSampler
from gputui.telemetry.drm import DrmSampler
from gputui.telemetry.host import HostSampler
from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.polling import Samplers
from gputui.telemetry.readings import CpuReading, DrmReading, NvmlReading, NvmlStatus, Snapshot
from gputui.telemetry.snapshot import snapshot_as_dict, snapshot_from_dict
from tests.disks import small_disk
from tests.fakenvml import FakeNvml
from tests.helpers import ROOT, WAIT_S, FakeClock, wait_for
from tests.recording.made import frames_when
from tests.ui.fakes import cpu_reading, h100s

INTERVAL = "0.25"


def recorder(
    output: Path, lib_dir: Path, knobs: dict[str, str], *args: str, prefix: tuple[str, ...] = ()
) -> subprocess.Popen[str]:
    """``gputui record --output OUTPUT --interval 0.25 ARGS`` on the stand-in, started."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("FAKE_NVML_")}
    env.update(knobs, LD_LIBRARY_PATH=str(lib_dir), PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "gputui", "record", "--output", str(output)]
    return subprocess.Popen(
        [*prefix, *command, "--interval", INTERVAL, *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def pids_on(frame: Frame, gpu: int) -> list[int]:
    return [p["pid"] for p in frame.readings["gpus"][gpu]["processes"] or ()]


def replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` at once: the stand-in never reads half of it."""
    path.with_suffix(".new").write_text(text)
    path.with_suffix(".new").replace(path)


def test_a_recording_replays_what_was_read(
    fake_nvml_dir: Path, tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    path = tmp_path / "box.ndjson"
    listed = tmp_path / "processes"
    knobs = {
        "FAKE_NVML_GPU_COUNT": "2",
        "FAKE_NVML_PROCESSES_FILE": str(listed),
        "FAKE_NVML_PROCESS_UTILIZATION": f"0:{sleeper.pid}:40",
        "FAKE_NVML_CLOCK_EVENTS": "0:0x4",  # GPU 0 held at its power cap
        "FAKE_NVML_LOST": "1:400",  # GPU 1 lost after 400 of its queries
    }
    process = recorder(path, fake_nvml_dir, knobs)
    frames_when(path, process, lambda frames: len(frames) >= 3)
    replace_file(listed, f"0:{sleeper.pid}:1073741824")
    came = frames_when(path, process, lambda frames: bool(frames) and pids_on(frames[-1], 0) != [])
    replace_file(listed, "")
    frames_when(path, process, lambda frames: pids_on(frames[-1], 0) == [])
    frames_when(path, process, lambda frames: frames[-1].readings["gpus"][1]["state"] == "lost")
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=WAIT_S)
    assert (process.returncode, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (
        f"gputui record: recording this machine every 0.25 s into {path} (none; Ctrl+C stops)"
    )
    assert re.fullmatch(
        rf"gputui record: \d+ frames recorded in {re.escape(str(path))} \(.+\)", lines[1]
    )

    recording = Recording.open(path)
    frames = list(recording.frames())
    assert recording.problem is None
    assert len(frames) >= len(came) + 2
    times = [frame.t for frame in frames]
    assert times == sorted(times) and len(set(times)) == len(times)  # no frame written twice
    utilization = {frame.readings["gpus"][0]["utilization_percent"] for frame in frames}
    assert len(utilization) > 1  # the readings changed, and the frames with them
    for frame in frames:
        snapshot_from_dict(frame.readings)  # each frame reads back into the monitor's readings
    on_gpu = [frame for frame in frames if sleeper.pid in pids_on(frame, 0)]
    assert on_gpu and on_gpu[0].readings["gpus"][0]["processes"][0]["command"] == "sleep 600"
    lost = next(frame.t for frame in frames if frame.readings["gpus"][1]["state"] == "lost")

    done = subprocess.run(
        [sys.executable, "-m", "gputui", "replay", "--summary", str(path), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=WAIT_S,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    summary = json.loads(done.stdout)
    assert summary["frames"] == len(frames)
    first, second = summary["gpus"]
    [use] = first["processes"]
    assert (use["pid"], use["first_t"], use["last_t"]) == (
        sleeper.pid,
        on_gpu[0].t,
        on_gpu[-1].t,
    )
    assert use["peak_memory_bytes"] == 1073741824
    assert use["time_s"] == pytest.approx(on_gpu[-1].t - on_gpu[0].t + 0.25, abs=0.3)
    assert first["throttle_reasons_s"].keys() == {"power cap"}
    assert first["throttled_s"] == pytest.approx(frames[-1].t - frames[0].t, abs=0.01)
    assert second["state_changes"] == [{"t": lost, "state": "lost"}]
    values = [f.readings["gpus"][0]["utilization_percent"] for f in frames]
    assert first["utilization_percent"]["max"] == max(values)
    assert first["utilization_percent"]["mean"] == pytest.approx(sum(values) / len(values))
    counter = [f.readings["gpus"][0]["energy_joules"] for f in frames]
    assert first["energy_j"] == pytest.approx(counter[-1] - counter[0])


@pytest.mark.parametrize("suffix", [".ndjson.zst", ".ndjson.gz"])
def test_a_recorder_killed_at_any_moment_leaves_a_recording_that_replays(
    fake_nvml_dir: Path, tmp_path: Path, suffix: str
) -> None:
    """SIGKILL after a random number of frames and a random part of an interval more
    (seeded), three times: every frame written before reads back whole, and replays."""
    chance = random.Random(f"29{suffix}")
    knobs = {"FAKE_NVML_GPU_COUNT": "8", "FAKE_NVML_PROCESSES": f"0:{os.getpid()}:1073741824"}
    for round_ in range(3):
        path = tmp_path / f"killed-{round_}{suffix}"
        at_least = chance.randint(1, 8)
        process = recorder(path, fake_nvml_dir, knobs)
        frames_when(path, process, lambda frames, n=at_least: len(frames) >= n)
        time.sleep(chance.uniform(0.0, 0.25))
        process.kill()
        process.communicate()
        recording = Recording.open(path)
        frames = list(recording.frames())
        assert len(frames) >= at_least
        problem = recording.problem
        assert problem is None or problem.cut, problem
        for frame in frames:
            assert len(snapshot_from_dict(frame.readings).nvml.gpus) == 8
        last = recording.at(math.inf)
        assert last is not None and last.readings == frames[-1].readings
        for command in (["replay", "--summary"], ["snapshot", "--json", "--from"]):
            done = subprocess.run(
                [sys.executable, "-m", "gputui", *command, str(path)],
                capture_output=True,
                text=True,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                timeout=WAIT_S,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            assert "Traceback" not in done.stderr
        shown: dict[str, Any] = json.loads(done.stdout)
        assert shown.pop("recorded")["t"] == frames[-1].t
        assert shown == frames[-1].readings


def test_a_full_disk_stops_the_recording_with_one_line_and_keeps_it(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "disk"
    with small_disk(folder, 4) as prefix:
        path = folder / "box.ndjson"
        process = recorder(path, fake_nvml_dir, {"FAKE_NVML_GPU_COUNT": "2"}, prefix=tuple(prefix))
        out, err = process.communicate(timeout=WAIT_S * 2)
        assert process.returncode == 1, err
        [line] = err.splitlines()
        said = re.fullmatch(
            rf"gputui record: stopped: cannot write {re.escape(str(path))}: (No space left on "
            r"device|the file may not grow any larger \(File too large\)); the (\d+) frames? "
            r"written before (are|is) kept \(up to \+0:00:\d\d\)",
            line,
        )
        assert said is not None, line
        recording = Recording.open(path)
        frames = list(recording.frames())
        assert len(frames) == int(said.group(2)) > 0
        assert recording.problem is None or recording.problem.cut
        assert "frames in" not in out  # no line claims it ended as it should


def test_keep_leaves_the_newest_files_and_replay_reads_them(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """``--max-size 4K --keep 2``: never more than two files on disk while it records, the
    oldest deleted with its index; the first file's name still replays what is left."""
    path = tmp_path / "box.ndjson"
    process = recorder(
        path, fake_nvml_dir, {"FAKE_NVML_GPU_COUNT": "2"}, "--max-size", "4K", "--keep", "2"
    )

    def files() -> list[Path]:
        return sorted(p for p in tmp_path.iterdir() if p.name.startswith("box."))

    most = 0

    def fifth_file() -> bool:  # noting the most files there were meanwhile
        nonlocal most
        most = max(most, len([p for p in files() if not p.name.endswith(".idx")]))
        assert process.poll() is None, process.communicate()
        return part_path(path, 4).exists()

    wait_for(fifth_file, "no fifth file")
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=WAIT_S)
    assert (process.returncode, err) == (0, "")
    assert most <= 2
    recording = Recording.open(path)
    numbers = [int(p.name.split(".")[1]) for p in recording.paths]
    assert len(numbers) == 2 and numbers[1] == numbers[0] + 1 and numbers[0] >= 3
    data = [*recording.paths, *(index_path(p) for p in recording.paths)]
    assert files() == sorted(data)  # the others, and their indexes, are gone
    frames = list(recording.frames())
    assert frames and recording.problem is None
    deleted = numbers[0]
    assert out.splitlines()[-1].endswith(
        f", {numbers[1] + 1} files, the oldest {deleted} deleted (--keep 2))"
    )


def test_the_recorder_s_engine_takes_what_cannot_block_on_its_pacing_thread(
    tmp_path: Path,
) -> None:
    """No thread for MPS off macOS nor for AMD and Intel with no card: the engine's pacing
    thread takes those itself, and every frame still holds their readings as ``snapshot
    --json`` writes them."""
    seen: set[str] = set()

    class Host:
        def sample(self) -> CpuReading:
            seen.update(thread.name for thread in threading.enumerate())
            return cpu_reading(taken_at=time.monotonic())

    class Gpus:
        def sample(self) -> NvmlReading:
            return NvmlReading(NvmlStatus(available=True), h100s(2).gpus, time.monotonic())

    mps = MpsSampler(platform="linux")
    samplers = Samplers(
        cpu=Host(), nvml=Gpus(), mps=mps, drm=DrmSampler(tmp_path / "sys", procfs=tmp_path)
    )
    path = tmp_path / "box.ndjson"
    code = record(
        path,
        interval_s=0.1,
        codec="none",
        duration_s=1.0,
        samplers=samplers,
        announce=lambda line: None,
    )
    assert code == 0
    frames = list(Recording.open(path).frames())
    assert len(frames) >= 2
    assert not seen & {"gputui-record-mps", "gputui-record-drm"}
    assert {"gputui-record-nvml", "gputui-record-pacer"} <= seen
    expected = snapshot_as_dict(
        Snapshot(cpu_reading(), Gpus().sample(), mps.sample(), DrmReading((), 0.0))
    )
    for frame in frames:
        assert frame.readings["mps"] == expected["mps"]
        assert frame.readings["gpus"] == rounded(expected["gpus"])


class WaitsOnTheClock(threading.Event):
    """An event whose waits end at once, moving ``clock`` on by what each would have waited."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        self.clock.advance(timeout or 0.0)
        return self.is_set()


@pytest.mark.parametrize(("duration_s", "waits"), [(1.25, [0.5, 0.5, 0.25]), (0.25, [0.25])])
def test_a_duration_ends_the_recording_as_it_runs_out(
    tmp_path: Path, duration_s: float, waits: list[float]
) -> None:
    """The main thread looks up every half second (WAKE_S), the last time as the duration
    runs out, whatever the beat (here 1 s): never a wake, nor a beat, after it."""
    clock = FakeClock(0.0)

    class Host:
        def sample(self) -> CpuReading:
            return cpu_reading(taken_at=clock())

    class Gpus:
        def sample(self) -> NvmlReading:
            return NvmlReading(NvmlStatus(available=True), h100s(1).gpus, clock())

    samplers = Samplers(
        cpu=Host(),
        nvml=Gpus(),
        mps=MpsSampler(platform="linux"),
        drm=DrmSampler(tmp_path / "sys", procfs=tmp_path),
    )
    event = WaitsOnTheClock(clock)
    code = record(
        tmp_path / "box.ndjson",
        interval_s=1.0,
        codec="none",
        duration_s=duration_s,
        samplers=samplers,
        stop=Stop(event),
        announce=lambda line: None,
        clock=clock,
    )
    assert code == 0
    assert event.waits == waits


def test_nvml_stuck_in_its_first_call_is_recorded_as_stuck_there(
    tmp_path: Path, fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    """``nvmlInit`` never returns: once NVML's reading is stale, each frame holds what the
    engine says of the stuck call, beside the host's readings (no frame waits for NVML)."""
    fake_nvml_env.setenv("FAKE_NVML_HANG", "init=60")
    samplers = Samplers(
        cpu=HostSampler(),
        nvml=NvmlSampler(),
        mps=MpsSampler(platform="linux"),
        drm=DrmSampler(tmp_path / "sys", procfs=tmp_path),
    )
    path = tmp_path / "stuck.ndjson"
    code = record(
        path,
        interval_s=0.2,
        codec="none",
        duration_s=2.0,
        samplers=samplers,
        announce=lambda line: None,
    )
    assert code == 0
    frames = list(Recording.open(path).frames())
    assert frames, "no frame while NVML was stuck"
    snapshot = snapshot_from_dict(frames[-1].readings, taken_at=frames[-1].t)
    assert not snapshot.nvml.status.available
    assert "nvmlInit" in (snapshot.nvml.status.error or ""), snapshot.nvml.status
    assert snapshot.cpu.logical_cores > 0


def test_a_reading_late_for_its_beat_waits_for_the_next_frame(tmp_path: Path) -> None:
    """NVML answers after the beat's grace every time: one frame a beat still, each with the
    latest NVML reading, never a second frame when the late reading lands."""

    class SlowGpus:
        def sample(self) -> NvmlReading:
            time.sleep(0.15)  # past the grace (a quarter of the 0.4 s interval)
            return NvmlReading(NvmlStatus(available=True), h100s(1).gpus, time.monotonic())

    samplers = Samplers(
        cpu=HostSampler(),
        nvml=SlowGpus(),
        mps=MpsSampler(platform="linux"),
        drm=DrmSampler(tmp_path / "sys", procfs=tmp_path),
    )
    path = tmp_path / "late.ndjson"
    record(path, interval_s=0.4, codec="none", duration_s=2.0, samplers=samplers, announce=print)
    times = [frame.t for frame in Recording.open(path).frames()]
    assert 3 <= len(times) <= 6, times  # 2 s of 0.4 s beats, give or take one
    assert all(b - a > 0.2 for a, b in itertools.pairwise(times)), times
