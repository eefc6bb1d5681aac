"""The runner's jobs in a recording (``gputui --record``): a REAL comparison on the CPU, trained
in the pilot while the monitor records, comes back in ``gputui replay`` as it was shown, frame
by frame, seeking back and forward; a replay starts and stops nothing. Then an experiment,
from the real trainer's recorded stream.

The runs are tiny (synthetic data, 256 images, one epoch, one torch thread); the monitor's
samplers are fakes (they are not what is under test here).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console
from textual.widgets import Select, Static

from gputui.jobs.events import EpochFinished, Error, Note, Placement
from gputui.jobs.runner import RunnerSetup
from gputui.recording.player import Player
from gputui.recording.reader import Recording
from gputui.recording.recorder import Recorder
from gputui.recording.render import render_summary_json, render_summary_text
from gputui.recording.runs import DevicesAsked, EventsDrained, JobBegun, entry_as_dict
from gputui.recording.summary import summarise
from gputui.recording.writer import RecordingWriter
from gputui.telemetry.polling import Beat
from gputui.ui.monitor.replay import RUNNER_REFUSAL, ReplayApp
from gputui.ui.widgets.runner.pane import RunnerPane
from tests.helpers import ROOT
from tests.hostile import CLIPBOARD, CRAFTED, SHOWN_TITLE, TITLE
from tests.pty_run import run_on_a_pty, shown_text
from tests.recording.made import header, readings
from tests.ui.fakes import fake_app, screen_text, wait_until
from tests.ui.runner_fakes import TINY_RUN
from tests.ui.streams.replay import RECORDED_TORCH, devices, load, replayed_setup
from tests.ui.streams.scenarios import RECORDED

pytestmark = [pytest.mark.timeout(180), pytest.mark.long_module]

TINY = TINY_RUN.with_changes(epochs=1)
SIZE = (160, 50)


def pane_text(pane: RunnerPane) -> str:
    """What the runner pane shows below its choices: the status, progress and error lines and
    the job's body, as plain text."""
    console = Console(width=80, file=io.StringIO(), color_system=None, record=True)
    for part in ("#runner-status", "#runner-progress-text", "#runner-detail"):
        console.print(pane.query_one(part, Static).content)
    console.print(pane.query_one("#runner-body", Static).content)
    return console.export_text()


