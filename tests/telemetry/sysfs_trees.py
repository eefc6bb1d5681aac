"""Fake sysfs trees of AMD and Intel GPUs, built at test time as the kernel lays them out.

Each card is a PCI device folder under ``devices/`` with its ``uevent``, its files and its
hwmon; its DRM nodes (``cardN``, ``renderD12N``, a connector ``cardN-DP-1``) are folders
under ``drm/`` linked from ``class/drm``, each with a ``device`` link back, as on a real box.
The files hold what the kernel's documentation says they hold (the amdgpu pages
Documentation/gpu/amdgpu/driver-misc.rst and thermal.rst, the xe pages
Documentation/gpu/xe/xe_gt_freq.rst and ABI/testing/sysfs-driver-intel-xe-hwmon, i915's
``gt_*_freq_mhz`` and ``rc6_residency_ms``, the PCI core's ``current_link_speed``); where a
value is a particular card's, the comment beside it says where it comes from.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gputui.telemetry.pci_names import PciNames

GiB = 1024**3


@dataclass
class Card:
    """One PCI GPU (or display device) as sysfs shows it."""

    bus_id: str
    """``0000:03:00.0``."""
    driver: str
    """The kernel driver bound to it."""
    pci_id: str
    """``VENDOR:DEVICE`` as the uevent writes it, e.g. ``1002:74A1``."""
    revision: str = "0x00"
    """The PCI revision (``revision``)."""
    device: dict[str, str | bytes] = field(default_factory=dict)
    """Files in the PCI device's folder, by path relative to it (``ras/umc_err_count``)."""
    hwmon: dict[str, str] = field(default_factory=dict)
    """Files in its hwmon folder."""
    node: dict[str, str] = field(default_factory=dict)
    """Files in its ``cardN`` node (i915's frequencies), by relative path."""


def device_of(sysfs: Path, bus_id: str) -> Path:
    """The folder of the PCI device ``bus_id`` in a tree :func:`build` laid out."""
    return sysfs / "devices" / "pci0000:00" / bus_id


def build(root: Path, cards: Sequence[Card]) -> Path:
    """Lay ``cards`` out under ``root`` as ``/sys`` does, numbered in order; returns ``root``."""
    drm = root / "class" / "drm"
    drm.mkdir(parents=True, exist_ok=True)
    write(drm / "version", "drm 1.1.0 20060810\n")
    for number, card in enumerate(cards):
        device = device_of(root, card.bus_id)
        vendor, _, chip = card.pci_id.partition(":")
        write(
            device / "uevent",
            f"DRIVER={card.driver}\nPCI_CLASS=30000\nPCI_ID={card.pci_id}\n"
            f"PCI_SUBSYS_ID={card.pci_id}\nPCI_SLOT_NAME={card.bus_id}\n"
            f"MODALIAS=pci:v0000{vendor}d0000{chip}sv0000{vendor}sd0000{chip}bc03sc00i00\n",
        )
        write(device / "vendor", f"0x{vendor.lower()}\n")
        write(device / "device", f"0x{chip.lower()}\n")
        write(device / "revision", f"{card.revision}\n")
        drivers = root / "bus" / "pci" / "drivers" / card.driver
        drivers.mkdir(parents=True, exist_ok=True)
        _link(device / "driver", drivers)
        for path, text in card.device.items():
            write(device / path, text)
        if card.hwmon:
            for path, text in card.hwmon.items():
                write(device / "hwmon" / f"hwmon{number + 2}" / path, text)
        node = device / "drm" / f"card{number}"
        render = device / "drm" / f"renderD{128 + number}"
        connector = node / f"card{number}-DP-1"
        for folder in (node, render):
            folder.mkdir(parents=True, exist_ok=True)
            _link(folder / "device", device)
            write(folder / "dev", f"226:{number if folder is node else 128 + number}\n")
        write(connector / "status", "disconnected\n")
        for path, text in card.node.items():
            write(node / path, text)
        for folder in (node, render, connector):
            _link(drm / folder.name, folder)
    return root


def write(path: Path, text: str | bytes) -> None:
    """Write ``text`` (or bytes) to ``path``, making its folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def _link(link: Path, target: Path) -> None:
    """A relative symlink, as sysfs's are."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


# --- AMD --------------------------------------------------------------------------------

