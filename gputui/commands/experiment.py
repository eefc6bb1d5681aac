"""``gputui experiment``: the tutorials' lessons, measured on this machine.

::

    gputui experiment batch-sweep [--batch-sizes 32,64,...,2048] [--pageable] [common options]
    gputui experiment sync-stall  [--batch-size B] [common options]
    gputui experiment pipelines   [--batch-size B] [--workers N] [common options]

    common options: [--device DEV]... [--steps N] [--budget SECONDS] [--dataset auto|cifar10|
                    synthetic] [--data-dir PATH] [--no-download] [--threads N] [--nice N] [--json]

Torch-free: the experiment runs in an engine child process (:class:`ChildProcess`),
every device in turn (default: cpu and every usable accelerator). Each row is
shown on standard error as it is measured; the table and the one-sentence
conclusion, or ``--json`` (schema: :mod:`gputui.jobs.results`),
go to standard output (:mod:`gputui.jobs.reports`).

Undocumented for users, for tests and quick runs: ``--limit N`` loads N training
images; ``--warmup N`` sets the untimed steps before each measurement (default 2).

Exit codes: 0 when every device finished, 1 when the data or a device failed or
nothing at all could be measured ("status": "empty"), 2 for bad input (one line on
stderr; a batch larger than the data too), 130 after Ctrl+C. Ctrl+C stops the
measurement in hand (a second one at once): the rows measured so far are printed,
and the devices stopped or never reached are marked stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from gputui.commands.args import (
    check_data_dir,
    job_options,
    job_settings,
    seconds,
    usage_error,
    whole_number,
    workers_option,
)
from gputui.commands.interrupt import CtrlC
from gputui.commands.output import write_out
from gputui.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from gputui.format import one_line
from gputui.jobs.config import (
    DEFAULT_BATCH_SIZES,
    EXPERIMENTS,
    ConfigError,
    ExperimentConfig,
    sweep_sizes,
)
from gputui.jobs.process import ChildProcess
from gputui.jobs.reports import ProgressLines, render_result
from gputui.jobs.results import ExperimentResult

PROG = "gputui experiment"

_HELP = {
    "batch-sweep": (
        "throughput, and the share of each step spent moving data, per batch size",
        "Seed 001: 'try different batch sizes to see what proportion of time is being used "
        "to move tensors between devices'. For each batch size, time each step in two "
        "phases: getting the batch onto the device (.to(device) from host memory; on the "
        "CPU, preparing the batch) and computing.",
    ),
    "sync-stall": (
        "the cost of reading the loss to the host every step",
        "Seed 002: 'logging the loss every minibatch stalls the GPU'. Run the same steps "
        "reading loss.item() every step (as TensorBoard's add_scalar does) and with the loss "
        "summed on the device and read once, and compare the time per step.",
    ),
    "pipelines": (
        "the tutorials' DataLoader against data resident on the device",
        "Why the tutorial's GPU speedup looks small: train the same steps with a DataLoader "
        "(workers, .to(device) per batch) and with the whole dataset on the device as uint8, "
        "batches cut and normalised there.",
    ),
}


def add_experiment_command(commands: Any) -> argparse.ArgumentParser:
    """Add ``experiment`` to ``gputui``'s subcommands (``commands`` is ``add_subparsers()``)."""
    experiment = commands.add_parser(
        "experiment",
        help="measure the tutorials' lessons: batch sizes, sync stalls, pipelines",
        description=(
            "Run one of the tutorials' lessons as a short experiment on each device "
            "(default: cpu and every usable accelerator), then state the result in one "
            "sentence. Each takes seconds per device."
        ),
    )
    kinds = experiment.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    common = _common_options()
    for name in EXPERIMENTS:
        short, long = _HELP[name]
        parser = kinds.add_parser(name, parents=[common], help=short, description=long)
        if name == "batch-sweep":
            parser.add_argument(
                "--batch-sizes",
                type=batch_sizes,
                metavar="LIST",
                help="comma-separated batch sizes (default: "
                f"{','.join(map(str, DEFAULT_BATCH_SIZES))})",
            )
            parser.add_argument(
                "--pageable",
                action="store_true",
                help="copy from pageable host memory, as seed 001's DataLoader hands batches "
                "out (default on CUDA: pinned)",
            )
        else:
            parser.add_argument(
                "--batch-size", type=whole_number(1), default=256, metavar="B", help="default: 256"
            )
        if name == "pipelines":
            workers_option(parser)
    experiment.set_defaults(handler=run_experiment_command)
    return experiment


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False, parents=[job_options()])
    common.add_argument(
        "--steps",
        type=whole_number(1),
        default=200,
        metavar="N",
        help="most timed steps per measurement (default: 200; --budget usually ends it first)",
    )
    common.add_argument(
        "--budget",
        type=seconds(0, math.inf, "--budget", 2),
        default=2.0,
        metavar="SECONDS",
        help="fewer steps when a measurement would take longer than this (default: 2)",
    )
    common.add_argument("--warmup", type=whole_number(1), default=2, help=argparse.SUPPRESS)
    return common


def config_from_args(args: argparse.Namespace) -> ExperimentConfig:
    """The experiment the parsed command line asks for (not yet validated)."""
    return ExperimentConfig(
        **job_settings(args),
        experiment=args.experiment,
        devices=tuple(args.devices or ()),
        batch_sizes=getattr(args, "batch_sizes", None) or sweep_sizes(args.limit),
        batch_size=getattr(args, "batch_size", 256),
        steps=args.steps,
        warmup_steps=args.warmup,
        budget_s=args.budget,
        pin_memory=not getattr(args, "pageable", False),
    )


def validated_config(args: argparse.Namespace) -> ExperimentConfig:
    """The experiment the parsed command line asks for, checked as far as it can be without torch.

    No side effects: the devices are checked later, in the child (that needs torch).

    Raises:
        ConfigError: one line naming the bad value and what to use.
    """
    if args.data_dir is not None:
        check_data_dir(args.data_dir)
    config = config_from_args(args)
    config.validate()
    return config


def run_experiment_command(args: argparse.Namespace) -> int:
    """The ``gputui experiment`` handler; returns the exit code."""
    prog = f"{PROG} {args.experiment}"
    try:
        config = validated_config(args)
    except ConfigError as exc:
        return usage_error(prog, str(exc))
    result = ExperimentResult(config.experiment)
    progress = ProgressLines(sys.stderr)
    with CtrlC() as ctrl_c:
        process = ctrl_c.watch(ChildProcess(config).start())
        try:
            for event in process.events():
                result.absorb(event)
                progress.show(event)
        finally:
            process.stop()
    error = result.error
    if error is not None and error.kind in {"config", "device"}:
        return usage_error(prog, error.message)
    if args.json:
        write_out(json.dumps(result.to_json_dict(), indent=2))
    elif result.started is not None:
        write_out(render_result(result))
    if error is not None:
        sys.stderr.write(one_line(f"{prog}: error: {error.message}") + "\n")
    if ctrl_c.pressed:
        return EXIT_INTERRUPTED
    return EXIT_OK if result.status == "ok" else EXIT_FAILED


def batch_sizes(text: str) -> tuple[int, ...]:
    """Parse ``--batch-sizes``: comma-separated whole numbers of 1 or more."""
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of whole numbers of 1 or more, e.g. 32,64,128"
        )
    return sizes
