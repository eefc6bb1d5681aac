"""The processes NVML lists, joined with psutil and the pid namespace
(``gputui.telemetry.nvml.processes``), against the stand-in libnvidia-ml.so.1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from gputui.telemetry.nvml import NvmlSampler
from tests.fakenvml import FakeNvml
from tests.fakeprocfs import FakeProcfs, started
from tests.helpers import ROOT, in_pid_namespace
from tests.telemetry.nvml.conftest import FakeClock, gpu


def test_processes_are_joined_with_psutil(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    me = psutil.Process()
    gone = next(pid for pid in range(4_000_000, 4_100_000) if not psutil.pid_exists(pid))
    fake_nvml_env.setenv(
        "FAKE_NVML_PROCESSES", f"0:{me.pid}:1073741824,0:{gone}:2048,1:{me.pid}:na"
    )
    fake_nvml_env.setenv("FAKE_NVML_GRAPHICS_PROCESSES", f"1:{me.pid}:5,1:1:4096")
    first, second = sampler.sample(), sampler.sample()

    for reading in (first, second):
        mine, ghost = gpu(reading, 0).processes
        assert (mine.pid, mine.kind, mine.gpu_memory_bytes) == (me.pid, "compute", 2**30)
        assert mine.user == me.username()
        assert mine.command == " ".join(me.cmdline())
        assert mine.create_time == me.create_time()  # what a signal checks the pid against
        assert (ghost.pid, ghost.user, ghost.command, ghost.gpu_memory_bytes) == (
            gone,
            None,
            None,
            2048,
        )
        assert ghost.create_time is None
        # GPU 1: this process is in both lists (shown once, as compute+graphics, with the
        # compute list's memory: none); PID 1 is a graphics process whose owner psutil can tell.
        both, init = gpu(reading, 1).processes
        assert (both.pid, both.kind, both.gpu_memory_bytes) == (me.pid, "compute+graphics", None)
        assert (init.pid, init.kind, init.gpu_memory_bytes) == (1, "graphics", 4096)
        assert init.user == _username_or_none(1)


def test_processes_that_come_and_go_are_listed_as_the_stand_in_s_file_says(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, tmp_path: Path
) -> None:
    """FAKE_NVML_PROCESSES_FILE, read at each listing (the recorder's tests start and end
    processes with it); graphics processes stay as FAKE_NVML_GRAPHICS_PROCESSES says."""
    listed = tmp_path / "processes"
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES_FILE", str(listed))
    fake_nvml_env.setenv("FAKE_NVML_GRAPHICS_PROCESSES", "1:1:4096")
    pids = []
    for text in ("", "0:4242:1024\n", "0:4242:1024,0:4343:2048,1:77:5", "1:77:5"):
        listed.write_text(text)
        reading = sampler.sample()
        pids.append([[p.pid for p in gpu(reading, i).processes or ()] for i in (0, 1)])
    listed.unlink()
    pids.append([[p.pid for p in gpu(sampler.sample(), i).processes or ()] for i in (0, 1)])
    assert pids == [
        [[], [1]],
        [[4242], [1]],
        [[4242, 4343], [77, 1]],
        [[], [77, 1]],
        [[], [1]],  # no file: none
    ]


def test_processes_have_their_host_cpu_memory_and_elapsed_time(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    """Read from the psutil object cached per (pid, start time): CPU % is unknown on the
    first reading (nothing to measure from) and known on the next, on every GPU that lists
    the process (read once a sample: a second call would measure a few microseconds)."""
    me = psutil.Process()
    gone = next(pid for pid in range(4_000_000, 4_100_000) if not psutil.pid_exists(pid))
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", f"0:{me.pid}:1024,0:{gone}:2048,1:{me.pid}:1024")
    readings = []
    for _ in range(3):
        before = time.time()
        readings.append(sampler.sample())
        after = time.time()
        (mine, ghost), (also_mine,) = (gpu(readings[-1], i).processes for i in (0, 1))
        assert also_mine == mine
        assert mine.elapsed_s is not None
        assert before - me.create_time() <= mine.elapsed_s <= after - me.create_time()
        assert mine.rss_bytes is not None and 0 < mine.rss_bytes < me.memory_info().vms
        assert (ghost.cpu_percent, ghost.rss_bytes, ghost.elapsed_s) == (None, None, None)
    cpu = [gpu(reading, 0).processes[0].cpu_percent for reading in readings]  # type: ignore[index]
    assert cpu[0] is None and cpu[1] is not None and cpu[2] is not None
    assert cpu[1] >= 0 and cpu[2] >= 0


@pytest.mark.parametrize("linux", [True, False], ids=["stat", "psutil elsewhere"])
def test_a_spinning_process_s_cpu_percent_is_the_share_of_a_core_it_had(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, linux: bool
) -> None:
    """CPU % comes from the process's ``stat`` read once a sample on Linux (psutil's figures
    elsewhere): between two samples it is the CPU time the spinner had over the time between
    them, which psutil's own figures, read around each sample, bound from both sides."""
    fake_nvml_env.setattr("gputui.telemetry.nvml.processes._LINUX", linux)
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        spinner = psutil.Process(child.pid)
        fake_nvml_env.setenv("FAKE_NVML_PROCESSES", f"0:{child.pid}:1024")

        def cpu_s() -> float:
            times = spinner.cpu_times()
            return times.user + times.system

        wall0, cpu0 = time.monotonic(), cpu_s()
        sampler.sample()
        wall1, cpu1 = time.monotonic(), cpu_s()
        time.sleep(0.5)
        wall2, cpu2 = time.monotonic(), cpu_s()
        reading = sampler.sample()
        wall3, cpu3 = time.monotonic(), cpu_s()
    finally:
        child.kill()
        child.wait()
    (process,) = gpu(reading, 0).processes or ()
    assert process.cpu_percent is not None
    tick = 1 / os.sysconf("SC_CLK_TCK")  # each figure is whole ticks: one either side
    least = max(cpu2 - cpu1 - 2 * tick, 0) / (wall3 - wall0) * 100
    most = (cpu3 - cpu0 + 2 * tick) / (wall2 - wall1) * 100
    assert least <= process.cpu_percent <= most
    assert process.rss_bytes is not None and process.rss_bytes > 1 << 20


