"""The Prometheus series ``gputui serve`` exposes, made from the latest readings at each scrape.

Every name follows Prometheus's rules (``promtool check metrics``): the ``gputui_`` prefix,
base units in the name, ratios 0..1 as ``_ratio``, ``_total`` on counters, ``_info`` for
metadata. Every GPU series has the labels ``gpu`` (the NVML index; AMD's and Intel's index
among that vendor's cards), ``uuid`` and ``vendor`` (``nvidia``, ``amd``, ``intel``); the
per-job series, ``kind`` and ``name`` instead. A label's text (a GPU's name, a process's user,
command line, container or pod) is made printable by
:func:`gputui.format.one_line`. A reading that is ``None`` (not supported, or a lost GPU)
leaves its series out for that GPU rather than reading 0; a lost GPU keeps
``gputui_gpu_info`` and reads ``gputui_gpu_up 0``. A GPU whose driver calls hang reads
``gputui_gpu_up 0`` and ``gputui_gpu_hung 1`` (a lost one, ``gputui_gpu_hung 0``), keeping
its last values (``gputui_sample_age_seconds`` says how old), and
``gputui_nvml_hung_seconds`` names the call.

:data:`GPU_SERIES` says how each series comes from a :class:`GpuReading` field, so a reader
(the cluster view) can turn a scrape back into readings: ``field = value * per / times``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gputui.format import for_screen, one_line, without_noise
from gputui.telemetry import amdgpu, intel
from gputui.telemetry.nvml import is_stale
from gputui.telemetry.nvml.queries import THROTTLE_WORDS
from gputui.telemetry.polling import Latest
from gputui.telemetry.readings import (
    BENIGN_THROTTLES,
    CpuReading,
    GpuReading,
    GpuState,
    NvmlReading,
    Vendor,
)

GPU_LABELS = ("gpu", "uuid", "vendor")
"""The labels of every GPU series: the index (NVML's on NVIDIA, the vendor's own on AMD and
Intel), the UUID (empty when unknown) and the vendor."""

INFO_LABELS = (*GPU_LABELS, "name", "bus_id", "driver")
"""``gputui_gpu_info``'s labels."""

WORKLOAD_LABELS = ("container", "pod", "namespace", "slurm_job", "unit")
"""What a process runs in (:class:`~gputui.telemetry.readings.Workload`), each empty where
unknown."""
PROCESS_LABELS = (*GPU_LABELS, "pid", "user", "command", "kind", *WORKLOAD_LABELS)
"""The labels of the per-process series (``user`` and ``command`` empty when hidden)."""
JOB_LABELS = ("kind", "name")
"""The labels of the per-job series: ``container``, ``pod`` or ``slurm_job``, and its name
(a pod's ``namespace/name``, or its UID)."""

COMMAND_LABEL_MAX = 256
"""Longest command line a process label carries; a longer one is cut, ending in ``...``."""

GPU_UP = "gputui_gpu_up"
GPU_HUNG = "gputui_gpu_hung"
GPU_INFO = "gputui_gpu_info"
GPU_PROCESS_MEMORY = "gputui_gpu_process_memory_bytes"
GPU_PROCESS_SM = "gputui_gpu_process_sm_utilization_ratio"
JOB_MEMORY = "gputui_job_gpu_memory_bytes"
JOB_SM = "gputui_job_sm_busy_gpus"
CPU_UTILIZATION = "gputui_cpu_utilization_ratio"
MEMORY_USED = "gputui_memory_used_bytes"
MEMORY_TOTAL = "gputui_memory_total_bytes"
NVML_AVAILABLE = "gputui_nvml_available"
NVML_HUNG = "gputui_nvml_hung_seconds"
SAMPLE_AGE = "gputui_sample_age_seconds"
GPU_THROTTLED = "gputui_gpu_throttled"
GPU_NVLINK_LINK_UP = "gputui_gpu_nvlink_link_up"


def throttle_reason(word: str) -> str:
    """``gputui_gpu_throttled``'s ``reason`` label for one of the monitor's throttle words
    (``HW slowdown``: ``hw_slowdown``)."""
    return word.lower().replace(" ", "_")


def _reasons(words: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(throttle_reason(word) for word in words))


