"""``gputui bench``: bad input exits 2 with one line; real CPU runs give the table and JSON."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from gputui.commands import main
from gputui.commands.args import check_data_dir, check_runs_dir
from gputui.device import CPU, Device
from gputui.jobs.bench.report import bench_json, render_table
from gputui.jobs.config import ConfigError, RunConfig
from gputui.jobs.results import RunRecord
from tests.disks import small_disk
from tests.fakenvml import FakeNvml
from tests.helpers import ROOT

TINY = ["--dataset", "synthetic", "--limit", "128", "--batch-size", "32", "--threads", "1"]


# Every real bench starts a trainer child (and several devices, or none named, a child that
# lists them first), each seconds of CPU before its first step: where tests only read what a
# run printed, they share one run, made once by a module-scoped fixture below.


@dataclass(frozen=True)
class Ran:
    """What one ``gputui bench`` did: its exit code, standard output and standard error,
    and the folder it was given (its runs folder, or its ``XDG_STATE_HOME``)."""

    code: int
    out: str
    err: str
    folder: Path


def bench_here(args: list[str], folder: Path, env: Mapping[str, str] | None = None) -> Ran:
    """``gputui bench ARGS`` in this process, as ``main`` runs it, with ``env`` set while it
    runs (a fixture shared by several tests has neither ``capsys`` nor ``monkeypatch``)."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["bench", *args])
    return Ran(code, out.getvalue(), err.getvalue(), folder)


