"""``gputui bench``: train the tutorials' CNN on each device in turn and compare.

The flags and the output; the runs are :mod:`gputui.jobs.bench.run`'s, the report
:mod:`gputui.jobs.bench.report`'s. Under torchrun (``RANK``, ``WORLD_SIZE``... set) the
command is one rank of a distributed job (:mod:`gputui.jobs.world`), and rank 0 alone
prints the result.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any

from gputui.commands.args import (
    batch_size_option,
    check_data_options,
    check_runs_dir,
    epochs_option,
    examples,
    job_options,
    job_settings,
    usage_error,
    workers_option,
)
from gputui.commands.output import failed, say, write_out
from gputui.device import Device
from gputui.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from gputui.jobs.bench.report import bench_json, render_table
from gputui.jobs.bench.run import PROG, BenchOutcome, run_bench, run_rank, unused_gpus_warning
from gputui.jobs.config import PIPELINES, PRECISIONS, ConfigError, RunConfig
from gputui.jobs.events import DevicesListed
from gputui.jobs.world import World, check_endpoint, world_from_env
from gputui.telemetry.polling import NVML_TIMEOUT_S, sample_nvml


def add_bench_command(commands: Any) -> argparse.ArgumentParser:
    """Add ``bench`` to ``gputui``'s subcommands (``commands`` is ``add_subparsers()``)."""
    bench: argparse.ArgumentParser = commands.add_parser(
        "bench",
        parents=[job_options()],
        help="train a small CIFAR-10 CNN on each device and compare epoch times",
        description=(
            "Train a small image classifier, the CNN of the PyTorch CIFAR-10 tutorials (4 "
            "convolution and 3 linear layers, 30,422 parameters), on each device in turn "
            "(default: cpu and every usable accelerator), each in a process of its own with the "
            "same settings. Progress goes to standard error; then a table, or JSON, gives each "
            "device's warm-up (epoch 1) and epoch seconds, images/s, loss, held-out accuracy "
            "and speedup over the first device, and where the weights and the optimizer's state "
            "live. Each run is recorded in a run folder (see --runs-dir). With --limit N, the "
            "accuracy is measured on the first N held-out images too."
        ),
        epilog=examples(
            (
                "gputui bench --dataset synthetic --limit 256 --epochs 1",
                "a few seconds on generated images: checks the wiring",
            ),
            ("gputui bench", "2 epochs on the CPU and each GPU, each against the CPU"),
            (
                "gputui bench --device cpu --precision fp32 --precision bf16",
                "the CPU in fp32 and in bf16, and what bf16 gained",
            ),
        ),
    )
    epochs_option(bench)
    batch_size_option(bench)
    bench.add_argument(
        "--pipeline",
        choices=PIPELINES,
        default="resident",
        help="how batches reach the device. resident: the whole dataset is copied to the "
        "device once, and each batch is cut and normalised there; classic: as the tutorials "
        "do, a DataLoader prepares each batch on the CPU and it is copied to the device "
        "(default: resident)",
    )
    bench.add_argument(
        "--precision",
        dest="precisions",
        action="append",
        choices=PRECISIONS,
        help="fp32: full 32-bit floats; tf32: fp32 with matrix products on NVIDIA tensor "
        "cores at lower precision (CUDA only); bf16: the forward pass in bfloat16 (autocast). "
        "Repeat to train each device in each, and with fp32 and bf16 it says what bf16 "
        "gained (default: fp32)",
    )
    bench.add_argument(
        "--compile",
        action="store_true",
        help="run the model through torch.compile (slower warm-up, maybe faster epochs)",
    )
    bench.add_argument(
        "--no-graphs",
        action="store_true",
        help="launch each step's kernels one by one; by default a CUDA GPU replays the "
        "whole step from a CUDA graph once warm (resident pipeline, not compiled)",
    )
    workers_option(bench)
    bench.add_argument(
        "--runs-dir",
        metavar="PATH",
        help="where each run's folder goes: its events as JSON lines, its epochs as CSV "
        "(default: $XDG_STATE_HOME/gputui/runs or ~/.local/state/gputui/runs)",
    )
    bench.add_argument("--no-record", action="store_true", help="write no run folder")
    bench.set_defaults(handler=run_bench_command)
    return bench


