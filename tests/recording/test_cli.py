"""``gputui replay`` and ``gputui snapshot --from`` on recordings made here: what they print,
and one line with the right exit code for each thing that can be wrong."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gputui.commands import main
from gputui.commands.record import default_file
from gputui.recording.codec import default_codec
from gputui.recording.frames import part_path
from tests.helpers import ROOT
from tests.recording.made import HIDE_ZSTANDARD, STARTED, plain_lines, write

USAGE = re.compile(r"(gputui [a-z]+): error: (.+) \(see '\1 --help'\)")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_usage_line(err: str) -> str:
    """The message of the one usage line ``err`` holds."""
    assert err.count("\n") == 1, err
    found = USAGE.fullmatch(err.strip())
    assert found is not None, err
    return found.group(2)


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    path = tmp_path / "box.ndjson.zst"
    write(path, 30, codec="zstd")
    return path


def test_replay_summary_prints_each_gpu(capsys: pytest.CaptureFixture[str], recorded: Path) -> None:
    code, out, err = run(capsys, "replay", "--summary", str(recorded))
    assert (code, err) == (0, "")
    assert out.startswith(
        "box-01: 2026-11-18 11:06:40 to 11:07:09 UTC (29 s), every 1 s, 30 frames"
    )
    assert "GPU 0  NVIDIA H100 80GB HBM3" in out and "GPU 1  NVIDIA H100 80GB HBM3" in out
    code, out, err = run(capsys, "replay", "--summary", str(recorded), "--json")
    assert (code, err) == (0, "")
    assert [gpu["index"] for gpu in json.loads(out)["gpus"]] == [0, 1]


def test_replay_without_summary_needs_a_terminal_and_says_what_scripts_use(
    capsys: pytest.CaptureFixture[str], recorded: Path
) -> None:
    code, out, err = run(capsys, "replay", str(recorded))  # (pytest's streams are no terminal)
    assert (code, out) == (2, "")
    assert one_usage_line(err).startswith("the replay needs a terminal, and its standard ")
    assert one_usage_line(err).endswith(
        "is not one; for scripts use gputui replay --summary FILE or gputui snapshot --from FILE"
    )
    code, _, err = run(capsys, "replay")
    assert code == 2 and "name the recording" in one_usage_line(err)
    with pytest.raises(SystemExit) as exited:
        main(["replay", str(recorded), "--speed", "3"])
    assert exited.value.code == 2
    assert "'3' is not a replay speed" in one_usage_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("at", "t"),
    [
        ("0", 0.5),  # before the first frame, by less than an interval: the first
        ("12", 11.5),
        ("12.5", 12.5),
        ("end", 29.5),
        (dt.datetime.fromtimestamp(STARTED + 20.7, dt.UTC).isoformat(), 20.5),
        (dt.datetime.fromtimestamp(STARTED + 3.5).isoformat(), 3.5),  # this machine's zone
        ("2026-11-18T11:06:50Z", 9.5),
    ],
)
def test_snapshot_from_prints_the_frame_at_a_time(
    capsys: pytest.CaptureFixture[str], recorded: Path, at: str, t: float
) -> None:
    code, out, err = run(capsys, "snapshot", "--from", str(recorded), "--at", at, "--json")
    assert (code, err) == (0, "")
    shown = json.loads(out)
    recorded_at = shown.pop("recorded")
    assert recorded_at["t"] == t and recorded_at["host"] == "box-01"
    assert set(shown) == {"cpu", "gpus", "nvml", "mps"}
    assert shown["cpu"]["memory_used_bytes"] == 4 * 1024**3 + int(t - 0.5)  # frame t - 0.5
    code, out, err = run(capsys, "snapshot", "--from", str(recorded), "--at", at)
    assert (code, err) == (0, "")
    assert out.startswith("Recorded on box-01, 2026-11-18 11:0")
    assert "\nCPU     Test CPU\n" in out and "GPU 1  NVIDIA H100 80GB HBM3" in out


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--at", "3600"], "3600 s is after the recording's last frame, 2026-11-18 11:07:09 UTC"),
        (["--at", "2026-11-17T00:00:00Z"], "is before the recording's first frame, 2026-11-18"),
        (["--at", "end", "--hosts", "gpu-01"], "--from reads a recording: leave out the hosts"),
        (["--timeout", "5"], "--from reads a recording: leave out the hosts and --timeout"),
    ],
)
def test_snapshot_from_refuses_a_time_or_flag_that_does_not_fit(
    capsys: pytest.CaptureFixture[str], recorded: Path, argv: list[str], said: str
) -> None:
    code, out, err = run(capsys, "snapshot", "--from", str(recorded), *argv)
    assert (code, out) == (2, "")
    assert said in one_usage_line(err)


def test_at_needs_from(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "snapshot", "--at", "end")
    assert code == 2 and one_usage_line(err) == "--at picks a frame of a recording: add --from FILE"


@pytest.mark.parametrize("command", [["replay"], ["replay", "--summary"], ["snapshot", "--from"]])
@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "cannot read {path}: No such file or directory"),
        (b"hello\n", "{path}: line 1: not a gputui recording"),
        (b'{"gputui_recording": 3}\n', "{path}: line 1: a recording of format version 3"),
    ],
)
def test_a_file_that_is_no_recording_is_one_usage_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    command: list[str],
    content: bytes | None,
    said: str,
) -> None:
    path = tmp_path / "file.ndjson"
    if content is not None:
        path.write_bytes(content)
    code, out, err = run(capsys, *command, str(path))
    assert (code, out) == (2, "")
    assert one_usage_line(err).startswith(said.format(path=path))


def test_a_damaged_line_still_prints_what_came_before_and_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "box.ndjson"
    write(path, 30)
    lines = plain_lines(path)
    lines[20] = b"#" * len(lines[20])  # frame 19
    path.write_bytes(b"\n".join(lines))
    code, out, err = run(capsys, "replay", "--summary", str(path))
    assert code == 1
    assert ", 19 frames" in out.splitlines()[0]
    assert err == (
        f"gputui replay: warning: {path}: line 21: not JSON: the line is damaged; the figures "
        "cover the frames before it\n"
    )
    code, out, err = run(capsys, "snapshot", "--from", str(path), "--at", "19.5", "--json")
    assert code == 1
    assert json.loads(out)["recorded"]["t"] == 18.5  # the last frame before the damage
    assert err.startswith(f"gputui snapshot: warning: {path}: line 21: not JSON")


def test_a_last_line_cut_short_is_a_note_and_exits_0(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """As a recorder killed mid-write leaves it."""
    path = tmp_path / "box.ndjson"
    write(path, 30)
    path.write_bytes(path.read_bytes()[:-40])
    code, out, err = run(capsys, "replay", "--summary", str(path))
    assert code == 0
    assert ", 29 frames" in out.splitlines()[0]
    assert err == (
        f"gputui replay: note: {path}: line 31: cut short: the file ends inside it (its "
        "recorder stopped while writing it)\n"
    )


@pytest.mark.parametrize("flag", [["--speed", "4"], ["--paused"], ["--loop"]])
def test_replay_flags_are_refused_with_summary(
    capsys: pytest.CaptureFixture[str], recorded: Path, flag: list[str]
) -> None:
    code, out, err = run(capsys, "replay", "--summary", str(recorded), *flag)
    assert (code, out) == (2, "")
    assert one_usage_line(err) == (f"{flag[0]} is for the replay on screen: drop it or --summary")


@pytest.mark.parametrize("cut", [True, False])
def test_a_recording_without_a_whole_frame_is_not_opened_and_exits_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cut: bool
) -> None:
    """Its only frame cut short (a recorder killed mid-write), or none written yet."""
    path = tmp_path / "box.ndjson"
    write(path, 1)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + (lines[1][:-40] if cut else b""))
    code, out, err = run(capsys, "replay", str(path))  # (said before the terminal is asked)
    assert (code, out) == (1, "")
    said = f"gputui replay: error: {path} holds no whole frame yet"
    if cut:
        said += (
            f": {path}: line 2: cut short: the file ends inside it (its recorder stopped while "
            "writing it)"
        )
    assert err == said + "\n"


def test_a_rotated_recording_is_summed_up_whole(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "box.ndjson"
    write(path, 40, max_size=8192)
    assert part_path(path, 2).exists()
    code, out, err = run(capsys, "replay", "--summary", str(path), "--json")
    assert (code, err) == (0, "")
    summary = json.loads(out)
    assert summary["frames"] == 40 and summary["files"][2] == str(part_path(path, 2))


def test_what_keep_left_is_summed_up_and_shown_by_the_first_file_s_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "box.ndjson"
    write(path, 40, max_size=8192, keep=2)
    assert not path.exists() and not part_path(path, 1).exists()
    code, out, err = run(capsys, "replay", "--summary", str(path), "--json")
    assert (code, err) == (0, "")
    summary = json.loads(out)
    left = sorted(p for p in tmp_path.iterdir() if not p.name.endswith(".idx"))
    assert len(left) == 2 and summary["files"] == [str(p) for p in left]
    assert 0 < summary["frames"] < 40
    code, out, err = run(capsys, "snapshot", "--from", str(path), "--at", "end", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["recorded"]["t"] == 39.5


def test_keep_without_max_size_is_one_usage_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "box.ndjson"
    code, _, err = run(capsys, "record", "--output", str(path), "--keep", "3")
    assert code == 2
    assert one_usage_line(err) == "--keep needs --max-size: without it there is only one file"
    assert not path.exists()


def test_record_refuses_zstd_without_the_module(tmp_path: Path) -> None:
    code = HIDE_ZSTANDARD + "from gputui.commands import main\nraise SystemExit(main(sys.argv[1:]))"
    path = tmp_path / "box.ndjson.zst"
    done = subprocess.run(
        [sys.executable, "-c", code, "record", "--output", str(path), "--duration", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2
    assert one_usage_line(done.stderr) == (
        f"{path} asks for zstd, which needs the zstandard module (pip install zstandard (or "
        "gputui[zstd])); or name the file .ndjson.gz"
    )
    assert not path.exists()


def test_record_says_where_it_records_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The path is the user's: its controls reach the terminal written out (issue 29)."""
    path = tmp_path / "box\x1b]0;title\x07\n.ndjson.gz"
    code, out, _ = run(capsys, "record", "--output", str(path), "--duration", "0.5")
    assert code == 0 and path.exists()
    lines = out.splitlines()
    assert len(lines) == 2 and "\x1b" not in out
    assert all("box\\x1b]0;title\\x07\\n.ndjson.gz" in line for line in lines)