@pytest.fixture(scope="module")
def cpu_0_json(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    """``bench --device cpu:0 ... --json``: one device, spelled as torch names a tensor's,
    two epochs, recorded in a runs folder of its own."""
    runs = tmp_path_factory.mktemp("runs")
    return bench_here(["--device", "cpu:0", *TINY, "--runs-dir", str(runs), "--json"], runs)


@pytest.fixture(scope="module")
def cpu_against_itself(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    """``bench --device cpu:0 --device cpu --epochs 1``, the table: the CPU against itself
    (``cpu:0`` is the CPU), recorded under ``XDG_STATE_HOME``."""
    state = tmp_path_factory.mktemp("state")
    args = ["--device", "cpu:0", "--device", "cpu", "--epochs", "1", *TINY]
    return bench_here(args, state, {"XDG_STATE_HOME": str(state)})


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--batch-size", "0"], "argument --batch-size: '0' is not a whole number of 1 or more"),
        (["--batch-size", "many"], "'many' is not a whole number of 1 or more"),
        (["--epochs", "0"], "argument --epochs: '0' is not a whole number of 1 or more"),
        (["--dataset", "imagenet"], "argument --dataset: invalid choice: 'imagenet'"),
        (["--pipeline", "turbo"], "argument --pipeline: invalid choice"),
        (["--precision", "fp8"], "argument --precision: invalid choice"),
        (["--nice", "20"], "'20' is not a niceness from 0 to 19"),
        (["--data-dir", "/proc/no-such-dir"], "data dir /proc/no-such-dir cannot be written to"),
        (["--data-dir", ""], "data dir is empty: name a folder, or leave --data-dir out"),
        (["--runs-dir", "/dev/null"], "runs dir /dev/null is not a folder"),
        (["--runs-dir", "/dev/null/runs"], "cannot be made inside the file /dev/null"),
        (
            ["--threads", "1025"],
            "--threads: '1025' is not a whole number of 1 or more and at most 1024",
        ),
        (
            ["--workers", "257"],
            "--workers: '257' is not a whole number of 0 or more and at most 256",
        ),
        (
            ["--device", "cuda0"],
            "argument --device: 'cuda0' is not a device: use cpu, cuda, cuda:N, mps, xpu or "
            "xpu:N; did you mean cuda:0?",
        ),
        (["--device", "gpu"], "argument --device: 'gpu' is not a device"),
        (["--device", "cpu", "--device", "gpu"], "argument --device: 'gpu' is not a device"),
        (
            ["--device", " "],
            "argument --device: the device is empty: use cpu, cuda, cuda:N, mps, xpu or xpu:N",
        ),
        (["--device", "cpu", "--device", "cuda:7"], "cuda:7:"),
        (["--device", "mps"], "mps:"),
    ],
)
def test_bad_values_exit_2_with_one_line(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if "--device" in args and args[-1] in {"cuda:7", "mps"}:
        from gputui.engine.devices import usable_devices

        if Device.parse(args[-1]) in usable_devices():
            pytest.skip(f"{args[-1]} is usable here")
    with pytest.raises(SystemExit) as caught:
        raise SystemExit(main(["bench", *args]))
    assert caught.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and needle in err, err
    assert "Traceback" not in err


def test_json_reports_every_epoch_and_the_placement(cpu_0_json: Ran) -> None:
    code, out, err, runs = cpu_0_json.code, cpu_0_json.out, cpu_0_json.err, cpu_0_json.folder
    assert code == 0, err
    result = json.loads(out)
    assert list(result) == ["runs", "warnings"]
    assert result["warnings"] == []  # one device named: nothing left out to warn of
    [run] = result["runs"]
    assert (run["device"], run["dataset"], run["status"], run["error"]) == (
        "cpu",
        "synthetic",
        "ok",
        None,
    )
    assert (run["pipeline"], run["precision"], run["batch_size"]) == ("resident", "fp32", 32)
    assert run["math"] == "IEEE fp32"  # which math ran, not only which was asked for
    assert (run["train_images"], run["test_images"]) == (128, 128)
    assert [e["epoch"] for e in run["epochs"]] == [1, 2]
    for epoch in run["epochs"]:
        assert set(epoch) >= {"epoch", "seconds", "images_per_second", "loss", "accuracy"}
        assert epoch["seconds"] > 0 and epoch["images_per_second"] > 0
        assert epoch["loss"] > 0 and 0 <= epoch["accuracy"] <= 1
    assert run["warmup_seconds"] == run["epochs"][0]["seconds"]
    assert run["epoch_seconds"] == run["epochs"][1]["seconds"]  # steady state: epoch 2
    assert run["speedup"] == 1.0
    assert run["num_threads"] >= 1
    groups = [row["group"] for row in run["placement"]]
    assert groups == ["conv", "fc", "param_groups[0]"]
    for row in run["placement"]:
        assert row["device"] == row["state_device"] == "cpu"
        assert row["param_bytes"] > 0 and row["state_bytes"] == 2 * row["param_bytes"]
    assert run["inputs"]["device"] == run["inputs"]["dataset_device"] == "cpu"
    assert Path(run["run_dir"]).parent == runs
    assert "cpu: epoch 2/2" in err  # progress went to stderr
    # issue 40: the steady epochs by both clocks, the FLOPs, the verdict; the CPU's clock is
    # the wall's, said so, and it has no energy counter
    assert run["flops_per_image"] == 10_959_984  # test_model.py's hand count
    clocks = [(e["device_clock"], e["device_seconds"], e["energy_joules"]) for e in run["epochs"]]
    assert clocks == [("wall", None, None)] * 2
    pace = run["pace"]
    assert (pace["epochs"], pace["wall_s"], pace["wall_spread_s"]) == (1, run["epoch_seconds"], 0)
    assert (pace["device_clock"], pace["device_s"], pace["busy_share"]) == ("wall", None, 1.0)
    assert pace["flops_per_second"] == 10_959_984 * run["images_per_second"]
    assert pace["images_per_joule"] is None
    assert pace["verdict"]["kind"] == "compute-bound"
    assert pace["verdict"]["sentence"].startswith("On cpu, compute-bound, busy = wall")


def test_the_table_says_which_dataset_ran_and_the_speedup(cpu_against_itself: Ran) -> None:
    code, out = cpu_against_itself.code, cpu_against_itself.out
    assert code == 0, cpu_against_itself.err
    lines = out.splitlines()
    assert lines[0] == "dataset: synthetic (generated locally)"
    assert lines[1].startswith("128 training / 128 held-out images, resident pipeline, fp32")
    assert lines[2] == "math: IEEE fp32"
    assert lines[3].startswith("devices: cpu: ")  # the CPU's name, above the table
    header = lines[5].split()
    assert header[:2] == ["device", "warm-up"] and header[-1] == "speedup"
    rows = [line for line in lines[6:] if line.split()[:1] == ["cpu"] and line.endswith("x")]
    assert len(rows) == 2  # the same device twice: the CPU against itself, as the pane can
    assert rows[0].endswith("1.00x")
    assert "warning: cpu compared with itself: its speedup measures noise" in out  # issue 40
    assert "cpu pace: median epoch " in out and "On cpu, compute-bound, busy = wall" in out
    assert "* only epoch 1 ran" in out
    assert (
        "cpu placement: parameters (118.8 KiB), Adam state (237.7 KiB) and input batches on cpu"
    ) in out
    assert "run folders: " in out


@pytest.mark.parametrize("devices", [["cpu:0"], ["cpu:0", "cpu"]])
def test_cpu_0_is_the_cpu_as_torch_accepts_it(
    devices: list[str], request: pytest.FixtureRequest
) -> None:
    """``--device cpu:0`` was refused as "not a device", though torch takes it (one device:
    the trainer checks it; several: a listing child checks them first). The runs are those
    of the JSON test (``--device cpu:0``) and the table test (``--device cpu:0 --device
    cpu``)."""
    if devices == ["cpu:0"]:
        ran: Ran = request.getfixturevalue("cpu_0_json")
        assert ran.code == 0, ran.err
        assert {run["device"] for run in json.loads(ran.out)["runs"]} == {"cpu"}
        return
    ran = request.getfixturevalue("cpu_against_itself")
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["device", "warm-up"])
    rows = lines[header + 1 : lines.index("", header)]
    assert [row.split()[0] for row in rows] == ["cpu"] * len(devices)


