"""How numbers and counts read (gputui/format.py), shared by the app and the commands."""

from __future__ import annotations

import pytest

from gputui.format import (
    bind_units,
    fmt_bytes,
    fmt_columns,
    fmt_counted,
    fmt_energy,
    fmt_link_rate,
    fmt_rate,
    fmt_used_total,
    wrap_text,
)

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
