"""One training run, start to end, reported as events.

:func:`run_training` validates the config and the device, loads the data, trains
seed 001's CNN with Adam and cross-entropy, and emits the events of
:mod:`gputui.training.events`. It never raises for a failed run: the run ends
with one ``Finished`` or ``Error`` event, and the return value is an exit code.

Timing: each epoch's clock starts and stops after synchronizing the device, so
an epoch's seconds are the device's real work, evaluation excluded. Epoch 1 is
the warm-up epoch (cuDNN autotune, ``torch.compile``, allocator growth) and is
flagged ``warmup``; steady-state figures are epochs 2 and later. Copying the
dataset to the device is timed on its own (``DataReady``), outside every epoch.

Inside an epoch the host never waits for the device, except for a progress read
(one ``.item()``) when at least ``progress_interval_s`` of wall time has passed.

On the CPU Adam runs ``foreach`` (the default's numbers, in fewer ops), and the
child process keeps freed activations in the heap instead of page-faulting them
back in every step (:func:`gputui.training.child.keep_freed_memory`).
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from gputui.training.config import ConfigError, RunConfig
from gputui.training.data import Dataset, DatasetError, load_dataset
from gputui.training.devices import (
    DeviceError,
    cpu_bf16,
    device_name,
    parse_device,
    synchronize,
)
from gputui.training.events import (
    DataProgress,
    DataReady,
    EpochFinished,
    Error,
    Event,
    Finished,
    Note,
    Progress,
    RunStarted,
)
from gputui.training.memory import (
    SimulatedOutOfMemoryError,
    Step,
    is_out_of_memory,
    memory_reading,
    probe_batch_size,
    release_memory,
)
from gputui.training.model import CNN
from gputui.training.pipelines import ClassicPipeline, Pipeline, ResidentPipeline
from gputui.training.placement import describe_placement
from gputui.training.records import RunRecorder

Emit = Callable[[Event], None]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EVAL_BATCH_MIN = 1024
DOWNLOAD_REPORT_S = 0.25


class RunStopped(Exception):
    """Raised inside the epoch loop when the run was asked to stop."""


class DatasetTooLarge(Exception):
    """The resident pipeline's dataset does not fit in the device's memory."""


def run_training(
    config: RunConfig, emit: Emit, should_stop: Callable[[], bool] = lambda: False
) -> int:
    """Train as ``config`` says, emitting events; returns 0, 1 (failed) or 2 (usage error).

    Args:
        config: The run.
        emit: Receives each event, in order.
        should_stop: Polled once per step; when it returns True the run ends
            with ``Finished(stopped=True)`` after the current step.
    """
    started = time.perf_counter()
    try:
        config.validate()
        device_text = parse_device(config.device)
    except (ConfigError, DeviceError) as exc:
        kind = "config" if isinstance(exc, ConfigError) else "device"
        emit(Error(message=str(exc), kind=kind))
        return EXIT_USAGE
    recorder = None
    if config.record:
        try:
            runs_dir = Path(config.runs_dir).expanduser() if config.runs_dir else None
            recorder = RunRecorder.create(runs_dir, device_text)
        except OSError as exc:
            emit(Note(f"not recording this run: {exc}"))
    sink = emit if recorder is None else _tee(emit, recorder.record)
    try:
        run = _Run(config, torch.device(device_text), sink, should_stop, started, recorder)
        return run.execute()
    finally:
        if recorder is not None:
            recorder.close()


def _tee(first: Emit, second: Emit) -> Emit:
    def both(event: Event) -> None:
        first(event)
        second(event)

    return both


@dataclass
class _EpochResult:
    seconds: float
    images: int
    loss: float
    accuracy: float | None


class _Run:
    """The state of one run; :meth:`execute` is the whole of it."""

    def __init__(
        self,
        config: RunConfig,
        device: torch.device,
        emit: Emit,
        should_stop: Callable[[], bool],
        started: float,
        recorder: RunRecorder | None,
    ) -> None:
        self.config = config
        self.device = device
        self.emit = emit
        self.should_stop = should_stop
        self.started = started
        self.run_dir = str(recorder.run_dir) if recorder is not None else None
        self.epochs: list[_EpochResult] = []
        self.batch_size = config.batch_size
        self.step: Step | None = None
        self.memory_format = torch.contiguous_format

    def execute(self) -> int:
        oom: tuple[str, bool] | None = None
        try:
            self._train()
        except RunStopped:
            self.emit(self._finished(stopped=True))
            return EXIT_OK
        except DatasetError as exc:
            self.emit(Error(message=str(exc), kind="data"))
            return EXIT_FAILED
        except ConfigError as exc:
            self.emit(Error(message=str(exc), kind="config"))
            return EXIT_USAGE
        except DatasetTooLarge as exc:
            self.emit(Error(message=str(exc), kind="oom"))
            return EXIT_FAILED
        except Exception as exc:
            if is_out_of_memory(exc):
                oom = (_traceback(exc), isinstance(exc, SimulatedOutOfMemoryError))
            elif self.config.compile and _from_compiler(exc):
                self.emit(
                    Error(
                        message=f"torch.compile failed ({_one_line(exc)}): run without compile",
                        detail=_traceback(exc),
                        kind="compile",
                    )
                )
                return EXIT_FAILED
            else:
                self.emit(
                    Error(
                        message=f"the trainer crashed: {_one_line(exc)}",
                        detail=_traceback(exc),
                        kind="crash",
                    )
                )
                return EXIT_FAILED
        if oom is not None:  # out of the except block: its frames, holding device tensors, are gone
            self.emit(self._out_of_memory_error(*oom))
            return EXIT_FAILED
        self.emit(self._finished(stopped=False))
        return EXIT_OK

    def _train(self) -> None:
        config, device = self.config, self.device
        torch.manual_seed(config.seed)
        data = load_dataset(
            config.dataset,
            Path(config.data_dir).expanduser() if config.data_dir else None,
            download=config.download,
            progress=_download_reporter(self.emit),
            limit=config.limit,
            test_limit=config.test_limit,
        )
        train_images = len(data.train_labels)
        if train_images < config.batch_size:
            raise ConfigError(
                f"batch size {config.batch_size} is larger than the {train_images} training "
                f"images: use a batch size of at most {train_images}"
            )
        bf16 = config.precision == "bf16"
        cpu_fast_bf16 = cpu_bf16().fast
        # fp32 stays NCHW, even on the CPU. channels_last there makes the pools faster but
        # oneDNN's convolutions of these thin layers (3 to 16 channels) slower; whole epochs
        # measured the same (10.3 s either way, 2 cores, 2026-11-22). bf16's AMX/AVX512-BF16
        # kernels do want NHWC.
        channels_last = bf16 and device.type == "cpu" and cpu_fast_bf16
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        if bf16 and device.type == "cpu" and not cpu_fast_bf16:
            self.emit(Note("this CPU has no AVX512-BF16 or AMX: bf16 may be slower than fp32"))
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = True

        model = CNN().to(device=device, memory_format=self.memory_format)
        optimizer = make_adam(model, device)
        forward = torch.compile(model) if config.compile else model
        self.step = _make_step(forward, optimizer, device, bf16, config.simulate_oom_from_batch)

        pipeline = self._pipeline(data, device)
        self.emit(
            RunStarted(
                device=str(device),
                device_name=device_name(device),
                torch_version=torch.__version__,
                dataset=data.name,
                dataset_source=data.source,
                dataset_note=data.note,
                train_images=train_images,
                test_images=len(data.test_labels),
                pipeline=config.pipeline,
                precision=config.precision,
                batch_size=config.batch_size,
                epochs=config.epochs,
                steps_per_epoch=pipeline.steps_per_epoch,
                compile=config.compile,
                channels_last=channels_last,
                cpu_bf16=cpu_fast_bf16,
                num_threads=torch.get_num_threads(),
                num_workers=config.num_workers if config.pipeline == "classic" else 0,
                nice=os.nice(0),
                pid=os.getpid(),
                run_dir=self.run_dir,
            )
        )
        self.emit(
            DataReady(
                device=pipeline.dataset_device,
                seconds=pipeline.load_seconds,
                nbytes=pipeline.nbytes,
            )
        )
        for epoch in range(1, config.epochs + 1):
            result = self._epoch(epoch, model, optimizer, pipeline)
            self.epochs.append(result)
            self.emit(memory_reading(self.device))

    def _pipeline(self, data: Dataset, device: torch.device) -> Pipeline:
        if self.config.pipeline == "classic":
            return ClassicPipeline(
                data, device, self.batch_size, self.memory_format, self.config.num_workers
            )
        try:
            return ResidentPipeline(data, device, self.batch_size, self.memory_format)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
        release_memory(device)
        size = sum(t.numel() for t in (data.train_images, data.test_images))
        raise DatasetTooLarge(
            f"out of memory on {device}: the dataset ({size / 2**20:.0f} MiB as uint8) does not "
            "fit; use the classic pipeline"
        )

    def _epoch(
        self,
        epoch: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        pipeline: Pipeline,
    ) -> _EpochResult:
        assert self.step is not None
        device, interval = self.device, self.config.progress_interval_s
        steps_per_epoch = pipeline.steps_per_epoch
        model.train()
        loss_sum = torch.zeros((), device=device)
        steps = images = 0
        synchronize(device)
        started = last_read = time.perf_counter()
        for x, y in pipeline.epoch():
            loss_sum += self.step(x, y)
            steps += 1
            images += x.shape[0]
            if epoch == 1 and steps == 1:
                self.emit(
                    describe_placement(
                        model,
                        optimizer,
                        inputs=x,
                        labels=y,
                        dataset_device=pipeline.dataset_device,
                        pinned=pipeline.pinned,
                    )
                )
                self.emit(memory_reading(device))  # host-side counters: no device sync
            if self.should_stop():
                raise RunStopped
            if time.perf_counter() - last_read >= interval and steps < steps_per_epoch:
                loss = (loss_sum / steps).item()  # the one host sync: a few times a second
                last_read = time.perf_counter()
                self.emit(
                    Progress(
                        epoch=epoch,
                        step=steps,
                        steps_per_epoch=steps_per_epoch,
                        images_per_second=images / (last_read - started),
                        loss=loss,
                    )
                )
        synchronize(device)
        seconds = time.perf_counter() - started
        loss = (loss_sum / max(steps, 1)).item()
        eval_started = time.perf_counter()
        accuracy = self._accuracy(model, pipeline)
        eval_seconds = time.perf_counter() - eval_started
        self.emit(
            EpochFinished(
                epoch=epoch,
                seconds=seconds,
                images_per_second=images / seconds,
                loss=loss,
                accuracy=accuracy,
                warmup=epoch == 1,
                eval_seconds=eval_seconds,
                images=images,
            )
        )
        return _EpochResult(seconds, images, loss, accuracy)

    def _accuracy(self, model: torch.nn.Module, pipeline: Pipeline) -> float | None:
        """Held-out accuracy, on the device, one host read at the end."""
        bf16 = self.config.precision == "bf16"
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        total = 0
        model.eval()
        with torch.inference_mode():
            batch = max(self.batch_size, EVAL_BATCH_MIN)
            for x, y in pipeline.test_batches(batch):
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16):
                    logits = model(x)
                correct += (logits.argmax(dim=1) == y).sum()
                total += len(y)
        model.train()
        return correct.item() / total if total else None

    def _out_of_memory_error(self, detail: str, simulated: bool) -> Error:
        where = f"out of memory on {self.device} at batch size {self.batch_size}"
        if simulated:
            where += " (simulated by the test hook)"
        fits = None
        if self.step is not None:
            release_memory(self.device)
            fits = probe_batch_size(self.step, self.device, self.batch_size, self.memory_format)
        if fits is None:
            advice = "even batch size 1 does not fit: free memory on the device"
        else:
            advice = f"batch size {fits} fits: try that"
        return Error(
            message=f"{where}; {advice}", detail=detail, kind="oom", suggested_batch_size=fits
        )

    def _finished(self, *, stopped: bool) -> Finished:
        epochs = self.epochs
        steady = epochs[1:]
        steady_seconds = sum(e.seconds for e in steady)
        return Finished(
            epochs_completed=len(epochs),
            stopped=stopped,
            warmup_seconds=epochs[0].seconds if epochs else None,
            steady_epoch_seconds=steady_seconds / len(steady) if steady else None,
            steady_images_per_second=(
                sum(e.images for e in steady) / steady_seconds if steady else None
            ),
            final_loss=epochs[-1].loss if epochs else None,
            final_accuracy=epochs[-1].accuracy if epochs else None,
            total_seconds=time.perf_counter() - self.started,
            run_dir=self.run_dir,
        )


def make_adam(model: torch.nn.Module, device: torch.device) -> torch.optim.Adam:
    """Adam with default hyperparameters, in its fastest implementation for ``device``.

    CUDA: ``fused`` (one kernel for every parameter). CPU: ``foreach`` (each update
    stage is one call over the ten parameter tensors, not ten): the same numbers as
    the default loop, bit for bit, in about two thirds of its time (0.45 against
    0.6 ms a step here). ``fused`` is faster still on the CPU (0.17 ms) but rounds
    differently from the tutorial's Adam.
    """
    if device.type == "cuda":
        return torch.optim.Adam(model.parameters(), fused=True)
    if device.type == "cpu":
        return torch.optim.Adam(model.parameters(), foreach=True)
    return torch.optim.Adam(model.parameters())


def _make_step(
    forward: Callable[[torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    bf16: bool,
    simulate_oom_from_batch: int | None,
) -> Step:
    """One optimizer step on a batch; returns the detached loss, still on the device."""
    criterion = torch.nn.CrossEntropyLoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if simulate_oom_from_batch is not None and x.shape[0] >= simulate_oom_from_batch:
            # TEST HOOK (RunConfig.simulate_oom_from_batch): stands in for the allocator
            # failing, at the same point and through the same handling as a real OOM.
            raise SimulatedOutOfMemoryError(
                f"simulated: out of memory for a batch of {x.shape[0]} on {device}"
            )
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = criterion(forward(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def _download_reporter(emit: Emit) -> Callable[[int, int], None]:
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= DOWNLOAD_REPORT_S or (total and done >= total):
            last[0] = now
            emit(DataProgress(done_bytes=done, total_bytes=total))

    return report


def _from_compiler(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("torch._dynamo", "torch._inductor"))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
