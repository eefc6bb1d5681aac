"""The real app, driven by the pilot and fed by fake samplers."""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.command import CommandPalette

from gputui.telemetry.apple import MpsSampler
from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.polling import Poller, Samplers
from gputui.telemetry.readings import GpuProcess, NvmlReading
from gputui.telemetry.selection import GpuSelection
from gputui.ui.colours import theme_for, wants_plain
from gputui.ui.monitor.app import MonitorApp
from gputui.ui.monitor.layout import GpuMode
from gputui.ui.render.draw import Line
from gputui.ui.render.processes import process_table_lines
from gputui.ui.widgets import process_table as process_table_module
from gputui.ui.widgets.cpu_panel import CpuPanel
from gputui.ui.widgets.gpu_area import GpuArea
from gputui.ui.widgets.mps_panel import MpsPanel
from gputui.ui.widgets.process_table import ProcessTable
from tests.helpers import ROOT, wait_for
from tests.ui.fakes import (
    MPS_ON_LINUX,
    NO_DRIVER,
    T0,
    CountingCpuSampler,
    FakeClock,
    GiB,
    HangingSampler,
    RaisingSampler,
    ScriptedSampler,
    SettableSampler,
    card_text,
    cpu_reading,
    fake_app,
    gpu_reading,
    h100s,
    lost_gpu,
    nvml_reading,
    screen_text,
    settled,
    unsupported_gpu,
    wait_until,
)
from tests.ui.runner_fakes import scripted_setup
from tests.ui.streams.replay import replayed_setup


@pytest.fixture
def hanging() -> Iterator[list[HangingSampler[object]]]:
    """Hanging samplers made by a test; released afterwards so no thread stays stuck."""
    made: list[HangingSampler[object]] = []
    yield made
    for sampler in made:
        sampler.release.set()


async def test_panels_show_the_injected_readings() -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        cpu = app.query_one(CpuPanel)
        assert "38%" in cpu.lines[0].plain
        assert "load 3.42 2.91 2.05" in cpu.lines[0].plain
        assert "41.3/125.7 GiB" in cpu.lines[-1].plain
        area = app.query_one(GpuArea)
        assert area.border_title == "NVIDIA · 2 GPUs · driver 550.54.15 · CUDA 12.4"
        assert area.mode is GpuMode.CARDS
        assert [gpu.index for gpu in area.gpu_list.gpus] == [0, 1]
        assert "92%" in card_text(app, 0)
        assert "61.2/80.0 GiB" in card_text(app, 0)
        assert "pwr 340/700 W" in card_text(app, 1)
        table = app.query_one(ProcessTable)
        assert len(table.shown) == 2
        assert table.shown["0:41000:compute"][-1].endswith("--shard 0 [run 7]")
        # at 80 columns the host memory and type columns give way to the command (a cell
        # less for the scroll bar: the runner's brief line leaves the table one row)
        assert table.lines[1].plain == (
            "   0  41000  ada   60.7 GiB   92%   101%  3:25:00  python train.py --model…"
        )
        assert MPS_ON_LINUX.message in app.query_one(MpsPanel).lines[0].plain
        text = screen_text(app)
        assert "CPU · AMD EPYC 7763 64-Core Processor" in text
        assert "0 · NVIDIA H100 80GB HBM3 · P0" in text
        assert "GPU processes · 2" in text
        assert "q Quit" in text and "TKI Kill" in text  # the footer shows the keys (every one at
        # 80 columns: tests/ui/test_footer.py; the palette's hint comes back from 90)
        assert app.query_one("#runner").display is False


