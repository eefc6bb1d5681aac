"""The process table's order and filter, and its selected row, without an app."""

from __future__ import annotations

from gputui.telemetry.readings import GpuProcess, Workload
from gputui.ui.monitor.process_rows import SORT_KEYS, ProcessOrder, matches, ordered, process_rows
from gputui.ui.render.processes import (
    PROCESS_COLUMNS,
    SELECTED_STYLE,
    TRAINER_STYLE,
    process_table_lines,
)
from tests.ui.fakes import GiB, gpu_reading

PROCESSES = {
    0: (
        GpuProcess(
            300,
            "bob",
            "python serve.py",
            2 * GiB,
            sm_utilization_percent=12.0,
            cpu_percent=250.0,
            rss_bytes=3 * GiB,
            elapsed_s=7200.0,
            workload=Workload(container="serve", pod="trainer", namespace="ml", pod_uid="u1"),
        ),
        GpuProcess(
            100,
            "ada",
            "python train.py",
            8 * GiB,
            "compute+graphics",
            sm_utilization_percent=3.0,
            cpu_percent=95.0,
            rss_bytes=12 * GiB,
            elapsed_s=90_000.0,
            workload=Workload(container="web", container_id="0" * 64, unit="docker-0.scope"),
        ),
        # psutil could not see it, NVML has no SM %
        GpuProcess(200, None, None, None, "graphics"),
    ),
    1: (
        GpuProcess(
            150,
            "cy",
            "Jupyter kernel",
            4 * GiB,
            sm_utilization_percent=97.0,
            cpu_percent=3.0,
            rss_bytes=GiB,
            elapsed_s=100_000.0,
            workload=Workload(slurm_job="42", slurm_step="0", unit="slurmstepd.scope"),
        ),
    ),
}
ROWS = process_rows([gpu_reading(i, processes=p) for i, p in PROCESSES.items()])


def pids(order: ProcessOrder) -> list[int]:
    return [row.process.pid for row in ordered(ROWS.values(), order)]


def test_rows_are_keyed_by_gpu_pid_and_kind() -> None:
    assert list(ROWS) == [
        "0:300:compute",
        "0:100:compute+graphics",
        "0:200:graphics",
        "1:150:compute",
    ]
    cells = ("0", "100", "C+G", "ada", "web", "8.0 GiB", "3%", "95%", "12.0 GiB", "1-01:00:00")
    assert ROWS["0:100:compute+graphics"].cells == (*cells, "python train.py")
    assert ROWS["0:200:graphics"].cells[2:] == ("G", *["n/a"] * 8)
    assert ROWS["0:300:compute"].cells[4] == "ml/trainer"  # the pod, not its container
    assert ROWS["1:150:compute"].cells[4] == "slurm 42.0"


def test_the_default_order_is_by_gpu_then_pid() -> None:
    assert pids(ProcessOrder()) == [100, 200, 300, 150]


def test_o_cycles_the_keys_and_each_has_its_natural_direction() -> None:
    order = ProcessOrder()
    seen = []
    for _ in SORT_KEYS:
        seen.append((order.key, pids(order)))
        order = order.next_key()
    assert order == ProcessOrder()  # round again
    assert seen == [
        ("gpu", [100, 200, 300, 150]),
        ("memory", [100, 150, 300, 200]),  # largest first; unknown memory last
        ("sm", [150, 300, 100, 200]),  # the busiest first; unknown SM % last
        ("cpu", [300, 100, 150, 200]),  # the busiest on the host first
        ("host_memory", [100, 300, 150, 200]),  # the largest resident set first
        ("elapsed", [150, 100, 300, 200]),  # the oldest first
        ("pid", [100, 150, 200, 300]),
        ("user", [100, 300, 150, 200]),  # ada, bob, cy; unknown user last
        ("job", [300, 150, 100, 200]),  # ml/trainer, slurm 42.0, web; none last
        ("command", [150, 300, 100, 200]),  # any case: Jupyter, python serve, python train
        ("type", [300, 150, 100, 200]),  # compute, compute+graphics, graphics
    ]


def test_every_column_is_a_sort_key_and_each_key_a_column() -> None:
    assert sorted(SORT_KEYS) == sorted(column.key for column in PROCESS_COLUMNS)


def test_reverse_turns_the_order_round_but_unknown_values_stay_last() -> None:
    memory = ProcessOrder("memory")
    assert pids(memory.reversed()) == [300, 150, 100, 200]
    assert memory.reversed().reversed() == memory
    assert pids(ProcessOrder().reversed()) == [150, 300, 200, 100]
    assert memory.reversed().next_key() == ProcessOrder("sm")  # a new key starts unreversed
    assert pids(ProcessOrder("sm").reversed()) == [100, 300, 150, 200]


def test_the_filter_keeps_rows_holding_the_text_in_any_cell_and_any_case() -> None:
    assert pids(ProcessOrder(filter="PYTHON")) == [100, 300]
    assert pids(ProcessOrder(filter="n/a")) == [200]  # as shown: unknown cells read n/a
    assert pids(ProcessOrder(filter="150")) == [150]
    assert pids(ProcessOrder("memory", filter="python")) == [100, 300]
    assert pids(ProcessOrder(filter="nothing like it")) == []
    assert matches(ROWS["1:150:compute"], "jupyter")
    assert pids(ProcessOrder(filter="c+g")) == [100]
    assert pids(ProcessOrder(filter="SLURM 42")) == [150]  # the job column too
    assert pids(ProcessOrder(filter="ml/")) == [300]


def test_the_subtitle_says_the_filter_only_the_sort_is_in_the_heading() -> None:
    assert ProcessOrder().describe(4, 4) is None
    assert ProcessOrder("memory", reverse=True).describe(4, 4) is None
    assert ProcessOrder("pid", filter="py\n").describe(2, 4) == "filter 'py\\n': 2 of 4"


def test_the_selected_row_is_drawn_as_a_cursor_even_on_the_trainer() -> None:
    cells = [row.cells for row in ordered(ROWS.values(), ProcessOrder())]
    lines = process_table_lines(cells, 80, "100", None, (), 0)
    assert {style for _, style in lines[1].parts} == {SELECTED_STYLE}
    lines = process_table_lines(cells, 80, "100", None, (), 2)
    assert {style for _, style in lines[1].parts} == {TRAINER_STYLE}
    assert {style for _, style in lines[3].parts} == {SELECTED_STYLE}
    assert all(SELECTED_STYLE not in {s for _, s in line.parts} for line in lines[:3])
