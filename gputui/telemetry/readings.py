"""Typed, frozen readings: the only thing the telemetry layer hands out.

Every field a device may not support is ``Optional``: ``None`` means "not
supported or not known" and is shown as ``n/a``. Readings never guess.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

NOT_IN_JSON = "not_in_json"
"""A field's metadata key: the field is not written as JSON (``gputui snapshot --json``, a
recording, a fleet's hosts), and its value says why; every other field is, by its name."""
_TAKEN_AT = {NOT_IN_JSON: "a time on one process's clock: a recorded frame's time says when"}


@dataclass(frozen=True, slots=True)
class CpuReading:
    """One sample of the host: CPUs, memory, and gputui's own footprint."""

    utilization_percent: float
    """Total CPU utilization since the previous sample, 0-100."""
    per_core_percent: tuple[float, ...]
    """Utilization of each logical core, 0-100."""
    logical_cores: int
    """Number of logical cores."""
    physical_cores: int | None
    """Number of physical cores, when the platform tells."""
    model_name: str | None
    """The processor's model name, when the platform tells."""
    load_average: tuple[float, float, float] | None
    """1, 5 and 15 minute load averages."""
    frequency_mhz: float | None
    """Current clock frequency."""
    frequency_max_mhz: float | None
    """Maximum clock frequency."""
    memory_used_bytes: int
    """Host memory in use (total minus available)."""
    memory_total_bytes: int
    """Host memory installed."""
    swap_used_bytes: int
    """Swap in use."""
    swap_total_bytes: int
    """Swap configured (0 when there is none)."""
    self_cpu_percent: float | None
    """gputui's own CPU use, percent of one core."""
    self_rss_bytes: int | None
    """gputui's own resident set size."""
    taken_at: float = field(metadata=_TAKEN_AT)
    """``time.monotonic()`` when the sample was taken."""


class Vendor(str, Enum):
    """Who made a GPU, as gputui reads it: through NVML (``nvidia``), the kernel's amdgpu
    driver (``amd``), its i915 or xe driver (``intel``), or Metal (``apple``)."""

    NVIDIA = "nvidia"
    AMD = "amd"
    INTEL = "intel"
    APPLE = "apple"


VENDOR_NAMES = {
    Vendor.NVIDIA: "NVIDIA",
    Vendor.AMD: "AMD",
    Vendor.INTEL: "Intel",
    Vendor.APPLE: "Apple",
}
"""Each vendor as people write it."""


class GpuState(str, Enum):
    """Whether a GPU still answers: ``lost`` once it answered GpuIsLost, ``unreachable`` when
    NVML would not even give its handle (no permission, "requires reset", Unknown Error),
    ``hung`` when a call about it (or one before it) had not returned by a deadline."""

    OK = "ok"
    LOST = "lost"
    UNREACHABLE = "unreachable"
    HUNG = "hung"


@dataclass(frozen=True, slots=True)
class DriverCall:
    """An NVML call that has not returned yet."""

    function: str
    """The NVML function, e.g. ``nvmlInit`` or ``nvmlDeviceGetTemperature``."""
    gpu_index: int | None
    """The GPU it asks about; ``None`` for a system-wide call (init, the GPU count...)."""
    started_at: float
    """When it was made, on the sampler's clock (the clock of readings' ``taken_at``)."""


