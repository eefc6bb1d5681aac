"""MPS: usable or not, and why, for each kind of machine."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputui.doctor.checks import Status
from gputui.doctor.mps import PlatformFacts, check_mps, current_platform
from gputui.doctor.torch_facts import TorchFacts
from gputui.jobs.events import MpsProbed, TorchProbed

MAC_BUILD = TorchProbed(imported=True, version="2.5.1", mps_built=True)
MAC_TORCH = TorchFacts(
    install=MAC_BUILD,
    mps=MpsProbed(available=False),
    completed=True,
)


@pytest.mark.parametrize(
    ("facts", "torch", "status", "words"),
    [
        (PlatformFacts("Linux", "x86_64"), MAC_TORCH, Status.SKIP, "only on macOS; this is Linux"),
        (PlatformFacts("Windows", "AMD64"), MAC_TORCH, Status.SKIP, "this is Windows"),
        (
            PlatformFacts("Darwin", "arm64", "14.4.1"),
            replace(MAC_TORCH, mps=MpsProbed(available=True)),
            Status.OK,
            "MPS is available (macOS 14.4.1, arm64)",
        ),
        (
            PlatformFacts("Darwin", "x86_64", "13.6", translated=True),
            MAC_TORCH,
            Status.WARN,
            "running under Rosetta",
        ),
        (
            PlatformFacts("Darwin", "x86_64", "13.6"),
            MAC_TORCH,
            Status.SKIP,
            "MPS needs an Apple silicon Mac; this one is x86_64",
        ),
        (
            PlatformFacts("Darwin", "arm64", "12.2.1"),
            MAC_TORCH,
            Status.WARN,
            "macOS 12.2.1 is too old: MPS needs macOS 12.3 or later",
        ),
        (
            PlatformFacts("Darwin", "arm64", "14.0"),
            replace(
                MAC_TORCH, install=TorchProbed(imported=True, version="2.5.1", mps_built=False)
            ),
            Status.WARN,
            "torch 2.5.1 was built without MPS",
        ),
        (
            PlatformFacts("Darwin", "arm64", "14.0"),
            MAC_TORCH,
            Status.WARN,
            "yet `torch.backends.mps.is_available()` is False",
        ),
        (
            PlatformFacts("Darwin", "arm64", "14.0"),
            TorchFacts(install=TorchProbed(imported=False, missing=True)),
            Status.SKIP,
            "torch did not import",
        ),
    ],
)
def test_mps_reasons(facts: PlatformFacts, torch: TorchFacts, status: Status, words: str) -> None:
    found = check_mps(facts, torch)
    assert found.name == "mps"
    assert found.status is status
    assert words in found.message
    if status is Status.WARN:
        assert found.fix


def test_torch_s_own_warning_says_why() -> None:
    warned = MpsProbed(available=False, warnings=("MPS: the current device is not supported",))
    torch = replace(MAC_TORCH, mps=warned)
    found = check_mps(PlatformFacts("Darwin", "arm64", "14.0"), torch)
    assert found.message.endswith("torch warned: MPS: the current device is not supported")


def test_macos_12_3_is_new_enough() -> None:
    found = check_mps(PlatformFacts("Darwin", "arm64", "12.3"), MAC_TORCH)
    assert "too old" not in found.message


def test_this_machine() -> None:
    facts = current_platform()
    assert facts.system
    assert facts.translated is False or facts.system == "Darwin"
