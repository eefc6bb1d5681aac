"""Pure renderers: readings in, styled lines out.

Nothing here touches an app, a widget or a clock, so every function is tested on
its own. A line is a :class:`Line`: ``(text, style)`` parts whose styles are
Textual theme variables (``$success``, ``$text-muted``...), resolved when a widget
paints the line, so they follow the theme and degrade under ``NO_COLOR`` and in
16-colour terminals.

The monitor builds every line once a second, so this module stays cheap: a line
is a list of small tuples, compared and painted without building ``Content``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size
from textual.content import Content

from gputui.format import (
    NA,
    ellipsize,
    fmt_bytes,
    fmt_cores,
    fmt_counted,
    fmt_ghz,
    fmt_link_rate,
    fmt_percent,
    fmt_unit,
    fmt_used_total,
    fmt_with_limit,
    percent_of,
)
from gputui.telemetry.readings import (
    CpuReading,
    GpuProcess,
    GpuReading,
    GpuState,
    MpsReading,
    health_problems,
    shown_pid,
    unmatched_host_pids,
)

LABEL = "$text-muted"
"""Style of a label in front of a value."""
OK = "$success"
"""A level comfortably inside its range."""
WARM = "$warning"
"""A level getting high."""
HOT = "$error"
"""A level at its limit, or something broken."""
UTIL_SPARK = "$accent"
"""Sparkline of GPU utilization."""
MEMORY_SPARK = "$secondary"
"""Sparkline of GPU memory in use."""
TRACK = "$text-muted"
"""The unfilled part of a bar."""
RULE = "$panel-lighten-2"
"""The rule a card's title sits on (the colour of the panels' borders)."""

_EIGHTHS = " ▏▎▍▌▋▊▉"
_SPARKS = " ▁▂▃▄▅▆▇█"
_TRACK_CHAR = "·"
GAP = "  "
"""Space between the items of a line."""
LOST_HINT = "the driver reports GpuIsLost; check dmesg for Xid errors, then reset or reboot"
"""What a lost GPU's panel says after LOST."""


class Line:
    """One line of styled text: ``(text, style)`` parts and their width in cells."""

    __slots__ = ("parts", "width")

    def __init__(self, *parts: str | tuple[str, str]) -> None:
        """Start a line with ``parts`` (plain strings, or ``(text, style)``)."""
        self.parts: list[tuple[str, str]] = []
        self.width = 0
        for part in parts:
            if isinstance(part, str):
                self.add(part)
            else:
                self.add(*part)

    def add(self, text: str, style: str = "") -> Line:
        """Append ``text`` in ``style``; returns the line."""
        if text:
            self.parts.append((text, style))
            self.width += len(text) if text.isascii() else cell_len(text)
        return self

    def extend(self, other: Line) -> Line:
        """Append every part of ``other``; returns the line."""
        self.parts.extend(other.parts)
        self.width += other.width
        return self

    def fit(self, width: int) -> Line:
        """Pad with spaces, or crop ending in ``…``, to exactly ``width`` cells (returns self)."""
        if self.width < width:
            return self.add(" " * (width - self.width))
        if self.width == width:
            return self
        kept: list[tuple[str, str]] = []
        room = max(width - 1, 0)
        for text, style in self.parts:
            size = cell_len(text)
            if size > room:
                if room:
                    kept.append((set_cell_size(text, room), style))
                kept.append(("…", style))
                break
            kept.append((text, style))
            room -= size
        self.parts = kept if width > 0 else []
        self.width = max(width, 0)
        return self

    @property
    def plain(self) -> str:
        """The text without styles."""
        return "".join(text for text, _ in self.parts)

    @property
    def cell_length(self) -> int:
        """Width in cells."""
        return self.width

    def styled(self) -> list[tuple[str, str]]:
        """``(text, style)`` of each styled part (unstyled parts left out)."""
        return [(text, style) for text, style in self.parts if style]

    def content(self) -> Content:
        """The line as Textual ``Content``."""
        return Content.assemble(*self.parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Line) and self.parts == other.parts

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Line({self.plain!r})"


