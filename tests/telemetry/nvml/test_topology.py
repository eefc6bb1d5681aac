"""The GPU-to-GPU topology (``gputui.telemetry.nvml.topology``), read through the real
bindings from the stand-in NVML (``tests/fakenvml``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.readings import GpuTopology
from tests.fakenvml import FakeNvml


def labels(topology: GpuTopology) -> list[list[str]]:
    return [[path.label for path in row] for row in topology.paths]


def test_pairs_read_their_nvlinks_direct_or_through_switches_else_their_pcie_ancestor(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    """GPUs 0 and 1 share four direct links; 2 and 3 have 18 each to NVSwitches; 0 and 3
    meet at a host bridge; the rest as an HGX board's PCIe tree (2k and 2k+1 behind one
    switch, four to a NUMA node)."""
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "4")
    fake_nvml_env.setenv("FAKE_NVML_NVLINKS", "0:4,1:4,2:18,3:18")
    fake_nvml_env.setenv("FAKE_NVML_NVLINK_PEERS", "0:1/1/1/1,1:0/0/0/0")
    fake_nvml_env.setenv("FAKE_NVML_TOPOLOGY", "0:3:PHB")
    with NvmlSampler() as sampler:
        topology = sampler.topology()
    assert topology.error is None
    assert topology.gpus == (0, 1, 2, 3)
    assert labels(topology) == [
        ["X", "NV4", "NODE", "PHB"],
        ["NV4", "X", "NODE", "NODE"],
        ["NODE", "NODE", "X", "NV18"],
        ["PHB", "NODE", "NV18", "X"],
    ]
    assert topology.paths[0][1].ancestor == "PXB"  # under the NVLinks, still told
    assert fake_nvml.calls("nvmlDeviceGetTopologyCommonAncestor") == 12  # each ordered pair
    # Each GPU's links, then one past its last (NotSupported), asked once each.
    links = [fake_nvml.calls("nvmlDeviceGetNvLinkRemotePciInfo_v2", i) for i in range(4)]
    assert links == [5, 5, 19, 19]


@pytest.mark.parametrize("how", ["NotSupported", "no such function"])
def test_a_driver_that_does_not_say_reads_n_a_and_never_raises(
    load_nvml: Callable[..., FakeNvml], fake_nvml_env: pytest.MonkeyPatch, how: str
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_NVLINKS", "0:18,1:18,2:18")
    if how == "NotSupported":
        fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "topology,nvlink_remote,nvlink")
        fake = load_nvml()
    else:
        fake = load_nvml(
            omit=["nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetNvLinkRemotePciInfo_v2"]
        )
    with NvmlSampler() as sampler:
        reading = sampler.sample()
        topology = sampler.topology()
    assert topology.error is None and topology.gpus == (0, 1, 2)
    assert labels(topology) == [["X", "n/a", "n/a"], ["n/a", "X", "n/a"], ["n/a", "n/a", "X"]]
    assert all(gpu.state.value == "ok" for gpu in reading.gpus)
    if how == "NotSupported":  # asked once a GPU, then never again
        assert fake.calls("nvmlDeviceGetTopologyCommonAncestor") == 3


def test_a_lost_gpu_is_left_out_and_no_nvml_says_why(
    load_nvml: Callable[..., FakeNvml], fake_nvml_env: pytest.MonkeyPatch
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_LOST", "1:0")
    load_nvml()
    with NvmlSampler() as sampler:
        topology = sampler.topology()
    assert topology.gpus == (0, 2)
    assert labels(topology) == [["X", "NODE"], ["NODE", "X"]]

    fake_nvml_env.setenv("FAKE_NVML_INIT_ERROR", "DRIVER_NOT_LOADED")
    load_nvml()
    with NvmlSampler() as sampler:
        topology = sampler.topology()
    assert (topology.gpus, topology.paths) == ((), ())
    assert topology.error is not None and "kernel module is not loaded" in topology.error
    closed = NvmlSampler()
    closed.close()
    assert closed.topology().error is not None


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("FAKE_NVML_TOPOLOGY", "0:1"),
        ("FAKE_NVML_TOPOLOGY", "0:1:NEAR"),
        ("FAKE_NVML_TOPOLOGY", "0:64:SYS"),
        ("FAKE_NVML_NVLINK_PEERS", "0:1/x"),
        ("FAKE_NVML_NVLINK_PEERS", "0:" + "/".join(["1"] * 19)),
        ("FAKE_NVML_NVLINK_TX_KIB", "0:-5"),
    ],
)
def test_a_malformed_topology_or_nvlink_knob_fails_init_saying_so(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    variable: str,
    value: str,
) -> None:
    import pynvml

    fake_nvml_env.setenv(variable, value)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlInit()
    assert f"fake_nvml: bad {variable}" in capfd.readouterr().err
