"""What the monitor shows, recorded (``gputui --record FILE``): a frame each painted beat once
every source has answered, read back as written; a full disk stops it with one line and keeps
what was written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputui.format import fmt_bytes
from gputui.recording.frames import rounded
from gputui.recording.reader import Recording
from gputui.recording.recorder import ShownRecorder
from gputui.telemetry.snapshot import snapshot_as_dict
from tests.disks import small_disk
from tests.recording.made import snapshot


class StepClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_painted_beat_is_a_frame_once_every_source_has_answered(tmp_path: Path) -> None:
    clock = StepClock()
    path = tmp_path / "shown.ndjson"
    recorder = ShownRecorder(path, interval_s=1.0, codec="none", clock=clock)
    first = snapshot(0)
    recorder.shown({"cpu": first.cpu, "nvml": first.nvml})  # MPS not in yet: no frame
    recorder.shown({"mps": first.mps})
    for frame in range(1, 5):
        clock.now += 1.0
        taken = snapshot(frame)
        recorder.shown({"nvml": taken.nvml, "cpu": taken.cpu})
    assert recorder.close() == f"5 frames recorded in {path} ({fmt_bytes(path.stat().st_size)})"
    recording = Recording.open(path)
    assert recording.header.host == os.uname().nodename and recording.header.interval_s == 1.0
    frames = list(recording.frames())
    assert [f.t for f in frames] == [0.0, 1.0, 2.0, 3.0, 4.0]
    expected = [snapshot_as_dict(snapshot(n)) for n in range(5)]
    assert [f.readings for f in frames] == [rounded(e) for e in expected]
    assert recording.problem is None


def test_a_full_disk_stops_the_recording_in_one_line_and_keeps_what_was_written(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", 3) as prefix:
        if prefix:
            pytest.skip("no tmpfs to fill here (mounting needs root)")
        path = tmp_path / "disk" / "shown.ndjson"
        recorder = ShownRecorder(path, interval_s=1.0, codec="none", clock=StepClock())
        frame = 0
        while recorder.failed is None and frame < 10_000:
            taken = snapshot(frame, gpus=2)
            recorder.shown({"cpu": taken.cpu, "nvml": taken.nvml, "mps": taken.mps})
            frame += 1
        failed = recorder.failed
        assert failed is not None and "\n" not in failed
        assert failed.startswith(f"Recording stopped: cannot write {path}: No space left")
        kept = len(list(Recording.open(path).frames()))
        assert kept >= 1 and f"the {kept:,} frames written before are kept" in failed
        recorder.shown({"cpu": taken.cpu})  # stopped: nothing more is tried
        assert recorder.close().startswith(failed)
