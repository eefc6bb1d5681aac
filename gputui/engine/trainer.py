"""One training run, start to end, reported as events: the engine's ``train`` mode.

:func:`run_training` never raises for a failed run: it ends with one ``Finished`` or
``Error``. An epoch's clock is read with the device synchronized, evaluation outside it;
epoch 1 is flagged ``warmup`` (the rule: :func:`gputui.jobs.results.steady_figures`).
Within an epoch the host waits for the device only to read the progress, at most once per
``progress_interval_s``.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from gputui.device import Device, DeviceError
from gputui.engine import distributed
from gputui.engine.cifar import DatasetError
from gputui.engine.data import Dataset, load_dataset
from gputui.engine.devices import (
    check_device,
    check_precision,
    cpu_bf16,
    cuda_uuid,
    device_name,
    device_of,
    gpu_bus_id,
    make_current,
    reset_peak_memory,
    synchronize,
    torch_build,
    torch_device,
)
from gputui.engine.download import download_reporter
from gputui.engine.failures import failure_line
from gputui.engine.memory import (
    Step,
    is_out_of_memory,
    memory_reading,
    probe_batch_size,
    release_memory,
    unless_out_of_memory,
)
from gputui.engine.model import CNN
from gputui.engine.pace import EpochClock, busy_share, device_clock, training_flops_per_image
from gputui.engine.pipelines import ClassicPipeline, Pipeline, ResidentPipeline, Shard
from gputui.engine.placement import describe_placement
from gputui.engine.records import RunRecorder
from gputui.engine.step import StaticStep, bf16_autocast, make_optimizer, make_step, set_math
from gputui.engine.toolchain import TOOLCHAIN, missing_for_compile
from gputui.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from gputui.format import exception_line
from gputui.jobs.config import ConfigError, RunConfig, check_batch_fits
from gputui.jobs.events import (
    GRAPHS_OFF,
    DataReady,
    Emit,
    EpochFinished,
    Error,
    Event,
    Finished,
    Note,
    Progress,
    RecordingStopped,
    RunStarted,
)
from gputui.jobs.results import steady_figures
from gputui.jobs.world import World, world_from_env

EVAL_BATCH_MIN = 1024


class RunStopped(Exception):
    """Raised inside the epoch loop when the run was asked to stop."""


class DatasetTooLarge(Exception):
    """The resident pipeline's dataset does not fit in the device's memory."""


def run_training(
    config: RunConfig, emit: Emit, should_stop: Callable[[], bool] = lambda: False
) -> int:
    """Train as ``config`` says, passing each event to ``emit``; returns 0, 1 (failed) or 2
    (usage error). Once ``should_stop()``, polled every step, is True, the run ends with
    ``Finished(stopped=True)``."""
    started = time.perf_counter()
    device_note = None
    try:
        config.validate()
        world = world_from_env(os.environ)  # one rank of a job torchrun (or scale) started
        device: Device
        if world is not None:
            config.check_distributed()
            device, device_note = distributed.rank_device(world, config.device)
        else:
            device = check_device(config.device)
        check_precision(device, config.precision)
    except (ConfigError, DeviceError) as exc:
        kind = "config" if isinstance(exc, ConfigError) else "device"
        emit(Error(message=str(exc), kind=kind))
        return EXIT_USAGE
    missing = missing_for_compile(device.kind) if config.compile else None
    if missing is not None:  # before the data loads or the model compiles: a cheap check
        emit(Error(message=missing, kind=TOOLCHAIN))
        return EXIT_FAILED
    run = _Run(config, torch_device(device), emit, should_stop, started, world)
    if device_note is not None:
        run.emit(Note(device_note))
    try:
        return run.execute()
    finally:
        if run.recorder is not None:
            try:
                run.recorder.close()
            except OSError as exc:  # every event was flushed as it was written: only said
                print(f"gputui: closing the run folder: {exc}", file=sys.stderr)
        distributed.leave()


class _Run:
    """The state of one run; :meth:`execute` is the whole of it."""

    def __init__(
        self,
        config: RunConfig,
        device: torch.device,
        emit: Emit,
        should_stop: Callable[[], bool],
        started: float,
        world: World | None = None,
    ) -> None:
        self.config = config
        self.device = device
        self._emit = emit
        self.should_stop = should_stop
        self.started = started
        self.world = world
        """The distributed job this run is one rank of; ``None`` for a run on its own."""
        self.ranks = world.world_size if world is not None else 1
        self.recorder: RunRecorder | None = None
        """The run folder's writer, once the run is known to be valid (see :meth:`_record`)."""
        leader = world is None or world.leader  # one folder for the job: rank 0's
        self._unrecorded: list[Event] | None = [] if config.record and leader else None
        """What was emitted before the run folder was made, for it; ``None``: not recording."""
        self.run_dir: str | None = None
        self.epochs: list[EpochFinished] = []
        self.batch_size = config.batch_size
        self.step: Step | None = None
        self.pipeline: Pipeline | None = None
        """The run's data, kept while a batch size is probed after an out-of-memory error:
        the retry holds it again (the resident dataset is on the device), so the probe
        must too, or the size it suggests would not fit beside it."""
        self.ddp: torch.nn.parallel.DistributedDataParallel | None = None
        self.memory_format = torch.contiguous_format
        self.busy_share: float | None = None

    def emit(self, event: Event) -> None:
        """Send ``event`` to the parent, and to the run folder (or keep it for the folder)."""
        self._emit(event)
        if self._unrecorded is not None:
            self._unrecorded.append(event)
        else:
            self._record_event(event)

    def _record_event(self, event: Event) -> None:
        if self.recorder is not None:
            try:
                self.recorder.record(event)
            except OSError as exc:  # a full disk: the run goes on, unrecorded
                self._stop_recording(exc)

    def _stop_recording(self, exc: OSError) -> None:
        """Remove the half-written run folder and say so; the run goes on unrecorded, as one
        whose folder could not be made does."""
        recorder, self.recorder, self.run_dir = self.recorder, None, None
        assert recorder is not None
        recorder.discard()
        folder = str(recorder.run_dir)
        message = f"stopped recording this run: {exc}; its folder {folder} was removed"
        self._emit(RecordingStopped(message=message, run_dir=folder))

    def _record(self) -> None:
        """Make the run folder, now that the run is known to be valid (a refused run
        leaves none), and write what was emitted before it."""
        if self._unrecorded is None:
            return
        earlier, self._unrecorded = self._unrecorded, None
        runs_dir = Path(self.config.runs_dir).expanduser() if self.config.runs_dir else None
        try:
            self.recorder = RunRecorder.create(runs_dir, str(self.device))
        except OSError as exc:
            self.emit(Note(f"not recording this run: {exc}"))
            return
        self.run_dir = str(self.recorder.run_dir)
        for event in earlier:
            self._record_event(event)

    def execute(self) -> int:
        oom: str | None = None
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
        except distributed.JoinError as exc:
            self.emit(Error(message=str(exc), kind="join"))
            return EXIT_FAILED
        except Exception as exc:
            if self.world is not None and self.should_stop():  # a peer stopped first
                self.emit(self._finished(stopped=True))
                return EXIT_OK
            if self.world is not None and distributed.lost_peer(exc):
                self.emit(self._lost_peer_error(exc))
                return EXIT_FAILED
            if not is_out_of_memory(exc):
                if self.config.compile and _from_compiler(exc):
                    kind = "compile"
                    message = f"torch.compile failed ({exception_line(exc)}): run without compile"
                else:
                    kind, message = "crash", f"the trainer crashed: {failure_line(exc)}"
                self.emit(Error(message=message, detail=_traceback(exc), kind=kind))
                return EXIT_FAILED
            oom = _traceback(exc)
        if oom is not None:  # out of the except block: its frames, holding device tensors, are gone
            self.emit(self._out_of_memory_error(oom))
            return EXIT_FAILED
        self.emit(self._finished(stopped=False))
        return EXIT_OK

    def _train(self) -> None:
        config, device = self.config, self.device
        make_current(device)
        if self.world is not None:
            backend, init_seconds = distributed.join(
                self.world,
                device,
                config.collective_timeout_s,
                notify=lambda line: self.emit(Note(line)),
            )
        torch.manual_seed(config.seed)  # every rank starts from the same weights
        data = load_dataset(
            config.dataset,  # type: ignore[arg-type]  # validated: one of DATASETS
            Path(config.data_dir).expanduser() if config.data_dir else None,
            download=config.download,
            progress=download_reporter(self.emit),
            limit=config.limit,
            test_limit=config.test_limit,
        )
        train_images = len(data.train_labels)
        check_batch_fits(config.batch_size * self.ranks, train_images)
        self._record()
        bf16 = config.precision == "bf16"
        math = set_math(config.precision, device)
        cpu_fast_bf16 = cpu_bf16().fast
        # fp32 stays NCHW, even on the CPU: channels_last makes the pools faster there but
        # oneDNN's convolutions of these thin layers (3 to 16 channels) slower, and whole
        # epochs come out even. bf16's AMX/AVX512-BF16 kernels do want NHWC.
        channels_last = bf16 and device.type == "cpu" and cpu_fast_bf16
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        if bf16 and device.type == "cpu" and not cpu_fast_bf16:
            self.emit(Note("this CPU has no AVX512-BF16 or AMX: bf16 may be slower than fp32"))
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = True

        graphed = graphs_apply(config, device, self.world)
        model = CNN().to(device=device, memory_format=self.memory_format)  # type: ignore[call-overload]  # torch's overloads omit memory_format
        optimizer = make_optimizer(model, device, capturable=graphed)
        self.ddp = distributed.wrap(model, device) if self.world is not None else None
        trained = self.ddp if self.ddp is not None else model
        forward = torch.compile(trained) if config.compile else trained
        self.step = make_step(forward, optimizer, device, bf16=bf16, graphed=graphed)
        if graphed:  # GPU-ONLY
            self.step = StaticStep(self.step, device, capture=True, fell_back=self._eager_now)

        pipeline = self.pipeline = self._pipeline(data, device)
        self.emit(
            RunStarted(
                device=device_of(device),
                device_name=device_name(device),
                torch_version=torch.__version__,
                dataset=data.name,
                dataset_source=data.source,
                dataset_note=data.note,
                train_images=train_images,
                test_images=len(data.test_labels),
                pipeline=config.pipeline,
                precision=config.precision,
                math=math,
                gpu_uuid=cuda_uuid(device.index or 0) if device.type == "cuda" else None,
                gpu_bus_id=gpu_bus_id(device),
                batch_size=config.batch_size,
                epochs=config.epochs,
                steps_per_epoch=pipeline.steps_per_epoch,
                compile=config.compile,
                channels_last=channels_last,
                cpu_bf16=cpu_fast_bf16,
                num_threads=torch.get_num_threads(),
                num_workers=config.workers if config.pipeline == "classic" else 0,
                nice=os.nice(0),
                pid=os.getpid(),
                run_dir=self.run_dir,
                torch_build=torch_build(),
                flops_per_image=training_flops_per_image(),
                graphs=graphed,
            )
        )
        if self.world is not None:
            self.emit(distributed.joined(self.world, config.batch_size, backend, init_seconds))
        self.emit(
            DataReady(
                device=Device.parse(pipeline.dataset_device),
                seconds=pipeline.load_seconds,
                nbytes=pipeline.nbytes,
            )
        )
        for epoch in range(1, config.epochs + 1):
            result = self._epoch(epoch, model, optimizer, pipeline)
            self.epochs.append(result)
            self.emit(memory_reading(self.device))
        if self.ddp is not None:
            spe = pipeline.steps_per_epoch
            self.emit(distributed.time_steps(self.ddp, self.step, pipeline.epoch, device, spe))
        elif device.type == "cuda":  # GPU-ONLY: the figures are sent; these steps are extra
            try:
                self.busy_share = busy_share(self.step, pipeline.epoch(), device)
            except Exception as exc:  # no CUPTI (a container without its permissions)
                self.emit(Note(f"the GPU's busy time could not be profiled: {failure_line(exc)}"))

    def _eager_now(self, why: str) -> None:
        """The capture failed: say so as it happens (a run stopped mid-epoch says it too)."""
        self.emit(Note(f"{GRAPHS_OFF}, the step runs eagerly: {why}"))  # GPU-ONLY

    def _pipeline(self, data: Dataset, device: torch.device) -> Pipeline:
        if self.config.pipeline == "classic":
            return ClassicPipeline(
                data, device, self.batch_size, self.memory_format, self.config.workers
            )
        world = self.world
        shard = Shard(world.rank, world.world_size, self.config.seed) if world else None
        pipeline = unless_out_of_memory(
            lambda: ResidentPipeline(data, device, self.batch_size, self.memory_format, shard),
            device,
        )
        if pipeline is not None:
            return pipeline
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
    ) -> EpochFinished:
        assert self.step is not None
        device, interval = self.device, self.config.progress_interval_s
        steps_per_epoch = pipeline.steps_per_epoch
        model.train()
        loss_sum = torch.zeros((), device=device)
        steps = images = 0
        reset_peak_memory(device)  # the epoch's Memory reports this epoch's peak
        clock = EpochClock(device)
        synchronize(device)
        started = last_read = time.perf_counter()
        clock.start()
        for x, y in pipeline.epoch():
            loss_sum += self.step(x, y)
            steps += 1
            images += x.shape[0] * self.ranks  # the job's images: every rank's batch is alike
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
        clock.stop()
        synchronize(device)
        seconds = time.perf_counter() - started
        device_seconds, joules = clock.read()
        if self.world is not None:  # the job's epoch: its slowest rank's, its mean loss
            seconds = distributed.slowest(seconds, device)
            loss_sum = distributed.total(loss_sum) / self.ranks
        loss = (loss_sum / max(steps, 1)).item()
        eval_started = time.perf_counter()
        accuracy = self._accuracy(model, pipeline)
        eval_seconds = time.perf_counter() - eval_started
        finished = EpochFinished(
            epoch=epoch,
            seconds=seconds,
            images_per_second=images / seconds,
            loss=loss,
            accuracy=accuracy,
            warmup=epoch == 1,
            eval_seconds=eval_seconds,
            images=images,
            device_seconds=device_seconds,
            device_clock=device_clock(device),
            energy_joules=joules,
        )
        self.emit(finished)
        return finished

    def _accuracy(self, model: torch.nn.Module, pipeline: Pipeline) -> float | None:
        """Held-out accuracy, on the device, one host read at the end."""
        bf16 = self.config.precision == "bf16"
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        total = 0
        model.eval()
        with torch.inference_mode():
            batch = max(self.batch_size, EVAL_BATCH_MIN)
            for x, y in pipeline.test_batches(batch):
                with bf16_autocast(self.device, bf16):
                    logits = model(x)
                correct += (logits.argmax(dim=1) == y).sum()
                total += len(y)
        model.train()
        if self.world is not None:  # each rank counted its share of the held-out batches
            counts = distributed.total(torch.stack([correct, correct.new_tensor(total)]))
            correct, total = counts[0], int(counts[1].item())
        return correct.item() / total if total else None

    def _lost_peer_error(self, exc: BaseException) -> Error:
        assert self.world is not None
        return Error(
            message=(
                f"rank {self.world.rank} of {self.ranks} lost its peers: another rank ended or "
                f"stopped answering ({failure_line(exc)})"
            ),
            detail=_traceback(exc),
            kind="peer",
        )

    def _out_of_memory_error(self, detail: str) -> Error:
        where = f"out of memory on {self.device} at batch size {self.batch_size}"
        fits = None
        try:
            if self.step is not None and self.world is None:  # a probe would wait on peers
                release_memory(self.device)  # the failed step's tensors; the data stays
                fits = probe_batch_size(self.step, self.device, self.batch_size, self.memory_format)
        except Exception as exc:  # the device broke (a sticky CUDA error raises again here)
            return Error(
                message=f"{where}; then the device failed: {failure_line(exc)}",
                detail=f"{detail}\n{_traceback(exc)}",
                kind="oom",
            )
        finally:
            self.pipeline = None
        if self.world is not None:  # not probed: every rank would have to probe together
            advice = "try a smaller batch size"
        elif fits is None:
            advice = "even batch size 1 does not fit: free memory on the device"
        else:
            advice = f"batch size {fits} fits: try that"
        return Error(
            message=f"{where}; {advice}", detail=detail, kind="oom", suggested_batch_size=fits
        )

    def _finished(self, *, stopped: bool) -> Finished:
        epochs = self.epochs
        # Not yet "ended": with only the warm-up epoch there is no steady state to report.
        steady = steady_figures(epochs, ended=False)
        return Finished(
            epochs_completed=len(epochs),
            stopped=stopped,
            warmup_seconds=epochs[0].seconds if epochs else None,
            steady_epoch_seconds=steady.seconds if steady else None,
            steady_images_per_second=steady.images_per_second if steady else None,
            final_loss=epochs[-1].loss if epochs else None,
            final_accuracy=epochs[-1].accuracy if epochs else None,
            total_seconds=time.perf_counter() - self.started,
            run_dir=self.run_dir,
            busy_share=self.busy_share,
        )


def graphs_apply(
    config: RunConfig, device: torch.device, world: World | None, hip: str | None = None
) -> bool:
    """Whether the run replays its step from a CUDA graph: asked (``config.graphs``), on
    CUDA, where the host's launches bound this CNN's pace; with the resident pipeline (the
    classic one's pinning thread would call CUDA during a capture), one process, not
    compiled (``torch.compile`` has graphs of its own). Not on ROCm (``hip``: this torch's
    HIP version): a capture there can hang on a hipBLASLt handle made mid-capture
    (pytorch#179961), which no fallback catches."""
    hip = torch.version.hip if hip is None else hip
    return (
        config.graphs
        and device.type == "cuda"
        and not hip
        and config.pipeline == "resident"
        and world is None
        and not config.compile
    )


def _from_compiler(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("torch._dynamo", "torch._inductor"))


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
