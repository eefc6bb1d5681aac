"""Apple MPS: ioreg parsing on captured output, the sampler on every platform, the torch probe."""

# The tests/data/ioreg_*.plist captures were converted, value by value, from `ioreg -r -d 1 -w 0
# -c IOAccelerator` text recorded on real Macs, not recorded with `ioreg -a` (no Mac was at
# hand); the keys ioreg -a adds from the text's header line (IOObjectClass, IORegistryEntryName,
# IORegistryEntryID, IOObjectRetainCount, IOServiceBusyState) were filled in from it, and
# IOServiceState and IOServiceBusyTime, which the header shows only in part, were left out.
# ioreg_truncated.plist is made up: an M1 Pro entry cut inside its statistics. A session on a
# Mac should re-record them with `ioreg -a -r -d 1 -c IOAccelerator`.

from __future__ import annotations

import importlib.metadata
import os
import plistlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gputui.telemetry.apple import (
    IOREG_COMMAND,
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

_PLIST_HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" '
    '"http://www.apple.com/DTDs/PropertyList-1.0.dtd">\n'
    '<plist version="1.0">\n'
)

_MALFORMED = [
    pytest.param("ioreg: command not found\n", id="not-xml"),
    pytest.param("{ garbage = }", id="old-text-syntax"),
    pytest.param(_PLIST_HEAD + "<array><dict><key>a</key></dict></array></plist>", id="no-value"),
    pytest.param(_PLIST_HEAD + "<key>a</key></plist>", id="key-outside-a-dict"),  # IndexError
    pytest.param(_PLIST_HEAD + "<array><date>soon</date></array></plist>", id="bad-date"),
    pytest.param(_PLIST_HEAD + "<array><integer>many</integer></array></plist>", id="bad-int"),
    pytest.param(
        _PLIST_HEAD.encode() + b"<array><string>\xff</string></array></plist>", id="bad-utf8"
    ),
]
"""Output plistlib cannot read, each failing inside it in its own way."""


def _capture(name: str) -> bytes:
    return (DATA / name).read_bytes()


def _plist(root: Any) -> bytes:
    return plistlib.dumps(root)


def _m1_entry() -> dict[str, Any]:
    (entry,) = plistlib.loads(_capture("ioreg_m1.plist"))
    assert isinstance(entry, dict)
    return entry


class _Unstarted(TorchMpsProbe):
    """A probe that never starts: the answer stays unknown, as in the first second of a run."""

    def start(self) -> None:
        pass


# --- parse_ioreg ------------------------------------------------------------------------


def test_parses_an_m2_pro_capture() -> None:
    assert parse_ioreg(_capture("ioreg_m2_pro.plist")) == (
        IoregAccelerator(
            io_class="AGXAcceleratorG14X",
            model="Apple M2 Pro",
            core_count=19,
            utilization_percent=23.0,
            memory_in_use_bytes=1148452864,
        ),
    )


def test_parses_an_idle_m1_capture() -> None:
    (m1,) = parse_ioreg(_capture("ioreg_m1.plist"))
    assert m1.io_class == "AGXAcceleratorG13G"
    assert m1.model == "Apple M1"
    assert m1.core_count == 8
    assert m1.utilization_percent == 0.0  # idle is 0, not unknown
    assert m1.memory_in_use_bytes == 216268800


def test_a_mac_with_two_gpus_and_missing_keys_gives_none_for_what_is_missing() -> None:
    intel, amd = parse_ioreg(_capture("ioreg_intel_amd.plist"))
    assert intel == IoregAccelerator("IntelAccelerator", None, None, None, None)
    assert amd.io_class == "AMDRadeonX4000_AMDBaffinGraphicsAccelerator"
    assert amd.model is None
    assert amd.utilization_percent == 7.0
    assert amd.memory_in_use_bytes is None


def test_bytes_and_text_parse_alike() -> None:
    data = _capture("ioreg_m2_pro.plist")
    (gpu,) = parse_ioreg(data.decode())
    assert gpu.model == "Apple M2 Pro"
    assert parse_ioreg(data.decode()) == parse_ioreg(data)


def test_a_truncated_plist_is_an_error_not_a_wrong_reading() -> None:
    data = _capture("ioreg_truncated.plist")
    assert not data.rstrip().endswith(b"</plist>")  # the capture really is cut short
    with pytest.raises(ValueError, match=r"^ioreg's output is not a property list: ExpatError"):
        parse_ioreg(data)


@pytest.mark.parametrize("data", _MALFORMED)
def test_malformed_output_is_a_value_error(data: str | bytes) -> None:
    with pytest.raises(ValueError, match=r"^ioreg's output is not a property list: "):
        parse_ioreg(data)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param("", id="empty"),
        pytest.param(b"", id="empty-bytes"),
        pytest.param("\n\n", id="blank"),
        pytest.param(_plist([]), id="empty-array"),
        pytest.param(_plist("IOAccelerator"), id="string-root"),
        pytest.param(_plist(13), id="integer-root"),
    ],
)
def test_output_without_accelerators_parses_to_nothing(data: str | bytes) -> None:
    assert parse_ioreg(data) == ()


