"""A recording read back: every frame whole, seeking through the index, rotated files read as
one, and every kind of damage met with one line, what came before it still read."""

from __future__ import annotations

import gzip
import json
import math
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gputui.recording.codec import CODECS, GZIP, PLAIN, ZSTD
from gputui.recording.frames import index_path, part_path
from gputui.recording.reader import Recording, RecordingError
from tests.helpers import ROOT
from tests.recording.made import HIDE_ZSTANDARD, decoded_lines, header, plain_lines, write

SUFFIX = {ZSTD: ".ndjson.zst", GZIP: ".ndjson.gz", PLAIN: ".ndjson"}


@pytest.mark.parametrize("codec", CODECS)
def test_every_frame_reads_back_whole(tmp_path: Path, codec: str) -> None:
    path = tmp_path / f"box{SUFFIX[codec]}"
    written = write(path, 35, codec=codec)
    recording = Recording.open(path)
    frames = list(recording.frames())
    assert [frame.readings for frame in frames] == written
    assert [frame.t for frame in frames] == [0.5 + i for i in range(35)]
    assert recording.problem is None
    assert recording.header == header()


@pytest.mark.parametrize("codec", CODECS)
def test_a_frame_carries_the_changes_since_the_last_whole_one(tmp_path: Path, codec: str) -> None:
    path = tmp_path / f"box{SUFFIX[codec]}"
    written = write(path, 12, codec=codec, full_every=5)
    lines = [json.loads(line) for line in decoded_lines(path) if line]
    assert "gputui_recording" in lines[0]
    kinds = ["full" if "full" in line else "delta" for line in lines[1:]]
    assert kinds == ["full", *["delta"] * 4] * 2 + ["full", "delta"]
    delta = lines[3]["delta"]
    assert "name" not in delta["gpus"]["0"]  # the same as in the whole frame: not written
    assert delta["gpus"]["0"]["utilization_percent"] == written[2]["gpus"][0]["utilization_percent"]


@pytest.mark.parametrize("codec", CODECS)
def test_a_time_is_found_through_the_index(tmp_path: Path, codec: str) -> None:
    path = tmp_path / f"box{SUFFIX[codec]}"
    written = write(path, 35, codec=codec)
    recording = Recording.open(path)
    for t, frame in [(0.5, 0), (0.9, 0), (17.5, 17), (17.49, 16), (34.5, 34), (1e9, 34)]:
        found = recording.at(t)
        assert found is not None and found.readings == written[frame], t
    assert recording.at(0.49) is None  # before the first frame
    last = recording.at(math.inf)
    assert last is not None and last.t == 34.5


def test_seeking_decodes_only_from_the_nearest_whole_frame(tmp_path: Path) -> None:
    """A damaged line early on stops a full read, but not a seek past it: the index takes
    the reader straight to the block it needs."""
    path = tmp_path / "box.ndjson"
    written = write(path, 35)
    lines = plain_lines(path)
    lines[3] = b"#" * len(lines[3])  # frame 2, in the first block; the offsets stay right
    path.write_bytes(b"\n".join(lines))
    recording = Recording.open(path)
    found = recording.at(30.5)
    assert found is not None and found.readings == written[30]
    assert recording.problem is None
    assert len(list(recording.frames())) == 2
    assert recording.problem is not None and recording.problem.line == 4