async def test_unsupported_readings_show_na() -> None:
    bare_cpu = cpu_reading(load_average=None, frequency_mhz=None, self_rss_bytes=None)
    app = fake_app(
        cpu=ScriptedSampler(bare_cpu),
        nvml=ScriptedSampler(nvml_reading([unsupported_gpu(0)])),
    )
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        text = screen_text(app)
        assert "load n/a" in text
        assert "clock n/a" in text
        for field in ("pwr n/a", "sm n/a", "fan n/a", "PCIe n/a", "mem bw n/a"):
            assert field in card_text(app, 0)
        assert "0 · NVIDIA GeForce GT 710 ──" in text  # no P-state: no bare "· n/a"


async def test_a_lost_gpu_says_lost_and_the_others_keep_updating() -> None:
    before = nvml_reading([gpu_reading(0), gpu_reading(1)])
    after = nvml_reading([gpu_reading(0, utilization_percent=13.0), lost_gpu(1)], taken_at=T0)
    app = fake_app(nvml=ScriptedSampler(before, after), interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 2)
        assert card_text(app, 1).splitlines()[1].startswith("LOST")
        assert "1 · NVIDIA H100 80GB HBM3 · LOST" in screen_text(app)
        assert " 13% " in card_text(app, 0)
        assert len(app.query_one(ProcessTable).shown) == 1


@pytest.mark.parametrize(
    ("count", "mode"), [(2, GpuMode.CARDS), (4, GpuMode.TWO_LINE), (8, GpuMode.ONE_LINE)]
)
@pytest.mark.usefixtures("fake_nvml")
async def test_at_80x24_a_lost_and_an_unreachable_gpu_read_their_fix_whole(
    fake_nvml_env: pytest.MonkeyPatch, count: int, mode: GpuMode
) -> None:
    """On the stand-in NVML: GPU 0 fell off the bus, GPU 1 may not be opened. A card holds
    the whole sentence; two lines or one line a GPU hold the fix in a few words, never cut."""
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", str(count))
    fake_nvml_env.setenv("FAKE_NVML_FAIL", "0:handle=GPU_IS_LOST,1:handle=NO_PERMISSION")
    samplers = Samplers(
        cpu=ScriptedSampler(cpu_reading()),  # type: ignore[arg-type]
        nvml=NvmlSampler(),
        mps=ScriptedSampler(MPS_ON_LINUX),  # type: ignore[arg-type]
    )
    app = MonitorApp(samplers, interval=60.0, runner=scripted_setup())
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        assert app.query_one(GpuArea).mode is mode
        lost, refused = (" ".join(card_text(app, index).split()) for index in (0, 1))
        screen = screen_text(app)
    # What follows the state's word (the name before it may be cut: NVML never named GPU 1).
    lost, refused = lost.rsplit(" LOST ", 1)[1], refused.rsplit(" UNREACHABLE ", 1)[1]
    if mode is GpuMode.CARDS:
        assert lost.startswith("The driver reports GpuIsLost") and lost.endswith(" or reboot.")
        assert refused.startswith("gputui may not open this GPU (no permission")
        assert refused.endswith("check the device's group.")
    else:
        assert lost == "see `dmesg`, then `nvidia-smi -r -i 0` or reboot"
        assert refused == "no permission on /dev/nvidia*: ask an admin"
        assert f"LOST  {lost}" in screen and f"UNREACHABLE  {refused}" in screen


