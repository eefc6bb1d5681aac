"""``gputui experiment``: bad input exits 2 with one line; real CPU runs through the child."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

import gputui.commands.experiment
from gputui.commands import main
from gputui.device import CPU, parsed_fields
from gputui.jobs.conclusions import conclude
from gputui.jobs.config import available_cores, default_threads
from gputui.jobs.events import BatchSweepRow
from gputui.jobs.process import ChildProcess
from tests.engine.limited import LIMITED, OOM_BATCH
from tests.helpers import ROOT

TINY = ["--device", "cpu", "--dataset", "synthetic", "--threads", "1", "--warmup", "1"]
SWEEP_OMP_NUM_THREADS = "3"
"""``OMP_NUM_THREADS`` for the shared sweep, which leaves ``--threads`` out."""


@dataclass(frozen=True)
class Ran:
    """What ``gputui`` did in this process: its exit code, standard output and error."""

    code: int
    out: str
    err: str


def run_here(argv: list[str], env: dict[str, str]) -> Ran:
    """``gputui ARGV`` in this process, with ``env`` set while it runs (for a fixture shared
    by several tests, where ``capsys`` and ``monkeypatch`` cannot serve)."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    return Ran(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def sweep_json() -> Ran:
    """A real batch sweep of two sizes as JSON, its threads left to ``OMP_NUM_THREADS=3``.
    Two tests read this one run (each child costs seconds of CPU before its first step):
    the JSON's shape and the threads' default."""
    untold = ["--device", "cpu", "--dataset", "synthetic", "--warmup", "1"]  # TINY less --threads
    sizes = ["--batch-sizes", "16,8", "--steps", "2", "--limit", "32"]
    argv = ["experiment", "batch-sweep", *untold, *sizes, "--json"]
    return run_here(argv, {"OMP_NUM_THREADS": SWEEP_OMP_NUM_THREADS})


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "the following arguments are required: EXPERIMENT"),
        (["warp-drive"], "unknown experiment 'warp-drive'; the experiments: batch-sweep,"),
        (["batch-sweep", "--batch-sizes", "0,32"], "'0,32' is not a comma-separated list"),
        (["batch-sweep", "--batch-sizes", "32,,64"], "is not a comma-separated list"),
        (["batch-sweep", "--batch-sizes", "big"], "is not a comma-separated list"),
        (["sync-stall", "--batch-size", "0"], "'0' is not a whole number of 1 or more"),
        (["sync-stall", "--batch-sizes", "32"], "unrecognized argument --batch-sizes; did you"),
        (["pipelines", "--steps", "0"], "argument --steps: '0' is not a whole number"),
        (["pipelines", "--budget", "0"], "'0' is not a number of seconds above 0"),
        (["pipelines", "--budget", "nan"], "'nan' is not a number of seconds above 0"),
        (["pipelines", "--workers", "-1"], "'-1' is not a whole number of 0 or more"),
        (["batch-sweep", "--dataset", "imagenet"], "argument --dataset: invalid choice"),
        (["batch-sweep", "--nice", "20"], "'20' is not a niceness from 0 to 19"),
        (
            ["batch-sweep", "--data-dir", "/proc/no-such-dir"],
            "data dir /proc/no-such-dir cannot be written to",
        ),
        (
            ["batch-sweep", "--device", "cuda0"],
            "argument --device: 'cuda0' is not a device: use cpu, cuda",
        ),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        raise SystemExit(main(["experiment", *args]))
    assert caught.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and needle in err, err
    assert err.startswith("gputui") and "Traceback" not in err


def test_a_sweep_larger_than_the_data_is_refused_as_bench_refuses_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``batch-sweep --batch-sizes 99999999`` exited 0 with "status": "ok" and no figures;
    bench refuses the same batch. No --limit: the child refuses it once it knows the data."""
    sizes = ["--batch-sizes", "32,99999999"]
    code = main(["experiment", "batch-sweep", *TINY, *sizes, "--json"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == (
        "gputui experiment batch-sweep: error: batch size 99,999,999 is larger than the 50,000 "
        "training images: use a batch size of at most 50,000 "
        "(see 'gputui experiment batch-sweep --help')\n"
    )


def test_a_sweep_out_of_memory_marks_the_batch_skips_the_rest_and_is_empty_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real out-of-memory: the experiment's child under an address-space limit. The batch
    that does not fit is marked, the larger one skipped; with no figures the sweep is "empty",
    exit 1 ("status": "ok" and exit 0 said all had gone well)."""
    limited = functools.partial(ChildProcess, python=LIMITED)
    monkeypatch.setattr(gputui.commands.experiment, "ChildProcess", limited)
    sizes = ["--batch-sizes", f"{OOM_BATCH},{2 * OOM_BATCH}", "--limit", str(2 * OOM_BATCH)]
    code = main(["experiment", "batch-sweep", *TINY, *sizes, "--steps", "1", "--json"])
    out, _ = capsys.readouterr()
    result = json.loads(out)
    assert (code, result["status"]) == (1, "empty")
    assert result["settings"]["threads"] == 1  # as --threads told (TINY)
    [device] = result["device_results"]
    assert [(r["batch_size"], r["error"], r["steps"], r["data_share"]) for r in device["rows"]] == [
        (OOM_BATCH, "out of memory", 0, None),
        (2 * OOM_BATCH, f"skipped: batch {OOM_BATCH} ran out of memory", 0, None),
    ]
    assert result["conclusion"] == "On cpu, no batch size could be measured (out of memory)."


