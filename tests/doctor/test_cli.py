"""``gputui doctor``, run as users run it, with the stand-in NVML reporting a driver."""

from __future__ import annotations

import json
import os
import pty
from pathlib import Path

import pytest

from gputui.commands.doctor import ERASE
from tests.doctor.test_render import commands_in, validate_schema, words
from tests.helpers import gputui

CU124 = "https://download.pytorch.org/whl/cu124"


def test_cpu_only_torch_with_an_nvidia_driver_fails_with_the_install_command(
    fake_nvml_dir: Path,
) -> None:
    # One run (it imports torch in the probe child), so it also carries a GPU index that
    # the stand-in's two GPUs do not have, judged against the real NVML bindings.
    env = {"CUDA_VISIBLE_DEVICES": "0,5"}
    done = gputui("doctor", "--json", "--quick", lib_dir=fake_nvml_dir, knobs=env)
    assert done.returncode == 1, done.stderr  # a check failed
    assert done.stderr == ""
    data = json.loads(done.stdout)
    validate_schema(data)
    checks = {item["name"]: item for item in data["checks"]}
    build = checks["torch build"]
    assert build["status"] == "fail"
    assert "is a CPU-only build" in build["message"]
    assert "NVIDIA driver 550.54.15 (CUDA 12.4) with 2 GPUs" in build["message"]
    assert " -m pip uninstall -y torch && " in build["fix"]
    assert build["fix"].endswith(
        " -m pip install torch --index-url https://download.pytorch.org/whl/cu124"
    )
    cuda = checks["torch.cuda"]
    assert cuda["status"] == "fail"
    assert "Torch not compiled with CUDA enabled" in cuda["message"]
    visible = checks["CUDA_VISIBLE_DEVICES"]
    assert visible["status"] == "fail"
    assert (
        "'5' names a GPU that does not exist (NVML reports 2 GPUs, indexes 0 to 1)"
        in (visible["message"])
    )
    assert checks["nvidia driver"]["status"] in {"ok", "warn"}  # warn: no nvidia-smi here
    assert [device["device"] for device in data["devices"]] == ["cpu"]
    assert data["devices"][0]["notes"][-1] == "not measured (quick)"
    facts = data["facts"]
    assert facts["torch_version"] and facts["torch_version"].startswith("2.")
    assert (facts["torch_build"], facts["torch_cuda_version"]) == ("cpu", None)
    assert (facts["cuda_available"], facts["cuda_device_count"]) == (False, 0)
    assert (facts["driver_version"], facts["driver_cuda_version"]) == ("550.54.15", "12.4")
    assert (facts["gpu_count"], facts["nvml_error_code"]) == (2, None)
    assert data["summary"]["fail"] >= 3  # torch build, torch.cuda, CUDA_VISIBLE_DEVICES


def test_a_driver_version_mismatch_is_not_called_no_driver(fake_nvml_dir: Path) -> None:
    """Issue 18: with the driver's library and kernel module at different versions the
    doctor said "no NVIDIA driver here to miss"; it cannot know whether GPUs are there."""
    env = {"FAKE_NVML_INIT_ERROR": "LIB_RM_VERSION_MISMATCH"}
    done = gputui("doctor", "--json", "--quick", lib_dir=fake_nvml_dir, knobs=env)
    assert done.returncode == 1, done.stderr  # the driver check failed
    checks = {item["name"]: item for item in json.loads(done.stdout)["checks"]}
    assert checks["nvidia driver"]["status"] == "fail"
    assert "different versions" in checks["nvidia driver"]["message"]
    assert checks["torch build"]["status"] == "skip"
    assert "unknown" in checks["torch build"]["message"]
    assert checks["torch.cuda"]["status"] == "skip"
    assert not checks["torch.cuda"]["message"].startswith("No NVIDIA GPU")
    facts = json.loads(done.stdout)["facts"]
    assert facts["nvml_error_code"] == 18  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
    assert facts["gpu_count"] is None and facts["driver_version"] is None


def test_the_text_fits_a_narrow_terminal(fake_nvml_dir: Path) -> None:
    """Issue 18: ``COLUMNS=40 gputui doctor`` wrote 80-column lines, and the install
    command on one line of its own, past them. Only a word wider than 40 (the path to
    this Python may be one) runs past; the command pastes back whole."""
    done = gputui("doctor", "--quick", lib_dir=fake_nvml_dir, knobs={"COLUMNS": "40"})
    assert done.returncode == 1, done.stderr  # a check failed
    too_wide = [line for line in done.stdout.splitlines() if len(line) > 40]
    assert all(len(line.split()) == 1 for line in too_wide), too_wide
    (install, *_) = commands_in(done.stdout)
    assert install[-4:] == ["install", "torch", "--index-url", CU124]
    assert words(done.stdout).endswith(" skipped.")


def test_a_terminal_sees_each_step_as_it_starts_then_the_report_alone() -> None:
    """Issue 43: ``doctor --quick`` left a blank terminal for seconds. On a terminal,
    standard error shows the step under way, rewritten in place, and clears it before the
    report; a pipe gets nothing (``stderr == ""`` above)."""
    terminal, follower = pty.openpty()
    try:
        done = gputui("doctor", "--quick", "--json", stderr=follower)
        os.close(follower)
        said = b""
        while chunk := _read(terminal):
            said += chunk
    finally:
        os.close(terminal)
    json.loads(done.stdout)  # standard output: the report alone
    shown = said.decode().split(ERASE)
    assert "gputui doctor: importing torch..." in shown
    assert shown[-1] == ""  # the last step cleared


def _read(fd: int) -> bytes:
    """What a terminal's other end has to read; ``b""`` once its last writer has gone."""
    try:
        return os.read(fd, 4096)
    except OSError:  # EIO: no process has the terminal open any more
        return b""


@pytest.mark.parametrize("value", ["abc", "0", "nan", "inf", "4000"])
def test_a_bad_timeout_is_one_line_and_exit_2(value: str) -> None:
    done = gputui("doctor", "--timeout", value)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert f"argument --timeout: {value!r} is not a number of seconds from 1 to 3600" in done.stderr
    assert "Traceback" not in done.stderr
