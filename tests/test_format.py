"""How numbers and counts read, and how text from outside is shown (gputui/format.py),
shared by the app and the commands."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gputui.format import (
    bind_units,
    fmt_bytes,
    fmt_columns,
    fmt_counted,
    fmt_elapsed,
    fmt_energy,
    fmt_link_rate,
    fmt_pcie_link,
    fmt_process_kind,
    fmt_rate,
    fmt_used_total,
    for_screen,
    one_line,
    wrap_text,
)
from gputui.recording.frames import DECIMALS
from gputui.telemetry.readings import GpuState
from tests.hostile import CRAFTED, SHOWN_TITLE, TITLE, unsafe

MiB = 2**20


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (999, "999 B"),
        (1000, "0.98 KiB"),
        (1536, "1.5 KiB"),
        (999.4 * MiB, "999.4 MiB"),
        (1015.8 * MiB, "0.99 GiB"),  # issue 18: it read 1015.8 MiB
        (1023.99 * MiB, "1.0 GiB"),
        (2.1e9, "2.0 GiB"),
        (None, "n/a"),
    ],
)
def test_a_size_moves_to_the_next_unit_before_it_reads_1000(value: float, shown: str) -> None:
    assert fmt_bytes(value) == shown


@pytest.mark.parametrize(
    ("joules", "shown"),
    [
        (0.0, "0 J"),
        (0.4, "0 J"),  # millijoules are not worth a wider cell
        (240.0, "240 J"),
        (12345.0, "12.3 kJ"),
        (999_600.0, "1.00 MJ"),  # the prefix is chosen after rounding
        (6.048e7, "60.5 MJ"),  # an H100 at 700 W for a day
        (None, "n/a"),
    ],
)
def test_energy_reads_in_joules_with_a_prefix_in_at_most_7_cells(
    joules: float | None, shown: str
) -> None:
    assert fmt_energy(joules) == shown
    assert len(shown) <= 7


def test_rates_never_read_four_digits() -> None:
    assert fmt_rate(1015.8 * MiB) == "0.99 GiB/s"
    assert fmt_link_rate(1015.8 * MiB) == "0.99 GiB/s"
    assert fmt_link_rate(999.7 * MiB) == "0.98 GiB/s"  # not "1000 MiB/s" once rounded
    assert fmt_link_rate(3.3e8) == "315 MiB/s"
    for exponent in range(1, 6):  # each step from B/s up to PiB/s
        for mantissa in (0.97, 0.98, 0.995, 0.9995, 1.0, 1.01):
            number = fmt_link_rate(mantissa * 1024**exponent).split()[0]
            assert float(number) < 1000, number
            number = fmt_rate(mantissa * 1024**exponent).split()[0]
            assert float(number) < 1000, number


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.4, "0:00"),
        (65.9, "1:05"),  # whole seconds, as ps writes them
        (3 * 3600 + 7 * 60 + 5, "3:07:05"),
        (2 * 86400 + 3 * 3600 + 7 * 60 + 5, "2-03:07:05"),
        (-3.0, "0:00"),  # a start time a little ahead of this clock
        (None, "n/a"),
    ],
)
def test_elapsed_time_reads_as_ps_etime(seconds: float | None, shown: str) -> None:
    assert fmt_elapsed(seconds) == shown


def test_an_elapsed_time_reads_the_same_once_recorded_to_a_thousandth() -> None:
    """A recording keeps times to a thousandth (``DECIMALS``): a time a hair under a whole
    second reads the same live and replayed."""
    for whole in (59, 93, 3599):
        for below in (0.0004, 0.0005, 0.0006, 0.0015, 0.3):
            seconds = whole + 1 - below
            recorded = round(seconds, DECIMALS)
            assert fmt_elapsed(seconds) == fmt_elapsed(recorded), seconds


def test_process_kinds_read_as_nvitop_writes_them() -> None:
    kinds = ("compute", "graphics", "compute+graphics", "other")
    assert [fmt_process_kind(kind) for kind in kinds] == ["C", "G", "C+G", "other"]


def test_used_total_in_the_totals_unit() -> None:
    assert fmt_used_total(500 * MiB, 1015.8 * MiB) == "0.5/0.99 GiB"


@pytest.mark.parametrize(
    ("count", "noun", "shown"),
    [
        (0, "GPU", "0 GPUs"),
        (1, "GPU", "1 GPU"),
        (2, "GPU", "2 GPUs"),
        (1, "epoch", "1 epoch"),
        (12345, "image", "12,345 images"),
        (1, "process", "1 process"),
        (3, "process", "3 processes"),
    ],
)
def test_counted_nouns_agree_with_their_count(count: int, noun: str, shown: str) -> None:
    plural = "processes" if noun == "process" else None
    assert fmt_counted(count, noun, plural) == shown


def test_wrapping_keeps_a_figure_with_its_unit_and_splits_no_number() -> None:
    lines = wrap_text("host -> device pageable 9.50 GB/s, pinned 24.0 GB/s", 24, "", "  ")
    assert lines == ["host -> device pageable", "  9.50 GB/s, pinned", "  24.0 GB/s"]
    bound = "2\u00a0GPUs, 1\u00a0lost, 3.5\u00a0GiB/s, 87%"
    assert bind_units("2 GPUs, 1 lost, 3.5 GiB/s, 87%") == bound


def test_columns_wrap_their_last_cell_under_it_or_below_the_row() -> None:
    rows = [["uuid", "GPU-6f1c2a9e-3b7d-4c5e-9a1f-2d8e7b6c5a40"], ["bus id", "00000000:17:00.0"]]
    assert fmt_columns(rows, width=36) == [
        "uuid    GPU-6f1c2a9e-3b7d-4c5e-9a1f-",
        "        2d8e7b6c5a40",
        "bus id  00000000:17:00.0",
    ]
    narrow = fmt_columns(rows, width=18)
    assert narrow[0] == "uuid" and narrow[1].startswith("  GPU-")
    assert all(len(line) <= 18 for line in narrow)
    assert fmt_columns(rows) == [
        "uuid    GPU-6f1c2a9e-3b7d-4c5e-9a1f-2d8e7b6c5a40",
        "bus id  00000000:17:00.0",
    ]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (TITLE, SHOWN_TITLE),
        ("\x1b]52;c;cHduZWQ=\x07", "\\x1b]52;c;cHduZWQ=\\x07"),
        ("a\tb\nc\rd", "a\\tb\\nc\\rd"),
        ("\x9b31m", "\\x9b31m"),  # C1
        ("del\x7f", "del\\x7f"),
        ("\u202egnp.exe", "\\u202egnp.exe"),  # bidi override
        ("\u2067x\u2069", "\\u2067x\\u2069"),  # bidi isolate
        ("bad\udcff", "bad\\udcff"),  # a byte that was not UTF-8
        ("NVIDIA H100 80GB HBM3 · 71°C …", "NVIDIA H100 80GB HBM3 · 71°C …"),
        ("数据 ünïcode", "数据 ünïcode"),
    ],
)
def test_one_line_shows_every_control_as_visible_text(text: str, shown: str) -> None:
    assert one_line(text) == shown
    assert one_line(shown) == shown  # once is enough: the visible form stays as it is


@dataclass(frozen=True)
class _Inner:
    name: str
    state: GpuState
    count: int


@dataclass(frozen=True)
class _Outer:
    title: str | None
    inner: _Inner
    items: tuple[_Inner, ...]
    labels: dict[str, str]
    values: list[float]


def test_for_screen_makes_every_string_of_a_reading_printable_and_keeps_the_rest() -> None:
    inner = _Inner(CRAFTED, GpuState.LOST, 3)
    raw = _Outer(TITLE, inner, (inner, _Inner("ok", GpuState.OK, 1)), {TITLE: CRAFTED}, [1.5])
    shown = for_screen(raw)
    assert shown.title == SHOWN_TITLE
    assert shown.inner.name == one_line(CRAFTED) and shown.inner.state is GpuState.LOST
    assert shown.inner.count == 3 and shown.values == [1.5]
    assert shown.labels == {SHOWN_TITLE: one_line(CRAFTED)}
    texts = [shown.title, shown.inner.name, *(item.name for item in shown.items)]
    assert all(not unsafe(text) for text in [*texts, *shown.labels, *shown.labels.values()])
    assert raw.title == TITLE and raw.inner.name == CRAFTED  # the reading keeps its text
    assert shown.items[1] is raw.items[1]  # nothing to change: not copied


def test_for_screen_returns_clean_readings_as_they_are() -> None:
    clean = _Outer("GPU 0", _Inner("H100", GpuState.OK, 1), (), {"a": "b"}, [])
    assert for_screen(clean) is clean
    assert for_screen("plain") == "plain" and for_screen(None) is None


@pytest.mark.parametrize(
    ("link", "shown"),
    [
        ((1, 5, 16, 16), "Gen1/5 x16/16"),  # an idle GPU's link, dropped to Gen1
        ((4, None, 8, None), "Gen4 x8"),
        ((None, 5, 16, 16), "n/a x16/16"),
        ((None, 5, None, 16), "n/a"),
    ],
)
def test_a_pcie_link_reads_now_and_at_most(
    link: tuple[int | None, int | None, int | None, int | None], shown: str
) -> None:
    assert fmt_pcie_link(*link) == shown
