"""Apple's MPS backend: is it usable, and if not, why (not macOS, too old, not Apple silicon).

:class:`PlatformFacts` is read in the doctor's own process (no torch needed);
:func:`check_mps` combines it with what torch said, so every reason is tested by
injecting the facts of machines that are not this one.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

from gputui.doctor.checks import Check, Status
from gputui.doctor.torch_facts import TorchFacts
from gputui.system import read_sysctl

MPS_MIN_MACOS = (12, 3)
"""The first macOS with the MPS backend PyTorch needs."""

NAME = "mps"
"""The check's name."""


@dataclass(frozen=True, slots=True)
class PlatformFacts:
    """The operating system and processor, as this Python sees them."""

    system: str
    """``platform.system()``: ``Linux``, ``Darwin``, ``Windows``."""
    machine: str
    """``platform.machine()``: ``x86_64``, ``arm64``, ``aarch64``..."""
    mac_version: str | None = None
    """``platform.mac_ver()[0]``, e.g. ``14.4.1``; ``None`` off macOS."""
    translated: bool = False
    """True when this Python is an x86_64 build running under Rosetta 2 on Apple silicon."""


def current_platform() -> PlatformFacts:
    """Read the facts of this machine (on macOS, asks ``sysctl`` about Rosetta)."""
    system = platform.system()
    mac_version = (platform.mac_ver()[0] or None) if system == "Darwin" else None
    translated = system == "Darwin" and read_sysctl("sysctl.proc_translated", timeout_s=2.0) == "1"
    return PlatformFacts(system, platform.machine(), mac_version, translated)


def _version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    parts = text.split(".")
    if not all(part.isdigit() for part in parts):
        return None
    return tuple(int(part) for part in parts)


def check_mps(facts: PlatformFacts, torch: TorchFacts, *, python: str = "python") -> Check:
    """MPS built and available, and if not, why (what torch said may be unknown)."""
    system_name = {"Darwin": "macOS"}.get(facts.system, facts.system or "an unknown system")
    if facts.system != "Darwin":
        return Check(NAME, Status.SKIP, f"MPS exists only on macOS; this is {system_name}.")
    mac = facts.mac_version or "of unknown version"
    mps, install = torch.mps, torch.install
    if mps is not None and mps.available:
        return Check(NAME, Status.OK, f"MPS is available (macOS {mac}, {facts.machine}).")
    if facts.translated:
        return Check(
            NAME,
            Status.WARN,
            "This Python is an x86_64 build running under Rosetta on an Apple silicon Mac; "
            "torch cannot use MPS from it.",
            "install a native arm64 Python (python.org, Homebrew or uv) and torch in it",
        )
    if facts.machine not in {"arm64", "aarch64"}:
        return Check(
            NAME,
            Status.SKIP,
            f"MPS needs an Apple silicon Mac; this one is {facts.machine or 'not'} "
            "(Intel), so the CPU is the device.",
        )
    version = _version(facts.mac_version)
    if version is not None and version[:2] < MPS_MIN_MACOS:
        return Check(
            NAME,
            Status.WARN,
            f"macOS {facts.mac_version} is too old: MPS needs macOS 12.3 or later.",
            "update macOS to 12.3 or later (Apple menu > System Settings > Software Update)",
        )
    if install is None or not install.imported:
        return Check(NAME, Status.SKIP, "Unknown: torch did not import, so MPS was not asked.")
    if install.mps_built is False:
        return Check(
            NAME,
            Status.WARN,
            f"torch {install.version} was built without MPS.",
            f"{python} -m pip install --upgrade --force-reinstall torch",
        )
    if mps is None or mps.available is None:
        return Check(NAME, Status.SKIP, "Unknown: the torch probe stopped before asking MPS.")
    said = f" torch warned: {' '.join(mps.warnings)}" if mps.warnings else ""
    return Check(
        NAME,
        Status.WARN,
        f"torch {install.version} has MPS and this is macOS {mac} on {facts.machine}, "
        f"yet `torch.backends.mps.is_available()` is False.{said}",
        f"update macOS, then torch: `{python} -m pip install --upgrade torch`",
    )
