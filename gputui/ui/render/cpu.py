"""The CPU panel's lines: the summary gauge, the per-core strip or grid, memory."""

from __future__ import annotations

from collections.abc import Sequence

from gputui.format import (
    NA,
    fmt_bytes,
    fmt_cores,
    fmt_ghz,
    fmt_percent,
    fmt_used_total,
    percent_of,
)
from gputui.telemetry.readings import CpuReading
from gputui.ui.render.draw import (
    GAP,
    LABEL,
    Line,
    bar,
    fit_line,
    gauge_line,
    labelled,
    level_style,
    spark_char,
)


def fmt_clock(cpu: CpuReading) -> str:
    """``3.20/4.50 GHz``, ``3.20 GHz`` without a max, ``n/a`` without a reading."""
    return fmt_ghz(cpu.frequency_mhz, cpu.frequency_max_mhz)


def cpu_summary_line(cpu: CpuReading, width: int, history: Sequence[float | None] = ()) -> Line:
    """Total utilization bar and sparkline, then load average and clock as room allows."""
    load = (
        NA if cpu.load_average is None else " ".join(f"{value:.2f}" for value in cpu.load_average)
    )
    optional = [labelled("load", load), labelled("clock", fmt_clock(cpu))]
    extras = fit_line([], optional, max(width - 30, 0))
    bar_room = width - (extras.width + len(GAP) if extras.width else 0)
    line = gauge_line("CPU", cpu.utilization_percent, bar_room, spark=history)
    if extras.width:
        line.add(GAP).extend(extras)
    return line.fit(width)


def core_strip(per_core: Sequence[float], width: int) -> list[Line]:
    """Every core as one block character (height = load), wrapped to ``width`` cells a line."""
    if width <= 0 or not per_core:
        return []
    lines = []
    for start in range(0, len(per_core), width):
        line = Line()
        for value in per_core[start : start + width]:
            line.add(spark_char(value), level_style(value))
        lines.append(line)
    return lines


CORES_LABEL = "cores "
"""Label in front of the per-core strip."""


def core_strip_rows(cores: int, width: int) -> int:
    """How many lines ``core_strip`` takes for ``cores`` cores in ``width`` cells."""
    room = max(width - len(CORES_LABEL), 1)
    return max(1, -(-cores // room))


CORE_CELL_WIDTH = 18
"""Cells one core takes in the roomy grid: ``12 ██████······  34%``."""
CORE_GRID_GAP = "   "
"""Between two columns of the per-core grid."""


def core_grid_columns(width: int) -> int:
    """Columns of the roomy per-core grid in ``width`` cells."""
    gap = len(CORE_GRID_GAP)
    return max(1, (width + gap) // (CORE_CELL_WIDTH + gap))


def core_grid(per_core: Sequence[float], width: int) -> list[Line]:
    """Every core as ``NN ███··· pct``, laid out in columns that fill ``width``, row-major."""
    columns = core_grid_columns(width)
    label_width = len(str(max(len(per_core) - 1, 0)))
    lines = []
    for start in range(0, len(per_core), columns):
        line = Line()
        for index in range(start, min(start + columns, len(per_core))):
            value = per_core[index]
            if index > start:
                line.add(CORE_GRID_GAP)
            line.add(f"{index:>{label_width}} ", LABEL)
            line.extend(bar(value, CORE_CELL_WIDTH - label_width - 6)).add(f" {value:>3.0f}%")
        lines.append(line)
    return lines


def cpu_memory_line(cpu: CpuReading, width: int) -> Line:
    """Memory bar with used/total, then swap and gputui's own CPU and RSS as room allows."""
    swap = (
        "none"
        if cpu.swap_total_bytes == 0
        else fmt_used_total(cpu.swap_used_bytes, cpu.swap_total_bytes)
    )
    own = f"{fmt_percent(cpu.self_cpu_percent, precision=1)} {fmt_bytes(cpu.self_rss_bytes)}"
    extras = fit_line([], [labelled("swap", swap), labelled("gputui", own)], max(width - 40, 0))
    room = width - (extras.width + len(GAP) if extras.width else 0)
    used = fmt_used_total(cpu.memory_used_bytes, cpu.memory_total_bytes)
    percent = percent_of(cpu.memory_used_bytes, cpu.memory_total_bytes)
    line = gauge_line("MEM", percent, room, detail=used)
    if extras.width:
        line.add(GAP).extend(extras)
    return line.fit(width)


def cpu_title(cpu: CpuReading | None) -> str:
    """``CPU · AMD EPYC 7763 · 64 threads, 32 cores``."""
    if cpu is None:
        return "CPU"
    model = f" · {cpu.model_name}" if cpu.model_name else ""
    return f"CPU{model} · {fmt_cores(cpu.logical_cores, cpu.physical_cores)}"
