"""One GPU's readings: what the sampler keeps of it, how each field is asked, and NVML's
answers made a :class:`~gputui.telemetry.readings.GpuReading`.

Over 600 lines: each field's call, the state it is kept in between samples, its time to
live and its reader stand together, so that a field is changed in one place.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import ModuleType
from typing import Any, TypeVar

from gputui.telemetry.bounds import in_range
from gputui.telemetry.nvml.calls import (
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    INVALID_ARGUMENT,
    NOT_FOUND,
    NOT_SUPPORTED,
    GpuLost,
    describe_handle_error,
)
from gputui.telemetry.nvml.mig import MigDevice, read_mig_devices
from gputui.telemetry.readings import (
    GpuProcess,
    GpuReading,
    GpuState,
    MigDeviceReading,
    NvlinkThroughput,
    Vendor,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


LOST_RETRY_S = 30.0
"""Seconds between attempts to read a GPU that answered GpuIsLost."""
HEALTH_TTL_S = 10.0
"""Seconds ECC errors, pending row remaps, the MIG mode and the MIG devices (their ids and
processes; not their memory, read every sample) are trusted (they change rarely)."""
NVLINK_STATE_TTL_S = 30.0
"""Seconds the count of NVLink links up is trusted: a call a link (18 on an H100), the most a
health reading asks, for a state that changes only when a link fails (dcgm-exporter's
default interval is as long)."""
POWER_LIMIT_TTL_S = 30.0
"""Seconds a power limit is trusted before it is asked again (an admin may change it)."""
PCIE_TTL_S = 1.0
"""Seconds a GPU's PCIe throughput and link are shown before they are asked again."""
MEDIA_TTL_S = 2.0
"""Seconds a GPU's video encoder and decoder utilization are shown before they are asked
again (the driver averages them over its own sampling period; nvitop refreshes every 2 s):
two, not one, so that the video engines and NVLink add less than a tenth to a sample's cost
(BENCHMARKS.md, the NVML sampler's cost)."""
NVLINK_TTL_S = 2.0
"""Seconds between two reads of a GPU's NVLink throughput counters (its rate spans them):
two, not one, to keep the read within a tenth of a sample's cost (BENCHMARKS.md, the NVML
sampler's cost)."""
PCIE_BUDGET_S = 0.03
"""Driver time one sample may start spending on PCIe figures (see :func:`refresh_pcie`)."""
ENERGY_SLOW_S = 0.0005
"""A GPU whose energy counter takes more CPU than this to answer is asked for it every
``ENERGY_TTL_S``, not every sample (see :func:`read_energy`)."""
ENERGY_TTL_S = 10.0
"""Seconds a slow energy counter's last answer is shown before it is asked again."""
ENERGY_STAGGER = 8
"""GPUs whose second energy reads fall in different tenths of ``ENERGY_TTL_S`` (the ninth
shares the first's)."""

_ECC_UNCORRECTED = 1  # NVML_MEMORY_ERROR_TYPE_UNCORRECTED
_ECC_VOLATILE = 0  # NVML_VOLATILE_ECC: since the driver was loaded
THROTTLE_WORDS = (
    (0x1, "idle"),
    (0x2, "application clocks"),
    (0x4, "power cap"),
    (0x8, "HW slowdown"),
    (0x10, "sync boost"),
    (0x20, "thermal"),
    (0x40, "HW thermal"),
    (0x80, "HW power brake"),
    (0x100, "display clocks"),
)
"""NVML's clock event (throttle) reasons, bit by bit, in the words the monitor shows."""
_CLOCK_SM = 1
_CLOCK_MEM = 2
_TEMPERATURE_GPU = 0
_PCIE_TX_BYTES = 0
_PCIE_RX_BYTES = 1
_PSTATE_UNKNOWN = 32
_PCIE_UNIT_BYTES = 1024
"""NVML reports PCIe throughput in KB/s of 1024 bytes (as nvitop reads it)."""
_NVLINK_UP = 1  # NVML_FEATURE_ENABLED
_NVLINK_MAX_LINKS = 18
"""NVML_NVLINK_MAX_LINKS where the bindings do not say it."""
_NVLINK_DATA_TX = 138  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: KiB sent, payload alone
_NVLINK_DATA_RX = 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
_ALL_LINKS = 0xFFFFFFFF  # a throughput field's scopeId for every link added up (nvml.h)
_KIB = 1024
_FIELD_OK = 0
PAST_END = -1
"""What asking a link past a GPU's last answers (see :meth:`Queries.ask`'s ``past_end``)."""


