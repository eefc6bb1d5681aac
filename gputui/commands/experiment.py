"""``gputui experiment``: the tutorials' lessons, measured on this machine.

The flags and the output; the experiment runs in an engine child (:class:`ChildProcess`),
its table is :mod:`gputui.jobs.experiments.report`'s and its JSON
:meth:`ExperimentResult.to_json_dict`'s.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from gputui.commands.args import (
    batch_size_option,
    check_data_options,
    examples,
    job_options,
    job_settings,
    seconds,
    usage_error,
    whole_number,
    whole_numbers,
    workers_option,
)
from gputui.commands.output import say, write_out
from gputui.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from gputui.jobs.config import (
    DEFAULT_BATCH_SIZES,
    EXPERIMENTS,
    ConfigError,
    ExperimentConfig,
    sweep_sizes,
)
from gputui.jobs.experiments.report import ProgressLines, render_result
from gputui.jobs.interrupt import CtrlC
from gputui.jobs.process import ChildProcess
from gputui.jobs.results import ExperimentResult

PROG = "gputui experiment"

_HELP = {
    "batch-sweep": (
        "throughput, and the share of each step spent moving data, per batch size",
        "For each batch size, train a few seconds' worth of steps and time each step in two "
        "parts: getting the batch onto the device (.to(device) from host memory, as the "
        "tutorials' loop does; on the CPU, which copies nothing, preparing the batch) and "
        "computing. A table gives, per device and batch size, the steps timed, images/s, the "
        "milliseconds of each part and the data's share of the step; a sentence then says "
        "where the data's share and the throughput were highest. The tutorials' advice it "
        "measures: try batch sizes to see how much of the time goes into moving tensors "
        "between devices.",
        (
            (
                "gputui experiment batch-sweep --dataset synthetic --limit 1024 --budget 0.5",
                "a quick sweep on generated images (batch 32 to 1024)",
            ),
            (
                "gputui experiment batch-sweep --batch-sizes 64,256,1024",
                "three batch sizes, on the CPU and every GPU",
            ),
            (
                "gputui experiment batch-sweep --pageable --json",
                "copies to each GPU from pageable memory; as JSON",
            ),
        ),
    ),
    "sync-stall": (
        "the cost of reading the loss to the host every step",
        "Measure the sync stall: reading a value computed on a GPU (loss.item(), as logging "
        "the loss every step does) makes the CPU wait until the GPU has finished every step "
        "queued so far, so the two stop overlapping. Train the same steps reading the loss "
        "every step and with the loss summed on the device and read once, taking turns over "
        "3 rounds. A table gives, per device and way, the ms per step, images/s and the "
        "spread between rounds; a sentence then says what reading every step cost, or that "
        "the rounds spread too widely to tell.",
        (
            (
                "gputui experiment sync-stall --dataset synthetic --limit 1024 --budget 0.5",
                "a quick run on generated images",
            ),
            (
                "gputui experiment sync-stall --batch-size 64",
                "small batches, where the stall weighs most",
            ),
        ),
    ),
    "pipelines": (
        "the tutorials' DataLoader against data kept on the device",
        "Train the same steps with the two ways of getting batches to the device: classic, "
        "as the tutorials do (a DataLoader's worker processes prepare each batch on the CPU, "
        "then .to(device) copies it), and resident (the whole dataset copied to the device "
        "once, as 8-bit images, each batch cut and normalised there). A table gives, per "
        "device and pipeline, the ms per step, images/s, the spread between its 3 rounds, "
        "the seconds spent copying the dataset and the workers; a sentence then says which "
        "was faster and by how much, or that the rounds spread too widely to tell. "
        "It is why the tutorials' GPU speedup looks small.",
        (
            (
                "gputui experiment pipelines --dataset synthetic --limit 1024 --budget 0.5",
                "a quick run on generated images",
            ),
            (
                "gputui experiment pipelines --workers 4",
                "the classic pipeline with 4 DataLoader workers",
            ),
        ),
    ),
}
"""Each experiment's one-line help (as ``gputui experiment --help`` lists it), its
description, and its examples (command line, what it does)."""


def add_experiment_command(commands: Any) -> argparse.ArgumentParser:
    """Add ``experiment`` to ``gputui``'s subcommands (``commands`` is ``add_subparsers()``)."""
    experiment: argparse.ArgumentParser = commands.add_parser(
        "experiment",
        help="measure the tutorials' lessons: batch sizes, reading the loss, pipelines",
        description=(
            "Measure, on this machine's devices, three lessons of the PyTorch CIFAR-10 "
            "tutorials, each as a short experiment that trains the tutorials' small CNN "
            "(default: on cpu and every usable accelerator, a few seconds each): batch-sweep "
            "(how much of each step goes into moving data, per batch size), sync-stall (what "
            "reading the loss every step costs: the CPU waits for the GPU) and pipelines (a "
            "DataLoader against data kept on the device). Each prints its rows on standard "
            "error as they are measured, then a table and a sentence that states the result, "
            "or JSON."
        ),
        epilog=examples(
            (
                "gputui experiment sync-stall --dataset synthetic --limit 1024 --budget 0.5",
                "a quick run of one experiment",
            ),
            (
                "gputui experiment pipelines --device cpu --json",
                "another, on the CPU alone, as JSON",
            ),
        ),
    )
    kinds = experiment.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    common = _common_options()
    for name in EXPERIMENTS:
        short, long, lines = _HELP[name]
        parser = kinds.add_parser(
            name, parents=[common], help=short, description=long, epilog=examples(*lines)
        )
        if name == "batch-sweep":
            parser.add_argument(
                "--batch-sizes",
                type=whole_numbers(1, None, "32,64,128"),
                metavar="LIST",
                help="the batch sizes to time, comma-separated (default: "
                f"{','.join(map(str, DEFAULT_BATCH_SIZES))}, those that --limit holds)",
            )
            parser.add_argument(
                "--pageable",
                action="store_true",
                help="copy batches to a GPU from ordinary (pageable) host memory, as the "
                "tutorials' DataLoader hands them out (default on CUDA: pinned, that is "
                "page-locked memory, which copies faster)",
            )
        else:
            batch_size_option(parser)
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
        help="the most steps timed per measurement, 1 or more (default: 200; --budget "
        "usually ends it first)",
    )
    common.add_argument(
        "--budget",
        type=seconds(0, math.inf, "--budget", 2),
        default=2.0,
        metavar="SECONDS",
        help="time fewer steps when a measurement would take longer than this many seconds; "
        "above 0 (default: 2)",
    )
    # For tests, so not in --help: the untimed steps before each measurement.
    common.add_argument("--warmup", type=whole_number(1), default=2, help=argparse.SUPPRESS)
    return common


def validated_config(args: argparse.Namespace) -> ExperimentConfig:
    """The experiment the parsed command line asks for, checked as far as it can be without torch.

    No side effects: the devices are checked later, in the child (that needs torch).

    Raises:
        ConfigError: one line naming the bad value and what to use.
    """
    check_data_options(args)
    config = ExperimentConfig(
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
        say(f"{prog}: error: {error.message}")
    if ctrl_c.pressed:
        return EXIT_INTERRUPTED
    return EXIT_OK if result.status == "ok" else EXIT_FAILED
