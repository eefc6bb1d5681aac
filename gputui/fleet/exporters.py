"""Turn one host's exposition back into gputui's readings, whichever exporter wrote it.

The exporter is told by its series' names: ``gputui serve`` (``gputui_gpu_*``), NVIDIA's
dcgm-exporter (``DCGM_FI_DEV_*``) or nvitop-exporter (``gpu_*_Percentage``...); its units
become gputui's. A series an exporter lacks leaves that reading ``None``; MIG instances are
left out (they are not GPUs); a value no reading can take (:data:`RANGES`) reads ``None``
with a note.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gputui.format import without_noise
from gputui.serve.metrics import (
    GPU_HUNG,
    GPU_INFO,
    GPU_NVLINK_LINK_UP,
    GPU_PROCESS_MEMORY,
    GPU_SERIES,
    GPU_UP,
    NVML_AVAILABLE,
    SAMPLE_AGE,
)
from gputui.telemetry.bounds import (
    NVLINK_LINK,
    NVLINK_RX,
    NVLINK_TX,
    PROCESS_MEMORY,
    RANGES,
    Range,
)
from gputui.telemetry.nvml import WEDGED
from gputui.telemetry.readings import (
    GpuProcess,
    GpuReading,
    GpuState,
    NvlinkThroughput,
    Vendor,
)

MIB = 1024**2

MAX_SERIES = 200_000
"""The most samples read from one host: a host of 10,000 GPUs sends about 180,000."""

ERROR_MAX = 200
"""The most characters of the parser's complaint (it quotes the host's line) kept
(:mod:`gputui.fleet.exposition`)."""

MAX_NOTES = 20
"""The most notes about bad values kept for one host (the last says how many more)."""

GPUTUI = "gputui"
DCGM = "dcgm-exporter"
NVITOP = "nvitop-exporter"


class NotAnExporter(ValueError):
    """The text is not an exposition of an exporter gputui can read."""


NO_READING_YET = "gputui serve has just started: no GPU reading yet"
"""Why a gputui exporter that has not sampled its GPUs once is not read (it answers with its
host's series alone, and its GPUs would read as none)."""


class Sample(NamedTuple):
    """One series' value, from a scrape or from a Prometheus query (a named tuple: one is
    made for each line a host sends, and a tuple is the cheapest to make)."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Exposition:
    """What one host's exporter says."""

    source: str
    """Which exporter: ``gputui``, ``dcgm-exporter`` or ``nvitop-exporter``."""
    gpus: tuple[GpuReading, ...]
    """Every GPU, in index order."""
    sample_age_s: float = 0.0
    """How old the exporter says its readings were when served (gputui's own says)."""
    notes: tuple[str, ...] = ()
    """Values refused (read as ``None``), one sentence each."""


SAMPLE_AGE_RANGE = Range(0, 365 * 86400)
"""A sample age over a year is not one."""
STATE = Range(0, 1, integer=True)
"""``gputui_gpu_up``, ``gputui_gpu_hung`` and ``gputui_gpu_nvlink_link_up``."""

_PERCENT_SLACK = 1e-9
"""Ratios times 100 may land a rounding error above 100."""


class Notes:
    """The values one host's exposition had refused, in sentences, at most :data:`MAX_NOTES`."""

    def __init__(self) -> None:
        self._kept: list[str] = []
        self._count = 0

    def refuse(
        self, what: str, sent: float, allowed: Range | str, reading: tuple[str, float] | None = None
    ) -> None:
        """Note that ``what`` (``GPU 0 gputui_gpu_power_watts``) was sent as ``sent``, which
        is not ``allowed`` (a range, or in words), as ``reading`` (its name and value in
        gputui's unit) where that differs from what was sent."""
        if math.isnan(sent):
            self.add(f"{what} = NaN: not a number; read as n/a")
            return
        why = f"not {allowed}"
        if reading is not None and reading[1] != sent:
            why = f"{reading[0]} {reading[1]:g} is {why}"
        self.add(f"{what} = {sent:g}: {why}; read as n/a")

    def add(self, note: str) -> None:
        """Note something else refused."""
        self._count += 1
        if len(self._kept) < MAX_NOTES:
            self._kept.append(note)

    def as_tuple(self) -> tuple[str, ...]:
        """The notes kept, and how many more there were."""
        more = self._count - len(self._kept)
        return (*self._kept, f"and {more} more values refused") if more else tuple(self._kept)


def read_samples(samples: Iterable[Sample]) -> Exposition:
    """The GPUs ``samples`` describe, recognising their exporter by the series' names.

    Raises:
        NotAnExporter: when no exporter gputui knows wrote them.
    """
    samples = list(samples)
    names = {sample.name for sample in samples}
    if any(name.startswith("gputui_") for name in names):
        return _read_gputui(samples)
    if any(name.startswith("DCGM_FI_") for name in names):
        return _read_mapped(DCGM, samples, _DCGM)
    if names & _NVITOP_NAMES:
        return _read_mapped(NVITOP, samples, _NVITOP)
    raise NotAnExporter(
        "no GPU series gputui can read here (it reads gputui serve, dcgm-exporter "
        "and nvitop-exporter)"
    )


# --- gputui serve --------------------------------------------------------------------------

_GPUTUI_FIELDS = {series.name: (series.path, series.per / series.times) for series in GPU_SERIES}


def _read_gputui(samples: list[Sample]) -> Exposition:
    gpus: dict[tuple[Vendor, int], _Gpu] = {}
    notes = Notes()
    age = 0.0
    sampled = False  # NVML's availability comes with the first GPU sample, with or without GPUs
    for sample in samples:
        name, labels, value = sample
        sampled = sampled or name == NVML_AVAILABLE
        if name == SAMPLE_AGE:
            if SAMPLE_AGE_RANGE.admits(value):
                age = value
            else:
                notes.add(
                    f"{SAMPLE_AGE} = {value:g}: not {SAMPLE_AGE_RANGE} seconds; "
                    "the readings are dated by the scrape"
                )
            continue
        index = _index(labels.get("gpu"))
        if index is None or name == NVML_AVAILABLE:
            continue
        vendor = _VENDORS.get(labels.get("vendor") or "nvidia")  # no label: an older gputui
        if vendor is None:
            continue
        gpu = gpus.get((vendor, index)) or gpus.setdefault(
            (vendor, index), _Gpu(index, notes, vendor=vendor)
        )
        gpu.uuid = labels.get("uuid") or gpu.uuid
        field = _GPUTUI_FIELDS.get(name)
        if field is not None:  # most series: one reading each
            gpu.set(field[0], value * field[1], name, value)
        elif name == GPU_INFO:
            gpu.name = labels.get("name") or gpu.name
            gpu.bus_id = labels.get("bus_id") or None
        elif name == GPU_NVLINK_LINK_UP:
            gpu.set_link(labels.get("link"), value)
        elif name in (GPU_UP, GPU_HUNG):
            if not STATE.admits(value):
                notes.refuse(f"GPU {index} {name}", value, "0 or 1")
            elif name == GPU_UP:
                gpu.up = value == 1
            else:
                gpu.hung = value == 1
        elif name == GPU_PROCESS_MEMORY:
            gpu.processes = gpu.processes or []
            process = _process(sample, index, notes)
            if process is not None:
                gpu.processes.append(process)
    # Without a single process series (served without --processes, or nothing running)
    # the processes are not known from here; with one, a GPU without any has none.
    if any(gpu.processes is not None for gpu in gpus.values()):
        for gpu in gpus.values():
            gpu.processes = gpu.processes or []
    if not sampled and not gpus:
        raise NotAnExporter(NO_READING_YET)
    for gpu in gpus.values():
        gpu.hung_for_s = age
    readings = tuple(gpus[key].reading() for key in sorted(gpus, key=_vendor_order))
    return Exposition(GPUTUI, readings, sample_age_s=age, notes=notes.as_tuple())


_VENDORS = {vendor.value: vendor for vendor in Vendor}


def _vendor_order(key: tuple[Vendor, int]) -> tuple[int, int]:
    """NVIDIA's GPUs first, then each vendor's as the exporter lists them."""
    return (list(Vendor).index(key[0]), key[1])


def _process(sample: Sample, index: int, notes: Notes) -> GpuProcess | None:
    """One process's GPU memory; ``None`` (noted) for a pid that is not one."""
    pid_label = sample.labels.get("pid", "")
    pid = _index(pid_label, digits=10)
    if pid is None or pid > MAX_PID:
        notes.add(f"GPU {index} {sample.name}: pid {pid_label[:20]!r} is not a process id")
        return None
    memory: int | None = None
    if PROCESS_MEMORY.admits(sample.value):
        memory = round(sample.value)
    else:
        notes.refuse(f"GPU {index} {sample.name} of pid {pid}", sample.value, PROCESS_MEMORY)
    return GpuProcess(
        pid=pid,
        user=sample.labels.get("user") or None,
        command=sample.labels.get("command") or None,
        gpu_memory_bytes=memory,
        kind=sample.labels.get("kind") or "compute",
    )


# --- dcgm-exporter and nvitop-exporter -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Mapping:
    """How one exporter's series and labels map onto a reading."""

    fields: Mapping[str, tuple[str, float]]
    """Series name to (reading field, scale to gputui's unit)."""
    index: str
    uuid: str
    name: str
    bus_id: str | None = None
    memory_free: str | None = None
    """A series of free memory: total is used plus free (plus ``memory_reserved``)."""
    memory_reserved: str | None = None
    instance: str | None = None
    """A label that only a MIG instance's series carry."""
    nan_is_unknown: bool = False
    """NaN is how the exporter writes a reading it has not (nvitop-exporter): no note."""


_DCGM = _Mapping(
    fields={
        "DCGM_FI_DEV_GPU_UTIL": ("utilization_percent", 1.0),
        "DCGM_FI_DEV_MEM_COPY_UTIL": ("memory_utilization_percent", 1.0),
        "DCGM_FI_DEV_FB_USED": ("memory_used_bytes", MIB),
        "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
        "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
        "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),
        "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
        "DCGM_FI_DEV_MEM_CLOCK": ("memory_clock_mhz", 1.0),
        "DCGM_FI_DEV_PCIE_LINK_GEN": ("pcie_link_gen", 1.0),
        "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": ("pcie_link_gen_max", 1.0),
        "DCGM_FI_DEV_PCIE_LINK_WIDTH": ("pcie_link_width_lanes", 1.0),
        "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": ("pcie_link_width_max_lanes", 1.0),
        "DCGM_FI_DEV_FAN_SPEED": ("fan_percent", 1.0),
        "DCGM_FI_DEV_ENC_UTIL": ("encoder_utilization_percent", 1.0),
        "DCGM_FI_DEV_DEC_UTIL": ("decoder_utilization_percent", 1.0),
    },
    index="gpu",
    uuid="UUID",
    name="modelName",
    bus_id="pci_bus_id",
    memory_free="DCGM_FI_DEV_FB_FREE",
    memory_reserved="DCGM_FI_DEV_FB_RESERVED",
    instance="GPU_I_ID",
)

_NVITOP = _Mapping(
    fields={
        "gpu_utilization_Percentage": ("utilization_percent", 1.0),
        "gpu_memory_utilization_Percentage": ("memory_utilization_percent", 1.0),
        "gpu_memory_used_MiB": ("memory_used_bytes", MIB),
        "gpu_memory_total_MiB": ("memory_total_bytes", MIB),
        "gpu_temperature_C": ("temperature_c", 1.0),
        "gpu_power_usage_W": ("power_w", 1.0),
        "gpu_power_limit_W": ("power_limit_w", 1.0),
        "gpu_clock_sm_MHz": ("sm_clock_mhz", 1.0),
        "gpu_clock_memory_MHz": ("memory_clock_mhz", 1.0),
        "gpu_fan_speed_Percentage": ("fan_percent", 1.0),
        "gpu_pcie_rx_throughput_MiBps": ("pcie_rx_bytes_per_s", MIB),
        "gpu_pcie_tx_throughput_MiBps": ("pcie_tx_bytes_per_s", MIB),
    },
    index="index",
    uuid="uuid",
    name="devicename",
    nan_is_unknown=True,
)
_NVITOP_NAMES = frozenset(_NVITOP.fields)


def _mapped_names(mapping: _Mapping) -> set[str]:
    names = (*mapping.fields, mapping.memory_free, mapping.memory_reserved)
    return {name for each in names if each for name in (each, f"{each}_total")}


SERIES_READ = frozenset(
    {
        SAMPLE_AGE,
        NVML_AVAILABLE,
        GPU_INFO,
        GPU_UP,
        GPU_HUNG,
        GPU_NVLINK_LINK_UP,
        GPU_PROCESS_MEMORY,
        *_GPUTUI_FIELDS,
    }
    | _mapped_names(_DCGM)
    | _mapped_names(_NVITOP)
)
"""Every series name :func:`read_samples` reads from a scrape (a counter's with ``_total``
or without); a host's other series are not parsed (:mod:`gputui.fleet.exposition`)."""


def _read_mapped(source: str, samples: list[Sample], mapping: _Mapping) -> Exposition:
    gpus: dict[int, _Gpu] = {}
    notes = Notes()
    free: dict[int, float] = {}
    for sample in samples:
        index = _index(sample.labels.get(mapping.index))
        if index is None or (mapping.instance and sample.labels.get(mapping.instance)):
            continue
        name = _counter_name(sample.name, mapping.fields)
        if name in mapping.fields:
            gpu = gpus.get(index) or gpus.setdefault(
                index, _Gpu(index, notes, nan_is_unknown=mapping.nan_is_unknown)
            )
            gpu.uuid = gpu.uuid or sample.labels.get(mapping.uuid) or None
            gpu.name = gpu.name or sample.labels.get(mapping.name, "")
            if mapping.bus_id:
                gpu.bus_id = gpu.bus_id or sample.labels.get(mapping.bus_id) or None
            field_name, scale = mapping.fields[name]
            gpu.set(field_name, sample.value * scale, sample.name, sample.value)
        elif name in (mapping.memory_free, mapping.memory_reserved):
            if RANGES["memory_total_bytes"].admits(sample.value * MIB):
                free[index] = free.get(index, 0.0) + sample.value * MIB
            else:
                notes.refuse(f"GPU {index} {sample.name}", sample.value, "a memory size")
    for index, gpu in gpus.items():
        used = gpu.values.get("memory_used_bytes")
        if used is not None and index in free and "memory_total_bytes" not in gpu.values:
            total = used + free[index]
            gpu.set("memory_total_bytes", total, "memory used plus free", total)
    return Exposition(source, _readings(gpus), notes=notes.as_tuple())


def _counter_name(name: str, known: Mapping[str, object]) -> str:
    """``name`` as the exporter wrote it: prometheus_client's parser adds ``_total`` to a
    counter's samples (dcgm-exporter's ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``), Prometheus's
    API does not."""
    if name not in known and name.endswith("_total"):
        return name.removesuffix("_total")
    return name


# --- Building the readings -----------------------------------------------------------------


def _kind(path: str) -> Any:
    """What a reading (``power_w``) or a part of one (``nvlink_throughput.rx_bytes``) holds,
    by its field's type: ``int``, ``float`` or ``bool``."""
    kind: Any = GpuReading
    for name in path.split("."):
        arms = typing.get_args(typing.get_type_hints(kind)[name])
        kind = next(arm for arm in arms if arm is not type(None))
    return kind


_KINDS = {name: _kind(name) for name in RANGES}
"""Each reading an exporter may give (:data:`RANGES`), and what it holds."""


@dataclass
class _Gpu:
    """One GPU's series, gathered before they become a frozen reading."""

    index: int
    notes: Notes
    """Where refused values are noted (the host's, shared by its GPUs)."""
    vendor: Vendor = Vendor.NVIDIA
    """Whose GPU (dcgm-exporter and nvitop-exporter read NVIDIA's alone)."""
    nan_is_unknown: bool = False
    """NaN reads as ``None`` without a note (see ``_Mapping``)."""
    name: str = ""
    uuid: str | None = None
    bus_id: str | None = None
    up: bool = True
    hung: bool = False
    """``gputui_gpu_hung 1``: its NVML calls hang (``up`` reads 0 too)."""
    hung_for_s: float = 0.0
    """How long the exporter's readings were old when served (for a hung GPU's sentence)."""
    values: dict[str, float] = field(default_factory=dict)
    processes: list[GpuProcess] | None = None
    """``None``: the exporter does not say (dcgm-exporter, gputui serve without --processes)."""
    nvlinks: dict[int, bool] | None = None
    """Each NVLink link's number and whether it is up; ``None``: the exporter does not say."""

    def set(self, name: str, value: float, series: str, sent: float) -> None:
        """Keep ``value`` for the reading ``name`` if it can be one, else note that ``series``
        was ``sent``."""
        if name in self.values:
            return
        allowed = RANGES[name]
        if allowed.high == 100 and 100 < value <= 100 + _PERCENT_SLACK:
            value = 100.0
        if allowed.admits(value):  # 0.715 * 100 is 71.5, not 71.49999999999999; a count exact
            self.values[name] = value if allowed.integer else without_noise(value)
        elif not (math.isnan(value) and self.nan_is_unknown):
            self.notes.refuse(f"GPU {self.index} {series}", sent, allowed, (name, value))

    def set_link(self, label: str | None, value: float) -> None:
        """Keep whether the NVLink link numbered ``label`` is up (``value`` 1) or down (0), if
        both can be, else note why not."""
        link = _index(label, digits=2)
        if link is None or not NVLINK_LINK.admits(link):
            self.notes.add(
                f"GPU {self.index} {GPU_NVLINK_LINK_UP}: link {(label or '')[:20]!r} is not "
                f"{NVLINK_LINK}"
            )
        elif not STATE.admits(value):
            self.notes.refuse(
                f"GPU {self.index} {GPU_NVLINK_LINK_UP} of link {link}", value, "0 or 1"
            )
        else:
            self.nvlinks = self.nvlinks or {}
            self.nvlinks.setdefault(link, value == 1)

    def reading(self) -> GpuReading:
        readings: dict[str, Any] = {name: None for name in _KINDS if "." not in name}
        for name, value in self.values.items():
            kind = _KINDS[name]
            readings[name] = round(value) if kind is int else value == 1 if kind is bool else value
        if NVLINK_RX in readings or NVLINK_TX in readings:  # counters: a rate takes two scrapes
            readings["nvlink_throughput"] = NvlinkThroughput(
                rx_bytes=readings.pop(NVLINK_RX, None),
                tx_bytes=readings.pop(NVLINK_TX, None),
                rx_bytes_per_s=None,
                tx_bytes_per_s=None,
            )
        if self.nvlinks is not None:
            readings["nvlink_links_down"] = tuple(
                sorted(link for link, up in self.nvlinks.items() if not up)
            )
        state, error = GpuState.OK, None
        if self.hung:
            state, error = GpuState.HUNG, hung_error(self.hung_for_s)
        elif not self.up:
            state = GpuState.LOST
        return GpuReading(
            index=self.index,
            vendor=self.vendor,
            name=self.name or f"GPU {self.index}",
            uuid=self.uuid,
            bus_id=self.bus_id,
            state=state,
            error=error,
            processes=(
                None
                if self.processes is None
                else tuple(sorted(self.processes, key=lambda p: p.pid))
            ),
            **readings,
        )


def hung_error(seconds: float) -> str:
    """A hung GPU's sentence, as the monitor words a call that does not return:
    ``not answering for 12 s: the driver may be wedged; ...``."""
    since = f" for {int(seconds)} s" if seconds >= 1 else ""
    return f"not answering{since}: {WEDGED}."


def _readings(gpus: dict[int, _Gpu]) -> tuple[GpuReading, ...]:
    return tuple(gpus[index].reading() for index in sorted(gpus))


MAX_PID = 2**32 - 1


def _index(text: str | None, digits: int = 6) -> int | None:
    """A GPU index (or pid) written in ASCII digits, at most ``digits`` of them."""
    if text in _SMALL_INDEXES:
        return _SMALL_INDEXES[text]
    if text is None or not 0 < len(text) <= digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)


_SMALL_INDEXES = {str(number): number for number in range(1024)}
"""The indexes most often read, looked up rather than checked and parsed each time."""
