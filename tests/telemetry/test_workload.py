"""What a GPU process runs in (:mod:`gputui.telemetry.workload`), read through
``GPUTUI_PROCFS`` from fake procfs trees built here, each process's ``cgroup`` laid out as
each runtime and Slurm lay theirs out (the comment beside each case says where the form comes
from), with the host's files that name them. The machine's own cgroups are read once: a
cgroup made for a test, named as an attacker would name it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.readings import NO_WORKLOAD, Workload
from gputui.telemetry.workload import CGROUP_LIMIT, WorkloadReader
from tests.fakenvml import FakeNvml
from tests.fakeprocfs import (
    CONTAINERD_ID,
    DOCKER_ID,
    IN_DOCKER,
    IN_POD,
    IN_SLURM,
    POD_UID,
    FakeProcfs,
    as_another_user,
    jobs_tree,
)
from tests.helpers import ROOT, in_pid_namespace

ID = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
"""A container id: 64 hex digits."""
SHORT = ID[:12]
UID = "0b6e7c3a-2f41-4d8e-9c5a-71d2e8f3a6b9"
"""A pod's UID."""
UID_ = UID.replace("-", "_")
"""The same UID as the kubelet's systemd driver writes it in a slice's name."""


def container(runtime: str | None, unit: str | None = None, **more: str) -> Workload:
    """A container known by its id alone (no host files)."""
    return Workload(container=SHORT, container_id=ID, runtime=runtime, unit=unit, **more)


def in_pod(runtime: str | None, unit: str | None = None) -> Workload:
    return container(runtime, unit, pod=UID, pod_uid=UID)


