"""NVIDIA GPUs, through NVML (the ``nvidia-ml-py`` bindings, imported as ``pynvml``).

:class:`NvmlSampler` turns NVML into :class:`~gputui.telemetry.readings.NvmlReading`
values and never raises for anything the driver does:

- No library, or an NVML that will not start: the reading says so in one sentence
  with the fix, and init is tried again at most every ``init_retry_s`` seconds, so a
  driver loaded later is picked up.
- A field that answers NotSupported, or FunctionNotFound (a driver older than the
  bindings), becomes ``None``; it is asked once and never again, logged once at
  debug level.
- A GPU that answers GpuIsLost is read as ``lost`` (index, name and UUID kept) and
  asked again only every ``lost_retry_s`` seconds; the other GPUs keep updating.
- Any other NVML error leaves that one field ``None`` for that one sample.

``sample()`` blocks on driver calls, which can hang for seconds: call it from a
worker thread, never on the UI's event loop, and use :func:`is_stale` to mark
readings that stopped coming. Every call is recorded while it is in flight, so that
another thread can say which one hangs (:meth:`NvmlSampler.pending_call`,
:meth:`NvmlSampler.hung_reading`) and the process never tears NVML down under one
(:func:`end_nvml_calls`). ``pynvml`` is imported on the first sample, so importing
this module stays cheap.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

import psutil

from gputui.telemetry.commandline import command_line
from gputui.telemetry.devnodes import match_host_pids, node_mappers
from gputui.telemetry.readings import (
    DriverCall,
    GpuProcess,
    GpuReading,
    GpuState,
    MigDeviceReading,
    NvmlReading,
    NvmlStatus,
)

log = logging.getLogger(__name__)

INIT_RETRY_S = 30.0
"""Seconds between attempts to start NVML after it failed."""
LOST_RETRY_S = 30.0
"""Seconds between attempts to read a GPU that answered GpuIsLost."""
MATCH_TTL_S = 5.0
"""How often, in a pid namespace of our own, the local processes' memory maps are read
again to match NVML's host pids (:mod:`gputui.telemetry.devnodes`)."""
HEALTH_TTL_S = 10.0
"""Seconds ECC errors, pending row remaps, the MIG mode and the MIG devices (their ids and
processes; not their memory, read every sample) are trusted (they change rarely)."""
POWER_LIMIT_TTL_S = 30.0
"""Seconds a power limit is trusted before it is asked again (an admin may change it)."""
PCIE_TTL_S = 1.0
"""Seconds a GPU's PCIe throughput is shown before it is asked again."""
PCIE_BUDGET_S = 0.03
"""Driver time one sample may start spending on PCIe throughput (see ``_refresh_pcie``)."""
CLOSE_WAIT_S = 1.0
"""Seconds :meth:`NvmlSampler.close` waits for a sample in flight before giving up on it."""

# NVML return codes (nvml.h, a stable ABI), so this module needs pynvml only when it samples.
_NO_PERMISSION = 4
_NOT_SUPPORTED = 3
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_LIB_RM_VERSION_MISMATCH = 18
_RESET_REQUIRED = 16
_UNKNOWN = 999

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
_TEMPERATURE_GPU = 0
_PCIE_TX_BYTES = 0
_PCIE_RX_BYTES = 1
_PSTATE_UNKNOWN = 32
_VALUE_NOT_AVAILABLE = 2**64 - 1
_PCIE_UNIT_BYTES = 1024
"""NVML reports PCIe throughput in KB/s of 1024 bytes (as nvitop reads it)."""
PROCESS_SAMPLES_WINDOW_US = 1_000_000
"""How far before the newest per-process utilization sample the next ask starts (µs): the
driver samples a busy process every so often, so asking only for what is newer than the last
answer would read a busy process as 0 % whenever a sample falls between two asks."""

_LIBRARY_MISSING = (
    "No NVIDIA driver library (libnvidia-ml.so.1) was found; "
    "install the NVIDIA driver to monitor NVIDIA GPUs."
)
_INIT_ERRORS: dict[int, str] = {
    _LIBRARY_NOT_FOUND: _LIBRARY_MISSING,
    _DRIVER_NOT_LOADED: (
        "The NVIDIA driver is installed but its kernel module is not loaded; "
        "load it with `sudo modprobe nvidia` (or reboot) to monitor NVIDIA GPUs."
    ),
    _NO_PERMISSION: (
        "gputui is not allowed to open the NVIDIA devices (/dev/nvidia*); "
        "add your user to the group that owns them, or ask an administrator."
    ),
    _LIB_RM_VERSION_MISMATCH: (
        "The NVIDIA driver library and the loaded kernel module are different versions "
        "(usually after a driver update); reboot, or reload the nvidia kernel modules."
    ),
    _FUNCTION_NOT_FOUND: (
        "The NVIDIA driver is too old for the nvidia-ml-py bindings; "
        "update the NVIDIA driver to monitor NVIDIA GPUs."
    ),
}

WEDGED = "the driver may be wedged; check `nvidia-smi` and `dmesg`"
"""What a call that does not return means, and where to look."""

LOST_ERROR = (
    "The driver reports GpuIsLost: the GPU fell off the bus. Check `dmesg` for Xid errors, "
    "then reset it (`nvidia-smi -r -i INDEX`) or reboot."
)
_HANDLE_ERRORS: dict[int, str] = {
    _NO_PERMISSION: (
        "gputui may not open this GPU (no permission on its /dev/nvidia device); "
        "ask an administrator, or check the device's group."
    ),
    _RESET_REQUIRED: (
        "The driver says this GPU requires a reset: `nvidia-smi -r -i INDEX`, or reboot."
    ),
    _UNKNOWN: (
        "NVML answers Unknown Error for this GPU (often a GPU in a bad state); check `dmesg` "
        "for Xid errors, then reset it (`nvidia-smi -r -i INDEX`) or reboot."
    ),
}


_INITIAL_PID_NAMESPACE = 0xEFFFFFFC
"""The inode of the host's (initial) pid namespace, PROC_PID_INIT_INO in the Linux kernel."""


def in_own_pid_namespace(path: str = "/proc/self/ns/pid") -> bool:
    """Whether this process runs in a pid namespace other than the host's (Linux).

    NVML always reports the host's pids; in a container without ``--pid=host`` a local
    process with the same number is another process. ``False`` where it cannot be told.
    """
    try:
        return os.stat(path).st_ino != _INITIAL_PID_NAMESPACE
    except OSError:
        return False


