"""The doctor's rules, on the facts of machines that are not this one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputui.device import CPU, Device
from gputui.doctor.checks import Check, DeviceReport, DoctorReport, Status
from gputui.doctor.diagnose import diagnose, format_cudnn
from gputui.doctor.render import render_text
from gputui.doctor.run import driver_too_old
from gputui.doctor.torch_facts import TorchFacts
from gputui.doctor.wheels import channel_for_driver, install_command, parse_cuda_version
from gputui.jobs.events import DevicesListed, TorchProbed
from gputui.telemetry.nvml import describe_nvml_error
from gputui.telemetry.readings import NvmlReading
from tests.doctor.doctor_facts import (
    CPU_BUILD,
    CPU_TORCH,
    CUDA_BUILD,
    CUDA_TORCH,
    NO_CUDA,
    TWO_GPUS,
    facts,
    no_nvml,
    nvml,
)
from tests.readme import README
from tests.ui.fakes import gpu_reading

LIB_RM_VERSION_MISMATCH = 18
"""NVML's return code when the driver's library and kernel module differ."""

CU124 = (
    "python -m pip uninstall -y torch && "
    "python -m pip install torch --index-url https://download.pytorch.org/whl/cu124"
)


def check(report: DoctorReport, name: str) -> Check:
    found = report.check(name)
    assert found is not None, [c.name for c in report.checks]
    return found


# ------------------------------------------------------------------ wheel channels


@pytest.mark.parametrize(
    ("driver", "channel"),
    [
        ("13.1", "cu130"),
        ("12.9", "cu129"),
        ("12.7", "cu126"),
        ("12.4", "cu124"),
        ("12.3", "cu121"),
        ("12.0", "cu118"),
        ("11.8", "cu118"),
        ("11.4", None),
    ],
)
def test_the_channel_is_the_newest_not_newer_than_the_driver(driver: str, channel: str) -> None:
    version = parse_cuda_version(driver)
    assert version is not None
    assert channel_for_driver(version) == channel


def test_install_command_replaces_torch_and_what_is_built_against_it() -> None:
    assert install_command("cu124") == CU124
    assert install_command(
        "cu126", python="/opt/py/bin/python3", packages=("torch", "torchvision"), replace=False
    ) == (
        "/opt/py/bin/python3 -m pip install torch torchvision "
        "--index-url https://download.pytorch.org/whl/cu126"
    )


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("12.4", (12, 4)), ("12", (12, 0)), ("12.4.1", (12, 4)), ("x", None), (None, None)],
)
def test_parse_cuda_version(text: str | None, parsed: tuple[int, int] | None) -> None:
    assert parse_cuda_version(text) == parsed


# ------------------------------------------------------------------ the build and the driver


def test_cpu_only_build_with_an_nvidia_driver_fails_with_the_exact_install_command() -> None:
    report = diagnose(facts())
    build = check(report, "torch build")
    assert build.status is Status.FAIL
    assert "2.13.0+cpu is a CPU-only build" in build.message
    assert "NVIDIA driver 550.54.15 (CUDA 12.4) with 2 GPUs" in build.message
    assert build.fix == CU124
    cuda = check(report, "torch.cuda")
    assert cuda.status is Status.FAIL
    assert "Torch not compiled with CUDA enabled" in cuda.message
    assert cuda.fix == CU124
    assert report.failed


def test_the_install_command_names_this_interpreter_and_torchvision() -> None:
    install = replace(CPU_BUILD, companions={"torchvision": "0.19.0", "torchaudio": None})
    torch = replace(CPU_TORCH, install=install)
    report = diagnose(facts(torch=torch, python="/srv/env/bin/python", nvml=nvml(cuda="12.8")))
    assert check(report, "torch build").fix == (
        "/srv/env/bin/python -m pip uninstall -y torch torchvision && /srv/env/bin/python -m pip "
        "install torch torchvision --index-url https://download.pytorch.org/whl/cu128"
    )


def test_a_driver_older_than_every_channel_says_to_update_it() -> None:
    fix = check(diagnose(facts(nvml=nvml(cuda="11.4"))), "torch build").fix
    assert fix is not None
    assert "update the NVIDIA driver (CUDA 11.8 or later)" in fix
    assert "whl/cu118" in fix


def test_a_cpu_only_build_without_a_driver_is_fine() -> None:
    report = diagnose(facts(nvml=no_nvml(), nvidia_smi=None))
    assert check(report, "torch build").status is Status.OK
    assert check(report, "torch.cuda").status is Status.SKIP
    assert check(report, "nvidia driver").status is Status.SKIP
    assert not report.failed


def test_a_cuda_build_with_no_nvidia_driver_gets_the_cpu_build_s_command() -> None:
    """Issue 43: PyPI's default torch is the CUDA build, several GB; on a box with no NVIDIA
    driver the doctor said only "Built for CUDA". It names the CPU build's index now, as the
    README does beside its table."""
    no_driver = replace(NO_CUDA, init_error="RuntimeError: Found no NVIDIA driver on your system.")
    torch = replace(CUDA_TORCH, cuda=no_driver)
    report = diagnose(facts(torch=torch, nvml=no_nvml(), nvidia_smi=None))
    build = check(report, "torch build")
    assert build.status is Status.OK  # torch runs here: the CUDA libraries only go unused
    assert "no NVIDIA driver here" in build.message
    assert build.fix == (
        "python -m pip uninstall -y torch && "
        "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu"
    )
    assert "--index-url https://download.pytorch.org/whl/cpu\n" in README.read_text()
    assert check(diagnose(facts(torch=CUDA_TORCH)), "torch build").fix is None  # a driver


def test_a_working_cuda_build() -> None:
    report = diagnose(facts(torch=CUDA_TORCH))
    assert (
        check(report, "torch").message
        == "torch 2.4.0+cu124 imports: a CUDA 12.4 build, cuDNN 9.1.0."
    )
    assert check(report, "torch build").status is Status.OK
    assert check(report, "driver vs build").status is Status.OK
    assert check(report, "torch.cuda").status is Status.OK
    assert not report.failed


def test_a_driver_too_old_for_the_build_fails() -> None:
    too_old = (
        "CUDA initialization: The NVIDIA driver on your system is too old (found version 11040).",
    )
    cuda = replace(TWO_GPUS, available=False, device_count=0, warnings=too_old)
    torch = replace(CUDA_TORCH, cuda=cuda)
    report = diagnose(facts(torch=torch, nvml=nvml(cuda="11.4", driver="470.82.01")))
    versus = check(report, "driver vs build")
    assert versus.status is Status.FAIL
    assert "CUDA 11.4, too old for torch 2.4.0+cu124, built for CUDA 12.4" in versus.message
    assert versus.fix is not None and "update the NVIDIA driver" in versus.fix
    cuda = check(report, "torch.cuda")
    assert cuda.status is Status.FAIL
    assert "found version 11040" in cuda.message
    assert cuda.fix == versus.fix  # the same words, so that the text prints them once


def test_an_older_minor_version_that_still_runs_is_a_warning() -> None:
    report = diagnose(facts(torch=CUDA_TORCH, nvml=nvml(cuda="12.2")))
    versus = check(report, "driver vs build")
    assert versus.status is Status.WARN
    assert "minor-version compatibility" in versus.message
    assert versus.fix is not None and "whl/cu121" in versus.fix


@pytest.mark.parametrize(
    ("error", "fix"),
    [
        ("Error 803: system has unsupported display driver / cuda driver combination", "reboot"),
        ("Error 804: forward compatibility was attempted on non supported HW", "cuda-compat"),
        ("CUDA unknown error - this may be due to an incorrectly set up environment", "nvidia_uvm"),
        ("Something nobody has seen", "dmesg"),
    ],
)
def test_cuda_init_errors_get_their_remedy(error: str, fix: str) -> None:
    cuda = replace(TWO_GPUS, available=False, device_count=0, init_error=f"RuntimeError: {error}")
    torch = replace(CUDA_TORCH, cuda=cuda)
    cuda = check(diagnose(facts(torch=torch)), "torch.cuda")
    assert cuda.status is Status.FAIL
    assert error in cuda.message
    assert cuda.fix is not None and fix in cuda.fix


def test_cuda_seeing_fewer_gpus_than_nvml_is_a_warning() -> None:
    torch = replace(CUDA_TORCH, cuda=replace(TWO_GPUS, device_count=1))
    assert check(diagnose(facts(torch=torch)), "torch.cuda").status is Status.WARN


# ------------------------------------------------------------------ NVML and nvidia-smi


def test_nvml_without_nvidia_smi_warns() -> None:
    driver = check(diagnose(facts(nvidia_smi=None)), "nvidia driver")
    assert driver.status is Status.WARN
    assert "nvidia-smi is not on PATH" in driver.message
    assert driver.fix is not None and "nvidia-utils-550" in driver.fix


def test_nvidia_smi_without_nvml_fails() -> None:
    driver = check(diagnose(facts(nvml=no_nvml())), "nvidia driver")
    assert driver.status is Status.FAIL
    assert "nvidia-smi is at /usr/bin/nvidia-smi, but NVML does not answer" in driver.message


def test_a_driver_installed_but_not_loaded_fails_even_without_nvidia_smi() -> None:
    error = "The NVIDIA driver is installed but its kernel module is not loaded; load it."
    driver = check(diagnose(facts(nvml=no_nvml(error), nvidia_smi=None)), "nvidia driver")
    assert driver.status is Status.FAIL
    assert driver.message == error


def test_a_driver_library_that_does_not_match_its_module_is_not_called_no_driver() -> None:
    """Issue 18: with a driver/library version mismatch the doctor said "no NVIDIA driver
    here to miss"; NVML not answering says nothing about whether GPUs are there."""
    mismatch = describe_nvml_error(LIB_RM_VERSION_MISMATCH, "")
    report = diagnose(facts(nvml=no_nvml(mismatch), nvidia_smi=None))
    assert check(report, "nvidia driver").status is Status.FAIL
    build = check(report, "torch build")
    assert build.status is Status.SKIP
    assert build.message == (
        "A CPU-only build; whether it misses NVIDIA GPUs is unknown, as NVML does not answer."
    )
    cuda = check(report, "torch.cuda")
    assert cuda.status is Status.SKIP
    assert cuda.message.startswith("NVML does not answer, so whether there is a GPU is unknown;")
    text = render_text(report, width=200)
    assert "no NVIDIA driver here" not in text
    assert "No NVIDIA GPU" not in text


