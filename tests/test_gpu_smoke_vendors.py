"""The GPU smoke suite on each vendor's build: which checks run, which SKIP and why, which
backend and math it expects, and its AMD and Intel checks against the monitor's own readers
on fake sysfs and procfs trees. No torch, no GPU: the facts are what each build's child
reports, and the runner answers as gputui's commands would."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from benchmarks import gpu_smoke
from benchmarks.gpu_smoke import FAIL, PASS, SKIP
from gputui.device import Device
from gputui.telemetry.drm import DrmSampler
from gputui.telemetry.snapshot import gpu_as_dict
from tests.fakeprocfs import FakeProcfs, amdgpu_6_11
from tests.telemetry.sysfs_trees import (
    MI300X_BUS_IDS,
    MI300X_VRAM,
    flex_170,
    intel_box,
    mi300x_box,
    names,
)

CUDA_FACTS: dict[str, Any] = {
    "torch": "2.11.0+cu130",
    "build": "cuda",
    "cuda": "13.0",
    "cudnn": 91300,
    "name": "NVIDIA H200",
    "capability": "9.0",
    "arch_list": ["sm_80", "sm_90", "sm_100"],
    "uuid": "GPU-3753913c",
}
ROCM_FACTS: dict[str, Any] = {  # what child_facts gives on a ROCm build, without the variable
    "torch": "2.9.1+rocm6.4",
    "build": "rocm",
    "cuda": None,
    "hip": "6.4.43484",
    "cudnn": 3004000,
    "name": "AMD Instinct MI300X",
    "capability": "9.4",
    "gcn_arch": "gfx942:sramecc+:xnack-",
    "arch_list": ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100"],
    "bus_id": MI300X_BUS_IDS[1],
    "memory_bytes": MI300X_VRAM,
    "tf32_matmul": False,
    "hipblaslt_allow_tf32": None,
}
FLEX_BUS_ID = flex_170().bus_id
XPU_FACTS: dict[str, Any] = {
    "torch": "2.9.0+xpu",
    "build": "xpu",
    "cuda": None,
    "xpu": "20250101",
    "name": "Intel(R) Data Center GPU Flex 170",
    "bus_id": FLEX_BUS_ID,
    "memory_bytes": None,
    "driver": "1.6.33578+15",
    "bf16": True,
    "xccl": True,
}
CPU_FACTS: dict[str, Any] = {"torch": "2.13.0+cpu", "build": "cpu", "name": "a CPU"}


@pytest.mark.parametrize(
    ("kind", "facts", "vendor", "tf32", "backend", "skips"),
    [
        ("cuda", CUDA_FACTS, "nvidia", True, "nccl", {}),
        (
            "cuda",
            ROCM_FACTS,
            "amd",
            False,
            "nccl",  # RCCL, under NCCL's name
            {
                "bench resident tf32 compile": "HIPBLASLT_ALLOW_TF32=None",
                "bench resident fp32 eager": "no CUDA graph on ROCm",
            },
        ),
        (
            "cuda",
            {**ROCM_FACTS, "tf32_matmul": True, "hipblaslt_allow_tf32": "1"},
            "amd",
            True,
            "nccl",
            {"bench resident fp32 eager": "no CUDA graph on ROCm"},
        ),
        (
            "cuda",
            {**ROCM_FACTS, "gcn_arch": None},  # an older torch's properties
            "amd",
            False,
            "nccl",
            {
                "arch": "no gcnArchName",
                "bench resident tf32 compile": "not in effect",
                "bench resident fp32 eager": "no CUDA graph on ROCm",
            },
        ),
        (
            "xpu",
            XPU_FACTS,
            "intel",
            False,
            "xccl",
            {"arch": "NVIDIA's", "bench resident fp32 eager": "CUDA graphs are CUDA's"},
        ),
        (
            "xpu",
            {**XPU_FACTS, "tf32": True},
            "intel",
            True,
            "xccl",
            {"arch": "AOT", "bench resident fp32 eager": "CUDA graphs are CUDA's"},
        ),
        (
            "xpu",
            {**XPU_FACTS, "tf32": False},
            "intel",
            False,
            "xccl",
            {
                "arch": "AOT targets",
                "bench resident tf32": "is_tf32_supported",
                "bench resident fp32 eager": "CUDA graphs are CUDA's",
            },
        ),
        (
            "xpu",
            {**XPU_FACTS, "bf16": False, "xccl": False},
            "intel",
            False,
            None,
            {
                "arch": "AOT targets",
                "bench resident bf16": "is_bf16_supported",
                "scale": "this torch has no XCCL",
                "bench resident fp32 eager": "CUDA graphs are CUDA's",
            },
        ),
        (
            "cpu",
            CPU_FACTS,
            None,
            False,
            "gloo",
            {
                **dict.fromkeys(gpu_smoke.FROM_NVIDIA, "cpu"),
                "bench resident tf32": "on the CPU it is the fp32 bench",
                "bench resident fp32 eager": "CUDA graphs are CUDA's",
            },
        ),
        (  # the facts child failed: nothing read from a GPU's driver is guessed
            "cuda",
            {},
            None,
            False,
            "nccl",
            {
                **dict.fromkeys(gpu_smoke.FROM_NVIDIA, "build is unknown"),
                "bench resident tf32 compile": "",
            },
        ),
    ],
)
def test_the_platform_is_read_from_the_build_in_the_facts(
    kind: str,
    facts: Mapping[str, Any],
    vendor: str | None,
    tf32: bool,
    backend: str | None,
    skips: Mapping[str, str],
) -> None:
    platform = gpu_smoke.platform_for(kind, facts)
    assert (platform.vendor, platform.tf32, platform.backend) == (vendor, tf32, backend)
    assert platform.skips.keys() == skips.keys()
    for name, why in skips.items():
        assert why in platform.skips[name], (name, platform.skips[name])


def test_a_tf32_run_must_say_tf32_only_where_torch_takes_it() -> None:
    assert gpu_smoke.expected_math("tf32", tf32=True) == "TF32"
    assert gpu_smoke.expected_math("tf32", tf32=False) == "IEEE fp32"
    assert gpu_smoke.expected_math("bf16", tf32=False) == "bf16"


def test_the_facts_line_names_the_build() -> None:
    assert gpu_smoke.facts_line(CUDA_FACTS).startswith("torch 2.11.0+cu130, CUDA 13.0, cuDNN 91300")
    rocm = gpu_smoke.facts_line(ROCM_FACTS)
    assert "ROCm build (HIP 6.4.43484, MIOpen 3004000)" in rocm and "CUDA" not in rocm
    assert "nvidia-ml-py" not in rocm
    xpu = gpu_smoke.facts_line(XPU_FACTS)
    assert "XPU build (20250101, Level Zero driver 1.6.33578+15)" in xpu


@pytest.mark.parametrize(
    ("kind", "name", "vendor", "expect"),
    [
        ("cuda", "AMD Instinct MI300X", "amd", "MI300X"),
        ("cuda", "AMD Instinct MI250X", "amd", "MI250"),
        ("cuda", "AMD Radeon RX 7900 XTX", "amd", "GENERIC_AMD"),
        ("xpu", "Intel(R) Data Center GPU Max 1550", "intel", "INTEL_MAX"),
        ("xpu", "Intel(R) Arc(TM) B580 Graphics", "intel", "INTEL_ARC"),
        ("xpu", "Intel(R) Data Center GPU Flex 170", "intel", "GENERIC_INTEL"),
        ("cuda", "NVIDIA H100 80GB HBM3", "nvidia", "H100"),
    ],
)
def test_each_vendor_s_gpu_gets_its_own_bands(
    kind: str, name: str, vendor: str, expect: str
) -> None:
    found = gpu_smoke.expectations(kind, name, vendor)
    assert found is getattr(gpu_smoke, expect)
    for low, high in found.ranges.values():  # bands, never a single figure
        assert low is not None and high is not None and high >= 2 * low


def _drm_report(sysfs: Path, procfs: FakeProcfs, ids: Path) -> dict[str, Any]:
    """``gputui snapshot --json``'s ``gpus`` as the real AMD and Intel readers give them."""
    sampler = DrmSampler(sysfs, procfs=procfs.root, names=names(ids))
    gpus = [gpu_as_dict(gpu) for gpu in sampler.sample().gpus]
    return json.loads(json.dumps({"gpus": gpus, "nvml": {"available": False}}))


