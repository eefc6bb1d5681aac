"""Intel GPUs under the kernel's i915 and xe drivers, read from sysfs and hwmon.

Neither driver says how busy a GPU is, nor how much power it draws: both give counters, the
time each GT spent idle in RC6 (i915's ``rc6_residency_ms``, xe's
``gtidle/idle_residency_ms``) and the energy used (hwmon's ``energy1_input``, or xe's
package counter where the card's reads 0), so utilization and power come from two samples'
difference (none from the first). The GT frequencies are i915's
``gt_cur_freq_mhz``/``gt_max_freq_mhz`` and xe's ``tile*/gt*/freq0/cur_freq``/``max_freq``;
xe gives each tile's VRAM size, i915 none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gputui.telemetry.pci_names import PciNames
from gputui.telemetry.readings import GpuProcess, GpuReading, Vendor
from gputui.telemetry.sysfs import DrmCard, SysfsCard, SysfsFiles, first_present, subfolders

THROTTLE_WORDS = (
    ("pl1", "power cap"),
    ("pl2", "power cap"),
    ("pl4", "peak current limit"),
    ("thermal", "thermal"),
    ("ratl", "thermal"),
    ("prochot", "HW slowdown"),
    ("vr_thermalert", "HW thermal"),
    ("vr_tdc", "VR current limit"),
)
"""Each reason a GT's clock is held down (i915's ``throttle_reason_<name>``, xe's
``throttle/reason_<name>``, 0 or 1) in the words the monitor shows, NVML's where they fit:
PL1/PL2 the sustained and burst power limits, PL4 the peak current (Iccmax), RATL the running
average thermal limit, PROCHOT the platform's throttle signal, the VR's thermal alert and
thermal design current."""
THROTTLE_OTHER = "other"
"""Why a GT is held down when the status says so and none of its reasons' files does."""


@dataclass
class _Counter:
    """A counter read each sample, and its last value and time, for the rate between two."""

    path: str
    last: tuple[float, int] | None = None  # (when, value)

    def rate(self, files: SysfsFiles, now: float) -> tuple[int | None, float | None]:
        """The counter now, and its increase per second since the last sample (``None`` on
        the first, or when it went backwards: a driver reload started it again)."""
        value = files.integer(self.path, keep=True)
        if value is None:
            return None, None
        last, self.last = self.last, (now, value)
        if last is None or now <= last[0] or value < last[1]:
            return value, None
        return value, (value - last[1]) / (now - last[0])


@dataclass
class _Gt:
    """One GT (a graphics or media engine group): its clock and its idle counter."""

    clock: str | None
    """The requested frequency, MHz."""
    clock_max_mhz: float | None
    """Its highest frequency, read once."""
    idle: _Counter | None
    """Milliseconds spent idle (RC6) since the driver was loaded."""
    throttle: tuple[str, dict[str, str]] | None = None
    """Whether its clock is held down now (a file of 0 or 1), and each reason's file by
    name; ``None`` where the driver does not say."""


