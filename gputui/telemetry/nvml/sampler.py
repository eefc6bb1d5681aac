"""The NVML sampler: starts NVML, keeps each GPU's handle and what it knows of it, and reads
every GPU once a sample, from a worker thread, never raising for what the driver does.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from types import ModuleType
from typing import Any

from gputui.telemetry.nvml.calls import (
    GPU_IS_LOST,
    IN_FLIGHT,
    WEDGED,
    GpuLost,
    Pending,
    Stopped,
    describe_handle_error,
    describe_hung_call,
    describe_hung_gpu,
    describe_nvml_error,
    replaced,
)
from gputui.telemetry.nvml.mig import read_mig_memory
from gputui.telemetry.nvml.processes import ProcessAttribution, in_own_pid_namespace
from gputui.telemetry.nvml.queries import (
    HEALTH_TTL_S,
    LOST_RETRY_S,
    MEDIA_TTL_S,
    NVLINK_STATE_TTL_S,
    NVLINK_TTL_S,
    POWER_LIMIT_TTL_S,
    Queries,
    TrackedGpu,
    due,
    gpu_reading,
    not_ok,
    read_energy,
    read_health,
    read_media,
    read_nvlink_states,
    read_nvlink_throughput,
    read_static,
    refresh_pcie,
    text,
)
from gputui.telemetry.nvml.topology import read_topology
from gputui.telemetry.readings import (
    DriverCall,
    GpuReading,
    GpuState,
    GpuTopology,
    NvmlReading,
    NvmlStatus,
)

log = logging.getLogger(__name__)

INIT_RETRY_S = 30.0
"""Seconds between attempts to start NVML after it failed."""
CLOSED = "The NVIDIA sampler was closed; start a new one to read the GPUs."
"""Why a closed sampler reads no GPU."""
CLOSE_WAIT_S = 1.0
"""Seconds :meth:`NvmlSampler.close` waits for a sample in flight before giving up on it."""


def _unavailable(error: str, code: int | None = None) -> NvmlStatus:
    """The status of an NVML that did not start: the sentence, and NVML's code if it gave one."""
    return NvmlStatus(available=False, error=error, error_code=code)


def format_cuda_version(version: int) -> str:
    """Format NVML's integer CUDA version as ``major.minor``: ``12040`` -> ``"12.4"``."""
    return f"{version // 1000}.{version % 1000 // 10}"


def is_stale(reading_taken_at: float, now: float, interval: float) -> bool:
    """Whether a reading taken at ``reading_taken_at`` (on ``now``'s clock) is too old to show
    as live: none newer came for two sampling intervals, but never less than one and a
    second of slack, so that a busy machine at a short interval does not flicker."""
    return now - reading_taken_at > max(2.0 * interval, interval + 1.0)