def run_bench_command(args: argparse.Namespace) -> int:
    """The ``gputui bench`` handler; returns the exit code."""
    precisions = list(dict.fromkeys(args.precisions or ["fp32"]))
    base = RunConfig(
        **job_settings(args),
        epochs=args.epochs,
        batch_size=args.batch_size,
        pipeline=args.pipeline,
        precision=precisions[0],
        compile=args.compile,
        graphs=not args.no_graphs,
        test_limit=args.limit,
        record=not args.no_record,
        runs_dir=args.runs_dir,
    )
    # A device named twice trains twice: the CPU against itself, as the runner pane can.
    requested: list[Device] = list(args.devices or ())
    try:
        world = world_from_env(os.environ)
        if world is not None:
            config = rank_config(args, base, requested, world)
            check_endpoint(world, os.environ)
    except ConfigError as exc:
        return usage_error(PROG, str(exc))
    if world is not None:
        return _bench_rank(args, config, world)
    try:
        check_flags(args, writes_runs=True)
        base.validate()
        outcome = run_bench(base, requested, precisions, unused_gpus)
    except ConfigError as exc:
        return usage_error(PROG, str(exc))
    if outcome.failure is not None:
        return failed(PROG, outcome.failure)
    data_error = outcome.data_error
    if args.json:
        write_out(json.dumps(bench_json(outcome.runs, outcome.warnings), indent=2))
    elif data_error is None:  # no data, no figures: the one line says it all
        write_out(render_table(outcome.runs))
    if data_error is not None:
        say(f"{PROG}: error: {data_error.message}")
    return _exit_code(outcome)


def rank_config(
    args: argparse.Namespace, base: RunConfig, requested: list[Device], world: World
) -> RunConfig:
    """What this rank of a job torchrun started trains: one device kind, one precision, and
    a run folder only on rank 0.

    Raises:
        ConfigError: for flags a rank cannot take.
    """
    if len(requested) != 1 or len(set(args.precisions or ["fp32"])) != 1:
        raise ConfigError(
            "under torchrun every rank trains one device with one precision: give one "
            "--device (cuda or cpu) and at most one --precision"
        )
    check_flags(args, writes_runs=world.leader)
    config = base.with_changes(device=requested[0], record=base.record and world.leader)
    config.validate()
    config.check_distributed()
    return config


def _bench_rank(args: argparse.Namespace, config: RunConfig, world: World) -> int:
    """``gputui bench`` as one rank: rank 0 alone prints the result (table or JSON); the
    others print nothing on standard output, and a failure as one line on standard error."""
    try:
        outcome = run_rank(config, world)
    except ConfigError as exc:
        return usage_error(PROG, str(exc))
    if outcome.lost_agent_pid is not None:
        with contextlib.suppress(OSError):  # its standard error may have gone with it
            sys.stderr.write(
                f"{PROG}: rank {world.rank}: error: its torchrun agent (pid "
                f"{outcome.lost_agent_pid}) is gone: the rank stopped rather than train on "
                "alone\n"
            )
        return EXIT_FAILED
    [run] = outcome.runs
    if not world.leader:
        if run.error is not None:
            say(f"{PROG}: rank {world.rank}: error: {run.error.message}")
        return EXIT_OK if run.status == "ok" else EXIT_FAILED
    write_out(json.dumps(bench_json([run]), indent=2) if args.json else render_table([run]))
    return _exit_code(outcome)


def _exit_code(outcome: BenchOutcome) -> int:
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if outcome.ok else EXIT_FAILED


def check_flags(args: argparse.Namespace, *, writes_runs: bool) -> None:
    """Refuse flags that cannot both apply, rather than ignore one of them, then check the
    folders named (``--runs-dir`` only where this process ``writes_runs``), before any child.

    Raises:
        ConfigError: one line naming the flags and what to do.
    """
    if args.workers is not None and args.pipeline != "classic":
        raise ConfigError(
            f"--workers sets the classic pipeline's DataLoader workers, and the {args.pipeline} "
            "pipeline has none: add --pipeline classic, or leave --workers out"
        )
    if args.no_record and args.runs_dir is not None:
        raise ConfigError(
            "--runs-dir says where run folders go, and --no-record writes none: leave one out"
        )
    check_data_options(args)
    if args.runs_dir is not None and writes_runs:
        check_runs_dir(args.runs_dir)


def unused_gpus(listed: DevicesListed, timeout_s: float = NVML_TIMEOUT_S) -> str | None:
    """Why the default devices leave out the NVIDIA GPUs NVML reports, if they do: the
    doctor's one line and its install command where this torch is a CUDA build the driver
    cannot run, else :func:`unused_gpus_warning`'s. NVML not answering in time says nothing."""
    reading = sample_nvml(timeout_s)
    warning = unused_gpus_warning(listed, len(reading.gpus) if reading.status.available else None)
    if warning is None:
        return None
    from gputui.doctor.run import driver_too_old  # loaded only where GPUs go unused

    return driver_too_old(listed, reading) or warning
