"""How the monitor splits its room, and which of it and the runner pane are on screen: pure
functions of sizes and counts.

The CPU panel and the GPU area get the heights they need; the process table takes what is
left (at least ``PROCESS_MIN_HEIGHT``), the MPS line under it. The GPU area picks the roomiest
form that fits: a grid of cards, two lines a GPU, or one line a GPU (eight GPUs at 80x24),
scrolling if even that is too tall.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum

from gputui.ui.render.cpu import core_grid_columns, core_strip_rows
from gputui.ui.render.gpu import CARD_LINES

BORDER_ROWS = 2
"""A bordered panel's top and bottom border."""
BORDER_COLUMNS = 4
"""A bordered panel's side borders plus one cell of padding each side."""
MPS_HEIGHT = 1
"""The MPS line."""
PROCESS_MIN_HEIGHT = 5
"""The process table's border, header and two rows (one beside the runner's brief line,
where nothing else is left)."""
CARD_HEIGHT = 1 + CARD_LINES
"""A GPU card: its title rule and its lines."""
CARD_MIN_WIDTH = 56
"""Narrowest a GPU card gets before the grid drops a column."""
CARD_GUTTER = 2
"""Cells between two columns of cards."""
TWO_LINE_MIN_WIDTH = 70
"""Narrowest inner width at which the two-line form still fits both gauges."""
ROOMY_MIN_HEIGHT = 40
"""From this height the CPU panel shows a bar per core instead of a strip."""
ROOMY_MAX_GRID_ROWS = 8
"""More rows of per-core bars than this and the CPU panel stays a strip."""
RUNNER_BESIDE_WIDTH = 150
"""From this many columns the runner pane sits beside the monitor."""
RUNNER_BRIEF_HEIGHT = 9
"""The runner's brief as a box: its border and seven lines (its state, the run's progress, a
comparison's speedup in three, each run's throughput)."""


class GpuMode(str, Enum):
    """How the GPU area draws each GPU (``message``: no GPU to draw, a sentence instead)."""

    MESSAGE = "message"
    CARDS = "cards"
    TWO_LINE = "two-line"
    ONE_LINE = "one-line"


@dataclass(frozen=True, slots=True)
class MonitorLayout:
    """Heights and forms for one size of the monitor."""

    cpu_height: int
    """Rows of the CPU panel, border included (as ``gpu_height``)."""
    cpu_grid: bool
    """True for a bar per core, False for the one-cell-per-core strip."""
    gpu_mode: GpuMode
    gpu_columns: int
    """Columns of cards (1 unless ``gpu_mode`` is ``cards``)."""
    gpu_height: int
    brief_height: int = 0
    """Rows of the runner's brief: 0 (not shown), 1 (a line) or ``RUNNER_BRIEF_HEIGHT``."""
    fits: bool = True
    """The CPU panel, the GPU area and the MPS line fit the monitor's height; when they do
    not, the monitor says the terminal is too small rather than cut the GPU area off."""

    @property
    def rows_needed(self) -> int:
        """The fewest rows the monitor needs at this width (the process table's not counted)."""
        return self.cpu_height + self.gpu_height + self.brief_height + MPS_HEIGHT


def plan_layout(
    width: int,
    height: int,
    *,
    cores: int,
    gpu_count: int | None,
    message_length: int = 0,
    brief: bool = False,
) -> MonitorLayout:
    """Split a ``width`` x ``height`` monitor column (the footer not counted) between its
    panels; the process table takes the rows left over.

    Args:
        width: Cells across the monitor column.
        height: Rows of the monitor column.
        cores: Logical cores (0 while the first host reading is on its way).
        gpu_count: GPUs to draw; ``None``: the GPU area shows a sentence instead.
        message_length: Characters of that sentence.
        brief: Show the runner's brief: a box where the process table keeps its minimum
            beside it, else a line where the table keeps a row, else none.
    """
    inner = max(width - BORDER_COLUMNS, 1)
    cpu_grid = False
    cpu_body = 2 + core_strip_rows(max(cores, 1), inner)
    if height >= ROOMY_MIN_HEIGHT and cores:
        grid_rows = math.ceil(cores / core_grid_columns(inner))
        if grid_rows <= ROOMY_MAX_GRID_ROWS:
            cpu_grid, cpu_body = True, 2 + grid_rows
    cpu_height = BORDER_ROWS + cpu_body

    mode, columns, gpu_height = _gpu_form(inner, height - cpu_height, gpu_count, message_length)
    spare = height - cpu_height - gpu_height - MPS_HEIGHT - PROCESS_MIN_HEIGHT
    brief_height = 0
    if brief and spare >= 0:  # a line may take the process table's second row
        brief_height = RUNNER_BRIEF_HEIGHT if spare >= RUNNER_BRIEF_HEIGHT else 1
    plan = MonitorLayout(cpu_height, cpu_grid, mode, columns, gpu_height, brief_height)
    return replace(plan, fits=plan.rows_needed <= height)


def _gpu_form(
    inner: int, room: int, gpu_count: int | None, message_length: int
) -> tuple[GpuMode, int, int]:
    """The GPU area's form, columns and height, in ``room`` rows less the rest's minimum."""
    if not gpu_count:
        lines = max(1, math.ceil(message_length / inner)) if message_length else 1
        return GpuMode.MESSAGE, 1, BORDER_ROWS + lines

    budget = room - MPS_HEIGHT - PROCESS_MIN_HEIGHT - BORDER_ROWS
    max_columns = max(1, (inner + CARD_GUTTER) // (CARD_MIN_WIDTH + CARD_GUTTER))
    rows = math.ceil(gpu_count / min(max_columns, gpu_count))
    columns = math.ceil(gpu_count / rows)  # balance: 4 GPUs in 3 columns -> 2x2
    if rows * CARD_HEIGHT <= budget:
        return GpuMode.CARDS, columns, BORDER_ROWS + rows * CARD_HEIGHT
    if inner >= TWO_LINE_MIN_WIDTH and 2 * gpu_count <= budget:
        return GpuMode.TWO_LINE, 1, BORDER_ROWS + 2 * gpu_count
    visible = min(gpu_count, max(budget, min(gpu_count, 3)))
    return GpuMode.ONE_LINE, 1, BORDER_ROWS + visible


@dataclass(frozen=True, slots=True)
class Panes:
    """Which of the monitor and the runner pane are on screen."""

    monitor: bool
    runner: bool
    under: bool = False
    """The runner pane sits under the monitor, which takes only the rows it needs."""
    brief: bool = False
    """The runner's brief sits under the process table, in the pane's place."""


def plan_panes(width: int, runner_wanted: bool | None, *, gpu_less: bool = False) -> Panes:
    """Show the monitor and/or the runner for a terminal ``width`` cells wide.

    From ``RUNNER_BESIDE_WIDTH`` columns the runner sits beside the monitor (unless
    hidden); narrower, the screen shows the runner alone, or the monitor with the runner's
    brief under it (on a GPU-less box, whose monitor needs a few rows, the runner itself).
    ``runner_wanted`` (the user asked for the runner, or hid it; ``None``: neither) holds
    across resizes.
    """
    if width >= RUNNER_BESIDE_WIDTH:
        return Panes(monitor=True, runner=runner_wanted is not False)
    if runner_wanted:
        return Panes(monitor=False, runner=True)
    return Panes(monitor=True, runner=gpu_less, under=gpu_less, brief=not gpu_less)