class Witness(Recorder):
    """The real recorder, noting what the runner pane showed as each frame was written."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, interval_s=0.2, codec="zstd", runner=True)
        self.pane: RunnerPane | None = None
        self.seen: dict[float, str] = {}

    def take(self, beat: Beat) -> None:
        """On the app's thread, as the pane is drawn there (a beat comes on the engine's)."""
        pane = self.pane
        if pane is None or threading.current_thread() is threading.main_thread():
            self._take_here(beat)
            return
        with contextlib.suppress(RuntimeError):  # the app has stopped
            pane.app.call_from_thread(self._take_here, beat)

    def _take_here(self, beat: Beat) -> None:
        last = self.last_t
        super().take(beat)
        self.flush()  # the frame written by the writer thread, with the pane as it was queued
        pane = self.pane
        if self.last_t is not None and self.last_t != last and pane is not None and pane.built:
            self.seen[self.last_t] = pane_text(pane)


async def test_a_recorded_comparison_replays_as_it_was_shown(tmp_path: Path) -> None:
    path = tmp_path / "shown.ndjson.zst"
    recorder = Witness(path)
    live = fake_app(
        runner=RunnerSetup(
            list_devices=devices,
            installed=lambda: RECORDED_TORCH,
            defaults=TINY,
            drain_interval_s=0.05,
        ),
        recorder=recorder,
        interval=0.2,
    )
    recorder.pane = live.runner
    async with live.run_test(size=SIZE) as pilot:
        pane = live.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        await pilot.press("c")
        await wait_until(pilot, lambda: pane.session is not None and not pane.busy, 120.0)
        assert pane.session is not None and pane.session.speedup is not None
        shown_last = pane_text(pane)
        await wait_until(pilot, lambda: recorder.seen.get(recorder.last_t or 0.0) == shown_last)
    recorder.close()
    assert "Speedup of cpu over cpu (baseline)" in shown_last and "Placement on cpu" in shown_last
    session = pane.session
    assert session is not None and session.speedup is not None
    speedup = session.speedup.steady
    assert speedup is not None

    summary = summarise(Recording.open(path))  # replay --summary
    assert [(run.name, run.epochs, run.status) for run in summary.runs] == [
        ("cpu (baseline)", 1, "ok"),
        ("cpu", 1, "ok"),
    ]
    ips = [run.best_images_per_second for run in session.runs]
    assert [run.images_per_second for run in summary.runs] == ips
    assert [run.speedup for run in summary.runs] == [None, speedup]
    text = render_summary_text(summary)
    assert f"1. training: cpu fp32, 1 epoch, {ips[1]:,.0f} img/s, {speedup:.2f}x the" in text
    (second,) = json.loads(render_summary_json(summary))["runs"][1:]
    assert second["name"] == "cpu" and second["speedup"] == pytest.approx(speedup)

    player = Player(Recording.open(path))
    entries = player.runner_entries()  # (the first frame's: none)
    assert entries == []
    player.seek(player.last_t)  # the replay opens at the end: the runs done before it shows
    entries = player.runner_entries()
    assert player.has_runs and entries[:2] == [DevicesAsked(), DevicesAsked(answered=True)]
    assert isinstance(entries[2], JobBegun) and entries[2].configs == (TINY, TINY)
    drained = [e for entry in entries if isinstance(entry, EventsDrained) for e in entry.events]
    assert sum(isinstance(event, EpochFinished) for event in drained) == 2
    assert sum(isinstance(event, Placement) for event in drained) == 2

    times = sorted(recorder.seen)
    seen = recorder.seen
    distinct = [t for t, old in zip(times[1:], times[:-1], strict=True) if seen[t] != seen[old]]
    assert len(distinct) >= 4  # the runs moved on while recorded
    app = ReplayApp(player, playing=False, runner=RunnerSetup(list_devices=devices))
    async with app.run_test(size=(SIZE[0], SIZE[1] + 1)) as pilot:
        await wait_until(pilot, lambda: app.runner.built and app.runner.display)
        scroll = app.runner.query_one("#runner-scroll")
        await wait_until(pilot, lambda: scroll.size.width > 40)  # laid out: tables at its width
        order = [times[-1], *reversed(distinct), times[0], *distinct, distinct[1], times[-1]]
        for t in order:
            app.seek(t)
            assert app.player.t == t
            assert pane_text(app.runner) == recorder.seen[t], t
        app.seek(times[0])
        for t in times[1:8]:  # frame by frame, as playing moves on
            await pilot.press("right")
            assert app.player.t == t and pane_text(app.runner) == seen[t], t
        app.seek(times[-1])
        await pilot.pause()
        text = screen_text(app)
        assert "Speedup of cpu over cpu (baseline)" in text and "Placement on cpu" in text
        await pilot.press("r", "c", "x", "s")
        await pilot.pause()
        assert [n.message for n in app._notifications] == [RUNNER_REFUSAL] * 4
        assert app.runner.session is not None and len(app.runner.session.runs) == 2
        assert pane_text(app.runner) == recorder.seen[times[-1]]
        app.seek(distinct[1])
        assert app.runner.busy  # as the recorded run was then
        await pilot.press("q")  # but no run goes on here: it quits without asking
        await pilot.pause()
        assert len(app.screen_stack) == 1


async def test_a_recorded_experiment_replays_as_it_was_shown(tmp_path: Path) -> None:
    """The real trainer's sync-stall stream, played into the live pane, recorded, replayed."""
    path = tmp_path / "shown.ndjson"
    recorder = Witness(path)
    live = fake_app(runner=replayed_setup("sync_stall_cpu"), recorder=recorder, interval=0.2)
    recorder.pane = live.runner
    async with live.run_test(size=SIZE) as pilot:
        pane = live.runner
        await wait_until(pilot, lambda: bool(pane.devices))
        pane.query_one("#runner-experiment", Select).value = "sync-stall"
        await pilot.press("x")
        await wait_until(pilot, lambda: not pane.busy and pane.runner.events_seen > 0)
        shown_last = pane_text(pane)
        await wait_until(pilot, lambda: recorder.seen.get(recorder.last_t or 0.0) == shown_last)
    recorder.close()
    assert pane.runner.experiment is not None and pane.runner.experiment.conclusion is not None
    assert "experiment sync-stall finished" in shown_last and "loss once" in shown_last

    player = Player(Recording.open(path))
    assert player.has_runs and summarise(Recording.open(path)).runs == ()  # no training run
    app = ReplayApp(player, playing=False, runner=RunnerSetup(list_devices=devices))
    async with app.run_test(size=(SIZE[0], SIZE[1] + 1)) as pilot:
        await wait_until(pilot, lambda: app.runner.built and app.runner.display)
        scroll = app.runner.query_one("#runner-scroll")
        await wait_until(pilot, lambda: scroll.size.width > 40)
        times = sorted(recorder.seen)
        for t in (times[-1], times[0], times[-1]):
            app.seek(t)
            assert pane_text(app.runner) == recorder.seen[t], t
        assert app.runner.runner.kind == "experiment"


def test_a_recording_s_crafted_runner_events_never_reach_the_terminal_raw(tmp_path: Path) -> None:
    """A recording whose runner events carry escapes (the error's message, detail and kind, a
    note): ``gputui replay`` on a real terminal shows them as visible text, never raw: no title,
    no clipboard, no cleared screen, no reversed text. The stream is the real trainer's
    killed run, its error and a note given the crafted text."""
    *events, error = load("cpu_killed")
    assert isinstance(error, Error)
    crafted = Error(f"killed {CRAFTED}", detail=f"detail {CRAFTED}", kind=f"kind {TITLE}")
    events = [*events, Note(f"note {CRAFTED}"), crafted]
    path = tmp_path / "crafted.ndjson"
    writer = RecordingWriter(path, dataclasses.replace(header(), runner=True), codec="none")
    entries = [JobBegun("training", (RECORDED,)), EventsDrained(tuple(events))]
    writer.write(0.5, readings(0), [entry_as_dict(0.5, entry) for entry in entries])
    writer.write(1.5, readings(1))
    writer.close()

    run = run_on_a_pty(
        [sys.executable, "-m", "gputui", "replay", "--paused", str(path)],
        env={**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color"},
        cwd=ROOT,
        size=(200, 50),
        timeout_s=60,
        script=[
            (lambda shown: "(e: details)" in shown_text(shown), b"e"),  # the detail
            (lambda shown: f"detail{SHOWN_TITLE}" in _unwrapped(shown), b"q"),
        ],
        exit_within_s=20,
    )
    text = shown_text(run.shown)
    assert run.returncode == 0, text[-2000:]
    for raw in (TITLE, CLIPBOARD, "\x1b]0;", "\x1b]52;", "\x1b[2J", "\u202e", "\u2067", "\x9b"):
        assert raw.encode() not in run.shown, raw
    for field in ("killed", "detail", "kind", "note"):
        assert f"{field}{SHOWN_TITLE}" in _unwrapped(run.shown), field


def _unwrapped(shown: bytes) -> str:
    """What a terminal shows of ``shown`` without its spaces and line ends: text that wrapped
    reads on."""
    return "".join(shown_text(shown).split())
