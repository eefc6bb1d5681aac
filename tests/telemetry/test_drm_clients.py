"""The processes on AMD and Intel GPUs (:mod:`gputui.telemetry.drm_clients`), read from fake
procfs trees built here with the kernel's fdinfo forms (tests/fakeprocfs.py says where each
comes from): several processes, one with clients on two fds and on two GPUs, a client shared
across a fork, one that exited mid-sweep, another user's, garbage; what two samples make of
the engine counters; and what a sweep opens, on 200 processes and on this machine's /proc.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import psutil
import pytest

from gputui.telemetry import drm_clients
from gputui.telemetry.commandline import command_line
from gputui.telemetry.drm_clients import (
    RESCAN_EVERY,
    RESCAN_EVERY_COUNTED,
    DrmClientSampler,
    parse_fdinfo,
    read_process_identity,
)
from gputui.telemetry.readings import GpuProcess
from tests.fakeprocfs import (
    AMD_0,
    AMD_1,
    INTEL_ARC,
    INTEL_IGPU,
    KIB,
    NOT_DRM_FDINFO,
    FakeProcfs,
    amdgpu_6_8,
    amdgpu_6_11,
    as_another_user,
    i915,
    started,
    xe,
)


def user_name(uid: int) -> str:
    """The name a uid reads as: psutil's rule (the uid itself where it has no name)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class Clock:
    """A monotonic clock in ns that moves only when told."""

    def __init__(self) -> None:
        self.now_ns = 1_000_000_000

    def __call__(self) -> int:
        return self.now_ns


# ---------------------------------------------------------------- a box with several processes


SECRET_ARGV = ("python3", "train.py", "--hf-token", "hf_abcdef", "--epochs", "3")


def build_box(proc: FakeProcfs) -> None:
    """Processes on four GPUs, and those that must not show."""
    # a trainer on the first AMD card, its client on two fds (dup)
    proc.process(1001, SECRET_ARGV, uid=4242, start_ticks=9000)
    proc.standard_fds(1001)
    trainer = amdgpu_6_11(4, AMD_0, vram_kib=44564, total_vram_kib=50000)
    proc.drm_fd(1001, 5, "renderD128", trainer)
    proc.drm_fd(1001, 6, "renderD128", trainer)
    # two clients of one process on the first card, a third on the second card
    proc.process(1002, ("blender", "-b", "scene.blend"), uid=4242, start_ticks=7000)
    proc.standard_fds(1002)
    proc.drm_fd(1002, 7, "renderD128", amdgpu_6_8(21, AMD_0, vram_kib=60692))
    proc.drm_fd(1002, 8, "renderD128", amdgpu_6_8(22, AMD_0, vram_kib=22596))
    proc.drm_fd(1002, 9, "renderD129", amdgpu_6_8(23, AMD_1, vram_kib=1024))
    # the display server on the integrated Intel GPU (a name with a space and a parenthesis)
    proc.process(1003, ("/usr/lib/xorg/Xorg", ":0"), comm="Xorg (x) 0", start_ticks=300)
    proc.drm_fd(1003, 11, "card0", i915(18, render_ns=346249))
    # a job on an Arc card (xe)
    proc.process(1004, ("python3", "-m", "bench"), uid=4242, start_ticks=9500)
    proc.drm_fd(1004, 4, "renderD130", xe(3, rcs=0, ccs=28257900, gpu_cycles=7655183225))
    # a parent and its forked child share client 40; the parent has the higher pid (pids
    # wrapped), so the client is the earlier-started one's, not the lower pid's
    shared = amdgpu_6_11(40, AMD_1, vram_kib=8192)
    proc.process(1006, ("python3", "serve.py"), start_ticks=3000)
    proc.drm_fd(1006, 3, "renderD129", shared)
    proc.process(1005, ("python3", "serve.py"), start_ticks=3100)
    proc.drm_fd(1005, 3, "renderD129", shared)
    # exited between the listing and the read: its folder has lost its fdinfo
    proc.process(1007, ("python3", "gone.py"), fdinfo=False)
    proc.drm_fd(1007, 3, "renderD128", None)
    # gone before its fds were looked at: an empty folder
    (proc.root / "1012").mkdir()
    # garbage: one file is none, another a client with garbage lines among its own
    proc.process(1009, ("weird",), start_ticks=8000)
    proc.drm_fd(1009, 3, "renderD128", "\x00\xff\x1b[2J garbage\ndrm-driver\n:::\n")
    proc.drm_fd(
        1009,
        4,
        "renderD128",
        "drm-client-id: lots\n"
        + amdgpu_6_8(99, AMD_0, vram_kib=512)
        + "drm-memory-vram 12 KiB\ndrm-memory-gtt:\t12 parsecs\ndrm-engine-gfx:\t-5 ns\n"
        "drm-pdev:\tnot-a-bus-id\ndrm-engine-:\t3 ns\ndrm-client-id:\t-1\n\x00\x01\n",
    )
    # sockets and files only
    proc.process(1010, ("sshd",))
    proc.standard_fds(1010)
    proc.other_fd(1010, 3, str(proc.dev / "null"))
    (proc.root / "self").symlink_to("1010")  # not this process: its pids are not ours


