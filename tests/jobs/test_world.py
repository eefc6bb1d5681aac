"""torch.distributed's backend for each device, chosen without torch."""

from __future__ import annotations

import pytest

from gputui.jobs.config import ConfigError
from gputui.jobs.world import backend_for, backend_text


@pytest.mark.parametrize(
    ("device_type", "backend"), [("cpu", "gloo"), ("cuda", "nccl"), ("xpu", "xccl")]
)
def test_each_device_type_gets_its_backend(device_type: str, backend: str) -> None:
    assert backend_for(device_type) == backend


def test_xpu_without_xccl_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as refused:
        backend_for("xpu", xccl_available=False)
    assert "\n" not in str(refused.value)
    assert str(refused.value).startswith("this torch has no XCCL")
    assert backend_for("cuda", xccl_available=False) == "nccl"  # only XPU needs it


@pytest.mark.parametrize(
    ("backend", "build", "text"),
    [
        ("nccl", "rocm", "nccl (RCCL)"),
        ("nccl", "cuda", "nccl"),
        ("gloo", "rocm", "gloo"),
        ("xccl", "xpu", "xccl"),
    ],
)
def test_nccl_on_a_rocm_build_is_named_rccl(backend: str, build: str, text: str) -> None:
    assert backend_text(backend, build) == text
