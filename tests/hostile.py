"""Text that tries to drive the terminal of whoever reads it, and the checks that none got
through: a real process with a crafted command line, readings with every text field crafted,
and what a screen or a report may hold.

Any local user can start a process with such a command line on a GPU, and any exporter can
send such labels; gputui must show them as visible text (``\\x1b]0;...``), never raw.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields, is_dataclass, replace
from enum import Enum
from typing import Any, TypeVar

import psutil

from gputui.device import Device
from tests.helpers import wait_for

TITLE = "\x1b]0;pwned\x07"
"""OSC 0: sets the terminal's title."""
CLIPBOARD = "\x1b]52;c;cHduZWQ=\x07"
"""OSC 52: writes the clipboard."""
CLEAR = "\x1b[2J\x1b[H"
"""Clears the screen and moves home."""
C1_CSI = "\x9b31m"
"""The one-byte C1 form of CSI (red), which some terminals take."""
BACKWARDS = "\u202egnp.exe"
"""A right-to-left override: reads ``exe.png``."""
ISOLATE = "\u2067x\u2069"
"""A right-to-left isolate and its end."""
SHIFTS = "tab\there new\nline cr\rback\bbell\x07 del\x7f"
"""Controls that shift or split a row."""

CRAFTED = TITLE + CLIPBOARD + CLEAR + C1_CSI + BACKWARDS + ISOLATE + SHIFTS
"""All of them in one string."""
SHOWN_TITLE = "\\x1b]0;pwned\\x07"
"""How :data:`TITLE` reads once made visible."""

SECRET = "hunter2"
"""A password on a command line, which gputui redacts."""

CRAFTED_ARGV = [
    TITLE + "evil",  # argv[0], as `exec -a` sets it
    "-c",
    "import time; time.sleep(600)",
    f"--password={SECRET}",  # early: it must show in a table that cuts long command lines
    CLIPBOARD,
    CLEAR,
    C1_CSI,
    BACKWARDS,
    ISOLATE,
    "tab\there",
    "new\nline",
]
"""A Python child that sleeps, named and called with every kind of crafted text."""


@contextmanager
def crafted_process() -> Iterator[subprocess.Popen[bytes]]:
    """A real process whose command line is :data:`CRAFTED_ARGV`; killed afterwards."""
    child = subprocess.Popen(CRAFTED_ARGV, executable=sys.executable)
    try:
        # Popen returns once exec has begun, before the kernel has laid out the new command
        # line: on a loaded machine /proc/PID/cmdline read empty (and the sampler showed
        # the process's name) in that window.
        wait_for(lambda: psutil.Process(child.pid).cmdline() == CRAFTED_ARGV, "its exec")
        yield child
    finally:
        child.kill()
        child.wait()


def unsafe(text: str, *, newlines: bool = False) -> list[str]:
    """The characters in ``text`` that must not reach a terminal: C0 controls (newlines
    allowed where ``newlines``), DEL, C1 controls, bidi overrides and isolates, and lone
    surrogates. An empty list when ``text`` is safe."""
    found = []
    for char in text:
        code = ord(char)
        if char == "\n" and newlines:
            continue
        if (
            code < 0x20
            or 0x7F <= code <= 0x9F
            or 0x202A <= code <= 0x202E
            or 0x2066 <= code <= 0x2069
            or 0xD800 <= code <= 0xDFFF
        ):
            found.append(char)
    return found


T = TypeVar("T")


def crafted(value: T) -> T:
    """``value`` (a reading) with :data:`CRAFTED` put into every string in it, the way
    :func:`gputui.format.for_screen` walks it; enums, numbers and ``None`` kept."""
    return _crafted(value)  # type: ignore[no-any-return]


def _crafted(value: Any) -> Any:
    if isinstance(value, Enum) or value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, Device):  # parsed: no outside text can be in one
        return value
    if isinstance(value, str):
        return CRAFTED + value
    if isinstance(value, (tuple, list)):
        return type(value)(_crafted(item) for item in value)
    if isinstance(value, dict):
        return {_crafted(key): _crafted(item) for key, item in value.items()}
    if is_dataclass(value) and not isinstance(value, type):
        return replace(
            value, **{f.name: _crafted(getattr(value, f.name)) for f in fields(value) if f.init}
        )
    return value