def describe_handle_error(index: int, code: int | None, detail: str) -> str:
    """One sentence saying why GPU ``index``'s handle could not be had, and the fix."""
    if code == _GPU_IS_LOST:
        sentence = LOST_ERROR
    else:
        sentence = _HANDLE_ERRORS.get(code or 0) or (
            f"NVML cannot open this GPU ({detail}); run `nvidia-smi -i INDEX` to see what the "
            "driver reports, then reset it or reboot."
        )
    return sentence.replace("INDEX", str(index))


def describe_nvml_error(code: int | None, detail: str) -> str:
    """One sentence saying why NVML cannot be used and what to do about it.

    Args:
        code: The NVML return code that stopped it (``None`` when there is none).
        detail: The bindings' own wording, used when the code has no better sentence.
    """
    if code is not None and code in _INIT_ERRORS:
        return _INIT_ERRORS[code]
    return (
        f"NVML could not start ({detail}); run `nvidia-smi` to see what the NVIDIA driver reports."
    )


def describe_hung_call(call: DriverCall, now: float) -> str:
    """One sentence naming an NVML call that has not returned, and for how long, with what
    to check: ``nvmlInit has not returned for 12 s: the driver may be wedged; ...``."""
    where = "" if call.gpu_index is None else f" on GPU {call.gpu_index}"
    return f"{call.function}{where} has not returned for {_whole_seconds(call, now)} s: {WEDGED}."


def _whole_seconds(call: DriverCall, now: float) -> int:
    return int(max(now - call.started_at, 0.0))


def _asked(call: DriverCall | None, gpu: _Gpu) -> bool:
    """Whether ``call`` asks about ``gpu``."""
    return call is not None and call.gpu_index == gpu.index


def _hung_gpu_error(gpu: _Gpu, call: DriverCall | None, now: float) -> str:
    """Why a GPU was not read by a deadline: the call on it that hangs, or the one before it."""
    if call is None:
        return f"NVML had not finished reading this GPU by the deadline: {WEDGED}."
    if call.gpu_index == gpu.index:
        return describe_hung_call(call, now)
    where = "" if call.gpu_index is None else f" on GPU {call.gpu_index}"
    return (
        f"Not read: NVML had not returned from {call.function}{where} "
        f"after {_whole_seconds(call, now)} s; {WEDGED}."
    )


_Pending = tuple[str, int | None, float]
"""A :class:`DriverCall` as every call records it: (function, GPU index, started at); the
dataclass is made only when asked for, so that recording costs each call little."""


class _CallsInFlight:
    """Every thread's NVML call that has not returned yet, process-wide, and whether a new
    one may start.

    NVML's state is the process's: ``nvmlShutdown`` while another thread is inside a call,
    or the process's exit unloading the library under one, frees what that call uses, and
    a real driver crashes (see the stand-in's ``FAKE_NVML_CRASH_ON_TEARDOWN``).

    No lock, as every driver call passes here: a call is recorded before ``_ending`` is
    read, and :meth:`end` sets ``_ending`` before it reads the calls, so either ``end``
    sees the call or the call sees ``_ending`` (each dict operation is atomic in CPython).
    """

    def __init__(self) -> None:
        self._calls: dict[int, _Pending] = {}
        self._ending = False

    def enter(self, call: _Pending, *, alone: bool = False) -> bool:
        """Record ``call`` as this thread's; False (not recorded: do not make it) once the
        process is ending, or with ``alone`` while another thread is inside NVML."""
        thread = threading.get_ident()
        self._calls[thread] = call
        if self._ending or (alone and len(self._calls) > 1):
            del self._calls[thread]
            return False
        return True

    def leave(self) -> None:
        """This thread's call has returned."""
        self._calls.pop(threading.get_ident(), None)

    def end(self) -> tuple[DriverCall, ...]:
        """Let no call start from now on; returns the calls still in flight."""
        self._ending = True
        return self.now()

    def now(self) -> tuple[DriverCall, ...]:
        """The calls in flight."""
        return tuple(DriverCall(*call) for call in self._calls.copy().values())


_IN_FLIGHT = _CallsInFlight()


def calls_in_flight() -> tuple[DriverCall, ...]:
    """Every NVML call, in any thread of this process, that has not returned yet."""
    return _IN_FLIGHT.now()


def end_nvml_calls() -> tuple[DriverCall, ...]:
    """No NVML call starts from now on (the process is about to end); returns the calls
    still in flight. While there is one, the process must end without unloading NVML
    under it: ``os._exit``, not the interpreter's exit (see ``gputui.commands``)."""
    return _IN_FLIGHT.end()


def _unavailable(error: str, code: int | None = None) -> NvmlStatus:
    """The status of an NVML that did not start: the sentence, and NVML's code if it gave one."""
    return NvmlStatus(available=False, error=error, error_code=code)


def format_cuda_version(version: int) -> str:
    """Format NVML's integer CUDA version as ``major.minor``: ``12040`` -> ``"12.4"``."""
    return f"{version // 1000}.{version % 1000 // 10}"


def is_stale(reading_taken_at: float, now: float, interval: float) -> bool:
    """Whether a reading is too old to show as live.

    A reading is stale when no new one arrived for ``max(2 * interval, interval + 1)``
    seconds: two sampling periods, but never less than one period plus a second of
    slack, so a busy machine at a short interval does not flicker. A driver call that
    hangs makes readings stale without freezing the screen.

    Args:
        reading_taken_at: The reading's ``taken_at`` (same clock as ``now``).
        now: The current time, e.g. ``time.monotonic()``.
        interval: The sampling interval in seconds.
    """
    return now - reading_taken_at > max(2.0 * interval, interval + 1.0)


class _GpuLost(Exception):
    """A query answered GpuIsLost."""


class _Stopped(Exception):
    """The sampler was stopped (or the process is ending): no more driver calls."""


@dataclass(slots=True)
class _MigDevice:
    """What the sampler remembers about one MIG device between health reads."""

    index: int
    """Its index among its GPU's MIG devices."""
    handle: Any
    """Its NVML handle (memory is asked through it every sample)."""
    gpu_instance_id: int | None
    """Its GPU instance id."""
    compute_instance_id: int | None
    """Its compute instance id."""
    processes: tuple[GpuProcess, ...] | None
    """Its processes, as last read."""


