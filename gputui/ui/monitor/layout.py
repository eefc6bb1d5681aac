"""How the monitor splits its room: a pure function of size and counts, tested on its own.

The CPU panel and the GPU area get the heights they need; the process table takes
what is left (at least ``PROCESS_MIN_HEIGHT``), and the MPS line sits under it.
The GPU area picks the roomiest form that fits:

- ``cards``: a grid of cards, a title and four lines each (utilization and
  memory gauges with sparklines, temperature, power, clock, fan, PCIe);
- ``two-line``: two lines a GPU, full width;
- ``one-line``: one line a GPU (eight GPUs at 80x24), scrolling if even that is too tall.

Which of the monitor and the runner pane are on screen is planned here too
(:func:`plan_panes`).
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
"""The process table's border, header and two rows."""
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


class GpuMode(str, Enum):
    """How the GPU area draws each GPU."""

    MESSAGE = "message"
    """No GPU to draw: a sentence (waiting, NVML unavailable, or no GPU)."""
    CARDS = "cards"
    """A grid of cards."""
    TWO_LINE = "two-line"
    """Two lines a GPU."""
    ONE_LINE = "one-line"
    """One line a GPU."""


@dataclass(frozen=True, slots=True)
class MonitorLayout:
    """Heights and forms for one size of the monitor."""

    cpu_height: int
    """Rows of the CPU panel, border included."""
    cpu_grid: bool
    """True for a bar per core, False for the one-cell-per-core strip."""
    gpu_mode: GpuMode
    """How the GPU area draws each GPU."""
    gpu_columns: int
    """Columns of cards (1 unless ``gpu_mode`` is ``cards``)."""
    gpu_height: int
    """Rows of the GPU area, border included."""
    fits: bool = True
    """The CPU panel, the GPU area and the MPS line fit the monitor's height; when they do
    not, the monitor says the terminal is too small rather than cut the GPU area off."""

    @property
    def rows_needed(self) -> int:
        """The fewest rows the monitor needs at this width: every panel but the process
        table, which takes what is left."""
        return self.cpu_height + self.gpu_height + MPS_HEIGHT


def plan_layout(
    width: int,
    height: int,
    *,
    cores: int,
    gpu_count: int | None,
    message_length: int = 0,
) -> MonitorLayout:
    """Split a ``width`` x ``height`` monitor between its panels.

    Args:
        width: Cells across the monitor column.
        height: Rows of the monitor column (the footer is not part of it).
        cores: Logical cores (0 while the first host reading is on its way).
        gpu_count: GPUs to draw; ``None`` when there are none to draw and the GPU
            area shows a sentence instead.
        message_length: Characters of that sentence.

    Returns:
        The plan; the process table takes the rows left over. Where even the panels
        other than the process table do not fit, ``fits`` is False.
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
    plan = MonitorLayout(cpu_height, cpu_grid, mode, columns, gpu_height)
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
    """The monitor column is shown."""
    runner: bool
    """The runner pane is shown."""


def plan_panes(width: int, runner_wanted: bool | None) -> Panes:
    """Show the monitor and/or the runner for a terminal ``width`` cells wide.

    From ``RUNNER_BESIDE_WIDTH`` columns the runner sits beside the monitor (unless
    hidden); narrower, the screen shows one of them. What the user asked for holds
    across resizes: a runner swapped in on a narrow screen stays on screen when the
    terminal widens, and one hidden on a wide screen stays hidden when it narrows.

    Args:
        width: Cells across the terminal.
        runner_wanted: Whether the user asked for the runner (``t``, ``r``, ``c``, ``x``)
            or hid it; ``None`` until they have done either (the width decides).
    """
    if width >= RUNNER_BESIDE_WIDTH:
        return Panes(monitor=True, runner=runner_wanted is not False)
    return Panes(monitor=not runner_wanted, runner=bool(runner_wanted))
