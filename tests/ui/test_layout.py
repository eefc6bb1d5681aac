"""How the monitor splits its room, as a pure function of size and counts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputui.ui.monitor.layout import (
    CARD_HEIGHT,
    MPS_HEIGHT,
    PROCESS_MIN_HEIGHT,
    RUNNER_BESIDE_WIDTH,
    RUNNER_BRIEF_HEIGHT,
    GpuMode,
    Panes,
    plan_layout,
    plan_panes,
)

FOOTER = 1


def fits(plan_height: int, cpu_height: int, screen_height: int) -> bool:
    monitor = screen_height - FOOTER
    return cpu_height + plan_height + MPS_HEIGHT + PROCESS_MIN_HEIGHT <= monitor


@pytest.mark.parametrize(
    ("size", "gpus", "cores", "mode", "columns"),
    [
        ((80, 24), 8, 16, GpuMode.ONE_LINE, 1),
        ((80, 24), 4, 16, GpuMode.TWO_LINE, 1),
        ((80, 24), 2, 16, GpuMode.CARDS, 1),
        ((80, 24), 1, 256, GpuMode.CARDS, 1),
        ((100, 30), 8, 16, GpuMode.TWO_LINE, 1),
        ((120, 40), 4, 16, GpuMode.CARDS, 2),
        ((160, 50), 8, 16, GpuMode.CARDS, 2),
        ((160, 50), 2, 16, GpuMode.CARDS, 2),
        ((200, 60), 8, 64, GpuMode.CARDS, 3),
        ((200, 60), 4, 64, GpuMode.CARDS, 2),  # 2x2 rather than 3+1
    ],
)
def test_plan_picks_the_roomiest_form_that_fits(
    size: tuple[int, int], gpus: int, cores: int, mode: GpuMode, columns: int
) -> None:
    width, height = size
    plan = plan_layout(width, height - FOOTER, cores=cores, gpu_count=gpus)
    assert (plan.gpu_mode, plan.gpu_columns) == (mode, columns)
    assert fits(plan.gpu_height, plan.cpu_height, height)


def test_eight_gpus_at_80x24_each_get_a_line() -> None:
    plan = plan_layout(80, 23, cores=16, gpu_count=8)
    assert plan.gpu_height == 2 + 8
    assert plan.cpu_height == 5
    assert not plan.cpu_grid


def test_cards_need_their_full_height() -> None:
    plan = plan_layout(160, 49, cores=16, gpu_count=8)
    assert plan.gpu_height == 2 + 4 * CARD_HEIGHT


def test_roomy_screens_get_a_bar_per_core() -> None:
    assert plan_layout(200, 59, cores=64, gpu_count=8).cpu_grid
    assert not plan_layout(80, 23, cores=64, gpu_count=8).cpu_grid
    assert not plan_layout(200, 59, cores=1024, gpu_count=8).cpu_grid  # too many: strip


def test_many_cores_wrap_the_strip() -> None:
    plan = plan_layout(80, 23, cores=256, gpu_count=0)
    assert plan.cpu_height == 2 + 2 + 4


def test_sentence_instead_of_gpus() -> None:
    plan = plan_layout(80, 23, cores=16, gpu_count=None, message_length=110)
    assert plan.gpu_mode is GpuMode.MESSAGE
    assert plan.gpu_height == 2 + 2  # wraps to two lines at 76 cells
    assert plan_layout(80, 23, cores=0, gpu_count=0).gpu_height == 3


@given(
    width=st.integers(min_value=40, max_value=320),
    height=st.integers(min_value=12, max_value=120),
    gpus=st.integers(min_value=1, max_value=16),
    cores=st.integers(min_value=0, max_value=512),
)
def test_any_size_gets_a_sane_plan(width: int, height: int, gpus: int, cores: int) -> None:
    plan = plan_layout(width, height, cores=cores, gpu_count=gpus)
    assert plan.gpu_height >= 3
    assert plan.cpu_height >= 5
    assert 1 <= plan.gpu_columns <= gpus
    if plan.gpu_mode is not GpuMode.ONE_LINE:
        assert plan.cpu_height + plan.gpu_height + MPS_HEIGHT + PROCESS_MIN_HEIGHT <= height


@pytest.mark.parametrize(
    ("width", "wanted", "monitor", "runner"),
    [
        (RUNNER_BESIDE_WIDTH, None, True, True),
        (RUNNER_BESIDE_WIDTH, True, True, True),
        (RUNNER_BESIDE_WIDTH, False, True, False),
        (RUNNER_BESIDE_WIDTH - 1, None, True, False),
        (RUNNER_BESIDE_WIDTH - 1, True, False, True),
        (RUNNER_BESIDE_WIDTH - 1, False, True, False),
    ],
)
def test_panes_keep_the_users_choice_at_any_width(
    width: int, wanted: bool | None, monitor: bool, runner: bool
) -> None:
    panes = plan_panes(width, wanted)
    assert (panes.monitor, panes.runner) == (monitor, runner)


@pytest.mark.parametrize(
    ("width", "wanted", "panes"),
    [
        (RUNNER_BESIDE_WIDTH, None, Panes(monitor=True, runner=True)),
        (RUNNER_BESIDE_WIDTH - 1, None, Panes(monitor=True, runner=True, under=True)),
        (RUNNER_BESIDE_WIDTH - 1, False, Panes(monitor=True, runner=True, under=True)),
        (RUNNER_BESIDE_WIDTH - 1, True, Panes(monitor=False, runner=True)),
    ],
)
def test_a_gpu_less_box_s_runner_sits_under_its_monitor_on_narrow_screens(
    width: int, wanted: bool | None, panes: Panes
) -> None:
    assert plan_panes(width, wanted, gpu_less=True) == panes


@pytest.mark.parametrize("wanted", [None, False])
def test_a_narrow_screen_s_monitor_has_the_runner_s_brief_under_it(wanted: bool | None) -> None:
    assert plan_panes(RUNNER_BESIDE_WIDTH - 1, wanted).brief
    assert not plan_panes(RUNNER_BESIDE_WIDTH - 1, True).brief  # the runner alone
    assert not plan_panes(RUNNER_BESIDE_WIDTH, wanted).brief  # beside it, or hidden


def test_the_runner_s_brief_is_a_box_where_rows_are_to_spare_else_a_line() -> None:
    """Beside the GPUs' roomiest form: at 120x40 a box; at 80x24 a line, in the process
    table's second row (two GPUs stay cards); none where even that is not there."""
    roomy = plan_layout(120, 39, cores=16, gpu_count=2, brief=True)
    assert roomy.brief_height == RUNNER_BRIEF_HEIGHT
    assert roomy.rows_needed + PROCESS_MIN_HEIGHT <= 39
    tight = plan_layout(80, 23, cores=16, gpu_count=2, brief=True)
    assert (tight.gpu_mode, tight.brief_height) == (GpuMode.CARDS, 1)
    assert tight.rows_needed + PROCESS_MIN_HEIGHT - 1 == 23
    assert plan_layout(80, 23, cores=16, gpu_count=8, brief=True).brief_height == 1
    assert plan_layout(20, 11, cores=16, gpu_count=2, brief=True).brief_height == 0
    assert plan_layout(120, 39, cores=16, gpu_count=2).brief_height == 0


def test_a_plan_that_does_not_fit_says_so_and_by_how_much() -> None:
    small = plan_layout(20, 5, cores=16, gpu_count=2)
    assert not small.fits and small.rows_needed == 11  # CPU 6, two GPU lines 4, MPS 1
    assert plan_layout(20, 11, cores=16, gpu_count=2).fits
    assert plan_layout(80, 23, cores=16, gpu_count=8).fits
    assert not plan_layout(80, 3, cores=16, gpu_count=None, message_length=40).fits