MI300X_BUS_IDS = (
    "0000:0c:00.0",
    "0000:22:00.0",
    "0000:38:00.0",
    "0000:5c:00.0",
    "0000:9f:00.0",
    "0000:af:00.0",
    "0000:bf:00.0",
    "0000:df:00.0",
)
"""An 8-GPU OAM board: one GPU behind each PCIe switch."""
MI300X_VRAM = 206141652992
"""``mem_info_vram_total`` of an MI300X: 192 GiB less what the firmware keeps (rocm-smi
--showmeminfo vram prints it as ``VRAM Total Memory (B)``)."""
MI300X_BUSY = (100, 98, 0, 73, 100, 12, 55, 0)
MI300X_SCLK = (2100, 2100, 500, 1906, 2075, 1124, 1710, 500)
MI300X_POWER_W = (712, 698, 141, 533, 745, 210, 466, 139)
MI300X_VRAM_USED = tuple(
    int(gib * GiB) for gib in (183.5, 171.25, 0.25, 96.0, 188.75, 22.5, 140.0, 0.25)
)
MI300X_JUNCTION_C = (81, 79, 38, 71, 86, 47, 66, 37)


def mi300x(index: int, bus_id: str | None = None) -> Card:
    """An AMD Instinct MI300X (device 74a1) on amdgpu, busy as ``index`` says.

    GC 9.4.3 has no edge sensor: hwmon gives junction and memory temperatures only
    (amdgpu_pm.c hides ``temp1_*`` on it), and ``power1_input``, not ``power1_average``. The
    dpm tables list the lowest level, the current one where it is between, and the highest
    (2100 MHz engine clock and 1300 MHz HBM3 clock, AMD's MI300X data sheet).
    """
    busy, sclk = MI300X_BUSY[index], MI300X_SCLK[index]
    levels = ["500Mhz", f"{sclk}Mhz", "2100Mhz"] if 500 < sclk < 2100 else ["500Mhz", "2100Mhz"]
    current = levels.index(f"{sclk}Mhz")
    sclk_table = "".join(
        f"{n}: {level}{' *' if n == current else ''}\n" for n, level in enumerate(levels)
    )
    return Card(
        bus_id or MI300X_BUS_IDS[index],
        "amdgpu",
        "1002:74A1",
        device={
            "product_name": "AMD Instinct MI300X OAM\n",
            "unique_id": f"{0x5C2F71A9D3E84B60 + 0x1111 * index:016x}\n",
            "gpu_busy_percent": f"{busy}\n",
            "mem_busy_percent": f"{busy * 2 // 5}\n",
            "mem_info_vram_total": f"{MI300X_VRAM}\n",
            "mem_info_vram_used": f"{MI300X_VRAM_USED[index]}\n",
            "mem_info_gtt_total": f"{1007 * GiB}\n",
            "mem_info_gtt_used": f"{57 * 1024**2}\n",
            "pp_dpm_sclk": sclk_table,
            "pp_dpm_mclk": "0: 900Mhz\n1: 1100Mhz\n2: 1200Mhz\n3: 1300Mhz *\n",
            "current_link_speed": "32.0 GT/s PCIe\n",
            "current_link_width": "16\n",
            "max_link_speed": "32.0 GT/s PCIe\n",
            "max_link_width": "16\n",
            "power_dpm_force_performance_level": "auto\n",
            "ras/features": "feature mask: 0x3fffff\n",
            "ras/umc_err_count": f"ue: {2 if index == 4 else 0}\nce: {index % 3}\n",
            "ras/gfx_err_count": "ue: 0\nce: 0\n",
            "ras/sdma_err_count": "ue: 0\nce: 0\n",
            "ras/mmhub_err_count": "ue: 0\nce: 0\n",
            "ras/xgmi_wafl_err_count": "ue: 0\nce: 0\n",
        },
        hwmon={
            "name": "amdgpu\n",
            "temp2_input": f"{MI300X_JUNCTION_C[index] * 1000}\n",
            "temp2_label": "junction\n",
            "temp2_crit": "100000\n",
            "temp3_input": f"{(MI300X_JUNCTION_C[index] - 6) * 1000}\n",
            "temp3_label": "mem\n",
            "temp3_crit": "105000\n",
            "power1_input": f"{MI300X_POWER_W[index] * 1_000_000}\n",
            "power1_cap": "750000000\n",
            "power1_cap_max": "750000000\n",
        },
    )


