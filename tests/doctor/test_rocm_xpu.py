"""The doctor on AMD and Intel boxes: fake sysfs and /dev trees, and the facts of ROCm and
XPU builds that are not this machine's."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from gputui.device import Device
from gputui.doctor.checks import Check, DeviceReport, DoctorReport, Status
from gputui.doctor.diagnose import diagnose
from gputui.doctor.rocm_xpu import (
    DevNode,
    DrmFacts,
    UserFacts,
    dev_node,
    drm_facts,
    hiding,
    kfd_targets,
)
from gputui.doctor.run import run_doctor
from gputui.jobs.events import CudaProbed, XpuProbed
from tests.doctor.doctor_facts import CPU_BUILD, CPU_TORCH, facts, no_nvml
from tests.telemetry.sysfs_trees import (
    Card,
    arc_b580,
    build,
    intel_box,
    mi300x,
    radeon_780m,
    radeon_rx_7900_xtx,
    write,
)

ROCM = (
    "python -m pip uninstall -y torch && "
    "python -m pip install torch --index-url https://download.pytorch.org/whl/rocm7.2"
)
XPU = (
    "python -m pip uninstall -y torch && "
    "python -m pip install torch --index-url https://download.pytorch.org/whl/xpu"
)
ALICE = UserFacts("alice", groups=frozenset({"alice"}), listed=frozenset({"alice"}))

ROCM_BUILD = replace(CPU_BUILD, version="2.13.0+rocm7.2", hip_version="7.2.26015", build="rocm")
"""torch.version.cuda is None on a ROCm build; torch.version.hip is set."""
XPU_BUILD = replace(CPU_BUILD, version="2.13.0+xpu", build="xpu")
NO_HIP = CudaProbed(available=False, device_count=0, init_error="RuntimeError: No HIP GPUs")


def check(report: DoctorReport, name: str) -> Check:
    found = report.check(name)
    assert found is not None, [c.name for c in report.checks]
    return found


def dev_tree(root: Path, *, kfd: bool = True, render: int = 2) -> Path:
    """``/dev`` with ``kfd`` and ``render`` render nodes, crw-rw---- as udev makes them."""
    (root / "dri").mkdir(parents=True)
    nodes = [root / "kfd"] if kfd else []
    nodes += [root / "dri" / f"renderD{128 + i}" for i in range(render)]
    for node in nodes:
        node.touch()
        os.chmod(node, 0o660)
    return root


def node(path: str, *, openable: bool, group: str = "render") -> DevNode:
    return DevNode(path, 0o660, "root", group, openable)


def amd_facts(tmp_path: Path, count: int = 2, **changes: object) -> DrmFacts:
    """Two MI300X, /dev/kfd and two render nodes, as alice sees them."""
    sysfs = build(tmp_path / "sys", [mi300x(i) for i in range(count)])
    gathered = drm_facts(sysfs=sysfs, dev=dev_tree(tmp_path / "dev"), environ={}, user=ALICE)
    return replace(gathered, **changes)


# ------------------------------------------------------------------ a CPU-only torch


def test_a_cpu_build_beside_amd_gpus_gets_the_rocm_command(tmp_path: Path) -> None:
    sysfs = build(tmp_path / "sys", [mi300x(0), mi300x(1)])
    report = run_doctor(
        environ={},
        nvml=no_nvml(),
        which=lambda _: None,
        torch=CPU_TORCH,
        python="python",
        drm=drm_facts(sysfs=sysfs, dev=dev_tree(tmp_path / "dev"), environ={}, user=ALICE),
    )
    build_check = check(report, "torch build")
    assert build_check.status is Status.FAIL
    assert "2 AMD GPUs (amdgpu) at 0000:0c:00.0 and 0000:22:00.0 with /dev/kfd" in (
        build_check.message
    )
    assert build_check.fix == ROCM
    assert report.failed


def test_the_sysfs_root_comes_from_gputui_sysfs_and_no_kfd_is_said(tmp_path: Path) -> None:
    sysfs = build(tmp_path / "sys", [radeon_780m()])
    gathered = drm_facts(dev=tmp_path / "no-dev", environ={"GPUTUI_SYSFS": str(sysfs)})
    assert [card.bus_id for card in gathered.cards] == ["0000:c4:00.0"]
    assert gathered.kfd is None
    found = check(diagnose(facts(nvml=no_nvml(), nvidia_smi=None, drm=gathered)), "torch build")
    assert found.status is Status.WARN
    assert "no /dev/kfd" in found.message
    assert found.fix is not None and "--device=/dev/kfd --device=/dev/dri" in found.fix
    assert found.fix.endswith(f"`{ROCM}`")


def test_a_cpu_build_beside_intel_gpus_gets_the_xpu_command(tmp_path: Path) -> None:
    gathered = drm_facts(sysfs=intel_box(tmp_path / "sys"), dev=tmp_path / "dev", environ={})
    found = check(diagnose(facts(nvml=no_nvml(), nvidia_smi=None, drm=gathered)), "torch build")
    assert found.status is Status.WARN
    assert "2 Intel GPUs (i915/xe)" in found.message
    assert found.fix is not None and f"`{XPU}`" in found.fix


def kfd_node(
    sysfs: Path, node: int, gfx_target_version: int, location_id: int, device_id: int = 0
) -> None:
    """One node of KFD's topology, as ``kfd_topology.c``'s ``node_show`` writes it (the other
    figures a Ryzen 9 7950X's graphics'; a CPU's node has version 0)."""
    write(
        sysfs / f"class/kfd/kfd/topology/nodes/{node}/properties",
        f"cpu_cores_count {0 if gfx_target_version else 32}\nsimd_count 4\nmem_banks_count 1\n"
        "caches_count 4\nio_links_count 1\np2p_links_count 0\ncpu_core_id_base 0\n"
        "simd_id_base 2147487744\nmax_waves_per_simd 16\nlds_size_in_kb 64\n"
        "gds_size_in_kb 0\nnum_gws 0\nwave_front_size 32\narray_count 1\n"
        "simd_arrays_per_engine 1\ncu_per_simd_array 2\nsimd_per_cu 2\n"
        f"max_slots_scratch_cu 32\ngfx_target_version {gfx_target_version}\n"
        f"vendor_id {4098 if device_id else 0}\ndevice_id {device_id}\n"
        f"location_id {location_id}\ndomain 0\n"
        "drm_render_minor 128\nhive_id 0\nnum_sdma_engines 1\nnum_cp_queues 8\n"
        "max_engine_clk_fcompute 2200\nlocal_mem_size 0\nfw_version 2160\n",
    )


RAPHAEL = Card("0000:0e:00.0", "amdgpu", "1002:164E", revision="0xc1")
"""The Radeon graphics of a Ryzen 7000 desktop CPU (Raphael, gfx1036): an APU."""


def apu_box(tmp_path: Path, *cards: Card) -> DrmFacts:
    """A Ryzen 7000's graphics with ``cards`` beside it, /dev/kfd, KFD's topology."""
    sysfs = build(tmp_path / "sys", [RAPHAEL, *cards])
    kfd_node(sysfs, 0, 0, 0)
    kfd_node(sysfs, 1, 100306, 0x0E00, 0x164E)  # bus 0e, device 0, function 0
    if cards:
        kfd_node(sysfs, 2, 110000, 0x0300, 0x744C)  # an RX 7900 XTX at 03:00.0
    return drm_facts(sysfs=sysfs, dev=dev_tree(tmp_path / "dev"), environ={}, user=ALICE)


def test_a_cpu_build_beside_an_apu_rocm_has_no_code_for_warns(tmp_path: Path) -> None:
    found = check(
        diagnose(facts(nvml=no_nvml(), nvidia_smi=None, drm=apu_box(tmp_path))), "torch build"
    )
    assert found.status is Status.WARN
    assert found.message.endswith(
        "there is 1 AMD GPU (amdgpu) at 0000:0e:00.0, gfx1036, for which PyTorch's ROCm build "
        "carries no code."
    )
    assert found.fix is not None and f"`{ROCM}`" in found.fix
    assert "HSA_OVERRIDE_GFX_VERSION" in found.fix


def test_a_gpu_rocm_runs_beside_an_apu_is_the_one_named(tmp_path: Path) -> None:
    drm = apu_box(tmp_path, radeon_rx_7900_xtx())
    assert kfd_targets(tmp_path / "sys") == {"0000:0e:00.0": "gfx1036", "0000:03:00.0": "gfx1100"}
    found = check(diagnose(facts(nvml=no_nvml(), nvidia_smi=None, drm=drm)), "torch build")
    assert found.status is Status.FAIL
    assert "there is 1 AMD GPU (amdgpu) at 0000:03:00.0 with /dev/kfd" in found.message
    assert found.fix == ROCM


def test_nvidia_gpus_keep_their_cuda_command_beside_an_amd_one(tmp_path: Path) -> None:
    found = check(diagnose(facts(drm=amd_facts(tmp_path))), "torch build")
    assert found.status is Status.FAIL
    assert "NVML reports NVIDIA driver" in found.message
    assert found.fix is not None and "/whl/cu124" in found.fix


def test_no_amd_or_intel_gpu_changes_nothing() -> None:
    found = check(diagnose(facts(nvml=no_nvml(), nvidia_smi=None)), "torch build")
    assert (found.status, found.message) == (
        Status.OK,
        "A CPU-only build, and no NVIDIA driver here to miss.",
    )


# ------------------------------------------------------------------ a ROCm build


def rocm(drm: DrmFacts, cuda: CudaProbed = NO_HIP) -> DoctorReport:
    torch = replace(CPU_TORCH, install=ROCM_BUILD, cuda=cuda)
    return diagnose(facts(torch=torch, nvml=no_nvml(), nvidia_smi=None, drm=drm))


def test_the_rocm_build_itself_is_fine(tmp_path: Path) -> None:
    found = check(rocm(amd_facts(tmp_path)), "torch build")
    assert (found.status, found.message) == (
        Status.OK,
        "A ROCm 7.2.26015 build (AMD GPUs are 'cuda').",
    )


@pytest.mark.parametrize(
    ("variables", "said", "fix"),
    [
        (
            {"HIP_VISIBLE_DEVICES": ""},
            "HIP_VISIBLE_DEVICES='' hides",
            "`unset HIP_VISIBLE_DEVICES`",
        ),
        (
            {"ROCR_VISIBLE_DEVICES": "-1", "CUDA_VISIBLE_DEVICES": "5"},
            "ROCR_VISIBLE_DEVICES='-1' and CUDA_VISIBLE_DEVICES='5' hides",
            "`unset ROCR_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES`",
        ),
        (  # ROCR's leaves GPU 1 alone, as HIP's 0: HIP's 1 is past it
            {"ROCR_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "1"},
            "HIP_VISIBLE_DEVICES='1' hides",
            "`unset HIP_VISIBLE_DEVICES`",
        ),
    ],
)
def test_variables_that_hide_every_amd_gpu_are_named(
    tmp_path: Path, variables: dict[str, str], said: str, fix: str
) -> None:
    found = check(rocm(amd_facts(tmp_path, variables=variables)), "torch.cuda")
    assert found.status is Status.FAIL
    assert said in found.message and "No HIP GPUs" in found.message
    assert found.fix == fix


def test_hip_visible_devices_takes_cuda_visible_devices_place(tmp_path: Path) -> None:
    """torch's order: HIP_VISIBLE_DEVICES set, CUDA_VISIBLE_DEVICES is not read at all."""
    variables = {"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": ""}
    drm = amd_facts(tmp_path, variables=variables)
    assert [str(h) for h in hiding(drm)] == ["HIP_VISIBLE_DEVICES='0'"]
    found = check(rocm(drm), "torch.cuda")
    assert "CUDA_VISIBLE_DEVICES" not in found.message
    assert found.fix is not None and found.fix.startswith("`rocminfo`")


def test_a_user_outside_the_render_group_is_told_to_join_it(tmp_path: Path) -> None:
    drm = amd_facts(
        tmp_path,
        kfd=node("/dev/kfd", openable=False),
        render_nodes=(node("/dev/dri/renderD128", openable=False, group="video"),),
    )
    found = check(rocm(drm), "torch.cuda")
    assert found.status is Status.FAIL
    assert found.message.startswith(
        "`is_available()` is False, `device_count()` is 0: RuntimeError: No HIP GPUs. You"
    )
    assert (
        "You (alice) cannot open /dev/kfd (crw-rw---- root:render), "
        "/dev/dri/renderD128 (crw-rw---- root:video), which ROCm needs." in found.message
    )
    assert found.fix == "`sudo usermod -aG render,video alice`, then log out and back in"


def test_a_user_added_to_render_since_logging_in_is_told_to_log_in_again(tmp_path: Path) -> None:
    late = UserFacts("bob", groups=frozenset({"bob"}), listed=frozenset({"bob", "render"}))
    found = check(
        rocm(amd_facts(tmp_path, kfd=node("/dev/kfd", openable=False), user=late)), "torch.cuda"
    )
    assert found.fix == (
        "bob was added to render after this login began: log out and back in "
        "(or run `newgrp render`)"
    )


def test_no_kfd_for_a_rocm_build_is_the_container_s_or_the_driver_s(tmp_path: Path) -> None:
    found = check(rocm(amd_facts(tmp_path, kfd=None)), "torch.cuda")
    assert found.status is Status.FAIL
    assert "There are 2 AMD GPUs (amdgpu)" in found.message
    assert found.fix is not None and "`--device=/dev/kfd --device=/dev/dri`" in found.fix


def test_nodes_open_and_nothing_hidden_points_at_rocminfo(tmp_path: Path) -> None:
    found = check(rocm(amd_facts(tmp_path)), "torch.cuda")
    assert found.status is Status.FAIL
    assert found.fix is not None and found.fix.startswith("`rocminfo`")


def test_a_rocm_build_on_a_box_without_amd_gpus_skips() -> None:
    found = check(rocm(DrmFacts()), "torch.cuda")
    assert found.status is Status.SKIP
    assert found.message.startswith("No AMD GPU here")


def test_a_rocm_build_shown_one_of_two_gpus_warns(tmp_path: Path) -> None:
    one = CudaProbed(available=True, device_count=1)
    found = check(
        rocm(amd_facts(tmp_path, variables={"HIP_VISIBLE_DEVICES": "0"}), one), "torch.cuda"
    )
    assert found.status is Status.WARN
    assert "HIP_VISIBLE_DEVICES='0' shows 1 of the 2 AMD GPUs" in found.message
    whole = check(rocm(amd_facts(tmp_path / "all"), replace(one, device_count=2)), "torch.cuda")
    assert whole.status is Status.OK


# ------------------------------------------------------------------ an XPU build


def xpu(drm: DrmFacts, probed: XpuProbed, *devices: DeviceReport) -> DoctorReport:
    torch = replace(CPU_TORCH, install=XPU_BUILD, xpu=probed, devices=devices)
    return diagnose(facts(torch=torch, nvml=no_nvml(), nvidia_smi=None, drm=drm))


def test_an_xpu_build_that_sees_its_gpus(tmp_path: Path) -> None:
    drm = drm_facts(sysfs=intel_box(tmp_path / "sys"), dev=tmp_path / "dev", environ={})
    arc = DeviceReport(device=Device("xpu", 0), name="Intel(R) Arc(TM) B580 Graphics")
    report = xpu(drm, XpuProbed(available=True, device_count=1), arc)
    assert check(report, "torch build").status is Status.OK
    found = check(report, "torch.xpu")
    assert (found.status, found.message) == (
        Status.OK,
        "`is_available()` is True, `device_count()` is 1: xpu:0 Intel(R) Arc(TM) B580 Graphics.",
    )


def test_an_xpu_build_that_cannot_open_the_render_node(tmp_path: Path) -> None:
    drm = drm_facts(sysfs=intel_box(tmp_path / "sys"), dev=tmp_path / "dev", environ={})
    drm = replace(drm, render_nodes=(node("/dev/dri/renderD128", openable=False),), user=ALICE)
    found = check(xpu(drm, XpuProbed(available=False, device_count=0)), "torch.xpu")
    assert found.status is Status.FAIL
    assert "which XPU needs" in found.message
    assert found.fix == "`sudo usermod -aG render alice`, then log out and back in"
    opened = replace(drm, render_nodes=(node("/dev/dri/renderD128", openable=True),))
    runtime = check(xpu(opened, XpuProbed(available=False, device_count=0)), "torch.xpu")
    assert runtime.fix is not None and "Level Zero" in runtime.fix


def test_only_an_xpu_build_gets_the_xpu_check() -> None:
    assert diagnose(facts()).check("torch.xpu") is None


# ------------------------------------------------------------------ the nodes


def test_a_node_says_its_mode_owner_and_group(tmp_path: Path) -> None:
    found = dev_node(dev_tree(tmp_path) / "kfd")
    assert found is not None and found.mode == 0o660
    assert found.describe().startswith(f"{tmp_path}/kfd (crw-rw---- ")
    assert dev_node(tmp_path / "missing") is None
    gathered = drm_facts(sysfs=tmp_path / "sys", dev=tmp_path, environ={"HIP_VISIBLE_DEVICES": "1"})
    assert [Path(n.path).name for n in gathered.render_nodes] == ["renderD128", "renderD129"]
    assert gathered.variables == {"HIP_VISIBLE_DEVICES": "1"}


def test_a_render_node_knows_its_gpu_and_only_the_build_s_own_count(tmp_path: Path) -> None:
    """An AMD card and an Intel one: the Intel card's closed render node is no ROCm matter."""
    sysfs = build(tmp_path / "sys", [radeon_rx_7900_xtx(), arc_b580("0000:08:00.0")])
    drm = drm_facts(sysfs=sysfs, dev=dev_tree(tmp_path / "dev"), environ={}, user=ALICE)
    assert [node.bus_id for node in drm.render_nodes] == ["0000:03:00.0", "0000:08:00.0"]
    amd, intel = drm.render_nodes
    closed = replace(drm, render_nodes=(amd, replace(intel, openable=False)))
    found = check(rocm(closed), "torch.cuda")
    assert found.fix is not None and found.fix.startswith("`rocminfo`")
    fix = check(xpu(closed, XpuProbed(available=False, device_count=0)), "torch.xpu").fix
    # the tree's nodes are root's group here: udev's usual groups are named instead
    assert fix == "`sudo usermod -aG render,video alice`, then log out and back in"
