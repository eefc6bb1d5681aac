"""The GPU panels' lines: a card per GPU, two lines or one line a GPU where room is short,
titles, health problems and staleness."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.cells import cell_len

from gputui.format import (
    NA,
    fmt_counted,
    fmt_energy,
    fmt_fan,
    fmt_link_rate,
    fmt_pcie_link,
    fmt_percent,
    fmt_unit,
    fmt_used_total,
    fmt_with_limit,
    percent_of,
)
from gputui.telemetry.readings import (
    VENDOR_NAMES,
    GpuReading,
    GpuState,
    MigDeviceReading,
    Vendor,
    gpu_label,
    health_problems,
)
from gputui.ui.render.draw import (
    GAP,
    HOT,
    LABEL,
    MEMORY_SPARK,
    RULE,
    Line,
    bar,
    gauge_line,
    join,
    level_style,
    temperature_style,
)

LOST_HINT = "the driver reports GpuIsLost; check dmesg for Xid errors, then reset or reboot"
"""What a lost GPU's panel says after LOST."""


BRANDS = (
    "NVIDIA GeForce ",
    "NVIDIA ",
    "GeForce ",
    "AMD Instinct ",
    "AMD Radeon ",
    "AMD ",
    "Intel Data Center GPU ",
    "Intel Arc ",
    "Intel ",
)
"""What :func:`short_name` leaves out, the longest of each brand's first."""


def short_name(name: str) -> str:
    """The name without the brand: ``NVIDIA GeForce RTX 4090`` -> ``RTX 4090``, ``AMD
    Instinct MI300X OAM`` -> ``MI300X OAM``."""
    for prefix in BRANDS:
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
    """``0 · NVIDIA H100 80GB HBM3 · P0`` (``LOST`` for such a GPU; no ``· n/a`` where the GPU
    reports no performance state)."""
    state = STATE_WORDS.get(gpu.state)
    if state is None and gpu.performance_state is not None:
        state = fmt_pstate(gpu.performance_state)
    mig = " · MIG" if gpu.mig_mode else ""
    return f"{gpu_label(gpu)} · {gpu.name}" + (f" · {state}" if state else "") + mig


def fmt_pstate(state: int | None) -> str:
    return NA if state is None else f"P{state}"


def gpu_memory_percent(gpu: GpuReading) -> float | None:
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
    "mem_clock": StatColumn("mem", 15),
    "mem_clock_now": StatColumn("mem", 9),
    "fan": StatColumn("fan", 4),
    "pcie": StatColumn("PCIe", 27),
    "link": StatColumn("", 13),
    "membw": StatColumn("mem bw", 4),
    "pstate": StatColumn("", 3),
    "energy": StatColumn("energy", 7),
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
    if key in ("mem_clock", "mem_clock_now"):
        limit = gpu.memory_clock_max_mhz if key == "mem_clock" else None
        return Line(fmt_with_limit(gpu.memory_clock_mhz, limit, " MHz"))
    if key == "fan":
        return Line(fmt_fan(gpu.fan_percent, gpu.fan_rpm))
    if key == "pcie":
        if gpu.pcie_rx_bytes_per_s is None and gpu.pcie_tx_bytes_per_s is None:
            return Line(fmt_pcie_link(gpu.pcie_link_gen, None, gpu.pcie_link_width_lanes, None))
        return Line(
            ("rx ", LABEL),
            fmt_link_rate(gpu.pcie_rx_bytes_per_s),
            (" tx ", LABEL),
            fmt_link_rate(gpu.pcie_tx_bytes_per_s),
        )
    if key == "link":
        return Line(
            fmt_pcie_link(
                gpu.pcie_link_gen,
                gpu.pcie_link_gen_max,
                gpu.pcie_link_width_lanes,
                gpu.pcie_link_width_max_lanes,
            )
        )
    if key == "membw":
        return Line(fmt_percent(gpu.memory_utilization_percent))
    if key == "pstate":
        return Line((fmt_pstate(gpu.performance_state), LABEL))
    if key == "energy":  # quiet: a tally, not an alarm
        return Line((fmt_energy(gpu.energy_joules), LABEL))
    raise KeyError(key)


