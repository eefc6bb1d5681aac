"""``gputui snapshot``: every reading once, as a plain-text table or as JSON.

The JSON schema is a contract for scripts: top-level ``cpu``, ``gpus`` (NVIDIA's, then AMD's
and Intel's, each with its ``vendor``), ``nvml`` and ``mps``; a reading that is not supported
is ``null``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import types
import typing
from collections.abc import Iterator
from enum import Enum
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

from gputui.format import (
    NA,
    NO_BREAK,
    ellipsize,
    fmt_bytes,
    fmt_columns,
    fmt_cores,
    fmt_counted,
    fmt_elapsed,
    fmt_ghz,
    fmt_numbers,
    fmt_pcie_link,
    fmt_percent,
    fmt_rate,
    fmt_unit,
    fmt_used_total,
    fmt_yes_no,
    for_screen,
    wrap_text,
)
from gputui.telemetry.polling import NVML_TIMEOUT_S, SOURCES, sample_nvml
from gputui.telemetry.readings import (
    NO_DRM_GPUS,
    VENDOR_NAMES,
    CpuReading,
    DrmReading,
    GpuProcess,
    GpuReading,
    GpuState,
    MigDeviceReading,
    MpsReading,
    NvlinkThroughput,
    NvmlReading,
    NvmlStatus,
    Snapshot,
    Vendor,
    Workload,
    gpu_label,
    health_problems,
    shown_pid,
    unmatched_host_pids,
)

if TYPE_CHECKING:
    from gputui.telemetry.apple import MpsSampler
    from gputui.telemetry.drm import DrmSampler
    from gputui.telemetry.host import HostSampler
    from gputui.telemetry.nvml import NvmlSampler

CPU_WINDOW_S = 0.2
"""The span host utilization is measured over: long enough to mean something."""

TORCH_WAIT_S = 15.0
"""How long a snapshot on macOS waits for PyTorch to say whether MPS is available."""

WIDTH = 80
"""The widest the table gets (a narrower terminal gets a narrower table)."""


def take_snapshot(
    *,
    host: HostSampler | None = None,
    nvml: NvmlSampler | None = None,
    mps: MpsSampler | None = None,
    drm: DrmSampler | None = None,
    cpu_window_s: float = CPU_WINDOW_S,
    torch_wait_s: float = TORCH_WAIT_S,
    timeout_s: float = NVML_TIMEOUT_S,
) -> Snapshot:
    """Sample the host, every NVIDIA, AMD and Intel GPU and Apple MPS once. Never raises for
    missing hardware, nor waits for a driver that does not answer.

    Args:
        host: The host sampler (default: a new one, primed now).
        nvml: The NVML sampler (default: a new one on the system's library, closed after).
        mps: The MPS sampler (default: a new one for this platform).
        drm: The AMD and Intel sampler (default: a new one under ``GPUTUI_SYSFS``, primed
            now: Intel's utilization and power are rates between two samples).
        cpu_window_s: Host utilization (and Intel's rates) cover at least this long; the
            NVML and MPS samples are taken inside that window.
        torch_wait_s: How long to wait for PyTorch's answer about MPS (macOS only).
        timeout_s: How long after the start the NVML sample may end; past it the GPUs it
            has read are kept and the others are ``hung`` (see :func:`sample_nvml`).
    """
    started = time.monotonic()
    if host is None:
        from gputui.telemetry.host import HostSampler

        host = HostSampler()
    if mps is None:
        from gputui.telemetry.apple import MpsSampler

        mps = MpsSampler()  # on macOS this starts asking PyTorch in the background
    if drm is None:
        from gputui.telemetry.drm import DrmSampler

        drm = DrmSampler()
    drm.sample()  # the window's start, for the counters' rates
    nvml_reading = sample_nvml(timeout_s - (time.monotonic() - started), sampler=nvml)
    mps.wait_for_torch(torch_wait_s)
    mps_reading = mps.sample()
    remaining = cpu_window_s - (time.monotonic() - started)
    if remaining > 0:
        time.sleep(remaining)
    return Snapshot(cpu=host.sample(), nvml=nvml_reading, mps=mps_reading, drm=drm.sample())


# --- JSON -------------------------------------------------------------------------------


def snapshot_as_dict(snapshot: Snapshot, *, decimals: int | None = None) -> dict[str, Any]:
    """The snapshot as plain JSON-ready data; see the module docstring for the schema.

    Args:
        snapshot: The readings.
        decimals: Round every number that is not whole to this many places, as it is
            converted (a recording's frames are); ``None``: keep every digit.
    """
    return {
        "cpu": _reading_as_dict(snapshot.cpu, decimals),
        "gpus": [_reading_as_dict(gpu, decimals) for gpu in snapshot.gpus],
        "nvml": _reading_as_dict(snapshot.nvml.status, decimals),
        "mps": _reading_as_dict(snapshot.mps, decimals),
    }


def gpu_as_dict(gpu: GpuReading) -> dict[str, Any]:
    """One GPU as ``gputui snapshot --json`` writes it (a fleet's hosts list theirs so too)."""
    return _reading_as_dict(gpu)


def render_snapshot_json(snapshot: Snapshot) -> str:
    """The snapshot as indented JSON text (no trailing newline)."""
    return json.dumps(snapshot_as_dict(snapshot), indent=2, allow_nan=False)


_JSON_KEYS: dict[type, tuple[str, ...]] = {
    CpuReading: (
        "model_name",
        "logical_cores",
        "physical_cores",
        "utilization_percent",
        "per_core_percent",
        "load_average",
        "frequency_mhz",
        "frequency_max_mhz",
        "memory_used_bytes",
        "memory_total_bytes",
        "swap_used_bytes",
        "swap_total_bytes",
        "self_cpu_percent",
        "self_rss_bytes",
    ),
    GpuReading: (
        "index",
        "vendor",
        "name",
        "uuid",
        "bus_id",
        "state",
        "error",
        "utilization_percent",
        "memory_utilization_percent",
        "memory_used_bytes",
        "memory_total_bytes",
        "temperature_c",
        "junction_temperature_c",
        "memory_temperature_c",
        "power_w",
        "power_limit_w",
        "energy_j",
        "energy_joules",
        "fan_percent",
        "sm_clock_mhz",
        "sm_clock_max_mhz",
        "memory_clock_mhz",
        "memory_clock_max_mhz",
        "pcie_rx_bytes_per_s",
        "pcie_tx_bytes_per_s",
        "pcie_link_gen",
        "pcie_link_gen_max",
        "pcie_link_width_lanes",
        "pcie_link_width_max_lanes",
        "encoder_utilization_percent",
        "decoder_utilization_percent",
        "nvlink_links_active",
        "nvlink_links_down",
        "nvlink_throughput",
        "performance_state",
        "throttle_reasons",
        "ecc_uncorrected_errors",
        "remapped_rows_pending",
        "mig_mode",
        "mig_devices",
        "processes",
    ),
    NvlinkThroughput: ("rx_bytes", "tx_bytes", "rx_bytes_per_s", "tx_bytes_per_s"),
    MigDeviceReading: (
        "index",
        "gpu_instance_id",
        "compute_instance_id",
        "memory_used_bytes",
        "memory_total_bytes",
        "processes",
    ),
    GpuProcess: (
        "pid",
        "local_pid",
        "user",
        "command",
        "gpu_memory_bytes",
        "sm_utilization_percent",
        "kind",
        "cpu_percent",
        "rss_bytes",
        "elapsed_s",
        "workload",
    ),
    Workload: (
        "container",
        "container_id",
        "runtime",
        "pod",
        "pod_uid",
        "namespace",
        "slurm_job",
        "slurm_step",
        "unit",
    ),
    NvmlStatus: (
        "available",
        "driver_version",
        "cuda_driver_version",
        "error",
        "host_pids",
        "hung_call",
        "hung_seconds",
    ),
    MpsReading: (
        "supported_platform",
        "message",
        "gpu_name",
        "utilization_percent",
        "memory_in_use_bytes",
        "torch_mps_built",
        "torch_mps_available",
    ),
}
"""The schema: each reading's keys in the order they are written; a key is its attribute's name."""
_FLATTENED = frozenset({"workload"})
"""Keys whose reading's keys are written in its place (a process's ``container``, ``pod``...)."""


_READ_KEYS = {kind: attrgetter(*keys) for kind, keys in _JSON_KEYS.items()}
"""Each reading type's values in :data:`_JSON_KEYS`'s order, read in one call."""
assert all(len(keys) > 1 for keys in _JSON_KEYS.values()), "attrgetter of one key: no tuple"
assert all(keys[-1] in _FLATTENED for keys in _JSON_KEYS.values() if _FLATTENED & {*keys}), (
    "a flattened key comes last, so that its keys are written in its place"
)


def _reading_as_dict(reading: object, decimals: int | None = None) -> dict[str, Any]:
    """One reading as JSON-ready data, with the keys ``_JSON_KEYS`` names for its type.

    The values are read in one call and zipped with their keys; only those not written as
    they are (floats, sequences, enums, nested readings) are converted after (a recorder
    converts a reading a second; most of its values are whole numbers, text or ``None``).
    """
    kind = type(reading)
    data = dict(zip(_JSON_KEYS[kind], _READ_KEYS[kind](reading), strict=True))
    for key, value in data.items():  # values replaced in place: the keys stay as they are
        kind = type(value)
        if kind is float:  # the commonest to convert: here, not through _json_value
            if not math.isfinite(value):
                data[key] = None
            elif decimals is not None and not value.is_integer():  # round() is slow
                data[key] = round(value, decimals)
        elif kind not in _AS_IS:
            data[key] = _json_value(value, decimals)
    for key in _FLATTENED:
        if key in data:
            data.update(data.pop(key))
    return data


def _json_value(value: Any, decimals: int | None = None) -> Any:
    """A reading's attribute as JSON-ready data: a sequence as a list, an enum as its value,
    a number that is not whole to ``decimals`` places where given."""
    kind = type(value)
    if kind in _AS_IS:  # most values: looked up by their exact type before any isinstance
        return value
    if isinstance(value, float):  # JSON has no NaN or infinity: such a reading is not known
        if not math.isfinite(value):
            return None
        return value if decimals is None or value.is_integer() else round(value, decimals)
    if isinstance(value, (tuple, list)):
        return [_json_value(item, decimals) for item in value]
    if kind in _JSON_KEYS:
        return _reading_as_dict(value, decimals)
    if isinstance(value, Enum):
        return value.value
    return value


AGES = "ages"
"""A recorded frame's member: how old each source's reading was when the frame was written
(seconds, by source), for those a beat or more old (a hung NVML); any other is as old as the
frame."""


def source_ages(snapshot: Snapshot, at: float, *, older_than: float) -> dict[str, float]:
    """How long before ``at`` each source's reading was taken, for those at least
    ``older_than`` old (:data:`AGES`); a reading not sampled again (MPS off Apple, no AMD or
    Intel GPU's placeholder) has none."""
    ages: dict[str, float] = {}
    for source in SOURCES:
        reading = getattr(snapshot, source)
        if reading is NO_DRM_GPUS or getattr(reading, "supported_platform", True) is False:
            continue
        age = at - reading.taken_at
        if age >= older_than:
            ages[source] = round(age, 3)
    return ages


_AS_IS = frozenset({int, str, bool, type(None)})
"""The exact types a reading's attribute is written as it is."""


NUMBER_MAX = 1e30
"""The largest magnitude a number read back from JSON may have: far above every reading (an
NVLink counter in bytes reaches ``2**74``), far below where ``float()`` overflows (``10**400``
parses as JSON). A float, so that a float reading compares with it at a float's speed."""


def json_number(value: Any) -> float | None:
    """``value`` as a float where it is a JSON number a reading can hold (finite, at most
    :data:`NUMBER_MAX` either way, not a bool); ``None`` for anything else."""
    kind = type(value)
    if kind is float:
        return value if -NUMBER_MAX <= value <= NUMBER_MAX else None  # (NaN fails both)
    if kind is int and -NUMBER_MAX <= value <= NUMBER_MAX:
        return float(value)
    return None


def snapshot_from_dict(data: Any, *, taken_at: float = 0.0) -> Snapshot:
    """The snapshot that :func:`snapshot_as_dict` wrote (a recorded frame), read back.

    Every value is checked against its reading's field type. A key an older gputui did not
    write takes its field's default; what JSON leaves out (``taken_at``, a process's
    ``create_time``, a GPU's ``error_brief``) takes its default too, ``taken_at`` given here,
    less a source's age where the frame says it (:data:`AGES`). NVIDIA's GPUs go to the NVML
    reading, AMD's and Intel's to the sysfs one, as the samplers give them.

    Raises:
        ValueError: a key is missing or a value is of the wrong kind; says which.
    """
    if not isinstance(data, dict):
        raise ValueError("the readings are not an object")
    missing = {"cpu", "gpus", "nvml", "mps"} - data.keys()
    if missing:
        raise ValueError(f"the readings have no {sorted(missing)[0]!r}")
    at = _taken_at(data.get(AGES, {}), taken_at)
    status = _reading_from(NvmlStatus, data["nvml"], "nvml")
    gpus: tuple[GpuReading, ...] = _typed(tuple[GpuReading, ...], data["gpus"], "gpus")
    nvidia = tuple(gpu for gpu in gpus if gpu.vendor is Vendor.NVIDIA)
    others = tuple(gpu for gpu in gpus if gpu.vendor is not Vendor.NVIDIA)
    return Snapshot(
        cpu=_reading_from(CpuReading, data["cpu"], "cpu", taken_at=at["cpu"]),
        nvml=NvmlReading(status=status, gpus=nvidia, taken_at=at["nvml"]),
        mps=_reading_from(MpsReading, data["mps"], "mps", taken_at=at["mps"]),
        drm=DrmReading(gpus=others, taken_at=at["drm"]),
    )


def gpus_from_list(data: Any, where: str = "gpus") -> tuple[GpuReading, ...]:
    """GPUs as :func:`gpu_as_dict` wrote them, read back and checked as
    :func:`snapshot_from_dict` checks them.

    Raises:
        ValueError: a value is of the wrong kind; says which, under ``where``.
    """
    gpus: tuple[GpuReading, ...] = _typed(tuple[GpuReading, ...], data, where)
    return gpus


def _taken_at(ages: Any, taken_at: float) -> dict[str, float]:
    """When each source's reading was taken, by :data:`AGES` (``ages``) before ``taken_at``."""
    if not isinstance(ages, dict):
        raise ValueError(f"{AGES} is not an object")
    at = dict.fromkeys(SOURCES, taken_at)
    for source in SOURCES:
        if source in ages:
            age = json_number(ages[source])
            if age is None or age < 0:
                raise ValueError(f"{AGES}.{source} is not an age in seconds")
            at[source] = taken_at - age
    return at


_Reading = TypeVar("_Reading")


def _reading_from(kind: type[_Reading], data: Any, where: str, **extra: object) -> _Reading:
    """A reading of ``kind`` from its JSON object, each key checked by its field's type."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} is not an object")
    hints, required = _fields_of(kind)
    values: dict[str, object] = {}
    for key in _JSON_KEYS[kind]:
        if key in data:
            values[key] = _typed(hints[key], data[key], f"{where}.{key}")
        elif key in required:
            raise ValueError(f"{where} has no {key!r}")
    return kind(**values, **extra)


_FIELDS_OF: dict[type, tuple[dict[str, Any], frozenset[str]]] = {}


def _fields_of(kind: type) -> tuple[dict[str, Any], frozenset[str]]:
    """A reading's field types, and the fields without a default (worked out once a type)."""
    if kind not in _FIELDS_OF:
        required = frozenset(
            field.name
            for field in dataclasses.fields(kind)
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        _FIELDS_OF[kind] = (typing.get_type_hints(kind), required)
    return _FIELDS_OF[kind]


def _typed(hint: Any, value: Any, where: str) -> Any:
    """``value`` (JSON) as a field of type ``hint`` holds it; ``ValueError`` when it cannot."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        arms = typing.get_args(hint)
        if value is None and type(None) in arms:
            return None
        others = [arm for arm in arms if arm is not type(None)]
        if len(others) == 1:  # the usual ``X | None``: X's own error says more
            return _typed(others[0], value, where)
        for arm in others:
            try:
                return _typed(arm, value, where)
            except ValueError:
                continue
    elif origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, list):
            raise ValueError(f"{where} is not a list")
        if args[-1] is not Ellipsis and len(value) != len(args):
            raise ValueError(f"{where} is not a list of {len(args)}")
        kinds = [args[0]] * len(value) if args[-1] is Ellipsis else list(args)
        return tuple(
            _typed(kind, item, f"{where}[{at}]")
            for at, (kind, item) in enumerate(zip(kinds, value, strict=True))
        )
    elif hint is type(None):
        if value is None:
            return None
    elif hint is float:
        number = json_number(value)
        if number is not None:
            return number
    elif hint is int:
        if type(value) is int and json_number(value) is not None:
            return value
    elif hint in (str, bool):
        if type(value) is hint:
            return value
    elif isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(value)
        except ValueError:
            pass
    elif hint in _JSON_KEYS:
        return _reading_from(hint, value, where)
    shown = "a number out of range" if type(value) in (int, float) else repr(value)
    raise ValueError(f"{where} is {ellipsize(shown, 40)}")


# --- Table ------------------------------------------------------------------------------

_INDENT = "  "


def render_snapshot_table(snapshot: Snapshot, width: int = WIDTH) -> str:
    """The snapshot as plain text in lines of at most ``width`` (``WIDTH`` or the terminal's,
    if narrower); ``n/a`` for what is not known. What does not fit wraps, never cut. Text
    from outside (names, command lines, errors) is printable (:func:`for_screen`)."""
    snapshot = for_screen(snapshot)
    sections = [
        _cpu_section(snapshot.cpu, width),
        _nvml_section(snapshot.nvml, width),
        *(_drm_section(snapshot.drm, vendor, width) for vendor in (Vendor.AMD, Vendor.INTEL)),
        _mps_section(snapshot.mps, width),
    ]
    lines = [line for section in sections if section for line in [*section, ""]][:-1]
    return "\n".join(_fitted(lines, width))


def _fitted(lines: list[str], width: int) -> Iterator[str]:
    """Each line, wrapped under its own indent where it is wider than ``width``: in a
    terminal narrower than the layouts above plan for, still nothing runs past its edge."""
    for line in lines:
        if len(line) <= width:
            yield line
        else:
            indent = " " * (len(line) - len(line.lstrip()))
            yield from wrap_text(line.lstrip(), width, indent, indent + "  ")


def _cpu_section(cpu: CpuReading, width: int) -> list[str]:
    lines = _wrapped("CPU     ", cpu.model_name or NA, width)
    load = NA if cpu.load_average is None else "  ".join(f"{v:.2f}" for v in cpu.load_average)
    rows = [
        ["utilization", fmt_percent(cpu.utilization_percent)],
        ["CPUs", fmt_cores(cpu.logical_cores, cpu.physical_cores)],
        ["load average", load],
        ["clock", fmt_ghz(cpu.frequency_mhz, cpu.frequency_max_mhz)],
        ["memory", fmt_used_total(cpu.memory_used_bytes, cpu.memory_total_bytes)],
        ["swap", _swap(cpu)],
        [
            "gputui",
            f"{fmt_percent(cpu.self_cpu_percent)} CPU, {fmt_bytes(cpu.self_rss_bytes)} RSS",
        ],
    ]
    label_width = max(len(label) for label, _ in rows)
    rows = [[label.ljust(label_width), value] for label, value in rows]
    lines += _indented(_INDENT, fmt_columns(rows[:1], width=width - len(_INDENT)))
    if cpu.per_core_percent:  # under the total, wrapped to the width, aligned with the values
        label = "per core".ljust(label_width + 2)
        if width - len(_INDENT) - len(label) < 4:  # no room beside the label: below it
            lines.append(_INDENT + label.rstrip())
            label = "  "
        cells = [fmt_percent(value).rjust(4) for value in cpu.per_core_percent]
        per_line = max(1, (width - len(_INDENT) - len(label) + 1) // 5)
        for start in range(0, len(cells), per_line):
            lead = label if start == 0 else " " * len(label)
            lines.append(_INDENT + lead + " ".join(cells[start : start + per_line]))
    lines += _indented(_INDENT, fmt_columns(rows[1:], width=width - len(_INDENT)))
    return lines


def _swap(cpu: CpuReading) -> str:
    if cpu.swap_total_bytes == 0:
        return "none"
    return fmt_used_total(cpu.swap_used_bytes, cpu.swap_total_bytes)


def _nvml_section(nvml: NvmlReading, width: int) -> list[str]:
    status = nvml.status
    if not status.available:
        return _wrapped("NVIDIA  ", status.error or "NVML is not available.", width)
    summary = [
        f"driver {status.driver_version or NA}",
        f"CUDA {status.cuda_driver_version or NA}",
        *_counts(nvml.gpus),
    ]
    lines = _summary_line("NVIDIA  ", summary, width)
    return lines + _gpus_lines(nvml.gpus, width, host_pids=status.host_pids)


def _drm_section(drm: DrmReading, vendor: Vendor, width: int) -> list[str]:
    """One vendor's GPUs read from sysfs; nothing where there are none."""
    gpus = tuple(gpu for gpu in drm.gpus if gpu.vendor is vendor)
    if not gpus:
        return []
    lead = VENDOR_NAMES[vendor].ljust(8)
    return _summary_line(lead, _counts(gpus), width) + _gpus_lines(gpus, width)


def _counts(gpus: tuple[GpuReading, ...]) -> list[str]:
    """``8 GPUs``, then how many are in each state but ``ok`` (``1 lost``)."""
    return [
        fmt_counted(len(gpus), "GPU"),
        *(
            f"{found} {state.value}"
            for state in GpuState
            if state is not GpuState.OK and (found := sum(gpu.state is state for gpu in gpus))
        ),
    ]


def _summary_line(lead: str, parts: list[str], width: int) -> list[str]:
    bound = ", ".join(part.replace(" ", NO_BREAK) for part in parts)  # wrapped between parts
    return [line.replace(NO_BREAK, " ") for line in _wrapped(lead, bound, width)]


def _gpus_lines(gpus: tuple[GpuReading, ...], width: int, *, host_pids: bool = False) -> list[str]:
    """Each GPU's lines, then the processes on them."""
    lines = []
    for gpu in gpus:
        lines.append("")
        lines += _gpu_lines(gpu, width)
    processes = [(gpu_label(gpu), process) for gpu in gpus for process in gpu.processes or ()]
    unknown = [gpu_label(gpu) for gpu in gpus if gpu.processes is None]
    lines.append("")
    hosts = unmatched_host_pids(process for _, process in processes)
    if hosts and host_pids:
        note = f"{fmt_counted(hosts, 'host pid')}: gputui runs in its own pid namespace"
        lines += _wrapped(_INDENT + "processes    ", note, width)
    if processes:
        lines += _process_lines(processes, width)
    elif gpus and not unknown:
        lines.append(_INDENT + "processes    none")
    if unknown:
        why = "NVML cannot list them" if gpus[0].vendor is Vendor.NVIDIA else "not read yet"
        why = f"n/a on GPU {', '.join(unknown)} ({why})"
        lines += _wrapped(_INDENT + "processes    ", why, width)
    return lines


CLOCK_WORDS = {Vendor.NVIDIA: "SM clock", Vendor.AMD: "GFX clock", Vendor.INTEL: "GT clock"}
"""What each vendor calls the clock of its compute engines."""


def _gpu_lines(gpu: GpuReading, width: int) -> list[str]:
    header = f"GPU {gpu_label(gpu)}  {gpu.name}"
    if gpu.state is not GpuState.OK:
        return [
            *_wrapped(_INDENT, f"{header}  {gpu.state.value}", width),
            *_wrapped(
                _INDENT * 2, gpu.error or "This GPU stopped answering; readings are n/a.", width
            ),
        ]
    lines = _wrapped(_INDENT, header, width)
    rows = [
        ["uuid", gpu.uuid or NA],
        ["bus id", gpu.bus_id or NA],
    ]
    room = width - len(_INDENT * 2)
    lines += _indented(_INDENT * 2, fmt_columns(rows, width=room))
    clock = fmt_unit(gpu.sm_clock_mhz, "")
    clock += f" / {fmt_unit(gpu.sm_clock_max_mhz, ' MHz')}"
    memory_clock = fmt_unit(gpu.memory_clock_mhz, "")
    memory_clock += f" / {fmt_unit(gpu.memory_clock_max_mhz, ' MHz')}"
    link = fmt_pcie_link(
        gpu.pcie_link_gen,
        gpu.pcie_link_gen_max,
        gpu.pcie_link_width_lanes,
        gpu.pcie_link_width_max_lanes,
    )
    power = f"{fmt_unit(gpu.power_w, ' W')} / {fmt_unit(gpu.power_limit_w, ' W')}"
    pstate = NA if gpu.performance_state is None else f"P{gpu.performance_state}"
    pairs = [
        ["utilization", fmt_percent(gpu.utilization_percent)],
        ["mem bw", fmt_percent(gpu.memory_utilization_percent)],
        ["memory", fmt_used_total(gpu.memory_used_bytes, gpu.memory_total_bytes)],
        ["temperature", fmt_unit(gpu.temperature_c, "°C")],
        ["power", power],
        ["fan", fmt_percent(gpu.fan_percent)],
        [CLOCK_WORDS.get(gpu.vendor, "clock"), clock],
        ["P-state", pstate],
        ["PCIe rx", fmt_rate(gpu.pcie_rx_bytes_per_s)],
        ["PCIe tx", fmt_rate(gpu.pcie_tx_bytes_per_s)],
        ["mem clock", memory_clock],
        ["PCIe link", link],
    ]
    if gpu.junction_temperature_c is not None or gpu.memory_temperature_c is not None:
        pairs += [  # what amdgpu's hwmon gives (NVML's are not read)
            ["junction", fmt_unit(gpu.junction_temperature_c, "°C")],
            ["mem temp", fmt_unit(gpu.memory_temperature_c, "°C")],
        ]
    if gpu.encoder_utilization_percent or gpu.decoder_utilization_percent:
        pairs += [  # the video engines, only while one is busy (as the card shows them)
            ["encoder", fmt_percent(gpu.encoder_utilization_percent)],
            ["decoder", fmt_percent(gpu.decoder_utilization_percent)],
        ]
    if gpu.nvlink_links_active is not None:
        throughput = gpu.nvlink_throughput
        down = gpu.nvlink_links_down or ()
        pairs += [  # the links down in the free pair beside: the columns keep their widths
            ["NVLink", f"{gpu.nvlink_links_active} up" + (f", {len(down)} down" if down else "")],
            ["links down", fmt_numbers(down)] if down else ["", ""],
            ["NVLink rx", fmt_rate(throughput.rx_bytes_per_s if throughput else None)],
            ["NVLink tx", fmt_rate(throughput.tx_bytes_per_s if throughput else None)],
        ]
    readings = fmt_columns([pairs[i] + pairs[i + 1] for i in range(0, len(pairs), 2)])
    if max(len(line) for line in readings) > room:  # narrow: one reading a line
        readings = fmt_columns(pairs, width=room)
    lines += _indented(_INDENT * 2, readings)
    lines += _wrapped(_INDENT * 2 + "health  ", _health(gpu), width)
    return lines


def _health(gpu: GpuReading) -> str:
    """``ok``, or what is wrong (throttled and why, ECC errors, a pending row remap)."""
    if problems := health_problems(gpu):
        return "; ".join(problems)
    known = (gpu.throttle_reasons, gpu.ecc_uncorrected_errors, gpu.remapped_rows_pending)
    return NA if all(value is None for value in known) else "ok"


COMMAND_ROOM_MIN = 16
"""Fewest cells the process table's command column gets beside the others; with less,
each command goes on a line of its own under its row."""


def _process_lines(processes: list[tuple[str, GpuProcess]], width: int) -> list[str]:
    """The processes' table; no CPU % (one sample has no previous one to measure from), and
    the kind in JSON alone (the command needs the room more)."""
    heading = ["GPU", "PID", "USER", "GPU MEMORY", "HOST MEMORY", "ELAPSED"]
    right = {0, 1, 3, 4, 5}
    rows = [
        [
            label,
            str(shown_pid(process)),
            ellipsize(process.user or NA, 12),
            fmt_bytes(process.gpu_memory_bytes),
            fmt_bytes(process.rss_bytes),
            fmt_elapsed(process.elapsed_s),
        ]
        for label, process in processes
    ]
    commands = [process.command or NA for _, process in processes]
    table = fmt_columns([heading, *rows], right=right)
    lines = [_INDENT + "processes"]
    room = width - len(_INDENT * 2) - max(len(line) for line in table) - 2
    if room >= COMMAND_ROOM_MIN:
        full = [
            [*heading, "COMMAND"],
            *([*row, cmd] for row, cmd in zip(rows, commands, strict=True)),
        ]
        return lines + [
            ellipsize(_INDENT * 2 + line, width) for line in fmt_columns(full, right=right)
        ]
    lines += _indented(_INDENT * 2, table[:1])
    for line, command in zip(table[1:], commands, strict=True):
        lines += _indented(_INDENT * 2, [line])
        lines.append(ellipsize(_INDENT * 3 + command, width))
    return lines


def _mps_section(mps: MpsReading, width: int) -> list[str]:
    if not mps.supported_platform:
        return _wrapped("MPS     ", mps.message or "MPS is not supported here.", width)
    lines = _wrapped("MPS     ", mps.gpu_name or NA, width)
    if mps.torch_mps_built is None:
        torch = "not known yet"
    else:
        torch = (
            f"built {fmt_yes_no(mps.torch_mps_built)}, "
            f"available {fmt_yes_no(mps.torch_mps_available)}"
        )
    rows = [
        ["utilization", fmt_percent(mps.utilization_percent)],
        ["memory in use", fmt_bytes(mps.memory_in_use_bytes)],
        ["PyTorch MPS", torch],
    ]
    lines += _indented(_INDENT, fmt_columns(rows, width=width - len(_INDENT)))
    if mps.message:
        lines += _wrapped(_INDENT, mps.message, width)
    return lines


def _wrapped(first: str, text: str, width: int) -> list[str]:
    return wrap_text(text, width, first, " " * len(first))


def _indented(indent: str, lines: list[str]) -> list[str]:
    return [indent + line for line in lines]
