"""The doctor's report as plain text (80 columns, or the terminal's if narrower) or as JSON;
a device's figure rows (:func:`figure_rows`) serve the text and the app's Doctor screen alike.

The JSON is a contract for scripts: the README shows it, and a test holds the two together.
"""

from __future__ import annotations

import dataclasses
import json
import re
import textwrap
from typing import Any

from gputui.device import plain
from gputui.doctor.checks import FIGURES, Check, DeviceReport, DoctorReport, Status
from gputui.format import (
    NA,
    NO_BREAK,
    bind_units,
    fmt_bandwidth,
    fmt_bytes,
    fmt_columns,
    fmt_tflops,
    for_screen,
)

WIDTH = 80
"""The widest the text gets (a narrower terminal gets narrower text)."""

STATUS_WORDS = {status: status.value for status in Status} | {Status.FAIL: "FAIL"}
"""How each status reads in text: its value, but a failure shouts."""

NAME_WIDTH_MAX = 22
"""Widest the name column gets; longer names push their message to the next line."""
MESSAGE_ROOM_MIN = 32
"""Fewest cells a check's message gets beside its name; with less (a narrow terminal) every
message goes under its name."""


_COMMAND_START = re.compile(r"^(?:python\d?|pip\d?|sudo|export|unset|gputui|/\S+|'/)[\s]")


def report_as_dict(report: DoctorReport) -> dict[str, Any]:
    """The report as plain JSON-ready data: the dataclasses' fields, statuses as words, and
    the checks counted by status."""
    return {
        "checks": [{**plain(check), "status": check.status.value} for check in report.checks],
        "devices": [{**plain(device), "notes": list(device.notes)} for device in report.devices],
        "facts": dataclasses.asdict(report.facts),
        "summary": {status.value: count for status, count in report.counts().items()},
    }


def render_json(report: DoctorReport) -> str:
    """The report as indented JSON."""
    return json.dumps(report_as_dict(report), indent=2, allow_nan=False)


def render_text(report: DoctorReport, width: int = WIDTH) -> str:
    """The report as aligned plain text in lines of at most ``width``: checks, devices, then
    a one-line summary. A command too long for a line is continued with `` \\``. Text from
    outside (GPU names, errors) is printable (:func:`for_screen`)."""
    report = for_screen(report)
    lines = ["Checks", *_check_lines(report.checks, width)]
    if report.devices:
        legend = "Devices (GB/s: 10^9 bytes/s; a copy counts bytes read + written)"
        lines += ["", *_wrap(legend, width, "", "  ")]
        for device in report.devices:
            lines += _device_lines(device, width)
    lines += ["", *_wrap(summary(report), width, "", "")]
    return "\n".join(lines)


def summary(report: DoctorReport) -> str:
    """``2 failed, 1 warning, 8 ok, 2 skipped, 3 shown.`` (exit status 1 when any failed;
    ``shown``: the pitfalls' ``info`` rows, when there are any)."""
    counts = report.counts()
    warnings = "warning" if counts[Status.WARN] == 1 else "warnings"
    shown = f", {counts[Status.INFO]} shown" if counts[Status.INFO] else ""
    return (
        f"{counts[Status.FAIL]} failed, {counts[Status.WARN]} {warnings}, "
        f"{counts[Status.OK]} ok, {counts[Status.SKIP]} skipped{shown}."
    )


def is_command(text: str) -> bool:
    """Whether a fix is a shell command to copy whole, rather than a sentence."""
    return bool(_COMMAND_START.match(text))


def _wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    """Wrap at spaces, but not between a number and its unit, nor inside a `backquoted`
    command that fits on a line of its own; a word longer than a line is split."""
    room = width - len(rest)

    def guard(match: re.Match[str]) -> str:
        code = match.group(0)
        return code.replace(" ", NO_BREAK) if len(code) <= room else code

    lines = textwrap.wrap(
        re.sub(r"`[^`]*`", guard, bind_units(text)),
        width=width,
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
    ) or [first.rstrip()]
    return [line.replace(NO_BREAK, " ") for line in lines]


def command_lines(command: str, width: int, indent: str) -> list[str]:
    """``command`` on lines of at most ``width`` after ``indent``, each but the last ending
    in `` \\`` so that it pastes into a shell as one command.

    Broken only at spaces outside quotes; a word longer than a line stays whole (and runs
    past the width), since a break inside it would not paste back.
    """
    words = _shell_words(command)
    longest = max(len(word) for word in words)
    indent = indent[: max(width - longest - 4, 0)]  # room for the longest word, continued
    lines = [indent + words[0]]
    for word in words[1:]:
        if len(lines[-1]) + 1 + len(word) + 2 <= width:
            lines[-1] += " " + word
        else:
            lines[-1] += " \\"
            lines.append(indent + "  " + word)
    return lines


