"""How numbers read, and how text from outside is shown: shared by the app and the
headless commands.

Pure functions with no dependencies. Every formatter takes ``None`` for "not
supported or not known" and returns ``n/a``: readings never guess. Text that gputui did
not write itself reaches a screen only through :func:`one_line` (:func:`for_screen` for a
whole reading).
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Collection, Sequence
from dataclasses import fields, is_dataclass, replace
from enum import Enum
from typing import Any, TypeVar, cast

NA = "n/a"
"""What a value that is not supported or not known reads as."""

_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_DECIMAL_PREFIXES = ("", "k", "M", "G", "T", "P")
_NEXT_UNIT_AT = 999.5
"""A size moves to the next unit before it would read 1000 (``1015.8 MiB`` reads ``0.99 GiB``),
so a figure never takes four digits before its point, whatever its precision."""


def without_noise(value: float) -> float:
    """``value`` to 12 significant digits: ``71.5 / 100`` gives ``0.715``, not
    ``0.7149999999999999``, where a figure goes out as text (an exposition, JSON)."""
    return float(f"{value:.12g}")


def fmt_bytes(value: float | None, *, precision: int = 1) -> str:
    """``1536`` -> ``1.5 KiB``; binary units, as nvidia-smi's MiB.

    A size under 1 of its unit (1000 to 1023 of the unit below) keeps one more
    decimal: ``1.04e9`` -> ``0.97 GiB``, not ``1.0 GiB``.
    """
    if value is None:
        return NA
    size = float(value)
    for unit in _BINARY_UNITS:
        if abs(size) < _NEXT_UNIT_AT or unit == _BINARY_UNITS[-1]:
            if unit == "B":
                return f"{int(size)} B"
            decimals = precision + 1 if round(abs(size), precision + 1) < 1 else precision
            return f"{size:.{decimals}f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def fmt_rate(bytes_per_s: float | None) -> str:
    """``2.5e9`` -> ``2.3 GiB/s``."""
    return NA if bytes_per_s is None else f"{fmt_bytes(bytes_per_s)}/s"


def fmt_percent(value: float | None, *, precision: int = 0) -> str:
    """``42.4`` -> ``42%``."""
    return NA if value is None else f"{value:.{precision}f}%"


def fmt_fan(percent: float | None, rpm: float | None) -> str:
    """``45%``; ``1395 rpm`` where only a tachometer's speed is known."""
    return fmt_unit(rpm, " rpm") if percent is None and rpm is not None else fmt_percent(percent)


def fmt_unit(value: float | None, unit: str, *, precision: int = 0) -> str:
    """``(71.0, "°C")`` -> ``71°C``; ``(300.5, " W")`` -> ``300 W``... with the unit as given."""
    return NA if value is None else f"{value:.{precision}f}{unit}"


def fmt_used_total(used: float | None, total: float | None) -> str:
    """``(1 GiB, 80 GiB)`` -> ``1.0/80.0 GiB``, in the total's unit."""
    if used is None or total is None:
        return f"{fmt_bytes(used)} / {fmt_bytes(total)}"
    total_text = fmt_bytes(total)
    number, _, unit = total_text.partition(" ")
    scale = _unit_scale(unit)
    return f"{used / scale:.1f}/{number} {unit}"


def percent_of(used: float | None, total: float | None) -> float | None:
    """``used`` as a percentage of ``total``; ``None`` when either is unknown or total is 0."""
    if used is None or not total:
        return None
    return 100.0 * used / total


def _unit_scale(unit: str) -> float:
    return float(1024 ** _BINARY_UNITS.index(unit))


def fmt_yes_no(value: bool | None) -> str:
    """``True`` -> ``yes``, ``False`` -> ``no``, ``None`` -> ``n/a``."""
    return NA if value is None else ("yes" if value else "no")


