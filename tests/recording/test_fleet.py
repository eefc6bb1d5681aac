"""``gputui record --hosts`` as a real process, recording real ``gputui serve`` children on
loopback (the stand-in NVML), one of them killed mid-recording and started again on its port;
the recording is then read back: its frames, ``replay --summary`` as text and JSON, and
``snapshot --from``."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.commands import main
from gputui.recording.frames import FLEET, FORMAT_VERSION, HOST, Header, encode_line
from gputui.recording.reader import Frame, Recording, RecordingError
from gputui.recording.writer import RecordingWriter
from gputui.telemetry.bounds import in_range
from gputui.telemetry.readings import NvlinkThroughput
from gputui.telemetry.snapshot import gpu_as_dict
from tests.helpers import ROOT, WAIT_S, gputui_env
from tests.readme import keys_of, readme_json
from tests.recording.made import frames_when
from tests.recording.made import gpu as made_gpu
from tests.recording.made import header as made_header
from tests.serve.conftest import start_serve  # noqa: F401  (the fixture)
from tests.serve.served import StartServe, prometheus_scraping

PROCESS = "0:4242:2147483648"
"""The stand-in's process on the first host's GPU 0: pid 4242, 2 GiB."""


def fleet_recorder(output: Path, *args: str) -> subprocess.Popen[str]:
    """``gputui record -o OUTPUT --interval 0.25 ARGS``, started."""
    return subprocess.Popen(
        [sys.executable, "-m", "gputui", "record", "-o", str(output), "--interval", "0.25", *args],
        env=gputui_env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def up(frame: Frame, at: int) -> bool:
    return bool(frame.readings["hosts"][at]["up"])


@pytest.fixture
def recorded(tmp_path: Path, start_serve: StartServe) -> Iterator[tuple[Path, list[str]]]:  # noqa: F811
    """A fleet of two ``gputui serve`` (two GPUs each, a process on the first's GPU 0)
    recorded while the first is killed and started again: the recording and the hosts'
    names."""
    knobs = {"FAKE_NVML_GPU_COUNT": "2", "FAKE_NVML_PROCESSES": PROCESS}
    first = start_serve("--processes", **knobs)
    second = start_serve("--processes", FAKE_NVML_GPU_COUNT="2")
    first.wait_for_readings()
    second.wait_for_readings()
    names = [f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"]
    path = tmp_path / "fleet.ndjson"
    process = fleet_recorder(path, "--hosts", ",".join(names))
    try:
        frames_when(path, process, lambda frames: len(frames) >= 3 and up(frames[-1], 0))
        first.process.kill()
        first.process.communicate()
        frames_when(path, process, lambda frames: not up(frames[-1], 0))
        again = start_serve("--processes", "--listen", names[0], **knobs)
        again.wait_for_readings()
        frames_when(
            path,
            process,
            lambda frames: (
                any(not up(frame, 0) for frame in frames)
                and up(frames[-1], 0)
                and up(frames[-2], 0)
            ),
        )
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=WAIT_S)
        assert (process.returncode, err) == (0, ""), (out, err)
        assert out.startswith("gputui record: recording 2 hosts every 0.25 s into "), out
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    yield path, names


def test_a_fleet_recording_keeps_every_host_down_and_up_again(
    recorded: tuple[Path, list[str]],
) -> None:
    path, names = recorded
    recording = Recording.open(path)
    header = recording.header
    assert (header.kind, header.source, header.version) == (FLEET, "exporters", FORMAT_VERSION)
    frames = list(recording.frames())
    assert recording.problem is None
    for frame in frames:
        hosts = frame.readings["hosts"]
        assert [host["host"] for host in hosts] == names
        for host in hosts:
            assert [gpu["index"] for gpu in host["gpus"]] == [0, 1]  # kept while it was down
            if host["up"]:
                assert host["error"] is None and host["source"] == "gputui"
            else:
                assert isinstance(host["error"], str) and host["error"]
                assert "\n" not in host["error"]
    assert all(up(frame, 1) for frame in frames)
    states = [up(frame, 0) for frame in frames]
    went_down = states.index(False)
    assert all(states[:went_down]) and states[-1]
    assert True in states[went_down:]  # up again
    whole = [frame for frame in frames if frame.line == 2]
    assert whole, "the first frame is whole"
    at = recording.at(frames[went_down].t)
    assert at is not None and at.readings == frames[went_down].readings
    with pytest.raises(RecordingError) as refused:
        Recording.open(path, kinds=(HOST,))
    assert "\n" not in str(refused.value)
    assert str(refused.value) == (
        f"{path}: line 1: this is a fleet's (gputui record --hosts) recording, which is read "
        "with gputui replay FILE (the fleet view) or gputui snapshot --from FILE"
    )


def test_a_fleet_recording_summed_up(
    recorded: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, names = recorded
    assert main(["replay", "--summary", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    summary = json.loads(out)
    assert (summary["kind"], summary["source"]) == ("fleet", "exporters")
    assert [host["host"] for host in summary["hosts"]] == names
    bounced, steady = summary["hosts"]
    assert steady["unreachable_s"] == 0 and steady["state_changes"] == []
    assert bounced["unreachable_s"] > 0
    assert [change["state"] for change in bounced["state_changes"]] == ["down", "up"]
    assert bounced["state_changes"][0]["error"]
    for host in summary["hosts"]:
        assert [gpu["index"] for gpu in host["gpus"]] == [0, 1]
        for gpu in host["gpus"]:
            assert gpu["utilization_percent"]["mean"] is not None
            assert 0 < gpu["memory_used_bytes"]["max"] <= gpu["memory_total_bytes"]
            assert gpu["memory_used_bytes"]["p95"] <= gpu["memory_used_bytes"]["max"]
            assert gpu["unanswered_s"] == pytest.approx(host["unreachable_s"])
    used = bounced["gpus"][0]["processes"]
    assert [(use["pid"], use["peak_memory_bytes"]) for use in used] == [(4242, 2 * 1024**3)]
    assert bounced["gpus"][1]["processes"] == [] and steady["gpus"][0]["processes"] == []
    assert keys_of(readme_json("fleet-summary-json")) == keys_of(summary)
    assert main(["replay", "--summary", str(path)]) == 0
    text, err = capsys.readouterr()
    assert err == ""
    assert text.startswith("A fleet of 2 hosts, read from their exporters, recorded on ")
    assert f"{names[0]}  gputui · 2 GPUs · " in text and "unreachable for " in text
    assert f"{names[1]}  gputui · 2 GPUs · " in text and "always answered" in text
    words = " ".join(text.split())
    # why it was down, as the JSON says it: connection refused, or under load a read that
    # timed out or was reset while the server was killed
    why = " ".join(bounced["state_changes"][0]["error"].split())
    assert "down at +" in words and f"({why})" in words and "; up at +" in words
    assert text.count("GPU 0  ") == 2 and text.count("GPU 1  ") == 2


def test_a_fleet_frame_printed(
    recorded: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, names = recorded
    down = next(frame for frame in Recording.open(path).frames() if not up(frame, 0))
    assert main(["snapshot", "--from", str(path), "--at", str(down.t), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    shown: dict[str, Any] = json.loads(out)
    assert shown["recorded"]["t"] == down.t
    assert [host["up"] for host in shown["hosts"]] == [False, True]
    assert main(["snapshot", "--from", str(path), "--at", str(down.t)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0].startswith("A fleet recorded on ")
    assert any(line.startswith(f"{names[0]}  DOWN: ") for line in lines)
    assert any(line.startswith(f"{names[1]}  up · gputui · 2 GPUs") for line in lines)
    assert lines[-1] == "1 of 2 hosts answered"


def test_a_kind_this_gputui_does_not_know_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "later.ndjson"
    header = {**made_header().as_dict(), "kind": "cluster"}
    path.write_bytes(encode_line(header) + encode_line({"t": 0, "full": {"racks": []}}))
    assert main(["replay", "--summary", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert (
        "line 1: a recording of kind 'cluster', which this gputui does not read (it reads host "
        "and fleet recordings): upgrade gputui to read it"
    ) in err


def test_a_fleet_frame_in_a_host_recording_stops_the_reading_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mixed.ndjson"
    header = made_header().as_dict()  # a host's recording
    path.write_bytes(encode_line(header) + encode_line({"t": 0, "full": {"hosts": []}}))
    assert main(["snapshot", "--from", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "line 2: not a frame: the readings are not an object with a list of GPUs" in err


def test_record_takes_the_fleet_flags_as_the_fleet_view_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    output = str(tmp_path / "f.ndjson")
    for flags, says in (
        (["--hosts", "a:1", "--prometheus", "http://p:9090"], "not allowed with argument"),
        (["--prometheus", "ftp://p"], "is not a Prometheus address"),
        (["--hostfile", str(tmp_path / "none")], str(tmp_path / "none")),
    ):
        with pytest.raises(SystemExit) as exited:
            main(["record", "--output", output, *flags])
        assert exited.value.code == 2
        _, err = capsys.readouterr()
        assert says in err and err.count("\n") <= 2, err
    assert main(["--hosts", "a:1", "record", "--output", output]) == 2
    _, err = capsys.readouterr()
    assert "write the fleet's flags after the command" in err
    assert main(["--hosts", "a:1", "--record", output]) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "record the fleet with gputui record --hosts" in err


def test_a_fleet_read_from_prometheus_is_recorded(
    tmp_path: Path,
    start_serve: StartServe,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    served = start_serve(FAKE_NVML_GPU_COUNT="2")
    served.wait_for_readings()
    target = f"127.0.0.1:{served.port}"
    path = tmp_path / "fleet.ndjson.gz"
    with prometheus_scraping([target], tmp_path) as url:
        process = fleet_recorder(path, "--prometheus", url)
        try:
            frames = frames_when(
                path,
                process,
                lambda frames: (
                    bool(frames) and any(host["up"] for host in frames[-1].readings["hosts"])
                ),
            )
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=WAIT_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert (process.returncode, err) == (0, ""), (out, err)
    assert "recording the GPU hosts Prometheus scrapes every 0.25 s" in out
    assert Recording.open(path).header.source == "prometheus"
    (host,) = frames[-1].readings["hosts"]
    assert (host["host"], host["via"], host["source"]) == (target, "prometheus", "gputui")
    assert [gpu["index"] for gpu in host["gpus"]] == [0, 1]
    assert frames[-1].readings["error"] is None
    assert main(["replay", "--summary", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["source"] == "prometheus"
    assert [gpu["index"] for gpu in summary["hosts"][0]["gpus"]] == [0, 1]


def test_a_fleet_file_is_read_back_through_the_fleets_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file can hold anything: a value no GPU can take reads n/a, and a host's text is
    shown printable."""
    path = tmp_path / "crafted.ndjson"
    header = Header(
        version=FORMAT_VERSION,
        recording="r",
        part=0,
        host="head",
        gputui_version="0.1",
        interval_s=1.0,
        full_every=60,
        started_unix=1_795_000_000.0,
        kind=FLEET,
        source="exporters",
    )
    gpu = {**gpu_as_dict(made_gpu(0, 1)), "name": "H100\x1b[31m", "utilization_percent": 150.0}
    host = {"host": "n1\x07", "up": False, "error": "refused\x1b]0;x\x07", "gpus": [gpu]}
    writer = RecordingWriter(path, header, codec="none")
    writer.write(0.0, {"hosts": [host], "error": None})
    writer.write(1.0, {"hosts": [{**host, "age_seconds": "old"}], "error": None})
    writer.close()
    assert main(["snapshot", "--from", str(path), "--at", "0"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "\x1b" not in out and "\x07" not in out
    assert "n1\\x07  DOWN: refused\\x1b]0;x\\x07" in out  # shown, never obeyed
    (row,) = [line for line in out.splitlines() if "H100" in line]
    assert "150" not in row and "n/a" in row
    assert main(["snapshot", "--from", str(path), "--at", "1"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.endswith("line 3: not a frame: hosts[0].age_seconds is 'old'\n")
    assert main(["replay", "--summary", str(path)]) == 1  # read as the replay reads it
    out, err = capsys.readouterr()
    assert "every 1 s, 1 frame\n" in out and "\x1b" not in out
    said = "line 3: not a frame: hosts[0].age_seconds is 'old'; the figures cover the frames"
    assert said in err and err.count("\n") == 1


def test_a_part_of_a_reading_no_gpu_can_take_reads_none() -> None:
    """The range checks reach into a reading's parts (NVLink's counters) as into its fields."""
    gpu = dataclasses.replace(
        made_gpu(0, 1),
        utilization_percent=150.0,
        nvlink_throughput=NvlinkThroughput(
            rx_bytes=-1, tx_bytes=5, rx_bytes_per_s=None, tx_bytes_per_s=None
        ),
    )
    checked = in_range(gpu)
    assert checked.utilization_percent is None
    assert checked.nvlink_throughput == NvlinkThroughput(None, 5, None, None)
    assert in_range(made_gpu(0, 1)) == made_gpu(0, 1)