@pytest.mark.usefixtures("fake_nvml")
async def test_a_card_shows_its_nvlinks_and_its_video_engines_only_while_they_are_busy(
    fake_nvml_env: pytest.MonkeyPatch,
) -> None:
    """On the stand-in NVML: GPU 0 encodes and decodes and has 18 NVLink links, one down;
    GPU 1's video engines are idle (0%) and it has no NVLink; GPU 2 has neither (NotSupported)."""
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_ENCODER_UTILIZATION", "0:12")
    fake_nvml_env.setenv("FAKE_NVML_DECODER_UTILIZATION", "0:40")
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "2:encoder,2:decoder")
    fake_nvml_env.setenv("FAKE_NVML_NVLINKS", "0:18")
    fake_nvml_env.setenv("FAKE_NVML_NVLINKS_DOWN", "0:0x2")
    samplers = Samplers(
        cpu=ScriptedSampler(cpu_reading()),  # type: ignore[arg-type]
        nvml=NvmlSampler(),
        mps=ScriptedSampler(MPS_ON_LINUX),  # type: ignore[arg-type]
    )
    app = MonitorApp(samplers, interval=60.0, runner=scripted_setup())
    async with app.run_test(size=(160, 40)) as pilot:
        await settled(pilot)
        assert app.query_one(GpuArea).mode is GpuMode.CARDS
        busy, idle, without = (" ".join(card_text(app, index).split()) for index in (0, 1, 2))
    assert "NVLink 17/18 rx n/a tx n/a enc 12% dec 40%" in busy  # a rate takes two reads
    for text in (idle, without):
        assert "PCIe" in text and "n/a" not in text
        assert "enc" not in text and "dec " not in text and "NVLink" not in text


async def test_without_nvml_one_sentence_says_why_and_the_rest_works() -> None:
    app = fake_app(nvml=ScriptedSampler(nvml_reading(status=NO_DRIVER)))
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        area = app.query_one(GpuArea)
        assert area.mode is GpuMode.MESSAGE
        assert area.message == NO_DRIVER.error
        text = re.sub(r"[│\s]+", " ", screen_text(app))  # unwrap the panel's lines
        assert NO_DRIVER.error in text
        assert "NVIDIA · unavailable" in text
        assert app.query_one(ProcessTable).display is False
        assert "38%" in app.query_one(CpuPanel).lines[0].plain


async def test_first_frame_does_not_wait_for_samples(
    hanging: list[HangingSampler[object]],
) -> None:
    firsts = (cpu_reading(), h100s(1), MPS_ON_LINUX)
    cpu, nvml, mps = (HangingSampler(None, then) for then in firsts)
    hanging.extend([cpu, nvml, mps])
    app = fake_app(cpu=cpu, nvml=nvml, mps=mps)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all(s.hanging.is_set() for s in (cpu, nvml, mps)))
        text = screen_text(app)
        assert "Reading the CPU…" in text
        assert "Waiting for the NVIDIA driver (NVML) to answer…" in text
        assert "MPS  checking…" in text
        for sampler in (cpu, nvml, mps):
            sampler.release.set()
        await settled(pilot)
        assert "38%" in screen_text(app)


async def test_a_hung_driver_marks_gpus_stale_while_the_cpu_keeps_updating(
    hanging: list[HangingSampler[object]],
) -> None:
    clock = FakeClock()
    nvml = HangingSampler(h100s(2), then=h100s(2, taken_at=T0 + 10))
    hanging.append(nvml)
    cpu = CountingCpuSampler()
    app = fake_app(cpu=cpu, nvml=nvml, interval=0.05, clock=clock, stale_check_s=0.02)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, nvml.hanging.is_set)
        area = app.query_one(GpuArea)
        assert not area.has_class("-stale")
        clock.advance(10)
        await wait_until(pilot, lambda: area.has_class("-stale"))
        assert "CUDA 12.4 · stale 10s" in screen_text(app)
        assert app.query_one(ProcessTable).has_class("-stale")
        panel = app.query_one(CpuPanel)

        def cpu_shown() -> int:  # the fake host's utilization counts its samples
            return int(re.search(r"(\d+)%", panel.lines[0].plain).group(1))  # type: ignore[union-attr]

        target = cpu_shown() + 3
        await wait_until(pilot, lambda: cpu_shown() >= target)
        assert nvml.calls == 2  # no pile-up: one poll in flight, none queued behind it
        nvml.release.set()
        await wait_until(pilot, lambda: not area.has_class("-stale"))
        assert "stale" not in screen_text(app)


