"""From facts to findings: why torch can (or cannot) use the GPUs here, and the fix.

:func:`diagnose` is pure: it reads a :class:`DoctorFacts` (what NVML, ``PATH``,
the environment, the platform and the torch probe said) and returns the report,
so each check is tested with the facts of machines that are not this one.
:func:`gputui.doctor.run.run_doctor` gathers the facts of this one.

One module for every check: each reads the same facts and writes the same findings, in the order
the report shows them; apart, each would import the others' facts and sentences.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from gputui.device import Device
from gputui.doctor.checks import Check, DeviceReport, DoctorReport, ReportFacts, Status
from gputui.doctor.mps import PlatformFacts, check_mps
from gputui.doctor.pitfalls import pitfall_checks
from gputui.doctor.rocm_xpu import DrmFacts, cpu_build_check, rocm_cuda_check, xpu_check
from gputui.doctor.torch_facts import TorchFacts
from gputui.doctor.visible import VisibleDevices, parse_visible_devices
from gputui.doctor.wheels import (
    CPU_CHANNEL,
    GpuCode,
    channel_for_driver,
    cuda_install_fix,
    format_capability,
    gpu_code,
    gpu_code_fix,
    install_command,
    parse_capability,
    parse_cuda_version,
)
from gputui.format import fmt_counted
from gputui.jobs.events import TorchProbed
from gputui.telemetry.readings import NvmlReading

LIBRARY_NOT_FOUND = 12
"""NVML's return code when there is no ``libnvidia-ml.so.1`` at all."""


@dataclass(frozen=True, slots=True)
class DoctorFacts:
    """Everything the checks read."""

    torch: TorchFacts
    """What the torch probe child said."""
    nvml: NvmlReading
    """What NVML said (the driver's view of the GPUs)."""
    nvidia_smi: str | None
    """Where ``nvidia-smi`` is on ``PATH``; ``None`` when it is not."""
    cuda_visible_devices: str | None
    """``CUDA_VISIBLE_DEVICES``; ``None`` when unset."""
    platform: PlatformFacts
    """The operating system and processor."""
    cuda_device_order: str | None = None
    """``CUDA_DEVICE_ORDER``; ``None`` when unset (CUDA then orders fastest first)."""
    python: str = "python"
    """How to name this interpreter in install commands."""
    nvml_missing_error: str | None = None
    """The sentence NVML's status carries when there is no driver library at all; with
    ``None`` no NVML failure is read as "no driver here"."""
    drm: DrmFacts = dataclasses.field(default_factory=DrmFacts)
    """AMD and Intel GPUs here, and what a ROCm or XPU build needs to reach them."""


def diagnose(facts: DoctorFacts) -> DoctorReport:
    """Every check, in reading order, and the devices the probe measured."""
    visible = parse_visible_devices(
        facts.cuda_visible_devices,
        tuple(gpu.uuid for gpu in facts.nvml.gpus) if facts.nvml.status.available else None,
    )
    checks = [check_torch(facts)]
    if facts.torch.failure is not None:
        checks.append(check_probe(facts.torch))
    checks += [
        check_driver(facts),
        check_build(facts),
        check_driver_vs_build(facts),
        check_visible_devices(facts, visible),
        check_cuda(facts, visible),
        *([xpu_check(facts.drm, facts.torch)] if _xpu_build(facts.torch) else []),
        check_gpu_code(facts),
        check_mps(facts.platform, facts.torch, python=facts.python),
    ]
    if facts.torch.pitfalls or not facts.torch.completed:  # none shown: --quick, or no torch
        checks += pitfall_checks(facts.torch, python=facts.python)
    return DoctorReport(
        checks=tuple(checks), devices=devices_on_nvml(facts), facts=report_facts(facts)
    )


def report_facts(facts: DoctorFacts) -> ReportFacts:
    """The facts a script wants, each ``None`` where it was not gathered."""
    cuda, status = facts.torch.cuda, facts.nvml.status
    install = _imported(facts.torch)
    version = build = cuda_version = None
    if install is not None:
        version = install.version
        build = install.build
        cuda_version = install.cuda_version if build == "cuda" else None
    return ReportFacts(
        torch_version=version,
        torch_build=build,
        torch_cuda_version=cuda_version,
        cuda_available=cuda.available if cuda is not None else None,
        cuda_device_count=cuda.device_count if cuda is not None else None,
        driver_version=status.driver_version,
        driver_cuda_version=status.cuda_driver_version,
        gpu_count=len(facts.nvml.gpus) if status.available else None,
        nvml_error_code=status.error_code,
    )


