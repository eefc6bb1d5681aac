"""A recording's summary as text and as JSON (``gputui replay --summary [--json]``), a
host's or a fleet's, and the line that says when a frame was recorded (``gputui snapshot
--from``)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict
from typing import Any

from gputui.format import (
    NA,
    ellipsize,
    fmt_bytes,
    fmt_columns,
    fmt_counted,
    fmt_energy,
    fmt_percent,
    fmt_process_table,
    for_screen,
    without_noise,
    wrap_text,
)
from gputui.recording.frames import Header
from gputui.recording.runs import RunSummary
from gputui.recording.summary import (
    FleetSummary,
    GpuSummary,
    HostSummary,
    ProcessUse,
    Recorded,
    Spread,
    Summary,
)

_INDENT = "  "


def recorded_at(header: Header, t: float) -> str:
    """When a frame was taken, as a reader wants it: the wall time in UTC and the time since
    the recording started: ``2026-11-26 03:00:12 UTC (+0:00:12)``."""
    return f"{fmt_utc(header.started_unix + t)} (+{fmt_offset(t)})"


def fmt_offset(seconds: float) -> str:
    """Time since the recording started, in whole seconds: ``0:00:12``, ``26:03:07`` (the
    hours run on past a day)."""
    whole = int(max(seconds, 0.0))
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def fmt_duration(seconds: float) -> str:
    """A length of time: ``4.2 s`` (tenths under 10 s), ``45 s``, ``12:05`` (minutes and
    seconds), ``3:07:05`` (hours)."""
    if seconds < 9.95:
        return f"{max(seconds, 0.0):.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def fmt_utc(unix: float) -> str:
    """A moment in UTC, to the second: ``2026-11-26 03:00:12 UTC``."""
    return dt.datetime.fromtimestamp(unix, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# --- Text --------------------------------------------------------------------------------


def render_summary_text(summary: Summary, width: int = 80) -> str:
    """The summary as lines of at most ``width``; text from the recording (names, commands,
    users) made printable first."""
    summary = for_screen(summary)
    lines = wrap_text(_headline(summary, summary.host), width, "", _INDENT)
    if summary.runs:
        lines += ["", "Runs in the runner pane:"]
        for run in summary.runs:
            lines += wrap_text(_run_line(run), width, _INDENT, _INDENT * 3)
    if not summary.gpus:
        lines += ["", "No GPU in this recording."]
    for gpu in summary.gpus:
        lines += ["", *_gpu_lines(gpu, width)]
    return "\n".join(lines)


def _run_line(run: RunSummary) -> str:
    throughput = (
        "no epoch" if run.images_per_second is None else f"{run.images_per_second:,.0f} img/s"
    )
    speedup = "" if run.speedup is None else f", {run.speedup:.2f}x the first run's speed"
    return (
        f"{run.job}. {run.kind}: {run.name} {run.precision}, "
        f"{fmt_counted(run.epochs, 'epoch')}, {throughput}{speedup}, {run.status}"
    )


def _headline(summary: Recorded, lead: str) -> str:
    """``LEAD: 2026-11-26 01:00:00 to 09:00:00 UTC (8:00:00), every 1 s, 28,800 frames``."""
    if summary.first_t is None or summary.last_t is None:
        return f"{lead}: no frames (started {fmt_utc(summary.started_unix)})"
    first = fmt_utc(summary.started_unix + summary.first_t)
    last = fmt_utc(summary.started_unix + summary.last_t)
    if first[:10] == last[:10]:  # the same day: its date once
        last = last[11:]
    span = fmt_duration(summary.last_t - summary.first_t)
    every = f"every {summary.interval_s:g} s, {fmt_counted(summary.frames, 'frame')}"
    return f"{lead}: {first.removesuffix(' UTC')} to {last} ({span}), {every}"


def render_fleet_summary_text(summary: FleetSummary, width: int = 80) -> str:
    """A fleet's summary as lines of at most ``width``: each host, then each of its GPUs as
    a host recording's summary shows them; text from the hosts made printable first."""
    summary = for_screen(summary)
    lines = wrap_text(_fleet_headline(summary), width, "", _INDENT)
    if not summary.hosts:
        lines += ["", "No host in this recording."]
    for host in summary.hosts:
        lines += ["", *wrap_text(_host_headline(host), width, "", _INDENT)]
        if host.state_changes:
            lines += wrap_text(_INDENT + _host_states(host), width, "", _INDENT * 2)
        if not host.gpus:
            lines.append(_INDENT + "no GPU read")
        for gpu in host.gpus:
            lines += [_INDENT + line for line in _gpu_lines(gpu, width - len(_INDENT))]
    return "\n".join(lines)


