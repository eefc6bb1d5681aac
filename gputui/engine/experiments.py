"""The engine's ``experiment`` mode: batch-sweep, sync-stall or pipelines on each device in
turn, each with a fresh seed 001 CNN and the trainer's own step (:mod:`gputui.engine.step`),
launched eagerly: each lesson is about the kernels a step launches, which a CUDA graph hides.

Every measurement is timed alike: ``warmup_steps`` untimed steps, the device synchronized
before every clock read, then at most ``steps`` timed steps: fewer when the warm-up says
they would overrun ``budget_s``, and none begun past it (after ``MIN_STEPS``).
"""

from __future__ import annotations

import functools
import os
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from gputui.device import Device, DeviceError
from gputui.engine.cifar import DatasetError
from gputui.engine.data import Dataset, load_dataset, normalize
from gputui.engine.devices import (
    chosen_devices,
    device_name,
    device_of,
    make_current,
    synchronize,
    torch_build,
    torch_device,
)
from gputui.engine.download import download_reporter
from gputui.engine.failures import failure_line
from gputui.engine.memory import Step, release_memory, unless_out_of_memory
from gputui.engine.model import CNN
from gputui.engine.pipelines import Batch, ClassicPipeline, Pipeline, ResidentPipeline, endless
from gputui.engine.step import make_optimizer, make_step, set_math
from gputui.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from gputui.jobs.conclusions import conclude
from gputui.jobs.config import (
    MIN_STEPS,
    ConfigError,
    ExperimentConfig,
    check_batch_fits,
    images_needed,
    steps_within,
)
from gputui.jobs.events import (
    BatchSweepRow,
    DeviceFailed,
    Emit,
    Error,
    ExperimentConcluded,
    ExperimentDevice,
    ExperimentStarted,
    Finished,
    PipelineRow,
    Row,
    SyncStallRow,
)

ROUNDS = 3
"""``sync-stall`` alternates its two modes over this many rounds; ``pipelines`` splits each
pipeline's timed steps into this many, one after the other."""
HOST_BATCHES = 2
"""Distinct host batches ``batch-sweep`` cycles through on an accelerator."""
OUT_OF_MEMORY = "out of memory"


class ExperimentStopped(Exception):
    """Raised between steps when the run was asked to stop."""


def run_experiment(
    config: ExperimentConfig, emit: Emit, should_stop: Callable[[], bool] = lambda: False
) -> int:
    """Run ``config``'s experiment on each device, passing each event to ``emit``; returns 0
    when every device finished, 1 when a device or the data failed, 2 for a bad config or
    device. Once ``should_stop()``, polled before every step, is True, the run ends with
    ``Finished(stopped=True)``."""
    started = time.perf_counter()
    try:
        config.validate()
        devices = chosen_devices(config.devices)
    except (ConfigError, DeviceError) as exc:
        emit(Error(message=str(exc), kind="config" if isinstance(exc, ConfigError) else "device"))
        return EXIT_USAGE
    try:
        data = load_dataset(
            config.dataset,  # type: ignore[arg-type]  # validated: one of DATASETS
            Path(config.data_dir).expanduser() if config.data_dir else None,
            download=config.download,
            progress=download_reporter(emit),
            limit=images_needed(config),
            test_limit=1,
            seed=config.seed,
        )
    except DatasetError as exc:
        emit(Error(message=str(exc), kind="data"))
        return EXIT_FAILED
    images = len(data.train_labels)
    try:
        check_batch_fits(max(config.sizes), images)
    except ConfigError as exc:
        emit(Error(message=str(exc), kind="config"))
        return EXIT_USAGE
    emit(
        ExperimentStarted(
            experiment=config.experiment,
            devices=devices,
            batch_sizes=config.sizes,
            steps=config.steps,
            warmup_steps=config.warmup_steps,
            budget_s=float(config.budget_s),
            dataset=data.name,
            dataset_source=data.source,
            dataset_note=data.note,
            images=images,
            threads=torch.get_num_threads(),
            workers=config.workers,
            torch_version=torch.__version__,
            pid=os.getpid(),
            torch_build=torch_build(),
        )
    )
    rows: dict[Device, list[Row]] = {}
    failed = False
    try:
        for device in devices:
            rows[device] = []
            run = _DeviceRun(config, torch_device(device), data, emit, rows[device], should_stop)
            failure = run.run_and_release()
            if failure is not None:
                failed = True
                emit(failure)
    except ExperimentStopped:
        emit(Finished(epochs_completed=0, stopped=True, total_seconds=_since(started)))
        return EXIT_OK
    emit(ExperimentConcluded(config.experiment, conclude(config.experiment, rows)))
    emit(Finished(epochs_completed=0, total_seconds=_since(started)))
    return EXIT_FAILED if failed else EXIT_OK