# ------------------------------------------------------------------ helpers


def _channel(facts: DoctorFacts) -> str | None:
    """The wheel channel for this driver; ``None`` when no driver or none fits."""
    driver = parse_cuda_version(facts.nvml.status.cuda_driver_version)
    return channel_for_driver(driver) if driver is not None else None


def _imported(torch: TorchFacts) -> TorchProbed | None:
    """What torch is, once it imported; ``None`` when it did not, or the probe never said."""
    install = torch.install
    return install if install is not None and install.imported else None


def _packages(torch: TorchFacts) -> tuple[str, ...]:
    """torch and the installed packages built against it, which must be reinstalled with it."""
    companions = torch.install.companions if torch.install is not None else {}
    return ("torch", *sorted(name for name, version in companions.items() if version))


def _cuda_install_fix(facts: DoctorFacts) -> str:
    """The exact command for a CUDA build this driver runs, or what to do when there is none."""
    return cuda_install_fix(
        facts.nvml.status.cuda_driver_version, python=facts.python, packages=_packages(facts.torch)
    )


def _driver_text(facts: DoctorFacts) -> str:
    status = facts.nvml.status
    cuda = f" (CUDA {status.cuda_driver_version})" if status.cuda_driver_version else ""
    count = len(facts.nvml.gpus)
    driver = status.driver_version or "of unknown version"
    return f"NVIDIA driver {driver}{cuda} with {fmt_counted(count, 'GPU')}"


def _no_driver(facts: DoctorFacts) -> bool:
    """True only when there is known to be no NVIDIA driver: no ``nvidia-smi``, and NVML
    failed because its library is missing (not for a version mismatch, nor a hang)."""
    status = facts.nvml.status
    if status.available or facts.nvidia_smi:
        return False
    missing = facts.nvml_missing_error
    return missing is not None and (status.error or "NVML is unavailable.") == missing


def _torch_unknown(torch: TorchFacts) -> str:
    """Why a check that needs torch's answers has none (torch did not import, or the
    probe stopped before it said whether it did)."""
    if torch.install is None:
        return "Unknown: the torch probe stopped before torch imported."
    return "Unknown: torch did not import."


def _build_text(install: TorchProbed) -> str:
    if install.hip_version:
        return f"a ROCm {install.hip_version} build"
    if install.build == "xpu":
        return "an XPU build"
    if install.cuda_version:
        return f"a CUDA {install.cuda_version} build"
    return "a CPU-only build"


def format_cudnn(version: int) -> str:
    """``90100`` -> ``9.1.0``; ``8902`` -> ``8.9.2`` (cuDNN changed its encoding at 9)."""
    if version >= 90000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"


# ------------------------------------------------------------------- checks


def check_torch(facts: DoctorFacts) -> Check:
    """torch is installed and imports; its version and build."""
    install = facts.torch.install
    where = f" in {facts.python}" if facts.python != "python" else ""
    if install is None:
        return Check("torch", Status.SKIP, "Unknown: the torch probe stopped before it said.")
    fix_channel = _channel(facts)
    if not install.imported:
        if fix_channel is not None:
            fix = install_command(fix_channel, python=facts.python, replace=not install.missing)
        elif install.missing:
            fix = f"{facts.python} -m pip install torch"
        else:
            fix = f"{facts.python} -m pip install --force-reinstall torch"
        if install.missing:
            return Check("torch", Status.FAIL, f"torch is not installed{where}.", fix)
        return Check(
            "torch", Status.FAIL, f"torch does not import{where}: {install.import_error}", fix
        )
    cuda = facts.torch.cuda
    cudnn_version = cuda.cudnn_version if cuda is not None else None
    cudnn = f", cuDNN {format_cudnn(cudnn_version)}" if cudnn_version else ""
    return Check(
        "torch",
        Status.OK,
        f"torch {install.version} imports{where}: {_build_text(install)}{cudnn}.",
    )