async def test_q_quits_even_while_the_driver_hangs(
    hanging: list[HangingSampler[object]],
) -> None:
    nvml = HangingSampler(h100s(2))
    hanging.append(nvml)
    app = fake_app(nvml=nvml, interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, nvml.hanging.is_set)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0
    assert not app.is_running


async def test_the_command_palette_opens() -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, CommandPalette))


async def test_the_palette_finds_a_failed_runs_detail() -> None:
    """``e`` is in the palette, as every key is (tests/ui/test_doctor.py checks them all)."""
    app = fake_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"detail")
        await wait_until(
            pilot, lambda: "Show or hide a failed run's detail (e)" in screen_text(app)
        )


async def test_eight_gpus_fit_at_80x24() -> None:
    app = fake_app(nvml=ScriptedSampler(h100s(8)))
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        area = app.query_one(GpuArea)
        assert area.mode is GpuMode.ONE_LINE
        assert area.gpu_list.region.height == 8
        assert area.content_region.contains_region(area.gpu_list.region)  # no scrolling needed
        assert " 100% " in card_text(app, 4)
        text = screen_text(app)
        for index in range(8):
            assert f"{index} H100" in text
        assert "GPU processes · 6" in text


def words(app: MonitorApp) -> str:
    """The screen's text with its line breaks and runs of spaces as single spaces."""
    return " ".join(screen_text(app).split())


async def test_a_terminal_too_small_for_the_gpus_says_so() -> None:
    """At 20x6 the GPU area would fall below the screen without a word: the monitor says
    how many rows it lacks instead, and its panels come back once they fit."""
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        assert "H100" in words(app) and "too small" not in words(app)
        await pilot.resize_terminal(20, 6)
        await wait_until(pilot, lambda: "too small" in words(app))
        assert (
            "Terminal too small: 6 more rows needed. Enlarge it, or run `gputui snapshot`."
            in words(app)
        )
        assert app.monitor.gpu_area.region.height == 0
        await pilot.resize_terminal(20, 11)
        await wait_until(pilot, lambda: "1 more row needed" in words(app))
        await pilot.resize_terminal(20, 12)  # the CPU panel, two GPU lines and the MPS line
        await wait_until(pilot, lambda: "too small" not in words(app))
        assert "0 H100" in words(app) and "1 H100" in words(app)