@dataclass(slots=True)
class TrackedGpu:
    """What the sampler remembers about one GPU between samples."""

    index: int
    """NVML index."""
    handle: Any
    """The NVML device handle; ``None`` when even the handle could not be had."""
    name: str = "Unknown NVIDIA GPU"
    """Product name (read once)."""
    uuid: str | None = None
    """UUID (read once)."""
    bus_id: str | None = None
    """PCI bus id (read once)."""
    sm_clock_max_mhz: float | None = None
    """Maximum SM clock (read once)."""
    memory_clock_max_mhz: float | None = None
    """Maximum memory clock (read once)."""
    pcie_link_gen_max: int | None = None
    """Highest PCIe link generation of the GPU and its slot (read once)."""
    pcie_link_width_max: int | None = None
    """Widest PCIe link of the GPU and its slot, in lanes (read once)."""
    minor: int | None = None
    """Its device node's number, ``/dev/nvidiaN`` (read once, in a pid namespace only)."""
    static_read: bool = False
    """True once the static facts above were read."""
    power_limit_w: float | None = None
    """Enforced power limit, refreshed every ``POWER_LIMIT_TTL_S``."""
    pcie_tx: Any = None
    """PCIe transmit throughput as NVML last answered it (KB/s)."""
    pcie_rx: Any = None
    """PCIe receive throughput as NVML last answered it (KB/s)."""
    pcie_link_gen: int | None = None
    """The PCIe link's generation as NVML last answered it (with the throughput)."""
    pcie_link_width: int | None = None
    """The PCIe link's width in lanes as NVML last answered it (with the throughput)."""
    pcie_read_at: float | None = None
    """When the PCIe throughput and link were last asked."""
    encoder_percent: float | None = None
    """Video encoder utilization, refreshed every ``MEDIA_TTL_S``."""
    decoder_percent: float | None = None
    """Video decoder utilization, refreshed every ``MEDIA_TTL_S``."""
    nvlink_active: int | None = None
    """NVLink links that are up, refreshed every ``NVLINK_STATE_TTL_S``; ``None`` without
    NVLink."""
    nvlink_down: tuple[int, ...] | None = None
    """The numbers of the NVLink links that are down, asked with ``nvlink_active``."""
    nvlink_throughput: NvlinkThroughput | None = None
    """NVLink's counters as last answered and the rates since the read before (one object
    until the next read, so that each sample's reading shares it)."""
    nvlink_read_at: float | None = None
    """When the NVLink counters were last asked (every ``NVLINK_TTL_S``)."""
    unsupported: set[str] = field(default_factory=set)
    """Fields this GPU answered NotSupported for (or that no library function serves)."""
    lost_at: float | None = None
    """When it last answered GpuIsLost, or its handle was refused; ``None`` while it answers."""
    handle_error: str | None = None
    """Why NVML refused the handle (other than GpuIsLost), as a sentence; ``None`` once had."""
    handle_error_brief: str | None = None
    """``handle_error`` in a few words."""
    ecc_uncorrected: int | None = None
    """Uncorrected volatile ECC errors, refreshed every ``HEALTH_TTL_S``."""
    remapped_pending: bool | None = None
    """Whether a row remap is pending, refreshed every ``HEALTH_TTL_S``."""
    mig_mode: bool | None = None
    """Whether MIG is enabled, refreshed every ``HEALTH_TTL_S``."""
    mig_devices: list[MigDevice] | None = None
    """In MIG mode, its MIG devices, refreshed every ``HEALTH_TTL_S``; ``None`` out of it."""
    process_samples_since_us: int = 0
    """The ``lastSeenTimeStamp`` the next per-process utilization ask gives (µs, the driver's
    clock): ``PROCESS_SAMPLES_WINDOW_US`` before the newest sample answered; 0 (all the driver
    holds) at first."""
    energy_counter_mj: int | None = None
    """The energy counter's last answer (mJ); ``None`` before the first."""
    energy_since_start_mj: int = 0
    """What the counter has grown by since the first answer (mJ)."""
    energy_read_at: float | None = None
    """When the energy counter was last asked."""
    energy_slow: bool = False
    """Whether its last answer took more CPU than ``ENERGY_SLOW_S``."""
    asked_at: dict[str, float] = field(default_factory=dict)
    """When each group of fields refreshed on its own TTL (``power_limit``, ``health``,
    ``nvlink_state``, ``media``) was last asked (:func:`due`)."""


