"""``gputui bench``: train the tutorials' CNN on each device in turn and compare.

Each device runs in its own trainer child process (:class:`TrainerProcess`), one
after the other, with the same configuration. Progress goes to standard error
(one rewritten line on a terminal, epoch lines otherwise); the result table, or
``--json``, goes to standard output.

Defaults: the devices are ``cpu`` followed by every usable accelerator
(each ``cuda:N``, then ``mps``), so the first row is the CPU and the speedup
column reads "times faster than the CPU". The CPU trains with every core
(``--threads``) at normal priority (``--nice 0``): nothing here needs a spare
core, unlike the runner pane beside a live UI.

Figures: ``warm-up s`` is epoch 1 (cuDNN autotune, compilation, allocator
growth); ``epoch s`` and ``images/s`` are the mean of epochs 2 and later (the
steady state); with ``--epochs 1`` they fall back to epoch 1, marked ``*``.
Each epoch's clock is read after synchronizing the device. Speedup is the
first device's epoch seconds over each device's.

Undocumented for users, for tests and quick runs: ``--limit N`` trains on the
first N images and measures accuracy on the first N held-out images.

Exit codes: 0 when every run finished, 1 when any run failed (the others still
run), 2 for bad input (one line on stderr; also a config only the trainer can
judge, such as a batch larger than the data), 130 after Ctrl+C (the child is
stopped).

Start-up: with one ``--device``, this process never imports torch (a second or
two): the trainer child checks the device, and a device it refuses is the same
one-line usage error, exit 2. With several devices, or none named, they are all
checked here first (that needs torch), so a bad second device fails before the
first one trains.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO, TypeGuard

from gputui.cli import (
    THREADS_MAX,
    WORKERS_MAX,
    check_data_dir,
    check_runs_dir,
    niceness,
    one_line,
    whole_number,
)
from gputui.format import NA, fmt_bytes, fmt_columns
from gputui.training.config import (
    DATASETS,
    PIPELINES,
    PRECISIONS,
    ConfigError,
    RunConfig,
    available_cores,
)
from gputui.training.events import (
    DataProgress,
    DataReady,
    EpochFinished,
    Error,
    Event,
    Finished,
    Memory,
    Note,
    Placement,
    Progress,
    RunStarted,
)
from gputui.training.runner import TrainerProcess

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def add_bench_command(commands: Any) -> argparse.ArgumentParser:
    """Add ``bench`` to ``gputui``'s subcommands (``commands`` is ``add_subparsers()``)."""
    bench = commands.add_parser(
        "bench",
        help="train the tutorials' CNN on each device and compare epoch times",
        description=(
            "Train seed 001's CIFAR-10 CNN on each device in turn (default: cpu and every "
            "usable accelerator) and print epoch seconds, images/s, loss, accuracy and the "
            "speedup over the first device."
        ),
    )
    bench.add_argument(
        "--device",
        dest="devices",
        action="append",
        metavar="DEV",
        help="cpu, cuda, cuda:N or mps; repeat for several (default: cpu and every usable "
        "accelerator)",
    )
    bench.add_argument("--epochs", type=whole_number(1), default=2, metavar="N", help="default: 2")
    bench.add_argument(
        "--batch-size", type=whole_number(1), default=256, metavar="B", help="default: 256"
    )
    bench.add_argument("--dataset", choices=DATASETS, default="auto", help="default: auto")
    bench.add_argument(
        "--data-dir", metavar="PATH", help="folder holding CIFAR-10 (default: the cache folder)"
    )
    bench.add_argument(
        "--pipeline", choices=PIPELINES, default="resident", help="default: resident"
    )
    bench.add_argument("--precision", choices=PRECISIONS, default="fp32", help="default: fp32")
    bench.add_argument("--compile", action="store_true", help="run the model through torch.compile")
    bench.add_argument("--json", action="store_true", help="print JSON instead of a table")
    bench.add_argument(
        "--workers",
        type=whole_number(0, WORKERS_MAX),
        default=2,
        metavar="N",
        help=f"DataLoader workers for the classic pipeline, 0 to {WORKERS_MAX} (default: 2)",
    )
    bench.add_argument(
        "--threads",
        type=whole_number(1, THREADS_MAX),
        metavar="N",
        help=f"CPU threads, 1 to {THREADS_MAX} (default: every core)",
    )
    bench.add_argument(
        "--nice", type=niceness, default=0, metavar="N", help="lower the trainer's priority, 0-19"
    )
    bench.add_argument("--runs-dir", metavar="PATH", help="where run folders go")
    bench.add_argument("--no-record", action="store_true", help="write no run folder")
    bench.add_argument("--no-download", action="store_true", help="never download CIFAR-10")
    bench.add_argument("--limit", type=whole_number(1), help=argparse.SUPPRESS)
    bench.set_defaults(handler=run_bench)
    return bench


