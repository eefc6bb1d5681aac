"""Standard output for every command: one helper writes it, so that a failed write is one line;
and the one-line messages on standard error (:func:`say`, :func:`failed`).

Each command writes its table or JSON once, at the end, through :func:`write_out`.
A write that fails (``>/dev/full``, a closed ``>&-``) raises :class:`OutputFailed`,
which :func:`gputui.commands.main` turns into one line on standard error and exit
code 1; a reader that went away (``| head -1``) raises ``BrokenPipeError``, which it
ends quietly, as other Unix tools do. Text that standard output's encoding cannot
take (``PYTHONIOENCODING=ascii``, a C locale) is written with ASCII stand-ins.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys

from gputui.exits import EXIT_FAILED
from gputui.format import one_line

ASCII_STAND_INS = str.maketrans({"°": " ", "…": "."})
"""What the reports' non-ASCII characters become where the encoding cannot take them
(``71°C`` reads ``71 C``); one character each, so that tables stay aligned."""


TEXT_WIDTH_MAX = 80
"""The widest the text reports get, however wide the terminal: lines stay easy to read."""
TEXT_WIDTH_MIN = 20
"""The narrowest they get: below this no layout reads, so the terminal wraps them."""


def text_width() -> int:
    """The width the text reports fit: the terminal's (``COLUMNS`` first, then standard
    output's terminal, as ``shutil.get_terminal_size`` reads them), 20 to 80 columns."""
    columns = shutil.get_terminal_size((TEXT_WIDTH_MAX, 24)).columns
    return min(max(columns, TEXT_WIDTH_MIN), TEXT_WIDTH_MAX)


def terminal_columns() -> int | None:
    """The terminal's width (``COLUMNS`` first), or ``None`` when standard output is not a
    terminal and ``COLUMNS`` is not set: a pipe or a file gets whole lines."""
    if "COLUMNS" not in os.environ:
        try:
            if sys.stdout is None or not os.isatty(sys.stdout.fileno()):
                return None
        except (OSError, ValueError):  # no file descriptor: not a terminal either
            return None
    return shutil.get_terminal_size().columns


class OutputFailed(Exception):
    """Standard output could not take a command's output; ``str()`` says why, in a few words."""


def write_out(text: str, end: str = "\n") -> None:
    """Write ``text`` and ``end`` to standard output, and flush it.

    Raises:
        OutputFailed: standard output is closed, or the write failed (a full disk).
        BrokenPipeError: the reader went away.
    """
    stream = sys.stdout
    if stream is None:  # started with standard output closed
        raise OutputFailed("standard output is closed")
    try:
        stream.write(encodable(text + end, stream.encoding))
        stream.flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:  # ValueError: the stream was closed here
        forget_output()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise OutputFailed(f"cannot write to standard output: {reason}") from None


def say(text: str) -> None:
    """Write ``text`` on standard error as one line (:func:`one_line`)."""
    if sys.stderr is not None:  # started with standard error closed: the exit code says it
        sys.stderr.write(one_line(text) + "\n")


def failed(prog: str, message: str) -> int:
    """Write ``PROG: error: MESSAGE`` on standard error, one line; returns exit code 1."""
    say(f"{prog}: error: {message}")
    return EXIT_FAILED


def encodable(text: str, encoding: str | None) -> str:
    """``text`` as ``encoding`` can write it: unchanged, else with ASCII stand-ins and ``?``."""
    if not encoding:
        return text
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return text.translate(ASCII_STAND_INS).encode(encoding, "replace").decode(encoding)
    except LookupError:  # an encoding Python does not know: leave it to the stream
        return text
    return text


def forget_output() -> None:
    """Send standard output to ``/dev/null`` from now on, so the interpreter's last flush
    of what could not be written neither fails again nor prints a traceback."""
    if sys.stdout is None:
        return
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def not_a_terminal() -> str | None:
    """The first standard stream that is not a terminal (``standard input``...), if any.

    The monitor needs all three: Textual reads keys from standard input and draws on
    standard error (so ``gputui 2>log`` would draw into the log), and the terminal's
    size is read from standard output. A closed stream is not a terminal.
    """
    streams = {
        "standard input": sys.__stdin__,
        "standard output": sys.__stdout__,
        "standard error": sys.__stderr__,
    }
    for name, stream in streams.items():
        try:
            if stream is None or not os.isatty(stream.fileno()):
                return name
        except (OSError, ValueError):  # closed, or no file descriptor at all
            return name
    return None
