"""Recordings and the files beside them as another user would plant them: links where the
recorder's files go, parts planted before rotation or owned by someone else, decompression
bombs, endless lines, FIFOs and ``/dev/zero`` where a file should be, and hostile numbers and
nesting. Each ends in one line (or is ignored, an index), never a traceback, a hang, unbounded
memory, or a file gputui did not create changed.

The commands run as the user runs them: in this process, or where memory is what is checked,
in a child whose peak memory is read back (:func:`run_measured`). A hang is caught by a
deadline, never timed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from gputui.commands import main
from gputui.device import CPU
from gputui.files import NotAFile, create_new, open_regular
from gputui.jobs.config import RunConfig
from gputui.recording.frames import index_path, part_path
from gputui.recording.reader import INDEX_MAX, Recording
from gputui.recording.runs import EventsDrained, entry_from_dict
from gputui.recording.writer import RecordingWriter
from tests.helpers import ROOT
from tests.recording.made import header, plain_lines, readings, write

MiB = 1 << 20
MEMORY_MAX = 100 * MiB
"""What reading any hostile file may take, whole process included."""
DEADLINE_S = 60
"""A hang's limit: each command here ends in well under a second."""

_MEASURED = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=float(%r))\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
    "sys.stdout.write(f'{done.returncode} {peak}\\n' + done.stdout)\n"
    "sys.stderr.write(done.stderr)\n"
)


def run_measured(*argv: str) -> tuple[int, str, str, int]:
    """``gputui ARGV`` in a child of its own: exit code, standard output and error, and its
    peak resident memory in bytes (the only child its parent waits for)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "gputui", *argv]
    measuring = subprocess.Popen(
        [sys.executable, "-c", _MEASURED % DEADLINE_S, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,  # its group is killed whatever ends the test
    )
    try:
        stdout, stderr = measuring.communicate(timeout=DEADLINE_S + 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(measuring.pid, signal.SIGKILL)
        measuring.wait()
    assert measuring.returncode == 0, stderr
    first, _, out = stdout.partition("\n")
    code, peak = map(int, first.split())
    return code, out, stderr, peak


def run_here(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``gputui ARGV`` in this process (where its memory is not what is under test)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    """The one line ``err`` holds, after checking it is one and no traceback."""
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err.strip()


# -- the recorder's own files -------------------------------------------------------------


def test_a_link_planted_where_the_index_goes_is_refused_and_its_target_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another user links ``night.ndjson.idx`` to a file of root's: ``gputui record`` refuses
    in one line naming the index, leaves the target as it was, and leaves no recording."""
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    path = tmp_path / "night.ndjson"
    index_path(path).symlink_to(victim)
    code, out, err = run_here(capsys, "record", "-o", str(path), "--duration", "1")
    assert code == 2 and out == ""
    assert f"cannot write {index_path(path)}: it exists" in one_line(err)
    assert victim.read_text() == "root's file\n"
    assert not path.exists()  # the recording made before its index was refused is gone


@pytest.mark.parametrize("planted", ["recording", "index", "dangling link"])
def test_the_writer_makes_every_file_new_and_never_writes_over_one(
    tmp_path: Path, planted: str
) -> None:
    path = tmp_path / "box.ndjson"
    target = path if planted == "recording" else index_path(path)
    if planted == "dangling link":
        target.symlink_to(tmp_path / "made-through-the-link")
    else:
        target.write_text("kept\n")
    with pytest.raises(FileExistsError) as raised:
        RecordingWriter(path, header(), codec="none")
    assert raised.value.filename == str(target)
    assert not (tmp_path / "made-through-the-link").exists()
    if planted != "dangling link":
        assert target.read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]  # nothing else made