def join(lines: Iterable[Line], separator: str) -> Line:
    """``lines`` one after another, with ``separator`` between them."""
    joined = Line()
    for index, line in enumerate(lines):
        if index:
            joined.add(separator)
        joined.extend(line)
    return joined


def level_style(percent: float | None, warm: float = 60.0, hot: float = 85.0) -> str:
    """The style of a level: ``OK`` below ``warm``, ``WARM`` below ``hot``, else ``HOT``."""
    if percent is None:
        return LABEL
    if percent >= hot:
        return HOT
    if percent >= warm:
        return WARM
    return OK


def temperature_style(celsius: float | None) -> str:
    """Temperature colour: warm from 75 °C, hot from 85 °C (most GPUs throttle near 90)."""
    return "" if celsius is None else level_style(celsius, warm=75.0, hot=85.0)


def bar(percent: float | None, width: int, style: str | None = None) -> Line:
    """A horizontal bar ``width`` cells wide, filled to an eighth of a cell, on a dotted track.

    Args:
        percent: 0-100; ``None`` draws only the track.
        width: Cells; 0 or less gives an empty line.
        style: Style of the filled part; by default it follows ``level_style``.

    Returns:
        A line exactly ``width`` cells wide.
    """
    if width <= 0:
        return Line()
    if percent is None:
        return Line((_TRACK_CHAR * width, TRACK))
    clamped = min(max(percent, 0.0), 100.0)
    full, part = divmod(round(clamped / 100.0 * width * 8), 8)
    filled = "█" * full + (_EIGHTHS[part] if part else "")
    track = _TRACK_CHAR * (width - len(filled))
    return Line((filled, style or level_style(percent)), (track, TRACK))


_SPARK_FOR_PERCENT = tuple(
    _SPARKS[max(1, round(percent / 100.0 * (len(_SPARKS) - 1)))] for percent in range(101)
)
"""The sparkline character for each whole percent (an idle GPU still shows a floor)."""


def _spark_char(value: float | None) -> str:
    if value is None or value != value:  # None or NaN: no reading
        return " "
    return _SPARK_FOR_PERCENT[min(max(int(value + 0.5), 0), 100)]


def sparkline(values: Sequence[float | None], width: int, style: str = UTIL_SPARK) -> Line:
    """The last ``width`` values (0-100) as block characters, newest on the right.

    Args:
        values: Oldest first; ``None`` (no reading) is drawn blank.
        width: Cells; shorter histories are padded on the left.
        style: Style of the blocks.

    Returns:
        A line exactly ``width`` cells wide (empty when ``width`` <= 0).
    """
    if width <= 0:
        return Line()
    if not isinstance(values, (list, tuple)):
        values = tuple(values)
    chars = "".join([_spark_char(value) for value in values[-width:]])
    return Line(" " * (width - len(chars)), (chars, style))


def labelled(label: str, value: str, value_style: str = "") -> Line:
    """``label value`` with the label muted."""
    return Line((label, LABEL), " ", (value, value_style))


def fit_line(required: Sequence[Line], optional: Sequence[Line], width: int) -> Line:
    """Join items with ``GAP``: all of ``required``, then each ``optional`` item that still fits.

    Args:
        required: Items always shown (the result is cropped if even they do not fit).
        optional: Items in order of importance; one that does not fit is skipped.
        width: Cells available.

    Returns:
        A line of at most ``width`` cells.
    """
    line = join(required, GAP)
    for item in optional:
        needed = item.width + (len(GAP) if line.width else 0)
        if line.width + needed <= width:
            if line.width:
                line.add(GAP)
            line.extend(item)
    return line.fit(width) if line.width > width else line


