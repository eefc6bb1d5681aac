"""The ``gputui`` command and its subcommands.

Every usage error is one line on stderr and exit code 2; nothing here prints a
traceback for bad input. Heavy imports (Textual, the samplers, the trainer) are
made inside the handlers, so ``gputui --help`` is instant and the UI process
never imports torch.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from gputui import __version__

INTERVAL_MIN_S = 0.25
INTERVAL_MAX_S = 60.0
EXIT_USAGE = 2


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


def build_parser() -> OneLineParser:
    """The whole command line, subcommands included."""
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

    from gputui.training.bench import add_bench_command  # torch-free; torch loads in the handler

    add_bench_command(commands)

    from gputui.training.experiments.cli import add_experiment_command  # torch-free

    add_experiment_command(commands)

    from gputui.doctor.cli import add_doctor_command  # torch-free; the engine loads in the handler

    add_doctor_command(commands)

    return parser


def _run_app(args: argparse.Namespace) -> int:
    from gputui.ui.app import run_app

    return run_app(interval=args.interval)


def _run_snapshot(args: argparse.Namespace) -> int:
    from gputui.telemetry.snapshot import render_snapshot_json, render_snapshot_table, take_snapshot

    snapshot = take_snapshot()
    print(render_snapshot_json(snapshot) if args.json else render_snapshot_table(snapshot))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gputui``; returns the process exit code."""
    args = build_parser().parse_args(argv)
    handler = getattr(args, "handler", _run_app)
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gputui snapshot | head`: quiet, like other Unix tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