async def test_the_process_table_rebuilds_only_when_its_rows_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = h100s(2)
    gpu0 = gpu_reading(0)
    moved = gpu_reading(
        0,
        processes=(
            GpuProcess(41000, "ada", gpu0.processes[0].command, 12 * GiB),
            GpuProcess(777, None, None, None),
        ),
    )
    second = nvml_reading([moved, gpu_reading(1, processes=())])
    nvml = SettableSampler(first)
    app = fake_app(nvml=nvml, interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        table = app.query_one(ProcessTable)
        builds: list[int] = []

        def spy(
            rows: list[tuple[str, ...]], width: int, *marked: str | None, **order: Any
        ) -> list[Line]:
            builds.append(len(rows))
            return process_table_lines(rows, width, *marked, **order)  # type: ignore[arg-type]

        monkeypatch.setattr(process_table_module, "process_table_lines", spy)
        await wait_until(pilot, lambda: app.handled["nvml"] >= 3)
        assert builds == []  # the same reading again: nothing to build or draw
        nvml.reading = second
        handled = app.handled["nvml"]
        await wait_until(pilot, lambda: app.handled["nvml"] >= handled + 3)
        assert builds == [2]  # built once, when the rows changed
        assert set(table.shown) == {"0:41000:compute", "0:777:compute"}
        heading, *rows = (line.plain.rstrip() for line in table.lines)
        assert heading == "GPU▲    PID  User   GPU mem  SM %  CPU %  Elapsed  Command"
        assert rows == [  # by GPU, then PID; right-aligned numbers, n/a for what is unknown
            "   0    777  n/a        n/a   n/a    n/a      n/a  n/a",
            "   0  41000  ada   12.0 GiB   n/a    n/a      n/a  python train.py --model…",
        ]  # (a cell less for the scroll bar: the runner's brief line leaves the table one row)


async def test_the_process_table_scrolls_its_rows_under_a_pinned_heading() -> None:
    """The arrow keys move the selection; the rows scroll under the heading to show it."""
    many = tuple(GpuProcess(50_000 + n, "ada", f"worker {n}", GiB) for n in range(30))
    app = fake_app(nvml=ScriptedSampler(nvml_reading([gpu_reading(0, processes=many)])))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 1)
        table = app.query_one(ProcessTable)
        await wait_until(pilot, lambda: len(table.lines) == 31)
        shown = table.scrollable_content_region.height
        assert 0 < shown < 31
        assert table.max_scroll_y == 31 - shown
        width = table.scrollable_content_region.width  # less the scrollbar
        assert width == table.size.width - 1
        assert {line.width for line in table.lines} == {width}  # built again for the scrollbar
        table.focus()

        def selected() -> str | None:
            return None if table.selected is None else table.selected.cells[-1]

        await pilot.press("down", "down")  # the first selects the first row, once focused
        await wait_until(pilot, lambda: selected() == "worker 1")
        assert table.scroll_y == 0  # still in view: no need to scroll
        await pilot.press("end")
        await wait_until(pilot, lambda: table.scroll_y == table.max_scroll_y)
        assert selected() == "worker 29"
        view = [table.render_line(y).text.rstrip() for y in range(shown)]
        assert view[0].startswith("GPU▲    PID")  # the heading stays on top
        assert view[-1].endswith("worker 29")  # the last row, under it
        assert view[1].endswith(f"worker {30 - shown + 1}")
        await pilot.press("pageup")  # a page up: the view scrolls just enough to show it
        await wait_until(pilot, lambda: selected() == f"worker {29 - (shown - 2)}")
        assert table.scroll_y == 29 - (shown - 2)
        assert table.render_line(1).text.rstrip().endswith(selected() or "?")
        await pilot.press("home")
        await wait_until(pilot, lambda: table.scroll_y == 0 and selected() == "worker 0")


async def test_a_failing_sampler_is_reported_and_retried() -> None:
    nvml = RaisingSampler()
    app = fake_app(nvml=nvml, interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: nvml.calls >= 3)
        assert app.failures["nvml"] == "RuntimeError: driver said no"
        assert "38%" in app.query_one(CpuPanel).lines[0].plain
        assert len(app._notifications) == 1  # said once, not every poll


async def test_mps_off_macos_is_sampled_on_the_pacer_without_a_thread_of_its_own() -> None:
    app = fake_app(mps=MpsSampler(), interval=0.05)  # the real sampler, on this Linux box
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.handled["cpu"] >= 5)
        assert "gputui-pacer" in {thread.name for thread in threading.enumerate()}
        assert not [t for t in threading.enumerate() if t.name.endswith("-mps")]
        assert app.handled["mps"] == 1  # painted once: it cannot change


def saturation(svg: str) -> dict[str, int]:
    """Each fill colour of a screenshot and how far it is from grey (0 = grey)."""
    found = {}
    for colour in set(re.findall(r"fill: #([0-9a-f]{6})", svg)):
        red, green, blue = (int(colour[i : i + 2], 16) for i in (0, 2, 4))
        found[colour] = max(red, green, blue) - min(red, green, blue)
    return found


async def test_no_color_renders_in_greys(monkeypatch: pytest.MonkeyPatch) -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        assert max(saturation(app.export_screenshot()).values()) > 60  # colours, normally
    monkeypatch.setenv("NO_COLOR", "1")
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        assert app.no_color
        assert "92%" in screen_text(app)
        greys = saturation(app.export_screenshot())
    assert greys
    assert max(greys.values()) <= 8, greys  # the SVG's own text colour is a near-grey