LAYOUTS = [
    # Docker's "Runtime metrics" page: /sys/fs/cgroup/memory/docker/<longid>/ (v1, cgroupfs
    # driver), .../system.slice/docker-<longid>.scope (systemd driver), and on v2 the same
    # paths from the unified root.
    pytest.param(
        f"12:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n",
        container("docker"),
        id="docker-v1-cgroupfs",
    ),
    pytest.param(
        f"11:cpu,cpuacct:/system.slice/docker-{ID}.scope\n1:name=systemd:/system.slice/docker-{ID}.scope\n",
        container("docker", f"docker-{ID}.scope"),
        id="docker-v1-systemd",
    ),
    pytest.param(f"0::/docker/{ID}\n", container("docker"), id="docker-v2-cgroupfs"),
    pytest.param(
        f"0::/system.slice/docker-{ID}.scope\n",
        container("docker", f"docker-{ID}.scope"),
        id="docker-v2-systemd",
    ),
    # Kubernetes, "Configuring a cgroup driver" and the kubelet's cgroup manager: pods under
    # kubepods/<qos>/pod<uid> (cgroupfs; guaranteed pods straight under kubepods), or
    # kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid with _ for ->.slice
    # (systemd); containerd's CRI plugin with SystemdCgroup names its containers
    # cri-containerd-<id>.scope, CRI-O crio-<id>.scope (crio-<id> with cgroupfs, its
    # conmon in crio-conmon-<id>.scope), runc with cgroupfs a bare <id>.
    pytest.param(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope\n",
        in_pod("containerd", f"cri-containerd-{ID}.scope"),
        id="containerd-v2-systemd",
    ),
    pytest.param(
        f"0::/kubepods.slice/kubepods-pod{UID_}.slice/crio-{ID}.scope\n",
        in_pod("cri-o", f"crio-{ID}.scope"),
        id="crio-v2-systemd-guaranteed",
    ),
    pytest.param(
        f"10:memory:/kubepods/besteffort/pod{UID}/crio-{ID}\n1:name=systemd:/kubepods/besteffort/pod{UID}/crio-{ID}\n",
        in_pod("cri-o"),
        id="crio-v1-cgroupfs",
    ),
    pytest.param(
        f"4:memory:/kubepods/burstable/pod{UID}/{ID}\n1:name=systemd:/kubepods/burstable/pod{UID}/{ID}\n",
        in_pod(None),
        id="kubepods-v1-cgroupfs-bare-id",
    ),
    pytest.param(
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-conmon-{ID}.scope\n",
        Workload(pod=UID, pod_uid=UID, unit=f"crio-conmon-{ID}.scope"),
        id="crio-conmon-is-no-container",
    ),
    # Podman (podman-run(1), --cgroup-manager and --cgroups): rootful containers in
    # machine.slice/libpod-<id>.scope, rootless ones in the user's own slice, with the
    # container's processes in a "container" child where Podman splits its cgroup; with
    # cgroupfs /libpod_parent/libpod-<id>; conmon in libpod-conmon-<id>.scope.
    pytest.param(
        f"0::/machine.slice/libpod-{ID}.scope\n",
        container("podman", f"libpod-{ID}.scope"),
        id="podman-v2-rootful",
    ),
    pytest.param(
        f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container\n",
        container("podman", f"libpod-{ID}.scope"),
        id="podman-v2-rootless",
    ),
    pytest.param(
        f"7:memory:/libpod_parent/libpod-{ID}\n", container("podman"), id="podman-v1-cgroupfs"
    ),
    pytest.param(
        f"0::/machine.slice/libpod-conmon-{ID}.scope\n",
        Workload(unit=f"libpod-conmon-{ID}.scope"),
        id="podman-conmon-is-no-container",
    ),
    # nerdctl (containerd without Kubernetes), systemd cgroup manager.
    pytest.param(
        f"0::/system.slice/nerdctl-{ID}.scope\n",
        container("containerd", f"nerdctl-{ID}.scope"),
        id="nerdctl-v2",
    ),
    # Slurm's cgroup.conf and "Control Group v2 plugin" pages: v1's
    # /sys/fs/cgroup/<controller>/slurm/uid_<uid>/job_<id>/step_<step>/task_<n> in each
    # controller's hierarchy (systemd's own still names slurmd's unit), v2's
    # /sys/fs/cgroup/system.slice/slurmstepd.scope/job_<id>/step_<step>/user/task_<n>
    # (<nodename>_slurmstepd.scope where one host runs several slurmd).
    pytest.param(
        "11:devices:/slurm/uid_1000/job_1234/step_0/task_0\n"
        "5:memory:/slurm/uid_1000/job_1234/step_0/task_0\n"
        "4:freezer:/slurm/uid_1000/job_1234/step_0\n"
        "1:name=systemd:/system.slice/slurmd.service\n",
        Workload(slurm_job="1234", slurm_step="0", unit="slurmd.service"),
        id="slurm-v1",
    ),
    pytest.param(
        "0::/system.slice/slurmstepd.scope/job_1234/step_batch/user/task_0\n",
        Workload(slurm_job="1234", slurm_step="batch", unit="slurmstepd.scope"),
        id="slurm-v2",
    ),
    pytest.param(
        "0::/system.slice/gpu-07_slurmstepd.scope/job_99/step_extern/user/task_special\n",
        Workload(slurm_job="99", slurm_step="extern", unit="gpu-07_slurmstepd.scope"),
        id="slurm-v2-multiple-slurmd",
    ),
    # systemd.unit(5), systemd.special(7): services in system.slice, a user's manager
    # user@<uid>.service with its apps in app.slice, login sessions in session-<n>.scope.
    pytest.param(
        "0::/system.slice/ollama.service\n", Workload(unit="ollama.service"), id="system-service"
    ),
    pytest.param(
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service\n",
        Workload(unit="jupyter.service"),
        id="user-service",
    ),
    pytest.param(
        "0::/user.slice/user-1000.slice/user@1000.service/init.scope\n",
        Workload(unit="init.scope"),
        id="user-manager",
    ),
    pytest.param(
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        Workload(unit="session-3.scope"),
        id="session",
    ),
    # A user's delegated subtree may be named anything: it passes for no pod and no job.
    pytest.param(
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/"
        f"kubepods-pod{UID_}.slice/slurmstepd.scope/job_1/step_0\n",
        Workload(unit="slurmstepd.scope"),
        id="user-delegated-fakes",
    ),
    # A process in the root cgroup, or seen from a cgroup namespace of its own: nothing.
    pytest.param("0::/\n", NO_WORKLOAD, id="root"),
    pytest.param("", NO_WORKLOAD, id="empty"),
    pytest.param("not a cgroup line\n0:/x\n\x1b[2J", NO_WORKLOAD, id="garbage"),
]


@pytest.fixture
def proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeProcfs:
    """An empty fake procfs, which ``GPUTUI_PROCFS`` names."""
    tree = FakeProcfs(tmp_path)
    monkeypatch.setenv("GPUTUI_PROCFS", str(tree.root))
    return tree