def test_a_part_planted_before_rotation_stops_the_recording_and_is_kept_as_it_was(
    tmp_path: Path,
) -> None:
    path = tmp_path / "box.ndjson"
    planted = part_path(path, 1)
    planted.write_text("planted\n")
    writer = RecordingWriter(path, header(), codec="none", max_size=1)  # a part a frame
    writer.write(0.5, readings(0))  # the first part is full: the next frame rotates
    with pytest.raises(FileExistsError) as raised:
        writer.write(1.5, readings(1))
    writer.abandon()
    assert raised.value.filename == str(planted) and planted.read_text() == "planted\n"
    assert not index_path(planted).exists()
    assert [frame.t for frame in Recording.open(path).frames()] == [0.5]


def test_a_part_planted_where_keep_rotates_deletes_none_of_the_recording(tmp_path: Path) -> None:
    """With ``--keep 2``, the oldest part is deleted only once the new one is made: a part
    planted where the next goes stops the recording with every part it had kept."""
    path = tmp_path / "box.ndjson"
    writer = RecordingWriter(path, header(), codec="none", max_size=1, keep=2)
    writer.write(0.5, readings(0))
    writer.write(1.5, readings(1))  # parts 0 and 1 are kept
    part_path(path, 2).write_text("planted\n")
    with pytest.raises(FileExistsError):
        writer.write(2.5, readings(2))
    writer.abandon()
    assert path.exists() and part_path(path, 1).exists()
    assert [frame.t for frame in Recording.open(path).frames()] == [0.5, 1.5]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_part_owned_by_another_user_is_refused_not_merged(tmp_path: Path) -> None:
    path = tmp_path / "box.ndjson"
    write(path, 4, max_size=1)  # a part a frame
    os.chown(part_path(path, 2), 65534, 65534)
    recording = Recording.open(path)
    assert recording.paths == (path, part_path(path, 1))
    assert [frame.t for frame in recording.frames()] == [0.5, 1.5]
    assert str(recording.problem) == (
        f"{part_path(path, 2)}: line 1: owned by uid 65534, not by the recording's owner (0): "
        "not read as its part"
    )
    # with the first parts deleted (--keep), a part planted below the rest does not lead
    path.unlink()
    part_path(path, 1).unlink()
    os.chown(part_path(path, 2), 0, 0)
    planted = tmp_path / "box.1.ndjson"
    write(tmp_path / "other.ndjson", 1)
    (tmp_path / "other.ndjson").rename(planted)
    os.chown(planted, 65534, 65534)
    assert Recording.open(path).paths == (part_path(path, 2), part_path(path, 3))


def test_create_new_and_open_regular_refuse_what_is_in_the_way(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotAFile, match=r"not a regular file \(a FIFO\)"):
        open_regular(fifo)  # no writer: a plain open would wait for one for ever
    with pytest.raises(NotAFile, match=r"not a regular file \(a character device\)"):
        open_regular("/dev/zero")
    with pytest.raises(FileExistsError):
        create_new(fifo)


# -- what a reader is given ---------------------------------------------------------------


def _header_line(tmp_path: Path) -> bytes:
    write(tmp_path / "made.ndjson", 1)
    return plain_lines(tmp_path / "made.ndjson")[0] + b"\n"


def _zstd_bomb(header_line: bytes) -> bytes:
    """A header, then 2 GiB of zeros: one zstd frame of 16 MiB, 128 times (about 64 KB)."""
    import zstandard

    compressor = zstandard.ZstdCompressor(level=3)
    return compressor.compress(header_line) + compressor.compress(bytes(16 * MiB)) * 128


def _gzip_bomb(header_line: bytes) -> bytes:
    """A header, then 2 GiB of zeros: one gzip member of 16 MiB, 128 times (about 2 MB)."""
    return zlib.compress(header_line, wbits=31) + zlib.compress(bytes(16 * MiB), 9, 31) * 128