def _device_failed(device: torch.device, exc: BaseException, while_: str = "") -> DeviceFailed:
    during = f" while {while_}" if while_ else ""
    return DeviceFailed(
        device=device_of(device),
        message=f"{device} failed{during}: {failure_line(exc)}",
        detail="".join(traceback.format_exception(exc)),
    )


@dataclass
class _DeviceRun:
    """One device's measurements for one experiment.

    It holds no tensor of the device's: what it measures lives in its methods' frames, so
    that :meth:`run_and_release` can hand the device's memory back once they are gone.
    """

    config: ExperimentConfig
    device: torch.device
    data: Dataset
    emit: Emit
    rows: list[Row]
    """Every row this device measured, in order (also emitted)."""
    should_stop: Callable[[], bool]

    @property
    def pinned(self) -> bool:
        """Whether host batches are pinned before ``.to(device)``."""
        return self.device.type == "cuda" and self.config.pin_memory

    def run_and_release(self) -> DeviceFailed | None:
        """Run the experiment on the device, then hand its memory back; returns how it failed.

        A CUDA error is sticky: once a kernel faulted, every later call on that device raises
        it again, ``empty_cache`` included. So the cleanup is guarded too, and a device whose
        cleanup fails is failed (its rows stay), while the next device still runs.

        Raises:
            ExperimentStopped: when the run was asked to stop.
        """
        failure = None
        try:
            self.run()
        except ExperimentStopped:
            raise
        except Exception as exc:
            failure = _device_failed(self.device, exc)
        try:  # out of the except block: the failed frames, holding device tensors, are gone
            release_memory(self.device)
        except Exception as exc:
            failure = failure or _device_failed(self.device, exc, while_="freeing its memory")
        return failure

    def run(self) -> None:
        """Announce the device, then measure."""
        experiment = self.config.experiment
        make_current(self.device)
        torch.manual_seed(self.config.seed)
        set_math("fp32", self.device)  # IEEE, as bench's default: the same step, the same math
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True
        sweep = experiment == "batch-sweep"
        self._emit_device(sweep)
        if sweep:
            self._batch_sweep()
        elif experiment == "sync-stall":
            self._sync_stall()
        else:
            self._pipelines()

    def _emit_device(self, sweep: bool) -> None:
        phase = None
        if sweep and self.device.type == "cpu":
            phase = (
                "preparing each batch on the host (gather uint8 images, convert and normalise); "
                "a CPU copies nothing"
            )
        elif sweep:
            memory = "pinned" if self.pinned else "pageable"
            phase = f"copying each batch to {self.device} with .to() from {memory} host memory"
        self.emit(
            ExperimentDevice(
                device=device_of(self.device),
                device_name=device_name(self.device),
                data_phase=phase,
                pinned=sweep and self.pinned,
            )
        )

    def _row(self, row: Row) -> None:
        self.rows.append(row)
        self.emit(row)

    def _check_stop(self) -> None:
        if self.should_stop():
            raise ExperimentStopped

    def _step(self) -> Step:
        """A fresh CNN and its optimizer on the device; returns the trainer's own step, eager."""
        model = CNN().to(self.device)
        optimizer = make_optimizer(model, self.device)
        return make_step(model, optimizer, self.device)

    def _warm_up(self, one_step: Callable[[], object]) -> float:
        """Run the warm-up steps; returns the last one's synchronized seconds."""
        seconds = 0.0
        for _ in range(self.config.warmup_steps):
            self._check_stop()
            synchronize(self.device)
            started = time.perf_counter()
            one_step()
            synchronize(self.device)
            seconds = time.perf_counter() - started
        return seconds

    def _steps(self, estimate_s: float, budget_s: float | None = None) -> int:
        budget = self.config.budget_s if budget_s is None else budget_s
        return steps_within(estimate_s, self.config.steps, budget)

    def _over_budget(self, done: int, started: float) -> bool:
        """Whether timed steps begun at ``started`` ran past the budget (the warm-up's
        estimate can be wrong on a busy machine); never before ``MIN_STEPS`` steps."""
        return done >= MIN_STEPS and time.perf_counter() - started >= self.config.budget_s

    # -- batch-sweep ----------------------------------------------------------------------

    def _batch_sweep(self) -> None:
        """Time each batch size's steps in two phases, synchronized between them so that copy
        and compute never overlap: the data phase gets the batch where the model reads it (an
        accelerator: ``.to(device)`` of a normalised host batch, as seed 001's loop does; the
        CPU copies nothing, so: preparing the batch, a DataLoader's work), then the step. A
        batch that runs out of memory ends the sweep: the larger ones are skipped."""
        step = self._step()
        sizes = self.config.sizes
        for index, size in enumerate(sizes):
            self._check_stop()
            row = unless_out_of_memory(functools.partial(self._sweep_one, step, size), self.device)
            if row is None:
                self._row(_sweep_failure(self.device, size, OUT_OF_MEMORY))
                for larger in sizes[index + 1 :]:
                    reason = f"skipped: batch {size} ran out of memory"
                    self._row(_sweep_failure(self.device, larger, reason))
                return
            self._row(row)

    def _sweep_one(self, step: Step, size: int) -> BatchSweepRow:
        fetch = self._cpu_batches(size) if self.device.type == "cpu" else self._copies(size)

        def one_step() -> None:
            step(*fetch())

        estimate = self._warm_up(one_step)
        data_s = compute_s = 0.0
        steps = 0
        most, first = self._steps(estimate), time.perf_counter()
        while steps < most and not self._over_budget(steps, first):
            self._check_stop()
            steps += 1
            started = time.perf_counter()  # the device is synchronized: the last phase ended so
            x, y = fetch()
            synchronize(self.device)
            fetched = time.perf_counter()
            step(x, y)
            synchronize(self.device)
            done = time.perf_counter()
            data_s += fetched - started
            compute_s += done - fetched
        total = data_s + compute_s
        return BatchSweepRow(
            device=device_of(self.device),
            batch_size=size,
            steps=steps,
            images_per_second=size * steps / total if total > 0 else None,
            data_ms=1000 * data_s / steps,
            compute_ms=1000 * compute_s / steps,
            data_share=data_s / total if total > 0 else None,
        )

    def _cpu_batches(self, size: int) -> Callable[[], Batch]:
        """On the CPU: each call gathers and normalises the next ``size`` images."""
        images, labels = self.data.train_images, self.data.train_labels
        count = len(labels)
        position = [0]

        def fetch() -> Batch:
            index = torch.arange(position[0], position[0] + size) % count
            position[0] = (position[0] + size) % count
            return normalize(images.index_select(0, index)), labels.index_select(0, index)

        return fetch

    def _copies(self, size: int) -> Callable[[], Batch]:
        """On an accelerator: each call copies the next prepared host batch with ``.to()``."""
        images, labels = self.data.train_images, self.data.train_labels
        count = len(labels)
        host: list[Batch] = []
        for k in range(HOST_BATCHES):
            index = torch.arange(k * size, (k + 1) * size) % count
            x, y = normalize(images.index_select(0, index)), labels.index_select(0, index)
            host.append((x.pin_memory(), y.pin_memory()) if self.pinned else (x, y))
        turn = [0]
        device, non_blocking = self.device, self.pinned

        def fetch() -> Batch:
            x, y = host[turn[0] % HOST_BATCHES]
            turn[0] += 1
            return x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)

        return fetch

    # -- sync-stall -----------------------------------------------------------------------

    def _sync_stall(self) -> None:
        """``loss.item()`` every step against the loss summed on the device and read once, on
        resident batches (no copies: the only host read is the one measured); the two modes
        alternate over ``ROUNDS`` rounds and share the budget."""
        size = self.config.batch_size
        rows = unless_out_of_memory(lambda: self._sync_stall_rows(size), self.device)
        if rows is None:
            rows = [
                SyncStallRow(
                    device_of(self.device), mode, size, 0, 0, None, None, None, OUT_OF_MEMORY
                )
                for mode in ("every_step", "once")
            ]
        for row in rows:
            self._row(row)

    def _sync_stall_rows(self, size: int) -> list[SyncStallRow]:
        step = self._step()
        pipeline = ResidentPipeline(self.data, self.device, size)
        batches = endless(pipeline.epoch)
        # Both ways are warmed up, untimed: each has kernels of its own to load on first use
        # (the once path's zeros and on-device sum), which its first timed round would pay.
        # every_step goes last, so its steps, warm by then, are the estimate.
        warmup = self.config.warmup_steps
        for mode in ("once", "every_step"):
            estimate = self._read_loss(mode, step, batches, warmup) / warmup
        per_round = max(1, self._steps(estimate, self.config.budget_s / 2) // ROUNDS)
        seconds: dict[str, list[float]] = {"every_step": [], "once": []}
        started = time.perf_counter()
        for turn in range(ROUNDS):
            if turn >= 2 and time.perf_counter() - started >= self.config.budget_s:
                break  # two rounds already took the budget (the estimate was low)
            order = ("once", "every_step") if turn % 2 == 0 else ("every_step", "once")
            for mode in order:
                seconds[mode].append(self._read_loss(mode, step, batches, per_round))
        rounds = len(seconds["once"])
        rows = []
        for mode in ("every_step", "once"):
            steps = per_round * rounds
            total = sum(seconds[mode])
            per_step = [1000 * s / per_round for s in seconds[mode]]
            rows.append(
                SyncStallRow(
                    device=device_of(self.device),
                    mode=mode,
                    batch_size=size,
                    steps=steps,
                    rounds=rounds,
                    ms_per_step=1000 * total / steps,
                    images_per_second=size * steps / total if total > 0 else None,
                    spread_ms=max(per_step) - min(per_step),
                )
            )
        return rows

    def _read_loss(self, mode: str, step: Step, batches: Iterator[Batch], steps: int) -> float:
        """Seconds for ``steps`` steps, reading the loss every step or once at the end."""
        synchronize(self.device)
        started = time.perf_counter()
        if mode == "every_step":
            for _ in range(steps):
                self._check_stop()
                step(*next(batches)).item()  # what writer.add_scalar('Train/Loss', loss) does
        else:
            total = torch.zeros((), device=self.device)
            for _ in range(steps):
                self._check_stop()
                total += step(*next(batches))
            total.item()  # the one read
        synchronize(self.device)
        return time.perf_counter() - started

    # -- pipelines ------------------------------------------------------------------------

    def _pipelines(self) -> None:
        """The trainer's classic pipeline against its resident one, each timed over whole
        steps, batches fetched included, in ``ROUNDS`` rounds whose spread is the noise."""
        step = self._step()
        for name in ("classic", "resident"):
            self._check_stop()
            row = unless_out_of_memory(
                functools.partial(self._pipeline_row, name, step), self.device
            )
            if row is None:
                row = PipelineRow(
                    device=device_of(self.device),
                    pipeline=name,
                    batch_size=self.config.batch_size,
                    steps=0,
                    ms_per_step=None,
                    images_per_second=None,
                    workers=self.config.workers if name == "classic" else 0,
                    pinned=False,
                    setup_s=None,
                    error=OUT_OF_MEMORY,
                )
            self._row(row)

    def _pipeline_row(self, name: str, step: Step) -> PipelineRow:
        size, workers = self.config.batch_size, self.config.workers
        pipeline: Pipeline = (
            ClassicPipeline(self.data, self.device, size, torch.contiguous_format, workers)
            if name == "classic"
            else ResidentPipeline(self.data, self.device, size)
        )
        batches = endless(pipeline.epoch)
        try:
            estimate = self._warm_up(lambda: step(*next(batches)))
            most = self._steps(estimate)
            # Keep the timed steps in this DataLoader epoch: a new one restarts the workers.
            left = len(self.data.train_labels) // size - self.config.warmup_steps
            most = min(most, left) if left >= MIN_STEPS else most
            per_round = max(1, most // ROUNDS)
            round_ms: list[float] = []
            images = steps = 0
            synchronize(self.device)
            started = round_started = time.perf_counter()
            while steps < most and not self._over_budget(steps, started):
                self._check_stop()
                steps += 1
                x, y = next(batches)
                step(x, y)
                images += len(y)
                if steps % per_round == 0 and len(round_ms) < ROUNDS:
                    synchronize(self.device)
                    now = time.perf_counter()
                    round_ms.append(1000 * (now - round_started) / per_round)
                    round_started = now
            synchronize(self.device)
            seconds = time.perf_counter() - started
        finally:
            batches.close()  # ends the DataLoader's workers now, not at garbage collection
        return PipelineRow(
            device=device_of(self.device),
            pipeline=name,
            batch_size=size,
            steps=steps,
            ms_per_step=1000 * seconds / steps,
            images_per_second=images / seconds if seconds > 0 else None,
            workers=self.config.workers if name == "classic" else 0,
            pinned=pipeline.pinned,
            setup_s=pipeline.load_seconds,
            rounds=len(round_ms),
            spread_ms=max(round_ms) - min(round_ms) if len(round_ms) > 1 else None,
        )


def _sweep_failure(device: torch.device, size: int, reason: str) -> BatchSweepRow:
    return BatchSweepRow(device_of(device), size, 0, None, None, None, None, reason)


def _since(started: float) -> float:
    return time.perf_counter() - started
