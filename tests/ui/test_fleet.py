"""The fleet view in the real app: hosts read over real loopback sockets (dcgm-exporter and
nvitop-exporter expositions, a dead port, a host that never answers), sorted, filtered,
256 hosts at once, and snapshots of a recorded fleet at 80x24 and 160x50."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from textual.color import Color
from textual.geometry import Region
from textual.strip import Strip

from gputui.fleet.hosts import HostReading
from gputui.fleet.scrape import FleetPoller, scrape_all
from gputui.fleet.targets import Target, parse_hosts
from gputui.ui.fleet.app import FleetApp, FleetView
from gputui.ui.fleet.rows import FleetOrder, fleet_rows, row_line
from tests.fleet.hosts import (
    AGE_INF_EXPOSITION,
    DCGM_EXPOSITION,
    HOSTILE_EXPOSITION,
    HUNG_EXPOSITION,
    dead_port,
    nvitop_exposition,
    running_fleet,
    static_exporter,
)
from tests.helpers import ROOT
from tests.ui.fakes import wait_until

T0 = 1000.0


@pytest.fixture
def exporters(fake_nvml_dir: Path) -> Iterator[dict[str, str]]:
    with running_fleet(fake_nvml_dir) as hosts:
        yield hosts


def _lines(app: FleetApp) -> list[str]:
    return app.query_one(FleetView).plain_lines()


def _title(app: FleetApp) -> str:
    return str(app.query_one("#fleet-title").render())


async def test_the_fleet_view_shows_every_host_sorts_and_filters(
    exporters: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    roles = ["dead", "nvitop", "serve4", "silent", "dcgm", "serve2"]
    targets = parse_hosts(",".join(exporters[role] for role in roles))
    app = FleetApp(FleetPoller(targets, interval_s=0.25, timeout_s=1.0))
    async with app.run_test(size=(160, 50)) as pilot:

        def read() -> bool:
            app.update_view()
            return "6 hosts, 4 up, 2 down" in _title(app) and "no answer" in "".join(_lines(app))

        await wait_until(pilot, read, timeout_s=30)
        lines = _lines(app)
        dead, nvitop, serve4, silent, dcgm, serve2 = (exporters[role] for role in roles)
        hosts = [line for line in lines if not line.startswith("  ")]
        assert hosts == [
            f"✕ {dead}  DOWN  connection refused: nothing listens on that port",
            f"● {nvitop}  nvitop-exporter · 1 GPU",
            f"● {serve4}  gputui · 4 GPUs",
            f"✕ {silent}  DOWN  no answer within 1 s",
            f"● {dcgm}  dcgm-exporter · 2 GPUs",
            f"● {serve2}  gputui · 2 GPUs",
        ]
        assert lines[2].startswith("  0 A100-SXM4-40GB")  # the monitor's one-line GPU row
        assert "55%" in lines[2]
        assert [line[:18] for line in lines[4:8]] == [f"  {n} A100-SXM4-80GB" for n in range(4)]
        assert "9 GPUs" in _title(app)

        # From here the view shows one set of readings: the exporters' stand-ins change their
        # figures every sample, so a reading arriving between two presses could reorder
        # hosts, and the reversed order would not mirror the one read before it.
        readings = app.source.latest()
        monkeypatch.setattr(app.source, "latest", lambda: readings)
        await pilot.press("s", "s", "s", "s")  # host, util, memory, temp, power
        assert "sorted by power" in _title(app)
        await pilot.press("s", "s")  # around to utilization
        assert "sorted by util" in _title(app)
        order = [line.split()[1] for line in _lines(app) if not line.startswith("  ")]
        assert order[-2:] == [dead, silent]  # hosts with no readings last
        await pilot.press("r")
        assert "(reversed)" in _title(app)
        assert [line.split()[1] for line in _lines(app) if not line.startswith("  ")] == (
            order[::-1]
        )

        await pilot.press("slash")
        await pilot.press(*"a100-sxm4-40", "enter")
        assert _lines(app)[0] == f"● {nvitop}  nvitop-exporter · 1 GPU"
        assert len(_lines(app)) == 2
        await pilot.press("slash")
        await pilot.press(*"down", "enter")
        assert sorted(line.split()[1] for line in _lines(app)) == sorted([silent, dead])
        await pilot.press("escape")
        assert len(_lines(app)) == 6 + 9 and "filter" not in _title(app)


async def test_two_hundred_fifty_six_hosts_fit_and_scroll() -> None:
    with static_exporter(DCGM_EXPOSITION.read_text()) as address:
        targets = [
            Target(f"node-{n:03d}", f"http://{address}/metrics?node={n}") for n in range(256)
        ]
        poller = FleetPoller(targets, interval_s=2.0, timeout_s=5.0)
        app = FleetApp(poller)
        async with app.run_test(size=(80, 24)) as pilot:
            # Until every host has been read once, however long a loaded machine takes.
            await asyncio.to_thread(poller.wait_rounds, 1)
            app.update_view()
            assert "256 hosts, 256 up" in _title(app)
            assert "512 GPUs" in _title(app)
            assert len(_lines(app)) == 256 * 3
            view = app.query_one(FleetView)
            await pilot.press("end")
            await pilot.pause()
            assert view.scroll_offset.y == view.max_scroll_y > 0
            shown = [strip.text for strip in view.render_lines(view.scrollable_content_region)]
            assert any(text.startswith("● node-255") for text in shown)


async def test_a_tick_that_comes_while_the_app_closes_draws_nothing() -> None:
    """The view's timer belongs to the app, whose screen's widgets go first as it closes: a
    tick then (seen once with 256 hosts on a loaded machine) is let go, not an error."""
    with static_exporter(DCGM_EXPOSITION.read_text()) as address:
        poller = FleetPoller([Target("node", f"http://{address}/metrics")], interval_s=2.0)
        app = FleetApp(poller)
        async with app.run_test(size=(80, 24)):
            await asyncio.to_thread(poller.wait_rounds, 1)
            app.update_view()
        app.update_view()  # its widgets are gone


def test_bad_values_and_a_hung_gpu_are_drawn_as_they_are() -> None:
    exporters = (AGE_INF_EXPOSITION, HOSTILE_EXPOSITION, HUNG_EXPOSITION)
    with ExitStack() as stack:
        old, hostile, hung = (stack.enter_context(static_exporter(text)) for text in exporters)
        hosts = scrape_all(parse_hosts(f"{old},{hostile},{hung}"), timeout_s=10)
    now = time.monotonic()
    for key in ("host", "util", "memory", "temp", "power"):
        rows = fleet_rows(hosts, FleetOrder(key=key))
        lines = [row_line(row, {}, now, 160).plain.rstrip() for row in rows]
    assert all(host.up for host in hosts)
    assert lines[0] == f"● {old}  gputui · 1 GPU · gputui_sample_age_seconds = inf: " + (
        "not a number from 0 to 3.1536e+07 seconds; the readings are dated by the scrape"
    )
    assert lines[2].startswith(f"● {hostile}  gputui · 2 GPUs · gputui_sample_age_seconds")
    assert lines[2].endswith("(+8 more)")
    assert lines[-1] == (
        "  1 H100 80GB HBM3   HUNG  not answering for 7 s: the driver may be wedged; "
        "check `nvidia-smi` and `dmesg`."
    )


class RecordedFleet:
    """A fleet source that replays readings recorded from real exporters."""

    error = None
    generation = 1

    def __init__(self, hosts: list[HostReading]) -> None:
        self.hosts = hosts

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def latest(self) -> list[HostReading]:
        return self.hosts


@pytest.fixture(scope="module")
def recorded() -> list[HostReading]:
    """Two exporters and a dead port read once for real; fixed names and ages for snapshots."""
    with ExitStack() as stack:
        live = [
            stack.enter_context(static_exporter(DCGM_EXPOSITION.read_text())),
            stack.enter_context(static_exporter(nvitop_exposition())),
            dead_port(),
        ]
        hosts = scrape_all(parse_hosts(",".join(live)), timeout_s=5)
    names = ["dgx-a:9400", "a100-b:9101", "gpu-c:9922"]
    ages = [1.0, 2.0, None]
    return [
        dataclasses.replace(host, host=name, taken_at=None if age is None else T0 - age)
        for host, name, age in zip(hosts, names, ages, strict=True)
    ]


def _recorded_app(hosts: list[HostReading], error: str = "no answer within 2 s") -> FleetApp:
    """The recorded hosts, then ``dgx-d:9400``: ``dgx-a:9400``'s readings, 42 s old, down."""
    stale = dataclasses.replace(hosts[0], host="dgx-d:9400", up=False, taken_at=T0 - 42)
    stale = stale.failed(error)
    return FleetApp(RecordedFleet([*hosts, stale]), clock=lambda: T0)


