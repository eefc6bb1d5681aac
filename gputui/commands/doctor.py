"""``gputui doctor [--json] [--quick] [--timeout SECONDS]``.

Exit status: 0 when no check failed, 1 when any did, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from gputui.commands.args import examples, seconds
from gputui.commands.output import text_width, write_out
from gputui.exits import EXIT_FAILED, EXIT_OK
from gputui.format import one_line
from gputui.jobs.config import ProbeConfig

TIMEOUT_MIN_S = 1.0
TIMEOUT_MAX_S = 3600.0

ERASE = "\r\033[K"
"""Back to the start of the line, and clear it: the status line is rewritten in place."""


def add_doctor_command(commands: Any) -> argparse.ArgumentParser:
    """Add ``doctor`` to ``gputui``'s subcommands (``commands`` is ``add_subparsers()``)."""
    doctor: argparse.ArgumentParser = commands.add_parser(
        "doctor",
        help="say why PyTorch can or cannot use the GPUs here, and how fast each device is",
        description=(
            "Check, one by one, what PyTorch needs to use a GPU here: torch itself, the "
            "NVIDIA driver and whether this torch build suits it, CUDA_VISIBLE_DEVICES (the "
            "variable that hides GPUs from CUDA), CUDA and Apple's MPS; each check is ok, "
            "warn, fail or skip, with the fix when it is not ok. Then show three common "
            "mistakes with the errors torch really raises (a tensor on the wrong device, "
            ".numpy() on a GPU tensor, 'cuda0'), and measure each usable device: memory "
            "bandwidth in GB/s and matrix-multiply speed in FLOP/s. torch runs in a process "
            "of its own. Prints a report, or JSON. Exit status: 0 when no check failed, 1 "
            "when any did, 2 for a usage error."
        ),
        epilog=examples(
            ("gputui doctor --quick", "the checks alone, in a few seconds"),
            ("gputui doctor", "the checks, then each device measured"),
            ("gputui doctor --json --timeout 300", "as JSON, for a machine with many GPUs"),
        ),
    )
    doctor.add_argument("--json", action="store_true", help="print JSON instead of text")
    doctor.add_argument(
        "--quick",
        action="store_true",
        help="the checks alone: no mistakes shown, no bandwidth or matmul measured",
    )
    doctor.add_argument(
        "--timeout",
        type=seconds(TIMEOUT_MIN_S, TIMEOUT_MAX_S, "--timeout", ProbeConfig.TIMEOUT_S),
        default=ProbeConfig.TIMEOUT_S,
        metavar="SECONDS",
        help=(
            "how many seconds the checks and measurements in torch's process may take, 1 to "
            f"3600 (default: {ProbeConfig.TIMEOUT_S:g}), plus "
            f"{ProbeConfig.TIMEOUT_PER_GPU_S:g} for each GPU it measures"
        ),
    )
    doctor.set_defaults(handler=run_doctor_command)
    return doctor


def run_doctor_command(args: argparse.Namespace) -> int:
    """Run the doctor, print the report; 1 when any check failed, else 0."""
    # the doctor loads here, so that `gputui --help` (every subcommand's parser) stays quick
    from gputui.doctor.render import render_json, render_text
    from gputui.doctor.run import run_doctor

    show = _status_line()
    report = run_doctor(timeout_s=args.timeout, quick=args.quick, on_step=show)
    if show is not None:
        sys.stderr.write(ERASE)  # the report takes its place
        sys.stderr.flush()
    write_out(render_json(report) if args.json else render_text(report, text_width()))
    return EXIT_FAILED if report.failed else EXIT_OK


def _status_line() -> Callable[[str], None] | None:
    """From now on, each step the doctor starts on one line of standard error, rewritten in
    place; ``None`` when standard error is not a terminal (a pipe or a file gets the report
    alone)."""
    stream = sys.stderr
    if stream is None or not stream.isatty():
        return None

    def show(step: str) -> None:
        stream.write(ERASE + one_line(f"gputui doctor: {step}..."))
        stream.flush()

    show("starting torch's process")
    return show