def test_the_snapshot_check_finds_an_amd_gpu_by_torch_s_bus_id(tmp_path: Path) -> None:
    report = _drm_report(mi300x_box(tmp_path / "sys"), FakeProcfs(tmp_path), tmp_path / "ids")
    check = gpu_smoke.drm_snapshot_verdict(report, 0, ROCM_FACTS, "amd")
    assert check.status == PASS, check.detail
    assert check.detail.startswith(f"GPU 1 AMD Instinct MI300X OAM at {MI300X_BUS_IDS[1]}")
    assert "°C junction" in check.detail  # an MI300X has no edge sensor
    nvml_form = {**ROCM_FACTS, "bus_id": "00000000:22:00.0"}
    assert gpu_smoke.drm_snapshot_verdict(report, 0, nvml_form, "amd").status == PASS
    elsewhere = gpu_smoke.drm_snapshot_verdict(
        report, 0, {**ROCM_FACTS, "bus_id": "0000:99:00.0"}, "amd"
    )
    assert (
        elsewhere.status == FAIL and "no amd GPU at torch's bus id 0000:99:00.0" in elsewhere.detail
    )
    half = gpu_smoke.drm_snapshot_verdict(
        report, 0, {**ROCM_FACTS, "memory_bytes": MI300X_VRAM * 2}, "amd"
    )
    assert "the monitor's memory" in half.detail
    # What NVML's check would make of it: no GPU, since the AMD GPU has no NVIDIA UUID.
    assert gpu_smoke.snapshot_verdict(report, 0, ROCM_FACTS).status == FAIL