def test_a_probe_stopped_before_torch_imported_claims_nothing_about_the_build() -> None:
    """Issue 18: ``--timeout 1`` (torch never imported) said "torch is a CPU-only build"."""
    torch = TorchFacts(
        timed_out=True,
        last_step="importing torch",
        failure="the torch probe timed out after 1 s while importing torch",
    )
    report = diagnose(facts(torch=torch))
    assert "CPU-only" not in render_text(report, width=200)
    for name in ("torch build", "driver vs build", "torch.cuda", "GPU code"):
        found = check(report, name)
        assert found.status is Status.SKIP, name
        assert found.message == "Unknown: the torch probe stopped before torch imported.", name
    assert check(report, "torch probe").status is Status.FAIL


# ------------------------------------------------------------------ CUDA_VISIBLE_DEVICES


@pytest.mark.parametrize(
    ("value", "status", "words"),
    [
        (None, Status.OK, "Not set: torch may use all 2 GPUs."),
        ("1,0", Status.OK, "cuda:0 is GPU 1 (NVIDIA H100 80GB HBM3), cuda:1 is GPU 0"),
        ("1", Status.WARN, "hides GPU 0 (1 of 2 visible): cuda:0 is GPU 1"),
        ("", Status.FAIL, "hides all 2 GPUs from torch"),
        ("-1", Status.FAIL, "hides all 2 GPUs from torch"),
        ("0,2", Status.FAIL, "'2' names a GPU that does not exist"),
        ("GPU-00000001", Status.WARN, "hides GPU 0 (1 of 2 visible): cuda:0 is GPU 1"),
        ("GPU-ffff", Status.FAIL, "GPU-ffff matches no GPU NVML reports"),
    ],
)
def test_cuda_visible_devices(value: str | None, status: Status, words: str) -> None:
    found = check(diagnose(facts(cuda_visible_devices=value)), "CUDA_VISIBLE_DEVICES")
    assert found.status is status
    assert words in found.message
    if status is Status.FAIL:
        assert found.fix is not None and "unset CUDA_VISIBLE_DEVICES" in found.fix


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (None, "Not set: torch may use the one GPU."),
        ("0", "CUDA_VISIBLE_DEVICES='0' shows the one GPU: cuda:0 is GPU 0"),
        ("", "CUDA_VISIBLE_DEVICES='' hides the one GPU from torch."),
        ("0,1", "So torch sees 1 of 1 GPU."),
    ],
)
def test_one_gpu_is_never_all_1_gpus(value: str | None, words: str) -> None:
    """Issue 18: ``shows all 1 GPUs``."""
    found = check(diagnose(facts(nvml=nvml(1), cuda_visible_devices=value)), "CUDA_VISIBLE_DEVICES")
    assert words in found.message
    assert "1 GPUs" not in found.message


