"""Turn one host's exposition back into gputui's readings, whichever exporter wrote it.

Three exporters are recognised by their series' names, and their units converted to
gputui's (bytes, percent, watts, MHz, joules):

- ``gputui serve``: ``gputui_gpu_*``, the inverse of :data:`gputui.serve.metrics.GPU_SERIES`;
- NVIDIA's dcgm-exporter: ``DCGM_FI_DEV_*`` (its default counters; memory in MiB, energy
  in mJ), labels ``gpu``, ``UUID``, ``modelName``, ``pci_bus_id``;
- nvitop-exporter: ``gpu_*_Percentage``, ``gpu_memory_*_MiB``... (prometheus_client appends
  the unit to the name), labels ``index``, ``uuid``, ``devicename``.

A series an exporter does not have leaves that reading ``None``. Series of MIG instances
(dcgm-exporter's ``GPU_I_ID``, nvitop-exporter's ``N:M`` indices) are not GPUs and are left
out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

from prometheus_client.parser import text_string_to_metric_families

from gputui.serve.metrics import (
    GPU_INFO,
    GPU_PROCESS_MEMORY,
    GPU_SERIES,
    GPU_UP,
    NVML_AVAILABLE,
    SAMPLE_AGE,
)
from gputui.telemetry.readings import GpuProcess, GpuReading, GpuState

MIB = 1024**2

GPUTUI = "gputui"
DCGM = "dcgm-exporter"
NVITOP = "nvitop-exporter"


class NotAnExporter(ValueError):
    """The text is not an exposition of an exporter gputui can read."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One series' value, from a scrape or from a Prometheus query."""

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


