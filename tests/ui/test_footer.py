"""The monitor's footer keeps every key on screen from 80 columns up (Textual's own footer
cut ``/ Filter`` and ``kK Kill`` off below 96), and offers the process table's keys only
while there is a table."""

from __future__ import annotations

import pytest

from gputui.ui.monitor.app import FOOTER_FULL_FROM, FOOTER_PALETTE_FROM
from tests.ui.fakes import (
    NO_DRIVER,
    ScriptedSampler,
    SettableSampler,
    fake_app,
    footer_line,
    h100s,
    nvml_reading,
    screen_settled,
    settled,
    wait_until,
)

FOOTER_ITEMS = (
    "q Quit",
    "d Doctor",
    "? Help",
    "r Train",
    "c Compare",
    "t Runner",
    "oO Sort",
    "/ Filter",
    "TKI Kill",
)
"""What the monitor's footer shows, key then description (a group: its keys, its label)."""


@pytest.mark.parametrize(
    "widths",
    [
        (80,),
        (FOOTER_PALETTE_FROM - 1,),
        (FOOTER_PALETTE_FROM,),
        (FOOTER_FULL_FROM - 1,),
        (FOOTER_FULL_FROM,),
        (160,),
        (80, 160),  # narrow first: the palette's hint comes back on a wider screen
        (160, 80),
    ],
)
async def test_every_key_fits_the_footer(widths: tuple[int, ...]) -> None:
    app = fake_app(nvml=ScriptedSampler(h100s(8)))
    async with app.run_test(size=(widths[0], 24)) as pilot:
        for width in widths:
            await pilot.resize_terminal(width, 24)
            await screen_settled(pilot)
        width = widths[-1]
        footer = footer_line(app)
        missing = [item for item in FOOTER_ITEMS if item not in footer]
        assert not missing, f"cut from the footer at {width} columns: {missing} in {footer!r}"
        assert ("^p palette" in footer) == (width >= FOOTER_PALETTE_FROM), footer
        assert app.query_one("FittingFooter").compact == (width < FOOTER_FULL_FROM)


async def test_the_footer_offers_the_process_tables_keys_only_while_it_shows() -> None:
    """Issue 43: with no GPU to list (the NVIDIA driver gone), no key points at a missing
    table, in the footer or when pressed (``T`` said "the arrow keys move through the GPU
    process table"); the keys come back with the table."""
    nvml = SettableSampler(h100s(2))
    app = fake_app(nvml=nvml, interval=0.25)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await wait_until(pilot, lambda: "TKI Kill" in footer_line(app))
        nvml.reading = nvml_reading(status=NO_DRIVER)
        await wait_until(pilot, lambda: not app.monitor.process_table.display)
        await wait_until(pilot, lambda: "Sort" not in footer_line(app))
        footer = footer_line(app)
        assert "q Quit" in footer and "? Help" in footer and "t Runner" in footer, footer
        assert not any(label in footer for label in ("Filter", "Kill")), footer
        await pilot.press("T", "K", "I", "o")
        await pilot.pause()
        assert not app._notifications and app.screen is app.screen_stack[0]
        nvml.reading = h100s(2)
        await wait_until(pilot, lambda: "oO Sort / Filter  TKI Kill" in footer_line(app))
