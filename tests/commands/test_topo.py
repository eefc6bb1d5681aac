"""``gputui topo``: the GPU topology matrix, as ``nvidia-smi topo -m``, and as JSON, read
from the stand-in NVML in a child process."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import gputui

BOARD = {
    "FAKE_NVML_GPU_COUNT": "4",
    "FAKE_NVML_NVLINKS": "0:4,1:4,2:18,3:18",
    "FAKE_NVML_NVLINK_PEERS": "0:1/1/1/1,1:0/0/0/0",
    "FAKE_NVML_TOPOLOGY": "0:3:SYS",
}
"""GPUs 0 and 1 joined by four links, 2 and 3 by NVSwitches, 0 and 3 across NUMA nodes."""


def test_topo_prints_the_matrix_and_its_legend(fake_nvml_dir: Path) -> None:
    done = gputui("topo", lib_dir=fake_nvml_dir, knobs=BOARD)
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert [line.split() for line in lines[:5]] == [
        ["GPU0", "GPU1", "GPU2", "GPU3"],
        ["GPU0", "X", "NV4", "NODE", "SYS"],
        ["GPU1", "NV4", "X", "NODE", "NODE"],
        ["GPU2", "NODE", "NODE", "X", "NV18"],
        ["GPU3", "SYS", "NODE", "NV18", "X"],
    ]
    legend = "\n".join(lines[5:])
    for word in ("X", "NV#", "PIX", "PXB", "PHB", "NODE", "SYS"):
        assert f"  {word:<4} = " in legend, word
    assert all(len(line) <= 80 for line in lines)


def test_topo_json_gives_each_pair_s_ancestor_and_nvlinks(fake_nvml_dir: Path) -> None:
    done = gputui("topo", "--json", lib_dir=fake_nvml_dir, knobs=BOARD)
    assert (done.returncode, done.stderr) == (0, "")
    data = json.loads(done.stdout)
    assert data["gpus"] == [0, 1, 2, 3] and data["error"] is None
    assert data["matrix"][0] == ["X", "NV4", "NODE", "SYS"]
    pairs = {(p["gpu"], p["peer"]): (p["ancestor"], p["nvlinks"]) for p in data["pairs"]}
    assert len(pairs) == 12
    assert pairs[0, 1] == pairs[1, 0] == ("PXB", 4)
    assert pairs[2, 3] == ("PXB", 18)
    assert pairs[0, 3] == ("SYS", 0)


def test_topo_says_n_a_where_nvml_does_not_and_why_there_is_none(fake_nvml_dir: Path) -> None:
    knobs = {**BOARD, "FAKE_NVML_UNSUPPORTED": "topology,nvlink_remote"}
    done = gputui("topo", "--json", lib_dir=fake_nvml_dir, knobs=knobs)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {(p["ancestor"], p["nvlinks"]) for p in data["pairs"]} == {(None, 0)}
    assert data["matrix"][0] == ["X", "n/a", "n/a", "n/a"]

    knobs = {"FAKE_NVML_INIT_ERROR": "DRIVER_NOT_LOADED"}
    done = gputui("topo", lib_dir=fake_nvml_dir, knobs=knobs)
    assert done.returncode == 1
    assert "kernel module is not loaded" in done.stdout

    done = gputui("topo", "--timeout", "0", lib_dir=fake_nvml_dir)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--timeout" in done.stderr


def test_topo_names_the_call_that_hangs_and_leaves_it_behind(fake_nvml_dir: Path) -> None:
    knobs = {"FAKE_NVML_HANG": "topology=60", "FAKE_NVML_CRASH_ON_TEARDOWN": "1"}
    done = gputui("topo", "--timeout", "1", lib_dir=fake_nvml_dir, knobs=knobs, timeout_s=30)
    assert (done.returncode, done.stderr) == (1, "")  # no crash tearing NVML down under it
    assert done.stdout.startswith("nvmlDeviceGetTopologyCommonAncestor on GPU 0 has not returned")
