"""The ``gputui`` command, run as users run it: ``python -m gputui`` in a child process.

NVML comes from the stand-in ``libnvidia-ml.so.1`` on the child's ``LD_LIBRARY_PATH``
(or from nowhere: an empty folder), driven by ``FAKE_NVML_*`` knobs.
"""

from __future__ import annotations

import ctypes.util
import datetime as dt
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil
import pytest

from gputui import __version__
from gputui.commands import commands_named
from gputui.commands.output import encodable
from tests.fakeprocfs import (
    CONTAINERD_ID,
    DOCKER_ID,
    IN_DOCKER,
    IN_POD,
    IN_SLURM,
    POD_UID,
    jobs_tree,
)
from tests.helpers import ROOT, gputui, gputui_env
from tests.pty_run import run_on_a_pty


def snapshot_json(lib_dir: Path, knobs: Mapping[str, str] | None = None) -> dict[str, Any]:
    done = gputui("snapshot", "--json", lib_dir=lib_dir, knobs=knobs)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return json.loads(done.stdout)


@pytest.fixture
def no_nvml_dir(tmp_path: Path) -> Path:
    """An empty folder: with it as LD_LIBRARY_PATH, no NVML library can be found."""
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has a real libnvidia-ml, which LD_LIBRARY_PATH cannot hide")
    empty = tmp_path / "no-nvml"
    empty.mkdir()
    return empty


# --- the command line -------------------------------------------------------------------


def test_version() -> None:
    done = gputui("--version")
    assert done.returncode == 0
    assert done.stdout == f"gputui {__version__}\n"


def test_help_names_the_commands_and_options() -> None:
    done = gputui("--help")
    assert done.returncode == 0
    assert done.stdout.startswith("usage: gputui")
    for word in ("--interval", "--version", "snapshot"):
        assert word in done.stdout
    assert done.stderr == ""


def test_help_names_every_subcommand_with_its_help() -> None:
    done = gputui("--help")
    for name, help_text in (
        ("bench", "train a small CIFAR-10 CNN"),
        ("experiment", "measure the tutorials' lessons"),
        ("doctor", "say why PyTorch can or cannot use the GPUs"),
        ("serve", "serve the readings to Prometheus"),
    ):
        line = next(line for line in done.stdout.splitlines() if line.split()[:1] == [name])
        assert help_text in line


def test_the_monitor_alone_defines_no_other_subcommand() -> None:
    """``gputui`` with no command builds a parser that only names bench, experiment and
    doctor: their modules (and the training events they pull in) are not imported."""
    code = (
        "import sys; from gputui.commands import build_parser, commands_named; "
        "args = build_parser(commands_named(['--interval', '2'])).parse_args(['--interval', '2']); "
        "print(args.interval, args.command, "
        "sorted(m for m in sys.modules if m.startswith(('gputui.jobs', 'gputui.doctor', "
        "'gputui.commands.', 'gputui.engine'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    loaded = str(
        [
            "gputui.commands.args",
            "gputui.commands.fleet",
            "gputui.commands.output",
            "gputui.jobs",
            "gputui.jobs.config",
            "gputui.jobs.folders",
        ]
    )
    loaded += "\n"
    assert done.stdout.split(maxsplit=2) == ["2.0", "None", loaded]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ([], set()),
        (["--interval", "1"], set()),
        (["bench", "--epochs", "1"], {"bench"}),
        (["experiment", "batch-sweep"], {"experiment"}),
        (["doctor", "--json"], {"doctor"}),
        (["snapshot", "--help"], None),
        (["-h"], None),
    ],
)
def test_commands_named(argv: list[str], named: set[str] | None) -> None:
    assert commands_named(argv) == named


def test_snapshot_help() -> None:
    done = gputui("snapshot", "--help")
    assert done.returncode == 0
    assert "--json" in done.stdout


@pytest.mark.parametrize("value", ["0", "0.1", "61", "abc", "nan", "inf", "-1", ""])
def test_a_bad_interval_is_one_line_and_exit_2(value: str) -> None:
    done = gputui("--interval", value, "snapshot")
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("gputui: error: argument --interval:")
    assert "0.25 to 60" in done.stderr


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["snapshoot"], "unknown command 'snapshoot'; did you mean snapshot?"),
        (["docter"], "unknown command 'docter'; did you mean doctor?"),
        (["--interval", "2", "snapshto"], "unknown command 'snapshto'; did you mean snapshot?"),
        (["xyzzy"], "unknown command 'xyzzy'; the commands: snapshot, bench,"),
        # the misspelt flag is named, not the value after it (once "invalid choice: '2'")
        (["--intreval", "2"], "unrecognized argument --intreval; did you mean --interval?"),
        (["--intreval=2", "snapshot"], "unrecognized argument --intreval=2; did you mean"),
    ],
)
def test_a_misspelt_command_or_flag_is_named_with_the_one_meant(argv: list[str], said: str) -> None:
    done = gputui(*argv)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"gputui: error: {said}")
    assert len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.parametrize("topic", [None, "snapshot", "bench", "serve"])