def gpu_metrics_v1_3(throttle_bits: int = 0, *, size: int = 120) -> bytes:
    """``gpu_metrics`` as Navi 3x cards give it (smu_v13_0_0's gpu_metrics_v1_3, laid out as
    kgd_pp_interface.h declares it): the header, the temperatures (°C), activities (%),
    socket power (W) and current clocks (MHz) of the 7900 XTX below, and ``throttle_bits`` as
    its ASIC-independent throttle status; cut to ``size`` bytes (a truncated file)."""
    table = bytearray(120)
    struct.pack_into("=HBB", table, 0, 120, 1, 3)
    struct.pack_into("=3H", table, 4, 62, 79, 70)  # edge, hotspot, memory
    struct.pack_into("=3H", table, 16, 97, 34, 0)  # gfx, memory controller, media
    struct.pack_into("=H", table, 22, 312)  # average socket power
    struct.pack_into("=3H", table, 54, 2371, 1200, 1249)  # current gfx, soc, memory clocks
    struct.pack_into("=Q", table, 112, throttle_bits)  # indep_throttle_status
    return bytes(table[:size])


def radeon_rx_7900_xtx(bus_id: str = "0000:03:00.0") -> Card:
    """An AMD Radeon RX 7900 XTX (Navi 31, device 744c revision c8): a desktop card with no
    board name in sysfs (it is named from libdrm's amdgpu.ids), three temperatures and a
    fan. The readings are those of ``sensors`` and the dpm tables on a busy 7900 XTX: 24 GiB
    less the firmware's share, 2526 MHz top engine clock, 1249 MHz GDDR6 clock, 339 W cap.
    """
    return Card(
        bus_id,
        "amdgpu",
        "1002:744C",
        revision="0xc8",
        device={
            "unique_id": "8f3b2c6a1d5e7f09\n",
            "gpu_busy_percent": "97\n",
            "mem_busy_percent": "34\n",
            "mem_info_vram_total": "25753026560\n",
            "mem_info_vram_used": "18340888576\n",
            "mem_info_vis_vram_total": "25753026560\n",
            "pp_dpm_sclk": "0: 500Mhz \n1: 2371Mhz *\n2: 2526Mhz \n",
            "pp_dpm_mclk": "0: 96Mhz \n1: 456Mhz \n2: 772Mhz \n3: 1249Mhz *\n",
            "current_link_speed": "16.0 GT/s PCIe\n",
            "current_link_width": "16\n",
            "max_link_speed": "16.0 GT/s PCIe\n",
            "max_link_width": "16\n",
            "gpu_metrics": gpu_metrics_v1_3(),
        },
        hwmon={
            "name": "amdgpu\n",
            "temp1_input": "62000\n",
            "temp1_label": "edge\n",
            "temp2_input": "79000\n",
            "temp2_label": "junction\n",
            "temp2_crit": "110000\n",
            "temp3_input": "70000\n",
            "temp3_label": "mem\n",
            "power1_average": "312000000\n",
            "power1_cap": "339000000\n",
            "power1_cap_max": "402000000\n",
            "pwm1": "102\n",
            "pwm1_enable": "2\n",
            "fan1_input": "1320\n",
            "fan1_max": "3300\n",
            "freq1_input": "2371000000\n",
            "freq1_label": "sclk\n",
        },
    )


def radeon_780m(bus_id: str = "0000:c4:00.0") -> Card:
    """The Radeon 780M of a Ryzen 7 7840U (Phoenix, device 15bf revision c1): an APU, so
    VRAM is the 512 MiB carve-out, there is no memory busy share, no fan, no power cap, one
    (edge) temperature, the northbridge's voltage (``vddnb``, an APU's alone), and
    ``power1_average`` counts the CPU too; its internal link has no
    speed to report (the PCI core writes ``Unknown``)."""
    return Card(
        bus_id,
        "amdgpu",
        "1002:15BF",
        revision="0xc1",
        device={
            "gpu_busy_percent": "4\n",
            "mem_info_vram_total": "536870912\n",
            "mem_info_vram_used": "293601280\n",
            "mem_info_gtt_total": f"{15 * GiB}\n",
            "mem_info_gtt_used": "171966464\n",
            "pp_dpm_sclk": "0: 800Mhz *\n1: 2700Mhz \n",
            "pp_dpm_mclk": "0: 400Mhz \n1: 800Mhz *\n2: 1400Mhz \n",
            "current_link_speed": "Unknown\n",
            "current_link_width": "0\n",
            "max_link_speed": "Unknown\n",
            "max_link_width": "255\n",
        },
        hwmon={
            "name": "amdgpu\n",
            "temp1_input": "46000\n",
            "temp1_label": "edge\n",
            "power1_average": "8047000\n",
            "in0_input": "1015\n",
            "in0_label": "vddgfx\n",
            "in1_input": "1001\n",
            "in1_label": "vddnb\n",
        },
    )