def extra_cells(gpu: GpuReading) -> Line:
    """``NVLink 18 rx 1.2 GiB/s tx 3.4 GiB/s  enc 12% dec 40%``: the NVLink links that are up
    (``3/12`` while some are not) and their throughput, then the video engines each while it
    is busy. A link that is not up is not shown as a fault: NVML says the same of a link that
    failed and of one that is not wired (a PCIe card's bridge joins 3 of its 12)."""
    throughput, up, down = gpu.nvlink_throughput, gpu.nvlink_links_active, gpu.nvlink_links_down
    nvlink = (
        [
            Line(
                ("NVLink ", LABEL),
                f"{up}/{up + len(down)}" if down else str(up),
                (" rx ", LABEL),
                fmt_link_rate(throughput.rx_bytes_per_s if throughput else None),
                (" tx ", LABEL),
                fmt_link_rate(throughput.tx_bytes_per_s if throughput else None),
            )
        ]
        if up is not None
        else []
    )
    engines = [
        Line((f"{label} ", LABEL), fmt_percent(percent))
        for label, percent in (
            ("enc", gpu.encoder_utilization_percent),
            ("dec", gpu.decoder_utilization_percent),
        )
        if percent
    ]
    return join([*nvlink, *([join(engines, " ")] if engines else [])], GAP)


def stat_cell_width(key: str) -> int:
    """Cells one stat takes, label included."""
    column = STAT_COLUMNS[key]
    return column.width + (len(column.label) + 1 if column.label else 0)


def stat_cells(gpu: GpuReading, keys: Sequence[str], width: int) -> Line:
    """Stats in fixed-width columns, in order, dropping whole columns that do not fit (by
    ``width`` alone, never the values, so the lines of several GPUs stay aligned)."""
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


def mig_cell(device: MigDeviceReading) -> Line:
    """``1/0 4.1/9.6 GiB 2p``: a MIG device's GPU and compute instance ids, its memory and
    how many processes run on it (left out when none)."""
    ids = "/".join(
        NA if i is None else str(i) for i in (device.gpu_instance_id, device.compute_instance_id)
    )
    cell = Line(
        (f"{ids} ", LABEL), fmt_used_total(device.memory_used_bytes, device.memory_total_bytes)
    )
    if device.processes:
        cell.add(f" {len(device.processes)}p", LABEL)
    return cell


def mig_line(devices: Sequence[MigDeviceReading], width: int) -> Line:
    """A GPU's MIG devices on one line: a cell each (``MIG gi/ci  1/0 4.1/9.6 GiB 2p  2/0
    ...``) where they all fit, else a summary (``MIG  7 devices · 31.5/79.6 GiB · 5
    processes``)."""
    if not devices:
        return Line(("MIG", LABEL), GAP, ("no MIG devices", LABEL)).fit(width)
    line = Line(("MIG gi/ci", LABEL))
    for device in devices:
        line.add(GAP).extend(mig_cell(device))
    if line.width <= width:
        return line.fit(width)
    used = _known_sum(device.memory_used_bytes for device in devices)
    total = _known_sum(device.memory_total_bytes for device in devices)
    processes = sum(len(device.processes or ()) for device in devices)
    return Line(
        ("MIG", LABEL),
        GAP,
        fmt_counted(len(devices), "device"),
        (" · ", LABEL),
        fmt_used_total(used, total),
        (" · ", LABEL),
        fmt_counted(processes, "process", "processes"),
    ).fit(width)


def _known_sum(values: Iterable[int | None]) -> int | None:
    """The sum of the values that are known; ``None`` when none is."""
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def problem_lines(gpu: GpuReading, width: int, height: int) -> list[Line]:
    """``LOST  the driver reports GpuIsLost...`` wrapped over ``height`` lines, so that the fix
    is read whole: the sentence where it fits, else its few words (``error_brief``), else the
    sentence cropped."""
    word = STATE_WORDS.get(gpu.state, "LOST")
    sentence = gpu.error or LOST_HINT
    lines, whole = _wrapped_problem(word, sentence, width, height)
    if not whole and gpu.error_brief:
        brief, whole = _wrapped_problem(word, gpu.error_brief, width, height)
        if whole:
            lines = brief
    return lines


def _wrapped_problem(word: str, text: str, width: int, height: int) -> tuple[list[Line], bool]:
    """``word`` then ``text`` wrapped under itself over ``height`` lines of ``width`` cells,
    and whether it all fitted (else the last line is cropped)."""
    indent = len(word) + len(GAP)
    lines = [Line((word, f"bold {HOT}"), GAP)]
    for part in text.split():
        line = lines[-1]
        gap = 0 if line.width == indent else 1
        if line.width + gap + cell_len(part) > width and len(lines) < height:
            lines.append(Line(" " * indent))
            line, gap = lines[-1], 0
        line.add(" " * gap + part, LABEL)
    whole = lines[-1].width <= width
    lines += [Line() for _ in range(height - len(lines))]
    return [line.fit(width) for line in lines[:height]], whole


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
    """A GPU card's four lines under its title: utilization and memory gauges with sparklines,
    temperature, power, clocks and fan, then :func:`link_line` (in MIG mode, where NVML lists
    them, the MIG devices instead)."""
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
        stat_cells(gpu, ("temp", "power", "sm", "mem_clock", "fan"), width).fit(width),
        (
            mig_line(gpu.mig_devices, width)
            if gpu.mig_mode and gpu.mig_devices is not None
            else link_line(gpu, width)
        ),
    ]