def test_cifar10_asked_for_and_not_here_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18: ``--dataset cifar10`` without the data ran on the synthetic set, exit 0."""
    data = ["--dataset", "cifar10", "--no-download", "--data-dir", str(tmp_path)]
    code = main(["experiment", "sync-stall", "--device", "cpu", *data, "--limit", "512"])
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(
        "gputui experiment sync-stall: error: "
        f"CIFAR-10 is not in {tmp_path} and downloading is off: allow the download, or save https://"
    )


def test_json_holds_the_rows_the_summary_and_the_sentence(sweep_json: Ran) -> None:
    code, out, err = sweep_json.code, sweep_json.out, sweep_json.err
    assert code == 0, err
    result = json.loads(out)
    assert list(result) == [
        "experiment",
        "status",
        "error",
        "settings",
        "device_results",
        "conclusion",
    ]
    assert (result["experiment"], result["status"], result["error"]) == ("batch-sweep", "ok", None)
    settings = result["settings"]
    assert settings["devices"] == ["cpu"] and settings["batch_sizes"] == [8, 16]
    # the threads: OMP_NUM_THREADS's (the run leaves --threads out; the OOM test tells it)
    assert (settings["dataset"], settings["images"], settings["threads"]) == ("synthetic", 32, 3)
    [device] = result["device_results"]
    assert (device["device"], device["status"], device["error"]) == ("cpu", "ok", None)
    assert "copies nothing" in device["data_phase"] and device["pinned"] is False
    for row in device["rows"]:
        assert set(row) == {
            "device",
            "batch_size",
            "steps",
            "images_per_second",
            "data_ms",
            "compute_ms",
            "data_share",
            "error",
        }
        assert 0 < row["data_share"] < 1 and row["images_per_second"] > 0
    assert [row["batch_size"] for row in device["rows"]] == [8, 16]
    best = max(device["rows"], key=lambda row: row["images_per_second"])
    assert device["summary"] == {
        "best_batch_size": best["batch_size"],
        "best_images_per_second": best["images_per_second"],
    }
    rows = [BatchSweepRow(**parsed_fields(BatchSweepRow, row)) for row in device["rows"]]
    assert result["conclusion"] == conclude("batch-sweep", {CPU: rows})
    assert "cpu: batch 8: " in err  # rows are shown as they arrive


def test_the_table_has_a_row_per_pipeline_and_ends_with_the_sentence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        ["experiment", "pipelines", *TINY, "--batch-size", "16", "--steps", "3", "--workers", "1"]
    )
    out, _ = capsys.readouterr()
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("pipelines: synthetic data (generated locally), ")
    header = lines.index(next(line for line in lines if line.startswith("device ")))
    assert lines[header].split() == [
        "device",
        "pipeline",
        "batch",
        "steps",
        "ms/step",
        "images/s",
        "spread",
        "ms",
        "setup",
        "s",
        "workers",
    ]
    classic, resident = (lines[header + 1].split(), lines[header + 2].split())
    assert classic[:3] == ["cpu", "classic", "16"] and classic[-1] == "1"
    assert resident[:3] == ["cpu", "resident", "16"] and resident[-1] == "0"
    assert lines[-1].startswith("On cpu, ") and lines[-1].endswith(".")


def test_ctrl_c_after_a_row_prints_it_marks_the_device_stopped_and_exits_130(
    ctrl_c_reaches_children: None,
) -> None:
    """Ctrl+C threw the measured rows away: exit 130 and nothing printed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "gputui", "experiment", "batch-sweep", *TINY]
    # batch 256's 50 steps take seconds: Ctrl+C comes long before they end (and a larger
    # batch only costs CPU, in the step that finishes before the run stops)
    command += ["--batch-sizes", "16,256", "--steps", "50", "--budget", "1000", "--limit", "256"]
    experiment = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert experiment.stderr is not None
        line = experiment.stderr.readline()  # "batch-sweep: synthetic data ..." once it started
        assert line.startswith("batch-sweep: "), line
        children = psutil.Process(experiment.pid).children(recursive=True)
        assert children
        while not line.startswith("cpu: batch 16: "):  # the first row was measured
            line = experiment.stderr.readline()
            assert line, "the experiment ended before its first row"
        experiment.send_signal(signal.SIGINT)  # during batch 256's 50 steps
        out, err = experiment.communicate(timeout=30)
        assert experiment.returncode == 130
        assert "Traceback" not in err
        _, alive = psutil.wait_procs(children, timeout=5)
        assert not alive
    finally:
        experiment.kill()
        experiment.wait()
    lines = out.splitlines()
    rows = [line.split() for line in lines if line.split()[:1] == ["cpu"]]
    assert [row[1] for row in rows] == ["16"]
    assert lines[-1] == "stopped: cpu after 1 row"


@pytest.mark.parametrize(
    ("told", "threads"), [(SWEEP_OMP_NUM_THREADS, 3), ("0", None), ("4,2", None)]
)
def test_the_threads_default_to_omp_num_threads_where_it_is_a_count(
    told: str, threads: int | None, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", told)
    assert default_threads() == (threads or available_cores())
    if threads is None:
        return
    # a real sweep with --threads left out, run with this OMP_NUM_THREADS (the JSON test's)
    sweep: Ran = request.getfixturevalue("sweep_json")
    assert sweep.code == 0, sweep.err
    assert json.loads(sweep.out)["settings"]["threads"] == threads