def due(gpu: TrackedGpu, group: str, now: float, ttl_s: float) -> bool:
    """Whether ``gpu``'s ``group`` of fields was never asked, or ``ttl_s`` or more before
    ``now``; if so, it counts as asked at ``now``."""
    last = gpu.asked_at.get(group)
    if last is not None and now - last < ttl_s:
        return False
    gpu.asked_at[group] = now
    return True


Query = Callable[..., Any]


def device_queries(nv: ModuleType) -> dict[str, tuple[tuple[str, Query], ...]]:
    """For each field, the NVML symbols that can answer it, preferred first, and how to ask."""
    memory: list[tuple[str, Query]] = []
    if hasattr(nv, "nvmlMemory_v2"):
        memory.append(
            (
                "nvmlDeviceGetMemoryInfo_v2",
                lambda h: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2),
            )
        )
    memory.append(("nvmlDeviceGetMemoryInfo", nv.nvmlDeviceGetMemoryInfo))

    def plain(*symbols: str) -> tuple[tuple[str, Query], ...]:
        return tuple((symbol, getattr(nv, symbol)) for symbol in symbols)

    def with_args(symbol: str, *args: Any) -> tuple[tuple[str, Query], ...]:
        return ((symbol, lambda h: getattr(nv, symbol)(h, *args)),)

    processes = "nvmlDeviceGet{}RunningProcesses_v{}".format
    return {
        "name": plain("nvmlDeviceGetName"),
        "uuid": plain("nvmlDeviceGetUUID"),
        "minor": plain("nvmlDeviceGetMinorNumber"),
        # The bus id itself, read inside its call: the bindings decode it as it is read
        # (see ``calls.replaced``).
        "bus_id": (("nvmlDeviceGetPciInfo_v3", lambda h: nv.nvmlDeviceGetPciInfo_v3(h).busId),),
        "sm_clock_max": with_args("nvmlDeviceGetMaxClockInfo", _CLOCK_SM),
        "memory_clock_max": with_args("nvmlDeviceGetMaxClockInfo", _CLOCK_MEM),
        "pcie_link_gen_max": plain("nvmlDeviceGetMaxPcieLinkGeneration"),
        "pcie_link_width_max": plain("nvmlDeviceGetMaxPcieLinkWidth"),
        "power_limit": plain(
            "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit"
        ),
        "utilization": plain("nvmlDeviceGetUtilizationRates"),
        "memory": tuple(memory),
        "temperature": with_args("nvmlDeviceGetTemperature", _TEMPERATURE_GPU),
        "power": plain("nvmlDeviceGetPowerUsage"),
        "energy": plain("nvmlDeviceGetTotalEnergyConsumption"),
        "sm_clock": with_args("nvmlDeviceGetClockInfo", _CLOCK_SM),
        "memory_clock": with_args("nvmlDeviceGetClockInfo", _CLOCK_MEM),
        "fan": plain("nvmlDeviceGetFanSpeed"),
        # Each answers [utilization %, sampling period µs].
        "encoder": plain("nvmlDeviceGetEncoderUtilization"),
        "decoder": plain("nvmlDeviceGetDecoderUtilization"),
        "pcie_tx": with_args("nvmlDeviceGetPcieThroughput", _PCIE_TX_BYTES),
        "pcie_rx": with_args("nvmlDeviceGetPcieThroughput", _PCIE_RX_BYTES),
        "pcie_link_gen": plain("nvmlDeviceGetCurrPcieLinkGeneration"),
        "pcie_link_width": plain("nvmlDeviceGetCurrPcieLinkWidth"),
        "performance_state": plain("nvmlDeviceGetPerformanceState"),
        "clock_events": plain(
            "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"
        ),
        "ecc_uncorrected": with_args(
            "nvmlDeviceGetTotalEccErrors", _ECC_UNCORRECTED, _ECC_VOLATILE
        ),
        "remapped_rows": plain("nvmlDeviceGetRemappedRows"),
        "mig_mode": plain("nvmlDeviceGetMigMode"),
        "nvlink_state": plain("nvmlDeviceGetNvLinkState"),
        # The topology (read once, on its own screen): what each link reaches, and where
        # two GPUs' PCIe paths meet (the other GPU's handle after this one's).
        "nvlink_remote": (
            (
                "nvmlDeviceGetNvLinkRemotePciInfo_v2",
                lambda h, link: nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId,
            ),
        ),
        "topology": plain("nvmlDeviceGetTopologyCommonAncestor"),
        # Both directions' counters, every link added up, in one call.
        "nvlink_throughput": with_args(
            "nvmlDeviceGetFieldValues",
            [(_NVLINK_DATA_TX, _ALL_LINKS), (_NVLINK_DATA_RX, _ALL_LINKS)],
        ),
        # A GPU's MIG devices, each asked through its own handle (the argument after the GPU's).
        "mig_device_count": plain("nvmlDeviceGetMaxMigDeviceCount"),
        "mig_device": plain("nvmlDeviceGetMigDeviceHandleByIndex"),
        "mig_gpu_instance_id": _through_mig(plain("nvmlDeviceGetGpuInstanceId")),
        "mig_compute_instance_id": _through_mig(plain("nvmlDeviceGetComputeInstanceId")),
        "mig_memory": _through_mig(tuple(memory)),
        "mig_processes": _through_mig(plain(processes("Compute", 3), processes("Compute", 2))),
        "process_utilization": plain("nvmlDeviceGetProcessUtilization"),
        "compute_processes": plain(processes("Compute", 3), processes("Compute", 2)),
        "graphics_processes": plain(processes("Graphics", 3), processes("Graphics", 2)),
    }


