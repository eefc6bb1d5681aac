"""``gputui snapshot --hosts``: every host's GPUs once, as JSON or as a plain-text table.

JSON: ``{"hosts": [{"host", "up", "error", "source", "via", "age_seconds", "notes",
"gpus"}]}`` in the order the hosts were named (sorted by instance for ``--prometheus``);
``notes`` says which values a host sent were refused (they read ``null``); ``gpus`` holds
each GPU as ``gputui snapshot --json`` writes it. A fleet recording's frames hold the same,
and :func:`hosts_from_dict` reads them back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from gputui.fleet.hosts import HostReading
from gputui.format import (
    NA,
    ellipsize,
    fmt_columns,
    fmt_counted,
    fmt_percent,
    fmt_unit,
    fmt_used_total,
    for_screen,
)
from gputui.telemetry.bounds import in_range
from gputui.telemetry.readings import GpuReading, GpuState, gpu_label
from gputui.telemetry.snapshot import gpu_as_dict, gpus_from_list


def fleet_as_dict(hosts: Sequence[HostReading], now: float) -> dict[str, Any]:
    """The hosts as JSON-ready data; ``now`` is ``time.monotonic()`` for their age."""
    return {
        "hosts": [
            {
                "host": host.host,
                "up": host.up,
                "error": host.error,
                "source": host.source,
                "via": host.via,
                "age_seconds": _rounded(host.age_s(now)),
                "notes": list(host.notes),
                "gpus": [gpu_as_dict(gpu) for gpu in host.gpus],
            }
            for host in hosts
        ]
    }


def hosts_from_dict(data: Any, now: float) -> list[HostReading]:
    """The hosts that :func:`fleet_as_dict` wrote (a recorded fleet frame), read back: each
    value checked by its kind, each GPU's readings by the ranges a scrape admits; a host's
    ``taken_at`` is ``now`` less its age.

    Raises:
        ValueError: a member is missing or of the wrong kind; says which.
    """
    hosts = data.get("hosts") if isinstance(data, dict) else None
    if not isinstance(hosts, list):
        raise ValueError("the readings have no list of hosts")
    return [_host_from_dict(host, f"hosts[{at}]", now) for at, host in enumerate(hosts)]


def _host_from_dict(data: Any, where: str, now: float) -> HostReading:
    if not isinstance(data, dict):
        raise ValueError(f"{where} is not an object")
    host, up, via = data.get("host"), data.get("up"), data.get("via", "http")
    error, source, age = data.get("error"), data.get("source"), data.get("age_seconds")
    notes = data.get("notes") or []
    if not isinstance(host, str) or type(up) is not bool or not isinstance(via, str):
        raise ValueError(f"{where} has no host, up or via of the right kind")
    if not all(text is None or isinstance(text, str) for text in (error, source)):
        raise ValueError(f"{where}'s error or source is not text")
    if age is not None and (type(age) not in (int, float) or not 0 <= age < math.inf):
        raise ValueError(f"{where}.age_seconds is {ellipsize(repr(age), 40)}")
    if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
        raise ValueError(f"{where}.notes is not a list of text")
    gpus = gpus_from_list(data.get("gpus") or [], f"{where}.gpus")
    return HostReading(
        host,
        up=up,
        error=error,
        source=source,
        gpus=tuple(in_range(gpu) for gpu in gpus),
        taken_at=None if age is None else now - age,
        via=via,
        notes=tuple(notes),
    )


def render_fleet_json(hosts: Sequence[HostReading], now: float) -> str:
    """The hosts as indented JSON text (no trailing newline)."""
    return json.dumps(fleet_as_dict(hosts, now), indent=2, allow_nan=False)


def render_fleet_table(hosts: Sequence[HostReading], now: float, width: int | None = 80) -> str:
    """One header line a host and one line a GPU, cut to ``width`` columns (``None``: whole
    lines); text from the hosts (names, labels, errors) is printable (:func:`for_screen`)."""
    hosts = for_screen(list(hosts))
    lines = []
    for host in hosts:
        lines.append(host_headline(host, now))
        age = host.age_s(now)
        if not host.up and host.gpus and age is not None:  # the last readings, dated
            lines.append(f"  readings below are {age:.0f} s old")
        lines += gpu_lines(host.gpus)
    if width is not None:
        lines = [ellipsize(line, width) for line in lines]
    up = sum(host.up for host in hosts)
    lines.append(f"{up} of {fmt_counted(len(hosts), 'host')} answered")
    return "\n".join(lines)


def host_headline(host: HostReading, now: float) -> str:
    """``node1  up · gputui · 8 GPUs``, or ``node2  DOWN: connection refused (...)``."""
    age = host.age_s(now)
    if host.up:
        parts = [host.source or NA, fmt_counted(len(host.gpus), "GPU")]
        if age is not None and age >= 1:
            parts.append(f"{age:.0f} s old")
        if host.notes:
            parts.append(notes_summary(host.notes))
        return f"{host.host}  up · {' · '.join(parts)}"
    return f"{host.host}  DOWN: {host.error or 'no answer'}"


def notes_summary(notes: Sequence[str]) -> str:
    """The first of a host's notes, and how many more (``--json`` lists them)."""
    more = f" (+{len(notes) - 1} more)" if len(notes) > 1 else ""
    return f"{notes[0]}{more}"


def gpu_lines(gpus: Sequence[GpuReading]) -> list[str]:
    """One indented line a GPU, in columns: index, name, utilization, memory, temperature,
    power (``snapshot --hosts``'s, and ``snapshot --compact``'s)."""
    rows = [_gpu_cells(gpu) for gpu in gpus]
    return ["  " + line for line in fmt_columns(rows, right={2, 3, 4, 5})]


def _gpu_cells(gpu: GpuReading) -> list[str]:
    if gpu.state is GpuState.LOST:
        return [gpu_label(gpu), gpu.name, "lost"]
    if gpu.state is not GpuState.OK:  # hung, unreachable: why, after the empty columns
        return [gpu_label(gpu), gpu.name, gpu.state.value, "", "", "", gpu.error or ""]
    return [
        gpu_label(gpu),
        gpu.name,
        fmt_percent(gpu.utilization_percent),
        fmt_used_total(gpu.memory_used_bytes, gpu.memory_total_bytes),
        fmt_unit(gpu.temperature_c, "°C"),
        fmt_unit(gpu.power_w, " W"),
    ]


def _rounded(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 3)