def test_the_snapshot_check_reads_an_intel_gpu_through_sysfs(tmp_path: Path) -> None:
    report = _drm_report(intel_box(tmp_path / "sys"), FakeProcfs(tmp_path), tmp_path / "ids")
    check = gpu_smoke.drm_snapshot_verdict(report, 0, XPU_FACTS, "intel")
    assert check.status == PASS, check.detail
    assert f"at {FLEX_BUS_ID}" in check.detail
    # Level Zero may show a stack of a card as a device: its memory is not the card's
    arc = {**XPU_FACTS, "bus_id": "0000:03:00.0", "memory_bytes": 6 << 30}
    check = gpu_smoke.drm_snapshot_verdict(report, 0, arc, "intel")
    assert check.status == PASS and "Intel Arc B580" in check.detail and "12.0 GiB" in check.detail
    assert gpu_smoke.drm_snapshot_verdict(report, 0, XPU_FACTS, "amd").status == FAIL


PARENT, TRAINER = 4242, 4243


@pytest.mark.parametrize(
    ("holders", "verdict"),
    [
        # ROCm opens every GPU it sees: the trainer on GPU 0 too is reported, not judged
        ({TRAINER: (0, 1)}, "lists the trainer (pid 4243) on GPU 1"),
        ({TRAINER: (1,), PARENT: (1,)}, "the gputui parent (pid 4242) holds a GPU"),
        ({TRAINER: (0,)}, "the monitor lists [] on GPU 1"),
    ],
)
def test_the_process_check_reads_the_trainer_from_drm_fdinfo(
    tmp_path: Path, holders: Mapping[int, tuple[int, ...]], verdict: str
) -> None:
    procfs = FakeProcfs(tmp_path)
    for pid, gpus in holders.items():
        procfs.process(pid, ("python3", "-m", "gputui.engine"))
        for n, gpu in enumerate(gpus):
            fdinfo = amdgpu_6_11(pid * 10 + n, MI300X_BUS_IDS[gpu], vram_kib=1 << 20)
            procfs.drm_fd(pid, 5 + n, f"renderD{128 + gpu}", fdinfo)
    report = _drm_report(mi300x_box(tmp_path / "sys"), procfs, tmp_path / "ids")
    check = gpu_smoke.drm_process_verdict(
        report, "amd", MI300X_BUS_IDS[1], PARENT, {PARENT, TRAINER}
    )
    assert verdict in check.detail
    assert check.status == (PASS if "lists the trainer" in verdict else FAIL)
    if check.status == PASS:
        assert check.figures["run_elsewhere"] == {MI300X_BUS_IDS[0]: [TRAINER]}


class ScriptedRunner(gpu_smoke.Runner):
    """Answers the facts child and ``gputui snapshot`` as a GPU machine would, records every
    command the suite starts, and runs none."""

    def __init__(self, facts: Mapping[str, Any], snapshot: Mapping[str, Any] | None = None):
        super().__init__(sys.executable, timeout_s=60)
        self.facts, self.snapshot = facts, snapshot
        self.argv: list[list[str]] = []

    def _json(self, argv: list[str], limit_as: int | None) -> tuple[int, Any, str]:
        self.argv.append(argv)
        if "facts" in argv:
            return 0, dict(self.facts), ""
        if "snapshot" in argv:
            return 0, self.snapshot, ""
        if "scale" in argv:
            return 0, {"runs": []}, ""
        return 1, None, "not run"

    def commands(self) -> list[str]:
        return [argv[argv.index("-m") + 2] for argv in self.argv if "-m" in argv]