def _through_mig(queries: tuple[tuple[str, Query], ...]) -> tuple[tuple[str, Query], ...]:
    """``queries`` of a GPU asked of one of its MIG devices (given after the GPU's handle)."""
    return tuple((symbol, _of_mig(query)) for symbol, query in queries)


def _of_mig(query: Query) -> Query:
    return lambda _, mig: query(mig)


def text(value: Any) -> str:
    """NVML strings arrive as ``str`` from current bindings and ``bytes`` from old ones."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def throttle_words(mask: Any) -> tuple[str, ...] | None:
    """NVML's clock event reasons as words, in NVML's order; ``None`` when not answered."""
    if mask is None:
        return None
    return tuple(word for bit, word in THROTTLE_WORDS if int(mask) & bit)


def read_energy(queries: Queries, gpu: TrackedGpu, now: float) -> Any:
    """``gpu``'s energy counter (mJ): asked every sample while it answers on less than
    ``ENERGY_SLOW_S`` of CPU (CPU time: a quick call preempted stays every sample), else every
    ``ENERGY_TTL_S``, its last answer shown in between.

    An H200 on driver 580 spent most of a sample's CPU on this one call (BENCHMARKS.md, NVML
    on a real driver); dcgm-exporter reads it every 30 s by default. Each answer is the whole
    counter, so no energy is lost between two; one asked every ``ENERGY_TTL_S`` lags by up to
    that and one interval. A failed read is asked again at the next sample. A GPU's second
    read comes as many tenths of ``ENERGY_TTL_S`` early as its index modulo
    ``ENERGY_STAGGER``, so that a box's GPUs take turns rather than all spending their
    milliseconds in one sample.
    """
    if (
        gpu.energy_slow
        and gpu.energy_read_at is not None
        and now - gpu.energy_read_at < ENERGY_TTL_S
    ):
        return gpu.energy_counter_mj
    started = time.thread_time()
    millijoules = queries.ask(gpu, "energy")
    if millijoules is not None:
        gpu.energy_slow = time.thread_time() - started > ENERGY_SLOW_S
        first = gpu.energy_read_at is None
        early = ENERGY_TTL_S * (gpu.index % ENERGY_STAGGER) / 10 if first else 0.0
        gpu.energy_read_at = now - early
    return millijoules


def energy_since_start(gpu: TrackedGpu, millijoules: Any) -> float | None:
    """The energy ``gpu`` used since its counter was first read, in joules, counting this
    answer; ``None`` when the counter was not answered this time (the next answer counts on
    from the last one). A counter that goes backwards started again (a driver reload): it
    counts on from its new value, and the energy used in between is not guessed."""
    if millijoules is None:
        return None
    counter = int(millijoules)
    last = gpu.energy_counter_mj
    if last is not None and counter >= last:
        gpu.energy_since_start_mj += counter - last
    gpu.energy_counter_mj = counter
    return gpu.energy_since_start_mj / 1000.0


def not_ok(gpu: TrackedGpu) -> GpuReading:
    """The reading of a GPU that cannot be asked: its identity, its state and why."""
    if gpu.handle_error is not None:
        return gpu_reading(
            gpu, GpuState.UNREACHABLE, error=gpu.handle_error, error_brief=gpu.handle_error_brief
        )
    error, brief = describe_handle_error(gpu.index, GPU_IS_LOST, "")
    return gpu_reading(gpu, GpuState.LOST, error=error, error_brief=brief)


def gpu_reading(
    gpu: TrackedGpu,
    state: GpuState,
    *,
    utilization: Any = None,
    memory: Any = None,
    temperature: Any = None,
    milliwatts: Any = None,
    millijoules: Any = None,
    sm_clock: Any = None,
    memory_clock: Any = None,
    fan: Any = None,
    pstate: Any = None,
    processes: tuple[GpuProcess, ...] | None = None,
    clock_events: Any = None,
    mig_devices: tuple[MigDeviceReading, ...] | None = None,
    error: str | None = None,
    error_brief: str | None = None,
) -> GpuReading:
    """A reading of ``gpu`` from NVML's raw answers, each in NVML's own unit (°C, mW, mJ, MHz,
    a bit mask of clock event reasons), ``None`` when not answered. What ``gpu`` keeps between
    samples (its PCIe throughput in KB/s of ``_PCIE_UNIT_BYTES`` too) is shown only of a GPU
    that is ``ok``. A value no GPU can take reads ``None``
    (:func:`~gputui.telemetry.bounds.in_range`): a broken driver answers integers up to
    ``2**64 - 1``.
    """
    ok = state is GpuState.OK
    pcie_rx, pcie_tx = (gpu.pcie_rx, gpu.pcie_tx) if ok else (None, None)
    reading = GpuReading(
        index=gpu.index,
        vendor=Vendor.NVIDIA,
        name=gpu.name,
        uuid=gpu.uuid,
        bus_id=gpu.bus_id,
        state=state,
        utilization_percent=float(utilization.gpu) if utilization is not None else None,
        memory_utilization_percent=float(utilization.memory) if utilization is not None else None,
        memory_used_bytes=int(memory.used) if memory is not None else None,
        memory_total_bytes=int(memory.total) if memory is not None else None,
        temperature_c=float(temperature) if temperature is not None else None,
        power_w=milliwatts / 1000.0 if milliwatts is not None else None,
        power_limit_w=gpu.power_limit_w if ok else None,
        sm_clock_mhz=float(sm_clock) if sm_clock is not None else None,
        sm_clock_max_mhz=gpu.sm_clock_max_mhz if ok else None,
        fan_percent=float(fan) if fan is not None else None,
        pcie_rx_bytes_per_s=float(pcie_rx * _PCIE_UNIT_BYTES) if pcie_rx is not None else None,
        pcie_tx_bytes_per_s=float(pcie_tx * _PCIE_UNIT_BYTES) if pcie_tx is not None else None,
        performance_state=(
            int(pstate) if pstate is not None and pstate != _PSTATE_UNKNOWN else None
        ),
        processes=processes,
        energy_j=millijoules / 1000.0 if millijoules is not None else None,
        energy_joules=energy_since_start(gpu, millijoules),
        error=error,
        error_brief=error_brief,
        throttle_reasons=throttle_words(clock_events),
        ecc_uncorrected_errors=gpu.ecc_uncorrected if ok else None,
        remapped_rows_pending=gpu.remapped_pending if ok else None,
        mig_mode=gpu.mig_mode if ok else None,
        mig_devices=mig_devices,
        memory_clock_mhz=float(memory_clock) if memory_clock is not None else None,
        memory_clock_max_mhz=gpu.memory_clock_max_mhz if ok else None,
        pcie_link_gen=gpu.pcie_link_gen if ok else None,
        pcie_link_gen_max=gpu.pcie_link_gen_max if ok else None,
        pcie_link_width_lanes=gpu.pcie_link_width if ok else None,
        pcie_link_width_max_lanes=gpu.pcie_link_width_max if ok else None,
        encoder_utilization_percent=gpu.encoder_percent if ok else None,
        decoder_utilization_percent=gpu.decoder_percent if ok else None,
        nvlink_links_active=gpu.nvlink_active if ok else None,
        nvlink_links_down=gpu.nvlink_down if ok else None,
        nvlink_throughput=gpu.nvlink_throughput if ok and gpu.nvlink_active is not None else None,
    )
    return in_range(reading)


Call = Callable[..., Any]
"""Makes one driver call, recorded while in flight: ``call(function, gpu_index, query, *args)``
(``NvmlSampler._call``)."""


class Queries:
    """Asks NVML one field of one GPU, or one question of the system, through the sampler's
    recorded calls; what NVML does not serve is asked once and never again."""

    def __init__(self, nv: ModuleType, call: Call, log_once: Callable[..., None]) -> None:
        """Ask through the bindings ``nv`` (``pynvml``), making each driver call with ``call``
        (the sampler's, so each is recorded); ``log_once(key, message, *args)`` logs at debug
        level, once per key."""
        self._nv = nv
        self._queries = device_queries(nv)
        self._call = call
        self._log_once = log_once
        self._missing_symbols: set[str] = set()
        self.nvlink_max_links = int(getattr(nv, "NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS))
        """How many NVLink links a GPU may have, as the bindings count them."""

    def ask(
        self,
        gpu: TrackedGpu,
        field_name: str,
        *args: Any,
        not_found: Any = None,
        past_end: Any = None,
    ) -> Any:
        """Ask ``gpu`` one field (a key of :func:`device_queries`), with ``args`` after the
        handle; ``None`` when NVML does not answer it. NotSupported (this GPU) and
        FunctionNotFound (this library, every GPU) are never asked again; any other error
        costs only this sample.

        Args:
            not_found: What NotFound answers, where it is an answer (no samples since a
                time) rather than an error.
            past_end: What NotSupported and InvalidArgument answer, where they say that an
                item is past the GPU's last (an NVLink link it does not have) rather than
                that the GPU lacks the field.

        Raises:
            GpuLost: The GPU answered GpuIsLost.
        """
        if field_name in gpu.unsupported:
            return None
        for symbol, query in self._queries[field_name]:
            if symbol in self._missing_symbols:
                continue
            try:
                return self._call(symbol, gpu.index, query, gpu.handle, *args)
            except self._nv.NVMLError as err:
                code = err.value
                if code == GPU_IS_LOST:
                    raise GpuLost from None
                if code == NOT_FOUND and not_found is not None:
                    return not_found
                if code in (NOT_SUPPORTED, INVALID_ARGUMENT) and past_end is not None:
                    return past_end
                if code == FUNCTION_NOT_FOUND:
                    self._missing_symbols.add(symbol)
                    log.debug("NVML has no %s (driver older than the bindings)", symbol)
                    continue
                if code == NOT_SUPPORTED:
                    gpu.unsupported.add(field_name)
                    log.debug("GPU %d does not support %s; showing n/a", gpu.index, field_name)
                    return None
                self._log_once(
                    (gpu.index, field_name, code),
                    "GPU %d: %s failed (%s); n/a for this sample",
                    gpu.index,
                    field_name,
                    err,
                )
                return None
        gpu.unsupported.add(field_name)  # no function in this library serves it
        return None

    def ask_system(self, symbol: str, query: Callable[[], Any]) -> Any:
        """Ask a system-wide question; ``None`` (logged once) when NVML will not say."""
        if symbol in self._missing_symbols:
            return None
        try:
            return self._call(symbol, None, query)
        except self._nv.NVMLError as err:
            if err.value == FUNCTION_NOT_FOUND:
                self._missing_symbols.add(symbol)
            self._log_once(("system", symbol, err.value), "NVML %s failed: %s", symbol, err)
            return None


def read_static(queries: Queries, gpu: TrackedGpu, *, minor: bool) -> None:
    """Read the facts that do not change while the driver runs (the device node's number
    too, with ``minor``)."""
    name = queries.ask(gpu, "name")
    gpu.name = gpu.name if name is None else text(name)
    gpu.uuid = _as(text, queries.ask(gpu, "uuid"))
    gpu.bus_id = _as(text, queries.ask(gpu, "bus_id"))
    gpu.sm_clock_max_mhz = _as(float, queries.ask(gpu, "sm_clock_max"))
    gpu.memory_clock_max_mhz = _as(float, queries.ask(gpu, "memory_clock_max"))
    gpu.pcie_link_gen_max = _as(int, queries.ask(gpu, "pcie_link_gen_max"))
    gpu.pcie_link_width_max = _as(int, queries.ask(gpu, "pcie_link_width_max"))
    if minor:
        gpu.minor = _as(int, queries.ask(gpu, "minor"))
    gpu.static_read = True


def _as(kind: Callable[[Any], T], value: Any) -> T | None:
    """NVML's answer as ``kind`` (``int``, ``float``, :func:`text`); ``None`` when not
    answered."""
    return None if value is None else kind(value)


def read_health(
    queries: Queries, gpu: TrackedGpu, mig_processes: Callable[[Any], tuple[GpuProcess, ...]]
) -> None:
    """ECC errors, a pending row remap, the MIG mode and MIG devices (``mig_processes`` makes a
    MIG device's processes of NVML's process infos): asked every ``HEALTH_TTL_S``."""
    gpu.ecc_uncorrected = _as(int, queries.ask(gpu, "ecc_uncorrected"))
    rows = queries.ask(gpu, "remapped_rows")  # (correctable, uncorrectable, pending, failed)
    gpu.remapped_pending = bool(rows[2]) if rows is not None else None
    mig = queries.ask(gpu, "mig_mode")  # (current, pending)
    gpu.mig_mode = bool(mig[0]) if mig is not None else None
    gpu.mig_devices = (
        read_mig_devices(partial(queries.ask, gpu), mig_processes) if gpu.mig_mode else None
    )


def read_nvlink_states(queries: Queries, gpu: TrackedGpu) -> None:
    """Which of ``gpu``'s NVLink links are up and which down (asked every
    ``NVLINK_STATE_TTL_S``), asked link by link until one past its last (NotSupported or
    InvalidArgument); both ``None`` without NVLink (NotSupported for link 0: never asked
    again) or when a link's state could not be read this time."""
    up, down = 0, []
    for link in range(queries.nvlink_max_links):
        state = queries.ask(gpu, "nvlink_state", link, past_end=PAST_END if link else None)
        if state is None:
            gpu.nvlink_active = gpu.nvlink_down = None
            return
        if state == PAST_END:
            break
        if state == _NVLINK_UP:
            up += 1
        else:
            down.append(link)
    gpu.nvlink_active, gpu.nvlink_down = up, tuple(down)