def test_help_as_a_command_prints_what_help_prints(topic: str | None) -> None:
    asked = gputui("help", *([topic] if topic else []), knobs={"COLUMNS": "100"})
    flag = gputui(*([topic] if topic else []), "--help", knobs={"COLUMNS": "100"})
    assert (asked.returncode, asked.stderr) == (0, "")
    assert asked.stdout == flag.stdout and asked.stdout.startswith("usage: gputui")


def test_help_of_a_misspelt_command_names_the_one_meant() -> None:
    done = gputui("help", "scael")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(
        "gputui help: error: unknown command 'scael'; did you mean scale?"
    )


@pytest.mark.parametrize("value", ["0.25", "1", "60", "2.5"])
def test_a_good_interval_is_accepted(value: str, no_nvml_dir: Path) -> None:
    done = gputui("--interval", value, "snapshot", "--json", lib_dir=no_nvml_dir)
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) == {"host", "at", "cpu", "gpus", "nvml", "mps"}


# --- snapshot against the stand-in NVML -------------------------------------------------


def test_snapshot_json_reads_every_gpu(fake_nvml_dir: Path) -> None:
    me = psutil.Process()
    data = snapshot_json(
        fake_nvml_dir,
        {
            "FAKE_NVML_GPU_COUNT": "3",
            "FAKE_NVML_UNSUPPORTED": "fan,power_limit",
            "FAKE_NVML_LOST": "1:5",
            "FAKE_NVML_PROCESSES": f"0:{me.pid}:1073741824",
        },
    )
    assert list(data) == ["host", "at", "cpu", "gpus", "nvml", "mps"]
    assert data["host"] == socket.gethostname()
    assert dt.datetime.fromisoformat(data["at"]).utcoffset() == dt.timedelta(0)
    assert data["nvml"] == {
        "available": True,
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "error": None,
        "error_code": None,
        "host_pids": False,
        "hung_call": None,
        "hung_seconds": None,
    }
    first, lost, third = data["gpus"]
    assert [gpu["index"] for gpu in data["gpus"]] == [0, 1, 2]
    assert [gpu["state"] for gpu in data["gpus"]] == ["ok", "lost", "ok"]
    for gpu in (first, third):
        assert gpu["name"] == "NVIDIA H100 80GB HBM3"
        assert gpu["uuid"].startswith("GPU-")
        assert 0 <= gpu["utilization_percent"] <= 100
        assert 0 < gpu["memory_used_bytes"] < gpu["memory_total_bytes"]
        assert gpu["temperature_c"] > 0
        assert gpu["power_w"] > 0
        assert gpu["sm_clock_mhz"] > 0
        assert gpu["pcie_rx_bytes_per_s"] >= 0
        assert gpu["fan_percent"] is None  # not supported: null, not 0
        assert gpu["power_limit_w"] is None
    assert lost["utilization_percent"] is None
    assert lost["memory_used_bytes"] is None

    # The process NVML reports is joined with what psutil knows of it.
    (process,) = first["processes"]
    assert process["pid"] == me.pid
    assert process["gpu_memory_bytes"] == 1073741824
    assert process["user"] == me.username()
    assert process["command"]
    assert "pytest" in process["command"] or Path(sys.executable).name in process["command"]
    assert third["processes"] == []


def test_snapshot_compact_is_a_line_for_the_host_and_one_a_gpu(fake_nvml_dir: Path) -> None:
    """``nvitop -1``'s habit: a GPU on one line, as ``snapshot --hosts`` has it, not ten."""
    done = gputui("snapshot", "--compact", lib_dir=fake_nvml_dir, knobs={"FAKE_NVML_LOST": "1:0"})
    assert (done.returncode, done.stderr) == (0, "")
    host, *gpus = done.stdout.splitlines()
    assert re.fullmatch(rf"{socket.gethostname()}  CPU \d+% · memory .+ GiB · 2 GPUs", host)
    assert re.fullmatch(
        r"  0  NVIDIA H100 80GB HBM3 +\d+% +[\d.]+/79\.6 GiB +\d+°C +\d+ W", gpus[0]
    )
    assert gpus[1].split() == ["1", "Unknown", "NVIDIA", "GPU", "lost"]