@dataclass
class BenchRun:
    """What one device's run reported."""

    device: str
    started: RunStarted | None = None
    data_seconds: float | None = None
    placement: Placement | None = None
    epochs: list[EpochFinished] = field(default_factory=list)
    memory: Memory | None = None
    finished: Finished | None = None
    error: Error | None = None
    notes: list[str] = field(default_factory=list)

    def absorb(self, event: Event) -> None:
        """Keep what the result needs from ``event``."""
        if isinstance(event, RunStarted):
            self.started = event
            self.device = event.device  # canonical: plain ``cuda`` reads ``cuda:0``
        elif isinstance(event, Placement):
            self.placement = event
        elif isinstance(event, EpochFinished):
            self.epochs.append(event)
        elif isinstance(event, Memory):
            self.memory = event
        elif isinstance(event, Finished):
            self.finished = event
        elif isinstance(event, Error):
            self.error = event
        elif isinstance(event, Note):
            self.notes.append(event.message)
        elif isinstance(event, DataReady):
            self.data_seconds = event.seconds

    @property
    def seconds(self) -> float | None:
        """Steady-state epoch seconds, or epoch 1's when there is only one epoch."""
        steady = [e.seconds for e in self.epochs if not e.warmup]
        if steady:
            return sum(steady) / len(steady)
        return self.epochs[0].seconds if self.epochs else None

    @property
    def images_per_second(self) -> float | None:
        """Steady-state images per second, or epoch 1's when there is only one epoch."""
        steady = [e for e in self.epochs if not e.warmup] or self.epochs[:1]
        seconds = sum(e.seconds for e in steady)
        return sum(e.images for e in steady) / seconds if steady and seconds > 0 else None

    @property
    def status(self) -> str:
        """``ok``, ``stopped`` or ``error``."""
        if self.error is not None:
            return "error"
        return "stopped" if self.finished is None or self.finished.stopped else "ok"


def run_bench(args: argparse.Namespace) -> int:
    """The ``gputui bench`` handler; returns the exit code."""
    err = sys.stderr
    base = RunConfig(
        epochs=args.epochs,
        batch_size=args.batch_size,
        dataset=args.dataset,
        data_dir=args.data_dir,
        download=not args.no_download,
        pipeline=args.pipeline,
        precision=args.precision,
        compile=args.compile,
        limit=args.limit,
        test_limit=args.limit,
        num_workers=args.workers,
        threads=args.threads or available_cores(),
        nice=args.nice,
        record=not args.no_record,
        runs_dir=args.runs_dir,
    )
    requested = list(dict.fromkeys(text.strip() for text in args.devices or ()))
    try:
        if args.data_dir is not None:
            check_data_dir(args.data_dir)
        if args.runs_dir is not None:
            check_runs_dir(args.runs_dir)
        base.validate()
        for text in requested:
            base.with_changes(device=text).validate()  # an empty one, before any torch
    except ConfigError as exc:
        return _usage_error(str(exc))
    child_checks = len(requested) == 1  # then this process never loads torch
    if child_checks:
        devices = requested
    else:
        try:
            devices = _checked_devices(requested)
        except ConfigError as exc:
            return _usage_error(str(exc))

    progress = ProgressLine(err)
    runs: list[BenchRun] = []
    config = base
    for device in devices:
        run = _run_one(config.with_changes(device=device), progress, child_checks)
        if _is_usage_error(run.error, child_checks):
            return _usage_error(run.error.message)
        runs.append(run)
        if run.error is not None and run.error.kind == "data":
            break  # the same data fails on every device
        if run.started is not None:  # every device trains on the data the first one got
            config = config.with_changes(dataset=run.started.dataset)
    out = sys.stdout
    if args.json:
        out.write(json.dumps(bench_json(runs), indent=2) + "\n")
    else:
        out.write(render_table(runs) + "\n")
    return EXIT_OK if all(run.status == "ok" for run in runs) else EXIT_FAILED


def _checked_devices(requested: list[str]) -> list[str]:
    """Several devices, or the default ones, checked here before any of them trains.

    This loads torch (a second or two); a single ``--device`` skips it.

    Raises:
        ConfigError: for the first unusable device, with its one-line message.
    """
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy
    from gputui.training.devices import DeviceError, parse_device, usable_devices

    try:
        return list(dict.fromkeys(parse_device(text) for text in requested or usable_devices()))
    except DeviceError as exc:
        raise ConfigError(str(exc)) from None