def aspeed_bmc(bus_id: str = "0000:02:00.0") -> Card:
    """The BMC's display device of a GPU server (ASPEED AST2600, driver ``ast``): a DRM card
    that is no GPU gputui reads."""
    return Card(bus_id, "ast", "1A03:2000", revision="0x52")


def nvidia_card(bus_id: str = "0000:17:00.0") -> Card:
    """An NVIDIA GPU's DRM node (nvidia-drm with modeset on): read through NVML, not here."""
    return Card(bus_id, "nvidia", "10DE:2330", revision="0xa1")


def mi300x_box(root: Path) -> Path:
    """A GPU server: its BMC's display device, then eight MI300X."""
    return build(root, [aspeed_bmc(), *(mi300x(i) for i in range(8))])


AMDGPU_IDS = """\
# List of AMDGPU IDs (libdrm's amdgpu.ids: device id, revision, name)

1.0.0
15BF,\tC1,\tAMD Radeon 780M
15BF,\tC2,\tAMD Radeon 760M
744C,\tC8,\tAMD Radeon RX 7900 XTX
744C,\tCC,\tAMD Radeon RX 7900 XT
"""
"""A few lines of libdrm's amdgpu.ids, as it writes them."""

PCI_IDS = """\
# pci.ids (hwdata): a vendor, then its devices indented by a tab
1002  Advanced Micro Devices, Inc. [AMD/ATI]
\t744c  Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]
\t\t1002 0e3b  Radeon RX 7900 XTX
8086  Intel Corporation
\t56c0  ATS-M [Data Center GPU Flex 170]
\t56c1  ATS-M [Data Center GPU Flex 140]
\te20b  Battlemage G21 [Arc B580]
8087  Intel Corp.
\t0029  AX200 Bluetooth
"""
"""The AMD and Intel lines of pci.ids these cards need."""


def names(folder: Path) -> PciNames:
    """Names from the tables above, written under ``folder``."""
    write(folder / "amdgpu.ids", AMDGPU_IDS)
    write(folder / "pci.ids", PCI_IDS)
    return PciNames([folder / "amdgpu.ids"], [folder / "pci.ids"])


# --- Intel ------------------------------------------------------------------------------


THROTTLE_REASONS = ("pl1", "pl2", "pl4", "thermal", "prochot", "ratl", "vr_thermalert", "vr_tdc")
"""Why a GT's clock is held down, as both drivers name the reasons."""
I915_THROTTLE_FILES = ("status", *THROTTLE_REASONS)
"""i915's ``gt/gt<N>/throttle_reason_<name>`` (intel_gt_sysfs_pm.c, Linux 6.1 and later)."""
XE_THROTTLE_FILES = ("status", *(f"reason_{name}" for name in THROTTLE_REASONS))
"""xe's ``tile<N>/gt<M>/freq0/throttle/<name>`` (the DOC comment of xe_gt_throttle.c)."""