def test_a_pid_taken_over_by_another_process_is_looked_up_again(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, tmp_path: Path
) -> None:
    """The identity is kept while the pid's ``stat`` gives the same start time; a process
    that takes the pid over (a new start time) gets its own user and command, and its CPU %
    counts from its own first reading, never from the one before's CPU time."""
    procfs = FakeProcfs(tmp_path)
    fake_nvml_env.setattr(psutil, "PROCFS_PATH", str(procfs.root))
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", "0:4242:1024")
    ticks = os.sysconf("SC_CLK_TCK")
    folder = procfs.process(4242, ("python3", "train.py"), start_ticks=5000, cpu_ticks=(100, 0))
    wall0 = time.monotonic()
    first = gpu(sampler.sample(), 0).processes
    wall1 = time.monotonic()
    shutil.rmtree(folder)  # the same process, half a second of CPU and 16 MiB later
    procfs.process(
        4242, ("python3", "train.py"), start_ticks=5000, cpu_ticks=(100, 50), rss_pages=4096
    )
    wall2 = time.monotonic()
    second = gpu(sampler.sample(), 0).processes
    wall3 = time.monotonic()
    shutil.rmtree(folder)  # another process, under the same pid
    procfs.process(4242, ("python3", "eval.py"), start_ticks=9000, cpu_ticks=(10, 0))
    third = gpu(sampler.sample(), 0).processes
    assert first and second and third
    assert [p.command for p in (*first, *second, *third)] == [
        "python3 train.py",
        "python3 train.py",
        "python3 eval.py",
    ]
    assert first[0].cpu_percent is None  # nothing to count from yet
    cpu = second[0].cpu_percent
    assert cpu is not None
    assert 50 / ticks / (wall3 - wall0) * 100 <= cpu <= 50 / ticks / (wall2 - wall1) * 100
    assert second[0].rss_bytes == 4096 * os.sysconf("SC_PAGE_SIZE")
    assert third[0].cpu_percent is None  # a new process: not counted from 150 ticks
    assert third[0].create_time == started(9000)