def test_a_root_dict_instead_of_an_array_lists_nothing() -> None:
    # What `ioreg -a` prints without -r: one dict (the registry's root), not a list of matches.
    entry = _m1_entry()
    assert parse_ioreg(_plist([entry])) != ()  # the same entry inside an array is read
    assert parse_ioreg(_plist(entry)) == ()


def test_entries_that_are_not_dicts_are_skipped() -> None:
    (m1,) = parse_ioreg(_plist([1, "AGXAcceleratorG13G", [_m1_entry()], True, _m1_entry()]))
    assert (m1.model, m1.utilization_percent) == ("Apple M1", 0.0)


def test_an_entry_without_performance_statistics_keeps_the_rest() -> None:
    entry = _m1_entry()
    del entry["PerformanceStatistics"]
    assert parse_ioreg(_plist([entry])) == (
        IoregAccelerator("AGXAcceleratorG13G", "Apple M1", 8, None, None),
    )


def test_values_of_another_type_are_none() -> None:
    odd: dict[str, Any] = {
        "IOClass": 13,
        "IOObjectClass": ["AGXAcceleratorG13G"],
        "model": 42,
        "gpu-core-count": "8",
        "PerformanceStatistics": {"Device Utilization %": "23", "In use system memory": True},
    }
    assert parse_ioreg(_plist([odd])) == (IoregAccelerator(None, None, None, None, None),)
    odd |= {"gpu-core-count": True, "PerformanceStatistics": [{"Device Utilization %": 23}]}
    assert parse_ioreg(_plist([odd])) == (IoregAccelerator(None, None, None, None, None),)


@pytest.mark.parametrize(
    "bad",
    ["<real>inf</real>", "<real>nan</real>", f"<integer>1{'0' * 400}</integer>"],
    ids=["inf", "nan", "over-64-bits"],
)
def test_a_number_that_is_not_finite_is_unknown(bad: str) -> None:
    # Written by hand: plistlib.dumps refuses an integer over 64 bits.
    statistics = f"<key>Device Utilization %</key>{bad}<key>In use system memory</key>{bad}"
    data = f"{_PLIST_HEAD}<array><dict><key>PerformanceStatistics</key><dict>{statistics}"
    (gpu,) = parse_ioreg(data + "</dict></dict></array></plist>")
    assert (gpu.utilization_percent, gpu.memory_in_use_bytes) == (None, None)


def test_a_real_load_is_read() -> None:
    statistics = {"Device Utilization %": 12.5, "In use system memory": 2048.0}
    (gpu,) = parse_ioreg(_plist([{"PerformanceStatistics": statistics}]))
    assert (gpu.utilization_percent, gpu.memory_in_use_bytes) == (12.5, 2048)


def test_model_stored_as_data_is_read_as_text() -> None:
    entry = {
        "IOObjectClass": "X",
        "model": b"AMD Radeon Pro 5500M\0",
        "PerformanceStatistics": {"Device Utilization %": 64, "In use system memory": 0},
    }
    (amd,) = parse_ioreg(_plist([entry]))
    assert amd.io_class == "X"
    assert amd.model == "AMD Radeon Pro 5500M"
    assert (amd.utilization_percent, amd.memory_in_use_bytes) == (64.0, 0)


def test_io_class_is_the_drivers_own_before_the_object_class() -> None:
    both, object_only = parse_ioreg(
        _plist([{"IOClass": "A", "IOObjectClass": "B"}, {"IOObjectClass": "B"}])
    )
    assert (both.io_class, object_only.io_class) == ("A", "B")


def test_statistics_with_nested_values_still_parse() -> None:
    statistics = {
        "Engines": [1, 2, [3]],
        "Flags": {"On": True, "Off": False},
        "Tag": b"\x0a\x0b",
        "Device Utilization %": 99,
        "Ratio": 0.5,
        "In use system memory": 1024,
    }
    legends = [{"IOReportChannels": [[5715112260913905664, 8589934594, "GPU Stats"]]}]
    entry = {"IOReportLegends": legends, "PerformanceStatistics": statistics}
    (gpu,) = parse_ioreg(_plist([entry]))
    assert (gpu.utilization_percent, gpu.memory_in_use_bytes) == (99.0, 1024)


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
        platform="darwin", ioreg=lambda: _capture("ioreg_m2_pro.plist"), torch_probe=_Unstarted()
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
    captures = iter([_capture("ioreg_m1.plist"), _capture("ioreg_m2_pro.plist").decode()])
    sampler = MpsSampler(platform="darwin", ioreg=lambda: next(captures), torch_probe=_Unstarted())
    assert sampler.sample().utilization_percent == 0.0
    assert sampler.sample().utilization_percent == 23.0


