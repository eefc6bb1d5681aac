"""``gputui scale``: the same training at several world sizes on this machine, and how it scales.

The flags and the output; each world size is an engine child of its own (``python -m
gputui.engine scale``), one after the other. The world sizes are
:mod:`gputui.jobs.scale.plan`'s, the report :mod:`gputui.jobs.scale.report`'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gputui.commands.args import (
    batch_size_option,
    check_data_options,
    epochs_option,
    examples,
    job_options,
    job_settings,
    parse_device,
    usage_error,
    whole_numbers,
)
from gputui.commands.output import write_out
from gputui.device import CPU, Device
from gputui.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from gputui.jobs.bench.report import ProgressLine
from gputui.jobs.config import (
    DISTRIBUTED_KINDS,
    WORLD_SIZE_MAX,
    ConfigError,
    DeviceQuery,
    RunConfig,
    ScaleConfig,
    available_cores,
)
from gputui.jobs.events import EpochFinished, Error, Note
from gputui.jobs.interrupt import CtrlC
from gputui.jobs.process import ChildProcess, list_devices
from gputui.jobs.results import RunRecord
from gputui.jobs.scale.plan import CPU_WORLD_SIZES, SCALINGS, gpu_world_sizes, scaling_configs
from gputui.jobs.scale.report import render_scale, scale_rows, scale_warnings

PROG = "gputui scale"
PROBE_NOTE = (
    "timing steps with and without the gradients' all-reduce, for the all-reduce column "
    "(as many steps as an epoch holds, 5 to 20 of each)"
)


def add_scale_command(commands: Any) -> argparse.ArgumentParser:
    """Add ``scale`` to ``gputui``'s subcommands (``commands`` is ``add_subparsers()``)."""
    scale: argparse.ArgumentParser = commands.add_parser(
        "scale",
        parents=[job_options(devices=False)],
        help="train on 1, 2, 4... ranks (torch.distributed) and show how it scales",
        description=(
            "Train the CIFAR-10 CNN of `gputui bench` at several world sizes on this machine, "
            "one after the other, each as a job of that many processes (ranks) launched by "
            "torch.multiprocessing and trained with DistributedDataParallel: NCCL on CUDA, "
            "one GPU per rank; gloo on the CPU, the cores shared out between the ranks. The "
            "table, or JSON, gives each world size's epoch seconds and images/s (the whole "
            "job's), its speedup over the first world size, its efficiency (speedup over the "
            "multiple of ranks) and the share of a step spent waiting on the gradients' "
            "all-reduce. For several machines, run `gputui bench` under torchrun instead."
        ),
        epilog=examples(
            (
                "gputui scale --device cpu --dataset synthetic --limit 1024",
                "1 and 2 CPU ranks on generated images, in seconds",
            ),
            ("gputui scale --device cuda", "1, 2, 4... ranks, up to every GPU here"),
            (
                "gputui scale --device cuda --world-sizes 1,8 --mode strong --batch-size 2048",
                "one GPU against eight sharing a batch of 2048",
            ),
        ),
    )
    scale.add_argument(
        "--device",
        type=parse_device,
        default=CPU,
        metavar="{" + ",".join(DISTRIBUTED_KINDS) + "}",
        help="cuda: rank N trains on cuda:N (NCCL; RCCL on a ROCm build, for AMD GPUs); xpu: "
        "rank N on xpu:N (XCCL, Intel GPUs); cpu: every rank on the CPU (gloo) (default: cpu)",
    )
    scale.add_argument(
        "--world-sizes",
        type=whole_numbers(1, WORLD_SIZE_MAX, "1,2,4"),
        metavar="LIST",
        help=f"the numbers of ranks to train with, comma-separated, 1 to {WORLD_SIZE_MAX} "
        "(default: 1,2,4... up to the GPU count with cuda; 1,2 with cpu)",
    )
    scale.add_argument(
        "--mode",
        choices=SCALINGS,
        default="weak",
        help="weak: every rank keeps --batch-size, so the job's batch grows with the ranks; "
        "strong: the job keeps --batch-size, split between the ranks (default: weak)",
    )
    epochs_option(scale)
    batch_size_option(scale, "images per step, per rank (weak) or for the whole job (strong)")
    scale.set_defaults(handler=run_scale)
    return scale


