"""The GPU smoke suite's CPU rehearsal, run whole as CI runs it, and its judgements.

The suite runs once (about two minutes on two cores) with Textual made unimportable, as on
the GPU machines it is written for. Its judgements are then checked against the very
results it recorded, each changed in the one way that must turn a PASS into a FAIL.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import gpu_smoke
from benchmarks.gpu_smoke import FAIL, PASS, SKIP
from gputui.device import CPU, Device
from tests.helpers import ROOT, wait_for

SMOKE = [sys.executable, "benchmarks/gpu_smoke.py"]
CHECKS = [
    "imports",
    "arch",
    "doctor",
    "snapshot",
    "nvml cost",
    "bench resident fp32",
    "bench resident fp32 eager",
    "timing",
    "bench resident tf32",
    "bench resident bf16",
    "processes",
    "bench classic fp32",
    "oom",
    "experiment batch-sweep",
    "experiment sync-stall",
    "experiment pipelines",
    "bench resident fp32 compile",
    "scale",
]
"""The rehearsal's checks in order (``cuda`` adds a compiled TF32 bench before scale)."""
pytestmark = pytest.mark.long_module  # the rehearsal: minutes on two shared cores

CUDA_0 = Device("cuda", 0)
GPU_RUN = ROOT / "benchmarks" / "gpu_runs" / "2026-11-26-h200-first" / "raw"
"""The suite's first GPU run's JSON, as it came back from an H200."""


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """``benchmarks/gpu_smoke.py --device cpu --out DIR``, with ``import textual`` failing."""
    root = tmp_path_factory.mktemp("smoke")
    blocker = root / "no_textual" / "textual"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        "raise ImportError('Textual is not installed on the GPU machines')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(blocker.parent))
    # No deadline of the suite's own here (the test's timeout is the backstop): on loaded
    # cores the default 540 s cut the rehearsal short and its last checks read SKIP.
    command = ["benchmarks/gpu_smoke.py", "--device", "cpu", "--deadline", "3600"]
    done = subprocess.run(
        [sys.executable, *command, "--out", str(root / "out")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return done, root / "out"


def _report(out: Path) -> dict[str, Any]:
    return json.loads((out / "gpu_smoke.json").read_text())


def _raw(out: Path, name: str) -> dict[str, Any]:
    return json.loads((out / "raw" / name).read_text())


@pytest.mark.timeout(900)
def test_the_cpu_rehearsal_passes_without_textual_and_lists_every_check(rehearsal):
    done, out = rehearsal
    assert done.returncode == 0, done.stdout + done.stderr
    report = _report(out)
    assert [c["name"] for c in report["checks"]] == CHECKS
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    # a GPU's driver, CUDA's math, CUDA's graphs, a device's clock
    gpu_only = {*gpu_smoke.FROM_NVIDIA, "bench resident tf32", "bench resident fp32 eager"}
    gpu_only.add("timing")
    assert all(statuses[name] == SKIP for name in gpu_only)
    assert {s for n, s in statuses.items() if n not in gpu_only} == {PASS}
    assert report["ok"] is True and report["counts"] == {PASS: 11, FAIL: 0, SKIP: 7}
    timing = next(c for c in report["checks"] if c["name"] == "timing")
    assert timing["detail"] == "bench's epochs have no device clock to compare (wall)"
    for check in report["checks"]:
        assert set(check) == {"name", "status", "figures", "detail"} and check["detail"]
    imports = report["checks"][0]
    assert "Textual absent (not needed)" in imports["detail"]
    # One printed line per check, in order, then the totals.
    lines = [line for line in done.stdout.splitlines() if line.split("  ")[0] in (PASS, FAIL, SKIP)]
    assert [line.split(": ")[0].split("  ", 1)[1] for line in lines] == CHECKS
    markdown = (out / "gpu_smoke.md").read_text()
    for name in CHECKS:
        assert f"| {name} | {statuses[name]} |" in markdown


@pytest.mark.timeout(900)
def test_the_oom_check_is_a_real_out_of_memory_whose_advice_trains(rehearsal):
    _, out = rehearsal
    oom = next(c for c in _report(out)["checks"] if c["name"] == "oom")
    figures = oom["figures"]
    assert figures["batch_size"] == gpu_smoke.Settings.for_kind("cpu").oom_batch
    assert 0 < figures["suggested_batch_size"] < figures["batch_size"]
    assert "out of memory on cpu" in oom["detail"] and "then trained" in oom["detail"]


@pytest.mark.timeout(900)
def test_each_bench_run_keeps_its_event_stream_for_the_ui(rehearsal):
    """On a GPU these are the streams the runner's tests are to replay (tests/ui/streams):
    each bench run's, read by the replay's strict loader, shaped as the recorded CPU run."""
    from tests.ui.streams.replay import load, stream
    from tests.ui.test_streams import kinds

    _, out = rehearsal
    ran = [c["name"] for c in _report(out)["checks"] if c["name"].startswith("bench ")]
    ran = [
        name.replace(" ", "_")
        for name in ran
        if (out / "raw" / f"{name.replace(' ', '_')}.json").exists()
    ]
    assert "bench_resident_fp32" in ran
    shape = kinds(stream("cpu_run"))
    for name in ran:  # (a CPU without bf16 hardware says so first, in a note)
        kept = [kind for kind in kinds(load(name, out / "streams")) if kind != "note"]
        assert kept == shape, name


def test_a_bench_run_fails_for_each_thing_wrong_with_it(rehearsal):
    _, out = rehearsal
    run = _raw(out, "bench_resident_fp32.json")["runs"][0]
    steady = [e for e in run["epochs"] if not e["warmup"]]
    for epoch in steady:  # a quiet machine's epochs: the recorded ones are a shared CPU's
        epoch["seconds"] = steady[0]["seconds"]
    assert gpu_smoke.bench_verdict(run, CPU, "fp32", 0.10).status == PASS

    def verdict(change, tolerance: float | None = 0.10, precision: str = "fp32") -> str:
        changed = copy.deepcopy(run)
        change(changed)
        return gpu_smoke.bench_verdict(changed, CPU, precision, tolerance).detail

    def slow_last_epoch(r):
        r["epochs"][-1]["seconds"] *= 2

    assert "steady epochs differ" in verdict(slow_last_epoch, tolerance=0.10)
    assert "steady epochs differ" not in verdict(slow_last_epoch, tolerance=None)
    assert "math 'IEEE fp32', expected bf16" in verdict(lambda r: None, precision="bf16")

    def state_elsewhere(r):
        r["placement"][0]["state_device"] = "cuda:0"

    assert "conv state_device cuda:0" in verdict(state_elsewhere)

    def unlearned(r):
        r["epochs"][-1]["accuracy"] = 0.11

    assert "accuracy 0.11 is no better than 20%" in verdict(unlearned)
    failed = verdict(lambda r: r.update(status="error", error={"message": "boom"}))
    assert failed == "status error: boom"
    bare = copy.deepcopy(run)  # item 7: --compile where no compiler is installed
    bare.update(status="error", error={"kind": "toolchain", "message": "no C compiler"})
    skipped = gpu_smoke.bench_verdict(bare, CPU, "fp32", 0.10)
    assert (skipped.status, skipped.detail) == (SKIP, "not run here: no C compiler")

    # issue 40 item 3: where CUDA graphs are expected, a run that did not replay one fails
    def graphs(change) -> gpu_smoke.Check:
        changed = copy.deepcopy(run)
        change(changed)
        return gpu_smoke.bench_verdict(changed, CPU, "fp32", 0.10, graphs=True)

    assert run["graphs"] is False  # the CPU's run: no graph to replay
    assert graphs(lambda r: None).detail.endswith("CUDA graphs did not run: not asked")
    fell_back = "CUDA graphs off, the step runs eagerly: capture failed"
    failed = graphs(lambda r: r.update(graphs=True, notes=[fell_back]))
    assert failed.status == FAIL and failed.detail.endswith(f"did not run: {fell_back}")
    assert graphs(lambda r: r.update(graphs=True)).status == PASS


def test_a_doctor_report_fails_when_pinned_is_not_faster_or_a_figure_is_absurd(rehearsal):
    _, out = rehearsal
    report = _raw(out, "doctor.json")
    assert gpu_smoke.doctor_verdict(report, 0, CPU, gpu_smoke.CPU).status == PASS
    assert "exit 1" in gpu_smoke.doctor_verdict(report, 1, CPU, gpu_smoke.CPU).detail

    gpu = copy.deepcopy(report)
    cuda = dict(gpu["devices"][0], device="cuda:0")
    GB = 1e9
    cuda.update(
        copy_bytes_per_s=3000 * GB,
        h2d_pageable_bytes_per_s=20 * GB,
        h2d_pinned_bytes_per_s=50 * GB,
        d2h_pageable_bytes_per_s=20 * GB,
        d2h_pinned_bytes_per_s=50 * GB,
        matmul_fp32_tflops=50.0,
        matmul_bf16_tflops=600.0,
    )
    gpu["devices"].append(cuda)
    assert gpu_smoke.doctor_verdict(gpu, 0, CUDA_0, gpu_smoke.H100).status == PASS
    cuda["d2h_pinned_bytes_per_s"] = 15 * GB
    assert "D2H pinned 15.0 GB/s not above pageable 20.0" in (
        gpu_smoke.doctor_verdict(gpu, 0, CUDA_0, gpu_smoke.H100).detail
    )
    cuda["d2h_pinned_bytes_per_s"] = 50 * GB
    cuda["matmul_bf16_tflops"] = 0.001  # a unit slip, or the math fell back to fp32
    detail = gpu_smoke.doctor_verdict(gpu, 0, CUDA_0, gpu_smoke.H100).detail
    assert detail.startswith("matmul_bf16_tflops 0.001 outside 150.0..1000.0")
    missing = gpu_smoke.doctor_verdict(gpu, 0, Device("cuda", 1), gpu_smoke.H100)
    assert "no report for cuda:1" in missing.detail


def _lesson(name: str, device: dict[str, Any], shown: bool) -> None:
    """Set a recorded experiment's figures so that its lesson shows (or is reversed)."""
    rows = device["rows"]
    if name == "batch-sweep":
        rows[-1]["images_per_second"] = rows[0]["images_per_second"] * (2 if shown else 0.5)
    elif name == "sync-stall":
        summary = device["summary"]
        step = summary["noise_ms"] + 1
        summary["every_step_ms"] = summary["once_ms"] + (step if shown else -step)
    else:
        rates = {row["pipeline"]: row for row in rows}
        faster, slower = ("resident", "classic") if shown else ("classic", "resident")
        rates[faster]["images_per_second"] = 2 * rates[slower]["images_per_second"]


def test_each_experiment_fails_when_its_lesson_is_reversed(rehearsal):
    _, out = rehearsal
    for name in ("batch-sweep", "sync-stall", "pipelines"):
        recorded = _raw(out, f"experiment_{name}.json")
        shown, reversed_ = copy.deepcopy(recorded), copy.deepcopy(recorded)
        _lesson(name, shown["device_results"][0], shown=True)
        _lesson(name, reversed_["device_results"][0], shown=False)
        assert gpu_smoke.experiment_verdict(name, shown).status == PASS, name
        assert gpu_smoke.experiment_verdict(name, reversed_).status == FAIL, name
        assert gpu_smoke.experiment_verdict(name, reversed_, judged=False).status == PASS
        reversed_["device_results"][0].update(status="error", error="out of memory")
        assert "cpu: out of memory" in gpu_smoke.experiment_verdict(name, reversed_).detail


def test_a_scale_run_fails_off_its_backend_or_unfinished(rehearsal):
    _, out = rehearsal
    rows = _raw(out, "scale.json")["runs"]
    assert [row["world_size"] for row in rows] == [2]  # two gloo ranks, the CPU's
    assert gpu_smoke.scale_verdict(rows, "gloo").status == PASS
    assert gpu_smoke.scale_verdict(rows, "nccl").status == FAIL  # gloo is not NCCL
    broken = [{**rows[0], "world_size": 1}, {**rows[0], "status": "error", "step_ms_p50": None}]
    assert gpu_smoke.scale_verdict(broken, "gloo").status == FAIL
    assert gpu_smoke.scale_verdict([], "gloo").status == FAIL


def test_timing_and_oom_judgements():
    def timed(wall: float, device: float | None) -> dict[str, Any]:
        return {"pace": {"wall_s": wall, "device_s": device, "device_clock": "CUDA events"}}

    same_run = gpu_smoke.timing_verdict(timed(1.08, 1.0), 0.10)  # bench's own events
    assert same_run.status == PASS and same_run.figures["gap"] == 0.08
    assert "1.0800 s by the wall, 1.0000 s by CUDA events: 8.0% apart" in same_run.detail
    assert gpu_smoke.timing_verdict(timed(1.2, 1.0), 0.10).status == FAIL
    assert gpu_smoke.timing_verdict(timed(2.0, 1.0), None).status == PASS  # not judged
    assert gpu_smoke.timing_verdict(timed(1.0, None), 0.10).status == SKIP
    oom = {"status": "error", "error": {"kind": "oom", "message": "m", "suggested_batch_size": 64}}
    assert gpu_smoke.oom_verdict(oom, {"status": "ok"}, 128).status == PASS
    assert gpu_smoke.oom_verdict(oom, {"status": "error"}, 128).status == FAIL
    assert gpu_smoke.oom_verdict(oom, None, 64).status == FAIL  # no smaller batch
    assert gpu_smoke.oom_verdict({"status": "ok"}, None, 128).status == FAIL


@pytest.mark.parametrize(
    ("capability", "arch_list", "runs"),
    [
        ("9.0", ["sm_50", "sm_80", "sm_86", "sm_90"], True),
        ("9.0", ["sm_50", "sm_80", "sm_86"], False),  # a wheel without Hopper
        ("8.9", ["sm_80", "sm_86"], True),  # Ada runs Ampere's sm_86 cubins
        ("10.0", ["sm_80", "sm_90"], False),  # Blackwell with an old wheel
        ("12.0", ["sm_90", "compute_90"], True),  # PTX JIT-compiles forward
        ("8.0", ["sm_90a", "sm_86"], False),  # sm_90a is Hopper's alone; sm_86 is newer
        ("9.0", ["sm_90a"], True),
    ],
)
def test_arch_list_against_capability(capability, arch_list, runs):
    assert gpu_smoke.arch_runs(capability, arch_list)[0] is runs


def test_devices_and_expectations():
    assert gpu_smoke.same_device("cuda", "cuda:0") and gpu_smoke.same_device("mps:0", "mps")
    assert not gpu_smoke.same_device("cuda:1", "cuda:0")
    assert not gpu_smoke.same_device("cpu, cuda:0", "cpu")  # a mixed placement is not one
    assert gpu_smoke.expectations("cuda", "NVIDIA H100 80GB HBM3") is gpu_smoke.H100
    assert gpu_smoke.expectations("cuda", "NVIDIA H200") is gpu_smoke.H200
    assert gpu_smoke.expectations("cuda", "Tesla T4") is gpu_smoke.GENERIC_GPU
    assert gpu_smoke.expectations("cpu", None).tolerance is None


def test_a_bad_device_is_a_usage_error():
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_smoke.py", "--device", "gpu0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert (
        "argument --device: 'gpu0' is not a device: use cpu, cuda, cuda:N, mps, xpu or xpu:N; "
        "did you mean cuda:0?"
    ) in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture
def run_tree() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A stand-in for ``gputui bench``: a real process with one real child (its "trainer")."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(child.pid, flush=True)\n"
            "child.wait()\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    yield parent, child
    parent.kill()
    os.kill(child, 9)
    parent.wait()


@pytest.mark.parametrize(
    ("listing", "verdict"),
    [
        ("0:{child}:1000,1:4242:1000", "NVML lists the trainer (pid {child}) on GPU 0"),
        ("0:{child}:1000,0:{parent}:1000", "the gputui parent (pid {parent}) holds a CUDA context"),
        ("0:4242:1000", "none match: NVML may list host pids"),
        ("0:{child}:1000,1:{child}:1000", "the run also holds other GPUs: {{1: [{child}]}}"),
    ],
)
def test_the_process_check_through_the_real_bindings(
    fake_nvml, fake_nvml_env, run_tree, tmp_path, listing, verdict
):
    import pynvml

    parent, child = run_tree
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", listing.format(child=child, parent=parent.pid))
    pynvml.nvmlInit()
    try:
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
        with open(tmp_path / "log", "w+") as log:
            check = gputui_smoke_match(pynvml, parent, log, uuid)
    finally:
        pynvml.nvmlShutdown()
    assert verdict.format(child=child, parent=parent.pid) in check.detail
    assert check.status == (PASS if verdict.startswith("NVML lists the trainer") else FAIL)
    assert check.figures["uuid"] == uuid and check.figures["bench_pid"] == parent.pid


def gputui_smoke_match(nv, bench, log, uuid):
    return gpu_smoke._match_processes(nv, bench, log, uuid, wait_s=2)


def _proc_tree(root: Path, maps: dict[int, str]) -> Path:
    """A proc file system holding only ``pid/maps`` files: what ``node_mappers`` reads."""
    proc = root / "proc"
    for pid, text in maps.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "maps").write_text(text)
    return proc


NODE_LINE = "7f0000000000-7f0000001000 rw-s 00000000 00:05 1234 /dev/nvidia{minor}\n"


@pytest.mark.parametrize(
    ("mappers", "verdict"),
    [
        ("{child}", "NVML lists the trainer (pid {child} (NVML's host pid 4242, proven by"),
        ("{child},{parent}", "none match: NVML may list host pids"),  # two map it: unproven
    ],
)
def test_the_process_check_in_a_pid_namespace_accepts_what_devnodes_proves(
    fake_nvml, fake_nvml_env, run_tree, tmp_path, mappers, verdict
):
    """Item 5: inside a container NVML lists host pids (4242 here); the trainer counts
    when it alone maps the GPU's node, as the monitor's own matching decides."""
    import pynvml

    parent, child = run_tree
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", "0:4242:1000")
    pids = [int(pid.format(child=child, parent=parent.pid)) for pid in mappers.split(",")]
    proc = _proc_tree(tmp_path, {pid: NODE_LINE.format(minor=0) for pid in pids})
    pynvml.nvmlInit()
    try:
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
        with open(tmp_path / "log", "w+") as log:
            check = gpu_smoke._match_processes(pynvml, parent, log, uuid, wait_s=2, proc=proc)
    finally:
        pynvml.nvmlShutdown()
    assert verdict.format(child=child) in check.detail
    assert check.status == (PASS if len(pids) == 1 else FAIL)
    assert check.figures["host_pids"] == ({"4242": child} if len(pids) == 1 else {})


def test_the_process_check_finds_a_mig_slice_by_its_uuid(
    fake_nvml, fake_nvml_env, run_tree, tmp_path
):
    """Item 9: torch names a MIG slice by its own UUID (gputui spells it ``GPU-...``); NVML
    names it ``MIG-...`` and lists its processes on its GPU."""
    import pynvml

    parent, child = run_tree
    fake_nvml_env.setenv("FAKE_NVML_MIG_MODE", "1:1")
    fake_nvml_env.setenv("FAKE_NVML_MIG_DEVICES", "1:1:0:100:10000,1:2:0:100:10000")
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", f"1/1:{child}:1000")
    pynvml.nvmlInit()
    try:
        gpu = pynvml.nvmlDeviceGetHandleByIndex(1)
        mig = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 1))
        assert mig.startswith("MIG-") and mig != pynvml.nvmlDeviceGetUUID(gpu)
        as_torch = "GPU-" + mig.removeprefix("MIG-")  # engine.devices.cuda_uuid's spelling
        with open(tmp_path / "log", "w+") as log:
            check = gpu_smoke._match_processes(pynvml, parent, log, as_torch, wait_s=2)
            unknown = gpu_smoke._match_processes(pynvml, parent, log, "GPU-0000", wait_s=2)
    finally:
        pynvml.nvmlShutdown()
    assert check.status == PASS, check.detail
    assert f"NVML lists the trainer (pid {child}) on GPU 1" in check.detail
    assert unknown.status == FAIL and "no GPU or MIG device in NVML has" in unknown.detail


