"""Apple MPS: ioreg parsing on captured output, the sampler on every platform, the torch probe."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from gputui.telemetry.apple import (
    IoregAccelerator,
    MpsSampler,
    TorchMpsProbe,
    TorchMpsStatus,
    parse_ioreg,
    platform_name,
    run_ioreg,
    torch_mps_sentence,
)

DATA = Path(__file__).resolve().parent.parent / "data"


def _capture(name: str) -> str:
    return (DATA / name).read_text()


class _Unstarted(TorchMpsProbe):
    """A probe that never starts: the answer stays unknown, as in the first second of a run."""

    def start(self) -> None:
        pass


# --- parse_ioreg ------------------------------------------------------------------------


def test_parses_an_m2_pro_capture() -> None:
    assert parse_ioreg(_capture("ioreg_m2_pro.txt")) == (
        IoregAccelerator(
            io_class="AGXAcceleratorG14X",
            model="Apple M2 Pro",
            core_count=19,
            utilization_percent=23.0,
            memory_in_use_bytes=1148452864,
        ),
    )


def test_parses_an_idle_m1_capture() -> None:
    (m1,) = parse_ioreg(_capture("ioreg_m1.txt"))
    assert m1.model == "Apple M1"
    assert m1.core_count == 8
    assert m1.utilization_percent == 0.0  # idle is 0, not unknown
    assert m1.memory_in_use_bytes == 216268800


def test_a_mac_with_two_gpus_and_missing_keys_gives_none_for_what_is_missing() -> None:
    intel, amd = parse_ioreg(_capture("ioreg_intel_amd.txt"))
    assert intel == IoregAccelerator("IntelAccelerator", None, None, None, None)
    assert amd.io_class == "AMDRadeonX4000_AMDBaffinGraphicsAccelerator"
    assert amd.model is None
    assert amd.utilization_percent == 7.0
    assert amd.memory_in_use_bytes is None


def test_a_clipped_statistics_line_is_unknown_not_wrong() -> None:
    (m1_pro,) = parse_ioreg(_capture("ioreg_clipped.txt"))
    assert m1_pro.model == "Apple M1 Pro"
    assert m1_pro.core_count == 16
    assert m1_pro.utilization_percent is None
    assert m1_pro.memory_in_use_bytes is None


@pytest.mark.parametrize("text", ["", "\n\n", "ioreg: command not found\n", "{ garbage = }"])
def test_output_without_accelerators_parses_to_nothing(text: str) -> None:
    assert parse_ioreg(text) == ()


def test_model_stored_as_data_is_read_as_text() -> None:
    text = (
        "+-o AMDRadeonX6000_AMDNavi14GraphicsAccelerator  <class X, id 0x1, registered>\n"
        "    {\n"
        '      "model" = <"AMD Radeon Pro 5500M">\n'
        '      "PerformanceStatistics" = {"Device Utilization %"=64,"In use system memory"=0}\n'
        "    }\n"
    )
    (amd,) = parse_ioreg(text)
    assert amd.io_class == "X"
    assert amd.model == "AMD Radeon Pro 5500M"
    assert (amd.utilization_percent, amd.memory_in_use_bytes) == (64.0, 0)


def test_statistics_with_nested_values_still_parse() -> None:
    text = (
        "+-o AGXAcceleratorG15X  <class AGXAcceleratorG15X, id 0x2, registered>\n"
        "    {\n"
        '      "PerformanceStatistics" = {"Engines"=(1,2,(3)),"Flags"={"On"=Yes,"Off"=No},'
        '"Tag"=<0a0b>,"Device Utilization %"=99,"Ratio"=0.5,"In use system memory"=1024}\n'
        "    }\n"
    )
    (gpu,) = parse_ioreg(text)
    assert (gpu.utilization_percent, gpu.memory_in_use_bytes) == (99.0, 1024)


def test_parses_entries_drawn_inside_a_tree() -> None:
    text = _capture("ioreg_m1.txt").replace("\n    ", "\n  | ")
    (m1,) = parse_ioreg(text)
    assert (m1.model, m1.utilization_percent) == ("Apple M1", 0.0)


# --- MpsSampler -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "name"), [("linux", "Linux"), ("win32", "Windows"), ("freebsd14", "freebsd14")]
)
def test_elsewhere_the_reading_says_mps_is_apples(platform: str, name: str) -> None:
    reading = MpsSampler(platform=platform, clock=lambda: 42.0).sample()
    assert reading.supported_platform is False
    assert reading.message == f"MPS is Apple's GPU backend for Macs; this machine runs {name}."
    assert reading.utilization_percent is None
    assert reading.torch_mps_built is None
    assert reading.taken_at == 42.0


def test_platform_names() -> None:
    assert platform_name("darwin") == "macOS"
    assert platform_name("linux") == "Linux"


def test_on_macos_reads_the_gpu_and_says_nothing_while_torch_is_not_known() -> None:
    sampler = MpsSampler(
        platform="darwin", ioreg=lambda: _capture("ioreg_m2_pro.txt"), torch_probe=_Unstarted()
    )
    reading = sampler.sample()
    assert reading.supported_platform is True
    assert reading.gpu_name == "Apple M2 Pro (19-core GPU)"
    assert reading.utilization_percent == 23.0
    assert reading.memory_in_use_bytes == 1148452864
    assert reading.torch_mps_built is None
    assert reading.torch_mps_available is None
    assert reading.message is None


def test_each_sample_runs_ioreg_again() -> None:
    captures = iter([_capture("ioreg_m1.txt"), _capture("ioreg_m2_pro.txt")])
    sampler = MpsSampler(platform="darwin", ioreg=lambda: next(captures), torch_probe=_Unstarted())
    assert sampler.sample().utilization_percent == 0.0
    assert sampler.sample().utilization_percent == 23.0


def test_the_gpu_that_reports_a_load_is_the_one_shown() -> None:
    sampler = MpsSampler(
        platform="darwin", ioreg=lambda: _capture("ioreg_intel_amd.txt"), torch_probe=_Unstarted()
    )
    reading = sampler.sample()
    assert reading.utilization_percent == 7.0
    assert reading.gpu_name is None
    assert reading.message is None


def test_a_clipped_capture_keeps_the_name_and_says_the_load_is_missing() -> None:
    sampler = MpsSampler(
        platform="darwin", ioreg=lambda: _capture("ioreg_clipped.txt"), torch_probe=_Unstarted()
    )
    reading = sampler.sample()
    assert reading.gpu_name == "Apple M1 Pro (16-core GPU)"
    assert reading.utilization_percent is None
    assert reading.message is not None
    assert "Device Utilization %" in reading.message


def test_no_accelerator_is_said_in_a_sentence() -> None:
    reading = MpsSampler(platform="darwin", ioreg=str, torch_probe=_Unstarted()).sample()
    assert reading.supported_platform is True
    assert reading.message == "The IORegistry lists no GPU (no IOAccelerator)."


def test_a_missing_ioreg_is_a_sentence_not_a_crash() -> None:
    # There is no ioreg on Linux: the real runner fails as it would on a broken Mac.
    with pytest.raises((OSError, subprocess.SubprocessError)):
        run_ioreg()
    reading = MpsSampler(platform="darwin", ioreg=run_ioreg, torch_probe=_Unstarted()).sample()
    assert reading.utilization_percent is None
    assert reading.message is not None
    assert reading.message.startswith("Could not read the GPU's load from the IORegistry")
    assert "\n" not in reading.message


# --- the torch probe --------------------------------------------------------------------


def test_macos_sampler_reports_what_the_real_torch_says_in_a_child_process() -> None:
    probe = TorchMpsProbe()
    sampler = MpsSampler(
        platform="darwin", ioreg=lambda: _capture("ioreg_m1.txt"), torch_probe=probe
    )  # starts the probe in the background
    sampler.wait_for_torch(120)
    status = probe.result
    assert status is not None
    assert status.error is None
    assert status.torch_version == importlib.metadata.version("torch")
    assert isinstance(status.built, bool)
    assert status.available is False  # this is not a Mac, whatever the build

    reading = sampler.sample()
    assert reading.torch_mps_built is status.built
    assert reading.torch_mps_available is False
    assert reading.utilization_percent == 0.0  # from ioreg, alongside
    assert reading.message == torch_mps_sentence(status)
    assert reading.message is not None  # not available: it says why


def test_probe_without_torch_says_how_to_install_it() -> None:
    # `-S` leaves site-packages off sys.path: this interpreter really cannot import torch.
    status = TorchMpsProbe([sys.executable, "-S"]).ask()
    assert status.built is None
    assert status.available is None
    assert status.error is not None
    assert "PyTorch is not installed" in status.error
    assert "pip install torch" in status.error


def test_probe_gives_up_after_its_timeout() -> None:
    slow = [sys.executable, "-c", "import time; time.sleep(30)"]
    status = TorchMpsProbe(slow, timeout_s=0.5).ask()
    assert status.built is None
    assert status.error is not None
    assert "0.5 s" in status.error


def test_probe_reports_a_child_that_says_nothing() -> None:
    silent = [sys.executable, "-c", "import sys; sys.exit('boom')"]
    status = TorchMpsProbe(silent).ask()
    assert status.error is not None
    assert "exit code 1: boom" in status.error


def test_probe_reports_an_interpreter_that_does_not_exist(tmp_path: Path) -> None:
    status = TorchMpsProbe([str(tmp_path / "no-python")]).ask()
    assert status.error is not None
    assert status.error.startswith("Could not start")


def test_probe_asks_only_once() -> None:
    probe = TorchMpsProbe([sys.executable, "-S"])
    first = probe.wait(timeout_s=60)
    probe.start()
    assert probe.wait(timeout_s=60) is first


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, None),
        (TorchMpsStatus(built=True, available=True, torch_version="2.5.0"), None),
        (
            TorchMpsStatus(built=False, available=False, torch_version="2.5.0+cpu"),
            "This PyTorch (2.5.0+cpu) was built without MPS",
        ),
        (
            TorchMpsStatus(built=True, available=False, torch_version="2.5.0"),
            "PyTorch's MPS backend is built but not available",
        ),
        (TorchMpsStatus(built=None, available=None, error="It broke."), "It broke."),
    ],
)
def test_torch_sentence(status: TorchMpsStatus | None, expected: str | None) -> None:
    sentence = torch_mps_sentence(status)
    if expected is None:
        assert sentence is None
    else:
        assert sentence is not None
        assert sentence.startswith(expected)