def gauge_line(
    label: str,
    percent: float | None,
    width: int,
    *,
    spark: Sequence[float | None] = (),
    spark_style: str = UTIL_SPARK,
    detail: str = "",
) -> Line:
    """``LABEL ███··· 42% ▁▂▃ detail``: the bar takes ~45% of the room, the sparkline the rest.

    Args:
        label: A short label, padded to 4 cells.
        percent: The value the bar and number show.
        width: Cells available.
        spark: History for the sparkline (none when empty).
        spark_style: Style of the sparkline.
        detail: Text after the sparkline (e.g. ``20.1/80.0 GiB``).

    Returns:
        A line exactly ``width`` cells wide.
    """
    head = f"{label:<4}"
    number = f" {fmt_percent(percent):>4}"
    tail = f"  {detail}" if detail else ""
    room = width - len(head) - len(number) - cell_len(tail)
    if room < 6 and detail:
        room, tail = room + cell_len(tail), ""
    line = Line((head, LABEL))
    if spark and room >= 16:
        bar_width = max(8, room * 45 // 100)
        line.extend(bar(percent, bar_width)).add(number).add(" ")
        line.extend(sparkline(spark, room - bar_width - 1, spark_style))
    else:
        line.extend(bar(percent, max(room, 3))).add(number)
    return line.add(tail).fit(width)


# --- CPU ---------------------------------------------------------------------------------


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
            line.add(_spark_char(value), level_style(value))
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


# --- NVIDIA GPUs -------------------------------------------------------------------------


def short_name(name: str) -> str:
    """The name without the brand: ``NVIDIA GeForce RTX 4090`` -> ``RTX 4090``."""
    for prefix in ("NVIDIA GeForce ", "NVIDIA ", "GeForce "):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


STATE_WORDS = {
    GpuState.LOST: "LOST",
    GpuState.UNREACHABLE: "UNREACHABLE",
    GpuState.HUNG: "HUNG",
}
"""How a GPU that cannot be read is named on screen."""


def gpu_title(gpu: GpuReading) -> str:
    """``0 · NVIDIA H100 80GB HBM3 · P0`` (``LOST`` or ``UNREACHABLE`` for such a GPU; no
    performance state where the GPU does not report one, rather than a bare ``· n/a``)."""
    state = STATE_WORDS.get(gpu.state)
    if state is None and gpu.performance_state is not None:
        state = fmt_pstate(gpu.performance_state)
    mig = " · MIG" if gpu.mig_mode else ""
    return f"{gpu.index} · {gpu.name}" + (f" · {state}" if state else "") + mig


def fmt_pstate(state: int | None) -> str:
    """``0`` -> ``P0``."""
    return NA if state is None else f"P{state}"


def gpu_memory_percent(gpu: GpuReading) -> float | None:
    """Device memory in use, percent of installed."""
    return percent_of(gpu.memory_used_bytes, gpu.memory_total_bytes)


def memory_detail(gpu: GpuReading) -> str:
    """``61.2/80.0 GiB``."""
    return fmt_used_total(gpu.memory_used_bytes, gpu.memory_total_bytes)


@dataclass(frozen=True, slots=True)
class StatColumn:
    """One column of a GPU's stats: a label and a fixed width, so rows line up."""

    label: str
    """Muted label before the value ('' for none)."""
    width: int
    """Cells for the value."""


STAT_COLUMNS: dict[str, StatColumn] = {
    "temp": StatColumn("", 5),
    "power": StatColumn("pwr", 11),
    "power_draw": StatColumn("", 6),
    "sm": StatColumn("sm", 13),
    "sm_now": StatColumn("", 8),
    "fan": StatColumn("fan", 4),
    "pcie": StatColumn("PCIe", 27),
    "membw": StatColumn("mem bw", 4),
    "pstate": StatColumn("", 3),
}
"""Every stat a GPU line can show, by key."""


def gpu_stat(gpu: GpuReading, key: str) -> Line:
    """The value of one stat (a key of ``STAT_COLUMNS``), styled, unpadded."""
    if key == "temp":
        celsius = gpu.temperature_c
        return Line((fmt_unit(celsius, "°C"), temperature_style(celsius)))
    if key in ("power", "power_draw"):
        limit = gpu.power_limit_w if key == "power" else None
        style = level_style(percent_of(gpu.power_w, gpu.power_limit_w), 80, 95)
        return Line((fmt_with_limit(gpu.power_w, limit, " W"), style))
    if key == "sm":
        return Line(fmt_with_limit(gpu.sm_clock_mhz, gpu.sm_clock_max_mhz, " MHz"))
    if key == "sm_now":
        return Line(fmt_with_limit(gpu.sm_clock_mhz, None, " MHz"))
    if key == "fan":
        return Line(fmt_percent(gpu.fan_percent))
    if key == "pcie":
        if gpu.pcie_rx_bytes_per_s is None and gpu.pcie_tx_bytes_per_s is None:
            return Line(NA)
        return Line(
            ("rx ", LABEL),
            fmt_link_rate(gpu.pcie_rx_bytes_per_s),
            (" tx ", LABEL),
            fmt_link_rate(gpu.pcie_tx_bytes_per_s),
        )
    if key == "membw":
        return Line(fmt_percent(gpu.memory_utilization_percent))
    if key == "pstate":
        return Line((fmt_pstate(gpu.performance_state), LABEL))
    raise KeyError(key)


def stat_cell_width(key: str) -> int:
    """Cells one stat takes, label included."""
    column = STAT_COLUMNS[key]
    return column.width + (len(column.label) + 1 if column.label else 0)


def stat_cells(gpu: GpuReading, keys: Sequence[str], width: int) -> Line:
    """Stats in fixed-width columns, in order, dropping whole columns that do not fit.

    Which columns fit depends only on ``width``, never on the values, so the lines
    of several GPUs stay aligned.
    """
    line = Line()
    for key in keys:
        cell_width = stat_cell_width(key)
        gap = len(GAP) if line.width else 0
        if line.width + gap + cell_width > width:
            continue
        column = STAT_COLUMNS[key]
        cell = Line((f"{column.label} ", LABEL)) if column.label else Line()
        line.add(" " * gap).extend(cell.extend(gpu_stat(gpu, key)).fit(cell_width))
    return line


def problem_line(gpu: GpuReading, width: int) -> Line:
    """``LOST  the driver reports GpuIsLost...`` (or ``UNREACHABLE  why...``), cropped."""
    word = STATE_WORDS.get(gpu.state, "LOST")
    return Line((word, f"bold {HOT}"), GAP, (gpu.error or LOST_HINT, LABEL)).fit(width)


def problem_lines(gpu: GpuReading, width: int, height: int) -> list[Line]:
    """``problem_line`` wrapped over ``height`` lines, so that the fix is read whole."""
    word = STATE_WORDS.get(gpu.state, "LOST")
    words = (gpu.error or LOST_HINT).split()
    lines = [Line((word, f"bold {HOT}"), GAP)]
    for text in words:
        line = lines[-1]
        gap = 0 if line.width == len(word) + len(GAP) else 1
        if line.width + gap + cell_len(text) > width and len(lines) < height:
            lines.append(Line(" " * (len(word) + len(GAP))))
            line, gap = lines[-1], 0
        line.add(" " * gap + text, LABEL)
    lines += [Line() for _ in range(height - len(lines))]
    return [line.fit(width) for line in lines[:height]]


CARD_LINES = 4
"""Lines in a GPU card under its title."""
CARD_GAP = "  "
"""Between two columns of cards."""


def gpu_card_lines(
    gpu: GpuReading,
    util_history: Sequence[float | None],
    memory_history: Sequence[float | None],
    width: int,
) -> list[Line]:
    """A GPU card's four lines under its title.

    Utilization and memory gauges with sparklines; temperature, power, SM clock
    and fan; PCIe throughput and memory bandwidth use.
    """
    if gpu.state is not GpuState.OK:
        return problem_lines(gpu, width, CARD_LINES)
    return [
        gauge_line("GPU", gpu.utilization_percent, width, spark=util_history),
        gauge_line(
            "MEM",
            gpu_memory_percent(gpu),
            width,
            spark=memory_history,
            spark_style=MEMORY_SPARK,
            detail=memory_detail(gpu),
        ),
        stat_cells(gpu, ("temp", "power", "sm", "fan"), width).fit(width),
        stat_cells(gpu, ("pcie", "membw"), width).fit(width),
    ]


def card_title_line(gpu: GpuReading, width: int) -> Line:
    """``─ 0 · NVIDIA H100 80GB HBM3 · P0 ──────``: the rule that opens a card."""
    title_style = f"bold {HOT}" if gpu.state is not GpuState.OK else "bold"
    line = Line(("─ ", RULE), (gpu_title(gpu), title_style), " ")
    if problems := health_problems(gpu):
        line.add("⚠ " + "; ".join(problems), f"bold {HOT}").add(" ")
    return line.add("─" * max(width - line.width, 0), RULE).fit(width)


def gpu_card(
    gpu: GpuReading,
    util_history: Sequence[float | None],
    memory_history: Sequence[float | None],
    width: int,
) -> list[Line]:
    """A whole card: its title rule, then ``gpu_card_lines``."""
    return [card_title_line(gpu, width), *gpu_card_lines(gpu, util_history, memory_history, width)]


def side_by_side(blocks: Sequence[Sequence[Line]], width: int) -> list[Line]:
    """Blocks of lines (each ``width`` cells) joined left to right with ``CARD_GAP``.

    A block shorter than the others is padded with blank lines.
    """
    height = max((len(block) for block in blocks), default=0)
    blank = Line(" " * width)
    return [
        join((block[y] if y < len(block) else blank for block in blocks), CARD_GAP)
        for y in range(height)
    ]


def gpu_name_cell(gpu: GpuReading, width: int) -> Line:
    """``0 H100 80GB HBM3`` fitted to ``width`` cells (first word only if need be), index bold."""
    name = short_name(gpu.name)
    if cell_len(name) + 2 > width:
        name = name.split(" ")[0]
    index_style = f"bold reverse {HOT}" if health_problems(gpu) else "bold"
    return Line((f"{gpu.index}", index_style), " ", name).fit(width)


def gpu_two_lines(
    gpu: GpuReading,
    util_history: Sequence[float | None],
    memory_history: Sequence[float | None],
    width: int,
) -> list[Line]:
    """Two lines for one GPU: name and both gauges, then its stats in aligned columns."""
    name_width = 18 if width >= 120 else 10
    room = width - name_width - 1
    first = gpu_name_cell(gpu, name_width).add(" ")
    if gpu.state is not GpuState.OK:
        top, below = problem_lines(gpu, room, 2)
        return [first.extend(top).fit(width), Line(" " * (name_width + 1)).extend(below).fit(width)]
    half = (room - len(GAP)) // 2
    first.extend(gauge_line("GPU", gpu.utilization_percent, half, spark=util_history)).add(GAP)
    first.extend(
        gauge_line(
            "MEM",
            gpu_memory_percent(gpu),
            room - half - len(GAP),
            spark=memory_history,
            spark_style=MEMORY_SPARK,
        )
    )
    second = Line(" " * (name_width + 1)).extend(Line(memory_detail(gpu)).fit(13)).add(GAP)
    keys = ("temp", "power", "sm", "fan", "pcie", "pstate")
    second.extend(stat_cells(gpu, keys, room - 13 - len(GAP)))
    return [first.fit(width), second.fit(width)]


def gpu_one_line(gpu: GpuReading, util_history: Sequence[float | None], width: int) -> Line:
    """One line for one GPU: name, utilization, memory, then the stats that fit, aligned."""
    name_width = 18 if width >= 120 else 7
    room = width - name_width - 1
    line = gpu_name_cell(gpu, name_width).add(" ")
    if gpu.state is not GpuState.OK:
        return line.extend(problem_line(gpu, room)).fit(width)
    memory = Line(("MEM ", LABEL)).extend(bar(gpu_memory_percent(gpu), 8)).add(" ")
    memory.extend(Line(memory_detail(gpu)).fit(13))
    util_min = 4 + 10 + 5  # label, bar, percent
    keys = ["temp"]
    for key in ("power_draw", "sm_now", "pcie", "fan", "pstate"):
        candidate = [*keys, key]
        stats_width = sum(stat_cell_width(k) + len(GAP) for k in candidate)
        if util_min + len(GAP) + memory.width + len(GAP) + stats_width <= room:
            keys = candidate
    stats = stat_cells(gpu, keys, room)
    util_width = room - memory.width - stats.width - 2 * len(GAP)
    spark = util_history if util_width >= 4 + 5 + 16 else ()  # gauge_line needs 16 cells
    line.extend(gauge_line("GPU", gpu.utilization_percent, util_width, spark=spark))
    return line.add(GAP).extend(memory).add(GAP).extend(stats).fit(width)


def nvml_title(
    driver: str | None, cuda: str | None, gpu_count: int | None, gpus: Sequence[GpuReading] = ()
) -> str:
    """``NVIDIA · 8 GPUs · driver 550.54.15 · CUDA 12.4``; ``4 GPUs, 1 unreachable``."""
    parts = ["NVIDIA"]
    if gpu_count is not None:
        count = fmt_counted(gpu_count, "GPU")
        for state, word in STATE_WORDS.items():
            if found := sum(gpu.state is state for gpu in gpus):
                count += f", {found} {word.lower()}"
        parts.append(count)
    if driver:
        parts.append(f"driver {driver}")
    if cuda:
        parts.append(f"CUDA {cuda}")
    return " · ".join(parts)


def stale_tag(age_s: float) -> str:
    """How old the readings on screen are: ``stale 4s``, ``stale 2m30s``, ``stale 1h05m``."""
    seconds = int(max(age_s, 0.0))
    if seconds < 60:
        return f"stale {seconds}s"
    if seconds < 3600:
        return f"stale {seconds // 60}m{seconds % 60:02d}s"
    return f"stale {seconds // 3600}h{seconds % 3600 // 60:02d}m"


# --- processes and MPS --------------------------------------------------------------------


ProcessCells = tuple[str, str, str, str, str]
"""GPU, PID, user, GPU memory, command: a process table row, as plain strings."""

COMMAND_MAX = 200
"""Characters of a command line the process table keeps."""


def process_cells(gpu_index: int, process: GpuProcess) -> ProcessCells:
    """The process table's cells as plain strings: GPU, PID, user, GPU memory, command."""
    return (
        str(gpu_index),
        str(shown_pid(process)),
        process.user or NA,
        fmt_bytes(process.gpu_memory_bytes),
        ellipsize(process.command or NA, COMMAND_MAX),
    )


PROCESS_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("GPU", True),
    ("PID", True),
    ("User", False),
    ("GPU mem", True),
    ("Command", False),
)
"""The process table's columns: heading, and whether values are right-aligned."""
PROCESS_HEADING = f"bold {LABEL}"
"""Style of the process table's heading."""
TRAINER_STYLE = "bold reverse"
"""How the runner's trainer process stands out in the process table."""
SELECTED_STYLE = "bold $block-cursor-foreground on $block-cursor-background"
"""The selected row (the one ``k`` would end), as Textual draws a table's cursor."""


