"""The pure renderers, without an app: exact widths, n/a for None, aligned columns."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputui.commands.snapshot import render_snapshot_table
from gputui.format import NA, fmt_link_rate
from gputui.telemetry.nvml.calls import UNKNOWN, describe_handle_error
from gputui.telemetry.readings import (
    GpuProcess,
    GpuState,
    MigDeviceReading,
    MpsReading,
    NvlinkThroughput,
    Snapshot,
    Workload,
)
from gputui.ui.render.cpu import (
    core_grid,
    core_grid_columns,
    core_strip,
    core_strip_rows,
    cpu_memory_line,
    cpu_summary_line,
    cpu_title,
    fmt_clock,
)
from gputui.ui.render.draw import HOT, OK, WARM, Line, bar, gauge_line, level_style, sparkline
from gputui.ui.render.gpu import (
    CARD_LINES,
    LOST_HINT,
    STAT_COLUMNS,
    card_title_line,
    extra_cells,
    gpu_card_lines,
    gpu_one_line,
    gpu_title,
    gpu_two_lines,
    mig_line,
    nvml_title,
    short_name,
    stale_tag,
    stat_cells,
)
from gputui.ui.render.mps import mps_line
from gputui.ui.render.processes import process_cells, process_table_lines, process_table_title
from tests.ui.fakes import (
    GiB,
    cpu_reading,
    gpu_reading,
    lost_gpu,
    nvml_reading,
    unsupported_gpu,
)

HISTORY = [float(v) for v in range(0, 100, 5)]


def test_line_fits_pads_crops_and_compares() -> None:
    line = Line(("abc", OK), "def")
    assert (line.plain, line.cell_length) == ("abcdef", 6)
    assert Line(("abc", OK), "def").fit(8).plain == "abcdef  "
    cropped = Line(("abc", OK), "def").fit(4)
    assert (cropped.plain, cropped.cell_length) == ("abc…", 4)
    assert cropped.styled() == [("abc", OK)]
    assert Line("°C ▁█").cell_length == 5
    assert Line("ab", ("c", OK)) == Line("ab", ("c", OK))
    assert Line(("abc", OK)) != Line("abc")  # same text, another colour: a change to paint
    assert Line(("x", OK)).content().spans[0].style == OK


@pytest.mark.parametrize("percent", [None, -5.0, 0.0, 0.6, 33.3, 50.0, 99.9, 100.0, 250.0])
@pytest.mark.parametrize("width", [1, 2, 8, 21])
def test_bar_is_exactly_width_cells(percent: float | None, width: int) -> None:
    assert bar(percent, width).cell_length == width


def test_bar_fills_in_eighths_and_clamps() -> None:
    assert bar(50.0, 8).plain == "████····"
    assert bar(100.0, 4).plain == "████"
    assert bar(250.0, 4).plain == "████"
    assert bar(-3.0, 4).plain == "····"
    assert bar(1 / 16 * 100, 2).plain == "▏·"  # one eighth of two cells
    assert bar(None, 5).plain == "·····"
    assert bar(10.0, 0).plain == ""


def test_bar_colour_follows_level() -> None:
    assert ("██", OK) in bar(50.0, 4).styled()
    assert ("███", WARM) in bar(75.0, 4).styled()
    assert ("████", HOT) in bar(100.0, 4).styled()
    assert level_style(None) != OK


def test_sparkline_newest_on_the_right_padded_left() -> None:
    line = sparkline([0.0, 50.0, 100.0], 5)
    assert line.plain == "  ▁▄█"
    assert sparkline([None, 100.0], 2).plain == " █"
    assert sparkline(HISTORY, 4).plain == sparkline(HISTORY[-4:], 4).plain
    assert sparkline([150.0, -1.0], 2).plain == "█▁"
    assert sparkline(HISTORY, 0).plain == ""


@given(
    values=st.lists(st.none() | st.floats(allow_nan=False, allow_infinity=False), max_size=50),
    width=st.integers(min_value=1, max_value=60),
)
def test_sparkline_width_for_any_history(values: list[float | None], width: int) -> None:
    assert sparkline(values, width).cell_length == width


@pytest.mark.parametrize("width", [12, 20, 40, 77, 150])
def test_gauge_line_is_exactly_width(width: int) -> None:
    assert gauge_line("GPU", 42.0, width, spark=HISTORY).cell_length == width
    assert gauge_line("MEM", None, width, detail="n/a / n/a").cell_length == width


def test_gauge_line_shows_percent_sparkline_and_detail() -> None:
    line = gauge_line("MEM", 76.4, 60, spark=[100.0] * 60, detail="61.2/80.0 GiB").plain
    assert line.startswith("MEM ")
    assert " 76% " in line
    assert "█" * 5 in line
    assert line.endswith("61.2/80.0 GiB")
    assert "n/a" in gauge_line("GPU", None, 30).plain


def test_cpu_lines_show_reading_and_na() -> None:
    cpu = cpu_reading(37.5)
    summary = cpu_summary_line(cpu, 100, HISTORY).plain
    assert "38%" in summary
    assert "load 3.42 2.91 2.05" in summary
    assert "clock 2.45/3.50 GHz" in summary
    memory = cpu_memory_line(cpu, 100).plain
    assert "41.3/125.7 GiB" in memory
    assert "swap 0.2/8.0 GiB" in memory
    assert "gputui 0.7% 43.0 MiB" in memory
    bare = replace(
        cpu,
        load_average=None,
        frequency_mhz=None,
        self_cpu_percent=None,
        self_rss_bytes=None,
        swap_total_bytes=0,
        swap_used_bytes=0,
    )
    assert "load n/a" in cpu_summary_line(bare, 100).plain
    assert "clock n/a" in cpu_summary_line(bare, 100).plain
    assert "gputui n/a n/a" in cpu_memory_line(bare, 100).plain
    assert "swap none" in cpu_memory_line(bare, 100).plain
    for width in (40, 76, 196):
        assert cpu_summary_line(cpu, width).cell_length == width
        assert cpu_memory_line(cpu, width).cell_length == width


def test_cpu_title() -> None:
    assert cpu_title(None) == "CPU"
    assert cpu_title(cpu_reading()) == "CPU · AMD EPYC 7763 64-Core Processor · 16 threads, 8 cores"
    assert cpu_title(cpu_reading(model_name=None, physical_cores=None)) == "CPU · 16 threads"
    one = cpu_reading(model_name=None, cores=1, physical_cores=1)
    assert cpu_title(one) == "CPU · 1 thread, 1 core"


def test_a_reading_has_one_name_in_the_monitor_and_the_snapshot() -> None:
    """Issue 18: ``mem bw`` here was ``memory util`` there, ``16 threads, 8 cores`` here was
    ``16 logical, 8 physical`` there, and ``clock 2.45/3.50 GHz`` was ``frequency 2450 MHz
    (max 3500 MHz)``."""
    gpu = gpu_reading(0)
    not_a_mac = MpsReading(False, "not a Mac")
    snapshot = Snapshot(cpu=cpu_reading(), nvml=nvml_reading([gpu]), mps=not_a_mac)
    table = render_snapshot_table(snapshot)
    cores = cpu_title(cpu_reading()).rpartition(" · ")[2]
    assert cores == "16 threads, 8 cores"
    assert f"CPUs          {cores}" in table and "logical" not in table
    assert f"clock         {fmt_clock(cpu_reading())}" in table  # 2.45/3.50 GHz
    label = STAT_COLUMNS["membw"].label
    assert f"{label} " in stat_cells(gpu, ("membw",), 20).plain
    assert f"{label}  " in table and "memory util" not in table


def test_core_strip_wraps_and_counts_rows() -> None:
    lines = core_strip([0.0, 50.0, 100.0] * 10, 12)
    assert [line.cell_length for line in lines] == [12, 12, 6]
    assert lines[0].plain[:3] == "▁▄█"
    assert core_strip_rows(30, 18) == 3  # 12 cells after the "cores " label
    assert core_strip_rows(256, 76) == 4


def test_core_grid_lays_cores_in_columns() -> None:
    per_core = [float(i * 6) for i in range(16)]
    columns = core_grid_columns(156)
    lines = core_grid(per_core, 156)
    assert len(lines) == -(-16 // columns)
    assert all(line.cell_length <= 156 for line in lines)
    assert lines[0].plain.lstrip().startswith("0 ")
    assert lines[1].plain.lstrip().startswith(f"{columns} ")
    assert "90%" in lines[-1].plain


def test_short_name_and_titles() -> None:
    assert short_name("NVIDIA H100 80GB HBM3") == "H100 80GB HBM3"
    assert short_name("NVIDIA GeForce RTX 4090") == "RTX 4090"
    assert short_name("Tesla T4") == "Tesla T4"
    assert gpu_title(gpu_reading(0)) == "0 · NVIDIA H100 80GB HBM3 · P0"
    assert gpu_title(lost_gpu(3)) == "3 · NVIDIA H100 80GB HBM3 · LOST"
    assert gpu_title(unsupported_gpu(1)) == "1 · NVIDIA GeForce GT 710"  # no bare "· n/a"
    assert nvml_title("550.54.15", "12.4", 8) == "NVIDIA · 8 GPUs · driver 550.54.15 · CUDA 12.4"
    assert nvml_title(None, None, 1) == "NVIDIA · 1 GPU"
    assert stale_tag(4.9) == "stale 4s"
    assert stale_tag(150) == "stale 2m30s"
    assert stale_tag(3900) == "stale 1h05m"


def test_link_rate_keeps_three_digits() -> None:
    assert fmt_link_rate(2.1e9) == "2.0 GiB/s"
    assert fmt_link_rate(3.3e8) == "315 MiB/s"
    assert fmt_link_rate(0.0) == "0 B/s"
    assert fmt_link_rate(None) == "n/a"


def test_card_lines_show_every_reading() -> None:
    lines = [line.plain for line in gpu_card_lines(gpu_reading(0), HISTORY, HISTORY, 77)]
    assert len(lines) == CARD_LINES
    assert all(len(line) == 77 for line in lines)
    assert lines[0].startswith("GPU ") and " 92% " in lines[0]
    assert lines[1].startswith("MEM ") and lines[1].endswith("61.2/80.0 GiB")
    assert "71°C" in lines[2]
    assert "pwr 612/700 W" in lines[2]
    assert "sm 1980/1980 MHz  mem 2619/2619 MHz" in lines[2]
    assert "fan n/a" in lines[2]  # passively cooled: no fan reading
    assert "PCIe rx 2.0 GiB/s tx 315 MiB/s    Gen5/5 x16/16" in lines[3]
    assert "mem bw 46%" in lines[3]
    assert lines[3].rstrip().endswith("energy 1.23 MJ")  # since the monitor started


def mig_device(index: int, gi: int | None, used_gib: float, processes: int) -> MigDeviceReading:
    return MigDeviceReading(
        index=index,
        gpu_instance_id=gi,
        compute_instance_id=0,
        memory_used_bytes=int(used_gib * GiB),
        memory_total_bytes=10 * GiB,
        processes=tuple(GpuProcess(100 + i, "ada", "python", GiB) for i in range(processes)),
    )


def test_a_mig_gpu_s_card_shows_a_cell_per_mig_device_where_they_fit() -> None:
    devices = (mig_device(0, 1, 4.1, 2), mig_device(1, 2, 0.0, 0), mig_device(2, None, 9.5, 1))
    gpu = replace(gpu_reading(0), mig_mode=True, mig_devices=devices)
    lines = [line.plain for line in gpu_card_lines(gpu, HISTORY, HISTORY, 77)]
    assert len(lines) == CARD_LINES and all(len(line) == 77 for line in lines)
    assert lines[3].rstrip() == (
        "MIG gi/ci  1/0 4.1/10.0 GiB 2p  2/0 0.0/10.0 GiB  n/a/0 9.5/10.0 GiB 1p"
    )
    assert "PCIe" not in lines[3]  # the MIG devices take the PCIe line's place


def test_mig_devices_that_do_not_fit_are_summed_up() -> None:
    devices = tuple(mig_device(i, i + 1, 1.5, i % 2) for i in range(7))
    line = mig_line(devices, 77)
    assert line.width == 77
    assert line.plain.rstrip() == "MIG  7 devices · 10.5/70.0 GiB · 3 processes"
    assert mig_line((), 40).plain.rstrip() == "MIG  no MIG devices"
    unknown = replace(devices[0], memory_used_bytes=None, memory_total_bytes=None)
    assert "n/a / n/a" in mig_line((unknown,) * 7, 60).plain


def test_a_mig_gpu_whose_devices_are_unknown_keeps_its_pcie_line() -> None:
    gpu = replace(gpu_reading(0), mig_mode=True, mig_devices=None)
    assert gpu_card_lines(gpu, HISTORY, HISTORY, 77)[3].plain.startswith("PCIe rx")
    assert " · MIG" in card_title_line(gpu, 77).plain


def test_energy_is_shown_where_room_allows_and_n_a_where_unknown() -> None:
    narrow = gpu_card_lines(gpu_reading(0), HISTORY, HISTORY, 50)[3].plain
    assert "PCIe" in narrow and "energy" not in narrow  # the quiet tally gives way first
    unknown = gpu_card_lines(replace(gpu_reading(0), energy_joules=None), (), (), 77)[3].plain
    assert "energy n/a" in unknown


@pytest.mark.parametrize("width", [76, 56])
def test_a_card_shows_the_memory_clock_and_pcie_link_whole(width: int) -> None:
    """At 80 and 160 columns (the runner beside) a card is 76 cells; two columns of cards
    are at least 56 each: a column that does not fit is dropped whole, never cut."""
    idle = replace(gpu_reading(0), memory_clock_mhz=10501.0, memory_clock_max_mhz=10501.0)
    idle = replace(idle, pcie_link_gen=1, pcie_link_gen_max=4)  # a GeForce's GDDR6X, idle
    lines = [line.plain for line in gpu_card_lines(idle, HISTORY, HISTORY, width)]
    assert not any(line.rstrip().endswith("…") for line in lines)
    assert "Gen1/4 x16/16" in lines[3]
    assert ("mem 10501/10501 MHz" in lines[2]) == (width == 76)


def test_two_lines_a_gpu_show_the_memory_clock_and_link_where_room_allows() -> None:
    wide = gpu_two_lines(gpu_reading(0), HISTORY, HISTORY, 156)[1].plain
    assert "mem 2619 MHz" in wide and "Gen5/5 x16/16" in wide and "P0" in wide
    narrow = gpu_two_lines(gpu_reading(0), HISTORY, HISTORY, 76)[1].plain
    assert "mem" not in narrow.split() and "Gen" not in narrow and "fan n/a" in narrow


def test_unsupported_fields_read_na_everywhere() -> None:
    gpu = unsupported_gpu(2)
    card = " ".join(line.plain for line in gpu_card_lines(gpu, (), (), 77))
    for text in ("GPU", "n/a", "pwr n/a", "sm n/a", "mem n/a", "fan n/a", "PCIe n/a", "mem bw n/a"):
        assert text in card
    link = gpu_card_lines(gpu, (), (), 77)[3].plain.split()[:3]
    assert link == ["PCIe", "n/a", "n/a"]  # the throughput, then the link
    assert "n/a" in gpu_one_line(gpu, (), 76).plain
    assert "n/a" in gpu_two_lines(gpu, (), (), 96)[1].plain


def test_lost_gpu_says_lost_in_every_form() -> None:
    gpu = lost_gpu(1)
    assert gpu_card_lines(gpu, HISTORY, HISTORY, 77)[0].plain.startswith("LOST  the driver")
    assert "LOST" in gpu_one_line(gpu, HISTORY, 76).plain
    assert "LOST" in gpu_two_lines(gpu, HISTORY, HISTORY, 96)[0].plain
    assert "GpuIsLost" in LOST_HINT


@pytest.mark.parametrize("width", [60, 76, 96, 116, 196])
def test_one_and_two_line_forms_are_exact_width_and_aligned(width: int) -> None:
    busy, idle = gpu_reading(4), gpu_reading(7)  # 100% / 698 W vs 0% / 69 W
    one = [gpu_one_line(gpu, HISTORY, width).plain for gpu in (busy, idle)]
    assert [len(line) for line in one] == [width, width]
    assert one[0].index("MEM") == one[1].index("MEM")
    assert one[0].index("°C") == one[1].index("°C")
    two = [gpu_two_lines(gpu, HISTORY, HISTORY, width) for gpu in (busy, idle)]
    assert all(line.cell_length == width for pair in two for line in pair)
    assert two[0][1].plain.index("°C") == two[1][1].plain.index("°C")


def test_one_line_at_80_columns_has_the_essentials() -> None:
    line = gpu_one_line(gpu_reading(0), HISTORY, 76).plain
    assert line.startswith("0 H100")
    for text in ("GPU", "92%", "MEM", "61.2/80.0 GiB", "71°C", "612 W"):
        assert text in line


def test_stat_columns_depend_on_width_not_values() -> None:
    keys = ("temp", "power", "sm", "fan", "pcie")
    a = stat_cells(gpu_reading(4), keys, 60).plain
    b = stat_cells(unsupported_gpu(1), keys, 60).plain
    assert len(a) == len(b)
    assert a.index("pwr") == b.index("pwr")
    assert "PCIe" not in a  # the column that does not fit is dropped, whole
    assert stat_cells(gpu_reading(0), keys, 0).plain == ""


def test_process_cells_are_plain_strings_with_na() -> None:
    process = GpuProcess(pid=7, user=None, command=None, gpu_memory_bytes=None)
    assert process_cells("3", process) == ("3", "7", "C", *["n/a"] * 8)
    long = GpuProcess(pid=8, user="ada", command="x" * 500, gpu_memory_bytes=2 * GiB)
    used = dict(cpu_percent=412.6, rss_bytes=GiB // 2, elapsed_s=3 * 3600 + 7 * 60 + 5.9)
    cells = process_cells("0", replace(long, sm_utilization_percent=87.4, kind="graphics", **used))
    assert cells[2:10] == ("G", "ada", "n/a", "2.0 GiB", "87%", "413%", "512.0 MiB", "3:07:05")
    assert len(cells[10]) == 200 and cells[10].endswith("…")


POD_UID = "1a2b3c4d-5e6f-4a1b-8c9d-0e1f2a3b4c5d"


@pytest.mark.parametrize(
    ("workload", "shown"),
    [
        (
            Workload(slurm_job="1234", slurm_step="batch", unit="slurmstepd.scope"),
            "slurm 1234.batch",
        ),
        (Workload(slurm_job="1234"), "slurm 1234"),
        (Workload(pod="trainer-0", pod_uid="0f1e", namespace="ml", container="c"), "ml/trainer-0"),
        (Workload(pod=POD_UID, pod_uid=POD_UID, container="0123456789ab"), "pod 1a2b3c4d"),
        (Workload(container="web", container_id="f" * 64, unit="docker-f.scope"), "web"),
        (Workload(unit="ollama.service"), "ollama.service"),
        (
            Workload(container="a-very-long-container-name-indeed-it-is"),
            "a-very-long-container-n…",
        ),
    ],
)
def test_the_job_cell_names_the_slurm_job_else_the_pod_else_the_container_else_the_unit(
    workload: Workload, shown: str
) -> None:
    cells = process_cells("0", GpuProcess(7, "ada", "python", GiB, workload=workload))
    assert cells[4] == shown


def test_mps_line() -> None:
    assert mps_line(None, 40).plain.startswith("MPS  checking")
    linux = MpsReading(supported_platform=False, message="MPS is Apple's GPU backend for Macs.")
    assert mps_line(linux, 60).plain.rstrip() == "MPS  MPS is Apple's GPU backend for Macs."
    mac = MpsReading(
        supported_platform=True,
        message=None,
        gpu_name="Apple M2 Pro",
        utilization_percent=37.0,
        memory_in_use_bytes=3 * GiB,
        torch_mps_built=True,
        torch_mps_available=True,
    )
    line = mps_line(mac, 100).plain
    for text in ("MPS Apple M2 Pro", "GPU 37%", "in use 3.0 GiB", "PyTorch MPS available"):
        assert text in line
    unknown = replace(mac, utilization_percent=None, torch_mps_available=None)
    assert "GPU n/a" in mps_line(unknown, 100).plain
    assert "PyTorch MPS n/a" in mps_line(unknown, 100).plain
    assert mps_line(mac, 30).cell_length == 30


@given(width=st.integers(min_value=1, max_value=120))
def test_process_table_lines_are_exactly_the_width_with_columns_aligned(width: int) -> None:
    rows = [
        (
            "0",
            "7",
            "C",
            "ada",
            NA,
            "1.0 GiB",
            "87%",
            "99%",
            "2.0 GiB",
            "1:02:03",
            "python train.py",
        ),
        ("10", "41000", "C+G", NA, NA, NA, NA, NA, NA, NA, "a long command " * 10),
    ]
    lines = process_table_lines(rows, width, marked_pid="41000")
    assert [line.width for line in lines] == [width] * 3
    if width >= 89:  # every column, and 24 cells for the command
        heading, first, second = (line.plain for line in lines)
        assert heading.startswith(
            "GPU    PID  Type  User  GPU mem  SM %  CPU %  Host mem  Elapsed  Command"
        )
        assert first.startswith(
            "  0      7  C     ada   1.0 GiB   87%    99%   2.0 GiB  1:02:03  python train.py"
        )
        assert second.startswith(
            " 10  41000  C+G   n/a       n/a   n/a    n/a       n/a      n/a  a long"
        )
        assert second.endswith("…")
    assert {style for _, style in lines[2].parts} == {"bold reverse"}  # the trainer's row
    assert "bold reverse" not in {style for _, style in lines[1].parts}


ROW = ("0", "7", "C", "ada", NA, "1.0 GiB", "87%", "99%", "2.0 GiB", "1:02:03", "python train.py")
"""A process table row whose job is not known."""


def test_the_sort_column_is_marked_in_the_heading() -> None:
    row = ROW
    heading = process_table_lines([row], 120, sort_key="memory", descending=True)[0].plain
    assert heading.startswith("GPU  PID  Type  User  GPU mem▼  SM %") and "▲" not in heading
    heading = process_table_lines([row], 120, sort_key="gpu")[0].plain
    assert heading.startswith("GPU▲  PID  Type") and "▼" not in heading
    assert "▲" not in process_table_lines([row], 120)[0].plain  # no sort key: no mark


@pytest.mark.parametrize(
    ("width", "sort_key", "headings"),
    [
        (88, "gpu", "GPU▲ PID Type User GPU mem SM % CPU % Host mem Elapsed Command"),
        (87, "gpu", "GPU▲ PID User GPU mem SM % CPU % Host mem Elapsed Command"),
        (80, "gpu", "GPU▲ PID User GPU mem SM % CPU % Elapsed Command"),
        (80, "host_memory", "GPU PID User GPU mem SM % CPU % Host mem▼ Command"),
        (60, "gpu", "GPU▲ PID User GPU mem SM % Command"),
        (40, "type", "GPU PID Type▲ GPU mem Command"),
    ],
)
def test_a_narrow_table_leaves_the_least_wanted_columns_out_but_the_sort_column(
    width: int, sort_key: str, headings: str
) -> None:
    row = ROW
    descending = sort_key == "host_memory"
    lines = process_table_lines([row], width, sort_key=sort_key, descending=descending)
    heading, line = (line.plain for line in lines)
    assert " ".join(heading.split()) == headings
    assert len(heading) == len(line) == width
    assert line.rstrip().endswith("python train.py") or width == 40
    assert heading.index("Command") == line.index("python")


@pytest.mark.parametrize(
    ("width", "sort_key", "headings"),
    [
        (102, "gpu", "GPU▲ PID Type User Job GPU mem SM % CPU % Host mem Elapsed Command"),
        (101, "gpu", "GPU▲ PID User Job GPU mem SM % CPU % Host mem Elapsed Command"),
        (95, "gpu", "GPU▲ PID User Job GPU mem SM % CPU % Elapsed Command"),
        (85, "gpu", "GPU▲ PID User Job GPU mem SM % CPU % Command"),
        (76, "gpu", "GPU▲ PID User GPU mem SM % CPU % Command"),
        (70, "job", "GPU PID User Job▲ GPU mem SM % Command"),
    ],
)
def test_the_job_column_shows_where_a_row_has_one_and_gives_way_after_the_host_columns(
    width: int, sort_key: str, headings: str
) -> None:
    job = (*ROW[:4], "ml/trainer-0", *ROW[5:])
    heading = process_table_lines([ROW, job], width, sort_key=sort_key)[0].plain
    assert " ".join(heading.split()) == headings


def test_the_job_column_is_left_out_where_no_row_has_one_unless_sorted_by_it() -> None:
    assert " Job " not in process_table_lines([ROW], 200)[0].plain
    assert " Job▲ " in process_table_lines([ROW], 200, sort_key="job")[0].plain


UNREACHABLE_ERROR = (
    "NVML answers Unknown Error for this GPU (often a GPU in a bad state); check `dmesg` for "
    "Xid errors, then reset it (`nvidia-smi -r -i 1`) or reboot."
)


def test_where_the_sentence_does_not_fit_its_few_words_do() -> None:
    """At 80 columns (76 cells inside) four GPUs take two lines each and eight one line:
    the fix reads whole in its few words; a card has room for the whole sentence."""
    sentence, brief = describe_handle_error(1, UNKNOWN, "Unknown Error")
    gpu = replace(lost_gpu(1), state=GpuState.UNREACHABLE, error=sentence, error_brief=brief)
    two = [line.plain for line in gpu_two_lines(gpu, [], [], 76)]
    assert two[0].split(maxsplit=2)[2] == f"UNREACHABLE  {brief}".ljust(76 - 11)
    assert two[1].strip() == ""
    one = gpu_one_line(gpu, [], 76).plain
    assert one.endswith(f"UNREACHABLE  {brief}".ljust(76 - 8)) and "…" not in one
    card = [line.plain for line in gpu_card_lines(gpu, [], [], 76)]
    assert " ".join(" ".join(card).split()) == f"UNREACHABLE {sentence}"
    lost = lost_gpu(1)  # no few words: the sentence, cut
    assert gpu_one_line(lost, [], 76).plain.endswith("…")


def test_an_unreachable_gpu_says_why_and_the_fix_in_every_layout() -> None:
    gpu = replace(lost_gpu(1), state=GpuState.UNREACHABLE, error=UNREACHABLE_ERROR)
    assert gpu_title(gpu) == "1 · NVIDIA H100 80GB HBM3 · UNREACHABLE"
    card = [line.plain for line in gpu_card_lines(gpu, [], [], 60)]
    assert len(card) == CARD_LINES and all(len(line) == 60 for line in card)
    assert card[0].startswith("UNREACHABLE  NVML answers Unknown Error")
    assert " ".join(" ".join(card).split()) == f"UNREACHABLE {UNREACHABLE_ERROR}"  # whole
    two = gpu_two_lines(gpu, [], [], 160)
    assert "UNREACHABLE" in two[0].plain and "reboot." in two[1].plain
    assert "UNREACHABLE  NVML answers" in gpu_one_line(gpu, [], 160).plain
    title = nvml_title("550.54.15", "12.4", 4, [gpu_reading(0), gpu, lost_gpu(2), gpu_reading(3)])
    assert title == "NVIDIA · 4 GPUs, 1 lost, 1 unreachable · driver 550.54.15 · CUDA 12.4"


def test_the_process_table_never_says_none_beside_unknown_processes() -> None:
    known, unknown = gpu_reading(0), replace(gpu_reading(1), processes=None)
    empty = replace(known, processes=())
    assert process_table_title(0, [empty, empty]) == "GPU processes · none"
    assert process_table_title(0, [unknown]) == "GPU processes · n/a"
    assert process_table_title(0, [empty, unknown]) == "GPU processes · 0 · n/a on GPU 1"
    assert process_table_title(2, [known, unknown]) == "GPU processes · 2 · n/a on GPU 1"


def test_a_healthy_gpu_is_quiet_and_an_unhealthy_one_loud() -> None:
    healthy = replace(
        gpu_reading(0),
        throttle_reasons=("idle",),
        ecc_uncorrected_errors=0,
        remapped_rows_pending=False,
    )
    title = card_title_line(healthy, 100)
    assert "⚠" not in title.plain and title.styled()[0][1] != f"bold {HOT}"
    sick = replace(
        healthy,
        throttle_reasons=("power cap", "thermal"),
        ecc_uncorrected_errors=3,
        remapped_rows_pending=True,
        mig_mode=True,
    )
    title = card_title_line(sick, 200)
    assert "· P0 · MIG" in title.plain
    assert (
        "⚠ throttled: power cap, thermal; 3 uncorrected ECC errors; row remap pending: "
        "reset the GPU" in title.plain
    )
    assert [style for text, style in title.styled() if "throttled" in text] == [f"bold {HOT}"]
    assert gpu_one_line(sick, [], 160).styled()[0] == ("0", f"bold reverse {HOT}")


def test_host_pids_are_said_once_in_the_process_table_title() -> None:
    gpu = gpu_reading(0)
    (process,) = gpu.processes or ()
    title = process_table_title(1, [gpu], host_pids=True)
    assert title == "GPU processes · 1 · 1 host pid (gputui is in a container's pid namespace)"
    matched = replace(gpu, processes=(replace(process, local_pid=17),))
    assert process_table_title(1, [matched], host_pids=True) == "GPU processes · 1"
    assert process_table_title(0, [replace(gpu_reading(0), processes=())], host_pids=True) == (
        "GPU processes · none"
    )


def test_a_card_s_nvlink_cell_shows_the_links_up_and_their_throughput_or_n_a() -> None:
    carried = NvlinkThroughput(
        rx_bytes=2**40, tx_bytes=2**41, rx_bytes_per_s=1.5 * GiB, tx_bytes_per_s=3 * GiB
    )
    busy = gpu_reading(0, nvlink_links_active=18, nvlink_throughput=carried)
    assert extra_cells(busy).plain == "NVLink 18 rx 1.5 GiB/s tx 3.0 GiB/s"
    unknown = gpu_reading(0, nvlink_links_active=4)
    assert extra_cells(unknown).plain == f"NVLink 4 rx {NA} tx {NA}"
    assert extra_cells(gpu_reading(0)).plain == ""  # no NVLink
    all_up = replace(busy, nvlink_links_down=())
    assert extra_cells(all_up).plain == "NVLink 18 rx 1.5 GiB/s tx 3.0 GiB/s"  # as it was


def test_a_card_s_nvlink_cell_shows_the_links_up_of_every_link_while_some_are_down() -> None:
    degraded = gpu_reading(0, nvlink_links_active=16, nvlink_links_down=(0, 17))
    cells = extra_cells(degraded)
    assert cells.plain == f"NVLink 16/18 rx {NA} tx {NA}"
    assert ("16/18", WARM) not in cells.styled()  # not wired reads the same as failed