PANEL_WORDS = ("NVIDIA · 2 GPUs", "H100 80GB HBM3", "GPU processes", "gputui ")
"""Text from each panel of the monitor on the stand-in NVML's 2 GPUs."""


@pytest.mark.parametrize(
    ("variables", "plain"),
    [({}, False), ({"NO_COLOR": "1"}, True), ({"TERM": "dumb"}, True)],
    ids=["colour", "NO_COLOR", "TERM=dumb"],
)
def test_no_color_and_a_dumb_terminal_get_a_plain_screen(
    fake_nvml_dir: Path, variables: dict[str, str], plain: bool
) -> None:
    """Issue 18: under ``NO_COLOR`` Textual wrote its colours as greys, still in 24-bit
    escapes, and on ``TERM=dumb`` it wrote 24-bit colour; a plain screen has none."""
    from tests.pty_run import colours_in, run_on_a_pty, shown_text

    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML_", "NO_COLOR"))}
    env.update(LD_LIBRARY_PATH=str(fake_nvml_dir), TERM="xterm-256color", COLORTERM="truecolor")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(variables)
    run = run_on_a_pty(
        [sys.executable, "-m", "gputui"],
        env=env,
        cwd=ROOT,
        size=(120, 40),
        timeout_s=60,
        until=lambda shown: all(word in shown_text(shown) for word in PANEL_WORDS),
    )
    text = shown_text(run.shown)
    assert all(word in text for word in PANEL_WORDS), text[-2000:]
    if plain:
        assert colours_in(run.shown) == []
    else:  # the test can see colour where there is some
        assert b"\x1b[38;2;" in run.shown and b"\x1b[48;2;" in run.shown


def test_plain_under_no_color_or_without_a_colour_system() -> None:
    assert wants_plain(True, "truecolor")
    assert wants_plain(False, None)  # TERM=dumb
    assert not wants_plain(False, "256")


def test_sixteen_colour_terminals_get_the_terminal_palette() -> None:
    assert theme_for("standard") == "ansi-dark"
    assert theme_for("windows") == "ansi-dark"
    assert theme_for("256") is None
    assert theme_for("truecolor") is None


async def test_the_ansi_theme_renders() -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.theme = "ansi-dark"
        await settled(pilot)
        assert "92%" in screen_text(app)
        assert "CUDA" in app.export_screenshot()


