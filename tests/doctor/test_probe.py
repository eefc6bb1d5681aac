"""The torch probe child, run for real on this CPU-only machine (once, shared), and its limits."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import psutil
import pytest

from gputui.device import CPU
from gputui.doctor.checks import Status
from gputui.doctor.render import report_as_dict
from gputui.doctor.run import nvml_facts, run_doctor
from gputui.doctor.torch_facts import TorchFacts, facts_from_events, run_probe
from gputui.jobs.config import ProbeConfig
from gputui.jobs.events import Error, TorchProbed, XpuProbed, parse_event
from gputui.jobs.process import ENGINE, child_env
from gputui.telemetry.nvml import calls_in_flight
from tests.doctor.doctor_facts import no_nvml
from tests.doctor.test_render import validate_schema
from tests.fakenvml import FakeNvml
from tests.helpers import running, wait_for

SMALL = ProbeConfig(budget_s=0.6, cpu_copy_mib=8, cpu_matmul_n=256)
"""Small sizes and a short budget: this is about the figures being real, not about speed."""


@pytest.fixture(scope="module")
def probed() -> TorchFacts:
    """One real run of the probe with small sizes, in this process (torch is imported once
    for the whole test session; ``gputui doctor`` runs the same code in a child, which
    tests/doctor/test_cli.py covers)."""
    from gputui.engine.probe import run_probe as probe

    lines: list[str] = []
    probe(SMALL, lambda event: lines.append(event.to_json()))  # through the wire format
    return facts_from_events(parse_event(line) for line in lines)


def test_the_probe_completes_and_reports_this_torch(probed: TorchFacts) -> None:
    torch = pytest.importorskip("torch")
    assert probed.failure is None
    assert probed.completed and not probed.timed_out
    install, cuda = probed.install, probed.cuda
    assert install is not None and cuda is not None
    assert install.imported is True
    assert install.version == torch.__version__
    assert install.cuda_version == torch.version.cuda
    assert cuda.available is torch.cuda.is_available()
    assert install.mps_built is torch.backends.mps.is_built()
    if torch.version.cuda is None:
        assert cuda.init_error == "AssertionError: Torch not compiled with CUDA enabled"
    assert probed.xpu is not None
    assert probed.xpu.available is torch.xpu.is_available()
    xpus = [device.device for device in probed.devices if device.device.kind == "xpu"]
    assert len(xpus) == (torch.xpu.device_count() if torch.xpu.is_available() else 0)


class _Xpu:
    """``torch.xpu`` of an XPU build with ``count`` GPUs (this machine's torch has none)."""

    def __init__(self, count: int, error: Exception | None = None) -> None:
        self.count, self.error = count, error

    def is_available(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.count > 0

    def device_count(self) -> int:
        return self.count


@pytest.mark.parametrize(
    ("torch", "expected"),
    [
        (SimpleNamespace(xpu=_Xpu(2)), XpuProbed(available=True, device_count=2)),
        (SimpleNamespace(xpu=_Xpu(0)), XpuProbed(available=False, device_count=0)),
        (SimpleNamespace(), XpuProbed(available=False)),
        (
            SimpleNamespace(xpu=_Xpu(1, RuntimeError("level zero"))),
            XpuProbed(available=False, error="RuntimeError: level zero"),
        ),
    ],
)
def test_the_xpu_stage_asks_torch_xpu_where_the_build_has_it(
    torch: SimpleNamespace, expected: XpuProbed
) -> None:
    from gputui.engine.probe import _xpu_stage

    said: list[object] = []
    count = _xpu_stage(torch, said.append)
    assert said[-1] == expected
    assert count == (expected.device_count or 0)


def test_the_cpu_s_own_bandwidth_and_matmul_figures_are_positive_and_finite(
    probed: TorchFacts,
) -> None:
    cpu = probed.devices[0]
    assert cpu.device == CPU
    assert cpu.memory_bytes == psutil.virtual_memory().total
    for figure in (cpu.copy_bytes_per_s, cpu.matmul_fp32_tflops, cpu.matmul_bf16_tflops):
        assert figure is not None and math.isfinite(figure) and figure > 0, cpu
    assert cpu.h2d_pageable_bytes_per_s is None  # the CPU is the host: no transfer to time
    assert (
        "host memcpy: copy_ of 8 MiB, counted as 16 MiB read + written "
        "(as STREAM and nvbandwidth count a copy)"
    ) in cpu.notes
    assert "matmul: 256x256; fp32 is IEEE fp32 (TF32 off), bf16 sums in fp32" in cpu.notes
    pinned = [note for note in cpu.notes if note.startswith("pinned host memory")]
    assert len(pinned) == 1  # said either way, with torch's reason when it is missing


def _raised(action: object) -> str:
    try:
        action()  # type: ignore[operator]
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    raise AssertionError("torch did not raise")


def test_pitfalls_carry_torch_s_real_error_text(probed: TorchFacts) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("the pitfalls run on a GPU here; this test expects the meta device")
    found = {pitfall.name: pitfall for pitfall in probed.pitfalls}
    assert found["cross-device"].shown_on == "meta"
    assert found["cross-device"].error == _raised(
        lambda: torch.ones(2) + torch.ones(2, device="meta")
    )
    assert found["numpy"].error == _raised(lambda: torch.ones(2, device="meta").numpy())
    assert found["device-string"].error == _raised(lambda: torch.device("cuda0"))
    assert found["device-string"].error == "RuntimeError: Invalid device string: 'cuda0'"

    report = run_doctor(torch=probed, nvml=no_nvml(), which=lambda _: None, environ={})
    texts = {check.name: check.message for check in report.checks}
    assert found["cross-device"].error in texts["pitfall: mixed devices"]
    assert found["device-string"].error in texts["pitfall: 'cuda0'"]


def test_quick_identifies_the_devices_and_measures_nothing() -> None:
    """Nor shows the pitfalls (issue 43): on the meta device, without a GPU, they load
    torch._dynamo, which was most of the quick probe's time after torch's import."""
    from gputui.engine.probe import run_probe as probe

    lines: list[str] = []
    probe(ProbeConfig(measure=False), lambda event: lines.append(event.to_json()))
    facts = facts_from_events(parse_event(line) for line in lines)
    (cpu,) = facts.devices
    assert cpu.copy_bytes_per_s is None and cpu.matmul_fp32_tflops is None
    assert cpu.notes[-1] == "not measured (quick)"
    assert facts.completed and facts.pitfalls == ()


def test_the_report_on_this_machine(probed: TorchFacts) -> None:
    report = run_doctor(torch=probed, nvml=no_nvml(), which=lambda _: None, environ={})
    validate_schema(report_as_dict(report))
    assert report.devices[0].device == CPU
    assert report.check("torch").status is Status.OK  # type: ignore[union-attr]
    assert not report.failed


def test_a_hung_probe_is_killed_with_its_children_and_reported() -> None:
    hang = (
        "import json, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, file=sys.stderr, flush=True)\n"
        "print(json.dumps({'type': 'probe_step', 'step': 'initialising CUDA'}), flush=True)\n"
        "time.sleep(60)\n"
    )
    facts = run_probe(timeout_s=1.0, python=[sys.executable, "-c", hang])
    assert facts.timed_out
    assert facts.failure == "the torch probe timed out after 1 s while initialising CUDA"
    grandchild = int(facts.stderr_tail.split()[0])
    wait_for(lambda: not running(grandchild), "the probe's own child outlived the timeout")


def test_doctor_reports_a_timeout_as_a_failed_check() -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    report = run_doctor(
        probe_python=sleeper, timeout_s=0.5, nvml=no_nvml(), which=lambda _: None, environ={}
    )
    probe = report.check("torch probe")
    assert probe is not None and probe.status is Status.FAIL
    assert probe.message.startswith("The torch probe timed out after 0.5 s")
    assert report.failed
    # torch never imported, so nothing is known about its build (issue 18)
    assert not [check.name for check in report.checks if "CPU-only" in check.message]


def test_a_gpu_that_hangs_makes_nvml_unavailable_to_the_doctor(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    """The doctor waits for NVML as the snapshot does; a GPU that has not answered by then
    fails the driver check rather than passing it with a GPU missing."""
    fake_nvml_env.setenv("FAKE_NVML_HANG", "1:temperature=600")
    reading = nvml_facts(timeout_s=1.0)
    assert (reading.status.available, reading.gpus) == (False, ())
    assert (reading.status.error or "").startswith("NVML did not answer within 1 s;")
    fake_nvml.release_hangs()  # the sample was told to stop: it ends at its next call
    wait_for(lambda: calls_in_flight() == (), f"still in NVML: {calls_in_flight()}")


def test_torch_not_installed_is_reported_by_the_real_probe() -> None:
    # -S: no site-packages, so no torch; gputui still comes from the child's PYTHONPATH.
    facts = run_probe(python=[sys.executable, "-S"], timeout_s=60)
    assert facts.completed, facts.stderr_tail
    install = facts.install
    assert install is not None and install.imported is False and install.missing is True
    assert install.import_error == "ModuleNotFoundError: No module named 'torch'"


def test_a_crashing_probe_says_how() -> None:
    crash = [
        sys.executable,
        "-c",
        "import sys; print('Segmentation fault', file=sys.stderr); sys.exit(139)",
    ]
    facts = run_probe(python=crash)
    assert facts.failure == (
        "the torch probe exited with code 139 before it finished: Segmentation fault"
    )


def test_the_probe_refuses_a_bad_config_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", ENGINE, "probe", '{"budget": 1}'],
        capture_output=True,
        text=True,
        env=child_env(os.environ),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    (line,) = done.stdout.splitlines()
    error = parse_event(line)
    assert isinstance(error, Error) and error.kind == "config"
    assert error.message.startswith(
        "probe config: unknown key 'budget' (did you mean 'budget_s'?); known: budget_s, "
    )


def test_parse_skips_noise_and_merges_device_lines() -> None:
    lines = [
        "warning: something printed on stdout",
        "{not json",
        "[1, 2]",
        json.dumps({"no": "type"}),
        json.dumps({"type": "probe_torch", "imported": True, "version": "2.5.1"}),
        json.dumps({"type": "probe_device", "device": "cpu", "name": "CPU", "notes": ["a"]}),
        json.dumps(
            {
                "type": "probe_device",
                "device": "cpu",
                "figures": {"copy_bytes_per_s": 5e9, "matmul_fp32_tflops": -1},
                "notes": ["b"],
            }
        ),
        json.dumps({"type": "future-event", "x": 1}),
        json.dumps({"type": "finished", "epochs_completed": 0, "total_seconds": 1.5}),
    ]
    facts = facts_from_events(parse_event(line) for line in lines)
    assert facts.completed and facts.install == TorchProbed(imported=True, version="2.5.1")
    assert facts.elapsed_s == 1.5
    (cpu,) = facts.devices
    assert cpu.copy_bytes_per_s == 5e9
    assert cpu.matmul_fp32_tflops is None  # not positive: never shown as a figure
    assert cpu.notes == ("a", "b")


# ------------------------------------------------------------- bf16 on a CPU


def _note(
    fp32: float | None,
    bf16: float | None,
    *,
    avx512_bf16: bool = False,
    amx_bf16: bool = False,
    capability: str = "AVX2",
    onednn_on: bool = True,
    onednn_bf16: bool | None = True,
    x86: bool = True,
) -> str | None:
    from gputui.engine.devices import CpuBf16
    from gputui.engine.measure import bf16_matmul_note

    return bf16_matmul_note(
        fp32,
        bf16,
        CpuBf16(avx512_bf16, amx_bf16, capability),
        onednn_on=onednn_on,
        onednn_bf16=onednn_bf16,
        x86=x86,
    )


def test_a_cpu_without_onednn_bf16_is_told_why_its_bf16_matmul_crawls() -> None:
    """The figures of the CPU the issue saw: 0.000968 TFLOP/s bf16, tens of GFLOP/s fp32."""
    note = _note(0.0557, 0.000968, onednn_bf16=False)
    assert note == (
        "bf16 matmul is 58x slower than fp32 here: torch's oneDNN has no bf16 matmul for "
        "this CPU (it needs AVX-512; torch CPU kernels: AVX2), so torch falls back to its "
        "generic reference loop"
    )


def test_the_bf16_note_follows_the_ratio_and_the_flags() -> None:
    assert _note(0.0557, 0.216, avx512_bf16=True) is None  # this machine: bf16 is faster
    assert _note(0.2, 0.11) is None  # under SLOW_BF16_RATIO: nothing to explain
    assert _note(0.2, None) is None and _note(None, 0.1) is None
    assert _note(0.2, 0.05, capability="AVX512") == (
        "bf16 matmul is 4x slower than fp32 here: this CPU has no AVX512-BF16 or AMX, so "
        "oneDNN emulates bf16 (converting to fp32 and back in software)"
    )
    assert _note(0.2, 0.05, avx512_bf16=True, amx_bf16=True, capability="AVX512") == (
        "bf16 matmul is 4x slower than fp32 here, although this CPU has AVX512-BF16 and AMX "
        "(torch CPU kernels: AVX512)"
    )
    assert "oneDNN is off or missing" in str(_note(0.2, 0.001, onednn_on=False))
    assert "no fast bf16 matmul for this CPU" in str(_note(0.2, 0.001, x86=False))


@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")
def test_the_probe_explains_a_slow_bf16_matmul_with_torch_s_own_answers() -> None:
    """oneDNN switched off sends bf16 matmuls down the reference loop on any CPU: the
    probe's note then names that, from torch's flags, not from a guess."""
    torch = pytest.importorskip("torch")
    from gputui.engine.measure import _cpu_bf16_note

    figures = {"matmul_fp32_tflops": 0.185, "matmul_bf16_tflops": 0.00116}
    with torch.backends.mkldnn.flags(enabled=False):
        note = _cpu_bf16_note(figures)
    assert note is not None and note.startswith("bf16 matmul is 159x slower than fp32 here")
    assert "oneDNN is off or missing" in note
    assert _cpu_bf16_note({"matmul_fp32_tflops": 0.185, "matmul_bf16_tflops": 0.8}) is None
