"""``gputui snapshot --hosts``'s table: a line a host, then a line a GPU."""

from __future__ import annotations

from gputui.fleet.hosts import HostReading
from gputui.fleet.report import render_fleet_table
from tests.ui.fakes import gpu_reading


def test_a_down_host_s_last_readings_are_dated_on_a_line_of_their_own() -> None:
    """The age came after the reason, so a long reason cut it off at 80 columns."""
    down = HostReading(
        "node7:9400",
        up=False,
        error="connection refused: nothing listens on that port, or a firewall drops it",
        gpus=(gpu_reading(0),),
        taken_at=100.0,
    )
    lines = render_fleet_table([down], now=142.0, width=80).splitlines()
    assert lines[0].startswith("node7:9400  DOWN: connection refused")
    assert lines[1] == "  readings below are 42 s old"
    assert lines[2].lstrip().startswith("0 ")