@pytest.fixture
def proc(tmp_path: Path) -> FakeProcfs:
    return FakeProcfs(tmp_path)


class Opens:
    """Every file and folder the sampler opened, by its own two open paths."""

    def __init__(self) -> None:
        self.read: list[str] = []
        self.listed: list[str] = []

    def clear(self) -> None:
        self.read.clear()
        self.listed.clear()


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> Opens:
    opens = Opens()
    read, scan, list_fds = drm_clients._read_text, drm_clients._scan_dir, drm_clients._list_fds

    def counted_read(path: str) -> str | None:
        opens.read.append(path)
        return read(path)

    def counted_scan(path: str) -> list[tuple[str, int]] | None:
        opens.listed.append(path)
        return scan(path)

    def counted_list_fds(
        path: str, known: frozenset[str]
    ) -> tuple[frozenset[str], list[str]] | None:
        opens.listed.append(path)
        return list_fds(path, known)

    monkeypatch.setattr(drm_clients, "_read_text", counted_read)
    monkeypatch.setattr(drm_clients, "_scan_dir", counted_scan)
    monkeypatch.setattr(drm_clients, "_list_fds", counted_list_fds)
    return opens


# ---------------------------------------------------------------- the readings


def test_each_gpu_lists_its_processes_each_client_once(proc: FakeProcfs) -> None:
    build_box(proc)
    found = DrmClientSampler(proc.root).sample()
    user = user_name(4242)
    blender = "blender -b scene.blend"
    assert found == {
        AMD_0: (
            # resident VRAM (not the 50000 KiB created), once for its two fds; secrets redacted
            GpuProcess(
                1001,
                user,
                "python3 train.py --hf-token *** --epochs 3",
                44564 * KIB,
                "compute",
                started(9000),
            ),
            GpuProcess(1002, user, blender, (60692 + 22596) * KIB, "compute", started(7000)),
            GpuProcess(1009, "root", "weird", 512 * KIB, "compute", started(8000)),
        ),
        AMD_1: (
            GpuProcess(1002, user, blender, 1024 * KIB, "compute", started(7000)),
            # the shared client, counted once, for the parent (started first, higher pid)
            GpuProcess(1006, "root", "python3 serve.py", 8192 * KIB, "compute", started(3000)),
        ),
        INTEL_IGPU: (
            GpuProcess(1003, "root", "/usr/lib/xorg/Xorg :0", 6044 * KIB, "graphics", started(300)),
        ),
        INTEL_ARC: (
            GpuProcess(1004, user, "python3 -m bench", 23992 * KIB, "compute", started(9500)),
        ),
    }


