"""The fleet view's rows: hosts filtered and sorted, then a line per host and per GPU.

Pure functions, like :mod:`gputui.ui.render.gpu`: hosts in, :class:`Line` values out. A host
line says its state (up, with its exporter and GPU count, or DOWN with the reason); a down
host's last readings follow greyed, under a line that says how old they are; each GPU line
is the monitor's one-line GPU row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

from gputui.fleet.hosts import HostReading
from gputui.fleet.report import notes_summary
from gputui.format import fmt_counted
from gputui.telemetry.readings import GpuReading, gpu_label
from gputui.ui.render.draw import GAP, HOT, LABEL, MUTED, OK, WARM, Line
from gputui.ui.render.gpu import gpu_memory_percent, gpu_one_line
from gputui.ui.row_order import RowOrder

SORT_KEYS = ("host", "util", "memory", "temp", "power")
"""What ``s`` cycles through: the order given, then the busiest, fullest, hottest, hungriest
first (``r`` reverses)."""

STALE_AFTER_S = 5.0
"""An up host's readings older than this get their age shown."""

INDENT = "  "

STALE = MUTED
"""A down host's last readings, at the opacity of the monitor's stale panels."""

History = Mapping[tuple[str, str], Sequence[float | None]]
"""Utilization history by host and GPU (its :func:`gpu_label`)."""


@dataclass(frozen=True, slots=True)
class FleetOrder(RowOrder):
    """How the hosts are shown: the sort key, its direction, and the filter (a host's name,
    exporter or state, or a GPU's name)."""

    KEYS: ClassVar[tuple[str, ...]] = SORT_KEYS
    key: str = SORT_KEYS[0]
    """One of :data:`SORT_KEYS`."""

    def next_key(self) -> FleetOrder:
        """The next sort key, with the same filter and direction."""
        return replace(self, key=self.following_key())


Row = tuple[HostReading, GpuReading | Literal["age"] | None]
"""A host's own line (``None``), how old a down host's readings are (``"age"``), or one of
its GPUs."""


def fleet_rows(hosts: Sequence[HostReading], order: FleetOrder) -> list[Row]:
    """The rows to show: hosts (and GPUs) that match the filter, in the order asked for."""
    shown = []
    for host in hosts:
        gpus = _matching(host, order.filter)
        if gpus is not None:
            shown.append((host, sorted(gpus, key=lambda gpu: _sort_value(gpu, order.key))))
    if order.key != "host":
        shown.sort(key=lambda pair: _host_value(pair[1], order.key))
    if order.reverse:
        shown.reverse()
    rows: list[Row] = []
    for host, gpus in shown:
        rows.append((host, None))
        if gpus and not host.up:
            rows.append((host, "age"))
        rows += [(host, gpu) for gpu in gpus]
    return rows


def row_line(row: Row, history: History, now: float, width: int) -> Line:
    """One row as a line ``width`` cells wide."""
    host, gpu = row
    if gpu is None:
        return host_line(host, now).fit(width)
    if gpu == "age":  # a line of its own: a long reason on the host's line never cuts it
        age = host.age_s(now)
        notice = f"readings below are {_age(math.inf if age is None else age)} old"
        return Line(INDENT, (notice, WARM)).fit(width)
    spark = history.get((host.host, gpu_label(gpu)), ())
    line = Line(INDENT).extend(gpu_one_line(gpu, spark, width - len(INDENT))).fit(width)
    if not host.up:  # the last readings of a host that stopped answering: greyed out
        line.parts = [(text, STALE) for text, _ in line.parts]
    return line


def host_line(host: HostReading, now: float) -> Line:
    """``● node1:9922  gputui · 8 GPUs``, or ``✕ node2:9400  DOWN  connection refused ...``."""
    if not host.up:
        line = Line(("✕ ", HOT), (host.host, f"bold {HOT}"), GAP, ("DOWN", f"bold {HOT}"), GAP)
        return line.add(host.error or "no answer", HOT)
    age = host.age_s(now)
    line = Line(("● ", OK), (host.host, "bold"), GAP)
    line.add(f"{host.source} · {fmt_counted(len(host.gpus), 'GPU')}", LABEL)
    if host.via == "prometheus":
        line.add(" · via Prometheus", LABEL)
    if age is not None and age >= STALE_AFTER_S:
        line.add(f" · {_age(age)} old", WARM)
    if host.notes:
        line.add(f" · {notes_summary(host.notes)}", WARM)
    return line


def fleet_title(hosts: Sequence[HostReading], order: FleetOrder, error: str | None) -> str:
    """``fleet · 6 hosts, 4 up, 2 down · 14 GPUs · sorted by util``."""
    up = sum(host.up for host in hosts)
    down = len(hosts) - up
    hosts_part = f"{fmt_counted(len(hosts), 'host')}, {up} up" + (f", {down} down" if down else "")
    parts = ["fleet", hosts_part]
    parts.append(fmt_counted(sum(len(host.gpus) for host in hosts), "GPU"))
    arrow = " (reversed)" if order.reverse else ""
    parts.append(f"sorted by {order.key}{arrow}")
    if order.filter:
        parts.append(f"filter {order.filter!r}")
    if error:
        parts.append(error)
    return " · ".join(parts)


def _matching(host: HostReading, text: str) -> list[GpuReading] | None:
    """The host's GPUs to show under the filter; ``None`` to hide the host."""
    if not text:
        return list(host.gpus)
    wanted = text.casefold()
    state = "up" if host.up else "down"
    about_host = " ".join(filter(None, [host.host, host.source, host.error, state]))
    if wanted in about_host.casefold():
        return list(host.gpus)
    gpus = [gpu for gpu in host.gpus if wanted in gpu.name.casefold()]
    return gpus or None


def _value(gpu: GpuReading, key: str) -> float | None:
    if key == "util":
        return gpu.utilization_percent
    if key == "memory":
        return gpu_memory_percent(gpu)
    if key == "temp":
        return gpu.temperature_c
    if key == "power":
        return gpu.power_w
    return None


def _sort_value(gpu: GpuReading, key: str) -> tuple[bool, float]:
    """Highest first, unknown last; the index keeps GPUs in order under ``host``."""
    if key == "host":
        return (False, gpu.index)
    value = _value(gpu, key)
    return (value is None, -(value or 0.0))


def _host_value(gpus: Sequence[GpuReading], key: str) -> tuple[bool, float]:
    """A host's place: its busiest GPU's value (its total for power); hosts without last."""
    values = [value for gpu in gpus if (value := _value(gpu, key)) is not None]
    if not values:
        return (True, 0.0)
    return (False, -(sum(values) if key == "power" else max(values)))


def _age(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "unknown time"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"
