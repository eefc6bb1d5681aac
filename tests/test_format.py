"""How numbers and counts read (gputui/format.py), shared by the app and the commands."""

from __future__ import annotations

import pytest

from gputui.format import fmt_bytes, fmt_counted, fmt_link_rate, fmt_rate, fmt_used_total

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