def _fleet_headline(summary: FleetSummary) -> str:
    hosts = fmt_counted(len(summary.hosts), "host")
    read = {"prometheus": ", read from Prometheus", "exporters": ", read from their exporters"}
    lead = (
        f"A fleet of {hosts}{read.get(summary.source or '', '')}, recorded on {summary.recorded_by}"
    )
    return _headline(summary, lead)


def _host_headline(host: HostSummary) -> str:
    span = f"+{fmt_offset(host.first_t)} to +{fmt_offset(host.last_t)}"
    unreachable = (
        "always answered"
        if not host.unreachable_s and not host.state_changes
        else f"unreachable for {fmt_duration(host.unreachable_s)}"
    )
    gpus = fmt_counted(len(host.gpus), "GPU")
    return f"{host.host}  {host.source or NA} · {gpus} · {span} · {unreachable}"


def _host_states(host: HostSummary) -> str:
    return "; ".join(
        f"{state} at +{fmt_offset(t)}" + (f" ({error})" if error and state == "down" else "")
        for t, state, error in host.state_changes
    )


def _gpu_lines(gpu: GpuSummary, width: int) -> list[str]:
    span = f"+{fmt_offset(gpu.first_t)} to +{fmt_offset(gpu.last_t)}"
    title = f"GPU {gpu.index}  {gpu.name or NA}  {span}"
    rows = [
        ["utilization", _spread(gpu.utilization_percent, fmt_percent)],
        ["memory", _spread(gpu.memory_used_bytes, fmt_bytes) + _of(gpu.memory_total_bytes)],
        ["energy", _energy(gpu)],
        ["throttled", _throttled(gpu)],
    ]
    if gpu.state_changes:
        rows.append(["state", _states(gpu)])
    room = width - len(_INDENT)
    lines = wrap_text(title, width, "", _INDENT * 2)
    lines += [_INDENT + line for line in fmt_columns(rows, width=room)]
    if gpu.processes:
        lines += _process_lines(gpu.processes, width)
    else:
        lines.append(_INDENT + "processes    none seen")
    return lines


def _spread(values: Spread, fmt: Any) -> str:
    if values.mean is None:
        return NA
    return f"mean {fmt(values.mean)}, p95 {fmt(values.p95)}, max {fmt(values.max)}"


def _of(total: int | None) -> str:
    return "" if total is None else f", of {fmt_bytes(total)}"


def _energy(gpu: GpuSummary) -> str:
    if gpu.energy_j is None:
        return NA
    text = f"{fmt_energy(gpu.energy_j)} ({gpu.energy_j / 3.6e6:.3g} kWh)"
    return text if gpu.energy_from == "counter" else f"{text}, from power x time"


def _throttled(gpu: GpuSummary) -> str:
    if not gpu.throttled_s:
        return "never"
    reasons = ", ".join(f"{why} {fmt_duration(s)}" for why, s in gpu.throttle_reasons_s.items())
    return f"{fmt_duration(gpu.throttled_s)} ({reasons})"


def _states(gpu: GpuSummary) -> str:
    changes = ", ".join(f"{state} at +{fmt_offset(t)}" for t, state in gpu.state_changes)
    if gpu.unanswered_s:
        changes += f"; not answering for {fmt_duration(gpu.unanswered_s)}"
    return changes


