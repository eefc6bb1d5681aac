"""Gather this machine's facts and diagnose them: ``gputui doctor``'s engine.

Every source is injectable (environment, platform, NVML reading, ``which``, the AMD and
Intel GPUs, the torch facts or the probe command), so the whole path runs in tests on a
machine with no GPU. The torch probe child and the NVML sample run at the same time, and
both are bounded in time: a hung driver makes a failed check, never a hung doctor.
"""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import shutil
import sys
import threading
from collections.abc import Callable, Mapping, Sequence

from gputui.doctor.checks import DoctorReport
from gputui.doctor.diagnose import LIBRARY_NOT_FOUND, DoctorFacts, diagnose
from gputui.doctor.mps import PlatformFacts, current_platform
from gputui.doctor.rocm_xpu import DrmFacts, drm_facts
from gputui.doctor.torch_facts import DEFAULT_TIMEOUT_S, TorchFacts, run_probe
from gputui.doctor.wheels import cuda_install_fix, parse_cuda_version
from gputui.jobs.config import ProbeConfig
from gputui.jobs.events import TORCH_COMPANIONS, DevicesListed
from gputui.telemetry.nvml import describe_nvml_error
from gputui.telemetry.polling import NVML_TIMEOUT_S, sample_nvml
from gputui.telemetry.readings import NvmlReading, NvmlStatus, nvml_hung


def python_command(
    executable: str = sys.executable, which: Callable[[str], str | None] = shutil.which
) -> str:
    """How to name this interpreter in a command: ``python`` when that is what ``PATH``
    finds (an active virtual environment), else its full path.

    Paths are compared as written, not resolved: a virtual environment's ``python`` is a
    link to the system's, but installs into a different place.
    """
    for name in ("python", "python3"):
        found = which(name)
        if found and os.path.abspath(found) == os.path.abspath(executable):
            return name
    return shlex.quote(executable)


def torch_packages() -> tuple[str, ...]:
    """torch and the packages built against it installed beside it here, which an install
    command must reinstall with it (as the torch probe finds them)."""
    return ("torch", *(name for name in TORCH_COMPANIONS if _installed(name)))


def _installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def driver_too_old(
    listed: DevicesListed,
    nvml: NvmlReading,
    *,
    python: str | None = None,
    packages: tuple[str, ...] | None = None,
) -> str | None:
    """One line, for ``gputui bench`` and the runner pane, when this torch is a CUDA build
    the driver cannot run: what it needs, what is here, and the command for a build that
    runs (the doctor's, naming ``python`` and ``packages``, by default this interpreter and
    what is installed here). ``None`` unless NVML sees GPUs, the device listing has no
    usable CUDA device, and the build's CUDA is newer than the driver's."""
    status = nvml.status
    if not (status.available and nvml.gpus):
        return None
    if any(option.usable and option.name.kind == "cuda" for option in listed.devices):
        return None
    built = parse_cuda_version(listed.cuda_version)
    driver = parse_cuda_version(status.cuda_driver_version)
    if built is None or driver is None or driver >= built:
        return None
    cuda = status.cuda_driver_version
    here = f"{status.driver_version} (CUDA {cuda})" if status.driver_version else f"for CUDA {cuda}"
    fix = cuda_install_fix(
        cuda,
        python=python if python is not None else python_command(),
        packages=packages if packages is not None else torch_packages(),
    )
    return (
        f"this torch {listed.torch_version} needs a driver for CUDA {listed.cuda_version} or "
        f"later, and the driver here is {here}: {fix}"
    )


def nvml_facts(timeout_s: float = NVML_TIMEOUT_S) -> NvmlReading:
    """One NVML sample (:func:`sample_nvml`); a driver that has not answered all of it within
    ``timeout_s`` seconds reads as NVML unavailable, which fails the driver check."""
    reading = sample_nvml(timeout_s)
    if not nvml_hung(reading):
        return reading
    error = (
        f"NVML did not answer within {timeout_s:g} s; the driver may be hung: "
        "check nvidia-smi and `sudo dmesg | grep -i nvrm`."
    )
    return NvmlReading(NvmlStatus(available=False, error=error), (), reading.taken_at)


def run_doctor(
    *,
    environ: Mapping[str, str] | None = None,
    platform_facts: PlatformFacts | None = None,
    nvml: NvmlReading | None = None,
    which: Callable[[str], str | None] = shutil.which,
    torch: TorchFacts | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    quick: bool = False,
    probe_config: ProbeConfig | None = None,
    probe_python: str | Sequence[str] | None = None,
    python: str | None = None,
    drm: DrmFacts | None = None,
    on_step: Callable[[str], None] | None = None,
) -> DoctorReport:
    """Diagnose this machine, or the one the facts given describe (each read here when not).

    Args:
        environ: The environment to judge and to run the probe in.
        nvml: An NVML reading (sampled here within ``NVML_TIMEOUT_S``).
        torch: The torch facts (else the probe child's, run with ``timeout_s``,
            ``probe_config`` and ``probe_python``, see :func:`run_probe`).
        quick: Identify the devices but measure nothing.
        python: How to name this interpreter in install commands.
        on_step: Called, from another thread, with each step the probe child starts.
    """
    env = dict(os.environ if environ is None else environ)
    probed: list[TorchFacts] = []
    prober: threading.Thread | None = None
    if torch is None:
        config = probe_config or ProbeConfig()
        if quick:  # identify the devices, measure nothing
            config = config.with_changes(measure=False)

        def probe() -> None:
            try:
                facts = run_probe(
                    timeout_s=timeout_s,
                    config=config,
                    environ=env,
                    python=probe_python,
                    on_step=on_step,
                )
            except Exception as error:  # run_probe is not meant to raise; never lose the report
                facts = TorchFacts(failure=f"the torch probe could not run: {error}")
            probed.append(facts)

        prober = threading.Thread(target=probe, name="doctor-probe", daemon=True)
        prober.start()
    reading = nvml if nvml is not None else nvml_facts()
    if prober is not None:
        prober.join()
        torch = probed[0]
    assert torch is not None
    facts = DoctorFacts(
        torch=torch,
        nvml=reading,
        nvidia_smi=which("nvidia-smi"),
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        cuda_device_order=env.get("CUDA_DEVICE_ORDER"),
        platform=platform_facts or current_platform(),
        python=python or python_command(which=which),
        nvml_missing_error=describe_nvml_error(LIBRARY_NOT_FOUND, ""),
        drm=drm or drm_facts(environ=env),
    )
    return diagnose(facts)
