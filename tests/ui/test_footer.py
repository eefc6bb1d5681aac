"""The monitor's footer keeps every key on screen from 80 columns up (Textual's own footer
cut ``/ Filter`` and ``kK Kill`` off below 96)."""

from __future__ import annotations

import pytest

from gputui.ui.monitor.app import FOOTER_FULL_FROM, FOOTER_PALETTE_FROM
from tests.ui.fakes import ScriptedSampler, fake_app, h100s, screen_text

FOOTER_ITEMS = (
    "q Quit",
    "d Doctor",
    "r Train",
    "c Compare",
    "s Stop",
    "t Runner",
    "oO Sort",
    "/ Filter",
    "kKi Kill",
)
"""What the monitor's footer shows, key then description (a group: its keys, its label)."""


def footer_line(app: object) -> str:
    return screen_text(app).splitlines()[-1]  # type: ignore[arg-type]


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
            await pilot.pause(0.2)
            await pilot.pause()
        width = widths[-1]
        footer = footer_line(app)
        missing = [item for item in FOOTER_ITEMS if item not in footer]
        assert not missing, f"cut from the footer at {width} columns: {missing} in {footer!r}"
        assert ("^p palette" in footer) == (width >= FOOTER_PALETTE_FROM), footer
        assert app.query_one("FittingFooter").compact == (width < FOOTER_FULL_FROM)