@dataclass(frozen=True, slots=True)
class Workload:
    """What a process runs in, as its cgroup names it (:mod:`gputui.telemetry.workload`);
    each field ``None`` where unknown."""

    container: str | None = None
    """The container's name where the runtime's files say it, else its id's first 12
    characters (as ``docker ps`` shows it)."""
    container_id: str | None = None
    """The container's full id (64 hex digits)."""
    runtime: str | None = None
    """``docker``, ``containerd``, ``cri-o`` or ``podman``; ``None`` where the cgroup does not
    tell (a bare id under a cgroupfs-driven pod)."""
    pod: str | None = None
    """The Kubernetes pod's name where the kubelet's files say it, else its UID."""
    pod_uid: str | None = None
    """The pod's UID."""
    namespace: str | None = None
    """The pod's namespace, where the kubelet's files say it."""
    slurm_job: str | None = None
    """The Slurm job id, e.g. ``1234``."""
    slurm_step: str | None = None
    """The Slurm step within it: ``0``, ``1``..., ``batch``, ``extern``, ``interactive``."""
    unit: str | None = None
    """The innermost systemd unit: ``foo.service``, ``user@1000.service``, ``session-3.scope``."""

    @property
    def job(self) -> tuple[str, str] | None:
        """What the process is counted under, ``(kind, name)``: its Slurm job
        (``slurm_job``, the id), else its pod (``pod``, ``namespace/name`` or the UID), else
        its container (``container``); ``None`` in none of them."""
        if self.slurm_job is not None:
            return "slurm_job", self.slurm_job
        if self.pod is not None:
            return "pod", self.pod if self.namespace is None else f"{self.namespace}/{self.pod}"
        if self.container is not None:
            return "container", self.container
        return None


NO_WORKLOAD = Workload()
"""A process whose cgroup names nothing, or could not be read."""


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding memory on a GPU, joined with what psutil knows of it."""

    pid: int
    """Process id, as NVML reports it: the host's (see ``local_pid``)."""
    user: str | None
    """Owner's user name, when psutil can see it."""
    command: str | None
    """Command line (or name), when psutil can see it."""
    gpu_memory_bytes: int | None
    """GPU memory the process uses; ``None`` when the driver does not say."""
    kind: str = "compute"
    """``"compute"``, ``"graphics"``, or ``"compute+graphics"`` where NVML lists it as both."""
    create_time: float | None = None
    """When the process started (psutil's ``create_time``, seconds since the epoch), read with
    its user and command; ``None`` where unknown. A signal goes only to a process that still
    has this start time: a pid reused since the reading is another process."""
    local_pid: int | None = None
    """The same process's pid in gputui's pid namespace: ``pid`` itself on the host; in a
    container's pid namespace, the local process proven to be it (it alone maps the GPU's
    device node, see :mod:`gputui.telemetry.devnodes`), else ``None``. Signals go to it."""
    sm_utilization_percent: float | None = None
    """Share of the GPU's SMs the process kept busy in NVML's latest samples, 0-100 (0 when
    NVML has no recent sample of it: it ran no kernel); ``None`` where NVML does not say."""
    cpu_percent: float | None = None
    """Host CPU it used since the previous reading, percent of one core (over 100 on several
    cores); ``None`` on its first reading, or where psutil cannot see it."""
    rss_bytes: int | None = None
    """Host memory it holds (resident set size); ``None`` where psutil cannot see it."""
    elapsed_s: float | None = None
    """Seconds since it started (``create_time``) at this reading; ``None`` where unknown."""
    workload: Workload = NO_WORKLOAD
    """The container, pod, Slurm job and systemd unit it runs in, each ``None`` where unknown."""


@dataclass(frozen=True, slots=True)
class MigDeviceReading:
    """One MIG device (a GPU instance's compute instance) of a GPU in MIG mode."""

    index: int
    """Its index among the GPU's MIG devices (``nvmlDeviceGetMigDeviceHandleByIndex``)."""
    gpu_instance_id: int | None
    """The GPU instance it belongs to (its memory and SM slice)."""
    compute_instance_id: int | None
    """Its compute instance within that GPU instance."""
    memory_used_bytes: int | None
    """Its memory in use."""
    memory_total_bytes: int | None
    """Its memory."""
    processes: tuple[GpuProcess, ...] | None
    """The processes running on it; ``None`` where NVML could not list them."""


