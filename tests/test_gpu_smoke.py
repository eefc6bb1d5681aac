"""The GPU smoke suite's CPU rehearsal, run whole as CI runs it, and its judgements.

The suite runs once (about a minute on two cores) with Textual made unimportable, as on
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

REPO = Path(__file__).resolve().parent.parent
CHECKS = [
    "imports",
    "arch",
    "doctor",
    "bench resident fp32",
    "bench resident tf32",
    "bench resident bf16",
    "bench classic fp32",
    "bench resident fp32 compile",
    "timing",
    "nvml",
    "oom",
    "experiment batch-sweep",
    "experiment sync-stall",
    "experiment pipelines",
    "scale",
]


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
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_smoke.py", "--device", "cpu", "--out", str(root / "out")],
        cwd=REPO,
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
    assert statuses["arch"] == SKIP and statuses["nvml"] == SKIP  # NVIDIA's alone
    assert {s for n, s in statuses.items() if n not in ("arch", "nvml")} == {PASS}
    assert report["ok"] is True and report["counts"] == {PASS: 13, FAIL: 0, SKIP: 2}
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


def test_a_bench_run_fails_for_each_thing_wrong_with_it(rehearsal):
    _, out = rehearsal
    run = _raw(out, "bench_resident_fp32.json")["runs"][0]
    steady = [e for e in run["epochs"] if not e["warmup"]]
    for epoch in steady:  # a quiet machine's epochs: the recorded ones are a shared CPU's
        epoch["seconds"] = steady[0]["seconds"]
    assert gpu_smoke.bench_verdict(run, "cpu", "fp32", 0.10).status == PASS

    def verdict(change, tolerance: float | None = 0.10, precision: str = "fp32") -> str:
        changed = copy.deepcopy(run)
        change(changed)
        return gpu_smoke.bench_verdict(changed, "cpu", precision, tolerance).detail

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


def test_a_doctor_report_fails_when_pinned_is_not_faster_or_a_figure_is_absurd(rehearsal):
    _, out = rehearsal
    report = _raw(out, "doctor.json")
    assert gpu_smoke.doctor_verdict(report, 0, "cpu", gpu_smoke.CPU).status == PASS
    assert "exit 1" in gpu_smoke.doctor_verdict(report, 1, "cpu", gpu_smoke.CPU).detail

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
    assert gpu_smoke.doctor_verdict(gpu, 0, "cuda:0", gpu_smoke.H100).status == PASS
    cuda["d2h_pinned_bytes_per_s"] = 15 * GB
    assert "D2H pinned 15.0 GB/s not above pageable 20.0" in (
        gpu_smoke.doctor_verdict(gpu, 0, "cuda:0", gpu_smoke.H100).detail
    )
    cuda["d2h_pinned_bytes_per_s"] = 50 * GB
    cuda["matmul_bf16_tflops"] = 0.001  # a unit slip, or the math fell back to fp32
    detail = gpu_smoke.doctor_verdict(gpu, 0, "cuda:0", gpu_smoke.H100).detail
    assert detail.startswith("matmul_bf16_tflops 0.001 outside 150.0..1000.0")
    missing = gpu_smoke.doctor_verdict(gpu, 0, "cuda:1", gpu_smoke.H100)
    assert "no report for cuda:1" in missing.detail


def _lesson(name: str, device: dict[str, Any], shown: bool) -> None:
    """Set a recorded experiment's figures so that its lesson shows (or is reversed)."""
    rows = device["rows"]
    if name == "batch-sweep":
        rows[-1]["data_share"] = rows[0]["data_share"] * (0.5 if shown else 2)
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
    assert [row["world_size"] for row in rows] == [1, 2]
    assert gpu_smoke.scale_verdict(rows, "cpu").status == PASS
    assert gpu_smoke.scale_verdict(rows, "cuda").status == FAIL  # gloo is not NCCL
    broken = [rows[0], {**rows[1], "status": "error", "step_ms_p50": None}]
    assert gpu_smoke.scale_verdict(broken, "cpu").status == FAIL
    assert gpu_smoke.scale_verdict([], "cpu").status == FAIL


def test_timing_and_oom_judgements():
    assert gpu_smoke.timing_verdict(1000, 1080, "CUDA events", 0.10).status == PASS
    assert gpu_smoke.timing_verdict(1000, 1200, "CUDA events", 0.10).status == FAIL
    assert gpu_smoke.timing_verdict(1000, 2000, "clock", None).status == PASS
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
    assert gpu_smoke.expectations("cuda", "NVIDIA H100 80GB HBM3") is gpu_smoke.H100
    assert gpu_smoke.expectations("cuda", "NVIDIA H200") is gpu_smoke.H200
    assert gpu_smoke.expectations("cuda", "Tesla T4") is gpu_smoke.GENERIC_GPU
    assert gpu_smoke.expectations("cpu", None).tolerance is None


def test_a_bad_device_is_a_usage_error():
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_smoke.py", "--device", "gpu0"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "--device 'gpu0': use cuda, cuda:N, mps or cpu" in done.stderr
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