THROTTLE_REASONS = _reasons(word for _, word in THROTTLE_WORDS)
"""Every reason NVML gives, as ``gputui_gpu_throttled`` labels them."""
VENDOR_THROTTLE_REASONS = {
    Vendor.NVIDIA: THROTTLE_REASONS,
    Vendor.AMD: _reasons(word for _, word in amdgpu.THROTTLE_BITS),
    Vendor.INTEL: _reasons([*(word for _, word in intel.THROTTLE_WORDS), intel.THROTTLE_OTHER]),
}
"""Every reason each vendor's driver gives: a GPU whose driver says exports each, 0 or 1, so
that its series do not come and go."""
BENIGN_THROTTLE_REASONS = tuple(sorted(throttle_reason(word) for word in BENIGN_THROTTLES))
"""The reasons that are no problem (an idle GPU runs slow on purpose)."""


@dataclass(frozen=True, slots=True)
class GpuSeries:
    """One per-GPU series and the :class:`GpuReading` field it shows."""

    name: str
    """The exposed name (a counter's ends in ``_total``)."""
    help: str
    """Prometheus's HELP text."""
    field: str
    """The :class:`GpuReading` attribute."""
    times: int = 1
    """The value is ``field * times / per`` (MHz to Hz: ``times=10**6``)."""
    per: int = 1
    """See ``times`` (percent to a ratio: ``per=100``)."""
    counter: bool = False
    """A counter (only ever grows) rather than a gauge."""
    part: str | None = None
    """The attribute of ``field``'s value served, where that value is a reading of its own
    (``rx_bytes`` of an :class:`~gputui.telemetry.readings.NvlinkThroughput`)."""

    @property
    def path(self) -> str:
        """``field``, then ``part`` after a dot where there is one."""
        return self.field if self.part is None else f"{self.field}.{self.part}"

    def value(self, gpu: GpuReading) -> float | None:
        """The series' value for ``gpu``; ``None`` when the reading is not known."""
        reading = getattr(gpu, self.field)
        if reading is not None and self.part is not None:
            reading = getattr(reading, self.part)
        if reading is None:
            return None
        if isinstance(reading, int) and self.times == self.per:  # a count: exact, every digit
            return float(reading)
        return without_noise(float(reading) * self.times / self.per)


_UNITS = {
    "_percent": ("_ratio", 1, 100),
    "_mhz": ("_hertz", 10**6, 1),
    "_c": ("_celsius", 1, 1),
    "_w": ("_watts", 1, 1),
    "_j": ("_joules", 1, 1),
    "_per_s": ("_per_second", 1, 1),
}
"""A field's unit suffix, and its series' in Prometheus's base unit, ``times`` and ``per``."""


def _series(
    field: str, help: str, *, counter: bool = False, part: str | None = None, stem: str = ""
) -> GpuSeries:
    """The series of a :class:`GpuReading` field (or ``part`` of one), named after it (or
    ``stem``, with the same unit suffix) in Prometheus's base unit: ``sm_clock_mhz`` is
    ``gputui_gpu_sm_clock_hertz``, times ``10**6``."""
    if field not in _GPU_FIELDS:
        raise ValueError(f"GpuReading has no field {field!r}")
    name, times, per = stem or field, 1, 1
    unit = next((unit for unit in _UNITS if name.endswith(unit)), None)
    if unit is not None:
        base, times, per = _UNITS[unit]
        name = name.removesuffix(unit) + base
    name = f"gputui_gpu_{name}{'_total' if counter else ''}"
    return GpuSeries(name, help, field, times, per, counter, part)