@dataclass(frozen=True, slots=True)
class NvlinkThroughput:
    """The data a GPU's NVLink links carry, every link added up (payload, not protocol
    overhead). One field of a reading, not four: a reading is copied a few times a sample."""

    rx_bytes: int | None
    """Received since the driver was loaded (a counter)."""
    tx_bytes: int | None
    """Sent since the driver was loaded (a counter)."""
    rx_bytes_per_s: float | None
    """Received a second, between the last two reads of the counter."""
    tx_bytes_per_s: float | None
    """Sent a second, the same way."""


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One sample of one GPU."""

    index: int
    """NVML index on NVIDIA; on AMD and Intel, the card's place among that vendor's cards in
    PCI bus order (see :func:`gpu_label`)."""
    vendor: Vendor
    """Whose GPU it is, and so which driver gave the readings."""
    name: str
    """Product name, e.g. ``NVIDIA H100 80GB HBM3``, ``AMD Instinct MI300X``."""
    uuid: str | None
    """``GPU-...`` UUID on NVIDIA; AMD's ``unique_id`` (a serial number in hex)."""
    bus_id: str | None
    """PCI bus id as the driver writes it: ``00000000:17:00.0`` (NVML), ``0000:03:00.0``
    (the kernel's, for AMD and Intel)."""
    state: GpuState
    """``ok``, or why the GPU cannot be read (``lost``, ``unreachable``, ``hung``: then every
    reading is ``None``)."""
    utilization_percent: float | None
    """Share of time a kernel was running, 0-100."""
    memory_utilization_percent: float | None
    """Share of time device memory was read or written, 0-100."""
    memory_used_bytes: int | None
    """Device memory in use."""
    memory_total_bytes: int | None
    """Device memory installed."""
    temperature_c: float | None
    """GPU core temperature."""
    power_w: float | None
    """Power draw."""
    power_limit_w: float | None
    """Enforced power limit."""
    sm_clock_mhz: float | None
    """Current SM clock."""
    sm_clock_max_mhz: float | None
    """Maximum SM clock."""
    fan_percent: float | None
    """Fan speed as a share of its maximum (``None`` on passively cooled boards)."""
    pcie_rx_bytes_per_s: float | None
    """PCIe receive throughput."""
    pcie_tx_bytes_per_s: float | None
    """PCIe transmit throughput."""
    performance_state: int | None
    """Performance state: 0 (P0, fastest) to 15; ``None`` when unknown."""
    processes: tuple[GpuProcess, ...] | None = ()
    """Processes using the GPU; ``None`` when NVML could not list them (NotSupported, an
    error, a lost GPU): unknown, which is not the same as none."""
    energy_j: float | None = None
    """Energy used since the driver was loaded, a counter (Volta and later; else ``None``)."""
    energy_joules: float | None = None
    """Energy used since this sampler first read the GPU: the counter's increase, which keeps
    growing across a counter that starts again (a driver reload); ``None`` where the counter is
    not answered."""
    error: str | None = None
    """Why a GPU that is not ``ok`` cannot be read, and what to do, in one sentence."""
    error_brief: str | None = None
    """``error`` in a few words (at most ``ERROR_BRIEF_MAX`` characters), for a line too short
    for the sentence; ``None`` where there is none."""
    throttle_reasons: tuple[str, ...] | None = None
    """Why the clocks are held down now, in words (``power cap``, ``thermal``...; empty: they
    are not); ``None`` when NVML does not say."""
    ecc_uncorrected_errors: int | None = None
    """Uncorrected ECC errors since the driver was loaded (volatile); ``None``: no ECC."""
    remapped_rows_pending: bool | None = None
    """True when a row remap waits for a GPU reset (Ampere and later; else ``None``)."""
    mig_mode: bool | None = None
    """Whether MIG is enabled (A100, H100...; ``None`` where the GPU has no MIG)."""
    mig_devices: tuple[MigDeviceReading, ...] | None = None
    """In MIG mode, its MIG devices (empty: none made yet); ``None`` out of MIG mode, or
    where NVML does not list them."""
    junction_temperature_c: float | None = None
    """The hottest point of the die (AMD's ``junction``)."""
    memory_temperature_c: float | None = None
    """Device memory's temperature."""
    memory_clock_mhz: float | None = None
    """Current memory clock."""
    memory_clock_max_mhz: float | None = None
    """Maximum memory clock."""
    pcie_link_gen: int | None = None
    """Current PCIe link generation (an idle GPU drops it to save power)."""
    pcie_link_gen_max: int | None = None
    """Highest PCIe link generation the GPU and its slot both support."""
    pcie_link_width_lanes: int | None = None
    """Current PCIe link width, in lanes."""
    pcie_link_width_max_lanes: int | None = None
    """Widest PCIe link the GPU and its slot both support, in lanes."""
    encoder_utilization_percent: float | None = None
    """Share of time the video encoder was busy, 0-100."""
    decoder_utilization_percent: float | None = None
    """Share of time the video decoder was busy, 0-100."""
    fan_rpm: float | None = None
    """Fan speed in revolutions a minute, where the card has a tachometer (AMD's
    ``fan1_input``); shown where ``fan_percent`` is not known (no ``fan1_max``)."""
    nvlink_links_active: int | None = None
    """NVLink links that are up (0: every link is down); ``None`` without NVLink."""
    nvlink_links_down: tuple[int, ...] | None = None
    """The numbers of the NVLink links that are down, in order (empty: none is; links are
    numbered from 0); ``None`` without NVLink."""
    nvlink_throughput: NvlinkThroughput | None = None
    """What NVLink carries, every link; ``None`` without NVLink."""