def _is_usage_error(error: Error | None, child_checks: bool) -> TypeGuard[Error]:
    """Whether the trainer refused the input (a usage error: exit 2, one line).

    A config it refuses (a batch larger than the data) is bad input on any device.
    A device it refuses is bad input when the child was the one to check the device
    (``child_checks``: one ``--device``); with several, they were checked here first.
    """
    if error is None:
        return False
    return error.kind == "config" or (child_checks and error.kind == "device")


def _run_one(config: RunConfig, progress: ProgressLine, child_checks: bool) -> BenchRun:
    run = BenchRun(config.device)
    trainer = TrainerProcess(config).start()
    try:
        for event in trainer.events():
            run.absorb(event)
            if not (isinstance(event, Error) and _is_usage_error(event, child_checks)):
                progress.show(config, event)  # a usage error becomes the one line instead
    finally:
        trainer.stop()
        progress.end()
    return run


def _usage_error(message: str) -> int:
    sys.stderr.write(one_line(f"gputui bench: error: {message}") + "\n")
    return EXIT_USAGE


class ProgressLine:
    """Compact progress on standard error: one rewritten line on a terminal.

    Every line goes through :func:`one_line`: a path or message holding a newline or
    a terminal escape cannot break the display.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._open = False

    def show(self, config: RunConfig, event: Event) -> None:
        """Show what ``event`` says about the run on ``config.device``."""
        device = config.device
        if isinstance(event, DataProgress) and self.tty:
            total = f"/{fmt_bytes(event.total_bytes)}" if event.total_bytes else ""
            self._rewrite(f"downloading CIFAR-10: {fmt_bytes(event.done_bytes)}{total}")
        elif isinstance(event, Progress) and self.tty:
            self._rewrite(
                f"{device}: epoch {event.epoch}/{config.epochs}  step {event.step}/"
                f"{event.steps_per_epoch}  {event.images_per_second:,.0f} img/s  "
                f"loss {event.loss:.3f}"
            )
        elif isinstance(event, RunStarted):
            self._line(
                f"{device}: {event.device_name}; {event.dataset} ({event.train_images} images), "
                f"{event.pipeline}, {event.precision}, batch {event.batch_size}"
            )
        elif isinstance(event, EpochFinished):
            warm = " (warm-up)" if event.warmup else ""
            self._line(
                f"{device}: epoch {event.epoch}/{config.epochs}  {event.seconds:.2f} s{warm}  "
                f"{event.images_per_second:,.0f} img/s  loss {event.loss:.3f}  "
                f"accuracy {_percent(event.accuracy)}"
            )
        elif isinstance(event, Note):
            self._line(f"{device}: note: {event.message}")
        elif isinstance(event, Error):
            self._line(f"{device}: error: {event.message}")

    def end(self) -> None:
        """Finish a rewritten line, if one is open."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False

    def _rewrite(self, text: str) -> None:
        self.stream.write("\r\033[K" + one_line(text))
        self.stream.flush()
        self._open = True

    def _line(self, text: str) -> None:
        if self._open:
            self.stream.write("\r\033[K")
            self._open = False
        self.stream.write(one_line(text) + "\n")
        self.stream.flush()


def render_table(runs: list[BenchRun]) -> str:
    """The result as text: which dataset ran, one row per device, placement verdicts."""
    lines: list[str] = []
    first = next((run.started for run in runs if run.started is not None), None)
    if first is not None:
        where = (
            "generated locally"
            if first.dataset_source == "generated"
            else f"from {first.dataset_source}"
        )
        lines.append(f"dataset: {first.dataset} ({where})")
        if first.dataset_note:
            lines.append(f"note: {first.dataset_note}")
        lines.append(
            f"{first.train_images} training / {first.test_images} held-out images, "
            f"{first.pipeline} pipeline, {first.precision}, batch {first.batch_size}, "
            f"{first.epochs} epoch{'s' if first.epochs != 1 else ''}"
            f"{', compiled' if first.compile else ''}"
        )
        lines.append("")
    baseline = runs[0].seconds if runs else None
    single = any(run.epochs and all(e.warmup for e in run.epochs) for run in runs)
    mark = "*" if single else ""
    rows = [
        [
            "device",
            "name",
            "warm-up s",
            f"epoch s{mark}",
            f"images/s{mark}",
            "loss",
            "accuracy",
            "speedup",
        ]
    ]
    for run in runs:
        name = run.started.device_name if run.started is not None else ""
        if run.error is not None:
            rows.append([run.device, name, f"error: {run.error.message}"])
            continue
        last = run.epochs[-1] if run.epochs else None
        seconds = run.seconds
        rows.append(
            [
                run.device,
                name,
                _number(run.epochs[0].seconds if run.epochs else None, "{:.2f}"),
                _number(seconds, "{:.2f}"),
                _number(run.images_per_second, "{:,.0f}"),
                _number(last.loss if last else None, "{:.3f}"),
                _percent(last.accuracy if last else None),
                _number(baseline / seconds if baseline and seconds else None, "{:.2f}x"),
            ]
        )
    lines += fmt_columns(rows, right={2, 3, 4, 5, 6, 7})
    lines.append("")
    legend = "warm-up s: epoch 1 (cuDNN autotune, compilation); epoch s, images/s: epochs 2+"
    if single:
        legend += "; * only epoch 1 ran, so these include warm-up"
    if runs:
        legend += f"; speedup: over {runs[0].device}"
    lines.append(legend)
    for run in runs:
        verdict = placement_verdict(run)
        if verdict:
            lines.append(verdict)
    recorded = [run.finished.run_dir for run in runs if run.finished and run.finished.run_dir]
    if recorded:
        lines.append(f"run folders: {', '.join(recorded)}")
    return "\n".join(lines)


