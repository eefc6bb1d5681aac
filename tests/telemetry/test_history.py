"""Bounded history: the last few minutes per metric, and memory that stays flat."""

from __future__ import annotations

import math
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputui.telemetry.history import History, samples_for_window


@pytest.mark.parametrize(
    ("window_s", "interval_s", "samples"),
    [(300, 1.0, 300), (300, 0.25, 1200), (300, 60.0, 5), (300, 7.0, 43), (1, 60.0, 2)],
)
def test_samples_for_window(window_s: float, interval_s: float, samples: int) -> None:
    assert samples_for_window(window_s, interval_s) == samples


@pytest.mark.parametrize(
    ("window_s", "interval_s"),
    [(0, 1), (300, 0), (-1, 1), (300, -1), (math.nan, 1), (300, math.inf)],
)
def test_samples_for_window_refuses_nonsense(window_s: float, interval_s: float) -> None:
    with pytest.raises(ValueError):
        samples_for_window(window_s, interval_s)


def test_for_window_sizes_the_history_from_the_interval() -> None:
    assert History.for_window(interval_s=1.0).maxlen == 300
    assert History.for_window(interval_s=0.5, window_s=60).maxlen == 120


def test_keeps_only_the_newest_values_oldest_first() -> None:
    history = History(maxlen=3)
    for value in range(10):
        history.append("gpu0.util", value)
    assert history.values("gpu0.util") == [7.0, 8.0, 9.0]
    assert history.latest("gpu0.util") == 9.0


def test_gaps_are_kept_in_place_and_can_be_filled_or_left_out() -> None:
    history = History(maxlen=5)
    for value in (1.0, None, 3.0, math.nan, 5.0):
        history.append("m", value)
    assert history.series("m") == (1.0, None, 3.0, None, 5.0)
    assert history.values("m") == [1.0, 3.0, 5.0]
    assert history.values("m", fill=0.0) == [1.0, 0.0, 3.0, 0.0, 5.0]
    history.append("m", None)
    assert history.latest("m") is None


def test_unknown_metrics_are_empty() -> None:
    history = History(maxlen=5)
    assert history.values("nope") == []
    assert history.series("nope") == ()
    assert history.latest("nope") is None
    assert "nope" not in history


def test_record_appends_one_tick_to_each_metric() -> None:
    history = History(maxlen=4)
    history.record({"cpu": 10.0, "gpu0": 20.0})
    history.record({"cpu": 11.0, "gpu0": None})
    assert history.values("cpu") == [10.0, 11.0]
    assert history.series("gpu0") == (20.0, None)
    assert list(history) == ["cpu", "gpu0"]
    assert len(history) == 2


def test_the_number_of_metrics_is_bounded_too() -> None:
    history = History(maxlen=2, max_metrics=3)
    for metric in ("a", "b", "c"):
        history.append(metric, 1.0)
    history.append("a", 2.0)  # "a" is now the most recently written
    history.append("d", 1.0)  # so "b" goes
    assert list(history) == ["c", "a", "d"]


def test_forget_and_clear() -> None:
    history = History(maxlen=2)
    history.record({"a": 1.0, "b": 2.0})
    history.forget("a")
    history.forget("never there")
    assert list(history) == ["b"]
    history.clear()
    assert len(history) == 0


@pytest.mark.parametrize(("maxlen", "max_metrics"), [(0, 1), (1, 0), (-5, 10)])
def test_refuses_a_bound_below_one(maxlen: int, max_metrics: int) -> None:
    with pytest.raises(ValueError):
        History(maxlen, max_metrics=max_metrics)


@given(
    maxlen=st.integers(min_value=1, max_value=50),
    values=st.lists(st.none() | st.floats(allow_nan=True, allow_infinity=True), max_size=200),
)
def test_any_run_keeps_exactly_the_tail(maxlen: int, values: list[float | None]) -> None:
    history = History(maxlen)
    for value in values:
        history.append("m", value)
    expected = tuple(None if v is None or not math.isfinite(v) else v for v in values[-maxlen:])
    assert history.series("m") == expected
    assert len(history.series("m")) <= maxlen


def test_memory_stays_flat_over_a_long_run() -> None:
    """Days of samples for eight GPUs cost no more memory than the first window."""
    metrics = [f"gpu{i}.{name}" for i in range(8) for name in ("util", "mem", "temp", "power")]
    history = History.for_window(interval_s=1.0)

    def tick(step: int) -> None:
        history.record({metric: float(step % 101) + 0.5 for metric in metrics})

    for step in range(history.maxlen):  # fill the window once
        tick(step)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for step in range(20 * history.maxlen):  # 100 minutes more at 1 s
            tick(step)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 16 * 1024
    assert all(len(history.series(metric)) == history.maxlen for metric in metrics)
