"""Matching NVML's host pids to local processes by who maps a GPU's device node.

The end-to-end case (a real pid namespace, real processes mapping the nodes) is
``tests/telemetry/nvml/test_processes.py::test_in_a_pid_namespace_the_one_local_process_mapping_a_gpu_is_matched``;
these are the rule's edges, and the map reader on this machine's real /proc.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gputui.telemetry.devnodes import match_host_pids, node_mappers


def test_one_process_listed_and_one_mapping_is_a_match() -> None:
    assert match_host_pids({0: [4242]}, {0: {17}}) == {4242: 17}


def test_two_listed_or_two_mapping_prove_nothing() -> None:
    assert match_host_pids({0: [4242, 4343]}, {0: {17}}) == {}
    assert match_host_pids({0: [4242]}, {0: {17, 18}}) == {}
    assert match_host_pids({0: [4242]}, {}) == {}


def test_the_same_process_on_two_gpus_is_one_match() -> None:
    assert match_host_pids({0: [4242], 1: [4242]}, {0: {17}, 1: {17}}) == {4242: 17}


def test_a_match_contradicted_by_another_gpu_is_dropped() -> None:
    # local 17 would be host 4242 by GPU 0 and host 4343 by GPU 1: neither holds
    assert match_host_pids({0: [4242], 1: [4343]}, {0: {17}, 1: {17}}) == {}
    # host 4242 would be local 17 by GPU 0 and local 18 by GPU 1
    assert match_host_pids({0: [4242], 1: [4242]}, {0: {17}, 1: {18}}) == {}


def test_node_mappers_reads_real_memory_maps(tmp_path: Path) -> None:
    """A fake /proc whose one process's maps name /dev/nvidia3 (as the kernel writes the
    line), beside this process's real maps, which map none."""
    proc = tmp_path / "proc"
    (proc / "17").mkdir(parents=True)
    (proc / "17" / "maps").write_text(
        "7f4c00000000-7f4c00200000 rw-s 00000000 00:05 1234   /dev/nvidia3\n"
        "7f4c00200000-7f4c00400000 rw-s 00000000 00:05 1235   /dev/nvidiactl\n"
        "7f4c00400000-7f4c00600000 rw-s 00000000 00:05 1236   /dev/nvidia-uvm\n"
    )
    (proc / "self").mkdir()
    (proc / "99").mkdir()  # a process that ended: no maps
    assert node_mappers(proc) == {3: {17}}
    assert node_mappers(proc, exclude=[17]) == {}


def test_a_file_a_user_names_like_the_node_is_not_the_node(tmp_path: Path) -> None:
    """A real process maps a file of its own at ``x\\r /dev/nvidia0`` (a line of its own to
    universal newlines, and a suffix a search finds): it is no mapper of GPU 0."""
    planted = tmp_path / "x\r " / "dev" / "nvidia0"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(bytes(4096))
    code = (
        "import mmap, sys, time\n"
        "f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 4096, access=mmap.ACCESS_READ)\n"
        "print(flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(planted)], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"\n"  # mapped
        maps = Path(f"/proc/{child.pid}/maps").read_bytes()
        assert os.fsencode(planted) in maps
        assert child.pid not in node_mappers(Path("/proc")).get(0, set())
    finally:
        child.kill()
        child.wait()
