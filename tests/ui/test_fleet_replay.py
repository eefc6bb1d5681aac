"""The fleet view driven by a fleet recording (``gputui replay FILE`` of ``gputui record
--hosts``), in the real app: each frame's hosts as the live view shows them, a host that was
down shown down, and the replay's keys (pause, step, seek, go to, speed, loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gputui.recording.frames import FLEET, FORMAT_VERSION, Header
from gputui.recording.player import FleetPlayer
from gputui.recording.reader import Recording
from gputui.recording.writer import RecordingWriter
from gputui.telemetry.snapshot import gpu_as_dict
from gputui.ui.fleet.app import FleetView
from gputui.ui.fleet.replay import FleetReplayApp
from tests.recording.made import STARTED
from tests.recording.made import gpu as made_gpu
from tests.ui.fakes import screen_text, wait_until
from tests.ui.test_replay import replayed_on_a_pty

DOWN = range(8, 12)
"""The frames in which node2 did not answer."""
REFUSED = "connection refused: nothing listens on that port"


def _host(name: str, frame: int, index: int) -> dict[str, Any]:
    down = name == "node2:9922" and frame in DOWN
    return {
        "host": name,
        "up": not down,
        "error": REFUSED if down else None,
        "source": "gputui",
        "via": "http",
        "age_seconds": float(frame - DOWN.start + 1) if down else 0.2,
        "notes": [],
        "gpus": [gpu_as_dict(made_gpu(index, DOWN.start - 1 if down else frame))],
    }


def _made(tmp_path: Path, frames: int = 20) -> Path:
    """A fleet of two hosts recorded for ``frames`` seconds, node2 down in :data:`DOWN`."""
    path = tmp_path / "fleet.ndjson"
    header = Header(
        version=FORMAT_VERSION,
        recording="fleet-replay",
        part=0,
        host="head",
        gputui_version="0.1.0",
        interval_s=1.0,
        full_every=10,
        started_unix=STARTED,
        kind=FLEET,
        source="exporters",
    )
    writer = RecordingWriter(path, header, codec="none")
    for frame in range(frames):
        hosts = [_host("node1:9922", frame, 0), _host("node2:9922", frame, 1)]
        writer.write(frame + 0.5, {"hosts": hosts, "error": None})
    writer.close()
    return path


def _app(path: Path, **options: Any) -> FleetReplayApp:
    return FleetReplayApp(FleetPlayer(Recording.open(path)), **options)


def _rows(app: FleetReplayApp) -> list[str]:
    return app.query_one(FleetView).plain_lines()


def _status(app: FleetReplayApp) -> str:
    return str(app.query_one("#replay-status").render())


async def test_the_fleet_replay_shows_each_frame_and_the_host_that_was_down(
    tmp_path: Path,
) -> None:
    app = _app(_made(tmp_path), playing=False)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_until(pilot, lambda: bool(_rows(app)))
        assert _status(app).startswith("❚❚ paused  +0:00:00 of 0:00:19  2026-11-18 11:06:40 UTC")
        assert "fleet, recorded on head  1x" in _status(app)
        assert REFUSED not in "\n".join(_rows(app)) and "node2:9922" in screen_text(app)
        await pilot.press("right", "right", "right", "left")
        assert app.player.t == 2.5
        await pilot.press("g", "ctrl+a", "ctrl+k", *"9.5", "enter")
        await pilot.pause()
        assert app.player.t == 9.5
        rows = "\n".join(_rows(app))
        assert "node2:9922" in rows and REFUSED in rows
        assert "node1:9922" in rows
        await pilot.press("right_square_bracket")  # a minute on: the last frame
        assert app.player.t == 19.5 and REFUSED not in "\n".join(_rows(app))
        await pilot.press("left_square_bracket")
        assert app.player.t == 0.5


async def test_the_fleet_replay_plays_speeds_up_and_loops(tmp_path: Path) -> None:
    app = _app(_made(tmp_path, 6), speed=16.0)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_until(pilot, lambda: not app.playing)  # the end: it stops there
        assert app.player.t == 5.5 and "❚❚ paused  +0:00:05 of 0:00:05" in _status(app)
        await pilot.press("minus")
        assert app.speed == 8 and "  8x" in _status(app)
        # loop, and play from the start again at 0.25x (a tick in 4 s: nothing moves on
        # before it is read, however loaded the machine), then at 16x again
        await pilot.press(*["minus"] * 5, "l", "space")
        assert app.speed == 0.25 and "loop" in _status(app) and app.player.t == 0.5
        await pilot.press(*["plus"] * 6)
        assert "16x  loop" in _status(app)
        await wait_until(pilot, lambda: app.loops >= 2)
        assert app.playing
        await pilot.press("l")
        await wait_until(pilot, lambda: not app.playing)
        assert app.player.t == 5.5


async def test_the_fleet_replay_s_help_and_palette_offer_its_keys(tmp_path: Path) -> None:
    app = _app(_made(tmp_path), playing=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: bool(_rows(app)))
        areas = dict(app.key_areas())
        explained = dict(areas["Replay"])
        assert explained.get("g") == "Go to an offset, a UTC time (03:00:00 UTC), start or end"
        assert any(keys == "s" for keys, _ in areas["Fleet"])
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert "Pause or play" in titles and "Go to a time" in titles


def test_gputui_replay_opens_a_fleet_recording_in_the_fleet_view(tmp_path: Path) -> None:
    """The command itself, on a real pseudo-terminal: a fleet recording opens the fleet view
    (its hosts, the replay's status line), and ``q`` ends it with exit code 0."""
    shown = replayed_on_a_pty(_made(tmp_path, 10), until="fleet, recorded on head")
    assert "node1:9922" in shown and "node2:9922" in shown
    assert "paused" in shown and "2026-11-18 11:06:40 UTC" in shown
