"""A host's answer in Prometheus's text format, parsed only as far as gputui reads it.

Most of an answer is series gputui does not read, and the next answer repeats the same label
sets with new values. So a line is skipped by its metric name unless
:data:`~gputui.fleet.exporters.SERIES_READ` holds it, and a label set (the ``{...}`` text)
goes through prometheus_client's parser once, then is looked up (:class:`ExpositionParser`
keeps them). A line of any other shape goes through the parser whole: every line is read, or
refused, as the parser would. TYPE lines are not read, so a counter keeps the name it was
written with (:func:`~gputui.fleet.exporters.read_samples` takes either).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import cast

from prometheus_client.parser import text_string_to_metric_families

from gputui.fleet.exporters import ERROR_MAX, MAX_SERIES, SERIES_READ, NotAnExporter, Sample
from gputui.format import one_line

LABELS_KEPT = 10_000
"""The most label sets kept for a host's next answers; past it they are forgotten."""

_NO_LABELS: Mapping[str, str] = MappingProxyType({})


class ExpositionParser:
    """Parses the answers of one host, one after another; not shared between threads.

    What it keeps for the next answer, the label sets seen, is bounded by
    :data:`LABELS_KEPT`.
    """

    def __init__(self, max_series: int = MAX_SERIES) -> None:
        self._max_series = max_series
        self._labels: dict[str, Mapping[str, str]] = {}
        """Label sets by their text (``{gpu="0",uuid="GPU-..."}``), each parsed once."""

    def parse(self, text: str) -> list[Sample]:
        """The samples of the series gputui reads, in the order they were sent.

        Raises:
            NotAnExporter: when one of those lines does not parse, or there are more than
                ``max_series`` of them (counted before any is parsed whole).
        """
        labels = self._labels
        samples: list[Sample | None] = []
        whole: list[tuple[int, str, str]] = []
        """Lines for the parser: their place in ``samples``, the line, and its label text
        (empty: not to be kept)."""
        waiting: list[tuple[int, str, str, float]] = []
        """Lines whose label text is on a line above, sent to the parser: place, name,
        label text and value."""
        asked: set[str] = set()
        """Label texts sent to the parser with a line above."""
        for line in text.split("\n"):
            line = line.strip()
            if not line or line[0] == "#":
                continue  # no series' name starts with #
            brace = line.find("{")
            if brace < 0:
                blank = _first_blank(line)
                name = line if blank < 0 else line[:blank]
                if name not in SERIES_READ:
                    continue
                value = None if blank < 0 else _plain_value(line[blank + 1 :])
                if value is None:
                    whole.append((len(samples), line, ""))
                samples.append(None if value is None else Sample(name, _NO_LABELS, value))
                continue
            name = line[:brace].rstrip()
            if name not in SERIES_READ:
                continue
            end = line.rfind("}")
            key = line[brace : end + 1]
            value = _plain_value(line[end + 1 :]) if end > brace else None
            if value is None:  # the parser's alone, labels and all
                whole.append((len(samples), line, ""))
                samples.append(None)
                continue
            found = labels.get(key)
            if found is not None:
                samples.append(Sample(name, found, value))
            elif key in asked:
                waiting.append((len(samples), name, key, value))
                samples.append(None)
            else:
                asked.add(key)
                whole.append((len(samples), line, key))
                samples.append(None)
        if len(samples) > self._max_series:
            raise NotAnExporter(
                f"{len(samples)} series sent; gputui reads at most {self._max_series} from one host"
            )
        parsed = _parse_whole([line for _, line, _ in whole])
        for (slot, _, key), sample in zip(whole, parsed, strict=True):
            samples[slot] = sample
            if key:
                labels[key] = sample.labels
        for slot, name, key, value in waiting:
            samples[slot] = Sample(name, labels[key], value)
        if len(labels) > LABELS_KEPT:
            self._labels = {}
        return cast(list[Sample], samples)  # every None was filled


def parse_text(text: str) -> list[Sample]:
    """The samples of the series gputui reads in one answer (see :class:`ExpositionParser`).

    Raises:
        NotAnExporter: see :meth:`ExpositionParser.parse`.
    """
    return ExpositionParser().parse(text)


def _first_blank(line: str) -> int:
    """Where the parser ends a name without labels: the first space or tab; -1 for none."""
    space, tab = line.find(" "), line.find("\t")
    return tab if space < 0 or 0 <= tab < space else space


def _plain_value(rest: str) -> float | None:
    """The value after a series' name and labels, read as prometheus_client reads it, when it
    is one number alone; ``None`` for anything else (a timestamp too): the parser decides."""
    text = rest.lstrip()
    if not text or " " in text or "\t" in text or "_" in text:
        return None
    try:
        return float(text)  # the parser's int() first gives the same float
    except ValueError:
        return None


def _parse_whole(lines: list[str]) -> list[Sample]:
    """``lines`` (samples of series gputui reads, no comment) through prometheus_client's
    parser, one sample each, their labels kept read-only (they are shared).

    Raises:
        NotAnExporter: when a line does not parse.
    """
    if not lines:
        return []
    try:
        samples = [
            Sample(sample.name, MappingProxyType(sample.labels), float(sample.value))
            for family in text_string_to_metric_families("\n".join(lines))
            for sample in family.samples
        ]
    except (ValueError, TypeError, IndexError) as error:
        raise NotAnExporter(
            f"not a Prometheus text exposition ({one_line(str(error))[:ERROR_MAX]})"
        ) from None
    if len(samples) != len(lines):  # one sample a line, as each has a name and no TYPE
        raise NotAnExporter("not a Prometheus text exposition (a line is not one sample)")
    return samples