@pytest.mark.parametrize("damage", ["missing", "empty", "another recording's", "garbage"])
def test_without_a_good_index_a_time_is_still_found(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "box.ndjson.gz"
    written = write(path, 35, codec=GZIP)
    index = index_path(path)
    if damage == "missing":
        index.unlink()
    elif damage == "empty":
        index.write_bytes(b"")
    elif damage == "another recording's":
        index.write_text(index.read_text().replace("test-recording", "other"))
    else:  # right header, offsets that point into the middle of blocks
        first, *entries = index.read_text().splitlines()
        moved = [
            json.dumps({**json.loads(e), "offset": json.loads(e)["offset"] + 7}) for e in entries
        ]
        index.write_text("\n".join([first, *moved]) + "\n")
    recording = Recording.open(path)
    for t, frame in [(0.5, 0), (22.5, 22), (math.inf, 34)]:
        found = recording.at(t)
        assert found is not None and found.readings == written[frame], (damage, t)
    assert recording.problem is None


@pytest.mark.parametrize("codec", CODECS)
def test_rotated_files_read_as_one_recording(tmp_path: Path, codec: str) -> None:
    path = tmp_path / f"box{SUFFIX[codec]}"
    size = 8192 if codec == PLAIN else 2048
    written = write(path, 40, codec=codec, max_size=size)
    recording = Recording.open(path)
    assert len(recording.paths) >= 3
    assert recording.paths[1] == part_path(path, 1)
    assert all(p.stat().st_size < size * 1.5 for p in recording.paths)  # a frame past it
    assert [frame.readings for frame in recording.frames()] == written
    assert {frame.part for frame in recording.frames()} == set(range(len(recording.paths)))
    for t in (0.5, 11.5, 23.5, 39.5):
        found = recording.at(t)
        assert found is not None and found.t == t
    later = Recording.open(recording.paths[1])  # from a later file on
    assert later.paths == recording.paths[1:]
    frames = list(later.frames())
    assert frames[0].readings == written[40 - len(frames)]
    assert later.at(0.5) is None  # before that file's first frame


@pytest.mark.parametrize("codec", CODECS)
def test_kept_parts_read_as_the_rest_of_the_recording(tmp_path: Path, codec: str) -> None:
    """``record --keep 2``: the oldest parts and their indexes are deleted as new ones start;
    the first file's name still opens what is left, seeking through the indexes left."""
    path = tmp_path / f"box{SUFFIX[codec]}"
    size = 8192 if codec == PLAIN else 2048
    (tmp_path / "all").mkdir()
    write(tmp_path / "all" / path.name, 40, codec=codec, max_size=size)
    parts = len(Recording.open(tmp_path / "all" / path.name).paths)
    assert parts >= 4  # the same recording with every part kept
    written = write(path, 40, codec=codec, max_size=size, keep=2)
    left = sorted(p.name for p in tmp_path.iterdir() if p.is_file())
    kept = [part_path(path, parts - 2), part_path(path, parts - 1)]
    assert left == sorted([*(p.name for p in kept), *(index_path(p).name for p in kept)])
    recording = Recording.open(path)  # its first file is gone
    assert recording.paths == tuple(kept)
    frames = list(recording.frames())
    assert recording.problem is None
    assert [frame.readings for frame in frames] == written[40 - len(frames) :]
    assert {frame.part for frame in frames} == {parts - 2, parts - 1}
    assert recording.at(0.5) is None  # before the first frame left
    for frame in (frames[0], frames[len(frames) // 2], frames[-1]):
        found = recording.at(frame.t)
        assert found is not None and found.readings == frame.readings
    last = recording.at(math.inf)
    assert last is not None and last.t == 39.5


def test_a_missing_recording_without_parts_left_is_still_one_line(tmp_path: Path) -> None:
    with pytest.raises(RecordingError) as raised:
        Recording.open(tmp_path / "gone.ndjson")
    assert str(raised.value) == f"cannot read {tmp_path / 'gone.ndjson'}: No such file or directory"


@pytest.mark.parametrize("codec", CODECS)
def test_a_file_cut_anywhere_reads_up_to_its_last_whole_frame(tmp_path: Path, codec: str) -> None:
    """As a recorder killed at any moment, or stopped by a full disk, leaves it: every cut
    reads a prefix of the frames, without an exception; only a line cut inside is noted."""
    path = tmp_path / f"box{SUFFIX[codec]}"
    written = write(path, 25, codec=codec, full_every=8)
    whole = path.read_bytes()
    cut = tmp_path / f"cut{SUFFIX[codec]}"
    cuts = random.Random(29).sample(range(1, len(whole)), 120)
    header_end = len(plain_lines(path)[0]) + 1 if codec == PLAIN else 0
    for at in sorted(cuts):
        cut.write_bytes(whole[:at])
        try:
            recording = Recording.open(cut)
        except RecordingError as error:  # cut inside the header: nothing to replay yet
            assert at < 300 or at < header_end, (at, error)
            continue
        frames = [frame.readings for frame in recording.frames()]
        assert frames == written[: len(frames)], at
        problem = recording.problem
        assert problem is None or (problem.cut and problem.line == len(frames) + 2), (at, problem)
        last = recording.at(math.inf)
        assert (last.readings if last else None) == (frames[-1] if frames else None), at


def test_a_damaged_line_stops_the_reading_there(tmp_path: Path) -> None:
    path = tmp_path / "box.ndjson"
    written = write(path, 20)
    lines = plain_lines(path)
    for number, bad in [
        (9, b"\x00\xffnot json"),
        (9, b'{"t": 7.5, "delta": {"gpus": {"7": {"index": 1}}}}'),  # no GPU 7 to change
        (9, b'{"t": 1.0, "delta": {}}'),  # before the frame above
        (9, b'["t", 7.5]'),
        (9, b'{"t": "7.5", "delta": {}}'),
        (9, b""),
        (2, b'{"t": 0.5, "delta": {}}'),  # a change before any whole frame
        (2, b'{"t": 0.5, "full": {"gpus": 3}}'),
    ]:
        damaged = lines.copy()
        damaged[number - 1] = bad
        path.write_bytes(b"\n".join(damaged))
        recording = Recording.open(path)
        frames = [frame.readings for frame in recording.frames()]
        assert frames == written[: number - 2], bad
        problem = recording.problem
        assert problem is not None and problem.line == number and not problem.cut, bad
        assert str(problem).startswith(f"{path}: line {number}: ")
        assert "\n" not in str(problem)


def test_damaged_compressed_data_stops_the_reading_there(tmp_path: Path) -> None:
    path = tmp_path / "box.ndjson.gz"
    written = write(path, 30, codec=GZIP)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 40] = bytes(40)
    path.write_bytes(bytes(data))
    recording = Recording.open(path)
    frames = [frame.readings for frame in recording.frames()]
    assert 0 < len(frames) < 30
    assert frames == written[: len(frames)]
    assert recording.problem is not None and not recording.problem.cut


def test_lines_of_a_kind_this_version_does_not_know_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "box.ndjson"
    written = write(path, 5)
    lines = plain_lines(path)
    lines.insert(3, b'{"t": 1.7, "event": {"kind": "epoch", "epoch": 1}}')
    path.write_bytes(b"\n".join(lines))
    recording = Recording.open(path)
    assert [frame.readings for frame in recording.frames()] == written
    assert recording.problem is None


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"", "is empty: not a gputui recording"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "line 1: not a gputui recording"),
        (b'{"cpu": {}, "gpus": []}\n', "line 1: not a gputui recording"),
        (b'{"gputui_recording": "1"}\n', "line 1: not a gputui recording"),
        (b'{"gputui_recording": 0}\n', "line 1: not a gputui recording"),
        (gzip.compress(b"hello\nworld\n", mtime=0), "line 1: not a gputui recording"),
        (b"\x1f\x8b\x08\x00garbage", "line 1: not a gputui recording"),
        (b"\x1f\x8b\x07" + bytes(200), "line 1: not a gputui recording (its compressed data"),
        (b"x" * 200_000, "line 1: not a gputui recording"),
        (
            b'{"gputui_recording": 2, "whatever": "a later gputui writes"}\n',
            "line 1: a recording of format version 2, newer than this gputui reads (1): "
            "upgrade gputui to read it",
        ),
        (b'{"gputui_recording": 1, "host": "x"}\n', "line 1: a damaged header: "),
    ],
    # Named: every xdist worker must collect the same ids (a gzip header holds its time).
    ids=[
        "empty",
        "png",
        "a snapshot",
        "version as text",
        "version 0",
        "gzip of text",
        "gzip of garbage",
        "gzip of another method",
        "one long line",
        "a newer version",
        "a damaged header",
    ],
)
def test_a_file_that_is_no_recording_is_refused_in_one_line(
    tmp_path: Path, content: bytes, said: str
) -> None:
    path = tmp_path / "file.ndjson"
    path.write_bytes(content)
    with pytest.raises(RecordingError) as refused:
        Recording.open(path)
    message = str(refused.value)
    assert said in message and str(path) in message
    assert "\n" not in message