def test_ctrl_c_after_an_epoch_prints_it_marks_the_run_stopped_and_exits_130(
    tmp_path: Path, ctrl_c_reaches_children: None
) -> None:
    """Ctrl+C threw the finished epochs away: exit 130, nothing printed, no run folder named."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bench = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gputui",
            "bench",
            "--device",
            "cpu",
            "--dataset",
            "synthetic",
            "--limit",  # an epoch of 8 steps, 50 of them: Ctrl+C comes long before the end
            "256",
            "--batch-size",
            "32",
            "--epochs",
            "50",
            "--threads",
            "1",
            "--runs-dir",
            str(tmp_path),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert bench.stderr is not None
        line = bench.stderr.readline()  # "cpu: <name>; synthetic ..." once the run started
        assert line.startswith("cpu: "), line
        children = psutil.Process(bench.pid).children(recursive=True)
        assert children
        while not line.startswith("cpu: epoch 1/50 "):  # the first epoch finished
            line = bench.stderr.readline()
            assert line, "bench ended before its first epoch"
        bench.send_signal(signal.SIGINT)
        out, err = bench.communicate(timeout=30)
        assert bench.returncode == 130
        assert "Traceback" not in err
        _, alive = psutil.wait_procs(children, timeout=5)
        assert not alive
    finally:
        bench.kill()
        bench.wait()
    [run] = json.loads(out)["runs"]
    assert run["status"] == "stopped" and run["error"] is None
    assert 1 <= len(run["epochs"]) < 50
    assert run["warmup_seconds"] == run["epochs"][0]["seconds"] > 0
    run_dir = Path(run["run_dir"])
    assert run_dir.parent == tmp_path
    last = json.loads((run_dir / "events.jsonl").read_text().splitlines()[-1])
    assert (last["type"], last["stopped"]) == ("finished", True)


def stopped_after_one_epoch(config: RunConfig) -> RunRecord:
    """A real CPU run of ``config`` that was asked to stop once its first epoch finished."""
    from gputui.engine.trainer import run_training

    run = RunRecord(config)
    assert run_training(config, run.absorb, should_stop=lambda: len(run.epochs) >= 1) == 0
    return run


def test_a_stopped_run_and_the_runs_never_begun_are_marked_stopped() -> None:
    config = RunConfig(
        device=CPU, dataset="synthetic", limit=64, batch_size=32, epochs=3, threads=1
    )
    stopped = stopped_after_one_epoch(config.with_changes(record=False))
    never_begun = RunRecord(config.with_changes(device=Device("cuda", 0)))
    table = render_table([stopped, never_begun])
    assert "stopped: cpu after 1 of 3 epochs; cuda:0 not run" in table.splitlines()
    row = next(line for line in table.splitlines() if line.startswith("cuda:0"))
    assert row.split() == ["cuda:0", "not", "run"]
    runs = bench_json([stopped, never_begun])["runs"]
    assert [run["status"] for run in runs] == ["stopped", "stopped"]
    assert [len(run["epochs"]) for run in runs] == [1, 0]


def test_a_run_of_one_epoch_stopped_before_it_says_epoch() -> None:
    from tests.ui.streams.replay import before_epoch, stream
    from tests.ui.streams.scenarios import BY_NAME

    (config,) = BY_NAME["cpu_one_epoch"].configs
    run = RunRecord(config)  # type: ignore[arg-type]
    for event in before_epoch(stream("cpu_one_epoch"), 1):  # the recorded run, as it began
        run.absorb(event)
    assert "stopped: cpu after 0 of 1 epoch" in render_table([run]).splitlines()


def recorded_run(name: str) -> RunRecord:
    """The run of single-job recording ``name`` (tests/ui/streams), as bench gathers it."""
    from tests.ui.streams.replay import stream
    from tests.ui.streams.scenarios import BY_NAME

    (config,) = BY_NAME[name].configs
    run = RunRecord(config)  # type: ignore[arg-type]
    for event in stream(name):
        run.absorb(event)
    return run


def test_a_failed_run_is_a_word_in_the_table_and_its_error_a_numbered_line_below() -> None:
    """Issue 32: a run's error filled its row as one long cell, which set that column's
    width and so the whole table's (101 columns here); the same error twice is said once,
    and the devices' names, above the table, keep it within 80 columns."""
    runs = [recorded_run("cpu_run"), recorded_run("cpu_killed"), recorded_run("cpu_killed")]
    lines = render_table(runs).splitlines()
    top = lines.index("") + 1
    assert lines[top - 2] == "devices: cpu: AMD EPYC; cpu: Intel(R) Xeon(R) Processor"
    header, *rows, below, blank = lines[top : top + 6]
    assert header.split()[:2] == ["device", "warm-up"] and header.endswith("speedup")
    assert [row.split()[-2:] for row in rows[1:]] == [["failed", "(1)"]] * 2
    assert below == "(1) the trainer was killed by SIGKILL (not by the OOM killer)"
    assert blank == ""
    assert max(len(line) for line in (header, *rows)) <= 80