def test_snapshot_json_gives_nvlink_and_the_video_engines_and_null_where_not_supported(
    fake_nvml_dir: Path,
) -> None:
    data = snapshot_json(
        fake_nvml_dir,
        {
            "FAKE_NVML_GPU_COUNT": "3",
            "FAKE_NVML_ENCODER_UTILIZATION": "0:12",
            "FAKE_NVML_DECODER_UTILIZATION": "0:40",
            "FAKE_NVML_UNSUPPORTED": "2:encoder,2:decoder",
            "FAKE_NVML_NVLINKS": "0:18,1:18",
            "FAKE_NVML_NVLINKS_DOWN": "1:0x3ffff",
        },
    )
    assert [gpu["nvlink_links_active"] for gpu in data["gpus"]] == [18, 0, None]
    # One sample reads the counters once (bytes, from NVML's KiB): a rate needs a second.
    assert [gpu["nvlink_throughput"] for gpu in data["gpus"]] == [
        {"rx_bytes": 18 * 2048 * 1024, "tx_bytes": 18 * 1024 * 1024}
        | {"rx_bytes_per_s": None, "tx_bytes_per_s": None},
        {"rx_bytes": 0, "tx_bytes": 0, "rx_bytes_per_s": None, "tx_bytes_per_s": None},
        None,  # no NVLink
    ]
    engines = [
        (gpu["encoder_utilization_percent"], gpu["decoder_utilization_percent"])
        for gpu in data["gpus"]
    ]
    assert engines == [(12, 40), (0, 0), (None, None)]


