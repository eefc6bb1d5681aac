"""``gputui experiment``: the tutorials' lessons, measured on this machine.

::

    gputui experiment batch-sweep [--batch-sizes 32,64,...,2048] [--pageable] [common options]
    gputui experiment sync-stall  [--batch-size B] [common options]
    gputui experiment pipelines   [--batch-size B] [--workers N] [common options]

    common options: [--device DEV]... [--steps N] [--budget SECONDS] [--dataset auto|cifar10|
                    synthetic] [--data-dir PATH] [--no-download] [--threads N] [--nice N] [--json]

Torch-free: the experiment runs in a child process (:class:`ExperimentProcess`),
every device in turn (default: cpu and every usable accelerator). Each row is
shown on standard error as it is measured; the table and the one-sentence
conclusion, or ``--json`` (schema: :mod:`gputui.training.experiments.result`),
go to standard output.

Undocumented for users, for tests and quick runs: ``--limit N`` loads N training
images; ``--warmup N`` sets the untimed steps before each measurement (default 2).

Exit codes: 0 when every device finished, 1 when the data or a device failed,
2 for bad input (one line on stderr), 130 after Ctrl+C (the child is stopped).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from gputui.cli import (
    THREADS_MAX,
    WORKERS_MAX,
    check_data_dir,
    niceness,
    one_line,
    whole_number,
)
from gputui.format import NA, fmt_columns
from gputui.training.config import DATASETS, ConfigError
from gputui.training.events import DataProgress, Error, Event, Note
from gputui.training.experiments.conclusions import ms, percent, rate
from gputui.training.experiments.events import (
    BatchSweepRow,
    DeviceFailed,
    ExperimentDevice,
    ExperimentStarted,
    PipelineRow,
    SyncStallRow,
)
from gputui.training.experiments.process import ExperimentProcess
from gputui.training.experiments.result import ExperimentResult
from gputui.training.experiments.spec import DEFAULT_BATCH_SIZES, EXPERIMENTS, ExperimentConfig

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
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
                default=DEFAULT_BATCH_SIZES,
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
            parser.add_argument(
                "--workers",
                type=whole_number(0, WORKERS_MAX),
                default=2,
                metavar="N",
                help=f"DataLoader workers, 0 to {WORKERS_MAX} (default: 2)",
            )
    experiment.set_defaults(handler=run_experiment_command)
    return experiment


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--device",
        dest="devices",
        action="append",
        metavar="DEV",
        help="cpu, cuda, cuda:N or mps; repeat for several (default: cpu and every usable "
        "accelerator)",
    )
    common.add_argument(
        "--steps",
        type=whole_number(1),
        default=200,
        metavar="N",
        help="most timed steps per measurement (default: 200; --budget usually ends it first)",
    )
    common.add_argument(
        "--budget",
        type=_seconds,
        default=2.0,
        metavar="SECONDS",
        help="fewer steps when a measurement would take longer than this (default: 2)",
    )
    common.add_argument("--dataset", choices=DATASETS, default="auto", help="default: auto")
    common.add_argument(
        "--data-dir", metavar="PATH", help="folder holding CIFAR-10 (default: the cache folder)"
    )
    common.add_argument("--no-download", action="store_true", help="never download CIFAR-10")
    common.add_argument(
        "--threads",
        type=whole_number(1, THREADS_MAX),
        metavar="N",
        help=f"CPU threads, 1 to {THREADS_MAX} (default: every core)",
    )
    common.add_argument(
        "--nice", type=niceness, default=0, metavar="N", help="lower the child's priority, 0-19"
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_argument("--limit", type=whole_number(1), help=argparse.SUPPRESS)
    common.add_argument("--warmup", type=whole_number(1), default=2, help=argparse.SUPPRESS)
    return common


def config_from_args(args: argparse.Namespace) -> ExperimentConfig:
    """The experiment the parsed command line asks for (not yet validated)."""
    return ExperimentConfig(
        experiment=args.experiment,
        devices=tuple(args.devices or ()),
        batch_sizes=getattr(args, "batch_sizes", DEFAULT_BATCH_SIZES),
        batch_size=getattr(args, "batch_size", 256),
        steps=args.steps,
        warmup_steps=args.warmup,
        budget_s=args.budget,
        dataset=args.dataset,
        data_dir=args.data_dir,
        download=not args.no_download,
        limit=args.limit,
        threads=args.threads,
        workers=getattr(args, "workers", 2),
        pin_memory=not getattr(args, "pageable", False),
        nice=args.nice,
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
    try:
        config = validated_config(args)
    except ConfigError as exc:
        return _usage_error(str(exc))
    result = ExperimentResult(config.experiment)
    progress = ProgressLines(sys.stderr)
    process = ExperimentProcess(config).start()
    try:
        for event in process.events():
            result.absorb(event)
            progress.show(event)
    finally:
        process.stop()  # Ctrl+C lands here: the child stops before we exit 130
    error = result.error
    if error is not None and error.kind in {"config", "device"}:
        return _usage_error(error.message)
    if args.json:
        sys.stdout.write(json.dumps(result.to_json_dict(), indent=2) + "\n")
    elif result.started is not None:
        sys.stdout.write(render_result(result) + "\n")
    if error is not None:
        sys.stderr.write(one_line(f"{PROG}: error: {error.message}") + "\n")
    return EXIT_OK if result.status == "ok" else EXIT_FAILED


def _usage_error(message: str) -> int:
    sys.stderr.write(one_line(f"{PROG}: error: {message}") + "\n")
    return EXIT_USAGE


class ProgressLines:
    """One line on standard error per device and per row, as they arrive.

    A run's :class:`Error` is left out: the handler writes it once, at the end.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._downloading = False

    def show(self, event: Event) -> None:
        """Write what ``event`` says, if it says anything worth a line."""
        if isinstance(event, Error):
            return
        if isinstance(event, DataProgress):
            line = None if self._downloading else "downloading CIFAR-10..."
            self._downloading = True
        else:
            line = progress_line(event)
        if line:
            self.stream.write(line + "\n")
            self.stream.flush()