def read_nvlink_throughput(queries: Queries, gpu: TrackedGpu, now: float) -> None:
    """``gpu``'s NVLink data counters, every link added up (one ``nvmlDeviceGetFieldValues``),
    and the rates since the last read: asked every ``NVLINK_TTL_S`` of a GPU with NVLink. A
    field NVML does not answer is ``None`` (both NotSupported: never asked again)."""
    tx = rx = None
    values = queries.ask(gpu, "nvlink_throughput")
    if values is not None:
        sent, received = values
        sent_code, received_code = sent.nvmlReturn, received.nvmlReturn
        if sent_code == _FIELD_OK:
            tx = sent.value.ullVal * _KIB
        if received_code == _FIELD_OK:
            rx = received.value.ullVal * _KIB
        if sent_code == received_code == NOT_SUPPORTED:
            gpu.unsupported.add("nvlink_throughput")
    last, before = gpu.nvlink_read_at, gpu.nvlink_throughput
    elapsed = 0.0 if last is None or before is None else now - last
    gpu.nvlink_throughput = NvlinkThroughput(
        rx_bytes=rx,
        tx_bytes=tx,
        rx_bytes_per_s=_rate(before.rx_bytes, rx, elapsed) if before else None,
        tx_bytes_per_s=_rate(before.tx_bytes, tx, elapsed) if before else None,
    )
    gpu.nvlink_read_at = now


