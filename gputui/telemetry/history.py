"""Bounded history per metric (``"cpu.util"``, ``"gpu0.memory"``...): the last few minutes
in a ``deque`` of fixed ``maxlen``, and at most ``max_metrics`` metrics, the least recently
written forgotten first, so memory stays flat for days.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping

from gputui.format import percent_of
from gputui.telemetry.readings import CpuReading, GpuReading, gpu_label

DEFAULT_WINDOW_S = 300.0
"""How far back sparklines look: five minutes."""

DEFAULT_MAX_METRICS = 512
"""More metrics than eight GPUs and a 256-core host need."""


def samples_for_window(window_s: float, interval_s: float) -> int:
    """How many samples cover ``window_s`` at one sample every ``interval_s``: at least 2, so
    a sparkline always has a line to draw.

    Raises:
        ValueError: A non-positive or non-finite window or interval.
    """
    if not (math.isfinite(window_s) and math.isfinite(interval_s)):
        raise ValueError("window and interval must be finite")
    if window_s <= 0 or interval_s <= 0:
        raise ValueError("window and interval must be positive")
    return max(2, math.ceil(window_s / interval_s))


class History:
    """The latest ``maxlen`` values of each metric, oldest first; ``None`` marks a gap."""

    def __init__(self, maxlen: int, *, max_metrics: int = DEFAULT_MAX_METRICS) -> None:
        """An empty history of ``maxlen`` values per metric, ``max_metrics`` metrics at most.

        Raises:
            ValueError: ``maxlen`` or ``max_metrics`` below 1.
        """
        if maxlen < 1 or max_metrics < 1:
            raise ValueError("maxlen and max_metrics must be at least 1")
        self._maxlen = maxlen
        self._max_metrics = max_metrics
        self._series: OrderedDict[str, deque[float | None]] = OrderedDict()

    @classmethod
    def for_window(cls, interval_s: float, window_s: float = DEFAULT_WINDOW_S) -> History:
        """A history long enough to cover ``window_s`` at one sample per ``interval_s``."""
        return cls(samples_for_window(window_s, interval_s))

    @property
    def maxlen(self) -> int:
        """Values kept per metric."""
        return self._maxlen

    @property
    def max_metrics(self) -> int:
        """Metrics kept at most."""
        return self._max_metrics

    def append(self, metric: str, value: float | None) -> None:
        """Add the newest value of ``metric``; ``None`` (or NaN) records a gap."""
        series = self._series.get(metric)
        if series is None:
            if len(self._series) >= self._max_metrics:
                self._series.popitem(last=False)
            series = self._series[metric] = deque(maxlen=self._maxlen)
        else:
            self._series.move_to_end(metric)
        if value is not None and not math.isfinite(value):
            value = None
        series.append(None if value is None else float(value))

    def record(self, values: Mapping[str, float | None]) -> None:
        """Append one value to each metric named in ``values``: one tick of the clock."""
        for metric, value in values.items():
            self.append(metric, value)

    def values(self, metric: str, *, fill: float | None = None) -> list[float]:
        """The values of ``metric``, oldest first (none for an unknown one), ``fill`` standing
        in for each gap (``None``: gaps left out)."""
        series = self._series.get(metric, ())
        if fill is None:
            return [value for value in series if value is not None]
        return [fill if value is None else value for value in series]

    def series(self, metric: str) -> tuple[float | None, ...]:
        """The raw values of ``metric``, oldest first, gaps as ``None``."""
        return tuple(self._series.get(metric, ()))

    def latest(self, metric: str) -> float | None:
        """The newest value of ``metric``; ``None`` when there is none or it was a gap."""
        series = self._series.get(metric)
        return series[-1] if series else None

    def forget(self, metric: str) -> None:
        """Drop ``metric`` and its values; unknown names are ignored."""
        self._series.pop(metric, None)

    def clear(self) -> None:
        """Drop every metric."""
        self._series.clear()

    def __contains__(self, metric: object) -> bool:
        return metric in self._series

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._series))

    def __len__(self) -> int:
        return len(self._series)


# -- what the monitor records -------------------------------------------------------------


CPU_METRIC = "cpu.util"
"""History name of the host's total utilization."""


def util_metric(label: int | str) -> str:
    """History name of a GPU's utilization, by its label (:func:`gpu_label`: ``0``, ``amd0``)."""
    return f"gpu{label}.util"


def memory_metric(label: int | str) -> str:
    """History name of a GPU's memory in use (percent), by its label."""
    return f"gpu{label}.memory"


def record_cpu(history: History, reading: CpuReading) -> None:
    """Append the host's total utilization to ``history``."""
    history.append(CPU_METRIC, reading.utilization_percent)


def record_gpus(history: History, gpus: Iterable[GpuReading]) -> None:
    """Append each GPU's utilization and memory to ``history`` (a lost GPU records gaps)."""
    for gpu in gpus:
        label = gpu_label(gpu)
        history.append(util_metric(label), gpu.utilization_percent)
        memory = percent_of(gpu.memory_used_bytes, gpu.memory_total_bytes)
        history.append(memory_metric(label), memory)