def test_snapshot_table_reads_every_gpu(fake_nvml_dir: Path) -> None:
    done = gputui(
        "snapshot",
        lib_dir=fake_nvml_dir,
        knobs={
            "FAKE_NVML_GPU_COUNT": "2",
            "FAKE_NVML_UNSUPPORTED": "fan",
            "FAKE_NVML_LOST": "1:5",
            "FAKE_NVML_PROCESSES": f"0:{os.getpid()}:1073741824",
        },
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert lines[0].startswith("CPU")
    assert "NVIDIA  driver 550.54.15, CUDA 12.4, 2 GPUs, 1 lost" in lines
    assert "  GPU 0  NVIDIA H100 80GB HBM3" in lines
    assert "  GPU 1  NVIDIA H100 80GB HBM3  lost" in lines
    fan = next(line for line in lines if "fan" in line)
    assert fan.rstrip().endswith("fan          n/a")
    assert any(line.split()[:2] == ["0", str(os.getpid())] for line in lines)
    assert lines[-1].startswith("MPS     MPS is Apple's GPU backend")


def test_snapshot_table_fits_a_narrow_terminal(fake_nvml_dir: Path) -> None:
    """Issue 18: ``COLUMNS=40 gputui snapshot`` wrote 80-column lines."""
    knobs = {"COLUMNS": "40", "FAKE_NVML_PROCESSES": f"0:{os.getpid()}:1073741824"}
    done = gputui("snapshot", lib_dir=fake_nvml_dir, knobs=knobs)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 40, done.stdout
    text = "\n".join(lines)
    assert len(re.findall(r"^    memory +\d+\.\d/79\.6 GiB$", text, re.MULTILINE)) == 2
    assert "NVIDIA  driver 550.54.15, CUDA 12.4," in lines and "        2 GPUs" in lines
    uuids = r"GPU-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}"
    assert len(re.findall(uuids, re.sub(r"\n +", "", text))) == 2  # broken at a hyphen
    assert "MPS     MPS is Apple's GPU backend for" in lines


def test_snapshot_when_the_driver_fails_to_start(fake_nvml_dir: Path) -> None:
    knobs = {"FAKE_NVML_INIT_ERROR": "DRIVER_NOT_LOADED"}
    data = snapshot_json(fake_nvml_dir, knobs)
    assert data["gpus"] == []
    assert data["nvml"]["available"] is False
    error = data["nvml"]["error"]
    assert isinstance(error, str)
    assert error.endswith(".")
    assert "\n" not in error
    assert data["cpu"]["logical_cores"] >= 1  # the rest still works

    done = gputui("snapshot", lib_dir=fake_nvml_dir, knobs=knobs)
    assert done.returncode == 0
    assert "NVIDIA  " + error[:40] in done.stdout


def test_snapshot_without_any_nvml_library(no_nvml_dir: Path) -> None:
    data = snapshot_json(no_nvml_dir)
    assert data["gpus"] == []
    assert data["nvml"]["available"] is False
    assert data["nvml"]["driver_version"] is None
    error = data["nvml"]["error"]
    assert isinstance(error, str)
    assert error.endswith(".")
    assert data["mps"]["supported_platform"] is (sys.platform == "darwin")

    done = gputui("snapshot", lib_dir=no_nvml_dir)
    assert done.returncode == 0
    assert done.stderr == ""
    assert "Traceback" not in done.stdout
    assert "NVIDIA  " + error[:40] in done.stdout


# --- a driver that does not answer (issue 17) -------------------------------------------

WEDGED = "the driver may be wedged; check `nvidia-smi` and `dmesg`."
STRICT = {"FAKE_NVML_CRASH_ON_TEARDOWN": "1"}
"""The stand-in crashes if the exit unloads it under the call still asleep in it."""


def test_snapshot_ends_at_its_deadline_with_the_gpus_that_answered(fake_nvml_dir: Path) -> None:
    """GPU 1's temperature never comes: the snapshot prints GPU 0, marks GPU 1 hung naming
    the call, and exits 1 at its deadline (it took as long as the call, 10 s, before)."""
    knobs = {**STRICT, "FAKE_NVML_HANG": "1:temperature=600"}
    done = gputui("snapshot", "--json", "--timeout", "1", lib_dir=fake_nvml_dir, knobs=knobs)
    assert (done.returncode, done.stderr) == (1, "")
    data = json.loads(done.stdout)
    answered, hung = data["gpus"]
    assert answered["state"] == "ok" and answered["temperature_c"] is not None
    assert hung["state"] == "hung" and hung["temperature_c"] is None
    assert re.fullmatch(
        r"nvmlDeviceGetTemperature on GPU 1 has not returned for \d+ s: " + re.escape(WEDGED),
        hung["error"],
    )
    assert data["cpu"]["logical_cores"] >= 1

    done = gputui("snapshot", "--timeout", "1", lib_dir=fake_nvml_dir, knobs=knobs)
    assert (done.returncode, done.stderr) == (1, "")
    assert "NVIDIA  driver 550.54.15, CUDA 12.4, 2 GPUs, 1 hung" in done.stdout
    assert "  GPU 1  NVIDIA H100 80GB HBM3  hung\n    nvmlDeviceGetTemperature on GPU 1" in (
        done.stdout
    )


@pytest.mark.parametrize(("knob", "call"), [("init", "nvmlInit"), ("count", "nvmlDeviceGetCount")])
def test_snapshot_says_which_call_of_a_wedged_driver_never_returned(
    fake_nvml_dir: Path, knob: str, call: str
) -> None:
    """The most common wedge: NVML never starts. The default deadline, 5 s, holds."""
    knobs = {**STRICT, "FAKE_NVML_HANG": f"{knob}=600"}
    done = gputui("snapshot", "--json", lib_dir=fake_nvml_dir, knobs=knobs)
    assert (done.returncode, done.stderr) == (1, "")
    nvml = json.loads(done.stdout)["nvml"]
    assert (nvml["available"], nvml["hung_call"]) == (False, call)
    assert re.fullmatch(rf"{call} has not returned for \d+ s: " + re.escape(WEDGED), nvml["error"])

    done = gputui("snapshot", lib_dir=fake_nvml_dir, knobs=knobs)
    assert (done.returncode, done.stderr) == (1, "")
    assert f"NVIDIA  {call} has not returned for " in done.stdout


def test_snapshot_json_names_each_processs_container_pod_and_slurm_job(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """Read from a fake procfs (``GPUTUI_PROCFS``) laid out as Docker, the kubelet with
    containerd, and Slurm lay out their cgroups (tests/fakeprocfs.py)."""
    knobs = {
        "GPUTUI_PROCFS": str(jobs_tree(tmp_path).root),
        "FAKE_NVML_PROCESSES": f"0:{IN_DOCKER}:1024,0:{IN_POD}:2048,1:{IN_SLURM}:4096",
    }
    data = snapshot_json(fake_nvml_dir, knobs)
    keys = ("container", "container_id", "runtime", "pod", "pod_uid", "namespace")
    found = {
        process["pid"]: {key: process[key] for key in (*keys, "slurm_job", "slurm_step", "unit")}
        for gpu in data["gpus"]
        for process in gpu["processes"]
    }
    assert found == {
        IN_DOCKER: {
            **dict.fromkeys(keys),
            "container": "trainer",
            "container_id": DOCKER_ID,
            "runtime": "docker",
            "slurm_job": None,
            "slurm_step": None,
            "unit": f"docker-{DOCKER_ID}.scope",
        },
        IN_POD: {
            "container": "resnet",
            "container_id": CONTAINERD_ID,
            "runtime": "containerd",
            "pod": "resnet-0",
            "pod_uid": POD_UID,
            "namespace": "ml",
            "slurm_job": None,
            "slurm_step": None,
            "unit": f"cri-containerd-{CONTAINERD_ID}.scope",
        },
        IN_SLURM: {
            **dict.fromkeys(keys),
            "slurm_job": "1234",
            "slurm_step": "0",
            "unit": "slurmstepd.scope",
        },
    }


def test_snapshot_help_says_which_timeout_default_applies() -> None:
    done = gputui("snapshot", "--help", knobs={"COLUMNS": "200"})
    assert "for this machine's NVIDIA driver (default: 5)" in done.stdout
    assert "or with hosts for each host (default: 2)" in done.stdout


# --- the monitor needs a terminal -------------------------------------------------------

NEEDS_A_TERMINAL = (
    "gputui: error: gputui needs a terminal, and its {} is not one; "
    "for scripts use `gputui snapshot{}` (see 'gputui --help')\n"
)


TERMINAL = {"TERM": "xterm-256color"}


def test_the_monitor_without_a_terminal_says_so_at_once_without_loading_textual() -> None:
    """``gputui </dev/null >/dev/null`` spun at 100% CPU on end-of-file for ever."""
    probe = (
        "import json, sys; from gputui.commands import main; code = main([]); "
        "sys.stdout.write(json.dumps([code, 'textual' in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=gputui_env(knobs=TERMINAL),
        timeout=30,
    )
    assert json.loads(done.stdout) == [2, False]
    assert done.stderr == NEEDS_A_TERMINAL.format("standard input", "")


def test_gputui_with_no_input_and_its_output_thrown_away_exits_2() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gputui"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=gputui_env(knobs=TERMINAL),
        cwd=ROOT,
        timeout=30,
    )
    assert (done.returncode, done.stderr) == (2, NEEDS_A_TERMINAL.format("standard input", ""))


@pytest.mark.parametrize(
    "flag", [["--hosts", "127.0.0.1:9"], ["--prometheus", "http://127.0.0.1:9"]]
)
def test_the_fleet_view_without_a_terminal_points_to_snapshot_with_its_flag(
    flag: list[str],
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gputui", *flag],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=gputui_env(knobs=TERMINAL),
        cwd=ROOT,
        timeout=30,
    )
    expected = NEEDS_A_TERMINAL.format("standard input", f" {flag[0]} ...")
    assert (done.returncode, done.stderr) == (2, expected)


def test_gputui_with_standard_input_closed_is_one_line_not_a_traceback() -> None:
    """``gputui <&-``: Textual asked ``None`` for its file descriptor."""
    done = subprocess.run(
        ["sh", "-c", 'exec "$0" -m gputui <&-', sys.executable],
        capture_output=True,
        text=True,
        env=gputui_env(knobs=TERMINAL),
        cwd=ROOT,
        timeout=30,
    )
    assert (done.returncode, done.stderr) == (2, NEEDS_A_TERMINAL.format("standard input", ""))


@pytest.mark.parametrize(("only", "said"), [("7", "7"), ("0,7", "7"), ("GPU-f00d,1", "GPU-f00d")])
def test_only_a_gpu_that_is_not_here_is_one_line_and_exit_2(
    fake_nvml_dir: Path, only: str, said: str
) -> None:
    """On 4 GPUs, ``--only 7`` opened the monitor saying NVML listed no GPU, and ``--only
    0,7`` showed GPU 0 alone, without a word."""
    env = gputui_env(knobs=TERMINAL) | {
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "FAKE_NVML_GPU_COUNT": "4",
    }
    run = run_on_a_pty(
        [sys.executable, "-m", "gputui", "--only", only],
        env=env,
        cwd=ROOT,
        timeout_s=30,
        until=lambda shown: b"\x1b[?1049h" in shown,  # the monitor's screen: too late
    )
    assert run.returncode == 2, run.shown[-300:]
    assert run.shown.decode() == (
        f"gputui: error: argument --only: no GPU {said} here (0-3) (see 'gputui --help')\r\n"
    )


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_gputui_on_a_terminal_with_a_stream_redirected_exits_2(stream: str, tmp_path: Path) -> None:
    """Textual draws on standard error: ``gputui 2>log`` drew the screen into the log and
    left the terminal blank. It reads the terminal's size from standard output:
    ``gputui >log`` laid the screen out for 80x24 whatever the terminal's size."""
    log = tmp_path / "log"
    with open(log, "wb") as redirected:
        run = run_on_a_pty(
            [sys.executable, "-m", "gputui"],
            env=gputui_env(knobs=TERMINAL),
            cwd=ROOT,
            timeout_s=20,
            **{stream: redirected},
        )
    name = "standard output" if stream == "stdout" else "standard error"
    assert run.returncode == 2, run.shown[-300:]
    shown = log.read_text() if stream == "stderr" else run.shown.decode().replace("\r\n", "\n")
    assert shown == NEEDS_A_TERMINAL.format(name, "")
    assert b"\x1b[?1049h" not in run.shown  # the screen was never switched to the app's


# --- standard output that fails ---------------------------------------------------------


def gputui_writing_to(
    stdout: Any, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m gputui ARGS`` with standard output sent to ``stdout``."""
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env={**gputui_env(knobs=TERMINAL), **(env or {})},
        cwd=ROOT,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "prog"),
    [
        (["snapshot"], "gputui snapshot"),
        (["snapshot", "--json"], "gputui snapshot"),
        (["--help"], "gputui"),
        (["--version"], "gputui"),
        (["serve", "--listen", "127.0.0.1:0"], "gputui serve"),  # its listening line
    ],
)
def test_output_to_a_full_disk_is_one_line_and_exit_1(
    args: list[str], prog: str, no_nvml_dir: Path
) -> None:
    """``gputui snapshot >/dev/full`` ended in an OSError traceback; ``--help`` said nothing
    and exited 0."""
    with open("/dev/full", "w") as full:
        done = gputui_writing_to(full, *args, env={"LD_LIBRARY_PATH": str(no_nvml_dir)})
    assert done.returncode == 1
    assert (
        done.stderr == f"{prog}: error: cannot write to standard output: No space left on device\n"
    )


def test_output_closed_is_one_line_and_exit_2_before_the_work() -> None:
    """``gputui snapshot >&-`` exited 0 having written nothing."""
    done = subprocess.run(
        ["sh", "-c", 'exec "$0" -m gputui snapshot >&-', sys.executable],
        capture_output=True,
        text=True,
        env=gputui_env(knobs=TERMINAL),
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "gputui snapshot: error: standard output is closed: send it to a file or /dev/null "
        "(see 'gputui snapshot --help')\n"
    )


def test_a_reader_that_goes_away_ends_gputui_quietly(no_nvml_dir: Path) -> None:
    """``gputui snapshot | head -1``: the pipe closes before gputui writes; nothing is said."""
    env = {**gputui_env(knobs=TERMINAL), "LD_LIBRARY_PATH": str(no_nvml_dir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputui", "snapshot"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # nobody reads: gputui's write meets a broken pipe
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (0, b"")


def test_an_ascii_terminal_gets_ascii_units(fake_nvml_dir: Path) -> None:
    """``PYTHONIOENCODING=ascii gputui snapshot`` ended in a UnicodeEncodeError on ``°C``."""
    knobs = {"LD_LIBRARY_PATH": str(fake_nvml_dir), "PYTHONIOENCODING": "ascii"}
    done = gputui_writing_to(subprocess.PIPE, "snapshot", env=knobs)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.isascii()
    temperatures = [line.split() for line in done.stdout.splitlines() if "temperature" in line]
    assert temperatures and all(words[-1] == "C" and words[-2].isdigit() for words in temperatures)


@pytest.mark.parametrize(
    ("text", "encoding", "written"),
    [
        ("71°C  NVIDIA H100…", "ascii", "71 C  NVIDIA H100."),
        ("71°C  NVIDIA H100…", "utf-8", "71°C  NVIDIA H100…"),
        ("python café.py", "ascii", "python caf?.py"),
        ("71°C", "latin-1", "71°C"),
    ],
)
def test_what_an_encoding_cannot_take_gets_a_stand_in_of_the_same_width(
    text: str, encoding: str, written: str
) -> None:
    assert encodable(text, encoding) == written