@dataclass(slots=True)
class _Gpu:
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
    minor: int | None = None
    """Its device node's number, ``/dev/nvidiaN`` (read once, in a pid namespace only)."""
    static_read: bool = False
    """True once the static facts above were read."""
    power_limit_w: float | None = None
    """Enforced power limit, refreshed every ``POWER_LIMIT_TTL_S``."""
    power_limit_read_at: float | None = None
    """When the power limit was last asked."""
    pcie_tx: Any = None
    """PCIe transmit throughput as NVML last answered it (KB/s)."""
    pcie_rx: Any = None
    """PCIe receive throughput as NVML last answered it (KB/s)."""
    pcie_read_at: float | None = None
    """When the PCIe throughput was last asked."""
    unsupported: set[str] = field(default_factory=set)
    """Fields this GPU answered NotSupported for (or that no library function serves)."""
    lost_at: float | None = None
    """When it last answered GpuIsLost, or its handle was refused; ``None`` while it answers."""
    handle_error: str | None = None
    """Why NVML refused the handle (other than GpuIsLost), as a sentence; ``None`` once had."""
    ecc_uncorrected: int | None = None
    """Uncorrected volatile ECC errors, refreshed every ``HEALTH_TTL_S``."""
    remapped_pending: bool | None = None
    """Whether a row remap is pending, refreshed every ``HEALTH_TTL_S``."""
    mig_mode: bool | None = None
    """Whether MIG is enabled, refreshed every ``HEALTH_TTL_S``."""
    mig_devices: list[_MigDevice] | None = None
    """In MIG mode, its MIG devices, refreshed every ``HEALTH_TTL_S``; ``None`` out of it."""
    health_read_at: float | None = None
    """When those were last asked."""
    process_samples_since_us: int = 0
    """The ``lastSeenTimeStamp`` the next per-process utilization ask gives (µs, the driver's
    clock): ``PROCESS_SAMPLES_WINDOW_US`` before the newest sample answered; 0 (all the driver
    holds) at first."""
    energy_counter_mj: int | None = None
    """The energy counter's last answer (mJ); ``None`` before the first."""
    energy_since_start_mj: int = 0
    """What the counter has grown by since the first answer (mJ)."""


@dataclass(frozen=True, slots=True)
class _Identity:
    """Who runs a process, cached until the PID is reused."""

    create_time: float | None
    user: str | None
    command: str | None


_UNKNOWN = _Identity(None, None, None)
"""A process psutil cannot see (or a host pid: not ours to look up)."""

_Query = Callable[..., Any]


def _device_queries(nv: ModuleType) -> dict[str, tuple[tuple[str, _Query], ...]]:
    """For each field, the NVML symbols that can answer it, preferred first, and how to ask."""
    memory: list[tuple[str, _Query]] = []
    if hasattr(nv, "nvmlMemory_v2"):
        memory.append(
            (
                "nvmlDeviceGetMemoryInfo_v2",
                lambda h: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2),
            )
        )
    memory.append(("nvmlDeviceGetMemoryInfo", nv.nvmlDeviceGetMemoryInfo))
    return {
        "name": (("nvmlDeviceGetName", nv.nvmlDeviceGetName),),
        "uuid": (("nvmlDeviceGetUUID", nv.nvmlDeviceGetUUID),),
        "minor": (("nvmlDeviceGetMinorNumber", nv.nvmlDeviceGetMinorNumber),),
        "bus_id": (("nvmlDeviceGetPciInfo_v3", nv.nvmlDeviceGetPciInfo_v3),),
        "sm_clock_max": (
            ("nvmlDeviceGetMaxClockInfo", lambda h: nv.nvmlDeviceGetMaxClockInfo(h, _CLOCK_SM)),
        ),
        "power_limit": (
            ("nvmlDeviceGetEnforcedPowerLimit", nv.nvmlDeviceGetEnforcedPowerLimit),
            ("nvmlDeviceGetPowerManagementLimit", nv.nvmlDeviceGetPowerManagementLimit),
        ),
        "utilization": (("nvmlDeviceGetUtilizationRates", nv.nvmlDeviceGetUtilizationRates),),
        "memory": tuple(memory),
        "temperature": (
            (
                "nvmlDeviceGetTemperature",
                lambda h: nv.nvmlDeviceGetTemperature(h, _TEMPERATURE_GPU),
            ),
        ),
        "power": (("nvmlDeviceGetPowerUsage", nv.nvmlDeviceGetPowerUsage),),
        "energy": (
            ("nvmlDeviceGetTotalEnergyConsumption", nv.nvmlDeviceGetTotalEnergyConsumption),
        ),
        "sm_clock": (
            ("nvmlDeviceGetClockInfo", lambda h: nv.nvmlDeviceGetClockInfo(h, _CLOCK_SM)),
        ),
        "fan": (("nvmlDeviceGetFanSpeed", nv.nvmlDeviceGetFanSpeed),),
        "pcie_tx": (
            (
                "nvmlDeviceGetPcieThroughput",
                lambda h: nv.nvmlDeviceGetPcieThroughput(h, _PCIE_TX_BYTES),
            ),
        ),
        "pcie_rx": (
            (
                "nvmlDeviceGetPcieThroughput",
                lambda h: nv.nvmlDeviceGetPcieThroughput(h, _PCIE_RX_BYTES),
            ),
        ),
        "performance_state": (("nvmlDeviceGetPerformanceState", nv.nvmlDeviceGetPerformanceState),),
        "clock_events": (
            (
                "nvmlDeviceGetCurrentClocksEventReasons",
                nv.nvmlDeviceGetCurrentClocksEventReasons,
            ),
            (
                "nvmlDeviceGetCurrentClocksThrottleReasons",
                nv.nvmlDeviceGetCurrentClocksThrottleReasons,
            ),
        ),
        "ecc_uncorrected": (
            (
                "nvmlDeviceGetTotalEccErrors",
                lambda h: nv.nvmlDeviceGetTotalEccErrors(h, _ECC_UNCORRECTED, _ECC_VOLATILE),
            ),
        ),
        "remapped_rows": (("nvmlDeviceGetRemappedRows", nv.nvmlDeviceGetRemappedRows),),
        "mig_mode": (("nvmlDeviceGetMigMode", nv.nvmlDeviceGetMigMode),),
        # A GPU's MIG devices, each asked through its own handle (the argument after the GPU's).
        "mig_device_count": (
            ("nvmlDeviceGetMaxMigDeviceCount", nv.nvmlDeviceGetMaxMigDeviceCount),
        ),
        "mig_device": (
            ("nvmlDeviceGetMigDeviceHandleByIndex", nv.nvmlDeviceGetMigDeviceHandleByIndex),
        ),
        "mig_gpu_instance_id": (
            ("nvmlDeviceGetGpuInstanceId", lambda _, mig: nv.nvmlDeviceGetGpuInstanceId(mig)),
        ),
        "mig_compute_instance_id": (
            (
                "nvmlDeviceGetComputeInstanceId",
                lambda _, mig: nv.nvmlDeviceGetComputeInstanceId(mig),
            ),
        ),
        "mig_memory": tuple((symbol, _through_mig(query)) for symbol, query in memory),
        "mig_processes": (
            (
                "nvmlDeviceGetComputeRunningProcesses_v3",
                lambda _, mig: nv.nvmlDeviceGetComputeRunningProcesses_v3(mig),
            ),
            (
                "nvmlDeviceGetComputeRunningProcesses_v2",
                lambda _, mig: nv.nvmlDeviceGetComputeRunningProcesses_v2(mig),
            ),
        ),
        "process_utilization": (
            (
                "nvmlDeviceGetProcessUtilization",
                lambda h, since_us: nv.nvmlDeviceGetProcessUtilization(h, since_us),
            ),
        ),
        "compute_processes": (
            (
                "nvmlDeviceGetComputeRunningProcesses_v3",
                nv.nvmlDeviceGetComputeRunningProcesses_v3,
            ),
            (
                "nvmlDeviceGetComputeRunningProcesses_v2",
                nv.nvmlDeviceGetComputeRunningProcesses_v2,
            ),
        ),
        "graphics_processes": (
            (
                "nvmlDeviceGetGraphicsRunningProcesses_v3",
                nv.nvmlDeviceGetGraphicsRunningProcesses_v3,
            ),
            (
                "nvmlDeviceGetGraphicsRunningProcesses_v2",
                nv.nvmlDeviceGetGraphicsRunningProcesses_v2,
            ),
        ),
    }