def test_hiding_every_gpu_is_the_cuda_fix_on_a_cuda_build() -> None:
    torch = replace(CUDA_TORCH, cuda=replace(TWO_GPUS, available=False, device_count=0))
    cuda = check(diagnose(facts(torch=torch, cuda_visible_devices="")), "torch.cuda")
    assert cuda.status is Status.FAIL
    assert cuda.fix == "`unset CUDA_VISIBLE_DEVICES` (it hides every GPU)"


def test_mixed_gpus_numbered_by_index_need_pci_bus_order() -> None:
    gpus = (gpu_reading(0, name="NVIDIA A100"), gpu_reading(1, name="NVIDIA T4"))
    mixed = replace(nvml(), gpus=gpus)
    found = check(diagnose(facts(nvml=mixed, cuda_visible_devices="0,1")), "CUDA_VISIBLE_DEVICES")
    assert found.status is Status.WARN
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in found.message
    ordered = facts(nvml=mixed, cuda_visible_devices="0,1", cuda_device_order="PCI_BUS_ID")
    assert check(diagnose(ordered), "CUDA_VISIBLE_DEVICES").status is Status.OK


# ------------------------------------------------------------------ torch itself and the probe


def test_torch_not_installed_fails_with_the_install_command_for_the_driver() -> None:
    missing = TorchProbed(
        imported=False, missing=True, import_error="ModuleNotFoundError: No module named 'torch'"
    )
    torch = TorchFacts(install=missing, completed=True)
    found = check(diagnose(facts(torch=torch)), "torch")
    assert found.status is Status.FAIL
    assert found.message == "torch is not installed."
    assert (
        found.fix
        == "python -m pip install torch --index-url https://download.pytorch.org/whl/cu124"
    )