def process_table_title(count: int, gpus: Sequence[GpuReading], host_pids: bool = False) -> str:
    """``GPU processes · 3``, ``· none``, or ``· n/a`` where NVML could not list them (never
    "none" beside a GPU whose processes are unknown)."""
    unknown = [str(gpu.index) for gpu in gpus if gpu.processes is None]
    if unknown and len(unknown) == len(gpus):
        return "GPU processes · n/a"
    shown = f"{count}" if count else ("none" if not unknown else "0")
    if unknown:
        shown += f" · n/a on GPU {', '.join(unknown)}"
    hosts = unmatched_host_pids(process for gpu in gpus for process in gpu.processes or ())
    if host_pids and count and hosts:
        shown += f" · {fmt_counted(hosts, 'host pid')} (gputui is in a container's pid namespace)"
    return f"GPU processes · {shown}"


def process_table_lines(
    rows: Sequence[ProcessCells],
    width: int,
    marked_pid: str = "",
    marked_gpu: str | None = None,
    ranks: Collection[str] = (),
    selected: int | None = None,
) -> list[Line]:
    """The process table: its heading, then a line a row, each exactly ``width`` cells.

    Every column but the last is as wide as its widest value (or heading), so the
    columns line up; the command takes what is left and is cropped with ``…``.

    Args:
        rows: The rows, in order.
        width: Cells available.
        marked_pid: The PID whose row is drawn in ``TRAINER_STYLE`` (the runner's trainer).
        marked_gpu: The GPU (index) that row must be on; ``None``: any GPU.
        ranks: The PIDs of a scaling run's other ranks, marked on whatever GPU they are.
        selected: The index of the selected row in ``rows``, drawn in ``SELECTED_STYLE``.
    """
    widths = [
        max([len(heading), *(cell_len(row[column]) for row in rows)])
        for column, (heading, _) in enumerate(PROCESS_COLUMNS[:-1])
    ]

    def line(cells: Sequence[str], style: str) -> Line:
        out = Line()
        # every column but the command, which is last (``widths`` has one fewer)
        for text, cell_width, (_, right) in zip(cells, widths, PROCESS_COLUMNS, strict=False):
            pad = " " * (cell_width - cell_len(text))
            out.add(pad + text if right else text + pad, style).add(GAP, style)
        out.add(cells[-1], style)
        if out.width < width:
            return out.add(" " * (width - out.width), style)
        return out.fit(width)

    headings = [heading for heading, _ in PROCESS_COLUMNS]

    def style(index: int, row: ProcessCells) -> str:
        if index == selected:
            return SELECTED_STYLE
        trainer = marked_pid and row[1] == marked_pid and marked_gpu in (None, row[0])
        return TRAINER_STYLE if trainer or row[1] in ranks else ""

    body = [line(row, style(index, row)) for index, row in enumerate(rows)]
    return [line(headings, PROCESS_HEADING), *body]


def mps_line(mps: MpsReading | None, width: int) -> Line:
    """The MPS panel's one line."""
    if mps is None:
        return Line(("MPS", "bold"), GAP, ("checking…", LABEL)).fit(width)
    if mps.message and mps.utilization_percent is None and mps.memory_in_use_bytes is None:
        return Line(("MPS", "bold"), GAP, (mps.message, LABEL)).fit(width)
    torch_state = (
        NA
        if mps.torch_mps_available is None
        else "available"
        if mps.torch_mps_available
        else ("built, not available" if mps.torch_mps_built else "not built")
    )
    required = [
        Line(("MPS", "bold"), " ", mps.gpu_name or "Apple GPU"),
        labelled("GPU", fmt_percent(mps.utilization_percent)),
    ]
    optional = [
        labelled("in use", fmt_bytes(mps.memory_in_use_bytes)),
        labelled("PyTorch MPS", torch_state),
    ]
    return fit_line(required, optional, width).fit(width)