class NvmlSampler:
    """Samples every NVIDIA GPU through NVML; blocking, so run it off the event loop.

    NVML starts (and ``pynvml`` is imported) on the first :meth:`sample`. Static facts are
    asked once and slow-changing ones on their own TTLs (:mod:`~gputui.telemetry.nvml.
    queries`), so a steady sample asks only what changes. What the driver does is read,
    never raised:

    - No library, or an NVML that will not start: one sentence with the fix, and init is
      tried again every ``INIT_RETRY_S``, so a driver loaded later is picked up.
    - NotSupported or FunctionNotFound (a driver older than the bindings): ``None``, asked
      once and never again, logged once at debug level.
    - GpuIsLost: read as ``lost`` (its identity kept) and asked again every ``LOST_RETRY_S``;
      the other GPUs keep updating.
    - Any other error: that one field is ``None`` for that one sample.

    A driver call can hang for seconds: every call is recorded while in flight, so that
    another thread can say which one hangs (:meth:`pending_call`, :meth:`hung_reading`) and
    the process never tears NVML down under one (:func:`~gputui.telemetry.nvml.calls.
    end_nvml_calls`).
    """

    def __init__(
        self,
        library_path: str | os.PathLike[str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        raw_commands: bool = False,
    ) -> None:
        """Prepare a sampler; nothing is loaded or asked until the first sample.

        Args:
            library_path: A ``libnvidia-ml.so.1`` to load instead of the one the bindings
                find; the bindings hold one library a process, so it replaces theirs.
            clock: Monotonic clock, in seconds, for retry timing and ``taken_at``.
            raw_commands: Keep the secrets in processes' command lines.
        """
        self._library_path = os.fspath(library_path) if library_path is not None else None
        self._clock = clock
        self._lock = threading.Lock()
        self._nv: ModuleType | None = None
        self._queries: Queries | None = None
        self._gpus: list[TrackedGpu] | None = None
        self._status = NvmlStatus(available=False, error=None)
        self._init_failed_at: float | None = None
        self._logged: set[tuple[object, ...]] = set()
        self._processes = ProcessAttribution(raw_commands=raw_commands)
        self._closed = False
        self._stopping = False
        self._started = False  # nvmlInit returned, and no nvmlShutdown since
        self._pending: Pending | None = None
        self._last_call: Pending | None = None
        self._progress: list[GpuReading] = []  # this sample's GPUs, read so far

    def sample(self) -> NvmlReading:
        """Read every GPU once; blocks on the driver. When NVML is unavailable, the status
        says why and the fix in one sentence, and ``gpus`` is empty."""
        with self._lock:
            try:
                return self._sample()
            except Stopped:
                return NvmlReading(status=_unavailable(CLOSED), gpus=(), taken_at=self._clock())

    def _sample(self) -> NvmlReading:
        if self._closed or self._stopping:
            raise Stopped
        self._progress = []
        if self._gpus is None and not self._start():
            return NvmlReading(status=self._status, gpus=(), taken_at=self._clock())
        assert self._gpus is not None and self._queries is not None
        now = self._clock()
        self._processes.new_sample()
        refresh_pcie(self._queries, self._gpus, now)
        for gpu in self._gpus:
            self._progress.append(self._read_gpu(self._queries, gpu, now))
        gpus = tuple(self._progress)
        if self._status.host_pids:
            gpus = self._processes.match_local(gpus, self._gpus, now)
        gpus = self._processes.with_details(gpus)
        self._processes.forget(gpus)
        return NvmlReading(status=self._status, gpus=gpus, taken_at=self._clock())

    def topology(self) -> GpuTopology:
        """How every GPU reaches every other (:func:`read_topology`), asked afresh: call it
        once (it does not change). Blocks on the driver, serialised with :meth:`sample`."""
        with self._lock:
            try:
                if self._closed or self._stopping:
                    raise Stopped
                if self._gpus is None and not self._start():
                    return GpuTopology((), (), error=self._status.error)
                assert self._gpus is not None and self._queries is not None
                topology = read_topology(self._queries, self._gpus)
            except Stopped:
                return GpuTopology((), (), error=CLOSED)
        if not topology.gpus:
            return GpuTopology((), (), error="NVML answers, but lists no NVIDIA GPU to read.")
        return topology

    def pending_call(self) -> DriverCall | None:
        """The NVML call this sampler waits on now, if any; from any thread, without waiting."""
        pending = self._pending
        return None if pending is None else DriverCall(*pending)

    def hung_reading(self, *, keep_read: bool = True) -> NvmlReading:
        """What can be said of a sample stuck in the driver, from another thread, without
        waiting: every GPU NVML counted, those not read ``hung`` with a sentence naming the
        call that has not returned (``hung_call``, ``hung_seconds`` in the status); NVML
        unavailable when stuck before it knew the GPUs (``nvmlInit``, ``nvmlDeviceGetCount``).

        Args:
            keep_read: Keep the readings of the GPUs this sample has read (a snapshot at its
                deadline: they are fresh). Without it (a reader that goes on, as ``gputui
                serve``), a GPU keeps only what is known without asking (lost, unreachable):
                no GPU can be read again until the call returns.
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
            elif not keep_read and gpu.lost_at is not None and not _asks(call, gpu):
                shown.append(not_ok(gpu))
            else:
                error = describe_hung_gpu(gpu.index, call, now)
                shown.append(gpu_reading(gpu, GpuState.HUNG, error=error))
        status = replace(self._status, hung_call=hung_call, hung_seconds=hung_seconds)
        return NvmlReading(status=status, gpus=tuple(shown), taken_at=now)

    def stop(self) -> None:
        """Make a sample in flight end at its next driver call, and later ones at once; takes
        no lock, so it never waits for a sample that hangs."""
        self._stopping = True

    def close(self) -> None:
        """Shut NVML down; safe to call twice, and from another thread than ``sample``. A
        sample stuck in the driver past ``CLOSE_WAIT_S`` is not waited for: NVML is then
        left to the process's exit, as it is while any other thread is inside NVML."""
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

    def _start(self) -> bool:
        """Start NVML unless it failed less than ``INIT_RETRY_S`` ago; True when it runs."""
        now = self._clock()
        if self._init_failed_at is not None and now - self._init_failed_at < INIT_RETRY_S:
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
        """Load the bindings and library, start NVML and fetch the handles; ``None`` on
        success, else the status that says why not."""
        try:
            # the bindings load on the sampler's thread, off the event loop
            import pynvml as nv
        except ImportError:
            return _unavailable(
                "The nvidia-ml-py package is not installed; "
                "install it with `pip install nvidia-ml-py` to monitor NVIDIA GPUs."
            )
        self._nv = nv
        if self._queries is None:
            self._queries = Queries(nv, self._call, self._log_once)
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

        ask = self._queries.ask_system
        driver = ask("nvmlSystemGetDriverVersion", nv.nvmlSystemGetDriverVersion)
        cuda = ask("nvmlSystemGetCudaDriverVersion_v2", nv.nvmlSystemGetCudaDriverVersion_v2)
        if cuda is None:
            cuda = ask("nvmlSystemGetCudaDriverVersion", nv.nvmlSystemGetCudaDriverVersion)
        self._processes.host_pids = in_own_pid_namespace()
        self._status = NvmlStatus(
            available=True,
            driver_version=text(driver) if driver is not None else None,
            cuda_driver_version=format_cuda_version(int(cuda)) if cuda else None,
            error=None,
            host_pids=self._processes.host_pids,
        )
        self._gpus = [TrackedGpu(index=index, handle=None) for index in range(count)]
        for gpu in self._gpus:
            self._open(gpu, self._clock())
        return None

    def _open(self, gpu: TrackedGpu, now: float) -> bool:
        """Fetch ``gpu``'s handle; whether it was had. A GPU whose handle is refused is read
        as lost (GpuIsLost) or unreachable (with the reason), and asked again on the lost
        GPUs' schedule."""
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
            if err.value == GPU_IS_LOST:
                gpu.handle_error = gpu.handle_error_brief = None
                self._log_once(("handle", gpu.index, err.value), "GPU %d is lost", gpu.index)
            else:
                gpu.handle_error, gpu.handle_error_brief = describe_handle_error(
                    gpu.index, err.value, str(err)
                )
                self._log_once(
                    ("handle", gpu.index, err.value), "GPU %d: no handle (%s)", gpu.index, err
                )
            return False
        gpu.handle_error = gpu.handle_error_brief = None
        gpu.lost_at = None
        return True

    def _shut_down(self) -> None:
        """``nvmlShutdown`` what this sampler started, unless another thread is inside NVML
        (it would free what that call uses): NVML is then left to the process's exit."""
        if not self._started or self._nv is None:
            return
        call = ("nvmlShutdown", None, self._clock())
        if not IN_FLIGHT.enter(call, alone=True):
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
            IN_FLIGHT.leave()

    def _call(
        self, function: str, gpu_index: int | None, query: Callable[..., Any], *args: Any
    ) -> Any:
        """Make one driver call, recorded while it is in flight (the one way NVML is called).
        A string answered that is not UTF-8 (a GPU's name can be) comes with each bad byte
        replaced (:func:`replaced`): the bindings' strict decode would end every sample.

        Raises:
            Stopped: The sampler is stopping, or the process ending: the call is not made.
        """
        if self._stopping:
            raise Stopped
        call = (function, gpu_index, self._clock())
        if not IN_FLIGHT.enter(call):
            raise Stopped
        self._pending = self._last_call = call
        try:
            return query(*args)
        except UnicodeDecodeError as err:
            return replaced(err)
        finally:
            self._pending = None
            IN_FLIGHT.leave()

    def _read_gpu(self, queries: Queries, gpu: TrackedGpu, now: float) -> GpuReading:
        """One GPU's reading; a lost or unreachable GPU is asked again every ``LOST_RETRY_S``."""
        if gpu.lost_at is not None and now - gpu.lost_at < LOST_RETRY_S:
            return not_ok(gpu)
        if gpu.handle is None and not self._open(gpu, now):
            return not_ok(gpu)
        try:
            reading = self._read_live(queries, gpu, now)
        except GpuLost:
            if gpu.lost_at is None:
                log.debug("GPU %d answered GpuIsLost; reading it as lost", gpu.index)
            gpu.lost_at = now
            return not_ok(gpu)
        if gpu.lost_at is not None:
            log.debug("GPU %d answers again", gpu.index)
            gpu.lost_at = None
        return reading

    def _read_live(self, queries: Queries, gpu: TrackedGpu, now: float) -> GpuReading:
        """Ask a GPU that answers; raises :class:`GpuLost` as soon as it stops."""
        ask = queries.ask
        if not gpu.static_read:
            read_static(queries, gpu, minor=self._status.host_pids)
        if due(gpu, "power_limit", now, POWER_LIMIT_TTL_S):
            milliwatts = ask(gpu, "power_limit")
            gpu.power_limit_w = milliwatts / 1000.0 if milliwatts is not None else None
        if due(gpu, "health", now, HEALTH_TTL_S):
            read_health(queries, gpu, self._processes.of_mig)
        if due(gpu, "nvlink_state", now, NVLINK_STATE_TTL_S):
            read_nvlink_states(queries, gpu)
        if due(gpu, "media", now, MEDIA_TTL_S):
            read_media(queries, gpu)
        if gpu.nvlink_active is not None and (
            gpu.nvlink_read_at is None or now - gpu.nvlink_read_at >= NVLINK_TTL_S
        ):
            read_nvlink_throughput(queries, gpu, now)

        return gpu_reading(
            gpu,
            GpuState.OK,
            utilization=ask(gpu, "utilization"),
            memory=ask(gpu, "memory"),
            temperature=ask(gpu, "temperature"),
            milliwatts=ask(gpu, "power"),
            millijoules=read_energy(queries, gpu, now),
            sm_clock=ask(gpu, "sm_clock"),
            memory_clock=ask(gpu, "memory_clock"),
            fan=ask(gpu, "fan"),
            pstate=ask(gpu, "performance_state"),
            clock_events=ask(gpu, "clock_events"),
            processes=self._processes.read(queries, gpu),
            mig_devices=read_mig_memory(gpu.mig_devices, partial(ask, gpu)),
        )

    def _log_once(self, key: tuple[object, ...], message: str, *args: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.debug(message, *args)


def _asks(call: DriverCall | None, gpu: TrackedGpu) -> bool:
    """Whether ``call`` asks about ``gpu``."""
    return call is not None and call.gpu_index == gpu.index