def test_the_gpu_that_reports_a_load_is_the_one_shown() -> None:
    sampler = MpsSampler(
        platform="darwin", ioreg=lambda: _capture("ioreg_intel_amd.plist"), torch_probe=_Unstarted()
    )
    reading = sampler.sample()
    assert reading.utilization_percent == 7.0
    assert reading.gpu_name is None
    assert reading.message is None


def test_a_gpu_without_statistics_keeps_the_name_and_says_the_load_is_missing() -> None:
    entry = _m1_entry()
    del entry["PerformanceStatistics"]
    sampler = MpsSampler(platform="darwin", ioreg=lambda: _plist([entry]), torch_probe=_Unstarted())
    reading = sampler.sample()
    assert reading.gpu_name == "Apple M1 (8-core GPU)"
    assert reading.utilization_percent is None
    assert reading.message is not None
    assert "Device Utilization %" in reading.message


def test_a_truncated_plist_is_a_sentence_not_a_crash() -> None:
    sampler = MpsSampler(
        platform="darwin", ioreg=lambda: _capture("ioreg_truncated.plist"), torch_probe=_Unstarted()
    )
    reading = sampler.sample()
    assert reading.supported_platform is True
    assert reading.gpu_name is None
    assert reading.utilization_percent is None
    assert reading.message is not None
    assert reading.message.startswith(
        "Could not read the GPU's load from the IORegistry (ValueError: ioreg's output is not "
        "a property list: ExpatError: "
    )
    assert reading.message.endswith("check that `ioreg -a -r -d 1 -c IOAccelerator` runs.")


@pytest.mark.parametrize("data", _MALFORMED)
def test_malformed_output_is_a_sentence_not_a_crash(data: str | bytes) -> None:
    reading = MpsSampler(platform="darwin", ioreg=lambda: data, torch_probe=_Unstarted()).sample()
    assert reading.utilization_percent is None
    assert reading.message is not None
    assert reading.message.startswith("Could not read the GPU's load from the IORegistry")
    assert "\n" not in reading.message


@pytest.mark.parametrize(
    "ioreg", [str, bytes, lambda: _plist(_m1_entry())], ids=["text", "bytes", "dict-root"]
)
def test_no_accelerator_is_said_in_a_sentence(ioreg: Callable[[], bytes | str]) -> None:
    reading = MpsSampler(platform="darwin", ioreg=ioreg, torch_probe=_Unstarted()).sample()
    assert reading.supported_platform is True
    assert reading.message == "The IORegistry lists no GPU (no IOAccelerator)."


def test_a_missing_ioreg_is_a_sentence_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With no ioreg on PATH (as on Linux, even on a Mac) the real runner fails as on a broken Mac.
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises((OSError, subprocess.SubprocessError)):
        run_ioreg()
    reading = MpsSampler(platform="darwin", ioreg=run_ioreg, torch_probe=_Unstarted()).sample()
    assert reading.utilization_percent is None
    assert reading.message is not None
    assert reading.message.startswith("Could not read the GPU's load from the IORegistry")
    assert "`ioreg -a -r -d 1 -c IOAccelerator`" in reading.message
    assert "\n" not in reading.message


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in ioreg is a shell script")
def test_the_real_runner_asks_for_a_plist_and_passes_its_bytes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in ioreg on PATH that prints the M2 Pro capture only when asked for archive output.
    fake = tmp_path / "ioreg"
    fake.write_text(
        "#!/bin/sh\n"
        'echo "$@" > "$0.args"\n'
        'case " $* " in *" -a "*) cat "$0.plist" ;; *) echo "+-o AGXAcceleratorG14X" ;; esac\n'
    )
    fake.chmod(0o755)
    (tmp_path / "ioreg.plist").write_bytes(_capture("ioreg_m2_pro.plist"))
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")

    assert run_ioreg() == _capture("ioreg_m2_pro.plist")
    assert (tmp_path / "ioreg.args").read_text().split() == list(IOREG_COMMAND[1:])
    reading = MpsSampler(platform="darwin", ioreg=run_ioreg, torch_probe=_Unstarted()).sample()
    assert (reading.gpu_name, reading.utilization_percent) == ("Apple M2 Pro (19-core GPU)", 23.0)


# --- the torch probe --------------------------------------------------------------------


def test_macos_sampler_reports_what_the_real_torch_says_in_a_child_process() -> None:
    probe = TorchMpsProbe()
    sampler = MpsSampler(
        platform="darwin", ioreg=lambda: _capture("ioreg_m1.plist"), torch_probe=probe
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