def progress_line(event: Event) -> str | None:
    """One line for a progress display, or ``None`` for events that need none."""
    if isinstance(event, ExperimentStarted):
        return (
            f"{event.experiment}: {event.dataset} data ({event.images:,} images), "
            f"{event.threads} thread{'s' if event.threads != 1 else ''}, "
            f"devices {', '.join(event.devices)}"
        )
    if isinstance(event, ExperimentDevice):
        return f"{event.device}: {event.device_name}"
    if isinstance(event, BatchSweepRow):
        if event.error is not None or event.data_share is None:
            return f"{event.device}: batch {event.batch_size}: {event.error}"
        return (
            f"{event.device}: batch {event.batch_size}: {_ips(event.images_per_second)} "
            f"images/s, data {percent(event.data_share)} of each step"
        )
    if isinstance(event, SyncStallRow):
        how = "every step" if event.mode == "every_step" else "once"
        if event.error is not None or event.ms_per_step is None:
            return f"{event.device}: loss read {how}: {event.error}"
        return f"{event.device}: loss read {how}: {ms(event.ms_per_step)} ms per step"
    if isinstance(event, PipelineRow):
        if event.error is not None or event.images_per_second is None:
            return f"{event.device}: {event.pipeline}: {event.error}"
        return f"{event.device}: {event.pipeline}: {_ips(event.images_per_second)} images/s"
    if isinstance(event, DeviceFailed):
        return f"{event.device}: error: {event.message}"
    if isinstance(event, Note):
        return f"note: {event.message}"
    if isinstance(event, Error) and event.kind not in {"config", "device"}:
        return f"error: {event.message}"
    return None


def render_result(result: ExperimentResult) -> str:
    """The result as text: what ran, one table row per measurement, the conclusion."""
    lines: list[str] = []
    started = result.started
    if started is not None:
        where = (
            "generated locally"
            if started.dataset_source == "generated"
            else f"from {started.dataset_source}"
        )
        lines.append(
            f"{result.experiment}: {started.dataset} data ({where}), {started.images:,} images; "
            f"up to {started.steps} timed steps per measurement after {started.warmup_steps} "
            f"warm-up, about {started.budget_s:g} s each; {started.threads} CPU thread"
            f"{'s' if started.threads != 1 else ''}"
        )
        if started.dataset_note:
            lines.append(f"note: {started.dataset_note}")
    for device in result.devices.values():
        if device.info is not None:
            lines.append(f"{device.device}: {device.info.device_name}")
            if device.info.data_phase:
                lines.append(f"  data = {device.info.data_phase}")
    lines.append("")
    lines += _table(result)
    failures = [d.failure for d in result.devices.values() if d.failure is not None]
    lines += [f"{failure.device}: error: {failure.message}" for failure in failures]
    if result.conclusion:
        lines += ["", result.conclusion]
    return "\n".join(lines)


def _table(result: ExperimentResult) -> list[str]:
    rows = [row for device in result.devices.values() for row in device.rows]
    if result.experiment == "batch-sweep":
        header = ["device", "batch", "steps", "images/s", "data ms", "compute ms", "data share"]
        cells = [
            [r.device, str(r.batch_size), *_sweep_cells(r)]
            for r in rows
            if isinstance(r, BatchSweepRow)
        ]
        return fmt_columns([header, *cells], right={1, 2, 3, 4, 5, 6})
    if result.experiment == "sync-stall":
        header = ["device", "loss read", "batch", "steps", "ms/step", "images/s", "spread ms"]
        cells = [
            [
                r.device,
                "every step" if r.mode == "every_step" else "once",
                str(r.batch_size),
                *_stall_cells(r),
            ]
            for r in rows
            if isinstance(r, SyncStallRow)
        ]
        lines = fmt_columns([header, *cells], right={2, 3, 4, 5, 6})
        return [*lines, "", "spread ms: slowest round minus fastest (the noise)"]
    header = ["device", "pipeline", "batch", "steps", "ms/step", "images/s", "setup s", "workers"]
    cells = [
        [r.device, r.pipeline, str(r.batch_size), *_pipeline_cells(r)]
        for r in rows
        if isinstance(r, PipelineRow)
    ]
    lines = fmt_columns([header, *cells], right={2, 3, 4, 5, 6, 7})
    return [*lines, "", "setup s: copying the dataset to the device before the first step"]


def _sweep_cells(row: BatchSweepRow) -> list[str]:
    if row.error is not None:
        return [f"{row.error}"]
    return [
        str(row.steps),
        _ips(row.images_per_second),
        _ms(row.data_ms),
        _ms(row.compute_ms),
        NA if row.data_share is None else percent(row.data_share),
    ]


def _stall_cells(row: SyncStallRow) -> list[str]:
    if row.error is not None:
        return [f"{row.error}"]
    return [
        str(row.steps),
        _ms(row.ms_per_step),
        _ips(row.images_per_second),
        _ms(row.spread_ms),
    ]


def _pipeline_cells(row: PipelineRow) -> list[str]:
    if row.error is not None:
        return [f"{row.error}"]
    return [
        str(row.steps),
        _ms(row.ms_per_step),
        _ips(row.images_per_second),
        NA if row.setup_s is None else f"{row.setup_s:.2f}",
        str(row.workers),
    ]


def _ms(value: float | None) -> str:
    return NA if value is None else ms(value)


def _ips(value: float | None) -> str:
    return NA if value is None else rate(value)


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


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value