def placement_verdict(run: BenchRun) -> str | None:
    """One line that says whether every tensor of the run sits on its device."""
    placement = run.placement
    if placement is None:
        return None
    device = placement.inputs_device
    where = {row.device for row in placement.rows} | {
        row.state_device for row in placement.rows if row.state_device
    }
    steps = {row.step_device for row in placement.rows if row.step_device}
    state_bytes = sum(row.state_bytes for row in placement.rows if row.kind == "module")
    param_bytes = sum(row.param_bytes for row in placement.rows if row.kind == "module")
    text = (
        f"{run.device} placement: parameters ({fmt_bytes(param_bytes)}), Adam state "
        f"({fmt_bytes(state_bytes)}) and input batches on {', '.join(sorted(where | {device}))}"
    )
    if steps - {device}:
        text += f" (Adam's step counters on {', '.join(sorted(steps))}, as stock Adam keeps them)"
    return text


def bench_json(runs: list[BenchRun]) -> dict[str, Any]:
    """The result as a JSON-ready dict: ``{"runs": [...]}``."""
    baseline = runs[0].seconds if runs else None
    out = []
    for run in runs:
        started = run.started
        seconds = run.seconds
        out.append(
            {
                "device": run.device,
                "device_name": started.device_name if started else None,
                "status": run.status,
                "error": asdict(run.error) if run.error else None,
                "dataset": started.dataset if started else None,
                "dataset_source": started.dataset_source if started else None,
                "dataset_note": started.dataset_note if started else None,
                "train_images": started.train_images if started else None,
                "test_images": started.test_images if started else None,
                "pipeline": started.pipeline if started else None,
                "precision": started.precision if started else None,
                "batch_size": started.batch_size if started else None,
                "compile": started.compile if started else None,
                "channels_last": started.channels_last if started else None,
                "num_threads": started.num_threads if started else None,
                "torch_version": started.torch_version if started else None,
                "data_seconds": run.data_seconds,
                "warmup_seconds": run.epochs[0].seconds if run.epochs else None,
                "epoch_seconds": seconds,
                "images_per_second": run.images_per_second,
                "speedup": baseline / seconds if baseline and seconds else None,
                "epochs": [
                    {
                        "epoch": e.epoch,
                        "seconds": e.seconds,
                        "images_per_second": e.images_per_second,
                        "loss": e.loss,
                        "accuracy": e.accuracy,
                        "warmup": e.warmup,
                        "eval_seconds": e.eval_seconds,
                    }
                    for e in run.epochs
                ],
                "placement": [asdict(row) for row in run.placement.rows] if run.placement else [],
                "inputs": _inputs(run.placement),
                "memory": asdict(run.memory) if run.memory else None,
                "notes": run.notes,
                "run_dir": run.finished.run_dir if run.finished else None,
            }
        )
    return {"runs": out}


def _inputs(placement: Placement | None) -> dict[str, Any] | None:
    if placement is None:
        return None
    return {
        "device": placement.inputs_device,
        "dtype": placement.inputs_dtype,
        "memory_format": placement.inputs_memory_format,
        "labels_device": placement.labels_device,
        "dataset_device": placement.dataset_device,
        "pinned": placement.pinned,
    }


def _number(value: float | None, template: str) -> str:
    return NA if value is None else template.format(value)


def _percent(value: float | None) -> str:
    return NA if value is None else f"{100 * value:.1f}%"