def _painted(view: FleetView) -> list[Strip]:
    """The view's lines as Textual paints them (after its own styles)."""
    return view.render_lines(Region(0, 0, view.size.width, view.size.height))


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
async def test_a_down_hosts_readings_are_greyed_not_brighter(
    theme: str, recorded: list[HostReading]
) -> None:
    """Issue 32, item 8: its GPU rows are drawn in one muted colour, between the background
    and the live rows' text, as the monitor's stale panels are (``text-opacity: 60%``)."""
    app = _recorded_app(recorded)
    async with app.run_test(size=(160, 50)) as pilot:
        app.theme = theme
        await pilot.pause()
        view = app.query_one(FleetView)
        lines = _painted(view)
        texts = [strip.text for strip in lines]

        def first_gpu(host: str) -> int:  # dgx-d holds dgx-a's readings: the same GPU 0
            after = next(y for y, text in enumerate(texts) if text[2:].startswith(host))
            return next(y for y in range(after, len(texts)) if texts[y].startswith("  0 H100"))

        live, stale = first_gpu("dgx-a:9400"), first_gpu("dgx-d:9400")

        def colours(strip: Strip) -> set[Color]:
            return {
                Color.from_rich_color(segment.style.color)
                for segment in strip
                if segment.text.strip() and segment.style and segment.style.color
            }

        background = Color.from_rich_color(view.visual_style.rich_style.bgcolor)
        text = Color.from_rich_color(view.visual_style.rich_style.color)
        assert text in colours(lines[live])  # the GPU's name, in the view's text colour
        (grey,) = colours(lines[stale])  # one colour: no level colours left
        assert not any(segment.style and segment.style.bold for segment in lines[stale])
        # Muted: nearer the background than the live text is, yet readable.
        muted = abs(grey.brightness - background.brightness)
        assert 0.25 < muted < abs(text.brightness - background.brightness)
        assert grey == background.blend(text, 0.6)  # the monitor's stale panels' 60%