class IntelCard(SysfsCard):
    """One Intel GPU: its static facts read when it is found, its readings each sample."""

    def __init__(self, card: DrmCard, index: int, files: SysfsFiles, names: PciNames) -> None:
        """As :class:`~gputui.telemetry.amdgpu.AmdgpuCard`'s: ``names`` names the card from
        its PCI ids (neither Intel driver gives a product name)."""
        device = card.device
        name = names.name(Vendor.INTEL, *card.pci_id, None) if card.pci_id else "Intel GPU"
        super().__init__(card, index, name, None, files)
        if card.driver == "xe":
            self._gts = list(_xe_gts(device, files))
            sizes = [
                files.integer(path)
                for tile in subfolders(device, "tile")
                if (
                    path := first_present(
                        tile / "physical_vram_size_bytes",
                        tile / "memory" / "physical_vram_size_bytes",
                    )
                )
            ]
            self._vram_total = sum(s for s in sizes if s) or None
            self._vram_free: str | None = None
        else:
            self._gts = list(_i915_gts(card.path, files))
            total = first_present(card.path / "lmem_total_bytes")
            self._vram_total = files.integer(total) if total else None
            self._vram_free = first_present(card.path / "lmem_avail_bytes")
        if not self._gts:
            files.note(device, "no GT frequencies or idle counters found")
        energies = self._hwmon_inputs("energy")
        self._energies = [
            _Counter(path) for name in ("card", "energy1", "pkg") if (path := energies.get(name))
        ]
        self._energy_counter_uj: int | None = None
        self._energy_since_start_uj = 0
        temperatures = self._hwmon_inputs("temp")
        self._temperature = temperatures.get("pkg") or temperatures.get("temp1")
        self._memory_temperature = temperatures.get("vram")
        self._power_max = self._hwmon_file("power1_max", "power2_max")  # card, pkg

    def read(self, now: float, processes: tuple[GpuProcess, ...] | None) -> GpuReading:
        # utilization and power are rates over the sampler's clock
        files = self._files
        busy = [self._busy(gt, now) for gt in self._gts if gt.idle is not None]
        known = [share for share in busy if share is not None]
        if len(known) < len(busy):
            known = []  # the busiest GT may be the one not known
        first = self._gts[0] if self._gts else None
        clock = files.integer(first.clock, keep=True) if first and first.clock else None
        energy_uj, power_uw = self._energy(now)
        return self._reading(
            now,
            processes,
            utilization_percent=max(known) if known else None,  # the busier GT's
            memory_utilization_percent=None,
            memory_used_bytes=self._vram_used(),
            memory_total_bytes=self._vram_total,
            temperature_c=self._celsius(self._temperature),
            memory_temperature_c=self._celsius(self._memory_temperature) or None,  # 0: none
            power_w=None if power_uw is None else round(power_uw / 1e6, 3),
            power_limit_w=self._cap_w(now, self._power_max),
            energy_j=None if energy_uj is None else energy_uj / 1e6,
            energy_joules=self._energy_since_start(energy_uj),
            sm_clock_mhz=None if clock is None else float(clock),
            sm_clock_max_mhz=first.clock_max_mhz if first else None,
            fan_percent=None,  # hwmon gives RPM, with no maximum to share it of
            throttle_reasons=self._throttle_reasons(),
        )

    def _throttle_reasons(self) -> tuple[str, ...] | None:
        """Why any GT's clock is held down, in words (empty: none is); ``None`` where no GT
        says. A GT held down for no reason its files name is held down for ``other``."""
        files, words, told = self._files, [], False
        for gt in self._gts:
            if gt.throttle is None:
                continue
            status, reasons = gt.throttle
            held = files.integer(status, keep=True)
            told = told or held is not None
            if not held:
                continue
            found = [
                word
                for name, word in THROTTLE_WORDS
                if name in reasons and files.integer(reasons[name], keep=True)
            ]
            words += found or [THROTTLE_OTHER]
        return tuple(dict.fromkeys(words)) if told else None

    def _busy(self, gt: _Gt, now: float) -> float | None:
        """The share of the time since the last sample the GT was not idle, percent."""
        if gt.idle is None:
            return None
        _, idle_ms_per_s = gt.idle.rate(self._files, now)
        if idle_ms_per_s is None:
            return None
        return round(min(max(100.0 - idle_ms_per_s / 10.0, 0.0), 100.0), 1)

    def _energy(self, now: float) -> tuple[int | None, float | None]:
        """The energy counter (µJ) and its rate: the card's, else the package's where the
        card's reads 0 (xe on a B580, Linux 6.16: the card's never counts)."""
        while self._energies:
            value, rate = self._energies[0].rate(self._files, now)
            if value != 0 or len(self._energies) == 1:
                return value, rate
            del self._energies[0]
        return None, None

    def _energy_since_start(self, counter: int | None) -> float | None:
        """Joules used since the first sample, as NVML's are counted: a counter that goes
        backwards started again, and counts on from its new value."""
        if counter is None:
            return None
        last = self._energy_counter_uj
        if last is not None and counter >= last:
            self._energy_since_start_uj += counter - last
        self._energy_counter_uj = counter
        return self._energy_since_start_uj / 1e6

    def _vram_used(self) -> int | None:
        if self._vram_free is None or self._vram_total is None:
            return None
        free = self._files.integer(self._vram_free, keep=True)
        return None if free is None or free > self._vram_total else self._vram_total - free


def _xe_gts(device: Path, files: SysfsFiles) -> list[_Gt]:
    """xe's GTs: ``tile<N>/gt<M>``, each with ``freq0/`` and ``gtidle/``."""
    gts = []
    for tile in subfolders(device, "tile"):
        for gt in subfolders(tile, "gt"):
            freq, idle = gt / "freq0", gt / "gtidle" / "idle_residency_ms"
            top = first_present(freq / "max_freq", freq / "rp0_freq")
            gts.append(
                _Gt(
                    clock=first_present(freq / "cur_freq"),
                    clock_max_mhz=_mhz(files, top),
                    idle=_counter(idle),
                    throttle=_throttle_files(freq / "throttle", "status", "reason_"),
                )
            )
    return gts


def _i915_gts(node: Path, files: SysfsFiles) -> list[_Gt]:
    """i915's GTs: each ``gt/gt<N>`` with its own ``rc6_residency_ms`` and throttle files
    (an older kernel: no ``gt/``, and ``power/`` has GT 0's counter); the card's
    ``gt_cur_freq_mhz``/``gt_max_freq_mhz`` are GT 0's."""
    top = first_present(node / "gt_max_freq_mhz", node / "gt_RP0_freq_mhz")
    clock = first_present(node / "gt_cur_freq_mhz")
    gts = [
        _Gt(
            clock=None,
            clock_max_mhz=None,
            idle=_counter(gt / "rc6_residency_ms"),
            throttle=_throttle_files(gt, "throttle_reason_status", "throttle_reason_"),
        )
        for gt in subfolders(node / "gt", "gt")
    ]
    if not any(gt.idle for gt in gts):
        idle = _counter(node / "power" / "rc6_residency_ms")
        if idle is not None:
            gts = gts or [_Gt(None, None, None)]
            gts[0].idle = idle
    if not clock and not any(gt.idle for gt in gts):
        return []
    gts = gts or [_Gt(None, None, None)]
    gts[0].clock, gts[0].clock_max_mhz = clock, _mhz(files, top)
    return gts


def _counter(path: Path) -> _Counter | None:
    """A counter in ``path``, if the file is there."""
    found = first_present(path)
    return None if found is None else _Counter(found)


def _throttle_files(folder: Path, status: str, prefix: str) -> tuple[str, dict[str, str]] | None:
    """A GT's throttle status file in ``folder`` and its reasons' files (``<prefix><name>``);
    ``None`` without the status file (i915 before Linux 6.1, a platform without them)."""
    found = first_present(folder / status)
    if found is None:
        return None
    reasons = {
        name: path
        for name, _ in THROTTLE_WORDS
        if (path := first_present(folder / f"{prefix}{name}"))
    }
    return found, reasons


def _mhz(files: SysfsFiles, path: str | None) -> float | None:
    value = files.integer(path) if path else None
    return float(value) if value else None