def _process_lines(processes: tuple[ProcessUse, ...], width: int) -> list[str]:
    heading = ["PID", "USER", "PEAK MEMORY", "TIME", "SM TIME"]
    rows = [
        [
            str(use.local_pid if use.local_pid is not None else use.pid),
            ellipsize(use.user or NA, 12),
            fmt_bytes(use.peak_memory_bytes),
            fmt_duration(use.time_s),
            NA if use.sm_seconds is None else fmt_duration(use.sm_seconds),
        ]
        for use in processes
    ]
    commands = [use.command or NA for use in processes]
    table = fmt_process_table(
        heading, rows, commands, right={0, 2, 3, 4}, lead=_INDENT * 2, width=width
    )
    return [_INDENT + "processes"] + [ellipsize(line, width) for line in table]


# --- JSON --------------------------------------------------------------------------------


def summary_as_dict(summary: Summary) -> dict[str, Any]:
    """The summary as JSON-ready data (README: ``gputui replay --summary --json``)."""
    return {
        "host": summary.host,
        **_when_and_where(summary),
        "gpus": [_gpu_as_dict(gpu) for gpu in summary.gpus],
        "runs": [
            asdict(run)
            | {"images_per_second": _clean(run.images_per_second), "speedup": _clean(run.speedup)}
            for run in summary.runs
        ],
    }


def _when_and_where(summary: Recorded) -> dict[str, Any]:
    """What a host's and a fleet's summary both say about their recording."""
    span = None
    if summary.first_t is not None and summary.last_t is not None:
        span = summary.last_t - summary.first_t
    return {
        "started_at": dt.datetime.fromtimestamp(summary.started_unix, dt.UTC).isoformat(),
        "interval_s": summary.interval_s,
        "frames": summary.frames,
        "first_t": summary.first_t,
        "last_t": summary.last_t,
        "span_s": _clean(span),
        "files": list(summary.files),
        "problem": summary.problem,
    }


def render_summary_json(summary: Summary) -> str:
    """The summary as indented JSON text."""
    return json.dumps(summary_as_dict(summary), indent=2, allow_nan=False)


def fleet_summary_as_dict(summary: FleetSummary) -> dict[str, Any]:
    """A fleet's summary as JSON-ready data (README: ``gputui replay --summary --json`` of a
    fleet recording); each host's GPUs as a host recording's summary writes them."""
    return {
        "kind": "fleet",
        "recorded_by": summary.recorded_by,
        "source": summary.source,
        **_when_and_where(summary),
        "hosts": [
            asdict(host)
            | {
                "unreachable_s": _clean(host.unreachable_s),
                "state_changes": [
                    {"t": t, "state": state, "error": error}
                    for t, state, error in host.state_changes
                ],
                "gpus": [_gpu_as_dict(gpu) for gpu in host.gpus],
            }
            for host in summary.hosts
        ],
    }


def render_fleet_summary_json(summary: FleetSummary) -> str:
    """A fleet's summary as indented JSON text."""
    return json.dumps(fleet_summary_as_dict(summary), indent=2, allow_nan=False)


def _gpu_as_dict(gpu: GpuSummary) -> dict[str, Any]:
    return asdict(gpu) | {
        "utilization_percent": _spread_as_dict(gpu.utilization_percent),
        "memory_used_bytes": _spread_as_dict(gpu.memory_used_bytes),
        "energy_j": _clean(gpu.energy_j),
        "throttled_s": _clean(gpu.throttled_s),
        "throttle_reasons_s": {why: _clean(s) for why, s in gpu.throttle_reasons_s.items()},
        "unanswered_s": _clean(gpu.unanswered_s),
        "state_changes": [{"t": t, "state": state} for t, state in gpu.state_changes],
        "processes": [
            asdict(use) | {"time_s": _clean(use.time_s), "sm_seconds": _clean(use.sm_seconds)}
            for use in gpu.processes
        ],
    }


def _spread_as_dict(values: Spread) -> dict[str, float | None]:
    return {"mean": _clean(values.mean), "p95": values.p95, "max": values.max}


def _clean(value: float | None) -> float | None:
    """A sum or mean without the float noise in its last digits."""
    return None if value is None else without_noise(value)