def test_torch_that_does_not_import_shows_the_error() -> None:
    broken = TorchProbed(imported=False, import_error="OSError: libcudnn.so.9: cannot open")
    torch = TorchFacts(install=broken, completed=True)
    found = check(diagnose(facts(torch=torch, nvml=no_nvml(), nvidia_smi=None)), "torch")
    assert found.status is Status.FAIL
    assert "OSError: libcudnn.so.9: cannot open" in found.message
    assert found.fix == "python -m pip install --force-reinstall torch"


def test_a_probe_that_timed_out_is_a_failed_check_and_keeps_what_it_said() -> None:
    torch = replace(
        CUDA_TORCH,
        completed=False,
        timed_out=True,
        cuda=None,
        failure="the torch probe timed out after 5 s while initialising CUDA",
    )
    report = diagnose(facts(torch=torch))
    probe = check(report, "torch probe")
    assert probe.status is Status.FAIL
    assert "timed out after 5 s while initialising CUDA" in probe.message
    assert probe.fix is not None and "--timeout" in probe.fix
    assert check(report, "torch").status is Status.OK  # said before it hung
    assert check(report, "torch.cuda").status is Status.SKIP


def test_format_cudnn() -> None:
    assert format_cudnn(90100) == "9.1.0"
    assert format_cudnn(8902) == "8.9.2"


# ------------------------------------------------------------------ pitfalls


def test_pitfalls_show_torch_s_words_and_the_remedy() -> None:
    report = diagnose(facts())
    pitfalls = [c for c in report.checks if c.name.startswith("pitfall")]
    assert {c.status for c in pitfalls} == {Status.INFO}  # issue 43: an error raised is no ok
    mixed = check(report, "pitfall: mixed devices")
    assert "'meta' device" in mixed.message
    assert "Tensor on device meta is not on the expected" in mixed.message
    assert check(report, "pitfall: 'cuda0'").message.endswith("Invalid device string: 'cuda0'")
    numpy = check(report, "pitfall: .numpy()")
    assert numpy.fix is not None and "t.cpu().numpy()" in numpy.fix


def test_a_quick_probe_shows_no_pitfalls_and_the_report_no_pitfall_rows() -> None:
    """Issue 43: ``--quick`` leaves the pitfalls out (made on the meta device they cost the
    quick probe most of its time after torch's import), and says nothing of them; a probe
    that stopped early still says it did not get that far."""
    quick = diagnose(facts(torch=replace(CPU_TORCH, pitfalls=())))
    assert not [c.name for c in quick.checks if c.name.startswith("pitfall")]
    stopped = diagnose(facts(torch=replace(CPU_TORCH, pitfalls=(), completed=False)))
    assert check(stopped, "pitfall: 'cuda0'").status is Status.SKIP


