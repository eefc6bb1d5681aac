"""The runner seen where its pane is not (issue 40): its brief under the monitor, a box at
120x40 and a line at 80x24; the GPU panel's line where torch cannot use the GPUs shown; a
GPU-less box's runner under its monitor. The runner replays the streams recorded from the
real trainer (tests/ui/streams)."""

from __future__ import annotations

from gputui.format import fmt_ips, fmt_times
from gputui.jobs.results import Phase
from tests.ui.fakes import (
    NO_DRIVER,
    ScriptedSampler,
    fake_app,
    nvml_reading,
    screen_text,
    settled,
    wait_until,
)
from tests.ui.streams.replay import replayed_setup
from tests.ui.test_runner_snapshots import app_with, back_to_the_monitor, second_run_in_flight


async def test_at_120x40_the_runner_s_state_speedup_and_figures_are_under_the_monitor() -> None:
    app = app_with(replayed_setup("cpu_vs_cpu"))
    async with app.run_test(size=(120, 40)) as pilot:
        await back_to_the_monitor("c", Phase.FINISHED)(pilot)
        session = app.runner.session
        assert session is not None and session.speedup is not None
        text = screen_text(app)
        assert app.monitor.region.width == 120 and "GPU processes · 2" in text
        brief = text[text.index("╭─ Runner") :]
        assert "✓ finished: cpu (baseline) 3 epochs, cpu 3 epochs" in brief
        steady = fmt_times(session.speedup.steady, precision=2)
        assert f"Speedup of cpu over cpu (baseline): {steady} steady" in brief
        for run in session.runs:
            assert fmt_ips(run.best_images_per_second) in brief


async def test_at_80x24_one_line_gives_the_runner_s_state_and_last_figure() -> None:
    app = app_with(replayed_setup("cpu_vs_cpu", cut=second_run_in_flight))
    async with app.run_test(size=(80, 24)) as pilot:
        await back_to_the_monitor("c", Phase.RUNNING)(pilot)
        session = app.runner.session
        progress = session.current.progress if session and session.current else None
        assert progress is not None
        ips, loss = fmt_ips(progress.images_per_second), f"{progress.loss:.3f}"
        line = screen_text(app).splitlines()[-3]  # over the MPS line and the footer
        assert line.strip() == f"▶ cpu · epoch 2/3 · step 8/16 · {ips} · loss {loss}"
        assert "H100" in screen_text(app)  # the monitor is on screen


async def test_a_finished_comparison_s_line_is_its_speedup_and_why_it_is_noise() -> None:
    app = app_with(replayed_setup("cpu_vs_cpu"))
    async with app.run_test(size=(80, 24)) as pilot:
        await back_to_the_monitor("c", Phase.FINISHED)(pilot)
        result = app.runner.session.speedup if app.runner.session else None
        assert result is not None and result.steady is not None
        line = screen_text(app).splitlines()[-3]  # over the MPS line and the footer
        steady = fmt_times(result.steady, precision=2)
        assert line.startswith(f" ✓ cpu {steady} cpu (baseline) · ⚠ cpu compared with itself")


async def test_the_gpu_panel_says_in_one_line_that_torch_cannot_use_its_gpus() -> None:
    """Two H100s and the recordings' torch, a CPU build: once the first frame is out the
    runner offers its devices (never shown, never asking torch) and the GPU panel's border
    says so, with the Doctor's key. A CUDA build that can use them says nothing."""
    app = app_with(replayed_setup("cpu_run"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await wait_until(pilot, lambda: "torch cannot use" in screen_text(app))
        (line,) = (row for row in screen_text(app).splitlines() if "torch cannot" in row)
        assert line.startswith("╰─ ⚠ torch cannot use these GPUs (d: Doctor): this torch 2.13")
        assert not app.runner.built and not app.runner.runner.checked
    app = fake_app()  # a CUDA 12.4 build, on a driver for CUDA 12.4
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await wait_until(pilot, lambda: bool(app.runner.devices))
        await pilot.pause()
        assert "torch cannot" not in screen_text(app)


async def test_a_gpu_less_box_shows_the_runner_under_its_monitor_not_blank_rows() -> None:
    nvml = ScriptedSampler(nvml_reading(status=NO_DRIVER))
    app = fake_app(nvml=nvml, runner=replayed_setup("cpu_run"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await wait_until(pilot, lambda: app.runner.built)
        await pilot.pause()
        monitor, pane = app.monitor.region, app.runner.region
        assert (pane.y, pane.bottom, pane.width) == (monitor.bottom, 39, 120)
        assert [row for row in screen_text(app).splitlines() if not row.strip()] == []
        await pilot.press("t")  # the runner alone; then under the monitor again
        await pilot.pause()
        assert app.monitor.region.height == 0 and app.runner.region.height == 39
        await pilot.press("t")
        await pilot.pause()
        assert app.runner.region == pane