def test_each_process_has_its_sm_utilization_from_one_ask_per_gpu_and_sample(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", "0:100:1024,0:200:1024,0:300:1024,2:400:1024")
    fake_nvml_env.setenv("FAKE_NVML_PROCESS_UTILIZATION", "0:100:87,0:200:3")
    readings = [sampler.sample() for _ in range(3)]

    for reading in readings:
        busy, light, idle = gpu(reading, 0).processes  # type: ignore[misc]
        assert (busy.pid, busy.sm_utilization_percent) == (100, 87.0)
        assert (light.pid, light.sm_utilization_percent) == (200, 3.0)
        assert (idle.pid, idle.sm_utilization_percent) == (300, 0.0)  # no sample: no kernel
        (alone,) = gpu(reading, 2).processes  # type: ignore[misc]
        assert alone.sm_utilization_percent == 0.0  # NotFound: no sample on that GPU at all
    # One ask per sample on a GPU with processes (the bindings' size query, then the fill);
    # none on GPU 1, which has none.
    assert fake_nvml.calls("nvmlDeviceGetProcessUtilization", 0) == 2 * 3
    assert fake_nvml.calls("nvmlDeviceGetProcessUtilization", 2) == 3
    assert fake_nvml.calls("nvmlDeviceGetProcessUtilization", 1) == 0


def test_process_samples_are_asked_from_just_before_the_newest_answered(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", "0:100:1024")
    fake_nvml_env.setenv("FAKE_NVML_PROCESS_UTILIZATION", "0:100:50")
    since = []
    for _ in range(3):
        sampler.sample()
        since.append(fake_nvml.last_seen_timestamp(0))

    assert since[0] == 0  # at first, every sample the driver holds
    assert 0 < since[1] < since[2]  # then only the recent ones, kept per GPU


def test_sm_utilization_nvml_does_not_give_is_none(
    load_nvml: Callable[..., FakeNvml], fake_nvml_env: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", "0:100:1024,1:200:1024")
    fake_nvml_env.setenv("FAKE_NVML_PROCESS_UTILIZATION", "0:100:50,1:200:60")
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "1:process_utilization")
    fake = load_nvml()
    with NvmlSampler(clock=clock) as sampler:
        readings = [sampler.sample() for _ in range(2)]
    for reading in readings:
        assert gpu(reading, 0).processes[0].sm_utilization_percent == 50.0  # type: ignore[index]
        assert gpu(reading, 1).processes[0].sm_utilization_percent is None  # type: ignore[index]
    assert fake.calls("nvmlDeviceGetProcessUtilization", 1) == 1  # NotSupported: asked once

    fake = load_nvml(omit=["nvmlDeviceGetProcessUtilization"])  # a driver without it
    with NvmlSampler(clock=clock) as sampler:
        reading = sampler.sample()
    assert [p.sm_utilization_percent for g in reading.gpus for p in g.processes or ()] == [
        None,
        None,
    ]


def _username_or_none(pid: int) -> str | None:
    try:
        return psutil.Process(pid).username()
    except psutil.Error:
        return None


def test_processes_nvml_cannot_list_are_unknown_not_none(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "1:processes")
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", f"0:{os.getpid()}:1610612736")
    reading = sampler.sample()
    assert [p.pid for p in gpu(reading, 0).processes or ()] == [os.getpid()]
    assert gpu(reading, 1).processes is None  # NotSupported: unknown, never "none"
    assert gpu(reading, 1).memory_used_bytes is not None  # the rest of it still read


def test_in_a_pid_namespace_nvml_pids_are_the_host_s_and_not_joined(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """In a real pid namespace (``unshare``) the snapshot's own process is pid 1 there; NVML
    reporting pid 1 means the host's init, so no local user or command is borrowed for it."""
    unshare = shutil.which("unshare")
    probe = (
        subprocess.run(
            [unshare or "unshare", "--pid", "--fork", "--mount-proc", "true"],
            capture_output=True,
            text=True,
            check=False,
        )
        if unshare
        else None
    )
    if probe is None or probe.returncode != 0:
        pytest.skip(f"unshare --pid is not allowed here: {probe and probe.stderr}")
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "FAKE_NVML_GPU_COUNT": "1",
        "FAKE_NVML_PROCESSES": "0:1:1073741824",
        "PYTHONPATH": str(ROOT),
    }
    command = [sys.executable, "-m", "gputui", "snapshot", "--json"]
    inside = subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", *command],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert inside.returncode == 0, inside.stderr
    data = json.loads(inside.stdout)
    assert data["nvml"]["host_pids"] is True
    (process,) = data["gpus"][0]["processes"]
    assert (process["pid"], process["user"], process["command"]) == (1, None, None)
    assert (process["rss_bytes"], process["elapsed_s"]) == (None, None)  # n/a, not pid 1's here
    outside = json.loads(
        subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
    )
    assert outside["nvml"]["host_pids"] is False
    (process,) = outside["gpus"][0]["processes"]
    assert process["command"] is not None  # the host's own pid 1, joined as before


NAMESPACE_WITH_GPU_NODES = """
set -e
# A /dev of this mount namespace's own, with the GPUs' device nodes as plain files (the
# stand-in NVML opens no node; what the test needs is who maps them).
mount -t tmpfs tmpfs /dev
mknod -m 666 /dev/null c 1 3
mknod -m 666 /dev/zero c 1 5
mknod -m 666 /dev/urandom c 1 9
truncate -s 4096 /dev/nvidia0 /dev/nvidia1
# GPU 0: one local process maps its node, as a CUDA context does; this shell only holds
# it open, as a monitor does. GPU 1: two local processes map its node.
exec 3</dev/nvidia0
n=0
for node in 0 1 1; do
  n=$((n + 1))
  "$PYTHON" -c "$MAPPER" /dev/nvidia$node "$READY.$n" >/dev/null &
done
while [ "$(ls "$READY".* 2>/dev/null | wc -l)" -lt 3 ]; do sleep 0.05; done
"$PYTHON" -m gputui snapshot --json
# the namespace's every process ends with this shell, its pid 1
"""


MAPPER = (
    "import mmap, sys, time; node = open(sys.argv[1], 'r+b'); "
    "view = mmap.mmap(node.fileno(), 4096); open(sys.argv[2], 'w').close(); time.sleep(60)"
)


def test_in_a_pid_namespace_the_one_local_process_mapping_a_gpu_is_matched(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """NVML lists host pid 4242 on GPU 0 and 4343 on GPU 1. In a real pid and mount
    namespace, one local process maps /dev/nvidia0: it is 4242, seen from here (its pid,
    user and command are shown, and a signal would go to it). Two map /dev/nvidia1:
    nothing is proven, 4343 stays a bare host pid. The shell that only opens
    /dev/nvidia0 (as NVML itself does) proves nothing."""
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "FAKE_NVML_GPU_COUNT": "2",
        "FAKE_NVML_PROCESSES": "0:4242:1073741824,1:4343:2147483648",
        "PYTHONPATH": str(ROOT),
        "PYTHON": sys.executable,
        "MAPPER": MAPPER,
        "READY": str(tmp_path / "ready"),
    }
    inside = in_pid_namespace(NAMESPACE_WITH_GPU_NODES, env)
    data = json.loads(inside.stdout)
    assert data["nvml"]["host_pids"] is True
    (matched,) = data["gpus"][0]["processes"]
    assert matched["pid"] == 4242
    assert matched["local_pid"] not in (None, 4242)
    assert matched["user"] == "root"
    assert "/dev/nvidia0" in matched["command"] and "mmap" in matched["command"]
    assert matched["rss_bytes"] > 0 and matched["elapsed_s"] >= 0  # the local process's
    (unproven,) = data["gpus"][1]["processes"]
    assert (unproven["pid"], unproven["local_pid"], unproven["command"]) == (4343, None, None)
    assert (unproven["rss_bytes"], unproven["elapsed_s"]) == (None, None)
