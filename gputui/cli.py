"""The ``gputui`` command and its subcommands.

Every usage error is one line on stderr and exit code 2; nothing here prints a
traceback for bad input. Heavy imports (Textual, the samplers, the trainer) are
made inside the handlers, so ``gputui --help`` is instant and the UI process
never imports torch.

What ``gputui bench`` and ``gputui experiment`` share lives here too: the types of
their number flags (:func:`whole_number`, :func:`niceness`) and the checks of their
folder flags (:func:`check_data_dir`, :func:`check_runs_dir`).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import stat
import sys
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, NoReturn

from gputui import __version__
from gputui.training.config import NICE_MAX, ConfigError  # torch-free

INTERVAL_MIN_S = 0.25
INTERVAL_MAX_S = 60.0
EXIT_USAGE = 2
THREADS_MAX = 1024
"""Most ``--threads``: more than any machine has cores; torch overflows past 2**31 - 1."""
WORKERS_MAX = 256
"""Most ``--workers``: each is a process holding a copy of the dataset."""
SHOWN_PATH_MAX = 60
"""Longest path an error message shows whole; a longer one is cut, ending in ``...``."""


def one_line(text: str) -> str:
    """``text`` as one line of printable text: control characters become escapes.

    Command-line values go into error messages as typed, and a value may hold a
    newline, a terminal escape or bytes that are not UTF-8 (``\\udcff``); each such
    character is written as Python writes it in a string literal (``\\n``,
    ``\\x1b``, ``\\udcff``), so the message stays one line and cannot drive the
    terminal.
    """
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are a single line that says what to do.

    Flags must be spelled out: no abbreviations, so ``gputui experiment batch-sweep
    --batch-size 64`` is refused rather than read as ``--batch-sizes 64``, and a flag
    added later cannot change what a script's abbreviation means.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Exit 2 with ``message`` on one line of standard error."""
        line = one_line(f"{self.prog}: error: {message} (see '{self.prog} --help')")
        self.exit(EXIT_USAGE, line + "\n")


def interval_seconds(text: str) -> float:
    """Parse ``--interval``: seconds between samples, 0.25 to 60."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not INTERVAL_MIN_S <= value <= INTERVAL_MAX_S:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds from {INTERVAL_MIN_S:g} to {INTERVAL_MAX_S:g}"
            ", e.g. --interval 1"
        )
    return value


def whole_number(least: int, most: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number from ``least`` to ``most`` (no upper bound: None).

    Used by ``gputui bench`` and ``gputui experiment`` for ``--epochs``, ``--threads``,
    ``--workers`` and the like.
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least or (most is not None and value > most):
            up_to = "" if most is None else f" and at most {most}"
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number of {least} or more{up_to}"
            )
        return value

    return parse


def niceness(text: str) -> int:
    """Parse ``--nice``: how much to lower a child process's priority, 0 to 19."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= NICE_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is not a niceness from 0 to {NICE_MAX}")
    return value


def check_data_dir(text: str) -> None:
    """Refuse a ``--data-dir`` that is not an existing folder, before any child starts.

    Raises:
        ConfigError: one line naming the flag and what to do (empty, missing, a file, a
            name too long, ``~user`` with no such user).
    """
    _check_folder(text, "--data-dir", "data dir", "the default cache folder", made=False)


def check_runs_dir(text: str) -> None:
    """Refuse a ``--runs-dir`` that run folders cannot be made in, before any child starts.

    The folder may be missing (the trainer makes it), but then its nearest existing
    parent must be a folder this user may write to.

    Raises:
        ConfigError: one line naming the flag and what to do.
    """
    _check_folder(text, "--runs-dir", "runs dir", "the default runs folder", made=True)


def _check_folder(text: str, flag: str, what: str, default: str, *, made: bool) -> None:
    leave_out = f"or leave {flag} out to use {default}"
    if not text.strip():
        raise ConfigError(f"{what} is empty: name a folder, {leave_out}")
    shown = _shown_path(text)
    try:
        path = Path(text).expanduser()
        kind = _kind(path)
        nearest, nearest_kind = path, kind
        if kind is None and made:  # the trainer makes it: what would it be made in?
            nearest = next(p for p in path.absolute().parents if _kind(p) is not None)
            nearest_kind = _kind(nearest)
        writable = os.access(nearest, os.W_OK | os.X_OK)
    except (OSError, RuntimeError, ValueError) as exc:  # a name too long; ~user, no such user
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        name = "a folder" if made else "an existing folder"
        raise ConfigError(
            f"{what} {shown} cannot be used ({reason.rstrip('.')}): name {name}, {leave_out}"
        ) from None
    if kind == "file":
        raise ConfigError(f"{what} {shown} is not a folder: name a folder, {leave_out}")
    if kind is None and not made:
        raise ConfigError(f"{what} {shown} does not exist: create it, {leave_out}")
    if made and nearest_kind == "file":
        raise ConfigError(
            f"{what} {shown} cannot be made inside the file {_shown_path(str(nearest))}: "
            f"name a folder, {leave_out}"
        )
    if made and not writable:
        where = "" if nearest == path else f" (it would be made in {_shown_path(str(nearest))})"
        raise ConfigError(
            f"{what} {shown} is not writable{where}: name a folder you may write to, {leave_out}"
        )