@pytest.mark.parametrize("width", [80, 60])
async def test_the_age_of_a_down_hosts_readings_is_never_cut(
    width: int, recorded: list[HostReading]
) -> None:
    """Issue 32, item 8: at 80 columns the age came after the reason and was cut to ``rea…``;
    it has a line of its own, right above the readings it dates."""
    refused = recorded[2].error
    assert refused == "connection refused: nothing listens on that port"
    app = _recorded_app(recorded, error=refused)
    async with app.run_test(size=(width, 24)) as pilot:
        await pilot.pause()
        texts = [strip.text.rstrip() for strip in _painted(app.query_one(FleetView))]
        host = texts.index(next(t for t in texts if t.startswith("✕ dgx-d:9400  DOWN  ")))
        assert texts[host + 1] == "  readings below are 42 s old"
        assert texts[host + 2].startswith("  0 H100")
        if width >= 80:  # the reason is whole where there is room for it
            assert texts[host] == f"✕ dgx-d:9400  DOWN  {refused}"


def test_fleet_snapshot_80x24(snap_compare: Any, recorded: list[HostReading]) -> None:
    assert snap_compare(_recorded_app(recorded), terminal_size=(80, 24))


def test_fleet_snapshot_160x50(snap_compare: Any, recorded: list[HostReading]) -> None:
    assert snap_compare(_recorded_app(recorded), terminal_size=(160, 50))


@pytest.mark.parametrize(
    ("variables", "plain"),
    [({}, False), ({"NO_COLOR": "1"}, True), ({"TERM": "dumb"}, True)],
    ids=["colour", "NO_COLOR", "TERM=dumb"],
)
def test_no_color_and_a_dumb_terminal_get_a_plain_fleet_view(
    variables: dict[str, str], plain: bool
) -> None:
    """Issue 18, item 15, for the fleet view as for the monitor: no colour escapes at all."""
    import os
    import sys

    from tests.pty_run import colours_in, run_on_a_pty, shown_text

    env = {k: v for k, v in os.environ.items() if not k.startswith("NO_COLOR")}
    env.update(TERM="xterm-256color", COLORTERM="truecolor")
    env.update(variables)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with static_exporter(DCGM_EXPOSITION.read_text()) as dcgm:
        wanted = f"● {dcgm}  dcgm-exporter · 2 GPUs"
        run = run_on_a_pty(
            [sys.executable, "-m", "gputui", "--hosts", dcgm, "--interval", "0.5"],
            env=env,
            cwd=ROOT,
            size=(120, 30),
            timeout_s=60,
            until=lambda shown: wanted in shown_text(shown),
        )
    assert wanted in shown_text(run.shown), shown_text(run.shown)[-2000:]
    if plain:
        assert colours_in(run.shown) == []
    else:  # the test can see colour where there is some
        assert colours_in(run.shown)