def _rate(before: int | None, after: int | None, elapsed: float) -> float | None:
    """Bytes a second between two byte counters ``elapsed`` seconds apart; ``None`` unless
    both are known, time went on and the counter did not go back."""
    if before is None or after is None or elapsed <= 0 or after < before:
        return None
    return (after - before) / elapsed


def read_media(queries: Queries, gpu: TrackedGpu) -> None:
    """The video encoder's and decoder's utilization: asked every ``MEDIA_TTL_S``."""
    encoder = queries.ask(gpu, "encoder")
    gpu.encoder_percent = float(encoder[0]) if encoder is not None else None
    decoder = queries.ask(gpu, "decoder")
    gpu.decoder_percent = float(decoder[0]) if decoder is not None else None


def refresh_pcie(queries: Queries, gpus: Sequence[TrackedGpu], now: float) -> None:
    """Ask the PCIe throughput and link of the GPUs whose figures are older than
    ``PCIE_TTL_S``, stalest first, while this sample has spent less than ``PCIE_BUDGET_S`` on
    them; a GPU lost less than ``LOST_RETRY_S`` ago is left alone.

    A real driver measures PCIe over a window and answers each call after about 20 ms: both
    directions of 8 GPUs every sample would take 320 ms, past a 0.25 s interval. So the GPUs
    take turns, and a figure is at most about ``max(PCIE_TTL_S, GPUs x interval)`` old, as
    nvitop's 2 s refresh shows it. The link answers at once: it rides along.
    """
    stale = [
        gpu
        for gpu in gpus
        if gpu.handle is not None
        and (gpu.lost_at is None or now - gpu.lost_at >= LOST_RETRY_S)
        and (gpu.pcie_read_at is None or now - gpu.pcie_read_at >= PCIE_TTL_S)
    ]
    stale.sort(key=lambda gpu: -1.0 if gpu.pcie_read_at is None else gpu.pcie_read_at)
    spent = 0.0
    for gpu in stale:
        if spent >= PCIE_BUDGET_S:
            return
        started = time.perf_counter()
        try:
            gpu.pcie_tx = queries.ask(gpu, "pcie_tx")
            gpu.pcie_rx = queries.ask(gpu, "pcie_rx")
            gpu.pcie_link_gen = _as(int, queries.ask(gpu, "pcie_link_gen"))
            gpu.pcie_link_width = _as(int, queries.ask(gpu, "pcie_link_width"))
        except GpuLost:
            gpu.pcie_tx = gpu.pcie_rx = gpu.pcie_link_gen = gpu.pcie_link_width = None
            gpu.lost_at = now  # read as lost below, as any other query would make it
        gpu.pcie_read_at = now
        spent += time.perf_counter() - started