def check_probe(torch: TorchFacts) -> Check:
    """The probe child itself: it must finish in time."""
    message = (torch.failure or "the torch probe failed").rstrip(".")
    message = message[0].upper() + message[1:] + "; what it said before is shown."
    if torch.timed_out:
        fix = (
            "if it hung initialising CUDA, the driver is wedged: check nvidia-smi and "
            "`sudo dmesg | grep -i nvrm`, then reboot; if the machine is only slow, "
            "give it longer with `gputui doctor --timeout SECONDS`"
        )
    else:
        fix = "run `python -m gputui.engine probe '{}'` to see the whole error"
    return Check("torch probe", Status.FAIL, message, fix)


def check_driver(facts: DoctorFacts) -> Check:
    """NVML and nvidia-smi: both, one without the other, or neither."""
    status = facts.nvml.status
    smi = facts.nvidia_smi
    if status.available and not facts.nvml.gpus:
        return Check(
            "nvidia driver",
            Status.WARN,
            f"NVML answers ({status.driver_version or 'driver of unknown version'}) "
            "but reports no GPU.",
            "run nvidia-smi; `sudo dmesg | grep -i nvrm` shows whether a GPU fell off the bus",
        )
    if status.available and smi:
        return Check("nvidia driver", Status.OK, f"{_driver_text(facts)}; nvidia-smi at {smi}.")
    if status.available:
        major = (status.driver_version or "").split(".")[0]
        package = f"nvidia-utils-{major}" if major.isdigit() else "the driver's utilities"
        return Check(
            "nvidia driver",
            Status.WARN,
            f"NVML reports {_driver_text(facts)}, but nvidia-smi is not on PATH.",
            f"install the driver's utilities (Debian/Ubuntu: `sudo apt install {package}`) or "
            "add their folder to PATH; in a container, run it with `--gpus all`",
        )
    error = status.error or "NVML is unavailable."
    if smi:
        return Check(
            "nvidia driver",
            Status.FAIL,
            f"nvidia-smi is at {smi}, but NVML does not answer: {error}",
            "run nvidia-smi: if it fails too, reinstall the driver or reboot; if it works, "
            "this process cannot load libnvidia-ml.so.1: add its folder to LD_LIBRARY_PATH",
        )
    if not _no_driver(facts):
        return Check("nvidia driver", Status.FAIL, error, "see the sentence above")
    return Check("nvidia driver", Status.SKIP, "No NVIDIA driver here (no NVML, no nvidia-smi).")


def check_build(facts: DoctorFacts) -> Check:
    """A CPU-only torch where NVML reports a driver, or beside AMD or Intel GPUs, gets the
    install command."""
    name = "torch build"
    install = _imported(facts.torch)
    if install is None:
        return Check(name, Status.SKIP, _torch_unknown(facts.torch))
    if install.hip_version:
        return Check(name, Status.OK, f"A{_build_text(install)[1:]} (AMD GPUs are 'cuda').")
    if install.cuda_version and _no_driver(facts) and not facts.drm.cards:
        return Check(
            name,
            Status.OK,
            f"Built for CUDA {install.cuda_version}, but there is no NVIDIA driver here: its "
            "CUDA libraries, several GB, go unused; PyTorch's CPU build is a fraction of the size.",
            install_command(CPU_CHANNEL, python=facts.python, packages=_packages(facts.torch)),
        )
    if install.cuda_version:
        return Check(name, Status.OK, f"Built for CUDA {install.cuda_version}.")
    if install.build == "xpu":
        return Check(name, Status.OK, "An XPU build (Intel GPUs are 'xpu').")
    if facts.nvml.status.available:
        return Check(
            name,
            Status.FAIL if facts.nvml.gpus else Status.WARN,
            f"torch {install.version} is a CPU-only build (`torch.version.cuda` is None), "
            f"but NVML reports {_driver_text(facts)}.",
            _cuda_install_fix(facts),
        )
    if facts.platform.system == "Darwin":
        return Check(name, Status.OK, "A macOS build: no CUDA there; Apple GPUs use MPS.")
    other = cpu_build_check(
        facts.drm, install.version, python=facts.python, packages=_packages(facts.torch)
    )
    if other is not None:
        return other
    if _no_driver(facts):
        return Check(name, Status.OK, "A CPU-only build, and no NVIDIA driver here to miss.")
    return Check(
        name,
        Status.SKIP,
        "A CPU-only build; whether it misses NVIDIA GPUs is unknown, as NVML does not answer.",
    )