def test_engine_busy_comes_from_two_samples(proc: FakeProcfs) -> None:
    clock = Clock()
    proc.process(1001)
    trainer = {"gfx": 1_000_000, "compute": 46_464_671}
    proc.drm_fd(1001, 5, "renderD128", amdgpu_6_11(4, AMD_0, vram_kib=1, engines=trainer))
    proc.process(1002)
    proc.drm_fd(1002, 7, "renderD128", amdgpu_6_8(21, AMD_0, vram_kib=1, engines={"gfx": 10}))
    proc.drm_fd(1002, 8, "renderD128", amdgpu_6_8(22, AMD_0, vram_kib=1, engines={"gfx": 5}))
    proc.process(1003)
    proc.drm_fd(1003, 11, "card0", i915(18, render_ns=346249))
    proc.process(1004)
    gpu_cycles = 7_655_183_225
    proc.drm_fd(1004, 4, "renderD130", xe(3, rcs=0, ccs=28_257_900, gpu_cycles=gpu_cycles))
    sampler = DrmClientSampler(proc.root, clock_ns=clock)

    first = sampler.sample()
    assert [p.sm_utilization_percent for ps in first.values() for p in ps] == [None] * 4

    clock.now_ns += 2_000_000_000  # 2 s later
    trainer = {"gfx": 501_000_000, "compute": 1_246_464_671}  # +0.5 s and +1.2 s
    proc.fdinfo(1001, 5, amdgpu_6_11(4, AMD_0, vram_kib=1, engines=trainer))
    proc.fdinfo(1002, 7, amdgpu_6_8(21, AMD_0, vram_kib=1, engines={"gfx": 600_000_010}))
    proc.fdinfo(1002, 8, amdgpu_6_8(22, AMD_0, vram_kib=1, engines={"gfx": 800_000_005}))
    # render +0.2 s; video 3 s across its 2 engines
    proc.fdinfo(1003, 11, i915(18, render_ns=200_346_249, video_ns=3_000_000_000))
    span = 38_400_000  # GPU cycles: the wall time does not count for xe
    proc.fdinfo(
        1004,
        4,
        xe(3, rcs=span // 4, ccs=28_257_900 + 2 * span, gpu_cycles=gpu_cycles + span),
    )
    busy = {
        bus: {p.pid: p.sm_utilization_percent for p in ps} for bus, ps in sampler.sample().items()
    }
    assert busy == {
        AMD_0: {
            1001: pytest.approx(60.0),  # the busier engine: compute, 1.2 s of 2
            1002: pytest.approx(70.0),  # gfx: 30% and 40% from its two clients
        },
        INTEL_IGPU: {1003: pytest.approx(75.0)},  # video: 3 s of 2 engines' 4 s
        INTEL_ARC: {1004: pytest.approx(50.0)},  # ccs: 2 spans of 4 engines' 4 spans
    }


def test_a_counter_that_reads_lower_has_not_moved(proc: FakeProcfs) -> None:
    """The spec: stay with the larger value until the counter catches up."""
    clock = Clock()
    proc.process(1001)
    proc.drm_fd(1001, 5, "renderD128", amdgpu_6_8(4, AMD_0, vram_kib=1, engines={"gfx": 10**9}))
    sampler = DrmClientSampler(proc.root, clock_ns=clock)
    busy = []
    for gfx_ns in (10**9, 9 * 10**8, 11 * 10**8):
        proc.fdinfo(1001, 5, amdgpu_6_8(4, AMD_0, vram_kib=1, engines={"gfx": gfx_ns}))
        busy.append(sampler.sample()[AMD_0][0].sm_utilization_percent)
        clock.now_ns += 10**9
    assert busy == [None, 0.0, pytest.approx(10.0)]


def test_an_engine_printed_late_counts_from_zero_and_none_printed_is_unknown(
    proc: FakeProcfs,
) -> None:
    """amdgpu prints an engine once it has run, and never the compute queues ROCm runs
    through /dev/kfd: a ROCm process's busy is unknown, not 0."""
    clock = Clock()
    proc.process(1001, ("glxgears",))
    proc.drm_fd(1001, 5, "renderD128", amdgpu_6_8(4, AMD_0, vram_kib=1))
    proc.process(1002, ("python3", "rocm.py"))
    proc.drm_fd(1002, 5, "renderD128", amdgpu_6_8(5, AMD_0, vram_kib=1))
    sampler = DrmClientSampler(proc.root, clock_ns=clock)
    sampler.sample()
    clock.now_ns += 10**9
    proc.fdinfo(1001, 5, amdgpu_6_8(4, AMD_0, vram_kib=1, engines={"gfx": 3 * 10**8}))
    found = {p.pid: p for p in sampler.sample()[AMD_0]}
    assert found[1001].sm_utilization_percent == pytest.approx(30.0)
    assert found[1001].kind == "graphics"
    assert found[1002].sm_utilization_percent is None
    assert found[1002].kind == "compute"


def test_without_vram_the_memory_is_what_the_gpu_maps(proc: FakeProcfs) -> None:
    """An APU's amdgpu client (no VRAM keys): GTT, not the pages only the CPU holds; an
    integrated xe GPU's: GTT, not the unmapped system placement."""
    apu = amdgpu_6_8(4, AMD_0, vram_kib=None, gtt_kib=4096)
    proc.process(1001)
    proc.drm_fd(1001, 5, "renderD128", apu.replace("cpu: \t0 KiB", "cpu: \t100 KiB"))
    lunar_lake = "".join(
        line.replace("resident-system:\t0", "resident-system:\t640 KiB")
        for line in xe(3, rcs=0, ccs=0, gpu_cycles=1).splitlines(keepends=True)
        if "vram0" not in line
    )
    proc.process(1002)
    proc.drm_fd(1002, 4, "renderD130", lunar_lake)
    found = DrmClientSampler(proc.root).sample()
    assert found[AMD_0][0].gpu_memory_bytes == 4096 * KIB
    assert found[INTEL_ARC][0].gpu_memory_bytes == 192 * KIB


def test_the_pids_are_ours_only_where_the_procfs_is(proc: FakeProcfs) -> None:
    proc.process(1001)
    proc.drm_fd(1001, 5, "renderD128", amdgpu_6_11(4, AMD_0, vram_kib=1))
    (proc.root / "self").symlink_to(str(os.getpid()))
    assert DrmClientSampler(proc.root).sample()[AMD_0][0].local_pid == 1001


def test_the_procfs_is_gputui_procfs_where_set(
    proc: FakeProcfs, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc.process(1001)
    proc.drm_fd(1001, 5, "renderD128", amdgpu_6_11(4, AMD_0, vram_kib=1))
    monkeypatch.setenv("GPUTUI_PROCFS", str(proc.root))
    assert [p.pid for p in DrmClientSampler().sample()[AMD_0]] == [1001]


def test_no_procfs_is_no_process(tmp_path: Path) -> None:
    assert DrmClientSampler(tmp_path / "missing").sample() == {}


# ---------------------------------------------------------------- parsing


def test_fdinfo_keys_are_read_by_their_prefixes_and_units() -> None:
    client = parse_fdinfo(xe(3, rcs=10, ccs=20, gpu_cycles=1000))
    assert client is not None
    assert (client.driver, client.pci_bus_id, client.client_id) == ("xe", INTEL_ARC, 3)
    assert client.cycles == {"rcs": 10, "bcs": 0, "vcs": 0, "vecs": 0, "ccs": 20}
    assert client.total_cycles == dict.fromkeys(client.cycles, 1000)
    assert client.capacity == {"vcs": 2, "vecs": 2, "ccs": 4}
    assert client.engine_ns == {}
    assert client.memory_bytes == {"system": 0, "gtt": 192 * KIB, "vram0": 23992 * KIB, "stolen": 0}

    other = parse_fdinfo(
        "drm-driver:\tpanthor\ndrm-pdev:\t0000:0A:00.0\ndrm-client-id:\t7\n"
        "drm-total-memory:\t3 MiB\ndrm-engine-capacity-x:\t0\ndrm-engine-x:\t5 ns\n"
    )
    assert other is not None
    assert other.pci_bus_id == "0000:0a:00.0"
    assert other.memory_bytes == {"memory": 3 << 20}
    assert (other.engine_ns, other.capacity) == ({"x": 5}, {})  # capacity 0 is not allowed


def test_what_is_no_client_parses_to_none() -> None:
    without = [
        line
        for line in i915(18, render_ns=1).splitlines()
        if not line.startswith(("drm-pdev", "drm-client-id"))
    ]
    for text in (NOT_DRM_FDINFO, "", "\x00\xff\x1b[2J", "\n".join(without)):
        assert parse_fdinfo(text) is None


# ---------------------------------------------------------------- what cannot be read


def _sample_pids_as_another_user(root: Path) -> dict[str, list[int]]:
    """Each GPU's pids, sampled by a user who does not own the tree: root reads any file,
    so as root the sample is taken in a child that has given root up."""

    def pids() -> dict[str, list[int]]:
        found = DrmClientSampler(root).sample()
        return {bus: [p.pid for p in processes] for bus, processes in found.items()}

    return as_another_user(pids)


def test_another_users_process_is_passed_over(readable_base: Path) -> None:
    proc = FakeProcfs(readable_base)
    proc.process(1001)
    proc.drm_fd(1001, 5, "renderD128", amdgpu_6_11(4, AMD_0, vram_kib=1))
    proc.process(1008)  # its fdinfo hidden, as the kernel hides another user's
    proc.drm_fd(1008, 5, "renderD128", amdgpu_6_11(8, AMD_0, vram_kib=1))
    (proc.root / "1008" / "fdinfo" / "5").chmod(0)
    proc.process(1011)  # its fds hidden, as the kernel's 0500 fd folder hides them
    proc.drm_fd(1011, 5, "renderD128", amdgpu_6_11(11, AMD_0, vram_kib=1))
    (proc.root / "1011" / "fd").chmod(0)
    assert _sample_pids_as_another_user(proc.root) == {AMD_0: [1001]}


def test_a_pid_taken_over_is_read_as_the_new_process_at_once(proc: FakeProcfs) -> None:
    proc.process(1001, ("python3", "old.py"), start_ticks=100)
    proc.drm_fd(1001, 5, "renderD128", amdgpu_6_11(4, AMD_0, vram_kib=1))
    sampler = DrmClientSampler(proc.root, rescan_every=10**6)
    assert [p.command for p in sampler.sample()[AMD_0]] == ["python3 old.py"]
    # made before the old folder goes, so that it has another inode, as procfs gives it
    new = proc.process(1001, ("vim",), start_ticks=200, at=proc.root / "new")
    (new / "fd" / "7").symlink_to(proc.dev / "dri" / "renderD129")
    (new / "fdinfo" / "7").write_text(amdgpu_6_11(77, AMD_1, vram_kib=64))
    shutil.rmtree(proc.root / "1001")
    new.rename(proc.root / "1001")
    assert sampler.sample() == {
        AMD_1: (GpuProcess(1001, "root", "vim", 64 * KIB, "compute", started(200)),)
    }


def test_a_drm_fd_closed_since_is_not_read(proc: FakeProcfs, opens: Opens) -> None:
    proc.process(1001)
    proc.drm_fd(1001, 5, "renderD128", amdgpu_6_11(4, AMD_0, vram_kib=1))
    sampler = DrmClientSampler(proc.root, rescan_every=10**6)
    assert AMD_0 in sampler.sample()
    (proc.root / "1001" / "fd" / "5").unlink()
    (proc.root / "1001" / "fd" / "5").symlink_to("socket:[777]")  # fd 5 reused
    opens.clear()
    assert sampler.sample() == {}
    assert not [path for path in opens.read if "fdinfo" in path]


def test_a_process_that_opens_a_gpu_later_is_found_within_the_rescan(proc: FakeProcfs) -> None:
    proc.process(1010)
    proc.standard_fds(1010)
    sampler = DrmClientSampler(proc.root)
    assert sampler.sample() == {}
    proc.drm_fd(1010, 9, "renderD128", amdgpu_6_11(5, AMD_0, vram_kib=1))
    assert any(sampler.sample() for _ in range(RESCAN_EVERY))


def test_a_process_started_since_is_listed_again_soon_then_less_often(
    proc: FakeProcfs, opens: Opens
) -> None:
    """A job opens its GPU in its first seconds: a process that appears after the first
    sweep has its fds listed again 1, 2, 4... sweeps later, up to rescan_every."""
    proc.process(1001)
    sampler = DrmClientSampler(proc.root, rescan_every=8)
    sampler.sample()
    proc.process(1020, ("python3", "late.py"))
    proc.standard_fds(1020)
    folder = f"{proc.root}/1020/fd"
    listed_at = []
    for sweep in range(2, 27):
        opens.clear()
        found = sampler.sample()
        if folder in opens.listed:
            listed_at.append(sweep)
        if sweep == 2:  # its first listing: no GPU yet; the next one finds it
            proc.drm_fd(1020, 9, "renderD128", amdgpu_6_11(5, AMD_0, vram_kib=1))
        if sweep == 3:
            assert [p.pid for p in found[AMD_0]] == [1020]
    assert listed_at == [2, 3, 5, 9, 17, 25]


def test_a_gpu_opened_under_a_closed_fds_number_is_found_by_the_full_rescan(
    proc: FakeProcfs,
) -> None:
    """Where fds are not counted, a periodic listing reads only the links of fd numbers new
    since the last; every RESCAN_EVERY_COUNTED sweeps it reads them all again."""
    proc.process(1010)
    proc.standard_fds(1010)
    proc.other_fd(1010, 5, "socket:[777]")
    sampler = DrmClientSampler(proc.root)
    assert sampler.sample() == {}
    (proc.root / "1010" / "fd" / "5").unlink()  # closed, and its number taken by the GPU
    proc.drm_fd(1010, 5, "renderD128", amdgpu_6_11(5, AMD_0, vram_kib=1))
    found_at = next(sweep for sweep in range(2, 2 + RESCAN_EVERY_COUNTED + 1) if sampler.sample())
    assert found_at > RESCAN_EVERY  # not by the cheap listings: by the full one


def test_a_periodic_listing_reads_the_links_of_new_fds_only(
    proc: FakeProcfs, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc.process(1010)
    for fd in range(3, 40):
        proc.other_fd(1010, fd, f"socket:[{fd}]")
    sampler = DrmClientSampler(proc.root, rescan_every=2)
    sampler.sample()
    links: list[str] = []
    real_link = drm_clients._link

    def counted_link(path: str) -> str:
        links.append(path)
        return real_link(path)

    monkeypatch.setattr(drm_clients, "_link", counted_link)
    proc.drm_fd(1010, 40, "renderD128", amdgpu_6_11(5, AMD_0, vram_kib=1))
    assert any(sampler.sample() for _ in range(2))  # listed again within 2 sweeps
    assert {os.path.basename(path) for path in links} == {"40"}  # the others' not again


def test_a_kernel_thread_is_never_listed_nor_a_process_that_takes_its_pid(
    proc: FakeProcfs, opens: Opens
) -> None:
    kthread = proc.process(2, ("",), comm="kworker/0:1")
    stat = (kthread / "stat").read_text().replace(" 4194560 ", f" {0x04208040} ")
    (kthread / "stat").write_text(stat)  # PF_KTHREAD among its flags
    proc.drm_fd(2, 5, "renderD128", amdgpu_6_11(5, AMD_0, vram_kib=1))  # never so
    sampler = DrmClientSampler(proc.root, rescan_every=1)
    for _ in range(3):
        assert sampler.sample() == {}
    assert f"{proc.root}/2/fd" not in opens.listed
    new = proc.process(2, ("python3", "train.py"), at=proc.root / "new")
    shutil.rmtree(kthread)
    new.rename(proc.root / "2")
    proc.drm_fd(2, 5, "renderD128", amdgpu_6_11(5, AMD_0, vram_kib=1))
    assert [p.pid for p in sampler.sample()[AMD_0]] == [2]


# ---------------------------------------------------------------- what a sweep costs


def test_a_steady_sweep_opens_the_drm_fds_and_a_share_of_the_fd_folders(
    proc: FakeProcfs, opens: Opens
) -> None:
    """200 processes, 5 of them on a GPU: the first sweep lists every fd folder; after it, a
    sweep lists one in RESCAN_EVERY and reads only the DRM fds' fdinfo."""
    count, drm = 200, set(range(3000, 3200, 40))
    for pid in range(3000, 3000 + count):
        proc.process(pid, ("worker", str(pid)))
        proc.standard_fds(pid)
        for fd in range(3, 8):
            proc.other_fd(pid, fd, f"socket:[{pid * 10 + fd}]")
        if pid in drm:
            proc.drm_fd(pid, 10, "renderD128", amdgpu_6_11(pid, AMD_0, vram_kib=1))
    drm_fdinfo = {f"{proc.root}/{pid}/fdinfo/10" for pid in drm}
    sampler = DrmClientSampler(proc.root)

    def fd_folders() -> list[str]:
        return [path for path in opens.listed if path.endswith("/fd")]

    assert [p.pid for p in sampler.sample()[AMD_0]] == sorted(drm)
    assert len(fd_folders()) == count
    assert {path for path in opens.read if "/fdinfo/" in path} == drm_fdinfo

    sweeps = 3 * RESCAN_EVERY
    listed: Counter[str] = Counter()
    for _ in range(sweeps):
        opens.clear()
        assert len(sampler.sample()[AMD_0]) == len(drm)
        assert len(fd_folders()) <= count / RESCAN_EVERY
        assert sorted(opens.read) == sorted(drm_fdinfo)  # nothing else: not even identities
        assert len(opens.listed) + len(opens.read) <= 1 + count / RESCAN_EVERY + len(drm)
        listed.update(fd_folders())
    # each process's fds listed again every RESCAN_EVERY sweeps, none more often
    assert set(listed.values()) == {sweeps // RESCAN_EVERY} and len(listed) == count


def test_on_a_live_procfs_a_new_fd_is_listed_by_the_next_sweep(
    tmp_path: Path, opens: Opens
) -> None:
    """Linux 6.2 and later give an fd folder's size as the fd count: a process that opens a
    GPU is found at once, without waiting for its rescan."""
    if os.stat("/proc/self/fd").st_size == 0:
        pytest.skip("this kernel does not count fds in /proc/PID/fd's size (before 6.2)")
    node = tmp_path / "dev" / "dri" / "renderD128"
    node.parent.mkdir(parents=True)
    node.touch()
    code = (
        "import sys\nprint('ready', flush=True)\nsys.stdin.readline()\n"
        "node = open(sys.argv[1])\nprint(node.fileno(), flush=True)\nsys.stdin.readline()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(node)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline() == "ready\n"
        folder = f"/proc/{child.pid}/fd"
        sampler = DrmClientSampler(Path("/proc"), rescan_every=10**6)
        sampler.sample()
        assert folder in opens.listed
        opens.clear()
        sampler.sample()
        assert folder not in opens.listed  # its count has not changed
        child.stdin.write("\n")
        child.stdin.flush()
        fd = int(child.stdout.readline())
        opens.clear()
        found = sampler.sample()
        assert folder in opens.listed
        # its link looks like a DRM node, so its fdinfo is read: the kernel's, no client's
        assert f"/proc/{child.pid}/fdinfo/{fd}" in opens.read
        assert found == {}
    finally:
        child.kill()
        child.wait()


def test_who_runs_a_process_reads_as_psutil_reads_it() -> None:
    """The start time must be psutil's to the bit: a signal goes only where it matches."""
    identity = read_process_identity("/proc", os.getpid())
    me = psutil.Process()
    assert identity is not None
    assert identity.create_time == me.create_time()
    assert identity.user == me.username()
    assert identity.command == command_line(me.cmdline())
    assert read_process_identity("/proc", 2**22 + 1) is None  # above pid_max: no process


@pytest.mark.parametrize("breaks", ["\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\r", "\v", "\f"])
def test_a_process_that_names_itself_a_uid_line_is_still_read_as_its_user(breaks: str) -> None:
    """A real process renames itself ``x<break>Uid: 65534``: its ``status`` opens with that
    name, a line of its own to ``splitlines()``, but the kernel's ``Uid:`` line names it."""
    code = (
        f"open('/proc/self/comm', 'w').write({'x' + breaks + 'Uid: 65534'!r}); "
        "print(flush=True); import time; time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"\n"  # renamed
        with open(f"/proc/{child.pid}/status", encoding="utf-8", errors="replace") as status:
            assert status.readline().startswith("Name:\tx")
        identity = read_process_identity("/proc", child.pid)
        assert identity is not None and identity.user == psutil.Process(child.pid).username()
        assert identity.user != pwd.getpwuid(65534).pw_name
    finally:
        child.kill()
        child.wait()