def test_the_batch_sweep_is_judged_by_throughput_as_a_gpu_shows_it():
    """Item 4: on the H200 the data share rose with the batch (the step is launch-bound,
    the copy grows); the sweep's lesson is that images/s rise."""
    recorded = json.loads((GPU_RUN / "experiment_batch-sweep.json").read_text())
    rows = recorded["device_results"][0]["rows"]
    assert rows[-1]["data_share"] > rows[0]["data_share"]  # what the old rule failed on
    check = gpu_smoke.experiment_verdict("batch-sweep", recorded)
    assert check.status == PASS, check.detail
    assert "at batch 2048; data share 3.3% and 13.2%" in check.detail


class RecordingRunner(gpu_smoke.Runner):
    """Records each command and child the suite starts, and runs none of them."""

    def __init__(self) -> None:
        super().__init__(sys.executable, timeout_s=60)
        self.argv: list[list[str]] = []

    def _json(self, argv: list[str], limit_as: int | None) -> tuple[int, Any, str]:
        self.argv.append(argv)
        return 1, None, "not run"

    def start_child(self, *args: str) -> subprocess.Popen[str]:
        self.argv.append(["--child", *args])
        return subprocess.Popen(
            [sys.executable, "-c", ""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )


def test_every_child_and_command_gets_the_device_the_suite_resolves():
    """Item 1: ``--device cuda`` reached ``torch.cuda.set_device(torch.device("cuda"))``,
    which refuses a CUDA device without an index (torch's own rule, checked here)."""
    from torch.cuda._utils import _get_device_index

    runner = RecordingRunner()
    suite = gpu_smoke.Suite(Device("cuda"), runner, None)
    for _names, step in suite.steps():
        list(step())  # the facts child fails here: what a GPU's driver says is SKIP
    devices = []
    for argv in runner.argv:
        if "--child" in argv:
            devices.append(argv[argv.index("--child") + 2])
        elif "--device" in argv and argv[argv.index("-m") + 2] != "scale":
            devices.append(argv[argv.index("--device") + 1])
    assert {argv[argv.index("--child") + 1] for argv in runner.argv if "--child" in argv} == {
        "facts",
        "hold",
    }
    assert set(devices) == {"cuda:0"}, devices
    for device in devices:
        assert _get_device_index(torch_device(device), optional=False) == 0
    with pytest.raises(ValueError, match="specified index"):
        _get_device_index(torch_device("cuda"), optional=False)


def torch_device(name: str) -> Any:
    import torch

    return torch.device(name)


@pytest.mark.timeout(120)
def test_the_suite_cut_at_its_deadline_leaves_both_reports(tmp_path):
    """Item 2: past ``--deadline`` every check not run is SKIP with the reason, and the
    reports, written after every check, list them all."""
    done = subprocess.run(
        [*SMOKE, "--device", "cpu", "--out", str(tmp_path), "--deadline", "6"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    report = _report(tmp_path)
    statuses = {c["name"]: (c["status"], c["detail"]) for c in report["checks"]}
    assert list(statuses) == CHECKS, done.stdout + done.stderr
    assert {status for status, _ in statuses.values()} <= {PASS, SKIP}
    skipped = [name for name, (status, _) in statuses.items() if status == SKIP]
    assert skipped[-1] == "scale" and len(skipped) >= 8
    assert "deadline" in statuses["scale"][1]
    assert (
        "| scale | SKIP | not run: the suite's deadline had passed |"
        in (tmp_path / "gpu_smoke.md").read_text()
    )


@pytest.mark.timeout(120)
def test_the_suite_stopped_by_sigterm_still_writes_every_check(tmp_path):
    """The device command's own limit ends the suite with SIGTERM: what ran is kept and the
    rest is SKIP, and no command it started is left running."""
    import psutil

    suite = subprocess.Popen(
        [*SMOKE, "--device", "cpu", "--out", str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert suite.stdout is not None
    first = suite.stdout.readline() + suite.stdout.readline()  # imports and arch have ended
    # the doctor's command, as soon as it runs
    started = wait_for(lambda: psutil.Process(suite.pid).children(recursive=True), first)
    suite.terminate()
    rest = suite.communicate(timeout=60)[0]
    assert suite.returncode == 1, first + rest
    statuses = {c["name"]: c for c in _report(tmp_path)["checks"]}
    assert list(statuses) == CHECKS
    assert statuses["imports"]["status"] == PASS
    assert statuses["doctor"] == {
        "name": "doctor",
        "status": SKIP,
        "detail": "not run: the suite was stopped",
        "figures": {},
    }
    assert "(stopped)" in rest
    assert not [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_the_snapshot_check_reads_the_gpu_torch_names():
    """The H200's own ``gputui snapshot --json`` against torch's facts from the same run."""
    recorded = json.loads((GPU_RUN.parent / "snapshot.json").read_text())
    smoke = json.loads((GPU_RUN.parent / "gpu_smoke.json").read_text())
    facts = smoke["checks"][0]["figures"]
    check = gpu_smoke.snapshot_verdict(recorded, 0, facts)
    assert check.status == PASS, check.detail
    assert check.detail.startswith("GPU 0 NVIDIA H200, 140.4 GiB")

    def verdict(change) -> str:
        changed = copy.deepcopy(recorded)
        change(changed["gpus"][0])
        return gpu_smoke.snapshot_verdict(changed, 0, facts).detail

    assert "no GPU GPU-3753913c" in verdict(lambda g: g.update(uuid="GPU-1"))
    assert "state lost: gone" in verdict(lambda g: g.update(state="lost", error="gone"))
    assert "NVML gave no temperature_c" in verdict(lambda g: g.update(temperature_c=None))
    half = facts["memory_bytes"] // 2
    assert "NVML's memory" in verdict(lambda g: g.update(memory_total_bytes=half))


@pytest.mark.parametrize(("when", "status"), [("before", FAIL), ("after", PASS)])
def test_the_nvml_cost_check_fails_a_call_that_costs_milliseconds_every_sample(when, status):
    """The H200's NVML calls, timed before and after its energy counter was read every 10 s
    (benchmarks/gpu_runs/2026-11-27-h200-third/nvml: each call from nvml_calls, a sample's
    median from sample_cost): 4.8 ms of CPU every sample fails, the same every 10 s passes."""
    folder = GPU_RUN.parent.parent / "2026-11-27-h200-third" / "nvml"
    calls = json.loads((folder / f"nvml_calls_{when}.json").read_text())["calls"]
    cost = json.loads((folder / f"sample_cost_{when}.json").read_text())["nvml"]
    result = {"gpus": cost["gpus"], "sample_cpu_ms_median": cost["cpu_ms_median"], "calls": calls}
    check = gpu_smoke.nvml_cost_verdict(result)
    assert check.status == status, check.detail
    energy = "every sample: nvmlDeviceGetTotalEnergyConsumption 4.76 ms a call"
    assert (energy in check.detail) == (status == FAIL)
    assert ("too slow a sample" in check.detail) == (status == FAIL)  # 3.95 ms against 1
    assert "costliest calls: " in check.detail


def test_the_nvml_cost_check_reads_what_nvml_calls_prints(fake_nvml_dir, fake_nvml_env):
    """``benchmarks/nvml_calls.py --json`` on the stand-in, through the real bindings, as the
    check runs it: an energy counter that spends 3 ms of CPU is read once, in the warm-up,
    not every sample, so the check passes; its figures are the tool's."""
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "FAKE_NVML_GPU_COUNT": "2",
        "FAKE_NVML_ENERGY_CPU_US": "3000",
    }
    argv = [*SMOKE[:1], "benchmarks/nvml_calls.py", "--samples", "5", "--interval", "0", "--json"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    result = json.loads(done.stdout)
    assert len(result["gpus"]) == 2 and result["samples"] == 5
    called = {c["function"]: c["per_sample"] for c in result["calls"]}
    assert called["nvmlDeviceGetUtilizationRates"] == 2  # each GPU, each sample
    assert "nvmlDeviceGetTotalEnergyConsumption" not in called
    check = gpu_smoke.nvml_cost_verdict(result)
    assert check.status == PASS, check.detail
    assert check.figures["gpus"] == 2
    assert check.detail.startswith("a sample ") and "for 2 GPUs" in check.detail


@pytest.mark.parametrize("run", ["2026-11-26-h200-first", "2026-11-26-h200-second"])
def test_the_h200_runs_bench_results_pass_as_judged_now(run):
    """Both GPU runs' bench results, judged with the H200's expectations: the epoch spread
    at ±25% (a launch-bound step shows the host's noise; the first run's classic epochs
    spread ±19.8%), while an epoch that does twice the work still fails."""
    raw = GPU_RUN.parent.parent / run / "raw"
    names = sorted(path.name for path in raw.glob("bench_*.json"))
    assert len(names) == 6
    for name in names:
        result = json.loads((raw / name).read_text())["runs"][0]
        precision = name.split("_")[2].removesuffix(".json")
        tolerance = gpu_smoke.H200.epoch_tolerance
        check = gpu_smoke.bench_verdict(result, CUDA_0, precision, tolerance, tf32=True)
        assert check.status == PASS, (name, check.detail)
        result["epochs"][-1]["seconds"] *= 2  # recompiled, or a restarted pipeline
        check = gpu_smoke.bench_verdict(result, CUDA_0, precision, tolerance, tf32=True)
        assert "steady epochs differ" in check.detail, name


def test_the_eager_run_says_what_the_graphs_gained_and_fails_a_graph_that_trained_otherwise(
    rehearsal,
):
    _, out = rehearsal
    eager = _raw(out, "bench_resident_fp32.json")["runs"][0]
    graphed = copy.deepcopy(eager)
    graphed.update(graphs=True, images_per_second=eager["images_per_second"] * 5.5)
    passed = gpu_smoke.Check("bench resident fp32 eager", PASS, "ok", {"accuracy": 0.4})
    check = gpu_smoke.graphs_verdict(passed, graphed, eager)
    assert check.status == PASS and check.figures["graphs_speedup"] == 5.5
    assert check.figures["loss_gap"] == 0 and check.figures["accuracy"] == 0.4
    assert "with CUDA graphs 5.50x this eager pace" in check.detail
    graphed["epochs"][-1]["loss"] = eager["epochs"][-1]["loss"] * 1.2
    diverged = gpu_smoke.graphs_verdict(passed, graphed, eager)
    assert diverged.status == FAIL and "is 20.0% from eager's" in diverged.detail