def check_driver_vs_build(facts: DoctorFacts) -> Check:
    """The driver's CUDA version against the one torch was built with."""
    torch = facts.torch
    name = "driver vs build"
    install = _imported(torch)
    if install is None:
        return Check(name, Status.SKIP, _torch_unknown(torch))
    built = parse_cuda_version(install.cuda_version)
    if built is None or install.hip_version:
        return Check(name, Status.SKIP, f"Nothing to compare: torch is {_build_text(install)}.")
    driver = parse_cuda_version(facts.nvml.status.cuda_driver_version)
    if not facts.nvml.status.available or driver is None:
        return Check(name, Status.SKIP, "NVML did not say which CUDA version the driver supports.")
    driver_text = facts.nvml.status.cuda_driver_version
    if driver >= built:
        return Check(
            name,
            Status.OK,
            f"The driver supports CUDA {driver_text}; torch needs {install.cuda_version} or newer.",
        )
    fix = _too_old_fix(facts, install)
    if driver[0] == built[0] and torch.cuda is not None and torch.cuda.available:
        return Check(
            name,
            Status.WARN,
            f"The driver supports CUDA {driver_text}, older than torch's {install.cuda_version}; "
            "it runs through CUDA minor-version compatibility, but kernels JIT-compiled "
            "from PTX can fail.",
            fix,
        )
    return Check(
        name,
        Status.FAIL,
        f"The driver supports CUDA {driver_text}, too old for torch {install.version}, "
        f"built for CUDA {install.cuda_version}.",
        fix,
    )


def _too_old_fix(facts: DoctorFacts, install: TorchProbed) -> str:
    """A newer driver, or the command for a build this one runs."""
    return (
        f"update the NVIDIA driver to one for CUDA {install.cuda_version} or later, or install "
        f"a build this driver runs: `{_cuda_install_fix(facts)}`"
    )


def _gpu_label(facts: DoctorFacts, index: int) -> str:
    gpus = facts.nvml.gpus
    return f"GPU {index} ({gpus[index].name})" if index < len(gpus) else f"GPU {index}"


def devices_on_nvml(facts: DoctorFacts) -> tuple[DeviceReport, ...]:
    """The probe's devices, each CUDA one with the NVML GPU of the same UUID.

    ``cuda:i`` is not NVML's GPU ``i``: CUDA orders devices fastest first by default,
    and ``CUDA_VISIBLE_DEVICES`` renumbers them.
    """
    by_uuid = {gpu.uuid: gpu.index for gpu in facts.nvml.gpus if gpu.uuid}
    return tuple(
        dataclasses.replace(device, nvml_index=by_uuid[device.uuid])
        if device.uuid in by_uuid
        else device
        for device in facts.torch.devices
    )


def check_visible_devices(facts: DoctorFacts, visible: VisibleDevices) -> Check:
    """``CUDA_VISIBLE_DEVICES`` hiding GPUs, or naming ones that do not exist."""
    name = "CUDA_VISIBLE_DEVICES"
    count = len(facts.nvml.gpus) if facts.nvml.status.available else None
    if not visible.is_set:
        every = f": torch may use {_all_gpus(count)}" if count else ""
        return Check(name, Status.OK, f"Not set{every}.")
    shown = f"CUDA_VISIBLE_DEVICES={visible.raw!r}"
    every = ",".join(str(i) for i in range(count)) if count else "0"
    fix = f"`unset CUDA_VISIBLE_DEVICES`, or list GPUs that exist: `export {name}={every}`"
    if visible.problems:
        sees = ""
        if visible.visible is not None and count is not None:
            sees = f" So torch sees {len(visible.visible)} of {fmt_counted(count, 'GPU')}."
        return Check(name, Status.FAIL, f"{shown}: {'; '.join(visible.problems)}.{sees}", fix)
    if visible.hides_all:
        if count:
            return Check(name, Status.FAIL, f"{shown} hides {_all_gpus(count)} from torch.", fix)
        return Check(name, Status.WARN, f"{shown} hides every GPU from torch.", fix)
    if visible.mig:
        return Check(
            name,
            Status.SKIP,
            f"{shown} names {fmt_counted(len(visible.kept), 'MIG slice')}, "
            "which gputui cannot check.",
        )
    if visible.visible is None or count is None:
        return Check(name, Status.SKIP, f"{shown}; NVML is unavailable, so it cannot be checked.")
    mapping = ", ".join(
        f"{Device('cuda', n)} is {_gpu_label(facts, index)}"
        for n, index in enumerate(visible.visible)
    )
    order_note = _order_note(facts, visible)
    hidden = [i for i in range(count) if i not in visible.visible]
    if hidden:
        hides = ", ".join(str(i) for i in hidden)
        return Check(
            name,
            Status.WARN,
            f"{shown} hides GPU {hides} ({len(visible.visible)} of {count} visible): "
            f"{mapping}.{order_note}",
            "`unset CUDA_VISIBLE_DEVICES` if torch should use every GPU",
        )
    status = Status.WARN if order_note else Status.OK
    return Check(name, status, f"{shown} shows {_all_gpus(count)}: {mapping}.{order_note}")