def arc_b580(bus_id: str = "0000:03:00.0") -> Card:
    """An Intel Arc B580 (Battlemage, device e20b) on xe: a render GT and a media GT in tile
    0, each with its frequencies and idle counter, 12 GiB of VRAM, PCIe 4.0 x8, and hwmon's
    card and package channels (190 W board power and 2670 MHz graphics clock, Intel's B580
    specifications)."""
    return Card(
        bus_id,
        "xe",
        "8086:E20B",
        device={
            "tile0/physical_vram_size_bytes": f"{12 * GiB}\n",
            "tile0/gt0/freq0/cur_freq": "2670\n",
            "tile0/gt0/freq0/act_freq": "2670\n",
            "tile0/gt0/freq0/min_freq": "400\n",
            "tile0/gt0/freq0/max_freq": "2850\n",
            "tile0/gt0/freq0/rp0_freq": "2850\n",
            "tile0/gt0/freq0/rpn_freq": "400\n",
            "tile0/gt0/gtidle/name": "gt0-rc\n",
            "tile0/gt0/gtidle/idle_status": "gt-c0\n",
            "tile0/gt0/gtidle/idle_residency_ms": "523110\n",
            **{f"tile0/gt0/freq0/throttle/{name}": "0\n" for name in XE_THROTTLE_FILES},
            "tile0/gt1/freq0/cur_freq": "1300\n",
            "tile0/gt1/freq0/max_freq": "2400\n",
            "tile0/gt1/gtidle/name": "gt1-mc\n",
            "tile0/gt1/gtidle/idle_status": "gt-c6\n",
            "tile0/gt1/gtidle/idle_residency_ms": "1811022\n",
            "current_link_speed": "16.0 GT/s PCIe\n",
            "current_link_width": "8\n",
            "max_link_speed": "16.0 GT/s PCIe\n",
            "max_link_width": "8\n",
        },
        hwmon={
            "name": "xe\n",
            "energy1_input": "3419000000\n",
            "energy1_label": "card\n",
            "energy2_input": "2877000000\n",
            "energy2_label": "pkg\n",
            "power1_max": "190000000\n",
            "power1_rated_max": "190000000\n",
            "power1_label": "card\n",
            "power2_max": "150000000\n",
            "power2_label": "pkg\n",
            "temp2_input": "58000\n",
            "temp2_label": "pkg\n",
            "temp3_input": "62000\n",
            "temp3_label": "vram\n",
            "fan1_input": "1320\n",
            "in1_input": "870\n",
        },
    )


def flex_170(bus_id: str = "0000:4d:00.0") -> Card:
    """An Intel Data Center GPU Flex 170 (ATS-M, device 56c0) on i915: the card node's
    ``gt_*_freq_mhz`` and GT 0's ``rc6_residency_ms``; i915's hwmon gives energy and the
    150 W limit, and no temperature; upstream i915 says nothing of VRAM (Intel's Flex 170
    specifications: 2.05 GHz, 150 W, PCIe 4.0 x16)."""
    return Card(
        bus_id,
        "i915",
        "8086:56C0",
        revision="0x08",
        node={
            "gt_cur_freq_mhz": "2050\n",
            "gt_act_freq_mhz": "2050\n",
            "gt_min_freq_mhz": "300\n",
            "gt_max_freq_mhz": "2050\n",
            "gt_boost_freq_mhz": "2050\n",
            "gt_RP0_freq_mhz": "2050\n",
            "gt_RPn_freq_mhz": "300\n",
            "gt/gt0/rc6_enable": "1\n",
            "gt/gt0/rc6_residency_ms": "1802211\n",
            "gt/gt0/rps_cur_freq_mhz": "2050\n",
            **{f"gt/gt0/throttle_reason_{name}": "0\n" for name in I915_THROTTLE_FILES},
            "power/rc6_residency_ms": "1802211\n",
        },
        device={
            "current_link_speed": "16.0 GT/s PCIe\n",
            "current_link_width": "16\n",
            "max_link_speed": "16.0 GT/s PCIe\n",
            "max_link_width": "16\n",
        },
        hwmon={
            "name": "i915\n",
            "energy1_input": "9127441000\n",
            "power1_max": "150000000\n",
            "power1_rated_max": "150000000\n",
            "power1_crit": "400000000\n",
            "in0_input": "750\n",
        },
    )


def intel_box(root: Path) -> Path:
    """An Arc B580 on xe and a Flex 170 on i915."""
    return build(root, [arc_b580(), flex_170()])


def add_to(path: Path, amount: int) -> None:
    """Add ``amount`` to the counter in ``path``, as time passes."""
    path.write_text(f"{int(path.read_text()) + amount}\n")


def every_kind_box(root: Path) -> Path:
    """Every card above on one box (a test's box, not a real one): the BMC's display, eight
    MI300X, a Radeon RX 7900 XTX, a Radeon 780M APU, a Flex 170 on i915 and an Arc B580 on
    xe."""
    return build(
        root,
        [
            aspeed_bmc(),
            *(mi300x(i) for i in range(8)),
            radeon_rx_7900_xtx(),
            radeon_780m(),
            flex_170(),
            arc_b580("0000:e3:00.0"),
        ],
    )