def parse_text(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition, through prometheus_client's parser.

    Raises:
        NotAnExporter: when the text does not parse.
    """
    try:
        return [
            Sample(sample.name, sample.labels, float(sample.value))
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]
    except (ValueError, TypeError, IndexError) as error:
        raise NotAnExporter(f"not a Prometheus text exposition ({error})") from None


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

_GPUTUI_FIELDS = {series.name: (series.field, series.per / series.times) for series in GPU_SERIES}


def _read_gputui(samples: list[Sample]) -> Exposition:
    gpus: dict[int, _Gpu] = {}
    age = 0.0
    for sample in samples:
        if sample.name == SAMPLE_AGE:
            age = sample.value
            continue
        index = _index(sample.labels.get("gpu"))
        if index is None or sample.name == NVML_AVAILABLE:
            continue
        gpu = gpus.setdefault(index, _Gpu(index))
        gpu.uuid = sample.labels.get("uuid") or gpu.uuid
        if sample.name == GPU_INFO:
            gpu.name = sample.labels.get("name") or gpu.name
            gpu.bus_id = sample.labels.get("bus_id") or None
        elif sample.name == GPU_UP:
            gpu.up = sample.value == 1
        elif sample.name == GPU_PROCESS_MEMORY:
            gpu.processes = gpu.processes or []
            gpu.processes.append(_process(sample))
        elif sample.name in _GPUTUI_FIELDS:
            name, scale = _GPUTUI_FIELDS[sample.name]
            gpu.set(name, sample.value * scale)
    # Without a single process series (served without --processes, or nothing running)
    # the processes are not known from here; with one, a GPU without any has none.
    if any(gpu.processes for gpu in gpus.values()):
        for gpu in gpus.values():
            gpu.processes = gpu.processes or []
    return Exposition(GPUTUI, _readings(gpus), sample_age_s=max(0.0, age))


def _process(sample: Sample) -> GpuProcess:
    pid = _index(sample.labels.get("pid"))
    return GpuProcess(
        pid=pid if pid is not None else 0,
        user=sample.labels.get("user") or None,
        command=sample.labels.get("command") or None,
        gpu_memory_bytes=int(sample.value),
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
        "DCGM_FI_DEV_FAN_SPEED": ("fan_percent", 1.0),
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
        "gpu_fan_speed_Percentage": ("fan_percent", 1.0),
        "gpu_pcie_rx_throughput_MiBps": ("pcie_rx_bytes_per_s", MIB),
        "gpu_pcie_tx_throughput_MiBps": ("pcie_tx_bytes_per_s", MIB),
    },
    index="index",
    uuid="uuid",
    name="devicename",
)
_NVITOP_NAMES = frozenset(_NVITOP.fields)


def _read_mapped(source: str, samples: list[Sample], mapping: _Mapping) -> Exposition:
    gpus: dict[int, _Gpu] = {}
    free: dict[int, float] = {}
    for sample in samples:
        index = _index(sample.labels.get(mapping.index))
        if index is None or (mapping.instance and sample.labels.get(mapping.instance)):
            continue
        name = _counter_name(sample.name, mapping.fields)
        if name in mapping.fields:
            gpu = gpus.setdefault(index, _Gpu(index))
            gpu.uuid = gpu.uuid or sample.labels.get(mapping.uuid) or None
            gpu.name = gpu.name or sample.labels.get(mapping.name, "")
            if mapping.bus_id:
                gpu.bus_id = gpu.bus_id or sample.labels.get(mapping.bus_id) or None
            field_name, scale = mapping.fields[name]
            gpu.set(field_name, sample.value * scale)
        elif name in (mapping.memory_free, mapping.memory_reserved):
            free[index] = free.get(index, 0.0) + sample.value * MIB
    for index, gpu in gpus.items():
        used = gpu.values.get("memory_used_bytes")
        if used is not None and index in free and "memory_total_bytes" not in gpu.values:
            gpu.set("memory_total_bytes", used + free[index])
    return Exposition(source, _readings(gpus))


def _counter_name(name: str, known: Mapping[str, object]) -> str:
    """``name`` as the exporter wrote it: prometheus_client's parser adds ``_total`` to a
    counter's samples (dcgm-exporter's ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``), Prometheus's
    API does not."""
    if name not in known and name.endswith("_total"):
        return name.removesuffix("_total")
    return name


# --- Building the readings -----------------------------------------------------------------

_INTEGER_FIELDS = frozenset({"memory_used_bytes", "memory_total_bytes", "performance_state"})
_IDENTITY = frozenset({"index", "name", "uuid", "bus_id", "state", "processes"})
_READING_FIELDS = tuple(f.name for f in fields(GpuReading) if f.name not in _IDENTITY)
"""The readings an exporter may give (everything but the GPU's identity and processes)."""


@dataclass
class _Gpu:
    """One GPU's series, gathered before they become a frozen reading."""

    index: int
    name: str = ""
    uuid: str | None = None
    bus_id: str | None = None
    up: bool = True
    values: dict[str, float] = field(default_factory=dict)
    processes: list[GpuProcess] | None = None
    """``None``: the exporter does not say (dcgm-exporter, gputui serve without --processes)."""

    def set(self, name: str, value: float) -> None:
        if math.isfinite(value):  # nvitop-exporter writes NaN for a reading it has not
            self.values.setdefault(name, value)

    def reading(self) -> GpuReading:
        def value(name: str) -> float | int | None:
            found = self.values.get(name)
            if found is None:
                return None
            return round(found) if name in _INTEGER_FIELDS else found

        readings = {name: value(name) for name in _READING_FIELDS}
        return GpuReading(
            index=self.index,
            name=self.name or f"GPU {self.index}",
            uuid=self.uuid,
            bus_id=self.bus_id,
            state=GpuState.OK if self.up else GpuState.LOST,
            processes=(
                None
                if self.processes is None
                else tuple(sorted(self.processes, key=lambda p: p.pid))
            ),
            **readings,  # type: ignore[arg-type]
        )


def _readings(gpus: dict[int, _Gpu]) -> tuple[GpuReading, ...]:
    return tuple(gpus[index].reading() for index in sorted(gpus))


def _index(text: str | None) -> int | None:
    if text is None or not text.isdigit():
        return None
    return int(text)