_GPU_FIELDS = frozenset(field.name for field in dataclasses.fields(GpuReading))
GPU_SERIES = (
    _series("utilization_percent", "Share of time a kernel was running on the GPU (0 to 1)."),
    _series(
        "memory_utilization_percent", "Share of time device memory was read or written (0 to 1)."
    ),
    _series("memory_used_bytes", "Device memory in use."),
    _series("memory_total_bytes", "Device memory installed."),
    _series("temperature_c", "GPU core temperature."),
    _series("power_w", "Power draw."),
    _series("power_limit_w", "Enforced power limit."),
    _series("energy_j", "Energy used since the driver was loaded.", counter=True),
    _series("sm_clock_mhz", "Current SM clock."),
    _series("sm_clock_max_mhz", "Maximum SM clock."),
    _series("memory_clock_mhz", "Current memory clock."),
    _series("memory_clock_max_mhz", "Maximum memory clock."),
    _series(
        "fan_percent", "Fan speed as a share of its maximum (0 to 1).", stem="fan_speed_percent"
    ),
    _series("fan_rpm", "Fan speed in revolutions a minute, where the GPU has a tachometer."),
    _series("pcie_rx_bytes_per_s", "PCIe receive throughput."),
    _series("pcie_tx_bytes_per_s", "PCIe transmit throughput."),
    _series("pcie_link_gen", "Current PCIe link generation (an idle GPU drops it to save power)."),
    _series("pcie_link_gen_max", "Highest PCIe link generation the GPU and its slot both support."),
    _series("pcie_link_width_lanes", "Current PCIe link width."),
    _series("pcie_link_width_max_lanes", "Widest PCIe link the GPU and its slot both support."),
    _series("encoder_utilization_percent", "Share of time the video encoder was busy (0 to 1)."),
    _series("decoder_utilization_percent", "Share of time the video decoder was busy (0 to 1)."),
    _series("nvlink_links_active", "NVLink links that are up (left out for a GPU without NVLink)."),
    _series(
        "nvlink_throughput",
        "NVLink data received since the driver was loaded, every link (payload alone; left "
        "out for a GPU without NVLink).",
        part="rx_bytes",
        stem="nvlink_rx_bytes",
        counter=True,
    ),
    _series(
        "nvlink_throughput",
        "NVLink data sent since the driver was loaded, every link (payload alone; left out "
        "for a GPU without NVLink).",
        part="tx_bytes",
        stem="nvlink_tx_bytes",
        counter=True,
    ),
    _series("performance_state", "Performance state, 0 (P0, fastest) to 15."),
    _series(
        "ecc_uncorrected_errors",
        "Uncorrected ECC errors since the driver was loaded.",
        counter=True,
    ),
    _series(
        "remapped_rows_pending", "1 while a memory row remap waits for a GPU reset, 0 otherwise."
    ),
)
"""Every per-GPU reading series, in the order they are exposed."""
FAMILY_NAMES = (
    NVML_AVAILABLE,
    GPU_UP,
    GPU_HUNG,
    GPU_INFO,
    *(series.name for series in GPU_SERIES),
    GPU_THROTTLED,
    GPU_NVLINK_LINK_UP,
    NVML_HUNG,
    GPU_PROCESS_MEMORY,
    GPU_PROCESS_SM,
    JOB_MEMORY,
    JOB_SM,
    CPU_UTILIZATION,
    MEMORY_USED,
    MEMORY_TOTAL,
    SAMPLE_AGE,
)
"""Every family the exporter serves (a counter's without its ``_total``)."""


def metric_families(
    latest: Latest, now: float, *, interval_s: float, processes: bool, jobs: bool = False
) -> list[Metric]:
    """The series for one scrape of ``latest``, at ``now`` (``time.monotonic()``).

    An NVML reading older than two ``interval_s`` (and at least one interval plus a second)
    marks every GPU ``gputui_gpu_up 0``. ``processes`` adds the per-process series (GPU
    memory, SM utilization), ``jobs`` the per-job ones (those summed per container, pod and
    Slurm job).
    """
    families: list[Metric] = []
    if (latest.hang or latest.nvml or latest.drm) is not None:
        families += _gpu_families(
            latest, now, interval_s=interval_s, processes=processes, jobs=jobs
        )
    if latest.cpu is not None:
        families += _host_families(latest.cpu)
    age_help = (
        "Seconds since the oldest of the readings served was taken (since the start, "
        "before the first)."
    )
    families.append(GaugeMetricFamily(SAMPLE_AGE, age_help, value=without_noise(latest.age_s(now))))
    return families


