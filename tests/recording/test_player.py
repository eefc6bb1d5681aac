"""A replay's player on recordings made here: frames from any time on (through the index,
across rotated files), stepping and seeking with the sparklines' window, each frame typed as
the samplers give it, the times ``g`` reads, and a file that ends early."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from gputui.recording.codec import CODECS, GZIP, PLAIN, ZSTD
from gputui.recording.player import SPEEDS, Player, faster, goto_time
from gputui.recording.reader import Recording
from gputui.telemetry.readings import Vendor
from gputui.telemetry.snapshot import snapshot_as_dict, snapshot_from_dict
from tests.recording.made import header, plain_lines, snapshot, write

SUFFIX = {ZSTD: ".ndjson.zst", GZIP: ".ndjson.gz", PLAIN: ".ndjson"}


@pytest.mark.parametrize("codec", CODECS)
def test_frames_from_any_time_on_across_rotated_files(tmp_path: Path, codec: str) -> None:
    path = tmp_path / f"box{SUFFIX[codec]}"
    written = write(path, 40, codec=codec, max_size=8192 if codec == PLAIN else 2048)
    recording = Recording.open(path)
    assert len(recording.paths) >= 3
    for t, first in ((0.0, 0), (0.5, 0), (11.7, 11), (23.5, 23), (39.5, 39), (99.0, 39)):
        frames = list(recording.frames_from(t))
        assert [f.readings for f in frames] == written[first:], t
        assert recording.problem is None


def test_the_player_steps_seeks_and_keeps_the_window_before(tmp_path: Path) -> None:
    path = tmp_path / "box.ndjson"
    written = write(path, 100)
    player = Player(Recording.open(path))
    assert (player.t, player.last_t) == (0.5, 99.5)
    assert snapshot_as_dict(player.snapshot) == written[0]
    assert [player.step().t for _ in range(3)] == [1.5, 2.5, 3.5]  # type: ignore[union-attr]
    assert [s.t for s in player.forward(6.0)] == [4.5, 5.5] and player.t == 5.5
    assert player.forward(6.2) == [] and player.t == 5.5
    assert [s.t for s in player.back(2.0)] == [3.5, 4.5]
    played = player.seek(70.0, 10.0)
    assert [s.t for s in played] == [60.5 + n for n in range(10)]
    assert snapshot_as_dict(played[-1].readings) == written[69]
    assert player.seek(math.inf)[-1].t == 99.5 and player.step() is None and player.finished


def test_stepping_back_within_the_window_reads_nothing_and_then_plays_on(tmp_path: Path) -> None:
    """The window's frames are kept: a step back ends it a frame earlier, without reading the
    file (gone here) again; the frames stepped back over then come again in order."""
    path = tmp_path / "box.ndjson"
    write(path, 100)
    player = Player(Recording.open(path))
    player.seek(70.0, 10.0)
    assert [s.t for s in player.forward(72.0)] == [70.5, 71.5]
    path.unlink()
    assert [s.t for s in player.back(10.0)] == [62.5 + n for n in range(9)]
    assert [s.t for s in player.back(10.0)] == [62.5 + n for n in range(8)]
    assert player.t == 69.5 and not player.finished
    assert [s.t for s in player.forward(71.0)] == [70.5]
    assert player.step() is not None and player.t == 71.5


def test_a_frame_is_typed_as_the_samplers_give_it_amd_and_intel_apart() -> None:
    taken = snapshot(4)
    amd = replace(taken.nvml.gpus[1], vendor=Vendor.AMD, index=0)
    data = snapshot_as_dict(replace(taken, nvml=replace(taken.nvml, gpus=taken.nvml.gpus[:1])))
    data["gpus"].append(
        snapshot_as_dict(replace(taken, nvml=replace(taken.nvml, gpus=(amd,))))["gpus"][0]
    )
    read = snapshot_from_dict(data, taken_at=4.0)
    assert [gpu.vendor for gpu in read.nvml.gpus] == [Vendor.NVIDIA]
    assert read.drm.gpus == (amd,) and read.drm.taken_at == 4.0
    assert snapshot_as_dict(read) == data


def test_a_cut_file_plays_to_its_last_whole_frame_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "box.ndjson"
    write(path, 30)
    data = path.read_bytes()
    path.write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 40])
    player = Player(Recording.open(path))
    assert player.seek(math.inf)[-1].t == 28.5 and player.last_t == 28.5
    assert player.problem is not None and player.problem.cut and player.problem.line == 31


def test_a_damaged_line_ends_the_frames_there(tmp_path: Path) -> None:
    path = tmp_path / "box.ndjson"
    write(path, 30)
    lines = plain_lines(path)
    lines[11] = b'{"t": 10.5, "delta": {"gpus": {"len": 99}}}'
    path.write_bytes(b"\n".join(lines))
    player = Player(Recording.open(path))
    player.forward(20.0)
    assert player.t == 9.5 and player.finished
    assert player.problem is not None and player.problem.line == 12


@pytest.mark.parametrize(
    ("text", "t"),
    [
        ("90", 90.0),
        ("2:30", 150.0),
        ("1:02:03", 3723.0),
        ("+0:00:07.5", 7.5),
        ("start", 0.0),
        ("end", math.inf),
        ("2026-11-18 11:08:00 UTC", 80.0),
        ("2026-11-18T11:08:00+00:00", 80.0),
        ("2026-11-18T12:08:00+01:00", 80.0),
        ("11:08:00 UTC", 80.0),
        ("11:06:00 UTC", 86400 - 40.0),  # before the start: the next day's
    ],
)
def test_g_reads_offsets_and_utc_times(text: str, t: float) -> None:
    assert goto_time(text, header()) == t


@pytest.mark.parametrize(
    "text",
    ["soon", "", "1:2:3:4", "25:00 UTC", "x" * 100, "9" * 400 + ":00:00", "9" * 400 + ":00"],
)
def test_g_says_in_one_line_what_it_cannot_read(text: str) -> None:
    with pytest.raises(ValueError, match="is not a time in the recording") as error:
        goto_time(text, header())
    assert "\n" not in str(error.value)


def test_speeds_go_from_a_quarter_to_sixteen() -> None:
    assert faster(1.0) == 2.0 and faster(16.0) == 16.0 and faster(0.25, -1) == 0.25
    assert faster(3.0, 0) in SPEEDS