def _through_mig(query: _Query) -> _Query:
    """``query`` of a GPU asked of one of its MIG devices (given after the GPU's handle)."""
    return lambda _, mig: query(mig)


def _text(value: Any) -> str:
    """NVML strings arrive as ``str`` from current bindings and ``bytes`` from old ones."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def throttle_words(mask: Any) -> tuple[str, ...] | None:
    """NVML's clock event reasons as words, in NVML's order; ``None`` when not answered."""
    if mask is None:
        return None
    return tuple(word for bit, word in THROTTLE_WORDS if int(mask) & bit)


def energy_since_start(gpu: _Gpu, millijoules: Any) -> float | None:
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


def _not_ok(gpu: _Gpu) -> GpuReading:
    """The reading of a GPU that cannot be asked: its identity, its state and why."""
    if gpu.handle_error is not None:
        return _gpu_reading(gpu, GpuState.UNREACHABLE, error=gpu.handle_error)
    return _gpu_reading(gpu, GpuState.LOST, error=LOST_ERROR.replace("INDEX", str(gpu.index)))


def _gpu_reading(
    gpu: _Gpu,
    state: GpuState,
    *,
    utilization: Any = None,
    memory: Any = None,
    temperature: Any = None,
    milliwatts: Any = None,
    millijoules: Any = None,
    sm_clock: Any = None,
    fan: Any = None,
    pcie_tx: Any = None,
    pcie_rx: Any = None,
    pstate: Any = None,
    processes: tuple[GpuProcess, ...] | None = None,
    power_limit_w: float | None = None,
    sm_clock_max_mhz: float | None = None,
    clock_events: Any = None,
    mig_devices: tuple[MigDeviceReading, ...] | None = None,
    error: str | None = None,
) -> GpuReading:
    """A reading of ``gpu`` from NVML's raw answers, each ``None`` when it was not answered.

    A lost GPU is read with no answers at all, so its identity is all it shows.

    Args:
        gpu: The GPU, with its identity (index, name, UUID, bus id).
        state: Whether it still answers.
        utilization: ``nvmlDeviceGetUtilizationRates`` (``.gpu`` and ``.memory``, percent).
        memory: ``nvmlDeviceGetMemoryInfo`` (``.used`` and ``.total``, bytes).
        temperature: Core temperature in °C.
        milliwatts: Power draw in mW.
        millijoules: Energy used since the driver was loaded, in mJ.
        sm_clock: Current SM clock in MHz.
        fan: Fan speed in percent.
        pcie_tx: PCIe transmit throughput in KB/s (``_PCIE_UNIT_BYTES`` each).
        pcie_rx: PCIe receive throughput in KB/s (``_PCIE_UNIT_BYTES`` each).
        pstate: Performance state, ``_PSTATE_UNKNOWN`` when the driver does not know.
        processes: The processes using the GPU; ``None`` when they could not be listed.
        power_limit_w: The cached power limit.
        sm_clock_max_mhz: The cached maximum SM clock.
        clock_events: The clock event (throttle) reasons, NVML's bit mask.
        mig_devices: In MIG mode, its MIG devices.
        error: Why a GPU that is not ``ok`` cannot be read.
    """
    return GpuReading(
        index=gpu.index,
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
        power_limit_w=power_limit_w,
        sm_clock_mhz=float(sm_clock) if sm_clock is not None else None,
        sm_clock_max_mhz=sm_clock_max_mhz,
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
        throttle_reasons=throttle_words(clock_events),
        ecc_uncorrected_errors=gpu.ecc_uncorrected if state is GpuState.OK else None,
        remapped_rows_pending=gpu.remapped_pending if state is GpuState.OK else None,
        mig_mode=gpu.mig_mode if state is GpuState.OK else None,
        mig_devices=mig_devices,
    )


class NvmlSampler:
    """Samples every NVIDIA GPU through NVML; blocking, so run it off the event loop.

    NVML starts on the first :meth:`sample`; device handles and static facts (name,
    UUID, bus id, maximum SM clock) are fetched once, the power limit every
    ``POWER_LIMIT_TTL_S`` seconds and the PCIe throughput in turns (``_refresh_pcie``),
    so a steady sample asks only what changes, and quickly. Samples
    are serialised by a lock; :meth:`close` shuts NVML down.

    Example::

        sampler = NvmlSampler()
        reading = sampler.sample()  # in a worker thread
        sampler.close()
    """

    def __init__(
        self,
        library_path: str | os.PathLike[str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        init_retry_s: float = INIT_RETRY_S,
        lost_retry_s: float = LOST_RETRY_S,
        raw_commands: bool = False,
    ) -> None:
        """Prepare a sampler; nothing is loaded or asked until the first sample.

        Args:
            library_path: A ``libnvidia-ml.so.1`` to load instead of the one the
                bindings find (unusual installs, tests). The bindings hold one library
                per process, so this replaces it for the whole process.
            clock: Monotonic clock, in seconds, for retry timing and ``taken_at``.
            init_retry_s: Seconds between attempts to start NVML after a failure.
            lost_retry_s: Seconds between attempts to read a GPU that was lost.
            raw_commands: Keep the secrets in processes' command lines
                (:mod:`gputui.telemetry.commandline` redacts them otherwise).
        """
        self._library_path = os.fspath(library_path) if library_path is not None else None
        self._clock = clock
        self._init_retry_s = init_retry_s
        self._lost_retry_s = lost_retry_s
        self._raw_commands = raw_commands
        self._lock = threading.Lock()
        self._nv: ModuleType | None = None
        self._queries: dict[str, tuple[tuple[str, _Query], ...]] = {}
        self._gpus: list[_Gpu] | None = None
        self._status = NvmlStatus(available=False, error=None)
        self._init_failed_at: float | None = None
        self._missing_symbols: set[str] = set()
        self._logged: set[tuple[object, ...]] = set()
        self._identities: dict[int, _Identity] = {}
        self._matched_at: float | None = None
        self._local_pids: dict[int, int] = {}  # host pid -> local pid (in a pid namespace)
        self._closed = False
        self._stopping = False
        self._started = False  # nvmlInit returned, and no nvmlShutdown since
        self._pending: _Pending | None = None
        self._last_call: _Pending | None = None
        self._progress: list[GpuReading] = []  # this sample's GPUs, read so far

    # ------------------------------------------------------------------ public

    def sample(self) -> NvmlReading:
        """Read every GPU once. Blocks on the driver; never raises for what NVML answers.

        Returns:
            The reading; when NVML is unavailable, its status holds one sentence on
            why and how to fix it, and ``gpus`` is empty.
        """
        with self._lock:
            try:
                return self._sample()
            except _Stopped:
                return self._closed_reading()

    def _sample(self) -> NvmlReading:
        if self._closed or self._stopping:
            return self._closed_reading()
        self._progress = []
        if self._gpus is None and not self._start():
            return NvmlReading(status=self._status, gpus=(), taken_at=self._clock())
        assert self._gpus is not None
        now = self._clock()
        self._refresh_pcie(self._gpus, now)
        for gpu in self._gpus:
            self._progress.append(self._read_gpu(gpu, now))
        gpus = tuple(self._progress)
        if self._status.host_pids:
            gpus = self._match_local(gpus, now)
        self._forget_identities(gpus)
        return NvmlReading(status=self._status, gpus=gpus, taken_at=self._clock())

    def _closed_reading(self) -> NvmlReading:
        status = NvmlStatus(
            available=False,
            error="The NVIDIA sampler was closed; start a new one to read the GPUs.",
        )
        return NvmlReading(status=status, gpus=(), taken_at=self._clock())

    def pending_call(self) -> DriverCall | None:
        """The NVML call this sampler waits on now, if any; from any thread, without waiting."""
        pending = self._pending
        return None if pending is None else DriverCall(*pending)

    def hung_reading(self, *, keep_read: bool = True) -> NvmlReading:
        """What can be said of a sample stuck in the driver, from another thread, without waiting.

        Every GPU NVML counted is listed; those not read are ``hung``, each with a sentence
        naming the call that has not returned, and the status names that call and how long
        it has waited (``hung_call``, ``hung_seconds``). Stuck before it knew the GPUs
        (``nvmlInit``, ``nvmlDeviceGetCount``), NVML reads as unavailable with that sentence.

        Args:
            keep_read: Keep the readings of the GPUs this sample has read (a snapshot at its
                deadline: they are fresh). Without it (a reader that goes on, as ``gputui
                serve``), a GPU keeps only what is known of it without asking (lost,
                unreachable): the stuck sample's readings are as old as the call, and no GPU
                can be read again until it returns.
        """
        now = self._clock()
        call = self.pending_call()
        culprit = self._pending or self._last_call
        hung_call = culprit[0] if culprit is not None else "nvmlInit"
        hung_seconds = max(now - culprit[2], 0.0) if culprit is not None else None
        gpus = self._gpus
        if gpus is None or not self._status.available:
            error = (
                describe_hung_call(call, now)
                if call is not None
                else f"NVML had not started by the deadline: {WEDGED}."
            )
            status = NvmlStatus(
                available=False, error=error, hung_call=hung_call, hung_seconds=hung_seconds
            )
            return NvmlReading(status=status, gpus=(), taken_at=now)
        read = {reading.index: reading for reading in list(self._progress)}
        shown = []
        for gpu in list(gpus):
            reading = read.get(gpu.index)
            if reading is not None and (keep_read or reading.state is not GpuState.OK):
                shown.append(reading)
            elif not keep_read and gpu.lost_at is not None and not _asked(call, gpu):
                shown.append(_not_ok(gpu))
            else:
                shown.append(
                    _gpu_reading(gpu, GpuState.HUNG, error=_hung_gpu_error(gpu, call, now))
                )
        status = replace(self._status, hung_call=hung_call, hung_seconds=hung_seconds)
        return NvmlReading(status=status, gpus=tuple(shown), taken_at=now)

    def stop(self) -> None:
        """Make a sample in flight end at its next driver call, and later ones at once.

        Takes no lock, so it never waits for a sample that hangs; :meth:`close` still
        shuts NVML down once the sample has ended.
        """
        self._stopping = True

    def close(self) -> None:
        """Shut NVML down. Safe to call twice, and from another thread than ``sample``.

        A sample in flight ends at its next driver call. If it is stuck in the driver for
        more than ``CLOSE_WAIT_S`` seconds, the sampler is marked closed without waiting
        for it, and NVML is left to the process's exit; so it is while any other thread
        is inside NVML (see :class:`_CallsInFlight`).
        """
        self._stopping = True
        acquired = self._lock.acquire(timeout=CLOSE_WAIT_S)
        try:
            self._closed = True
            if acquired:
                self._gpus = None
                self._shut_down()
        finally:
            if acquired:
                self._lock.release()

    def __enter__(self) -> NvmlSampler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------- start

    def _start(self) -> bool:
        """Start NVML unless it failed less than ``init_retry_s`` ago; True when it runs."""
        now = self._clock()
        if self._init_failed_at is not None and now - self._init_failed_at < self._init_retry_s:
            return False
        failed = self._init()
        if failed is None:
            self._init_failed_at = None
            return True
        self._init_failed_at = now
        self._status = failed
        log.debug("NVML unavailable: %s", failed.error)
        return False

    def _init(self) -> NvmlStatus | None:
        """Load the bindings and library, start NVML and fetch the handles.

        Returns:
            ``None`` on success, else the status that says why not.
        """
        try:
            import pynvml as nv
        except ImportError:
            return _unavailable(
                "The nvidia-ml-py package is not installed; "
                "install it with `pip install nvidia-ml-py` to monitor NVIDIA GPUs."
            )
        self._nv = nv
        if not self._queries:
            self._queries = _device_queries(nv)
        if self._library_path is not None:
            try:
                library = ctypes.CDLL(self._library_path)
            except OSError:
                return _unavailable(
                    f"No NVIDIA driver library was found at {self._library_path}; "
                    "install the NVIDIA driver or give the path of libnvidia-ml.so.1."
                )
            with nv.libLoadLock:
                nv.nvmlLib = library
                nv._nvmlGetFunctionPointer_cache.clear()
        try:
            self._call("nvmlInit", None, nv.nvmlInit)
        except nv.NVMLError as err:
            return _unavailable(describe_nvml_error(err.value, str(err)), err.value)
        self._started = True
        try:
            count = self._call("nvmlDeviceGetCount", None, nv.nvmlDeviceGetCount)
        except nv.NVMLError as err:
            self._shut_down()
            return _unavailable(
                describe_nvml_error(err.value, f"cannot count the GPUs: {err}"), err.value
            )

        driver = self._system_query("nvmlSystemGetDriverVersion", nv.nvmlSystemGetDriverVersion)
        cuda = self._system_query(
            "nvmlSystemGetCudaDriverVersion_v2", nv.nvmlSystemGetCudaDriverVersion_v2
        )
        if cuda is None:
            cuda = self._system_query(
                "nvmlSystemGetCudaDriverVersion", nv.nvmlSystemGetCudaDriverVersion
            )
        self._status = NvmlStatus(
            available=True,
            driver_version=_text(driver) if driver is not None else None,
            cuda_driver_version=format_cuda_version(int(cuda)) if cuda else None,
            error=None,
            host_pids=in_own_pid_namespace(),
        )
        self._gpus = [_Gpu(index=index, handle=None) for index in range(count)]
        for gpu in self._gpus:
            self._open(gpu, self._clock())
        return None

    def _open(self, gpu: _Gpu, now: float) -> bool:
        """Fetch ``gpu``'s handle; returns whether it was had.

        A GPU whose handle is refused is never dropped: it is read as lost (GpuIsLost) or
        unreachable (any other error, with the reason), and asked again on the lost GPUs'
        schedule.
        """
        assert self._nv is not None
        try:
            gpu.handle = self._call(
                "nvmlDeviceGetHandleByIndex",
                gpu.index,
                self._nv.nvmlDeviceGetHandleByIndex,
                gpu.index,
            )
        except self._nv.NVMLError as err:
            gpu.lost_at = now
            if err.value == _GPU_IS_LOST:
                gpu.handle_error = None
                self._log_once(("handle", gpu.index, err.value), "GPU %d is lost", gpu.index)
            else:
                gpu.handle_error = describe_handle_error(gpu.index, err.value, str(err))
                self._log_once(
                    ("handle", gpu.index, err.value), "GPU %d: no handle (%s)", gpu.index, err
                )
            return False
        gpu.handle_error = None
        gpu.lost_at = None
        return True

    def _system_query(self, symbol: str, query: Callable[[], Any]) -> Any:
        """Ask a system-wide question; ``None`` (logged once) when NVML will not say."""
        assert self._nv is not None
        if symbol in self._missing_symbols:
            return None
        try:
            return self._call(symbol, None, query)
        except self._nv.NVMLError as err:
            if err.value == _FUNCTION_NOT_FOUND:
                self._missing_symbols.add(symbol)
            self._log_once(("system", symbol, err.value), "NVML %s failed: %s", symbol, err)
            return None

    def _shut_down(self) -> None:
        """``nvmlShutdown`` what this sampler started, unless another thread is inside NVML
        (it would free what that call uses): NVML is then left to the process's exit."""
        if not self._started or self._nv is None:
            return
        call = ("nvmlShutdown", None, self._clock())
        if not _IN_FLIGHT.enter(call, alone=True):
            log.debug("NVML left running: another thread is inside it, or the process is ending")
            return
        self._started = False
        self._pending = self._last_call = call
        try:
            self._nv.nvmlShutdown()
        except self._nv.NVMLError as err:
            log.debug("nvmlShutdown failed: %s", err)
        finally:
            self._pending = None
            _IN_FLIGHT.leave()

    def _call(
        self, function: str, gpu_index: int | None, query: Callable[..., Any], *args: Any
    ) -> Any:
        """Make one driver call, recorded while it is in flight (the one way NVML is called).

        Raises:
            _Stopped: The sampler is stopping, or the process ending: the call is not made.
        """
        if self._stopping:
            raise _Stopped
        call = (function, gpu_index, self._clock())
        if not _IN_FLIGHT.enter(call):
            raise _Stopped
        self._pending = self._last_call = call
        try:
            return query(*args)
        finally:
            self._pending = None
            _IN_FLIGHT.leave()

    # ----------------------------------------------------------------- reading

    def _read_gpu(self, gpu: _Gpu, now: float) -> GpuReading:
        """One GPU's reading; a lost or unreachable GPU is asked again every ``lost_retry_s``."""
        if gpu.lost_at is not None and now - gpu.lost_at < self._lost_retry_s:
            return _not_ok(gpu)
        if gpu.handle is None and not self._open(gpu, now):
            return _not_ok(gpu)
        try:
            reading = self._read_live(gpu, now)
        except _GpuLost:
            if gpu.lost_at is None:
                log.debug("GPU %d answered GpuIsLost; reading it as lost", gpu.index)
            gpu.lost_at = now
            return _not_ok(gpu)
        if gpu.lost_at is not None:
            log.debug("GPU %d answers again", gpu.index)
            gpu.lost_at = None
        return reading

    def _read_live(self, gpu: _Gpu, now: float) -> GpuReading:
        """Ask a GPU that answers; raises :class:`_GpuLost` as soon as it stops."""
        if not gpu.static_read:
            self._read_static(gpu)
        if gpu.power_limit_read_at is None or now - gpu.power_limit_read_at >= POWER_LIMIT_TTL_S:
            milliwatts = self._ask(gpu, "power_limit")
            gpu.power_limit_w = milliwatts / 1000.0 if milliwatts is not None else None
            gpu.power_limit_read_at = now
        if gpu.health_read_at is None or now - gpu.health_read_at >= HEALTH_TTL_S:
            self._read_health(gpu)
            gpu.health_read_at = now

        return _gpu_reading(
            gpu,
            GpuState.OK,
            utilization=self._ask(gpu, "utilization"),
            memory=self._ask(gpu, "memory"),
            temperature=self._ask(gpu, "temperature"),
            milliwatts=self._ask(gpu, "power"),
            millijoules=self._ask(gpu, "energy"),
            sm_clock=self._ask(gpu, "sm_clock"),
            fan=self._ask(gpu, "fan"),
            pcie_tx=gpu.pcie_tx,
            pcie_rx=gpu.pcie_rx,
            pstate=self._ask(gpu, "performance_state"),
            clock_events=self._ask(gpu, "clock_events"),
            processes=self._read_processes(gpu),
            mig_devices=self._read_mig_memory(gpu),
            power_limit_w=gpu.power_limit_w,
            sm_clock_max_mhz=gpu.sm_clock_max_mhz,
        )

    def _read_health(self, gpu: _Gpu) -> None:
        """ECC errors, a pending row remap, the MIG mode and MIG devices: asked every
        ``HEALTH_TTL_S``."""
        errors = self._ask(gpu, "ecc_uncorrected")
        gpu.ecc_uncorrected = int(errors) if errors is not None else None
        rows = self._ask(gpu, "remapped_rows")  # (correctable, uncorrectable, pending, failed)
        gpu.remapped_pending = bool(rows[2]) if rows is not None else None
        mig = self._ask(gpu, "mig_mode")  # (current, pending)
        gpu.mig_mode = bool(mig[0]) if mig is not None else None
        gpu.mig_devices = self._read_mig_devices(gpu) if gpu.mig_mode else None

    def _read_mig_devices(self, gpu: _Gpu) -> list[_MigDevice] | None:
        """A GPU's MIG devices, by index until the driver says there is none at the next
        (as nvitop reads them); ``None`` where NVML does not list them."""
        most = self._ask(gpu, "mig_device_count")
        if most is None:
            return None
        devices = []
        for index in range(int(most)):
            handle = self._ask(gpu, "mig_device", index, not_found=_NONE_THERE)
            if handle is _NONE_THERE:
                break
            if handle is None:
                return None
            gpu_instance = self._ask(gpu, "mig_gpu_instance_id", handle)
            compute_instance = self._ask(gpu, "mig_compute_instance_id", handle)
            infos = self._ask(gpu, "mig_processes", handle)
            processes = None if infos is None else self._processes(_listed(infos, ()), None)
            devices.append(
                _MigDevice(
                    index,
                    handle,
                    int(gpu_instance) if gpu_instance is not None else None,
                    int(compute_instance) if compute_instance is not None else None,
                    processes,
                )
            )
        return devices

    def _read_mig_memory(self, gpu: _Gpu) -> tuple[MigDeviceReading, ...] | None:
        """The MIG devices as last listed, with their memory asked now."""
        if gpu.mig_devices is None:
            return None
        readings = []
        for device in gpu.mig_devices:
            memory = self._ask(gpu, "mig_memory", device.handle)
            readings.append(
                MigDeviceReading(
                    index=device.index,
                    gpu_instance_id=device.gpu_instance_id,
                    compute_instance_id=device.compute_instance_id,
                    memory_used_bytes=int(memory.used) if memory is not None else None,
                    memory_total_bytes=int(memory.total) if memory is not None else None,
                    processes=device.processes,
                )
            )
        return tuple(readings)

    def _refresh_pcie(self, gpus: Sequence[_Gpu], now: float) -> None:
        """Ask the PCIe throughput of the GPUs whose figures are older than ``PCIE_TTL_S``,
        stalest first, while this sample has spent less than ``PCIE_BUDGET_S`` on it.

        A real driver measures PCIe over a window and answers each call after about
        20 ms: asking both directions of every GPU at every sample would take 8 GPUs
        about 320 ms, past a 0.25 s interval. So the GPUs take turns (about one a sample
        on a real driver, all of them where the calls are quick), and a figure is at most
        about ``max(PCIE_TTL_S, GPUs x interval)`` old, as nvitop's 2 s refresh shows it.
        """
        stale = [
            gpu
            for gpu in gpus
            if gpu.handle is not None
            and (gpu.lost_at is None or now - gpu.lost_at >= self._lost_retry_s)
            and (gpu.pcie_read_at is None or now - gpu.pcie_read_at >= PCIE_TTL_S)
        ]
        stale.sort(key=lambda gpu: -1.0 if gpu.pcie_read_at is None else gpu.pcie_read_at)
        spent = 0.0
        for gpu in stale:
            if spent >= PCIE_BUDGET_S:
                return
            started = time.perf_counter()
            try:
                gpu.pcie_tx = self._ask(gpu, "pcie_tx")
                gpu.pcie_rx = self._ask(gpu, "pcie_rx")
            except _GpuLost:
                gpu.pcie_tx = gpu.pcie_rx = None
                gpu.lost_at = now  # read as lost below, as any other query would make it
            gpu.pcie_read_at = now
            spent += time.perf_counter() - started

    def _read_static(self, gpu: _Gpu) -> None:
        """Read the facts that do not change while the driver runs."""
        name = self._ask(gpu, "name")
        if name is not None:
            gpu.name = _text(name)
        uuid = self._ask(gpu, "uuid")
        gpu.uuid = _text(uuid) if uuid is not None else None
        pci = self._ask(gpu, "bus_id")
        gpu.bus_id = _text(pci.busId) if pci is not None else None
        clock = self._ask(gpu, "sm_clock_max")
        gpu.sm_clock_max_mhz = float(clock) if clock is not None else None
        if self._status.host_pids:
            minor = self._ask(gpu, "minor")
            gpu.minor = int(minor) if minor is not None else None
        gpu.static_read = True

    def _ask(self, gpu: _Gpu, field_name: str, *args: Any, not_found: Any = None) -> Any:
        """Ask one field of one GPU; ``None`` when NVML does not answer it.

        NotSupported (this GPU) and FunctionNotFound (this library, every GPU) are
        remembered and never asked again; any other error costs only this sample.

        Args:
            gpu: The GPU.
            field_name: A key of ``_device_queries``.
            args: What the query takes after the handle.
            not_found: What NotFound answers, where it is an answer (no samples since a
                time) rather than an error; ``None`` makes it an error as any other.

        Raises:
            _GpuLost: The GPU answered GpuIsLost.
        """
        if field_name in gpu.unsupported:
            return None
        assert self._nv is not None
        for symbol, query in self._queries[field_name]:
            if symbol in self._missing_symbols:
                continue
            try:
                return self._call(symbol, gpu.index, query, gpu.handle, *args)
            except self._nv.NVMLError as err:
                code = err.value
                if code == _GPU_IS_LOST:
                    raise _GpuLost from None
                if code == _NOT_FOUND and not_found is not None:
                    return not_found
                if code == _FUNCTION_NOT_FOUND:
                    self._missing_symbols.add(symbol)
                    log.debug("NVML has no %s (driver older than the bindings)", symbol)
                    continue
                if code == _NOT_SUPPORTED:
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

    def _log_once(self, key: tuple[object, ...], message: str, *args: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.debug(message, *args)

    # --------------------------------------------------------------- processes

    def _read_processes(self, gpu: _Gpu) -> tuple[GpuProcess, ...] | None:
        """Compute, then graphics processes (a PID in both is listed once, as compute), each
        with its SM utilization; ``None`` when NVML could not list the compute processes
        (unknown, not none)."""
        compute = self._ask(gpu, "compute_processes")
        if compute is None:
            return None
        listed = _listed(compute, self._ask(gpu, "graphics_processes") or ())
        return self._processes(listed, self._read_process_sm(gpu) if listed else None)

    def _processes(
        self, listed: dict[int, tuple[str, Any]], sm: dict[int, float | None] | None
    ) -> tuple[GpuProcess, ...]:
        """The processes NVML listed (``_listed``), each joined with what psutil knows of it
        and its SM utilization (``None`` for all where ``sm`` is)."""
        found = []
        for pid, (kind, used) in listed.items():
            identity = self._identify(pid)
            memory = None if used is None or used >= _VALUE_NOT_AVAILABLE else int(used)
            found.append(
                GpuProcess(
                    pid,
                    identity.user,
                    identity.command,
                    memory,
                    kind,
                    create_time=identity.create_time,
                    local_pid=None if self._status.host_pids else pid,
                    sm_utilization_percent=None if sm is None else sm.get(pid, 0.0),
                )
            )
        return tuple(found)

    def _read_process_sm(self, gpu: _Gpu) -> dict[int, float | None] | None:
        """Each sampled process's SM utilization (its newest sample), from one ask for the
        samples since ``gpu.process_samples_since_us``; ``None`` when NVML does not say.

        A process with no sample in the window ran no kernel in it: the caller reads it as 0.
        """
        samples = self._ask(gpu, "process_utilization", gpu.process_samples_since_us, not_found=())
        if samples is None:
            return None
        newest: dict[int, Any] = {}
        for sample in samples:
            pid = int(sample.pid)
            if pid not in newest or sample.timeStamp >= newest[pid].timeStamp:
                newest[pid] = sample
        if newest:
            latest = max(int(sample.timeStamp) for sample in newest.values())
            gpu.process_samples_since_us = max(latest - PROCESS_SAMPLES_WINDOW_US, 0)
        return {
            pid: float(sample.smUtil) if 0 <= sample.smUtil <= 100 else None
            for pid, sample in newest.items()
        }

    def _match_local(self, gpus: tuple[GpuReading, ...], now: float) -> tuple[GpuReading, ...]:
        """In a pid namespace of our own: each host pid proven to be a local process
        (:mod:`gputui.telemetry.devnodes`) gets that process's pid, user and command."""
        if self._matched_at is None or now - self._matched_at >= MATCH_TTL_S:
            self._matched_at = now
            minors = {gpu.index: gpu.minor for gpu in self._gpus or () if gpu.minor is not None}
            listed = {
                minors[gpu.index]: [process.pid for process in gpu.processes]
                for gpu in gpus
                if gpu.index in minors and gpu.processes is not None
            }
            mappers = node_mappers(exclude=(os.getpid(),)) if listed else {}
            self._local_pids = match_host_pids(listed, mappers)
        if not self._local_pids:
            return gpus
        return tuple(self._with_local(gpu) for gpu in gpus)

    def _with_local(self, gpu: GpuReading) -> GpuReading:
        if not gpu.processes:
            return gpu
        processes = []
        for process in gpu.processes:
            local = self._local_pids.get(process.pid)
            if local is not None:
                identity = self._look_up(local)
                process = replace(
                    process,
                    user=identity.user,
                    command=identity.command,
                    create_time=identity.create_time,
                    local_pid=local if identity.create_time is not None else None,
                )
            processes.append(process)
        return replace(gpu, processes=tuple(processes))

    def _identify(self, pid: int) -> _Identity:
        """Start time, user and command of ``pid``, cached per (pid, create time); ``None``
        where hidden, and always ``None`` for a host pid seen from a pid namespace of our own
        (the local process with that number is another one)."""
        if self._status.host_pids:
            return _UNKNOWN
        return self._look_up(pid)

    def _look_up(self, pid: int) -> _Identity:
        """Start time, user and command of the local process ``pid``, cached."""
        try:
            process = psutil.Process(pid)
            created = process.create_time()
        except (psutil.Error, ValueError, OSError):
            return _UNKNOWN
        cached = self._identities.get(pid)
        if cached is not None and cached.create_time == created:
            return cached
        identity = _Identity(created, _username(process), _command(process, raw=self._raw_commands))
        self._identities[pid] = identity
        return identity

    def _forget_identities(self, gpus: Sequence[GpuReading]) -> None:
        """Drop cached identities of processes no GPU lists any more."""
        if not self._identities:
            return
        alive = {
            process.local_pid or process.pid for gpu in gpus for process in gpu.processes or ()
        }
        for pid in self._identities.keys() - alive:
            del self._identities[pid]


_NONE_THERE = False
"""What asking for a MIG device past the last one answers (NVML's NotFound)."""


def _listed(compute: Any, graphics: Any) -> dict[int, tuple[str, Any]]:
    """NVML's process infos by pid, with their kind and memory (the driver's figure): compute
    first, so a pid in both lists is listed once, as compute."""
    listed: dict[int, tuple[str, Any]] = {}
    for kind, infos in (("compute", compute), ("graphics", graphics)):
        for info in infos:
            listed.setdefault(int(info.pid), (kind, info.usedGpuMemory))
    return listed


def _username(process: psutil.Process) -> str | None:
    try:
        return process.username()
    except (psutil.Error, OSError, KeyError):
        return None


def _command(process: psutil.Process, *, raw: bool) -> str | None:
    try:
        argv = process.cmdline()
    except (psutil.Error, OSError):
        argv = []
    if argv:
        return command_line(argv, raw=raw)
    try:
        return process.name() or None
    except (psutil.Error, OSError):
        return None


__all__ = [
    "INIT_RETRY_S",
    "LOST_RETRY_S",
    "POWER_LIMIT_TTL_S",
    "NvmlSampler",
    "calls_in_flight",
    "describe_hung_call",
    "describe_nvml_error",
    "end_nvml_calls",
    "format_cuda_version",
    "is_stale",
]
