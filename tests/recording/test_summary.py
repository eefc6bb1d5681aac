"""A recording summed up: each figure checked against the frames it was written from."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gputui.recording.reader import Recording
from gputui.recording.render import render_summary_json, render_summary_text, summary_as_dict
from gputui.recording.summary import GpuSummary, spread, summarise
from gputui.recording.writer import RecordingWriter
from gputui.telemetry.readings import GpuState
from gputui.telemetry.snapshot import snapshot_as_dict
from tests.recording.made import STARTED, GiB, header, snapshot

FRAMES = 24
LOST_FROM = 15
"""GPU 1 is lost from this frame on."""


def frame_time(frame: int) -> float:
    """One a second, but for a gap of 10 s after frame 19 (the recorder was stopped)."""
    return 0.5 + frame + (10.0 if frame >= 20 else 0.0)


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """A recording of 2 GPUs: the second lost from ``LOST_FROM``; and its frames' readings."""
    path = tmp_path / "box.ndjson.gz"
    writer = RecordingWriter(path, header(), codec="gzip")
    frames = []
    for frame in range(FRAMES):
        shot = snapshot(frame)
        if frame >= LOST_FROM:
            lost = dataclasses.replace(
                shot.nvml.gpus[1],
                state=GpuState.LOST,
                utilization_percent=None,
                memory_used_bytes=None,
                power_w=None,
                energy_joules=None,
                throttle_reasons=None,
                processes=None,
            )
            nvml = dataclasses.replace(shot.nvml, gpus=(shot.nvml.gpus[0], lost))
            shot = dataclasses.replace(shot, nvml=nvml)
        data = snapshot_as_dict(shot)
        writer.write(frame_time(frame), data)
        frames.append(data)
    writer.close()
    return path, frames


def weight(frame: int) -> float:
    """The time a frame counts for: to the next frame, at most 2 intervals; the last, none."""
    if frame == FRAMES - 1:
        return 0.0
    return min(frame_time(frame + 1) - frame_time(frame), 2.0)


def nearest_rank_p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[math.ceil(len(ordered) * 95 / 100) - 1]


def test_each_gpu_s_figures_are_those_of_its_frames(
    recorded: tuple[Path, list[dict[str, Any]]],
) -> None:
    path, frames = recorded
    summary = summarise(Recording.open(path))
    assert (summary.host, summary.frames, summary.problem) == ("box-01", FRAMES, None)
    assert (summary.first_t, summary.last_t) == (0.5, frame_time(FRAMES - 1))
    for gpu in summary.gpus:
        answered = [i for i in range(FRAMES) if frames[i]["gpus"][gpu.index]["state"] == "ok"]
        values = [frames[i]["gpus"][gpu.index]["utilization_percent"] for i in answered]
        assert gpu.utilization_percent.mean == pytest.approx(sum(values) / len(values))
        assert gpu.utilization_percent.p95 == nearest_rank_p95(values)
        assert gpu.utilization_percent.max == max(values)
        memory = [frames[i]["gpus"][gpu.index]["memory_used_bytes"] for i in answered]
        assert gpu.memory_used_bytes.max == max(memory)
        assert gpu.memory_total_bytes == 80 * GiB
        counter = [frames[i]["gpus"][gpu.index]["energy_joules"] for i in answered]
        assert (gpu.energy_j, gpu.energy_from) == (counter[-1] - counter[0], "counter")
        throttled = [
            i for i in answered if frames[i]["gpus"][gpu.index]["throttle_reasons"] == ["power cap"]
        ]
        assert gpu.throttled_s == pytest.approx(sum(weight(i) for i in throttled))
        assert dict(gpu.throttle_reasons_s) == {"power cap": pytest.approx(gpu.throttled_s)}
        assert (gpu.first_t, gpu.last_t, gpu.frames) == (0.5, frame_time(FRAMES - 1), FRAMES)


