"""The runner pane's jobs in a recording (``gputui --record``): each entry goes into the next
frame written, in order, its events as the lines the real trainer sent, and reads back as it
was; a reader that does not know an entry skips it, and a recording without any has no runs."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from gputui.device import CPU
from gputui.jobs.config import RunConfig
from gputui.jobs.events import Progress
from gputui.recording.frames import Header
from gputui.recording.player import Player
from gputui.recording.reader import Recording
from gputui.recording.recorder import QUEUED_FRAMES, Recorder
from gputui.recording.runs import (
    EventsDrained,
    JobBegun,
    RunnerEntry,
    StopAsked,
    TrainerWatched,
    entries_of,
)
from gputui.recording.writer import RecordingWriter
from gputui.telemetry.polling import Beat
from gputui.telemetry.watched import ProcessReading
from tests.helpers import FakeClock
from tests.recording.made import snapshot
from tests.ui.streams.replay import streams

CONFIG = RunConfig(device=CPU, epochs=2, dataset="synthetic", limit=256, threads=1)


def test_the_runner_s_entries_go_into_the_next_frame_and_read_back(tmp_path: Path) -> None:
    baseline, other = streams("cpu_vs_cpu")  # what the real trainer sent, twice
    diverged = Progress(epoch=1, step=3, steps_per_epoch=8, images_per_second=1e3, loss=math.nan)
    clock = FakeClock(100.0)
    path = tmp_path / "shown.ndjson"
    recorder = Recorder(path, interval_s=1.0, codec="none", runner=True, clock=clock)
    taken = snapshot(0)
    readings = {"cpu": taken.cpu, "nvml": taken.nvml, "mps": taken.mps, "drm": taken.drm}
    recorder.take(Beat(readings))
    per_frame: list[list[RunnerEntry]] = [
        [JobBegun("training", (CONFIG, CONFIG))],
        [EventsDrained(tuple(baseline[:3])), EventsDrained(tuple(baseline[3:]))],
        [TrainerWatched(ProcessReading(4242, True, 97.5, 300 << 20, 3))],
        [EventsDrained((*other[:2], diverged)), StopAsked()],
    ]
    for entries in per_frame:
        for entry in entries:
            clock.now += 0.25
            recorder.runner(entry)
        clock.now += 0.25
        recorder.take(Beat(readings))
    clock.now += 0.25
    recorder.runner(EventsDrained(tuple(other[2:])))  # after the last frame: one at close
    recorder.close()

    recording = Recording.open(path)
    assert recording.header.runner
    frames = list(recording.frames())
    assert [len(frame.runner) for frame in frames] == [0, 1, 2, 1, 2, 1]
    assert [entries_of([frame.runner]) for frame in frames[1:4]] == per_frame[:3]
    last_drained = entries_of([frames[4].runner])[0]
    assert isinstance(last_drained, EventsDrained)
    assert last_drained.events[:2] == tuple(other[:2])
    loss = last_drained.events[2]
    assert isinstance(loss, Progress) and math.isnan(loss.loss)  # kept, as the child sent it
    assert entries_of([frames[-1].runner]) == [EventsDrained(tuple(other[2:]))]
    events = frames[2].runner[0]["events"]
    assert events == [event.to_json() for event in baseline[:3]]  # the protocol's own lines
    assert all(entry["t"] <= frame.t for frame in frames for entry in frame.runner)

    player = Player(recording)
    assert player.has_runs and player.runner_entries() == []
    player.seek(frames[3].t)
    assert player.runner_entries() == [entry for entries in per_frame[:3] for entry in entries]


def test_an_unknown_entry_is_skipped_and_a_recording_without_entries_has_no_runs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shown.ndjson"
    recorder = Recorder(path, interval_s=1.0, codec="none", runner=True, clock=FakeClock(100.0))
    taken = snapshot(0)
    recorder.take(Beat({"cpu": taken.cpu, "nvml": taken.nvml, "mps": taken.mps, "drm": taken.drm}))
    recorder.close()
    assert Player(Recording.open(path)).has_runs is False
    lines = path.read_bytes().splitlines()
    frame = json.loads(lines[1])
    frame["runner"] = [
        {"t": 0.0, "teleport": True},  # a kind a later gputui writes
        {"t": 0.0, "start": "training", "configs": [CONFIG.to_json()], "scaling": None},
        {"t": 0.0, "events": ["not an event", '{"v": 1, "type": "from_the_future"}']},
    ]
    path.write_bytes(lines[0] + b"\n" + json.dumps(frame).encode() + b"\n")
    (read,) = Recording.open(path).frames()
    assert entries_of([read.runner]) == [JobBegun("training", (CONFIG,)), EventsDrained(())]


def test_a_header_says_whether_its_frames_may_hold_runs() -> None:
    plain = Header(1, "id", 0, "box", "0.1.0", 1.0, 60, 1_795_000_000.0)
    assert "runner" not in plain.as_dict()  # as an older gputui wrote it
    assert Header.from_dict(plain.as_dict()).runner is False
    shown = Header(1, "id", 0, "box", "0.1.0", 1.0, 60, 1_795_000_000.0, runner=True)
    assert shown.as_dict()["runner"] is True and Header.from_dict(shown.as_dict()) == shown


def test_the_runner_s_entries_wait_for_a_frame_the_writer_thread_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hung disk: the frame painted while the writer thread's queue is full is dropped, and
    the entries the pane received before it go into the next frame queued instead."""
    real_write = RecordingWriter.write
    disk = threading.Event()

    def hung_write(
        writer: RecordingWriter,
        t: float,
        readings: dict[str, object],
        runner: Sequence[Mapping[str, object]] = (),
    ) -> None:
        disk.wait()
        real_write(writer, t, readings, runner)

    monkeypatch.setattr(RecordingWriter, "write", hung_write)
    clock = FakeClock(100.0)
    path = tmp_path / "shown.ndjson"
    recorder = Recorder(path, interval_s=1.0, codec="none", runner=True, clock=clock)
    taken = snapshot(0)
    readings = {"cpu": taken.cpu, "nvml": taken.nvml, "mps": taken.mps, "drm": taken.drm}
    for _ in range(QUEUED_FRAMES + 1):  # one in the writer's hands, the queue full
        clock.now += 1.0
        recorder.take(Beat(readings))
    recorder.runner(JobBegun("training", (CONFIG,)))
    clock.now += 1.0
    recorder.take(Beat(readings))
    assert recorder.dropped >= 1
    disk.set()
    recorder.flush()
    clock.now += 1.0
    recorder.take(Beat(readings))
    recorder.close()

    frames = list(Recording.open(path).frames())
    assert [entries_of([frame.runner]) for frame in frames if frame.runner] == [
        [JobBegun("training", (CONFIG,))]
    ]
    assert frames[-1].runner and Player(Recording.open(path)).has_runs