ERROR_BRIEF_MAX = 50
"""The most characters of a GPU's ``error_brief``: it fits beside ``UNREACHABLE`` on one line
of an 80-column monitor."""


def gpu_label(gpu: GpuReading) -> str:
    """A GPU's short name where several vendors' GPUs are listed together: its NVML index on
    NVIDIA (``0``, as ``nvidia-smi`` and ``--only`` number it), else the vendor and its index
    among that vendor's cards (``amd0``, ``intel1``)."""
    if gpu.vendor is Vendor.NVIDIA:
        return str(gpu.index)
    return f"{gpu.vendor.value}{gpu.index}"


def shown_pid(process: GpuProcess) -> int:
    """The pid to show and to signal: the process's own in gputui's pid namespace where
    known (``local_pid``), else NVML's, the host's."""
    return process.local_pid if process.local_pid is not None else process.pid


def unmatched_host_pids(processes: Iterable[GpuProcess]) -> int:
    """How many of ``processes``, read in a pid namespace of our own, are shown by the
    host's pid (no local process proven to be them)."""
    return sum(1 for process in processes if process.local_pid is None)


BENIGN_THROTTLES = frozenset({"idle", "application clocks", "display clocks"})
"""Clock event reasons that are not a problem: an idle GPU runs slow on purpose."""


def health_problems(gpu: GpuReading) -> list[str]:
    """What is wrong with a GPU that still answers, in a few words each; empty when nothing."""
    problems = []
    throttles = [r for r in gpu.throttle_reasons or () if r not in BENIGN_THROTTLES]
    if throttles:
        problems.append("throttled: " + ", ".join(throttles))
    if gpu.ecc_uncorrected_errors:
        count = gpu.ecc_uncorrected_errors
        problems.append(f"{count} uncorrected ECC error" + ("" if count == 1 else "s"))
    if gpu.remapped_rows_pending:
        problems.append("row remap pending: reset the GPU")
    return problems


@dataclass(frozen=True, slots=True)
class GpuPath:
    """How one GPU reaches another, as ``nvidia-smi topo -m`` says it."""

    ancestor: str | None
    """Their closest common ancestor, in ``nvidia-smi topo -m``'s words: ``PIX`` (one PCIe
    switch), ``PXB`` (several), ``PHB`` (a host bridge), ``NODE`` (a NUMA node's host
    bridges), ``SYS`` (across NUMA nodes), ``BRD`` (one board); ``X`` from a GPU to itself;
    ``None`` where NVML does not say."""
    nvlinks: int | None
    """NVLink links between them, direct or through NVSwitches (0: none); ``None`` where NVML
    does not say."""

    @property
    def label(self) -> str:
        """The matrix cell: ``NV18`` over NVLink, else the ancestor (``n/a`` unknown)."""
        if self.nvlinks:
            return f"NV{self.nvlinks}"
        return self.ancestor or "n/a"


@dataclass(frozen=True, slots=True)
class GpuTopology:
    """How every NVIDIA GPU reaches every other: read once (it does not change)."""

    gpus: tuple[int, ...]
    """The GPUs' NVML indices, in order (those that answered)."""
    paths: tuple[tuple[GpuPath, ...], ...]
    """``paths[i][j]``: from ``gpus[i]`` to ``gpus[j]``."""
    error: str | None = None
    """Why there is no topology (NVML unavailable, no NVIDIA GPU), as a sentence."""