def _shell_words(command: str) -> list[str]:
    """``command`` split at the spaces outside its quotes, quotes kept."""
    words, word, quote = [], "", ""
    for char in command:
        if char == " " and not quote:
            if word:
                words.append(word)
            word = ""
            continue
        if char in "'\"" and quote in ("", char):
            quote = "" if quote else char
        word += char
    if word:
        words.append(word)
    return words or [""]


def _check_lines(checks: tuple[Check, ...], width: int) -> list[str]:
    name_width = min(NAME_WIDTH_MAX, max((len(check.name) for check in checks), default=0))
    column = 2 + 4 + 2 + name_width + 2
    under = width - column < MESSAGE_ROOM_MIN  # narrow: each message under its name
    if under:
        column = 2 + 4 + 2
    pad = " " * column
    lines: list[str] = []
    fixed: dict[str, str] = {}  # each fix printed, and the check it was printed under
    for check in checks:
        status = f"  {STATUS_WORDS[check.status]:<4}  "
        head = f"{status}{check.name:<{name_width}}  "
        if under or len(check.name) > name_width:  # the name on a line of its own
            lines += _wrap(check.name, width, status, " " * len(status))
            head = pad
        lines += _wrap(check.message, width, head, pad)
        if check.fix:
            label = "fix: " if check.status in (Status.FAIL, Status.WARN) else "tip: "
            if check.fix in fixed:  # printed once: the same command twice reads as two steps
                lines += _wrap(
                    f"as for {fixed[check.fix]}, above", width, pad + label, pad + " " * len(label)
                )
                continue
            fixed[check.fix] = check.name
            if is_command(check.fix):
                if column + len(label) + len(check.fix) <= width:
                    lines.append(f"{pad}{label}{check.fix}")
                else:  # continued with " \\", so that it still pastes as one command
                    lines += [f"{pad}{label.rstrip()}", *command_lines(check.fix, width, "    ")]
            else:
                lines += _wrap(check.fix, width, pad + label, pad + " " * len(label))
    return lines


def _device_lines(device: DeviceReport, width: int) -> list[str]:
    facts = [device.name]
    if device.nvml_index is not None:  # CUDA's numbering is not NVML's
        facts.append(f"NVML's GPU {device.nvml_index}")
    if device.compute_capability:
        facts.append(f"compute {device.compute_capability}")
    if device.memory_bytes is not None:
        facts.append(f"memory {fmt_bytes(device.memory_bytes)}")
    indent = "  " + " " * max(len(str(device.device)), 6) + "  "
    lines = _wrap(", ".join(facts), width, f"  {device.device:<6}  ", indent)
    if any(getattr(device, name) is not None for name in FIGURES):
        rows = fmt_columns(figure_rows(device, plain=True), width=width - len(indent))
        lines += [indent + row for row in rows]
    for note in device.notes:
        lines += _wrap(note, width, indent + "- ", indent + "  ")
    return lines


def figure_rows(device: DeviceReport, *, plain: bool) -> list[tuple[str, str]]:
    """A device's measured figures as (label, value) rows; one not measured reads ``n/a``.

    ``plain`` gives the text report's rows: ASCII arrows, commas, a row per matmul
    precision; otherwise the app's: ``→`` and ``⇄``, ``·``, one matmul row.
    """
    arrow, both, comma = ("->", "<->", ",") if plain else ("→", "⇄", " ·")
    cpu = device.device.kind == "cpu"
    rows = [("host memcpy" if cpu else "copy on device", _copy_figure(device))]
    if cpu:
        rows.append((f"host {both} device", f"{NA} (the CPU is the host)"))
    else:
        for source, target, pageable, pinned in (
            ("host", "device", device.h2d_pageable_bytes_per_s, device.h2d_pinned_bytes_per_s),
            ("device", "host", device.d2h_pageable_bytes_per_s, device.d2h_pinned_bytes_per_s),
        ):
            value = f"pageable {fmt_bandwidth(pageable)}{comma} pinned {fmt_bandwidth(pinned)}"
            rows.append((f"{source} {arrow} {target}", value))
    fp32, bf16 = fmt_tflops(device.matmul_fp32_tflops), fmt_tflops(device.matmul_bf16_tflops)
    if plain:
        return [*rows, ("matmul fp32", fp32), ("matmul bf16", bf16)]
    return [*rows, ("matmul", f"fp32 {fp32} · bf16 {bf16}")]


def _copy_figure(device: DeviceReport) -> str:
    """The copy within the device's memory, marked as counted: ``3.02 TB/s read + write``."""
    if device.copy_bytes_per_s is None:
        return NA
    return f"{fmt_bandwidth(device.copy_bytes_per_s)} read + write"