@pytest.mark.parametrize(("cgroup", "expected"), LAYOUTS)
def test_each_runtimes_and_slurms_cgroup_is_named(
    proc: FakeProcfs, cgroup: str, expected: Workload
) -> None:
    proc.process(4242)
    proc.cgroup(4242, cgroup)
    assert WorkloadReader().read(4242) == expected


def test_names_come_from_the_hosts_files(proc: FakeProcfs) -> None:
    """Docker's config.v2.json, Podman's containers.json, the kubelet's log link and log
    folder, each under the procfs's 1/root."""
    docker, podman, pod, pod_only = (ID[:-1] + digit for digit in "1234")
    proc.host_file(
        f"var/lib/docker/containers/{docker}/config.v2.json",
        json.dumps({"ID": docker, "Name": "/web"}),
    )
    storage = "var/lib/containers/storage/overlay-containers/containers.json"
    proc.host_file(
        storage, json.dumps([{"id": ID, "names": ["other"]}, {"id": podman, "names": ["db"]}])
    )
    log = proc.host_file(f"var/log/pods/vision_resnet-0_{UID}/trainer/0.log", "")
    (proc.host / "var" / "log" / "containers").mkdir()
    (proc.host / "var" / "log" / "containers" / f"resnet-0_vision_trainer-{pod}.log").symlink_to(
        log
    )
    other = "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9"
    proc.host_file(f"var/log/pods/default_notebook_{other}/lab/0.log", "")
    cgroups = {
        1: f"0::/system.slice/docker-{docker}.scope",
        2: f"0::/machine.slice/libpod-{podman}.scope",
        3: f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{pod}.scope",
        4: f"0::/kubepods/besteffort/pod{other}/{pod_only}",  # no log link: the folder names it
    }
    for pid, cgroup in cgroups.items():
        proc.process(pid + 100)
        proc.cgroup(pid + 100, cgroup)
    reader = WorkloadReader()
    assert (reader.read(101).container, reader.read(101).container_id) == ("web", docker)
    assert reader.read(102).container == "db"
    named = reader.read(103)
    assert (named.pod, named.namespace, named.container, named.pod_uid) == (
        "resnet-0",
        "vision",
        "trainer",
        UID,
    )
    assert named.job == ("pod", "vision/resnet-0")
    folder = reader.read(104)
    assert (folder.pod, folder.namespace, folder.container) == (
        "notebook",
        "default",
        pod_only[:12],
    )


def test_what_cannot_be_read_is_none(proc: FakeProcfs) -> None:
    proc.process(1)  # its cgroup is missing
    proc.process(2)
    (proc.root / "2" / "cgroup").mkdir()  # not a file
    proc.process(3)
    proc.cgroup(3, f"0::/system.slice/docker-{ID}.scope\n" + "#" * CGROUP_LIMIT)  # too long
    proc.process(4)  # a container whose state file is garbage, and a pod without logs
    proc.cgroup(4, f"0::/system.slice/docker-{ID}.scope\n")
    proc.host_file(f"var/lib/docker/containers/{ID}/config.v2.json", "{not json")
    reader = WorkloadReader()
    assert [reader.read(pid) for pid in (1, 2, 3, 5)] == [NO_WORKLOAD] * 4  # 5: no such process
    assert reader.read(4) == container("docker", f"docker-{ID}.scope")  # its short id


def _read_as_another_user(root: Path, pids: tuple[int, ...]) -> list[dict[str, str | None]]:
    """The workloads of ``pids`` read by a user who does not own the tree: root reads any
    file, so as root they are read in a child that has given root up."""

    def read() -> list[dict[str, str | None]]:
        reader = WorkloadReader(root)
        return [
            {f: getattr(reader.read(pid), f) for f in ("container", "pod", "unit")} for pid in pids
        ]

    return as_another_user(read)