def run_scale(args: argparse.Namespace) -> int:
    """The ``gputui scale`` handler; returns the exit code."""
    try:
        check_data_options(args)
        sizes = list(dict.fromkeys(args.world_sizes or ()))
        for size in sizes or [1]:
            _config(args, size)  # bad input (mps: no backend) fails before any child starts
    except ConfigError as exc:
        return usage_error(PROG, str(exc))
    if not sizes or args.device.kind in ("cuda", "xpu"):
        found = default_world_sizes(args.device)
        if isinstance(found, Error):
            return usage_error(PROG, found.message)
        if not sizes:
            sizes = list(found)
        elif max(sizes) > max(found):
            return usage_error(
                PROG,
                f"{max(sizes)} ranks need {max(sizes)} GPUs and torch sees {max(found)} here: "
                f"use world sizes up to {max(found)}",
            )
    try:
        configs = [_config(args, size) for size in sorted(sizes)]
    except ConfigError as exc:
        return usage_error(PROG, str(exc))

    progress = ProgressLine(sys.stderr)
    runs: list[RunRecord] = []
    with CtrlC() as ctrl_c:
        for config in configs:
            if ctrl_c.pressed:
                runs.append(RunRecord(config))
                continue
            run = _run_one(config, progress, ctrl_c)
            if run.error is not None and run.error.kind in {"config", "device"}:
                return usage_error(PROG, run.error.message)
            runs.append(run)
    cores = available_cores()  # the ranks ran here
    if args.json:
        rows = scale_rows(runs, args.mode, cores)
        write_out(json.dumps({"runs": rows, "warnings": scale_warnings(rows)}, indent=2))
    else:
        write_out(render_scale(runs, args.mode, cores))
    if ctrl_c.pressed:
        return EXIT_INTERRUPTED
    return EXIT_OK if all(run.status == "ok" for run in runs) else EXIT_FAILED


def default_world_sizes(device: Device) -> tuple[int, ...] | Error:
    """1, 2, 4... up to the GPUs of ``device``'s kind torch can use (:func:`gpu_world_sizes`),
    or 1 and 2 CPU ranks; an ``Error`` when a GPU is asked for and torch can use none."""
    if device.kind == "cpu":
        return CPU_WORLD_SIZES
    listed = list_devices(DeviceQuery())
    if isinstance(listed, Error):
        return listed
    kind = device.kind
    gpus = sum(1 for option in listed.devices if option.usable and option.name.kind == kind)
    if not gpus:
        return Error(
            message=f"torch can use no {kind.upper()} device here: `gputui doctor` says why, "
            "or use --device cpu",
            kind="device",
        )
    return gpu_world_sizes(gpus)


def _config(args: argparse.Namespace, world_size: int) -> ScaleConfig:
    """One world size's config; checked here, so that bad input fails before any child.

    Raises:
        ConfigError: one line, e.g. a strong-scaling batch the ranks cannot share evenly.
    """
    base = RunConfig(
        **job_settings(args),
        device=args.device,
        epochs=args.epochs,
        batch_size=args.batch_size,
        test_limit=args.limit,
    )
    [config] = scaling_configs(base, (world_size,), args.mode)
    return config


def _run_one(config: ScaleConfig, progress: ProgressLine, ctrl_c: CtrlC) -> RunRecord:
    run = RunRecord(config)
    label = f"{config.world_size} rank{'s' if config.world_size != 1 else ''}"
    job = ctrl_c.watch(ChildProcess(config).start())
    try:
        for event in job.events():
            run.absorb(event)
            if not (isinstance(event, Error) and event.kind in {"config", "device"}):
                progress.show(config, event, label)
            if isinstance(event, EpochFinished) and event.epoch == config.epochs:
                progress.show(config, Note(PROBE_NOTE), label)  # else a short run seems to hang
    finally:
        job.stop()
        progress.end()
    return run