PARENT_PROBE = """
import json, sys
from gputui.commands import main
from gputui.jobs.config import RunConfig
from gputui.jobs.bench.report import bench_json, render_table
from gputui.jobs.results import RunRecord
try:
    code = main(["bench", *sys.argv[1:]])
except SystemExit as exited:  # argparse's usage errors
    code = exited.code
print(json.dumps({"code": code, "torch": "torch" in sys.modules}))
"""


@dataclass(frozen=True)
class Fresh:
    """What ``gputui bench`` did in a new interpreter: the probe's result (its exit code,
    whether it loaded torch), its standard output (the probe's line left out) and error."""

    result: dict[str, object]
    out: str
    err: str


def fresh_bench(*args: str, env: Mapping[str, str], cwd: Path | None = None) -> Fresh:
    """Run ``gputui bench ARGS`` in a new interpreter with environment ``env``."""
    done = subprocess.run(
        [sys.executable, "-c", PARENT_PROBE, *args],
        capture_output=True,
        text=True,
        env=dict(env),
        cwd=cwd,
        timeout=120,
    )
    *out, probed = done.stdout.strip("\n").split("\n")
    assert done.returncode == 0 and probed.startswith("{"), done.stderr  # the probe finished
    return Fresh(json.loads(probed), "".join(f"{line}\n" for line in out), done.stderr)


