"""What the monitor shows, recorded (``gputui --record FILE``): a frame each painted beat once
every source has answered, read back as written; a full disk stops it with one line and keeps
what was written; a hung one holds back only the writer thread, frames dropped meanwhile."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from gputui.format import fmt_bytes
from gputui.recording.frames import rounded
from gputui.recording.player import Player
from gputui.recording.reader import Recording
from gputui.recording.recorder import QUEUED_FRAMES, Recorder
from gputui.recording.writer import RecordingWriter
from gputui.telemetry.polling import Beat
from gputui.telemetry.snapshot import snapshot_as_dict
from tests.disks import small_disk
from tests.helpers import FakeClock
from tests.recording.made import snapshot


def test_each_painted_beat_is_a_frame_once_every_source_has_answered(tmp_path: Path) -> None:
    clock = FakeClock(0.0)  # (the readings' clock: each is taken as it is painted)
    path = tmp_path / "shown.ndjson"
    recorder = Recorder(path, interval_s=1.0, codec="none", runner=True, clock=clock)
    first = snapshot(0)
    recorder.take(Beat({"cpu": first.cpu, "nvml": first.nvml}))  # MPS not in yet: no frame
    recorder.take(Beat({"mps": first.mps, "drm": first.drm}))
    for frame in range(1, 5):
        clock.now += 1.0
        taken = snapshot(frame)
        recorder.take(Beat({"nvml": taken.nvml, "cpu": taken.cpu}))
    assert recorder.close() == f"5 frames recorded in {path} ({fmt_bytes(path.stat().st_size)})"
    recording = Recording.open(path)
    assert recording.header.host == os.uname().nodename and recording.header.interval_s == 1.0
    frames = list(recording.frames())
    assert [f.t for f in frames] == [0.0, 1.0, 2.0, 3.0, 4.0]
    expected = [snapshot_as_dict(snapshot(n)) for n in range(5)]
    assert [f.readings for f in frames] == [rounded(e) for e in expected]
    assert recording.problem is None


def test_a_source_that_stops_answering_is_recorded_with_its_age_and_replayed_as_old(
    tmp_path: Path,
) -> None:
    """NVML hung: the monitor paints its last reading again each beat; each frame says how
    old it is, and the replay's reading is that old (issue 29)."""
    clock = FakeClock(0.0)
    path = tmp_path / "shown.ndjson"
    recorder = Recorder(path, interval_s=1.0, codec="none", runner=True, clock=clock)
    first = snapshot(0)
    recorder.take(Beat({"cpu": first.cpu, "nvml": first.nvml, "mps": first.mps, "drm": first.drm}))
    for frame in range(1, 6):
        clock.now = float(frame)
        recorder.take(Beat({"cpu": snapshot(frame).cpu}))
    recorder.close()
    frames = list(Recording.open(path).frames())
    assert [f.readings.get("ages") for f in frames] == [None] + [
        {"nvml": float(n)} for n in range(1, 6)
    ]
    player = Player(Recording.open(path))
    player.seek(5.0)
    assert (player.t, player.snapshot.nvml.taken_at, player.snapshot.cpu.taken_at) == (
        5.0,
        0.0,
        5.0,
    )


def test_a_full_disk_stops_the_recording_in_one_line_and_keeps_what_was_written(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", 3) as prefix:
        if prefix:
            pytest.skip("no tmpfs to fill here (mounting needs root)")
        path = tmp_path / "disk" / "shown.ndjson"
        recorder = Recorder(path, interval_s=1.0, codec="none", runner=True, clock=FakeClock(100.0))
        frame = 0
        while recorder.failure is None and frame < 10_000:
            taken = snapshot(frame, gpus=2)
            recorder.take(
                Beat({"cpu": taken.cpu, "nvml": taken.nvml, "mps": taken.mps, "drm": taken.drm})
            )
            recorder.flush()
            frame += 1
        failed = recorder.failure
        assert failed is not None and "\n" not in failed
        assert failed.startswith(f"cannot write {path}: No space left")
        kept = len(list(Recording.open(path).frames()))
        assert kept >= 1 and f"the {kept:,} frames written before are kept" in failed
        assert recorder.news() == [(f"Recording stopped: {failed}.", "error")]
        assert recorder.news() == []  # said once
        recorder.take(Beat({"cpu": taken.cpu}))  # stopped: nothing more is tried
        assert recorder.close().startswith(f"Recording stopped: {failed}")


def test_a_hung_disk_holds_back_only_the_writer_thread_and_frames_are_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that does not return (a hung NFS server) until the test lets it: the monitor's
    calls return at once, the frames past what the queue holds are dropped and said once."""
    real_write = RecordingWriter.write
    writing, disk = threading.Event(), threading.Event()

    def hung_write(
        writer: RecordingWriter,
        t: float,
        readings: dict[str, object],
        runner: Sequence[Mapping[str, object]] = (),
    ) -> None:
        assert threading.current_thread() is not threading.main_thread(), "the monitor waits"
        writing.set()
        disk.wait()
        real_write(writer, t, readings, runner)

    monkeypatch.setattr(RecordingWriter, "write", hung_write)
    clock = FakeClock(100.0)
    path = tmp_path / "shown.ndjson"
    recorder = Recorder(path, interval_s=1.0, codec="none", runner=True, clock=clock)
    taken = snapshot(0)
    recorder.take(Beat({"cpu": taken.cpu, "nvml": taken.nvml, "mps": taken.mps, "drm": taken.drm}))
    assert writing.wait(60)  # the writer thread holds the first frame, stuck in its write
    for frame in range(1, QUEUED_FRAMES + 6):
        clock.now += 1.0
        recorder.take(Beat({"cpu": snapshot(frame).cpu}))
    assert recorder.dropped == 5 and recorder.failure is None
    [(line, severity)] = recorder.news()
    assert severity == "warning" and line.startswith("Recording falls behind: ")
    assert recorder.news() == []  # once
    disk.set()
    assert recorder.close() == (
        f"{QUEUED_FRAMES + 1} frames recorded in {path} ({fmt_bytes(path.stat().st_size)}, "
        "5 frames dropped while the disk was slow)"
    )
    frames = list(Recording.open(path).frames())
    assert [f.t for f in frames] == [float(n) for n in range(QUEUED_FRAMES + 1)]