def _all_gpus(count: int) -> str:
    """``all 2 GPUs``, or ``the one GPU`` (never "all 1 GPUs")."""
    return "the one GPU" if count == 1 else f"all {count} GPUs"


def _order_note(facts: DoctorFacts, visible: VisibleDevices) -> str:
    """CUDA numbers GPUs fastest first; nvidia-smi by PCI bus. They differ on mixed machines."""
    names = {gpu.name for gpu in facts.nvml.gpus}
    uses_indexes = bool(visible.kept) and not visible.kept[0].startswith(("GPU-", "MIG-"))
    if len(names) < 2 or not uses_indexes or facts.cuda_device_order == "PCI_BUS_ID":
        return ""
    return (
        " These GPUs differ, and CUDA numbers them fastest first, not as nvidia-smi does: "
        "set CUDA_DEVICE_ORDER=PCI_BUS_ID so the indexes match."
    )


_CUDA_ERROR_FIXES: tuple[tuple[str, str], ...] = (
    (
        r"\b803\b|unsupported display driver",
        "the driver's kernel module and libraries differ (usually after an update): reboot",
    ),
    (
        r"\b804\b|forward compatibility",
        "a CUDA forward-compatibility library is loaded on a GPU that does not support it: "
        "remove cuda-compat from LD_LIBRARY_PATH",
    ),
    (
        r"\b999\b|unknown error",
        "reload the unified-memory module: `sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm`, "
        "or reboot (often after suspend)",
    ),
    (r"no NVIDIA driver", "install the NVIDIA driver, then check that nvidia-smi works"),
)


def check_cuda(facts: DoctorFacts, visible: VisibleDevices) -> Check:
    """``torch.cuda.is_available()`` and ``device_count()``, with the error when CUDA fails."""
    torch = facts.torch
    name = "torch.cuda"
    install, cuda = _imported(torch), torch.cuda
    if install is None:
        return Check(name, Status.SKIP, _torch_unknown(torch))
    if cuda is None or cuda.available is None:
        return Check(name, Status.SKIP, "Unknown: the torch probe stopped before asking CUDA.")
    count = cuda.device_count or 0
    if cuda.available:
        names = [f"{d.device} {d.name}" for d in torch.devices if d.device.kind == "cuda"]
        listed = f": {', '.join(names)}" if names else ""
        message = f"`is_available()` is True, `device_count()` is {count}{listed}."
        if install.hip_version:
            return rocm_cuda_check(facts.drm, message, available=True, count=count)
        expected = len(visible.visible) if visible.visible is not None else None
        if expected is not None and expected != count:
            return Check(
                name,
                Status.WARN,
                f"{message} NVML and CUDA_VISIBLE_DEVICES leave "
                f"{fmt_counted(expected, 'GPU')} visible.",
                "run nvidia-smi: a GPU torch cannot open may be in use by another process in "
                "exclusive mode, or broken",
            )
        return Check(name, Status.OK, message)
    errors = [*cuda.warnings, *([cuda.init_error] if cuda.init_error else [])]
    said = f": {' '.join(errors)}" if errors else "."
    message = f"`is_available()` is False, `device_count()` is {count}{said}"
    if install.hip_version:
        return rocm_cuda_check(facts.drm, message, available=False, count=count)
    if (facts.nvml.status.available and not facts.nvml.gpus) or _no_driver(facts):
        return Check(name, Status.SKIP, f"No NVIDIA GPU to use here; {message}")
    if not facts.nvml.status.available:
        return Check(
            name,
            Status.SKIP,
            f"NVML does not answer, so whether there is a GPU is unknown; {message}",
        )
    return Check(name, Status.FAIL, message, _cuda_fix(facts, install, visible, " ".join(errors)))