def test_a_rocm_suite_reads_the_amd_gpu_and_skips_what_rocm_lacks(tmp_path: Path) -> None:
    report = _drm_report(mi300x_box(tmp_path / "sys"), FakeProcfs(tmp_path), tmp_path / "ids")
    runner = ScriptedRunner(ROCM_FACTS, report)
    suite = gpu_smoke.Suite(Device("cuda"), runner, None)
    checks = {name: step for names, step in suite.steps() for name in names}
    imports, arch = list(checks["imports"]())
    assert imports.status == PASS and "ROCm build (HIP 6.4.43484" in imports.detail
    assert (arch.status, arch.detail) == (
        PASS,
        f"compiled code for gfx942 ({', '.join(ROCM_FACTS['arch_list'])})",
    )
    assert suite.expect is gpu_smoke.MI300X
    [snapshot] = checks["snapshot"]()
    assert snapshot.status == PASS, snapshot.detail
    [compiled] = checks["bench resident tf32 compile"]()
    assert compiled.status == SKIP and "HIPBLASLT_ALLOW_TF32" in compiled.detail
    [scale] = checks["scale"]()
    assert scale.detail == "no world size ran"  # run, and judged against nccl (RCCL)
    assert runner.commands() == ["snapshot", "scale"]
    assert suite.platform.backend == "nccl"


def test_an_xpu_suite_without_xccl_or_bf16_skips_them_without_running(tmp_path: Path) -> None:
    runner = ScriptedRunner({**XPU_FACTS, "bf16": False, "xccl": False})
    suite = gpu_smoke.Suite(Device("xpu"), runner, None)
    checks = {name: step for names, step in suite.steps() for name in names}
    list(checks["imports"]())
    assert suite.expect.label == gpu_smoke.GENERIC_INTEL.label
    assert "matmul_bf16_tflops" not in suite.expect.ranges  # the doctor's bf16 is not judged
    [bf16] = checks["bench resident bf16"]()
    [scale] = checks["scale"]()
    assert (bf16.status, scale.status) == (SKIP, SKIP)
    assert "XCCL" in scale.detail
    assert runner.commands() == []


def test_scale_is_judged_against_the_backend_gputui_picks() -> None:
    rows = [
        {
            "world_size": 1,
            "status": "ok",
            "backend": "xccl",
            "step_ms_p50": 3.0,
            "images_per_second": 1e4,
            "speedup": 1.0,
            "efficiency": 1.0,
            "allreduce_share": 0.0,
        }
    ]
    assert gpu_smoke.scale_verdict(rows, "xccl").status == PASS
    assert gpu_smoke.scale_verdict(rows, "gloo").status == FAIL


class RunOnAmd(gpu_smoke.Runner):
    """A long ``gputui bench`` stood in for by a real process with one real child (its
    "trainer"), whose snapshot is the real readers' on an MI300X box where that child holds
    ``gpu`` once it has started."""

    def __init__(self, root: Path, gpu: int | None) -> None:
        super().__init__(sys.executable, timeout_s=60)
        self.root, self.gpu = root, gpu
        self.sysfs = mi300x_box(root / "sys")
        self.trainer: int | None = None

    def start_gputui(self, *args: str, stderr: Any) -> subprocess.Popen[str]:
        script = (  # stopped as Ctrl-C stops gputui bench: the trainer with it
            "import subprocess, sys\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
            " stdout=subprocess.DEVNULL)\n"
            "print(child.pid, flush=True)\n"
            "try:\n    child.wait()\nexcept KeyboardInterrupt:\n    child.kill()\n"
        )
        bench = self.spawn([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=stderr)
        assert bench.stdout is not None
        self.trainer = int(bench.stdout.readline())
        return bench

    def _json(self, argv: list[str], limit_as: int | None) -> tuple[int, Any, str]:
        assert argv[-2:] == ["snapshot", "--json"] and self.trainer is not None
        procfs = FakeProcfs(self.root / f"proc-{len(list(self.root.iterdir()))}")  # fresh
        if self.gpu is not None:
            procfs.process(self.trainer)
            fdinfo = amdgpu_6_11(7, MI300X_BUS_IDS[self.gpu], vram_kib=1 << 20)
            procfs.drm_fd(self.trainer, 5, "renderD129", fdinfo)
        return 0, _drm_report(self.sysfs, procfs, self.root / "ids"), ""


@pytest.mark.parametrize(("gpu", "status"), [(1, PASS), (0, FAIL)])
def test_the_drm_process_check_watches_a_real_run_until_its_trainer_shows(
    tmp_path: Path, gpu: int, status: str
) -> None:
    """The trainer on GPU 1, as torch's bus id says: PASS at once. On GPU 0 only: FAIL once
    the wait is over, and the run is stopped either way."""
    (tmp_path / "box").mkdir()
    runner = RunOnAmd(tmp_path / "box", gpu)
    check = gpu_smoke.drm_process_check(runner, ["bench"], "amd", MI300X_BUS_IDS[1], wait_s=1)
    assert check.status == status, check.detail
    if status == FAIL:
        assert "the monitor lists [] on GPU 1" in check.detail
    assert runner.trainer in check.figures["run_pids"]
    assert not runner.running  # the run was stopped and waited for