def _kind(path: Path) -> str | None:
    """``folder``, ``file`` (anything else that is there), or ``None`` when nothing is.

    Raises:
        OSError: when the path cannot be looked at (a name too long, no permission).
        ValueError: for a null byte in the path.
    """
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # not there, or "inside" a file
        return None
    return "folder" if stat.S_ISDIR(mode) else "file"


def _shown_path(text: str) -> str:
    """``text`` as an error message shows a path: one printable line, cut when very long."""
    shown = one_line(text)
    return shown if len(shown) <= SHOWN_PATH_MAX else f"{shown[: SHOWN_PATH_MAX - 3]}..."


SUBCOMMANDS = {
    "bench": ("gputui.training.bench", "add_bench_command"),
    "experiment": ("gputui.training.experiments.cli", "add_experiment_command"),
    "doctor": ("gputui.doctor.cli", "add_doctor_command"),
}
"""The subcommands defined in their own modules (torch-free; the engines load in the
handlers): the module, and its function that adds the subcommand to the parser."""


def build_parser(wanted: Collection[str] | None = None) -> OneLineParser:
    """The whole command line, subcommands included.

    Args:
        wanted: The :data:`SUBCOMMANDS` whose flags to define (default: all). The
            others are only named, so that ``gputui`` alone does not import their
            modules; see :func:`commands_named`.
    """
    parser = OneLineParser(
        prog="gputui",
        description=(
            "What compute is here, can PyTorch use it, and how much faster is it? "
            "With no command, opens the live monitor."
        ),
    )
    parser.add_argument("--version", action="version", version=f"gputui {__version__}")
    parser.add_argument(
        "--interval",
        type=interval_seconds,
        default=1.0,
        metavar="SECONDS",
        help="seconds between samples, 0.25 to 60 (default: 1)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    snapshot = commands.add_parser(
        "snapshot", help="print the monitor's readings once, as a table or JSON"
    )
    snapshot.add_argument("--json", action="store_true", help="print JSON instead of a table")
    snapshot.set_defaults(handler=_run_snapshot)

    for name, (module, function) in SUBCOMMANDS.items():
        if wanted is None or name in wanted:
            getattr(importlib.import_module(module), function)(commands)
        else:
            commands.add_parser(name)  # never parsed: it is not on the command line
    return parser


def commands_named(argv: Sequence[str]) -> set[str] | None:
    """The :data:`SUBCOMMANDS` a command line may use; ``None`` (all) when it asks for help.

    Any word equal to a subcommand's name counts, even a flag's value: defining a
    subcommand that goes unused costs only time.
    """
    if any(word in ("-h", "--help") for word in argv):
        return None
    return {word for word in argv if word in SUBCOMMANDS}


def _run_app(args: argparse.Namespace) -> int:
    # Start-up allocates a lot and frees little: collecting it cost a tenth of the time to
    # the first frame. The app turns collection back on once that frame is out.
    gc.disable()
    try:
        from gputui.ui.polling import HeadStart  # no Textual: the first readings start now

        head_start = HeadStart.begin()
        from gputui.ui.app import run_app  # Textual loads while they are taken

        return run_app(interval=args.interval, head_start=head_start)
    finally:
        gc.enable()  # in case the app ended before its first frame


def _run_snapshot(args: argparse.Namespace) -> int:
    from gputui.telemetry.snapshot import render_snapshot_json, render_snapshot_table, take_snapshot

    snapshot = take_snapshot()
    print(render_snapshot_json(snapshot) if args.json else render_snapshot_table(snapshot))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gputui``; returns the process exit code."""
    if argv is None:
        argv = sys.argv[1:]
    args = build_parser(commands_named(argv)).parse_args(argv)
    handler = getattr(args, "handler", _run_app)
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gputui snapshot | head`: quiet, like other Unix tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