def test_numpy_missing_is_a_warning_with_its_install_command() -> None:
    torch = replace(
        CPU_TORCH,
        install=replace(CPU_BUILD, numpy_installed=False),
        pitfalls=(
            replace(
                CPU_TORCH.pitfalls[1],
                error="RuntimeError: Numpy is not available",
                cpu_error="RuntimeError: Numpy is not available",
            ),
        ),
    )
    numpy = check(diagnose(facts(torch=torch)), "pitfall: .numpy()")
    assert numpy.status is Status.WARN
    assert numpy.fix == "python -m pip install numpy"
    assert check(diagnose(facts(torch=torch)), "pitfall: mixed devices").status is Status.SKIP


def test_a_driver_that_reports_no_gpu_warns_rather_than_fails() -> None:
    report = diagnose(facts(nvml=nvml(count=0)))
    assert check(report, "nvidia driver").status is Status.WARN
    assert check(report, "torch build").status is Status.WARN
    assert check(report, "torch.cuda").status is Status.SKIP
    assert not report.failed


def test_each_cuda_device_is_matched_to_its_nvml_gpu_by_uuid_not_by_index() -> None:
    """CUDA orders devices fastest first and CUDA_VISIBLE_DEVICES renumbers them: here
    cuda:0 is NVML's GPU 1 and cuda:1 is GPU 0."""
    reading = nvml()
    gpu0, gpu1 = (gpu.uuid for gpu in reading.gpus)
    devices = (
        DeviceReport(device=CPU, name="CPU"),
        DeviceReport(device=Device("cuda", 0), name="NVIDIA H100 80GB HBM3", uuid=gpu1),
        DeviceReport(device=Device("cuda", 1), name="NVIDIA H100 80GB HBM3", uuid=gpu0),
        DeviceReport(
            device=Device("cuda", 2), name="NVIDIA H100 80GB HBM3", uuid="GPU-not-in-nvml"
        ),
    )
    report = diagnose(facts(torch=replace(CUDA_TORCH, devices=devices), nvml=reading))
    assert [device.nvml_index for device in report.devices] == [None, 1, 0, None]
    text = render_text(report, width=200)
    assert "cuda:0  NVIDIA H100 80GB HBM3, NVML's GPU 1" in text
    assert "cuda:1  NVIDIA H100 80GB HBM3, NVML's GPU 0" in text


def test_a_cuda_build_the_driver_cannot_run_is_one_line_with_the_doctor_s_command() -> None:
    """Issue 32 (for bench and the runner pane): the build's CUDA (13.0) is newer than the
    driver's (12.4), NVML sees GPUs and torch lists none: the line, then the command the
    doctor's "driver vs build" check gives."""
    from tests.ui.runner_fakes import CUDA_BUILD_ON_AN_OLD_DRIVER as listed

    line = driver_too_old(listed, nvml(), python="python", packages=("torch",))
    assert line == (
        "this torch 2.13.0+cu130 needs a driver for CUDA 13.0 or later, and the driver here "
        f"is 550.54.15 (CUDA 12.4): {CU124}"
    )
    torch = replace(
        CUDA_TORCH, install=replace(CUDA_BUILD, version="2.13.0+cu130", cuda_version="13.0")
    )
    versus = check(diagnose(facts(torch=torch, nvml=nvml())), "driver vs build")
    assert versus.fix is not None and line.split(": ", 1)[1] in versus.fix


def test_the_driver_line_is_said_only_where_the_facts_say_so() -> None:
    from tests.ui.runner_fakes import CUDA_BUILD_ON_AN_OLD_DRIVER as listed
    from tests.ui.runner_fakes import DEVICES

    def said(listed: DevicesListed, reading: NvmlReading) -> str | None:
        return driver_too_old(listed, reading, python="python", packages=("torch",))

    assert said(listed, nvml(cuda="13.0")) is None  # the driver runs the build
    assert said(listed, nvml(count=0)) is None  # no GPU to miss
    assert said(listed, no_nvml()) is None
    assert said(listed, nvml(cuda=None)) is None  # the driver's CUDA unknown
    assert said(replace(listed, cuda_version=None), nvml()) is None  # a CPU-only build
    assert said(replace(DEVICES, cuda_version="13.0"), nvml()) is None  # it uses the GPUs
    line = said(listed, nvml(driver=""))
    assert line is not None and "the driver here is for CUDA 12.4: " in line