def bench_in_a_fresh_process(
    *args: str, env: dict[str, str] | None = None
) -> tuple[dict[str, object], str]:
    """Run ``gputui bench ARGS`` in a new interpreter; its exit code, whether it loaded torch."""
    fresh = fresh_bench(*args, env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)})
    return fresh.result, fresh.err


def beside_two_gpus(fake_nvml_dir: Path) -> dict[str, str]:
    """This environment, for a new interpreter whose NVML (the stand-in, found on the
    library path as on a real machine, its knobs cleared) reports 2 NVIDIA GPUs."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("FAKE_NVML_")}
    return {**env, "LD_LIBRARY_PATH": str(fake_nvml_dir), "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def default_devices_beside_gpus(fake_nvml_dir: Path) -> Fresh:
    """``bench`` with the default devices (the table), in a new interpreter beside the
    stand-in's 2 GPUs; read by the tests of the warning and of torch kept out of bench."""
    return fresh_bench(*TINY, "--epochs", "1", "--no-record", env=beside_two_gpus(fake_nvml_dir))


@pytest.fixture(scope="module")
def cpu_in_a_missing_home(
    fake_nvml_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Fresh, Path]:
    """``bench --device cpu`` (the table, recorded by default), in a new interpreter beside
    the stand-in's 2 GPUs, as a user whose home folder (returned too) does not exist and
    with no ``XDG_*`` set. Three tests read this one run, each for what it alone proves:
    one device needs no torch in bench, a named device gets no warning, and a missing home
    folder is never made."""
    home = tmp_path_factory.mktemp("home") / "nonexistent"
    env = {k: v for k, v in beside_two_gpus(fake_nvml_dir).items() if not k.startswith("XDG_")}
    env["HOME"] = str(home)
    fresh = fresh_bench("--device", "cpu", *TINY, "--epochs", "1", env=env, cwd=home.parent)
    return fresh, home


GPUS_UNUSED = (
    "gputui bench: warning: NVML reports 2 NVIDIA GPUs, but this torch {} cannot use them: "
    "benching cpu only; `gputui doctor` says why and how to fix it\n"
)
"""The line for the stand-in's two GPUs beside this machine's CPU-only torch."""


