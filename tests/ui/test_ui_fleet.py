"""The fleet view in the real app: hosts read over real loopback sockets (dcgm-exporter and
nvitop-exporter expositions, a dead port, a host that never answers), sorted, filtered,
256 hosts at once, and snapshots of a recorded fleet at 80x24 and 160x50."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from gputui.fleet.hosts import HostReading
from gputui.fleet.scrape import FleetPoller, scrape_all
from gputui.fleet.targets import Target, parse_hosts
from gputui.ui.fleet_app import FleetApp, FleetView
from tests.fleet.hosts import (
    DCGM_EXPOSITION,
    dead_port,
    nvitop_exposition,
    silent_host,
    static_exporter,
)
from tests.ui.fakes import wait_until

T0 = 1000.0


@pytest.fixture
def exporters() -> Iterator[dict[str, str]]:
    with ExitStack() as stack:
        yield {
            "dcgm": stack.enter_context(static_exporter(DCGM_EXPOSITION.read_text())),
            "nvitop": stack.enter_context(static_exporter(nvitop_exposition())),
            "dead": dead_port(),
            "silent": stack.enter_context(silent_host()),
        }


def _lines(app: FleetApp) -> list[str]:
    return app.query_one(FleetView).plain_lines()


def _title(app: FleetApp) -> str:
    return str(app.query_one("#fleet-title").render())


async def test_the_fleet_view_shows_every_host_sorts_and_filters(
    exporters: dict[str, str],
) -> None:
    roles = ["dead", "nvitop", "silent", "dcgm"]
    targets = parse_hosts(",".join(exporters[role] for role in roles))
    app = FleetApp(FleetPoller(targets, interval_s=0.25, timeout_s=1.0))
    async with app.run_test(size=(160, 50)) as pilot:

        def read() -> bool:
            app.update_view()
            return "4 hosts, 2 up, 2 down" in _title(app) and "no answer" in "".join(_lines(app))

        await wait_until(pilot, read, timeout_s=30)
        lines = _lines(app)
        dead, nvitop, silent, dcgm = (exporters[role] for role in roles)
        hosts = [line for line in lines if not line.startswith("  ")]
        assert hosts == [
            f"✕ {dead}  DOWN  connection refused: nothing listens on that port",
            f"● {nvitop}  nvitop-exporter · 1 GPU",
            f"✕ {silent}  DOWN  no answer within 1 s",
            f"● {dcgm}  dcgm-exporter · 2 GPUs",
        ]
        assert lines[2].startswith("  0 A100-SXM4-40GB")  # the monitor's one-line GPU row
        assert "55%" in lines[2]
        assert "6 GPUs" not in _title(app) and "3 GPUs" in _title(app)

        await pilot.press("s")  # by utilization: dcgm's busiest GPU (87 %) first
        assert "sorted by util" in _title(app)
        hosts = [line for line in _lines(app) if not line.startswith("  ")]
        assert hosts[0] == f"● {dcgm}  dcgm-exporter · 2 GPUs"
        assert hosts[1].startswith(f"● {nvitop}")
        dcgm_gpus = _lines(app)[1:3]
        assert dcgm_gpus[0].startswith("  0 ") and dcgm_gpus[1].startswith("  1 ")  # 87 %, 3 %
        await pilot.press("r")
        assert "(reversed)" in _title(app)
        assert _lines(app)[-3].startswith(f"● {dcgm}")

        await pilot.press("slash")
        await pilot.press(*"a100", "enter")
        assert _lines(app)[0] == f"● {nvitop}  nvitop-exporter · 1 GPU"
        assert len(_lines(app)) == 2
        await pilot.press("slash")
        await pilot.press(*"down", "enter")
        assert [line.split()[1] for line in _lines(app)] == [silent, dead]  # still reversed
        await pilot.press("escape")
        assert len(_lines(app)) == 4 + 3 and "filter" not in _title(app)


async def test_two_hundred_fifty_six_hosts_fit_and_scroll() -> None:
    with static_exporter(DCGM_EXPOSITION.read_text()) as address:
        targets = [
            Target(f"node-{n:03d}", f"http://{address}/metrics?node={n}") for n in range(256)
        ]
        app = FleetApp(FleetPoller(targets, interval_s=2.0, timeout_s=5.0))
        async with app.run_test(size=(80, 24)) as pilot:

            def read() -> bool:
                app.update_view()
                return "256 hosts, 256 up" in _title(app)

            await wait_until(pilot, read, timeout_s=60)
            assert "512 GPUs" in _title(app)
            assert len(_lines(app)) == 256 * 3
            view = app.query_one(FleetView)
            await pilot.press("end")
            await pilot.pause()
            assert view.scroll_offset.y == view.max_scroll_y > 0
            shown = [strip.text for strip in view.render_lines(view.scrollable_content_region)]
            assert any(text.startswith("● node-255") for text in shown)


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


def _recorded_app(hosts: list[HostReading]) -> FleetApp:
    stale = dataclasses.replace(hosts[0], host="dgx-d:9400", up=False, taken_at=T0 - 42)
    stale = stale.failed("no answer within 2 s")
    return FleetApp(RecordedFleet([*hosts, stale]), clock=lambda: T0)


def test_fleet_snapshot_80x24(snap_compare: Any, recorded: list[HostReading]) -> None:
    assert snap_compare(_recorded_app(recorded), terminal_size=(80, 24))


def test_fleet_snapshot_160x50(snap_compare: Any, recorded: list[HostReading]) -> None:
    assert snap_compare(_recorded_app(recorded), terminal_size=(160, 50))
