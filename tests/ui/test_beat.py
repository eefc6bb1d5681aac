"""The monitor's beat schedule, on a clock the test moves (no app, no loop, no wait)."""

from __future__ import annotations

import pytest

from gputui.ui.monitor.beat import MIN_REST, BeatScheduler


def test_sources_polled_within_one_beat_share_the_next_beat_and_its_one_timer() -> None:
    beat = BeatScheduler(interval=1.0, epoch=100.0)
    assert beat.schedule("cpu", 100.30) == pytest.approx(0.70)  # the first one due sets a timer
    assert beat.schedule("nvml", 100.55) is None  # the same beat: that timer polls it too
    assert beat.due(100.99) == ["cpu", "nvml"]  # a timer may fire a little early
    assert beat.due(101.00) == []  # each source is polled once


def test_a_sample_that_overran_waits_for_the_next_beat_with_some_rest() -> None:
    beat = BeatScheduler(interval=1.0, epoch=0.0)
    # came back just before beat 3: polling again at once would give the driver no rest
    delay = beat.schedule("nvml", 3.0 - MIN_REST / 2)
    assert delay == pytest.approx(1.0 + MIN_REST / 2)  # beat 4
    assert beat.schedule("cpu", 2.5) == pytest.approx(0.5)  # beat 3: a timer of its own
    assert beat.due(3.0) == ["cpu"]  # beat 4's source waits for its own timer
    assert beat.due(4.0) == ["nvml"]


def test_late_timers_poll_every_beat_that_has_come_in_order() -> None:
    beat = BeatScheduler(interval=0.5, epoch=0.0)
    beat.schedule("mps", 0.1)  # beat 1 (0.5)
    beat.schedule("cpu", 0.6)  # beat 2 (1.0)
    assert beat.due(1.2) == ["mps", "cpu"]


def test_readings_are_held_until_taken_and_in_flight_follows_the_samples() -> None:
    beat = BeatScheduler(interval=1.0, epoch=0.0)
    beat.started("cpu")
    beat.started("nvml")
    beat.arrived("cpu", "cpu reading")
    assert beat.in_flight == {"nvml"}
    beat.failed("nvml")
    assert not beat.in_flight
    assert beat.take() == {"cpu": "cpu reading"}
    assert beat.take() == {}


def test_restart_counts_beats_from_the_new_epoch() -> None:
    beat = BeatScheduler(interval=1.0, epoch=0.0)
    beat.restart(10.25)
    assert beat.schedule("cpu", 10.5) == pytest.approx(0.75)
    assert beat.beat_time(1) == pytest.approx(11.25)