def test_files_another_user_may_not_read_are_none(readable_base: Path) -> None:
    """A cgroup file hidden (as ``hidepid`` hides another user's processes), and Docker's
    state, which is root's alone: the container reads as its short id."""
    proc = FakeProcfs(readable_base)
    proc.process(1)
    proc.cgroup(1, "0::/system.slice/ollama.service\n")
    proc.process(2)
    proc.cgroup(2, "0::/system.slice/ollama.service\n")
    (proc.root / "2" / "cgroup").chmod(0)
    proc.process(3)
    proc.cgroup(3, f"0::/system.slice/docker-{ID}.scope\n")
    proc.host_file(f"var/lib/docker/containers/{ID}/config.v2.json", '{"Name": "/web"}')
    (proc.host / "var" / "lib" / "docker").chmod(0o700)
    assert WorkloadReader(proc.root).read(3).container == "web"  # as its owner
    assert _read_as_another_user(proc.root, (1, 2, 3)) == [
        {"container": None, "pod": None, "unit": "ollama.service"},
        {"container": None, "pod": None, "unit": None},
        {"container": SHORT, "pod": None, "unit": f"docker-{ID}.scope"},
    ]


def test_a_process_is_read_once_until_its_pid_names_another(proc: FakeProcfs) -> None:
    proc.process(7, start_ticks=100)
    proc.cgroup(7, "0::/system.slice/old.service\n")
    reader = WorkloadReader()
    assert reader.read(7).unit == "old.service"
    proc.cgroup(7, "0::/system.slice/moved.service\n")
    assert reader.read(7).unit == "old.service"  # kept: not read again
    assert reader.read(7, create_time=1.5e9).unit == "moved.service"  # another start: read
    assert reader.read(7, create_time=1.5e9).unit == "moved.service"
    shutil.rmtree(proc.root / "7")
    proc.process(7, start_ticks=200)  # the pid taken over
    proc.cgroup(7, "0::/system.slice/new.service\n")
    assert reader.read(7).unit == "new.service"
    reader.forget(())
    proc.cgroup(7, "0::/system.slice/newer.service\n")
    assert reader.read(7).unit == "newer.service"  # forgotten: read again