def test_the_readme_s_record_example_works_without_zstandard(tmp_path: Path) -> None:
    """A default install has no zstandard: the README's first example once asked for it."""
    example = next(
        line
        for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith("gputui record --output")
    )
    argv = shlex.split(example, comments=True)[1:]
    argv[argv.index("--duration") + 1] = "0.5"
    code = HIDE_ZSTANDARD + "from gputui.commands import main\nraise SystemExit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / argv[argv.index("--output") + 1]).stat().st_size > 0


def test_a_recorder_started_in_the_same_second_as_another_takes_the_next_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ``gputui record`` started in the same second: the second once failed, the name
    taken (here, every name of the next two minutes is)."""
    monkeypatch.chdir(tmp_path)
    now, host = dt.datetime.now(), socket.gethostname()
    for second in range(120):
        default_file(now + dt.timedelta(seconds=second), host, default_codec()).touch()
    taken = set(tmp_path.iterdir())

    code, out, err = run(capsys, "record", "--duration", "0.5")

    assert code == 0, err
    made = sorted(path.name for path in set(tmp_path.iterdir()) - taken)
    assert len(made) == 2 and made[1] == made[0] + ".idx", made
    assert re.fullmatch(r"gputui-.+-\d{8}-\d{6}-2\.ndjson\.(zst|gz)", made[0])
    assert made[0] in out
