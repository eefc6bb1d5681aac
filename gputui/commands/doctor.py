"""``gputui doctor [--json] [--quick] [--timeout SECONDS]``.

Exit status: 0 when no check failed, 1 when any did, 2 for a usage error. The
doctor is imported in the handler, so ``gputui --help`` stays instant.
"""

from __future__ import annotations

import argparse
from typing import Any

from gputui.commands.args import seconds
from gputui.commands.output import text_width, write_out
from gputui.exits import EXIT_FAILED, EXIT_OK
from gputui.jobs.config import ProbeConfig

TIMEOUT_MIN_S = 1.0
TIMEOUT_MAX_S = 3600.0


def add_doctor_command(commands: Any) -> argparse.ArgumentParser:
    """Add ``doctor`` to ``gputui``'s subcommands (``commands`` is ``add_subparsers()``)."""
    doctor = commands.add_parser(
        "doctor",
        help="say why PyTorch can or cannot use the GPUs here, and how fast each device is",
        description=(
            "Check torch, the NVIDIA driver, CUDA_VISIBLE_DEVICES, CUDA and MPS; show the "
            "tutorials' pitfalls with torch's real errors; measure each usable device's "
            "bandwidth (GB/s) and matmul FLOP/s. torch runs in a child process. Exit status: 0 "
            "when no check failed, 1 when any did, 2 for a usage error."
        ),
    )
    doctor.add_argument("--json", action="store_true", help="print JSON instead of text")
    doctor.add_argument(
        "--quick", action="store_true", help="skip the bandwidth and matmul measurements"
    )
    doctor.add_argument(
        "--timeout",
        type=seconds(TIMEOUT_MIN_S, TIMEOUT_MAX_S, "--timeout", ProbeConfig.TIMEOUT_S),
        default=ProbeConfig.TIMEOUT_S,
        metavar="SECONDS",
        help=(
            f"how long the torch probe may take, 1 to 3600 (default: {ProbeConfig.TIMEOUT_S:g}),"
            f" plus {ProbeConfig.TIMEOUT_PER_GPU_S:g} for each GPU it measures"
        ),
    )
    doctor.set_defaults(handler=run_doctor_command)
    return doctor


def run_doctor_command(args: argparse.Namespace) -> int:
    """Run the doctor, print the report; 1 when any check failed, else 0."""
    from gputui.doctor import render_json, render_text, run_doctor

    report = run_doctor(timeout_s=args.timeout, quick=args.quick)
    write_out(render_json(report) if args.json else render_text(report, text_width()))
    return EXIT_FAILED if report.failed else EXIT_OK