def test_a_file_that_cannot_be_read_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match=r"^cannot read .*: No such file or directory$"):
        Recording.open(tmp_path / "missing.ndjson")
    with pytest.raises(RecordingError, match=r"^cannot read .*: not a regular file \(a folder\)$"):
        Recording.open(tmp_path)


def test_a_newer_version_part_ends_the_recording_there(tmp_path: Path) -> None:
    path = tmp_path / "box.ndjson"
    write(path, 40, max_size=8192)
    second = part_path(path, 2)
    lines = plain_lines(second)
    lines[0] = lines[0].replace(b'"gputui_recording":1', b'"gputui_recording":9')
    second.write_bytes(b"\n".join(lines))
    recording = Recording.open(path)
    assert len(recording.paths) == 2
    frames = list(recording.frames())
    assert frames and frames[-1].part == 1
    problem = recording.problem
    assert problem is not None and problem.path == second and problem.line == 1
    assert "newer than this gputui reads" in problem.message


def test_without_zstandard_a_zstd_recording_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "box.ndjson.zst"
    write(path, 3, codec=ZSTD)
    code = HIDE_ZSTANDARD + (
        "from pathlib import Path\n"
        "from gputui.recording.reader import Recording, RecordingError\n"
        "try:\n    Recording.open(Path(sys.argv[1]))\n"
        "except RecordingError as error:\n    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    assert done.stdout == (
        f"{path} is compressed with zstd: zstd needs the zstandard module: pip install "
        "zstandard (or gputui[zstd])\n"
    )


def test_the_readme_s_reader_reads_what_gputui_writes(tmp_path: Path) -> None:
    """The format as README.md describes it for other tools: its few lines of Python, given
    the lines of a recording, make the frames gputui's reader makes."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("#### The recording format", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(textwrap.dedent(code), namespace)
    path = tmp_path / "box.ndjson.gz"
    written = write(path, 25, codec=GZIP, full_every=7)
    frames, full = [], None
    for line in decoded_lines(path)[1:]:
        if line:
            value = json.loads(line)
            full = value.get("full", full)
            frames.append(full if "full" in value else namespace["changed"](full, value["delta"]))
    assert frames == written