def test_a_lost_gpu_says_when_and_for_how_long(
    recorded: tuple[Path, list[dict[str, Any]]],
) -> None:
    path, _ = recorded
    first, second = summarise(Recording.open(path)).gpus
    assert (first.state_changes, first.unanswered_s) == ((), 0.0)
    assert second.state_changes == ((frame_time(LOST_FROM), "lost"),)
    assert second.unanswered_s == pytest.approx(sum(weight(i) for i in range(LOST_FROM, FRAMES)))


def test_a_process_s_use_is_that_of_the_frames_it_is_listed_in(
    recorded: tuple[Path, list[dict[str, Any]]],
) -> None:
    path, frames = recorded
    for gpu in summarise(Recording.open(path)).gpus:
        [use] = gpu.processes
        listed = [i for i in range(FRAMES) if (frames[i]["gpus"][gpu.index]["processes"] or [])]
        assert listed == list(range(3, 9))
        processes = [frames[i]["gpus"][gpu.index]["processes"][0] for i in listed]
        assert (use.pid, use.user, use.command) == (
            4000 + gpu.index,
            "ada",
            f"python train.py --rank {gpu.index}",
        )
        assert use.peak_memory_bytes == max(p["gpu_memory_bytes"] for p in processes) == 9 * GiB
        assert use.time_s == pytest.approx(sum(weight(i) for i in listed))
        sm = sum(
            weight(i) * p["sm_utilization_percent"] / 100
            for i, p in zip(listed, processes, strict=True)
        )
        assert use.sm_seconds == pytest.approx(sm)
        assert (use.first_t, use.last_t) == (frame_time(3), frame_time(8))


def test_a_reused_pid_is_another_process(tmp_path: Path) -> None:
    """The same pid, started again: its elapsed time starts from 0, so its start moved."""
    path = tmp_path / "box.ndjson"
    writer = RecordingWriter(path, header(), codec="none")
    for frame in range(3, 9):
        data = snapshot_as_dict(snapshot(frame))
        if frame >= 6:
            data["gpus"][0]["processes"][0]["elapsed_s"] = float(frame - 6)
        writer.write(frame_time(frame), data)
    writer.close()
    gpu = summarise(Recording.open(path)).gpus[0]
    assert [(use.pid, use.first_t, use.last_t) for use in gpu.processes] == [
        (4000, frame_time(3), frame_time(5)),
        (4000, frame_time(6), frame_time(8)),
    ]


def test_without_an_energy_counter_energy_is_power_times_time(tmp_path: Path) -> None:
    path = tmp_path / "box.ndjson"
    writer = RecordingWriter(path, header(), codec="none")
    powers = []
    for frame in range(6):
        data = snapshot_as_dict(snapshot(frame, gpus=1))
        data["gpus"][0]["energy_joules"] = None
        powers.append(data["gpus"][0]["power_w"])
        writer.write(frame_time(frame), data)
    writer.close()
    gpu = summarise(Recording.open(path)).gpus[0]
    assert gpu.energy_from == "power"
    assert gpu.energy_j == pytest.approx(sum(powers[:-1]))  # a second each, the last none


def one_gpu_counted(
    tmp_path: Path, frames: int, counter_at: Callable[[int], float]
) -> tuple[GpuSummary, list[float], list[float]]:
    """A recording of one GPU, a frame a second, its energy counter ``counter_at(frame)``:
    the GPU's summary, and each frame's counter and power."""
    path = tmp_path / "box.ndjson"
    writer = RecordingWriter(path, header(), codec="none")
    counter, powers = [], []
    for frame in range(frames):
        data = snapshot_as_dict(snapshot(frame, gpus=1))
        gpu = data["gpus"][0]
        gpu["energy_joules"] = counter_at(frame)
        counter.append(gpu["energy_joules"])
        powers.append(gpu["power_w"])
        writer.write(float(frame), data)
    writer.close()
    return summarise(Recording.open(path)).gpus[0], counter, powers