def _zstd_of_lines(header_line: bytes, line: bytes) -> bytes:
    """A header, then 2 GiB of ``line`` over and over (the lines of a bomb that are not
    long: empty, or frames of a kind a reader skips)."""
    import zstandard

    compressor = zstandard.ZstdCompressor(level=3)
    block = line * (16 * MiB // len(line))
    return compressor.compress(header_line) + compressor.compress(block) * 128


TOO_LONG = ": line 2: longer than 8,388,608 bytes"
BOMB = "decompresses to over 1,000 times its size"


@pytest.mark.parametrize(
    ("name", "made", "said"),
    [
        ("bomb.ndjson.zst", _zstd_bomb, TOO_LONG),
        ("bomb.ndjson.gz", _gzip_bomb, TOO_LONG),
        ("newlines.ndjson.zst", lambda line: _zstd_of_lines(line, b"\n"), ": line 2: not JSON"),
        ("skipped.ndjson.zst", lambda line: _zstd_of_lines(line, b'{"t": 0}\n'), BOMB),
        (
            "long.ndjson",
            lambda line: line + b'{"t": 1, "full": "' + b"x" * (16 * MiB) + b'"}\n',
            TOO_LONG,
        ),
    ],
)
@pytest.mark.parametrize("command", [("replay", "--summary"), ("snapshot", "--from")])
def test_a_bomb_or_an_endless_line_ends_in_one_line_naming_it(
    tmp_path: Path, name: str, made: object, said: str, command: tuple[str, str]
) -> None:
    path = tmp_path / name
    assert callable(made)
    path.write_bytes(made(_header_line(tmp_path)))
    code, _, err, peak = run_measured(*command, str(path))
    assert code == 1
    assert f" {path}: line " in one_line(err) and said in err
    assert peak < MEMORY_MAX, f"{peak / MiB:.0f} MiB"


def test_a_recording_that_is_a_fifo_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "box.ndjson"
    os.mkfifo(path)
    for command in (("snapshot", "--from"), ("replay", "--summary"), ("replay",)):
        code, out, err = run_here(capsys, *command, str(path))
        assert code == 2 and out == ""
        assert f"cannot read {path}: not a regular file (a FIFO)" in one_line(err)


@pytest.mark.parametrize("index", ["/dev/zero", "fifo", "newlines", "too large"])
def test_an_index_that_is_not_a_file_or_is_hostile_is_ignored(tmp_path: Path, index: str) -> None:
    path = tmp_path / "box.ndjson"
    write(path, 30)
    index_path(path).unlink()
    if index == "fifo":
        os.mkfifo(index_path(path))
    elif index == "newlines":  # millions of lines, were they split at once
        index_path(path).write_bytes(b"\n" * (INDEX_MAX - 1))
    elif index == "too large":
        index_path(path).write_bytes(b" " * (INDEX_MAX + 1))
    else:
        index_path(path).symlink_to(index)
    code, out, err, peak = run_measured("snapshot", "--from", str(path), "--json")
    assert (code, err) == (0, "")
    assert len(json.loads(out)["gpus"]) == 2  # the last frame, read from the start
    assert peak < MEMORY_MAX, f"{peak / MiB:.0f} MiB"
    assert Recording.open(path).at(29.5) is not None


def _lines(tmp_path: Path) -> list[bytes]:
    path = tmp_path / "made.ndjson"
    write(path, 6)
    return [line for line in plain_lines(path) if line]


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    ("case", "line", "said"),
    [
        ("a frame", 4, "line 4: nested too deeply: the line is damaged"),
        # as deep as Python parses (its C stack may allow more than its frames)
        ("a change", 4, "line 4: "),
        ("a time", 4, "line 4: not a frame: its time is 1000000000"),
        ("a key", 4, "line 4: not a frame: a list's change names position '1111"),
        ("a value", 7, "line 7: not a frame: gpus[0].memory_used_bytes is a number out of range"),
    ],
)
def test_hostile_numbers_and_nesting_in_a_frame_end_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, line: int, said: str
) -> None:
    lines = _lines(tmp_path)
    deep_change = b'{"t": 3.5, "delta": {"gpus": {"0": ' + b'{"x": ' * 990 + b"1" + b"}" * 993
    crafted = {
        "a frame": b'{"t": 3.5, "full": ' + DEEP + b"}",
        "a change": deep_change,
        "a time": b'{"t": 1' + b"0" * 400 + b', "delta": {}}',
        "a key": b'{"t": 3.5, "delta": {"gpus": {"' + b"1" * 5000 + b'": {}}}}',
    }
    if case == "a value":
        last = json.loads(lines[-1])
        last["delta"].setdefault("gpus", {}).setdefault("0", {})["memory_used_bytes"] = 10**400
        lines[-1] = json.dumps(last).encode()
    else:
        lines[line - 1] = crafted[case]
    path = tmp_path / "crafted.ndjson"
    path.write_bytes(b"\n".join(lines) + b"\n")
    for command in [("snapshot", "--from"), ("replay", "--summary")]:
        code, _, err = run_here(capsys, *command, str(path))
        assert code == 1
        assert f"{path}: {said}" in one_line(err), command
        assert case != "a change" or "nested too deeply" in err