def test_running_the_app_never_imports_torch() -> None:
    """With the real samplers, in a fresh interpreter (sys.modules is per process). The
    runner's modules (its brief's, and the devices' it offers) load once the first frame is
    out, never before it."""
    code = textwrap.dedent(
        """
        import asyncio, json, sys
        from gputui.ui.monitor.app import MonitorApp

        runner = (
            "gputui.jobs.events",
            "gputui.jobs.bench",
            "gputui.jobs.experiments",
            "gputui.jobs.process",
            "gputui.jobs.results",
            "gputui.jobs.scale",
            "gputui.ui.runner_",
        )
        first_frame = []

        class App(MonitorApp):
            def on_monitor_laid_out(self):  # the runner's modules, as that frame is out
                self.call_after_refresh(lambda: first_frame.append(loaded()))
                super().on_monitor_laid_out()

        def loaded():
            return sorted(name for name in sys.modules if name.startswith(runner))

        async def main():
            app = App(interval=0.25)
            async with app.run_test(size=(80, 24)) as pilot:
                # and the runner a GPU-less box shows, built: quitting while its choices
                # mount can crash Textual's Select under load (a race left open)
                pane = app.runner
                while (
                    not all(app.handled.values())
                    or not first_frame
                    or (pane.display and not pane.built)
                ):
                    await pilot.pause(0.05)
            return app.handled

        handled = asyncio.run(asyncio.wait_for(main(), 60))
        print(json.dumps({
            "torch": "torch" in sys.modules,
            "handled": handled,
            "runner": first_frame[0],
        }))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["torch"] is False
    assert all(count >= 1 for count in result["handled"].values())
    assert result["runner"] == []


@pytest.mark.parametrize("size", [(120, 40), (160, 50)], ids=["alone", "beside the runner"])
async def test_head_start_readings_are_painted_before_the_first_frame(
    size: tuple[int, int],
) -> None:
    cpu = CountingCpuSampler()
    nvml, mps = ScriptedSampler(h100s(2)), ScriptedSampler(MPS_ON_LINUX)
    poller = Poller(Samplers(cpu=cpu, nvml=nvml, mps=mps), 60.0)  # type: ignore[arg-type]
    poller.start()
    # as when Textual takes longer to load than the samples: every reading is in hand
    wait_for(lambda: poller.latest().snapshot(), "the samplers never answered")
    app = MonitorApp(poller, interval=60.0, clock=FakeClock(), runner=scripted_setup())
    async with app.run_test(size=size) as pilot:
        assert app.handled == {"cpu": 1, "nvml": 1, "mps": 1, "drm": 1}  # in on_mount, no poll
        planned = app.monitor.layout_plan  # planned for the expected size, before any layout
        assert planned is not None and planned.gpu_mode is not GpuMode.MESSAGE
        await pilot.pause()
        assert "H100" in screen_text(app)
        assert app.monitor.layout_plan == planned  # the expected size was the real one
        assert cpu.calls == 1  # the first beat's sample, not a second one
        # Beside the runner, its build is let finish before the test leaves: quitting while
        # its choices mount can crash Textual's Select under load (a race left open)
        await wait_until(pilot, lambda: not app.runner.display or app.runner.built)


async def test_a_runner_pane_gone_before_its_build_builds_nothing() -> None:
    """The app closing while the pane waited to build: ``recompose`` composes nothing on a
    detached widget, and the build painted widgets it never made (an AttributeError that
    failed a test now and then under load)."""
    app = fake_app()
    async with app.run_test(size=(100, 30)) as pilot:  # narrow: the runner is not shown
        await settled(pilot)
        pane = app.runner
        await pane.remove()
        await pane.build()
        assert not pane.built and not pane.children


async def test_the_runner_pane_builds_only_once_shown_and_after_the_monitor() -> None:
    app = fake_app()
    async with app.run_test(size=(100, 30)) as pilot:  # narrow: the runner is not shown
        await settled(pilot)
        await wait_until(pilot, lambda: app.runner.build_allowed)  # the first frame is out
        assert app.monitor.layout_plan is not None
        assert not app.runner.built and not app.runner.children
        await pilot.press("t")
        await wait_until(pilot, lambda: app.runner.built)
        assert app.runner.query("#runner-device")  # its widgets, composed on first show
        await wait_until(pilot, lambda: bool(app.runner.devices))  # and the devices listed


def shown(app: MonitorApp) -> tuple[int, int]:
    """The widths of the monitor and the runner as laid out (0: not on screen)."""
    return app.monitor.region.width, app.runner.region.width


async def test_the_panes_follow_each_resize_and_keep_what_t_chose() -> None:
    """Laid out for the size just resized to (not the one before), and what ``t`` chose
    holds: a runner swapped in stays on screen as the terminal widens, one hidden stays
    hidden as it narrows, and across later resizes."""
    app = fake_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert shown(app) == (120, 0)
        await pilot.press("t")  # narrow: the runner in place of the monitor
        await pilot.pause()
        assert shown(app) == (0, 120)
        await pilot.resize_terminal(200, 60)
        await wait_until(pilot, lambda: app.size.width == 200)
        assert shown(app) == (100, 100)  # wide: both, side by side
        assert app.monitor.layout_plan is not None
        await pilot.resize_terminal(100, 30)
        await wait_until(pilot, lambda: app.size.width == 100)
        assert shown(app) == (0, 100)  # narrow again: still the runner
        await pilot.press("t")  # the runner away: it stays away on a wide screen
        await pilot.pause()
        assert shown(app) == (100, 0)
        await pilot.resize_terminal(201, 60)
        await wait_until(pilot, lambda: app.size.width == 201)
        assert shown(app) == (201, 0)
        await pilot.press("t")  # wide: the runner back, beside the monitor
        await pilot.pause()
        assert shown(app) == (100, 101)
        await pilot.press("t")  # and hidden again
        await pilot.pause()
        assert shown(app) == (201, 0)
        await pilot.resize_terminal(100, 30)
        await wait_until(pilot, lambda: app.size.width == 100)
        assert shown(app) == (100, 0)
        await pilot.resize_terminal(200, 60)
        await wait_until(pilot, lambda: app.size.width == 200)
        assert shown(app) == (200, 0)  # still hidden


async def test_a_key_before_the_runner_pane_is_built_waits_for_it() -> None:
    app = fake_app(runner=replayed_setup("cpu_run"))  # the CPU: no devices are listed yet
    async with app.run_test(size=(100, 30)) as pilot:
        assert not app.runner.built
        await pilot.press("r")  # narrow, never shown: r shows it, builds it, then starts
        await wait_until(pilot, lambda: app.runner.session is not None)
        assert app.runner.built and app.runner.display


async def test_collection_turned_off_for_start_up_comes_back_after_the_first_frame() -> None:
    """``gputui`` turns the garbage collector off while it starts (gputui.commands); the app
    collects start-up's garbage once the first frame is out, freezes what is left, and
    turns collection back on."""
    app = fake_app()
    gc.disable()
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_until(pilot, lambda: gc.isenabled())
            assert "H100" in screen_text(app)
            assert gc.get_freeze_count() > 0
    finally:
        gc.enable()
        gc.unfreeze()


async def test_an_app_started_with_collection_on_leaves_it_alone() -> None:
    app = fake_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        await wait_until(pilot, lambda: app.runner.build_allowed)  # the first frame is out
        assert gc.isenabled()
        assert gc.get_freeze_count() == 0


def test_the_command_line_turns_collection_back_on_when_the_app_cannot_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gputui.commands import main

    monkeypatch.setenv("GPUTUI_RUNNER_DEFAULTS", '{"epochs": 0}')
    assert main([]) == 2  # refused before the app runs
    assert gc.isenabled()


async def test_a_beats_readings_are_polled_together_and_painted_once() -> None:
    """Every source polls on one beat, so the CPU's and the GPUs' readings of a beat are
    painted in one frame, not one frame each."""

    class SlowNvml(ScriptedSampler[NvmlReading]):
        def sample(self) -> NvmlReading:
            time.sleep(0.03)  # a driver slower than psutil: the readings come back apart
            return super().sample()

    # At 1 s a beat waits up to 0.2 s for the slow NVML: 0.25 s (a 62 ms wait) painted
    # twice a beat on loaded cores.
    app = fake_app(interval=1.0, nvml=SlowNvml(h100s(2)))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.handled["nvml"] >= 2)
        paints, beats = app.paints, app.handled["nvml"]
        await wait_until(pilot, lambda: app.handled["nvml"] >= beats + 4)
        assert app.handled["cpu"] >= beats + 3
        assert app.paints - paints <= app.handled["nvml"] - beats + 1  # was two a beat


async def test_only_shows_the_gpus_named() -> None:
    """``gputui --only 1``, as nvitop's ``--only``: GPU 0 is neither drawn nor counted."""
    app = fake_app(only=GpuSelection.parse("1"))
    async with app.run_test(size=(160, 50)) as pilot:
        await settled(pilot)
        reading = app.monitor.nvml
        assert reading is not None and [gpu.index for gpu in reading.gpus] == [1]
        text = screen_text(app)
        assert "1 GPU" in text and "2 GPUs" not in text