def ellipsize(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, ending in ``…`` when it was cut."""
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"


def fmt_columns(
    rows: Sequence[Sequence[str]],
    *,
    right: Collection[int] = (),
    gap: int = 2,
    width: int | None = None,
) -> list[str]:
    """Lay ``rows`` of cells out as plain-text lines with aligned columns, a line a row,
    trailing spaces stripped; a short row leaves its last columns empty, and the columns in
    ``right`` align right (numbers). A row longer than ``width`` has its last cell wrapped
    under where that cell starts (:func:`wrap_text`: on lines of its own below the row, with
    too little room there)."""
    if not rows:
        return []
    count = max(len(row) for row in rows)
    widths = [max((len(row[i]) for row in rows if i < len(row)), default=0) for i in range(count)]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        line = (" " * gap).join(cells).rstrip()
        if width is None or len(line) <= width or len(row) < 2:
            lines.append(line)
        else:
            lead = (" " * gap).join(cells[:-1]) + " " * gap
            lines += wrap_text(row[-1], width, lead, " " * len(lead))
    return lines


COMMAND_ROOM_MIN = 16
"""Fewest cells a process table's command column gets beside the others; with less, each
command goes on a line of its own under its row."""


def fmt_process_table(
    heading: list[str],
    rows: list[list[str]],
    commands: list[str],
    *,
    right: Collection[int],
    lead: str,
    width: int,
) -> list[str]:
    """A table of processes, each line ``lead`` then the columns: their commands in a last
    column (the lines cut to ``width``) where it gets :data:`COMMAND_ROOM_MIN` cells, else
    each under its row, indented two more and cut (the rows kept whole)."""
    table = fmt_columns([heading, *rows], right=right)
    room = width - len(lead) - max(len(line) for line in table) - 2
    if room >= COMMAND_ROOM_MIN:
        full = [
            [*heading, "COMMAND"],
            *([*row, cmd] for row, cmd in zip(rows, commands, strict=True)),
        ]
        return [ellipsize(lead + line, width) for line in fmt_columns(full, right=right)]
    lines = [lead + table[0]]
    for line, command in zip(table[1:], commands, strict=True):
        lines += [lead + line, ellipsize(lead + "  " + command, width)]
    return lines


WRAP_ROOM_MIN = 12
"""Fewest cells a wrapped text is given beside its lead; with less, it goes below."""
NO_BREAK = "\u00a0"
"""Stands for a space that wrapping must not break at; turned back into a space after."""
_NUMBER_AND_UNIT = re.compile(r"(?<=\d) (?=[^\W\d_]|%)")


def bind_units(text: str) -> str:
    """``text`` with each number bound to the word after it (``24.0 GB/s``, ``2 GPUs``), so
    that wrapping it never leaves a figure at the end of a line and its unit on the next."""
    return _NUMBER_AND_UNIT.sub(NO_BREAK, text)


def wrap_text(text: str, width: int, first: str, rest: str) -> list[str]:
    """``text`` wrapped to ``width`` at spaces (and hyphens) but never between a number and
    its unit, ``first`` before its first line and ``rest`` before the others; a word longer
    than a line is split, never cut.

    Where ``first`` leaves fewer than ``WRAP_ROOM_MIN`` cells, it stands on a line of its
    own and the text goes below it, indented two more than ``first``'s own indent.
    """
    if width - len(first) < WRAP_ROOM_MIN and first.strip():
        below = " " * (len(first) - len(first.lstrip()) + 2)
        return [first.rstrip(), *wrap_text(text, width, below, below)]
    first, rest = (_blank_within(indent, width) for indent in (first, rest))
    lines = textwrap.wrap(bind_units(text), width, initial_indent=first, subsequent_indent=rest)
    return [line.replace(NO_BREAK, " ") for line in lines] or [first.rstrip()]


def _blank_within(indent: str, width: int) -> str:
    """A blank ``indent`` shortened to leave ``WRAP_ROOM_MIN`` cells of ``width`` (or all)."""
    if indent.strip() or width - len(indent) >= WRAP_ROOM_MIN:
        return indent
    return indent[: max(width - WRAP_ROOM_MIN, 0)]


def fmt_with_limit(
    value: float | None, limit: float | None, unit: str, *, precision: int = 0
) -> str:
    """``(300, 700, " W")`` -> ``300/700 W``; ``300 W`` without a limit; ``n/a`` without a value."""
    if value is None:
        return NA
    if limit:
        return f"{value:.{precision}f}/{limit:.{precision}f}{unit}"
    return f"{value:.{precision}f}{unit}"


def fmt_ghz(mhz: float | None, max_mhz: float | None) -> str:
    """A CPU's clock, as the monitor and the snapshot both show it: ``(2450, 3500)`` ->
    ``2.45/3.50 GHz``; ``2.45 GHz`` without a maximum; ``n/a`` without a reading."""
    current = None if mhz is None else mhz / 1000
    limit = None if max_mhz is None else max_mhz / 1000
    return fmt_with_limit(current, limit, " GHz", precision=2)


def one_line(text: str) -> str:
    """``text`` as one line of printable text: the one sanitiser of text from outside.

    Whatever gputui did not write itself (command lines, user names, GPU names, an exporter's
    labels, another host's error text, a file's contents, a value typed on the command line)
    passes through here before it reaches a screen or a text report, directly or through
    :func:`for_screen`. Every character that is not printable is written as Python writes it
    in a string literal: C0 and C1 controls (``\\x1b``, ``\\n``, ``\\t``, ``\\x9b``), so
    that no escape sequence reaches the terminal (a title, the clipboard through OSC 52, a
    cleared screen) and no row is split or shifted; bidi overrides and other format characters
    (``\\u202e``), so that text cannot read backwards; and lone surrogates (bytes that were
    not UTF-8, ``\\udcff``), which an encoder would refuse. Widths are measured after this.
    """
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


_Shown = TypeVar("_Shown")
_KEPT = frozenset({int, float, bool, type(None)})
"""Types :func:`for_screen` returns as they are, without a look inside."""
_FIELDS: dict[type, tuple[str, ...]] = {}
"""Each dataclass's field names, as :func:`for_screen` walks them."""


def for_screen(value: _Shown) -> _Shown:
    """``value`` with every string in it through :func:`one_line`: a string, or a reading.

    The readings keep their text as it came (``--json`` writes it exactly, escaped by JSON);
    the copy made here is what screens and text reports are drawn from. Dataclasses (frozen
    or not), tuples, lists and dicts are copied where something in them changed, else
    returned as they are; enums, numbers and ``None`` are kept.
    """
    return cast(_Shown, _shown(value))


def _shown(value: Any) -> Any:
    kind = type(value)
    if kind in _KEPT:
        return value
    if kind is str:
        return one_line(value)
    if isinstance(value, Enum):
        return value
    if isinstance(value, str):
        return one_line(value)
    if kind is tuple or kind is list:
        items = [item if type(item) in _KEPT else _shown(item) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return kind(items)
    if kind is dict:
        pairs = {_shown(key): _shown(item) for key, item in value.items()}
        return value if pairs == value else pairs
    names = _FIELDS.get(kind)
    if names is None:
        if not is_dataclass(value) or isinstance(value, type):
            return value
        names = _FIELDS[kind] = tuple(f.name for f in fields(value) if f.init)
    changes = {}
    for name in names:
        old = getattr(value, name)
        if type(old) in _KEPT:
            continue
        new = _shown(old)
        if new is not old:
            changes[name] = new
    return replace(value, **changes) if changes else value


def exception_line(exc: BaseException) -> str:
    """``RuntimeError: CUDA error: ...``: the exception's type and the first line of its text."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def fmt_number(value: float | None, template: str) -> str:
    """``(3.14159, "{:.2f}")`` -> ``3.14``; ``n/a`` for ``None``."""
    return NA if value is None else template.format(value)


def fmt_fraction(value: float | None, *, precision: int = 1) -> str:
    """A fraction as a percentage: ``0.834`` -> ``83.4%`` (an accuracy)."""
    return NA if value is None else f"{100 * value:.{precision}f}%"


def fmt_share(fraction: float | None) -> str:
    """A share as a percentage: ``0.41`` -> ``41%``; below 10%, one decimal (``6.4%``)."""
    if fraction is None:
        return NA
    value = 100 * fraction
    return f"{value:.1f}%" if abs(value) < 9.95 else f"{value:.0f}%"


def fmt_signed_share(fraction: float) -> str:
    """``0.004`` -> ``+0.4%``, ``-0.01`` -> ``-1.0%``."""
    return ("+" if fraction >= 0 else "-") + fmt_share(abs(fraction))


def fmt_ms(value: float | None) -> str:
    """Milliseconds with about three significant figures: ``0.423``, ``12.3``, ``456``."""
    if value is None:
        return NA
    size = abs(value)
    if size < 10:
        return f"{value:.2f}"
    return f"{value:.1f}" if size < 100 else f"{value:.0f}"


def fmt_elapsed(seconds: float | None) -> str:
    """Time since a process started, as ``ps -o etime`` writes it: ``7:05``, ``3:07:05``,
    ``2-03:07:05`` (days, hours, minutes, seconds). Whole seconds of the time to a
    thousandth, as a recording keeps it, so that a replay shows the second the monitor
    showed (93.9996 s is 1:34 in both, not 1:33 live and 1:34 replayed)."""
    if seconds is None:
        return NA
    minutes, secs = divmod(int(round(max(seconds, 0), 3)), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


_PROCESS_KINDS = {"compute": "C", "graphics": "G", "compute+graphics": "C+G"}


def fmt_process_kind(kind: str) -> str:
    """A GPU process's kind as nvitop writes it: ``C`` (compute), ``G`` (graphics), ``C+G``."""
    return _PROCESS_KINDS.get(kind, kind)


def fmt_count(value: float | None) -> str:
    """A count or a rate with thousands separators: ``12,345``."""
    return NA if value is None else f"{value:,.0f}"


def fmt_counted(count: int, noun: str, plural: str | None = None) -> str:
    """A count and its noun, singular for one: ``(1, "GPU")`` -> ``1 GPU``,
    ``(2, "GPU")`` -> ``2 GPUs``, ``(12345, "image")`` -> ``12,345 images``; ``plural`` where
    it is not ``noun`` + ``s``."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def fmt_numbers(numbers: Sequence[int]) -> str:
    """Numbers in order, each run of consecutive ones as its ends: ``(0, 1, 2, 3, 17)`` ->
    ``0-3, 17``, ``(0, 17)`` -> ``0, 17`` (NVLink links down)."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1][1:] = [number]
        else:
            runs.append([number])
    return ", ".join("-".join(map(str, run)) for run in runs)


def fmt_cores(logical: int, physical: int | None) -> str:
    """A host's CPUs, as the monitor and the snapshot both name them: ``64 threads, 32 cores``
    (``64 threads`` where the platform does not tell its cores)."""
    threads = fmt_counted(logical, "thread")
    return threads if not physical else f"{threads}, {fmt_counted(physical, 'core')}"


def fmt_ips(value: float | None) -> str:
    """Images per second: ``12,345 img/s``."""
    return NA if value is None else f"{fmt_count(value)} img/s"


def fmt_times(ratio: float | None, *, precision: int = 1) -> str:
    """A ratio: ``3.14`` -> ``3.1x`` (``precision=2``: ``3.14x``)."""
    return NA if ratio is None else f"{ratio:.{precision}f}x"


def fmt_decimal(value: float | None, unit: str) -> str:
    """Three significant digits with a decimal (SI) prefix: ``(2.5e9, "B/s")`` -> ``2.50 GB/s``.

    The prefix is chosen after rounding, so ``999.6e9`` reads ``1.00 TB/s``, not
    ``1000 GB/s``.
    """
    if value is None:
        return NA
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}"
    rounded = float(f"{value:.3g}")
    power = math.floor(math.log10(abs(rounded)) / 3)
    power = min(max(power, 0), len(_DECIMAL_PREFIXES) - 1)
    scaled = rounded / 1000**power
    decimals = max(0, 2 - math.floor(math.log10(abs(scaled))))
    return f"{scaled:.{decimals}f} {_DECIMAL_PREFIXES[power]}{unit}"


def fmt_bandwidth(bytes_per_s: float | None) -> str:
    """A measured bandwidth in decimal units, as GPU and memory makers state them:
    ``3.02e12`` -> ``3.02 TB/s``, ``2.5e10`` -> ``25.0 GB/s``."""
    return fmt_decimal(bytes_per_s, "B/s")


def fmt_energy(joules: float | None) -> str:
    """Energy in joules, three significant digits with an SI prefix: ``12345.0`` -> ``12.3 kJ``,
    ``4.56e6`` -> ``4.56 MJ``; under a joule reads ``0 J`` (the counter counts millijoules, which
    no one reads), so the text never takes more than 7 cells below a thousand TJ."""
    if joules is None:
        return NA
    return fmt_decimal(joules if joules >= 1.0 else 0.0, "J")


def fmt_tflops(value: float | None) -> str:
    """A throughput given in TFLOP/s, in the unit that fits: ``48.21`` -> ``48.2 TFLOP/s``,
    ``0.0557`` -> ``55.7 GFLOP/s``, ``0.000968`` -> ``968 MFLOP/s``."""
    return NA if value is None else fmt_decimal(value * 1e12, "FLOP/s")


def fmt_link_rate(bytes_per_s: float | None) -> str:
    """A link's throughput, 3 significant digits: ``2.0 GiB/s``, ``315 MiB/s``."""
    if bytes_per_s is None:
        return NA
    text = fmt_rate(bytes_per_s)
    number, _, unit = text.partition(" ")
    if "." in number and len(number) > 4:  # 314.7 -> 315
        number = f"{float(number):.0f}"
    return f"{number} {unit}"


def fmt_pcie_link(
    gen: int | None, gen_max: int | None, width: int | None, width_max: int | None
) -> str:
    """A PCIe link now and at most, as the monitor and the snapshot both show it:
    ``(1, 5, 16, 16)`` -> ``Gen1/5 x16/16``; ``Gen4 x16`` without the maximums; ``n/a`` for
    a part not known, and alone where neither is."""
    if gen is None and width is None:
        return NA
    generation = NA if gen is None else "Gen" + fmt_with_limit(gen, gen_max, "")
    lanes = NA if width is None else "x" + fmt_with_limit(width, width_max, "")
    return f"{generation} {lanes}"
