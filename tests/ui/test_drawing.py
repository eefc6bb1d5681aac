"""How the monitor draws a beat: only the widgets that changed render again
(gputui.ui.widgets.steady), and the line widgets can leave out Textual's ANSI-to-truecolor
filter because nothing they draw has an ANSI colour, and the GPU list hands over its lines
itself, as Textual would draw them (gputui.ui.widgets.lines)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from textual.filter import ANSIToTruecolor
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from gputui.telemetry.readings import GpuProcess
from gputui.ui.widgets.lines import LinesWidget
from tests.ui.fakes import (
    FakeClock,
    GiB,
    SettableSampler,
    cpu_reading,
    fake_app,
    gpu_reading,
    lost_gpu,
    nvml_reading,
    screen_text,
    seeded_history,
    settled,
    wait_until,
)

LARGE = (160, 50)


def whole(widget: Widget) -> Region:
    """All of ``widget``, border included, as the compositor asks for it."""
    return widget.outer_size.region


async def test_a_beat_renders_only_the_widgets_whose_lines_changed() -> None:
    cpu = SettableSampler(cpu_reading(37.5))
    app = fake_app(cpu=cpu, interval=0.05, history=seeded_history(2))
    async with app.run_test(size=LARGE) as pilot:
        await settled(pilot)
        screen = app.screen
        widgets = list(screen._compositor.visible_widgets)
        before = {widget: widget.render_lines(whole(widget)) for widget in widgets}
        painted = app.handled["cpu"]
        cpu.reading = cpu_reading(81.0)
        await wait_until(pilot, lambda: app.handled["cpu"] > painted + 1)
        again = {widget: widget.render_lines(whole(widget)) for widget in widgets}
        rendered = {type(w).__name__ for w in widgets if again[w] is not before[w]}
        assert "CpuPanel" in rendered
        for unchanged in ("SteadyScreen", "SteadyHorizontal", "Monitor", "GpuArea", "RunnerPane"):
            assert unchanged not in rendered
        assert again[app.monitor.cpu_panel] != before[app.monitor.cpu_panel]


async def test_a_process_s_new_figures_repaint_its_line_of_the_table_alone() -> None:
    """Each beat changes a listed process's figures: the table repaints that line, not its
    heading, its other rows or its empty lines, and a row that changed out of view shows its
    new figures once scrolled to."""
    many = tuple(GpuProcess(50_000 + n, "ada", f"worker {n}", GiB) for n in range(30))
    nvml = SettableSampler(nvml_reading([gpu_reading(0, processes=many)]))
    app = fake_app(nvml=nvml, interval=0.05)
    async with app.run_test(size=LARGE) as pilot:
        table = app.monitor.process_table
        await wait_until(pilot, lambda: len(table.lines) == 31)
        await pilot.pause()
        rendered: list[int] = []
        render_line = table.render_line

        def spy(y: int) -> Strip:
            rendered.append(y)
            return render_line(y)

        table.render_line = spy  # type: ignore[method-assign]
        shown = table.scrollable_content_region.height
        changed = (
            replace(many[0], gpu_memory_bytes=2 * GiB),
            *many[1:29],
            replace(many[29], gpu_memory_bytes=3 * GiB),  # below the view
        )
        nvml.reading = nvml_reading([gpu_reading(0, processes=changed)])
        await wait_until(pilot, lambda: "2.0 GiB" in screen_text(app))
        assert set(rendered) == {1} and shown < 31
        assert "3.0 GiB" not in screen_text(app)
        table.scroll_end(animate=False)
        await wait_until(pilot, lambda: "3.0 GiB" in screen_text(app))
        # Scrolled, and nothing changing: the table hands over its last strips again, with
        # no line of it left marked dirty by the partial repaints.
        painted = app.handled["nvml"]
        await wait_until(pilot, lambda: app.handled["nvml"] > painted + 1)
        assert table.render_lines(whole(table)) is table.render_lines(whole(table))


async def test_no_line_widget_draws_an_ansi_colour_that_the_filter_would_change() -> None:
    """Busy, stale and lost GPUs, a hot CPU: every colour is the theme's truecolor."""
    hot = cpu_reading(99.0, cores=64)
    gpus = [gpu_reading(0), gpu_reading(4), lost_gpu(1), replace(gpu_reading(2), fan_percent=90.0)]
    clock = FakeClock()
    app = fake_app(
        cpu=SettableSampler(hot),
        nvml=SettableSampler(nvml_reading(gpus)),
        clock=clock,
        history=seeded_history(4),
        stale_check_s=0.02,
    )
    async with app.run_test(size=LARGE) as pilot:
        await settled(pilot)
        clock.advance(3600)  # stale: the GPU list fades (text opacity)
        area = app.monitor.gpu_area
        await wait_until(pilot, lambda: area.has_class("-stale"))
        await pilot.pause()
        [truecolor] = [f for f in app.get_line_filters() if isinstance(f, ANSIToTruecolor)]
        assert truecolor.enabled
        widgets = [w for w in app.screen.walk_children(LinesWidget) if w.display]
        assert {type(w).__name__ for w in widgets} >= {"CpuPanel", "GpuList", "MpsPanel"}
        for widget in widgets:
            background = widget.background_colors[1]
            for strip in widget.render_lines(whole(widget)):
                assert list(strip.apply_filter(truecolor, background)) == list(strip)


@pytest.mark.parametrize("size", [LARGE, (80, 24), (220, 60)])
async def test_a_plain_line_widget_draws_what_textual_would(size: tuple[int, int]) -> None:
    """The GPU list hands over its lines itself (no border, padding...): the same strips as
    Textual's styles cache makes of them, in each form, whole or cropped; faded (stale), it
    leaves the drawing to Textual."""
    clock = FakeClock()
    gpus = nvml_reading([gpu_reading(i) for i in range(8)])
    app = fake_app(
        nvml=SettableSampler(gpus), clock=clock, history=seeded_history(8), stale_check_s=0.02
    )
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        gpu_list = app.monitor.gpu_area.gpu_list
        assert gpu_list._drawn_plain()
        for crop in (whole(gpu_list), Region(3, 1, gpu_list.size.width - 5, 4)):
            ours = gpu_list.render_lines(crop)
            gpu_list._styles_cache.clear()
            assert ours == Widget.render_lines(gpu_list, crop)
        clock.advance(3600)
        await wait_until(pilot, lambda: app.monitor.gpu_area.has_class("-stale"))
        assert not gpu_list._drawn_plain()
