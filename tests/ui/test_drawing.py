"""How the monitor draws a beat: only the widgets that changed render again
(gputui.ui.widgets.steady), and the line widgets can leave out Textual's ANSI-to-truecolor
filter because nothing they draw has an ANSI colour (gputui.ui.widgets.lines)."""

from __future__ import annotations

from dataclasses import replace

from textual.filter import ANSIToTruecolor
from textual.geometry import Region
from textual.widget import Widget

from gputui.ui.widgets.lines import LinesWidget
from tests.ui.fakes import (
    FakeClock,
    SettableSampler,
    cpu_reading,
    fake_app,
    gpu_reading,
    lost_gpu,
    nvml_reading,
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