def link_line(gpu: GpuReading, width: int) -> Line:
    """A card's PCIe throughput and link, memory bandwidth use and energy, then
    :func:`extra_cells` (the columns that no longer fit give way)."""
    keys = ("pcie", "link", "membw", "energy")
    extra = extra_cells(gpu)
    if not extra.width:
        return stat_cells(gpu, keys, width).fit(width)
    line = stat_cells(gpu, keys, width - len(GAP) - extra.width)
    return line.add(GAP if line.width else "").extend(extra).fit(width)


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
    """A whole card: its title rule, then its lines."""
    return [card_title_line(gpu, width), *gpu_card_lines(gpu, util_history, memory_history, width)]


def side_by_side(blocks: Sequence[Sequence[Line]], width: int) -> list[Line]:
    """Blocks of lines (each ``width`` cells) joined left to right with ``CARD_GAP``, a
    shorter block padded with blank lines."""
    height = max((len(block) for block in blocks), default=0)
    blank = Line(" " * width)
    return [
        join((block[y] if y < len(block) else blank for block in blocks), CARD_GAP)
        for y in range(height)
    ]


def gpu_name_cell(gpu: GpuReading, width: int) -> Line:
    """``0 H100 80GB HBM3`` fitted to ``width`` cells (its first word with a digit only, if
    need be), the label (:func:`gpu_label`) bold."""
    label, name = gpu_label(gpu), short_name(gpu.name)
    if len(label) + 1 + cell_len(name) > width:  # the model's number alone: RX 7900 XTX -> 7900
        words = name.split(" ")
        name = next((word for word in words if any(c.isdigit() for c in word)), words[0])
    index_style = f"bold reverse {HOT}" if health_problems(gpu) else "bold"
    return Line((label, index_style), " ", name).fit(width)


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
    keys = ("temp", "power", "sm", "fan", "pcie", "pstate", "mem_clock_now", "link")
    second.extend(stat_cells(gpu, keys, room - 13 - len(GAP)))
    return [first.fit(width), second.fit(width)]


def gpu_one_line(gpu: GpuReading, util_history: Sequence[float | None], width: int) -> Line:
    """One line for one GPU: name, utilization, memory, then the stats that fit, aligned."""
    name_width = 18 if width >= 120 else 7
    room = width - name_width - 1
    line = gpu_name_cell(gpu, name_width).add(" ")
    if gpu.state is not GpuState.OK:
        return line.extend(problem_lines(gpu, room, 1)[0]).fit(width)
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


def area_title(driver: str | None, cuda: str | None, gpus: Sequence[GpuReading]) -> str:
    """:func:`nvml_title` for NVIDIA's GPUs alone; else each vendor counted: ``AMD · 8 GPUs``,
    ``GPUs · 2 NVIDIA, 8 AMD, 1 lost · driver 550.54.15 · CUDA 12.4``."""
    vendors = [vendor for vendor in Vendor if any(gpu.vendor is vendor for gpu in gpus)]
    if vendors in ([], [Vendor.NVIDIA]):
        return nvml_title(driver, cuda, len(gpus), gpus)
    if len(vendors) == 1:
        parts = [VENDOR_NAMES[vendors[0]], fmt_counted(len(gpus), "GPU")]
    else:
        counts = (f"{sum(g.vendor is v for g in gpus)} {VENDOR_NAMES[v]}" for v in vendors)
        parts = ["GPUs", ", ".join(counts)]
    for state, word in STATE_WORDS.items():
        if found := sum(gpu.state is state for gpu in gpus):
            parts[1] += f", {found} {word.lower()}"
    if Vendor.NVIDIA in vendors:
        parts += [f"driver {driver}" if driver else "", f"CUDA {cuda}" if cuda else ""]
    return " · ".join(part for part in parts if part)


def stale_tag(age_s: float) -> str:
    """How old the readings on screen are: ``stale 4s``, ``stale 2m30s``, ``stale 1h05m``."""
    seconds = int(max(age_s, 0.0))
    if seconds < 60:
        return f"stale {seconds}s"
    if seconds < 3600:
        return f"stale {seconds // 60}m{seconds % 60:02d}s"
    return f"stale {seconds // 3600}h{seconds % 3600 // 60:02d}m"
