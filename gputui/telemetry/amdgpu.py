"""AMD GPUs under the kernel's amdgpu driver, read from the files its documentation describes
(Documentation/gpu/amdgpu/driver-misc.rst and thermal.rst) in the PCI device's folder and its
hwmon.

What never changes (the name, ``unique_id``, installed VRAM, the link's maxima, which files
and sensors the card has) is read once; a sample reads a dozen small files. The power cap
and the RAS error counts are trusted for a while, as NVML's are.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

from gputui.telemetry.pci_names import PciNames
from gputui.telemetry.readings import GpuProcess, GpuReading, Vendor
from gputui.telemetry.sysfs import DrmCard, SysfsCard, SysfsFiles

RAS_TTL_S = 10.0
"""Seconds the RAS error counts are trusted (they change rarely, and there are many files)."""
PWM_MAX = 255
"""``pwm1`` runs from 0 to 255 (hwmon's sysfs interface)."""
HOTSPOT_BIT = 36
"""``SMU_THROTTLER_TEMP_HOTSPOT_BIT``: RDNA3 and later set it almost always, even idle."""
HOTSPOT_NEAR_C = 10.0
"""The hotspot bit counts only with the junction (hotspot) temperature within this of its
limit (``temp2_crit``)."""

GPU_METRICS_THROTTLE_AT = {(1, 3): 112, (2, 2): 120, (2, 3): 120, (2, 4): 120}
"""Where each ``gpu_metrics`` version (format and content revision of its header) keeps its
ASIC-independent throttle status (``indep_throttle_status``, a u64): the structs
gpu_metrics_v1_3 and v2_2 to v2_4 of the kernel's kgd_pp_interface.h. Earlier versions, and
the Instinct ones from v1_4, say only an ASIC-dependent status, which is not read."""
THROTTLE_BITS = (
    (range(0, 8), "power cap"),  # PPT0-3, SPL, FPPT, SPPT, SPPT_APU
    (range(16, 24), "current limit"),  # TDC (GFX, SOC, MEM, VDD, CVIP), EDC (CPU, GFX), APCC
    (range(32, 44), "thermal"),  # GPU, core, memory, edge, hotspot, SoC, VR and liquid temps
    (range(44, 46), "HW thermal"),  # VRHOT0, VRHOT1
    (range(46, 48), "HW slowdown"),  # PROCHOT (CPU, GFX)
    (range(56, 57), "power cap"),  # PPM
    (range(57, 58), "reliability limit"),  # FIT
)
"""The bits of ``indep_throttle_status`` (amdgpu_smu.h's ``SMU_THROTTLER_*_BIT``) in the words
the monitor shows, NVML's where they fit."""
_METRICS_HEADER = struct.Struct("=HBB")
"""``metrics_table_header``: structure size, format revision, content revision."""
_U64 = struct.Struct("=Q")

_DPM_LINE = re.compile(r"\s*\w+:\s*(\d+)\s*mhz\s*(\*)?\s*", re.IGNORECASE)
_UNCORRECTED = re.compile(r"^ue:\s*(\d+)\s*$", re.MULTILINE)


def parse_dpm(text: str | None) -> tuple[float | None, float | None]:
    """The current and highest clock of a ``pp_dpm_sclk`` or ``pp_dpm_mclk`` table, in MHz.

    Each line is a level (``1: 2100Mhz *``); the current one is marked ``*``. A table with a
    line that is not a level (a truncated file's last) is not trusted: both are ``None``; so
    is the current clock where no level is marked, and a level of 0 MHz (a table of zeros).
    """
    current: float | None = None
    highest: float | None = None
    for line in (text or "").splitlines():
        match = _DPM_LINE.fullmatch(line)
        if match is None:
            return None, None
        mhz = float(match[1])
        highest = mhz if highest is None else max(highest, mhz)
        if match[2]:
            current = mhz
    return current or None, highest or None


class AmdgpuCard(SysfsCard):
    """One AMD GPU: its static facts read when it is found, its readings each sample."""

    def __init__(self, card: DrmCard, index: int, files: SysfsFiles, names: PciNames) -> None:
        """Read what does not change and find which files the card has; ``index`` is its
        place among the AMD cards, ``names`` names a card whose board does not (no
        ``product_name``)."""
        device = card.device
        product = files.text(device / "product_name", quiet=True)
        if not product and card.pci_id is not None:
            revision = files.integer(device / "revision")
            product = names.name(Vendor.AMD, *card.pci_id, revision)
        serial = files.text(device / "unique_id", quiet=True) or None
        super().__init__(card, index, product or "AMD GPU", serial, files)
        self._vram_total = files.integer(device / "mem_info_vram_total")
        self._device_files: dict[str, str] = {}
        for name in (
            "gpu_busy_percent",
            "mem_busy_percent",
            "mem_info_vram_used",
            "pp_dpm_sclk",
            "pp_dpm_mclk",
        ):
            if os.path.exists(device / name):
                self._device_files[name] = os.fspath(device / name)
            else:
                files.note(device / name, "missing")  # once: the sample does not look again
        temperatures = self._hwmon_inputs("temp")
        self._edge = temperatures.get("edge")
        self._junction = temperatures.get("junction")
        crit = Path(self._junction.removesuffix("input") + "crit") if self._junction else None
        self._junction_limit = files.integer(crit) if crit and os.path.exists(crit) else None  # m°C
        self._memory_temperature = temperatures.get("mem")
        clocks = self._hwmon_inputs("freq")
        self._sclk, self._mclk = clocks.get("sclk"), clocks.get("mclk")  # measured, Hz
        # only an APU's hwmon has vddnb (its northbridge's voltage, in1)
        self.integrated = "vddnb" in self._hwmon_inputs("in")
        self._power = self._hwmon_file("power1_average", "power1_input")
        self._power_cap = self._hwmon_file("power1_cap")
        self._pwm = self._hwmon_file("pwm1")
        self._pwm_enable = self._hwmon_file("pwm1_enable")
        self._fan = self._hwmon_file("fan1_input")
        self._fan_max_rpm = (
            files.integer(self._fan.removesuffix("input") + "max") if self._fan else None
        )
        self._metrics, self._throttle_at = _gpu_metrics(device, files)
        self._ras = _ras_files(device)
        self._ras_errors: tuple[float, int | None] | None = None  # (read at, count)

    def read(self, now: float, processes: tuple[GpuProcess, ...] | None) -> GpuReading:
        junction = self._celsius(self._junction)
        edge = self._celsius(self._edge) if self._edge else junction  # MI300: no edge sensor
        rpm = None if self._fan is None else self._files.integer(self._fan, keep=True)
        rpm = None if rpm is None or rpm < 0 else rpm
        sclk, sclk_max = self._clock("pp_dpm_sclk", self._sclk)
        mclk, mclk_max = self._clock("pp_dpm_mclk", self._mclk)
        return self._reading(
            now,
            processes,
            utilization_percent=self._percent("gpu_busy_percent"),
            memory_utilization_percent=self._percent("mem_busy_percent"),
            memory_used_bytes=self._integer("mem_info_vram_used"),
            memory_total_bytes=self._vram_total,
            temperature_c=edge,
            junction_temperature_c=junction,
            memory_temperature_c=self._celsius(self._memory_temperature) or None,  # 0: none
            power_w=self._watts(self._power),
            power_limit_w=self._cap_w(now, self._power_cap),
            sm_clock_mhz=sclk,
            sm_clock_max_mhz=sclk_max,
            memory_clock_mhz=mclk,
            memory_clock_max_mhz=mclk_max,
            fan_percent=self._fan_percent(rpm),
            fan_rpm=rpm,
            ecc_uncorrected_errors=self._uncorrected(now),
            throttle_reasons=self._throttle_reasons(junction),
        )

    def _throttle_reasons(self, junction: float | None) -> tuple[str, ...] | None:
        """Why the clocks are held down, from ``gpu_metrics`` where its version says it in
        ASIC-independent bits (empty: they are not); ``None`` elsewhere, or when the file
        does not read as that version (noted). The hotspot bit counts only with the
        ``junction`` temperature near its limit (``HOTSPOT_NEAR_C``)."""
        if self._metrics is None or self._throttle_at is None:
            return None
        data = self._files.data(self._metrics, keep=True)
        at = self._throttle_at
        if data is None or len(data) < at + _U64.size:
            self._files.note(self._metrics, "truncated")
            return None
        size, *version = _METRICS_HEADER.unpack_from(data)
        if GPU_METRICS_THROTTLE_AT.get((version[0], version[1])) != at or size < at + _U64.size:
            self._files.note(
                self._metrics, f"not the gpu_metrics it was (v{version[0]}.{version[1]})"
            )
            return None
        (bits,) = _U64.unpack_from(data, at)
        limit = self._junction_limit
        if junction is None or limit is None or junction < limit / 1000 - HOTSPOT_NEAR_C:
            bits &= ~(1 << HOTSPOT_BIT)
        return tuple(
            dict.fromkeys(word for span, word in THROTTLE_BITS if any(bits >> b & 1 for b in span))
        )

    def _clock(self, table: str, measured: str | None) -> tuple[float | None, float | None]:
        """A clock's current and highest MHz: hwmon's measured clock where the card has one
        (``freq1_input``, ``freq2_input``, Hz), else the level of the DPM ``table`` marked
        current (some cards leave it at a level they are not at); the highest is the table's
        top level."""
        current, highest = self._dpm(table)
        hz = None if measured is None else self._files.integer(measured, keep=True)
        return (current if hz is None else hz / 1e6), highest

    def _dpm(self, name: str) -> tuple[float | None, float | None]:
        path = self._device_files.get(name)
        text = None if path is None else self._files.text(path, keep=True)
        current, highest = parse_dpm(text)
        if text is not None and highest is None:
            self._files.note(self._device_files[name], "not a table of clock levels")
        elif text is not None and current is None:
            self._files.note(self._device_files[name], "no level marked current")
        return current, highest

    def _integer(self, name: str) -> int | None:
        path = self._device_files.get(name)
        return None if path is None else self._files.integer(path, keep=True)

    def _percent(self, name: str) -> float | None:
        value = self._integer(name)
        if value is not None and not 0 <= value <= 100:
            self._files.note(self._device_files[name], f"{value} is not a percentage")
            return None
        return None if value is None else float(value)

    def _watts(self, path: str | None) -> float | None:
        microwatts = None if path is None else self._files.integer(path, keep=True)
        return None if microwatts is None or microwatts < 0 else microwatts / 1e6

    def _fan_percent(self, rpm: int | None) -> float | None:
        """The fan's speed as a share of its maximum: the tachometer's (``rpm`` of
        ``fan1_max``) where the card has one, else the duty cycle ``pwm1`` asks for, full
        where ``pwm1_enable`` is 0 (no control: full speed). A tachometer without a maximum
        reads n/a here, and its RPM is shown instead."""
        files = self._files
        if self._fan is not None:
            top = self._fan_max_rpm
            return round(rpm * 100 / top, 1) if rpm is not None and top else None
        if self._pwm is None:
            return None
        if self._pwm_enable is not None and files.integer(self._pwm_enable, keep=True) == 0:
            return 100.0
        pwm = files.integer(self._pwm, keep=True)
        if pwm is not None and 0 <= pwm <= PWM_MAX:
            return round(pwm * 100 / PWM_MAX, 1)
        if pwm is not None:
            files.note(self._pwm, f"{pwm} is not 0 to {PWM_MAX}")
        return None

    def _uncorrected(self, now: float) -> int | None:
        """Uncorrectable errors summed over the RAS blocks (``ue:`` of each
        ``ras/*_err_count``); ``None`` without RAS."""
        cached = self._ras_errors
        if cached is None or now - cached[0] >= RAS_TTL_S:
            counts = []
            for path in self._ras:
                match = _UNCORRECTED.search(self._files.text(path) or "")
                if match:
                    counts.append(int(match[1]))
                else:
                    self._files.note(path, "no 'ue:' count")
            cached = self._ras_errors = (now, sum(counts) if counts else None)
        return cached[1]


def _gpu_metrics(device: Path, files: SysfsFiles) -> tuple[str | None, int | None]:
    """The card's ``gpu_metrics`` and where its version keeps the ASIC-independent throttle
    status; ``None`` for what it lacks (no file, a truncated header, another version: noted)."""
    path = os.fspath(device / "gpu_metrics")
    data = files.data(path, quiet=True)
    if data is None:
        return None, None
    if len(data) < _METRICS_HEADER.size:
        files.note(path, "truncated")
        return None, None
    _, format_revision, content_revision = _METRICS_HEADER.unpack_from(data)
    at = GPU_METRICS_THROTTLE_AT.get((format_revision, content_revision))
    if at is None:
        files.note(
            path, f"v{format_revision}.{content_revision} has no ASIC-independent throttle status"
        )
        return None, None
    return path, at


def _ras_files(device: Path) -> list[Path]:
    """The card's ``ras/<block>_err_count`` files (none without RAS: consumer cards)."""
    try:
        names = os.listdir(device / "ras")
    except OSError:
        return []
    return [device / "ras" / name for name in sorted(names) if name.endswith("_err_count")]