def _gpu_families(
    latest: Latest, now: float, *, interval_s: float, processes: bool, jobs: bool
) -> list[Metric]:
    last, hang, drm = latest.nvml, latest.hang, latest.drm
    nvml = hang or last
    families: list[Metric] = []
    if nvml is not None:
        available = "1 when NVML answers, 0 when it cannot start or its start hangs."
        families.append(
            GaugeMetricFamily(NVML_AVAILABLE, available, value=float(nvml.status.available))
        )
    driver = one_line(nvml.status.driver_version or "") if nvml is not None else ""
    nvml_stale = last is None or is_stale(last.taken_at, now, interval_s)
    drm_stale = drm is None or is_stale(drm.taken_at, now, interval_s)
    hung = {gpu.index for gpu in hang.gpus if gpu.state is GpuState.HUNG} if hang else set()
    up = GaugeMetricFamily(
        GPU_UP,
        "1 when the GPU answers, 0 when it is lost or the driver stopped answering.",
        labels=GPU_LABELS,
    )
    hung_gpu = GaugeMetricFamily(
        GPU_HUNG,
        "1 while the GPU's driver calls hang (the readings are its last), 0 otherwise.",
        labels=GPU_LABELS,
    )
    info = GaugeMetricFamily(GPU_INFO, "The GPU's identity; always 1.", labels=INFO_LABELS)
    readings = [_family(series) for series in GPU_SERIES]
    throttled = GaugeMetricFamily(
        GPU_THROTTLED,
        "1 while the clocks are held down for `reason`, 0 otherwise (every reason, where the "
        "driver says).",
        labels=(*GPU_LABELS, "reason"),
    )
    links = GaugeMetricFamily(
        GPU_NVLINK_LINK_UP,
        "1 while the NVLink link numbered `link` is up, 0 while it is down (every link of a "
        "GPU with NVLink).",
        labels=(*GPU_LABELS, "link"),
    )
    # Label values end up on screens (a curl, a fleet, a dashboard): printable text only.
    gpus = for_screen(_served_gpus(last, hang) + (drm.gpus if drm is not None else ()))
    for gpu in gpus:
        labels = _labels(gpu)
        nvidia = gpu.vendor is Vendor.NVIDIA
        is_hung = nvidia and gpu.index in hung
        stale = nvml_stale if nvidia else drm_stale
        up.add_metric(
            labels, 1.0 if gpu.state is GpuState.OK and not stale and not is_hung else 0.0
        )
        hung_gpu.add_metric(labels, 1.0 if is_hung else 0.0)
        info.add_metric([*labels, gpu.name, gpu.bus_id or "", driver if nvidia else ""], 1.0)
        for series, family in zip(GPU_SERIES, readings, strict=True):
            value = series.value(gpu)
            if value is not None:
                family.add_metric(labels, value)
        for reason, value in _throttles(gpu):
            throttled.add_metric([*labels, reason], value)
        for link, value in _nvlinks(gpu):
            links.add_metric([*labels, link], value)
    families += [up, hung_gpu, info, *readings, throttled, links]
    if hang is not None and hang.status.hung_call is not None:
        call = GaugeMetricFamily(
            NVML_HUNG,
            "Seconds the NVML call named by `call` has not returned for; only while one "
            "holds the readings back.",
            labels=("call",),
        )
        call.add_metric([hang.status.hung_call], without_noise(hang.status.hung_seconds or 0.0))
        families.append(call)
    if processes:
        families += _process_families(gpus)
    if jobs:
        families += _job_families(gpus)
    return families


def _labels(gpu: GpuReading) -> list[str]:
    """The labels of a GPU's series (:data:`GPU_LABELS`)."""
    return [str(gpu.index), gpu.uuid or "", gpu.vendor.value]


def _throttles(gpu: GpuReading) -> list[tuple[str, float]]:
    """Each of its vendor's throttle reasons' label and 1 or 0 (and 1 for any other reason
    held now); none where the driver does not say."""
    if gpu.throttle_reasons is None:
        return []
    active = {throttle_reason(word) for word in gpu.throttle_reasons}
    reasons = VENDOR_THROTTLE_REASONS.get(gpu.vendor, ())
    known = [(reason, 1.0 if reason in active else 0.0) for reason in reasons]
    return known + [(reason, 1.0) for reason in sorted(active.difference(reasons))]


def _nvlinks(gpu: GpuReading) -> list[tuple[str, float]]:
    """Each NVLink link's number (``link`` label) and 1 if up, 0 if down; none without
    NVLink, or where which links are down is not known."""
    up, down = gpu.nvlink_links_active, gpu.nvlink_links_down
    if up is None or down is None:
        return []
    return [(str(link), 0.0 if link in down else 1.0) for link in range(up + len(down))]


def _served_gpus(last: NvmlReading | None, hang: NvmlReading | None) -> tuple[GpuReading, ...]:
    """The last reading's GPUs, with their last values, then any GPU NVML counted that it
    lacks (the first sample hangs): known by its identity only."""
    gpus = last.gpus if last is not None else ()
    if hang is None:
        return gpus
    known = {gpu.index for gpu in gpus}
    return gpus + tuple(gpu for gpu in hang.gpus if gpu.index not in known)


def _family(series: GpuSeries) -> CounterMetricFamily | GaugeMetricFamily:
    if series.counter:
        return CounterMetricFamily(series.name, series.help, labels=GPU_LABELS)
    return GaugeMetricFamily(series.name, series.help, labels=GPU_LABELS)