def test_gpus_this_torch_cannot_use_are_said_in_one_line(
    fake_nvml: FakeNvml, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    """Issue 18: with NVIDIA GPUs here and a CPU-only torch, bench benched the CPU alone
    and said nothing. The default devices now say so; ``--device cpu`` is taken as meant.
    (The table and ``--device cpu`` are the shared runs in new interpreters, beside the
    stand-in on the library path; the JSON runs here, beside the stand-in loaded here.)"""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch can use a GPU")
    table: Fresh = request.getfixturevalue("default_devices_beside_gpus")
    assert table.result["code"] == 0, table.err
    assert table.err.startswith(GPUS_UNUSED.format(torch.__version__))
    assert "NVML reports" not in table.out  # the table is as before
    assert main(["bench", *TINY, "--epochs", "1", "--no-record", "--json"]) == 0
    out, err = capsys.readouterr()
    line = GPUS_UNUSED.format(torch.__version__)
    assert json.loads(out)["warnings"] == [line.removeprefix("gputui bench: warning: ").strip()]
    assert err.startswith(line)
    named, _ = request.getfixturevalue("cpu_in_a_missing_home")
    assert named.result["code"] == 0, named.err
    assert "warning" not in named.err


def test_a_cuda_build_the_driver_cannot_run_is_said_with_the_doctor_s_command(
    fake_nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 32: bench said "`gputui doctor` says why"; where the driver (the stand-in's,
    for CUDA 12.4) is older than the build's CUDA, it says so with the doctor's command."""
    import gputui.jobs.bench.run
    from gputui.doctor.run import python_command
    from tests.ui.runner_fakes import CUDA_BUILD_ON_AN_OLD_DRIVER

    # NOT RECORDABLE WITHOUT A GPU: the listing of a CUDA 13.0 build beside the stand-in
    monkeypatch.setattr(
        gputui.jobs.bench.run, "list_devices", lambda query: CUDA_BUILD_ON_AN_OLD_DRIVER
    )
    assert main(["bench", *TINY, "--epochs", "1", "--no-record", "--json"]) == 0
    out, err = capsys.readouterr()
    python = python_command()
    line = (
        "this torch 2.13.0+cu130 needs a driver for CUDA 13.0 or later, and the driver here is "
        f"550.54.15 (CUDA 12.4): {python} -m pip uninstall -y torch && {python} -m pip "
        "install torch --index-url https://download.pytorch.org/whl/cu124"
    )
    assert err.startswith(f"gputui bench: warning: {line}\n")
    assert json.loads(out)["warnings"] == [line]


def test_no_warning_without_nvidia_gpus(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "0")
    assert main(["bench", *TINY, "--epochs", "1", "--no-record", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["warnings"] == []
    assert "warning" not in err


def test_one_device_trains_without_torch_in_the_bench_process(
    cpu_in_a_missing_home: tuple[Fresh, Path],
) -> None:
    fresh, _ = cpu_in_a_missing_home  # bench --device cpu in a new interpreter
    assert fresh.result == {"code": 0, "torch": False}, fresh.err


def test_the_default_devices_and_the_gpu_count_need_no_torch_in_the_bench_process(
    request: pytest.FixtureRequest,
) -> None:
    """The warning learns what torch sees from the device listing's child, and what NVML
    sees from the stand-in library, found on the library path as on a real machine."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch can use a GPU")
    fresh: Fresh = request.getfixturevalue("default_devices_beside_gpus")
    assert fresh.result == {"code": 0, "torch": False}, fresh.err
    assert "warning: NVML reports 2 NVIDIA GPUs, but this torch " in fresh.err


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_corrupt_cifar_batch_is_one_line_naming_it(
    damage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18: a damaged pickled batch said ``... (invalid load key, '\\xc9'.)``."""
    import torch

    from tests.engine import cifar_files

    def batch(count: int) -> tuple[torch.Tensor, torch.Tensor]:
        images = torch.zeros(count, 3, 32, 32, dtype=torch.uint8)
        return images, torch.zeros(count, dtype=torch.long)

    folder = tmp_path / "cifar-10-batches-py"
    cifar_files.write_pickled_batches(folder, batch(100), batch(20))
    victim = folder / "data_batch_1"
    whole = victim.read_bytes()
    garbage = bytes(range(256)) * 40
    victim.write_bytes(whole[: len(whole) // 2] if damage == "truncated" else garbage)
    data = ["--dataset", "cifar10", "--data-dir", str(tmp_path), "--limit", "64"]
    tiny = ["--batch-size", "32", "--threads", "1", "--epochs", "1", "--no-record"]
    code = main(["bench", "--device", "cpu", *data, *tiny])
    assert code == 1
    err = capsys.readouterr().err
    assert err == (
        f"gputui bench: error: corrupt CIFAR-10 batch file {victim} (truncated or damaged): "
        "delete it and fetch it again\n"
    )


def test_cifar10_asked_for_and_not_here_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18: ``--dataset cifar10`` without the data trained on the synthetic set and
    exited 0. Asked for by name, it is required; the line says how to get it."""
    data = ["--dataset", "cifar10", "--no-download", "--data-dir", str(tmp_path)]
    tiny = ["--limit", "64", "--batch-size", "32", "--threads", "1", "--epochs", "1"]
    code = main(["bench", "--device", "cpu", "--device", "cpu", *data, *tiny, "--no-record"])
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""  # no table of nothing
    assert err == (
        f"gputui bench: error: CIFAR-10 is not in {tmp_path} and downloading is off: allow "
        f"the download, or save https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz in "
        f"{tmp_path}\n"
    )
    code = main(["bench", "--device", "cpu", *data, *tiny, "--no-record", "--json"])
    out, json_err = capsys.readouterr()
    assert code == 1 and json_err == err
    [run] = json.loads(out)["runs"]
    assert (run["status"], run["dataset"], run["error"]["kind"]) == ("error", None, "data")


def test_a_device_that_is_not_one_is_refused_without_torch_in_one_line() -> None:
    result, err = bench_in_a_fresh_process("--device", "cuda0", *TINY)
    assert result == {"code": 2, "torch": False}
    assert err.count("\n") == 1, err
    assert err.startswith("gputui bench: error: argument --device: 'cuda0' is not a device: use")
    assert "did you mean cuda:0?" in err


def test_an_unusable_device_is_refused_by_the_child_as_one_line_and_exit_2() -> None:
    result, err = bench_in_a_fresh_process("--device", "cuda:99", *TINY)
    assert result == {"code": 2, "torch": False}
    assert err.count("\n") == 1, err
    assert err.startswith("gputui bench: error: cuda:99: ") and "usable here: cpu" in err


def test_a_config_only_the_child_can_judge_is_one_line_exit_2_and_no_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch larger than the data (no --limit: only the real child knows how many images
    there are) says kind=config; bench exits 2, and the child made no run folder."""
    runs = tmp_path / "runs"
    args = ["--dataset", "synthetic", "--batch-size", "50001", "--threads", "1"]
    code = main(["bench", "--device", "cpu", *args, "--runs-dir", str(runs)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.count("\n") == 1, err
    assert err.startswith("gputui bench: error: batch size 50,001 is larger than the 50,000 "), err
    assert not runs.exists()


def test_a_batch_larger_than_the_limit_is_refused_before_a_run_folder_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench --runs-dir X --limit 512 --batch-size 1000`` exited 2 and wrote X/..."""
    runs = tmp_path / "runs"
    args = ["--dataset", "synthetic", "--limit", "512", "--batch-size", "1000", "--threads", "1"]
    code = main(["bench", "--device", "cpu", *args, "--runs-dir", str(runs)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == (
        "gputui bench: error: batch size 1,000 is larger than the 512 training images: "
        "use a batch size of at most 512 (see 'gputui bench --help')\n"
    )
    assert not runs.exists()


def test_results_that_cannot_be_written_are_one_line_and_exit_1() -> None:
    """``bench --json >/dev/full`` trained, then ended in an OSError traceback."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = ["bench", "--device", "cpu", *TINY, "--epochs", "1", "--no-record", "--json"]
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "gputui", *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
        )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        "gputui bench: error: cannot write to standard output: No space left on device"
    )


@pytest.fixture
def one_page_left(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """A runs folder with room for a run folder's CSV header and not much more."""
    runs = tmp_path / "runs"
    with small_disk(runs, 1) as prefix:
        yield runs, prefix


def test_a_runs_folder_that_fills_up_is_removed_and_the_run_goes_on(
    one_page_left: tuple[Path, list[str]],
) -> None:
    """Issue 26: a full disk under the runs folder crashed bench (an OSError in the trainer)
    and left a half-written run folder. The run goes on unrecorded, with a note, as one in
    a missing home folder does."""
    runs, prefix = one_page_left
    before = sorted(runs.iterdir())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = ["bench", "--device", "cpu", *TINY, "--epochs", "1", "--runs-dir", str(runs)]
    command = [*prefix, sys.executable, "-m", "gputui", *argv]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    [note] = [line for line in done.stderr.splitlines() if "recording" in line]
    found = re.fullmatch(
        r"cpu: note: stopped recording this run: \[Errno (28|27)\] [^;]+; its folder (.+) was "
        r"removed",
        note,
    )
    assert found is not None, note
    assert Path(found.group(2)).parent == runs
    assert sorted(runs.iterdir()) == before  # no run folder is left, whole or half
    assert "cpu " in done.stdout and "run folders:" not in done.stdout


def test_a_full_disk_leaves_no_half_made_run_folder(tmp_path: Path) -> None:
    """The disk full from the start: the folder the recorder made is removed again."""
    runs = tmp_path / "runs"
    make = (
        "import sys; from pathlib import Path; from gputui.engine.records import RunRecorder\n"
        "try:\n    RunRecorder.create(Path(sys.argv[1]), 'cpu')\n"
        "except OSError as exc:\n    print(exc.errno)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with small_disk(runs, 0) as prefix:
        before = sorted(runs.iterdir())
        command = [*prefix, sys.executable, "-c", make, str(runs)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
        assert done.stdout.strip() in {"28", "27"}, done.stderr  # ENOSPC, EFBIG
        assert sorted(runs.iterdir()) == before


def test_a_missing_home_folder_is_never_made(cpu_in_a_missing_home: tuple[Fresh, Path]) -> None:
    """``HOME=/nonexistent`` (as root) made ``/nonexistent/.local/state/gputui/runs/...``."""
    done, home = cpu_in_a_missing_home  # bench --device cpu, no XDG_*, HOME=home
    assert done.result["code"] == 0, done.err
    note = f"cpu: note: not recording this run: the home folder {home} does not exist"
    assert note in done.err.splitlines()
    assert "run folders:" not in done.out
    assert not home.exists()


def test_a_runs_dir_in_a_missing_home_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "nonexistent"
    monkeypatch.setenv("HOME", str(home))
    assert main(["bench", "--device", "cpu", *TINY, "--runs-dir", "~/runs"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("gputui bench: error: runs dir ~/runs lies in the home folder /")
    assert err.endswith(
        ", which does not exist: name a folder outside it (see 'gputui bench --help')\n"
    )
    assert not home.exists()


# --- the folders named on the command line ----------------------------------------------


def test_a_data_dir_that_does_not_exist_yet_is_taken_and_not_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--data-dir`` to a new folder is taken; only the download makes it (issue 41: a
    command that then refused another flag had left the folder behind)."""
    folder = tmp_path / "new" / "cifar"
    check_data_dir(str(folder))
    data = ["--dataset", "cifar10", "--data-dir", str(folder)]
    assert main(["bench", "--device", "cpu", *data, "--runs-dir", "/dev/null"]) == 2
    assert "runs dir /dev/null is not a folder" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


@pytest.fixture
def full_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder on a tmpfs with no inode left: it looks writable (``os.access`` says so, as
    it does for root everywhere) but no file can be made in it."""
    folder = tmp_path / "full"
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,nr_inodes=1", "gputui-full", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"a tmpfs cannot be mounted here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.mark.parametrize("inside", ["", "runs"])
def test_a_runs_dir_no_file_can_be_written_in_is_refused_up_front(
    full_folder: Path, inside: str
) -> None:
    """It trained, then could not record the run; now it is refused before the work."""
    assert os.access(full_folder, os.W_OK)
    with pytest.raises(ConfigError, match=r"cannot be written to \(No space left on device\)"):
        check_runs_dir(str(full_folder / inside))
    assert not (full_folder / "runs").exists()