@pytest.mark.parametrize("where", ["header", "index", "index time"])
def test_hostile_nesting_in_the_header_or_the_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    path = tmp_path / "box.ndjson"
    write(path, 6)
    if where == "header":
        path.write_bytes(DEEP + b"\n" + path.read_bytes().partition(b"\n")[2])
    elif where == "index":
        index_path(path).write_bytes(DEEP + b"\n")
    else:  # an entry whose time has no float
        first = plain_lines(index_path(path))[0]
        entry = b'{"t": 1' + b"0" * 400 + b', "offset": 5, "line": 3}'
        index_path(path).write_bytes(first + b"\n" + entry + b"\n")
    code, _, err = run_here(capsys, "snapshot", "--from", str(path))
    if where == "header":
        assert code == 2
        assert f"{path}: line 1: not a gputui recording" in one_line(err)
    else:  # ignored, as a missing one is
        assert (code, err) == (0, "")


# -- the runner's part of a recording -------------------------------------------------------


def test_the_runners_entries_take_only_what_the_pane_sends() -> None:
    """A recording's runner entries are read as strictly as the live pane's child is: a
    scaling that is not one, an event nested past the stack, a number past any figure, a
    field of the wrong kind, a config's 5,000-digit number: each entry or event is left
    out (as a line the protocol skips), never a traceback where it is shown."""
    config = RunConfig(device=CPU, epochs=1).to_json()
    assert entry_from_dict({"start": "scaling", "configs": [config], "scaling": "weak"})
    crafted = {"start": "scaling", "configs": [config], "scaling": "weak\x1b]0;pwned\x1b\\"}
    assert entry_from_dict(crafted) is None
    assert (
        entry_from_dict({"start": "training", "configs": ['{"epochs": 1' + "0" * 5000 + "}"]})
        is None
    )
    events = [
        "[" * 100_000,
        json.dumps({"v": 1, "type": "note", "message": ["not", "text"]}),
        '{"v": 1, "type": "data_ready", "device": "cpu", "seconds": "x", "nbytes": 1}',
        '{"v": 1, "type": "data_ready", "device": "cpu", "seconds": 1, "nbytes": 1'
        + "0" * 400
        + "}",
    ]
    drained = entry_from_dict({"events": events})
    assert isinstance(drained, EventsDrained) and drained.events == ()
    good = '{"v": 1, "type": "data_ready", "device": "cpu", "seconds": 1, "nbytes": 10}'
    drained = entry_from_dict({"events": [good]})
    assert isinstance(drained, EventsDrained) and len(drained.events) == 1
    watched = {"pid": 1, "alive": True, "cpu_percent": 10**400, "rss_bytes": 1, "threads": 1}
    assert entry_from_dict({"watched": watched}) is None