@dataclass(frozen=True, slots=True)
class NvmlStatus:
    """Whether NVML answers, and if not, one sentence on why and how to fix it."""

    available: bool
    """True when NVML initialised."""
    driver_version: str | None = None
    """NVIDIA driver version, e.g. ``550.54.15``."""
    cuda_driver_version: str | None = None
    """Highest CUDA version the driver supports, e.g. ``12.4``."""
    error: str | None = None
    """A sentence saying what is wrong and the fix; ``None`` when available."""
    error_code: int | None = None
    """The NVML return code that stopped it (``18``: LIB_RM_VERSION_MISMATCH); ``None``
    when available, or when no NVML call failed (the bindings are missing, a timeout)."""
    host_pids: bool = False
    """True when gputui runs in a pid namespace of its own (a container without
    ``--pid=host``): NVML's pids are the host's, and are not joined with local processes."""
    hung_call: str | None = None
    """The NVML function that has not returned (by a snapshot's deadline, or for as long as
    readings go stale): ``nvmlInit`` or ``nvmlDeviceGetCount`` when that is why NVML is
    unavailable, a device query when GPUs are ``hung``; ``None`` while every call returns."""
    hung_seconds: float | None = None
    """How long ``hung_call`` has waited; ``None`` with it."""


@dataclass(frozen=True, slots=True)
class NvmlReading:
    """One sample of every NVIDIA GPU."""

    status: NvmlStatus
    """Whether NVML answers at all."""
    gpus: tuple[GpuReading, ...]
    """One reading per GPU, in NVML index order (empty when unavailable)."""
    taken_at: float = field(metadata=_TAKEN_AT)
    """``time.monotonic()`` when the sample finished."""


@dataclass(frozen=True, slots=True)
class MpsReading:
    """Apple's Metal Performance Shaders backend, as the IORegistry and PyTorch see it."""

    supported_platform: bool
    """True on macOS; MPS does not exist anywhere else."""
    message: str | None
    """A plain sentence for the panel when there is nothing to measure, else ``None``."""
    gpu_name: str | None = None
    """The accelerator's model, e.g. ``Apple M2 Pro``."""
    utilization_percent: float | None = None
    """IORegistry ``Device Utilization %``."""
    memory_in_use_bytes: int | None = None
    """IORegistry ``In use system memory``."""
    torch_mps_built: bool | None = None
    """``torch.backends.mps.is_built()``; ``None`` until known."""
    torch_mps_available: bool | None = None
    """``torch.backends.mps.is_available()``; ``None`` until known."""
    taken_at: float = field(default=0.0, metadata=_TAKEN_AT)
    """``time.monotonic()`` when the sample was taken."""


@dataclass(frozen=True, slots=True)
class DrmReading:
    """One sample of every AMD and Intel GPU, read in sysfs from the kernel's amdgpu, i915
    and xe drivers."""

    gpus: tuple[GpuReading, ...]
    """One reading per GPU: AMD's, then Intel's, each vendor's in index order."""
    taken_at: float = field(metadata=_TAKEN_AT)
    """``time.monotonic()`` when the sample finished."""


NO_DRM_GPUS = DrmReading(gpus=(), taken_at=0.0)
"""A box with no AMD or Intel GPU."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the monitor shows, at one moment."""

    cpu: CpuReading
    """The host."""
    nvml: NvmlReading
    """Every NVIDIA GPU."""
    mps: MpsReading
    """Apple MPS."""
    drm: DrmReading = NO_DRM_GPUS
    """Every AMD and Intel GPU."""

    @property
    def gpus(self) -> tuple[GpuReading, ...]:
        """Every GPU: NVIDIA's, then AMD's and Intel's."""
        return self.nvml.gpus + self.drm.gpus


def nvml_hung(reading: NvmlReading) -> bool:
    """Whether NVML, or any GPU, had not answered by a deadline (a wedged driver)."""
    return reading.status.hung_call is not None or any(
        gpu.state is GpuState.HUNG for gpu in reading.gpus
    )