def test_the_procfs_is_gputui_procfs_and_taken_for_the_hosts(
    proc: FakeProcfs, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert WorkloadReader().host_procfs
    monkeypatch.delenv("GPUTUI_PROCFS")
    assert not WorkloadReader().host_procfs  # /proc: ours, which may not be the host's
    assert WorkloadReader(proc.root).host_procfs


# ---------------------------------------------------------------- through the sampler


@pytest.fixture
def jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeProcfs:
    """:func:`tests.fakeprocfs.jobs_tree`, which ``GPUTUI_PROCFS`` names."""
    tree = jobs_tree(tmp_path)
    monkeypatch.setenv("GPUTUI_PROCFS", str(tree.root))
    return tree


def test_the_sampler_names_each_gpu_process_job_once(
    jobs: FakeProcfs, fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    fake_nvml_env.setenv(
        "FAKE_NVML_PROCESSES", f"0:{IN_DOCKER}:1024,0:{IN_POD}:2048,1:{IN_SLURM}:4096,1:{IN_POD}:1"
    )
    with NvmlSampler(fake_nvml.path) as nvml:
        first = nvml.sample()
        (jobs.root / str(IN_DOCKER) / "cgroup").unlink()  # read once: not missed
        second = nvml.sample()
    for reading in (first, second):
        found = {
            (gpu.index, p.pid): p.workload for gpu in reading.gpus for p in gpu.processes or ()
        }
        assert found[0, IN_DOCKER] == Workload(
            container="trainer",
            container_id=DOCKER_ID,
            runtime="docker",
            unit=f"docker-{DOCKER_ID}.scope",
        )
        assert (
            found[0, IN_POD]
            == found[1, IN_POD]
            == Workload(
                container="resnet",
                container_id=CONTAINERD_ID,
                runtime="containerd",
                pod="resnet-0",
                pod_uid=POD_UID,
                namespace="ml",
                unit=f"cri-containerd-{CONTAINERD_ID}.scope",
            )
        )
        assert found[1, IN_SLURM] == Workload(
            slurm_job="1234", slurm_step="0", unit="slurmstepd.scope"
        )


IN_OUR_OWN_NAMESPACE = """
set -e
# pid 1 here is this shell: put it in a cgroup named as a Slurm job's (NVML's pid 1 is the
# host's init, another process)
mount --bind "$SLURM_CGROUP" /proc/1/cgroup
FAKE_NVML_PROCESSES=0:1:4096 "$PYTHON" -m gputui snapshot --json
echo ---
export GPUTUI_PROCFS="$HOST_PROCFS"
FAKE_NVML_PROCESSES="0:$IN_SLURM:4096" "$PYTHON" -m gputui snapshot --json
"""


def test_host_pids_are_read_in_the_hosts_procfs_only(
    jobs: FakeProcfs, fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """In a real pid namespace (``unshare``) NVML's pids are the host's: read where
    GPUTUI_PROCFS names the host's procfs, never in our own /proc, where the same number is
    another process."""
    slurm = tmp_path / "cgroup"
    slurm.write_text("0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n")
    env = {
        **{k: v for k, v in os.environ.items() if k != "GPUTUI_PROCFS"},
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "FAKE_NVML_GPU_COUNT": "1",
        "PYTHONPATH": str(ROOT),
        "PYTHON": sys.executable,
        "SLURM_CGROUP": str(slurm),
        "HOST_PROCFS": str(jobs.root),
        "IN_SLURM": str(IN_SLURM),
    }
    inside = in_pid_namespace(IN_OUR_OWN_NAMESPACE, env)
    own, host = (json.loads(part) for part in inside.stdout.split("\n---\n"))
    assert own["nvml"]["host_pids"] is host["nvml"]["host_pids"] is True
    (process,) = own["gpus"][0]["processes"]
    assert (process["pid"], process["slurm_job"], process["unit"]) == (1, None, None)
    (process,) = host["gpus"][0]["processes"]
    assert (process["pid"], process["slurm_job"], process["unit"]) == (
        IN_SLURM,
        "1234",
        "slurmstepd.scope",
    )


LINE_BREAKS = ["\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r", "\v", "\f"]
"""Characters the kernel allows in a cgroup's name that ``str.splitlines()`` breaks lines on."""


@pytest.mark.parametrize("breaks", LINE_BREAKS)
def test_a_user_s_cgroup_named_like_a_line_names_no_pod_nor_job(
    proc: FakeProcfs, breaks: str
) -> None:
    """A user names a cgroup in the subtree systemd delegates to them so that the rest reads
    as another line: ``x<break>0::/kubepods/...``. It may name a container, never a pod or a
    Slurm job: those are only where root puts them."""
    mine = "/user.slice/user-1000.slice/user@1000.service/app.slice"
    for pid, fake in (
        (1, f"0::/kubepods/burstable/pod{UID}/{ID}"),
        (2, "0::/system.slice/slurmstepd.scope/job_4242/step_0"),
    ):
        proc.process(pid)
        proc.cgroup(pid, f"0::{mine}/x{breaks}{fake}\n")
        workload = WorkloadReader().read(pid)
        assert (workload.pod, workload.pod_uid, workload.slurm_job) == (None, None, None)
        assert workload.job is None or workload.job[0] == "container"


def test_a_real_cgroup_named_like_a_line_names_no_pod(tmp_path: Path) -> None:
    """The same with a real cgroup (cgroup v2's hierarchy, where this machine lets us make
    one) and a real process in it, read from the real ``/proc``."""
    unified = next(
        (
            folder
            for folder in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
            if (folder / "cgroup.procs").is_file()  # a cgroup file system, not a tmpfs
            and (folder / "cgroup.controllers").is_file()  # v2's
        ),
        None,
    )
    if unified is None:
        pytest.skip("no cgroup v2 hierarchy here")
    top = unified / f"gputui-test-{os.getpid()}"
    try:
        top.mkdir()
    except OSError as error:  # read-only, or not ours to write (an unprivileged container)
        pytest.skip(f"cannot make a cgroup: {error.strerror}")
    leaf = top / "x\x1c0::" / "kubepods" / "burstable" / f"pod{UID}" / ID
    child = None
    try:
        leaf.mkdir(parents=True)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        (leaf / "cgroup.procs").write_text(f"{child.pid}\n")
        cgroup = Path(f"/proc/{child.pid}/cgroup").read_text()
        assert f"x\x1c0::/kubepods/burstable/pod{UID}/{ID}\n" in cgroup
        workload = WorkloadReader(Path("/proc")).read(child.pid)
        assert workload.container_id == ID  # a container, which any user may name
        assert (workload.pod, workload.pod_uid, workload.job) == (
            None,
            None,
            ("container", ID[:12]),
        )
    finally:
        if child is not None:
            child.kill()
            child.wait()
        for folder in [leaf, *leaf.parents]:
            if folder == unified:
                break
            with contextlib.suppress(OSError):
                folder.rmdir()