def _process_families(gpus: Iterable[GpuReading]) -> list[Metric]:
    """Each process's GPU memory and SM utilization (0 to 1), each left out where unknown."""
    memory = GaugeMetricFamily(
        GPU_PROCESS_MEMORY, "GPU memory a process uses.", labels=PROCESS_LABELS
    )
    sm = GaugeMetricFamily(
        GPU_PROCESS_SM,
        "Share of the GPU's SMs a process kept busy in the driver's latest samples (0 to 1).",
        labels=PROCESS_LABELS,
    )
    for gpu in gpus:
        for process in gpu.processes or ():
            command = process.command or ""
            if len(command) > COMMAND_LABEL_MAX:
                command = command[: COMMAND_LABEL_MAX - 3] + "..."
            labels = [
                *_labels(gpu),
                str(process.pid),
                process.user or "",
                command,
                process.kind,
                *(getattr(process.workload, label) or "" for label in WORKLOAD_LABELS),
            ]
            if process.gpu_memory_bytes is not None:
                memory.add_metric(labels, float(process.gpu_memory_bytes))
            if process.sm_utilization_percent is not None:
                sm.add_metric(labels, without_noise(process.sm_utilization_percent / 100))
    return [memory, sm]


def _job_families(gpus: Iterable[GpuReading]) -> list[Metric]:
    """The GPU memory and SM utilization of each container, pod and Slurm job: its
    processes' on every GPU, added up (a process counted under its Slurm job, else its pod,
    else its container; one in none of them is left out)."""
    memory: dict[tuple[str, str], float] = {}
    sm: dict[tuple[str, str], float] = {}
    for gpu in gpus:
        for process in gpu.processes or ():
            job = process.workload.job
            if job is None:
                continue
            if process.gpu_memory_bytes is not None:
                memory[job] = memory.get(job, 0.0) + process.gpu_memory_bytes
            if process.sm_utilization_percent is not None:
                sm[job] = sm.get(job, 0.0) + process.sm_utilization_percent / 100
    memory_family = GaugeMetricFamily(
        JOB_MEMORY,
        "GPU memory the processes of a container, pod or Slurm job use, on every GPU.",
        labels=JOB_LABELS,
    )
    sm_family = GaugeMetricFamily(
        JOB_SM,
        "GPUs' worth of SMs the processes of a container, pod or Slurm job kept busy in the "
        "driver's latest samples: their shares added up over the GPUs (1.5: one GPU's SMs "
        "all busy and another's half).",
        labels=JOB_LABELS,
    )
    for job, value in sorted(memory.items()):
        memory_family.add_metric(list(job), value)
    for job, value in sorted(sm.items()):
        sm_family.add_metric(list(job), without_noise(value))
    return [memory_family, sm_family]


def _host_families(cpu: CpuReading) -> list[Metric]:
    utilization = "Share of the host's CPU time in use, all cores (0 to 1)."
    return [
        GaugeMetricFamily(
            CPU_UTILIZATION, utilization, value=without_noise(cpu.utilization_percent / 100)
        ),
        GaugeMetricFamily(
            MEMORY_USED,
            "Host memory in use (total minus available).",
            value=float(cpu.memory_used_bytes),
        ),
        GaugeMetricFamily(
            MEMORY_TOTAL, "Host memory installed.", value=float(cpu.memory_total_bytes)
        ),
    ]


class LatestCollector(Collector):
    """A Prometheus collector that yields the latest readings; it never samples."""

    def __init__(
        self,
        latest: Callable[[], Latest],
        *,
        interval_s: float,
        processes: bool,
        jobs: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Serve what ``latest`` returns at once (``Poller.latest``) at each scrape, as
        :func:`metric_families` makes it; ``clock`` is the one the readings' ``taken_at``
        use."""
        self._latest = latest
        self._interval_s = interval_s
        self._processes = processes
        self._jobs = jobs
        self._clock = clock

    def describe(self) -> Iterator[Metric]:
        """Every family :meth:`collect` may yield, without samples: the registry learns
        their names, so that ``/metrics?name[]=...`` selects among them."""
        counters = {series.name for series in GPU_SERIES if series.counter}
        for name in FAMILY_NAMES:
            yield (CounterMetricFamily if name in counters else GaugeMetricFamily)(name, "")

    def collect(self) -> Iterator[Metric]:
        """The series for this scrape."""
        # The time first: readings stale at `now` are stale when latest() looks, a moment
        # later, so a GPU that reads down for a hang also reads hung.
        now = self._clock()
        latest = self._latest()
        families = metric_families(
            latest, now, interval_s=self._interval_s, processes=self._processes, jobs=self._jobs
        )
        return iter(families)