def test_a_counter_read_every_few_seconds_counts_power_after_its_last_answer(
    tmp_path: Path,
) -> None:
    """As the sampler shows a slow driver's counter (an H200's): its last answer repeated
    until the next, 10 s on. A recording that ends 4 s after an answer counts those 4 s as
    power times time; the seconds between two answers are the counter's increase alone."""
    answered_at = [0, 10]
    gpu, counter, powers = one_gpu_counted(
        tmp_path, 15, lambda frame: 1000.0 + 250.0 * max(a for a in answered_at if a <= frame)
    )
    assert gpu.energy_from == "counter"
    increase = counter[-1] - counter[0]
    assert increase == 2500.0
    # frames 10 to 13 count a second each (frame 14, the last, counts none)
    assert gpu.energy_j == pytest.approx(increase + sum(powers[10:14]))


def test_a_counter_that_starts_again_keeps_the_seconds_its_last_answer_left_unread(
    tmp_path: Path,
) -> None:
    """Answered at frame 0 and repeated until a driver reload at frame 8 starts it again
    from 3 J: frames 0 to 7 count as power times time, then the new counter's increase."""
    gpu, counter, powers = one_gpu_counted(
        tmp_path, 12, lambda frame: 1000.0 if frame < 8 else 3.0 + 250.0 * (frame - 8)
    )
    assert gpu.energy_j == pytest.approx(sum(powers[:8]) + counter[-1] - counter[8])


def test_p95_is_the_nearest_rank() -> None:
    assert spread(float(v) for v in range(1, 21)).p95 == 19.0
    assert spread([5.0]) == spread([5.0])
    assert spread([]).mean is None


def test_the_text_fits_and_names_each_figure(
    recorded: tuple[Path, list[dict[str, Any]]],
) -> None:
    path, _ = recorded
    summary = summarise(Recording.open(path))
    for width in (80, 60, 40):
        text = render_summary_text(summary, width)
        assert max(len(line) for line in text.splitlines()) <= width, text
    text = render_summary_text(summary, 80)
    assert text.splitlines()[0] == (
        "box-01: 2026-11-18 11:06:40 to 11:07:13 UTC (33 s), every 1 s, 24 frames"
    )
    assert "GPU 1  NVIDIA H100 80GB HBM3  +0:00:00 to +0:00:33" in text
    assert "lost at +0:00:15" in text
    assert "python train.py --rank 0" in text
    assert "power cap" in text


def test_text_from_the_recording_is_printable(tmp_path: Path) -> None:
    path = tmp_path / "box.ndjson"
    writer = RecordingWriter(path, header(), codec="none")
    data = snapshot_as_dict(snapshot(4, gpus=1))
    data["gpus"][0]["processes"][0]["command"] = "evil \x1b]52;c;aGk=\x07 \u202etxt"
    writer.write(0.5, data)
    writer.close()
    text = render_summary_text(summarise(Recording.open(path)))
    assert "\x1b" not in text and "\u202e" not in text
    assert "evil \\x1b]52;c;aGk=\\x07 \\u202etxt" in text


def test_the_json_holds_every_figure(recorded: tuple[Path, list[dict[str, Any]]]) -> None:
    path, _ = recorded
    summary = summarise(Recording.open(path))
    data = json.loads(render_summary_json(summary))
    assert data == json.loads(json.dumps(summary_as_dict(summary)))
    assert data["started_at"] == "2026-11-18T11:06:40+00:00"
    assert STARTED + data["first_t"] == STARTED + 0.5
    gpu = data["gpus"][1]
    assert set(gpu) == {
        "index", "name", "uuid", "first_t", "last_t", "frames", "utilization_percent",
        "memory_used_bytes", "memory_total_bytes", "energy_j", "energy_from", "throttled_s",
        "throttle_reasons_s", "unanswered_s", "state_changes", "processes",
    }  # fmt: skip
    assert gpu["state_changes"] == [{"t": frame_time(LOST_FROM), "state": "lost"}]
    assert set(gpu["utilization_percent"]) == {"mean", "p95", "max"}
    assert set(gpu["processes"][0]) == {
        "pid", "local_pid", "user", "command", "peak_memory_bytes", "time_s", "sm_seconds",
        "first_t", "last_t",
    }  # fmt: skip