def _cuda_fix(facts: DoctorFacts, install: TorchProbed, visible: VisibleDevices, error: str) -> str:
    if not install.cuda_version and not install.hip_version:
        return _cuda_install_fix(facts)
    if visible.hides_all:
        return "`unset CUDA_VISIBLE_DEVICES` (it hides every GPU)"
    built = parse_cuda_version(install.cuda_version)
    driver = parse_cuda_version(facts.nvml.status.cuda_driver_version)
    if built is not None and driver is not None and driver < built:
        return _too_old_fix(facts, install)
    for pattern, fix in _CUDA_ERROR_FIXES:
        if re.search(pattern, error, re.IGNORECASE):
            return fix
    return "nvidia-smi and `sudo dmesg | grep -i nvrm` say more about what the driver refuses"


def check_gpu_code(facts: DoctorFacts) -> Check:
    """Each CUDA GPU's compute capability against the code this torch carries
    (``torch.cuda.get_arch_list()``): a GPU it has no code for fails every kernel."""
    torch = facts.torch
    name = "GPU code"
    install = _imported(torch)
    if install is None:
        return Check(name, Status.SKIP, _torch_unknown(torch))
    if not install.cuda_version or install.hip_version:
        return Check(name, Status.SKIP, f"Nothing to check: torch is {_build_text(install)}.")
    gpus = [
        (device, capability)
        for device in torch.devices
        if device.device.kind == "cuda"
        and (capability := parse_capability(device.compute_capability)) is not None
    ]
    if not gpus:
        return Check(name, Status.SKIP, "No CUDA GPU was read, so there is nothing to check.")
    arches = torch.cuda.arch_list if torch.cuda is not None else ()
    if not arches:
        return Check(name, Status.SKIP, "The probe did not say which GPU code torch carries.")
    carried = f"torch {install.version} carries {' '.join(arches)}"
    machine = install.platform.get("machine") or facts.platform.machine
    driver, packages = facts.nvml.status.cuda_driver_version, _packages(torch)
    verdicts = {device.device: gpu_code(capability, arches) for device, capability in gpus}
    for verdict in (GpuCode.NONE, GpuCode.PTX):
        capability = next((c for d, c in gpus if verdicts[d.device] is verdict), None)
        if capability is None:
            continue
        hit = [(d, c) for d, c in gpus if verdicts[d.device] is verdict and c == capability]
        has = "has" if len(hit) == 1 else "have"
        which = f"{_gpus_text(hit)} {has} compute capability {format_capability(capability)}"
        fix = gpu_code_fix(capability, machine, driver, python=facts.python, packages=packages)
        if verdict is GpuCode.NONE:
            return Check(
                name,
                Status.FAIL,
                f"{which}, but {carried}: no sm_{capability // 10}x and no PTX it could "
                "compile, so every CUDA kernel fails with 'no kernel image is available for "
                "execution on the device'.",
                fix,
            )
        return Check(
            name,
            Status.WARN,
            f"{which}, and {carried}: no compiled code for it, only PTX, which the driver "
            "compiles at first use (minutes at start, and slower kernels).",
            fix,
        )
    return Check(name, Status.OK, f"{carried}: code for {_gpus_text(gpus, capability=True)}.")


def _xpu_build(torch: TorchFacts) -> bool:
    install = _imported(torch)
    return install is not None and install.build == "xpu"


def _gpus_text(gpus: list[tuple[DeviceReport, int]], *, capability: bool = False) -> str:
    """``cuda:0 and cuda:1 (NVIDIA H100 80GB HBM3)``: the GPUs, grouped by kind."""
    kinds: dict[str, list[str]] = {}
    for device, code in gpus:
        kind = f"{device.name}, {format_capability(code)}" if capability else device.name
        kinds.setdefault(kind, []).append(str(device.device))
    return " and ".join(f"{_and(devices)} ({kind})" for kind, devices in kinds.items())


def _and(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
