"""``gputui snapshot``: every reading of this machine once, as a plain-text table or as
JSON (:mod:`gputui.telemetry.snapshot`); with hosts, a fleet's (:mod:`gputui.commands.fleet`);
with ``--from``, a recorded frame (:mod:`gputui.commands.replay`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import socket
import time
from collections.abc import Iterator

from gputui.commands.args import END, usage_error
from gputui.commands.fleet import fleet_named, run_fleet_snapshot
from gputui.commands.output import TEXT_WIDTH_MAX, failed, text_width, write_out
from gputui.commands.replay import opened, said
from gputui.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from gputui.format import (
    NA,
    NO_BREAK,
    ellipsize,
    fmt_bytes,
    fmt_columns,
    fmt_cores,
    fmt_counted,
    fmt_elapsed,
    fmt_fan,
    fmt_ghz,
    fmt_numbers,
    fmt_pcie_link,
    fmt_percent,
    fmt_process_table,
    fmt_rate,
    fmt_unit,
    fmt_used_total,
    fmt_yes_no,
    for_screen,
    one_line,
    wrap_text,
)
from gputui.telemetry.apple import MpsSampler
from gputui.telemetry.drm import DrmSampler
from gputui.telemetry.host import HostSampler
from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.polling import NVML_TIMEOUT_S, sample_nvml
from gputui.telemetry.readings import (
    VENDOR_NAMES,
    CpuReading,
    DrmReading,
    GpuProcess,
    GpuReading,
    GpuState,
    MpsReading,
    NvmlReading,
    Snapshot,
    Vendor,
    gpu_label,
    health_problems,
    nvml_hung,
    shown_pid,
    unmatched_host_pids,
)
from gputui.telemetry.snapshot import render_snapshot_json

CPU_WINDOW_S = 0.2
"""The span host utilization is measured over: long enough to mean something."""

TORCH_WAIT_S = 15.0
"""How long a snapshot on macOS waits for PyTorch to say whether MPS is available."""


def run_snapshot(args: argparse.Namespace) -> int:
    """``gputui snapshot``: exit 1 where NVML, or a GPU, did not answer by ``--timeout``."""
    if args.from_file is not None:
        if fleet_named(args) or args.timeout is not None:
            return usage_error(
                "gputui snapshot", "--from reads a recording: leave out the hosts and --timeout"
            )
        return _from_recording(args)
    if args.at is not None:
        return usage_error("gputui snapshot", "--at picks a frame of a recording: add --from FILE")
    if fleet_named(args):
        return run_fleet_snapshot(args)
    snapshot = take_snapshot(timeout_s=NVML_TIMEOUT_S if args.timeout is None else args.timeout)
    if args.json:
        write_out(render_snapshot_json(snapshot))
    elif args.compact:
        write_out(render_compact(snapshot, socket.gethostname(), text_width()))
    else:
        write_out(render_snapshot_table(snapshot, text_width()))
    return EXIT_FAILED if nvml_hung(snapshot.nvml) else EXIT_OK


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
    """Sample the host, every NVIDIA, AMD and Intel GPU and Apple MPS once (each sampler new
    where not given). Never raises for missing hardware, nor waits for a driver that does not
    answer.

    Host utilization (and Intel's rates: the DRM sampler is primed now) cover at least
    ``cpu_window_s``; the NVML and MPS samples are taken inside that window. On macOS,
    PyTorch's answer about MPS is waited for ``torch_wait_s``. The NVML sample may end up to
    ``timeout_s`` after the start; past it the GPUs it has read are kept and the others are
    ``hung`` (see :func:`sample_nvml`).
    """
    started = time.monotonic()
    host = HostSampler() if host is None else host
    mps = MpsSampler() if mps is None else mps  # on macOS: asks PyTorch in the background
    drm = DrmSampler() if drm is None else drm
    drm.sample()  # the window's start, for the counters' rates
    nvml_reading = sample_nvml(timeout_s - (time.monotonic() - started), sampler=nvml)
    mps.wait_for_torch(torch_wait_s)
    mps_reading = mps.sample()
    remaining = cpu_window_s - (time.monotonic() - started)
    if remaining > 0:
        time.sleep(remaining)
    return Snapshot(cpu=host.sample(), nvml=nvml_reading, mps=mps_reading, drm=drm.sample())


def _from_recording(args: argparse.Namespace) -> int:
    """``gputui snapshot --from FILE [--at TIME] [--json]``: one recorded frame."""
    # off `gputui --help`'s path, as in run_replay_command: fleet.report loads prometheus_client
    from gputui.fleet.report import hosts_from_dict, render_fleet_table
    from gputui.recording.frames import FLEET
    from gputui.recording.render import recorded_at
    from gputui.telemetry.snapshot import snapshot_from_dict

    prog = "gputui snapshot"
    recording = opened(prog, args.from_file)
    if recording is None:
        return EXIT_USAGE
    header = recording.header
    at = args.at or END
    t = at.since_start(header.started_unix)
    frame = recording.at(t)
    slack = header.interval_s
    if frame is None:
        if recording.problem is not None:
            return said(prog, recording.problem, "no frame comes before it")
        first = next(recording.frames(), None)
        if first is None:
            return failed(prog, f"{args.from_file} holds no frame yet")
        if first.t - t > slack:
            return usage_error(
                prog, f"{at} is before the recording's first frame, {recorded_at(header, first.t)}"
            )
        frame = first
    if math.isfinite(t) and t - frame.t > 2 * slack and recording.problem is None:
        last = recording.at(math.inf)
        if last is not None and last.t == frame.t:
            return usage_error(
                prog, f"{at} is after the recording's last frame, {recorded_at(header, last.t)}"
            )
    try:
        if recording.kind == FLEET:
            hosts = hosts_from_dict(frame.readings, frame.t)
        else:
            snapshot = snapshot_from_dict(frame.readings, taken_at=frame.t)
    except ValueError as error:
        return failed(prog, str(recording.not_a_frame(frame, error)))
    when = recorded_at(header, frame.t)
    if args.json:
        at_iso = dt.datetime.fromtimestamp(header.started_unix + frame.t, dt.UTC).isoformat()
        recorded = {"host": header.host, "at": at_iso, "t": frame.t}
        write_out(json.dumps({**frame.readings, "recorded": recorded}, indent=2, allow_nan=False))
    elif recording.kind == FLEET:
        title = one_line(f"A fleet recorded on {header.host}, {when}")
        unanswered = frame.readings.get("error")
        if isinstance(unanswered, str):
            title += "\n" + one_line(f"The fleet's source did not answer: {unanswered}")
        write_out(title + "\n\n" + render_fleet_table(hosts, frame.t, width=text_width()))
    elif args.compact:
        write_out(render_compact(snapshot, f"{header.host}, {when}", text_width()))
    else:
        title = one_line(f"Recorded on {header.host}, {when}")
        write_out(title + "\n\n" + render_snapshot_table(snapshot, text_width()))
    return said(prog, recording.problem, f"the frame shown is the last before it, {when}")


# --- Table ------------------------------------------------------------------------------

_INDENT = "  "


def render_snapshot_table(snapshot: Snapshot, width: int = TEXT_WIDTH_MAX) -> str:
    """The snapshot as plain text in lines of at most ``width`` (80 or the terminal's,
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


def render_compact(snapshot: Snapshot, host: str, width: int = TEXT_WIDTH_MAX) -> str:
    """A line for ``host`` (its CPU, memory and GPUs), then one a GPU as ``snapshot --hosts``
    prints them; each cut to ``width``, text from outside made printable."""
    # the fleet's report loads only here (it imports prometheus_client's parser)
    from gputui.fleet.report import gpu_lines

    snapshot = for_screen(snapshot)
    cpu, gpus = snapshot.cpu, snapshot.gpus
    memory = fmt_used_total(cpu.memory_used_bytes, cpu.memory_total_bytes)
    lines = [
        f"{one_line(host)}  CPU {fmt_percent(cpu.utilization_percent)} · memory {memory} · "
        f"{fmt_counted(len(gpus), 'GPU')}",
        *gpu_lines(gpus),
    ]
    if not gpus and snapshot.nvml.status.error:  # why NVIDIA's are missing
        lines.append(f"  {snapshot.nvml.status.error}")
    return "\n".join(ellipsize(line, width) for line in lines)


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
    clock = f"{fmt_unit(gpu.sm_clock_mhz, '')} / {fmt_unit(gpu.sm_clock_max_mhz, ' MHz')}"
    memory_clock = (
        f"{fmt_unit(gpu.memory_clock_mhz, '')} / {fmt_unit(gpu.memory_clock_max_mhz, ' MHz')}"
    )
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
        ["fan", fmt_fan(gpu.fan_percent, gpu.fan_rpm)],
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


def _process_lines(processes: list[tuple[str, GpuProcess]], width: int) -> list[str]:
    """The processes' table; no CPU % (one sample has no previous one to measure from), and
    the kind in JSON alone (the command needs the room more)."""
    heading = ["GPU", "PID", "USER", "GPU MEMORY", "HOST MEMORY", "ELAPSED"]
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
    table = fmt_process_table(
        heading, rows, commands, right={0, 1, 3, 4, 5}, lead=_INDENT * 2, width=width
    )
    return [_INDENT + "processes", *table]


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
