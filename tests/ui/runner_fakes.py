"""What the runner pane's tests cannot record on this CPU-only machine: GPU runs.

Every stream this machine can record (CPU runs, a CPU-vs-CPU comparison, a stopped run, a
killed trainer, CPU scaling, an experiment, the device list) is recorded from the real
trainer and replayed (tests/ui/streams). What is left here needs a GPU: the monitor's
tests show two (stand-in) H100s, so their runner lists two and trains on ``cuda:0``. Each
piece is marked NOT RECORDABLE WITHOUT A GPU; record it on a GPU box rather than grow it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from gputui.device import CPU, Device
from gputui.jobs.config import RunConfig
from gputui.jobs.devices import DeviceInventory, device_options
from gputui.jobs.events import (
    DataReady,
    DevicesListed,
    EpochFinished,
    Event,
    Finished,
    Memory,
    Placement,
    Progress,
    RunStarted,
)
from gputui.jobs.runner import UI_NICE, RunnerSetup
from tests.ui.streams.replay import Replay, ReplayedJob, stream
from tests.ui.streams.scenarios import BY_NAME, RECORDED_CORES

MiB = 1024**2

TINY_RUN = RunConfig(
    nice=UI_NICE,
    device=CPU,
    epochs=2,
    batch_size=32,
    dataset="synthetic",
    limit=256,
    test_limit=64,
    threads=1,
    record=False,
)
"""A real run of a few seconds on the CPU, most of it importing torch in the child."""


def cuda_build(cuda: str, gpus: int = 0) -> DeviceInventory:
    """NOT RECORDABLE WITHOUT A GPU: a CUDA build of torch for ``cuda``, as its files say,
    that can use ``gpus`` H100s (the stand-in NVML library's GPUs)."""
    return DeviceInventory(
        torch_version=f"2.13.0+cu{cuda.replace('.', '')}",
        cuda_built=True,
        cuda_version=cuda,
        cuda_names=("NVIDIA H100 80GB HBM3",) * gpus,
        mps_built=False,
        mps_available=False,
        system="Linux",
        cpu_name="AMD EPYC 7763 64-Core Processor",
    )


def listing(inventory: DeviceInventory) -> DevicesListed:
    """What the engine's device listing says of ``inventory``: the facts are typed, every
    option and reason is the real code's (``device_options``), as the child builds them."""
    return DevicesListed(
        devices=tuple(device_options(inventory)),
        torch_version=inventory.torch_version,
        chosen=(CPU,),
        cuda_version=inventory.cuda_version,
        torch_build="cuda",
    )


DEVICES = listing(cuda_build("12.4", gpus=2))
"""A box with two H100s (as the stand-in NVML library shows), and MPS unusable."""

CUDA_BUILD_ON_AN_OLD_DRIVER = listing(cuda_build("13.0"))
"""A torch built for CUDA 13.0 that can use none of the stand-in's H100s, whose driver
(550.54.15) is for CUDA 12.4."""


GPU_IMAGES_PER_S = 21_800.0
"""Made-up steady throughput (images/s) of the typed GPU runs."""


def gpu_run_events(
    config: RunConfig,
    *,
    pid: int = 40_321,
    upto_epoch: int | None = None,
    progress_step: int | None = None,
) -> list[Event]:
    """NOT RECORDABLE WITHOUT A GPU: a typed run of ``config`` on ``cuda:N``, made-up timings.

    Its data is ``config``'s (``limit`` and ``test_limit`` images, 50,000 and 10,000
    without), so it compares with a recorded CPU run of the same settings.

    Args:
        config: The run, on a CUDA device.
        pid: The trainer's pid in RunStarted.
        upto_epoch: Stop after this many epochs without finishing (a run in flight).
        progress_step: Then add a Progress at this step of the next epoch.
    """
    assert config.device.kind == "cuda", f"{config.device}: record it (tests/ui/streams)"
    device = config.device.indexed()
    images = config.limit or 50_000
    steps = images // config.batch_size
    events: list[Event] = [
        RunStarted(
            device=device,
            device_name="NVIDIA H100 80GB HBM3",
            torch_version="2.13.0",
            dataset="synthetic",
            dataset_source="generated",
            dataset_note=None,
            train_images=images,
            test_images=config.test_limit or 10_000,
            pipeline=config.pipeline,
            precision=config.precision,
            batch_size=config.batch_size,
            epochs=config.epochs,
            steps_per_epoch=steps,
            compile=False,
            channels_last=False,
            cpu_bf16=False,
            num_threads=config.threads or 15,
            num_workers=0,
            nice=config.nice,
            pid=pid,
            run_dir=None,
            math={"bf16": "bf16 autocast, IEEE fp32 elsewhere", "tf32": "TF32"}.get(
                config.precision, "IEEE fp32"
            ),
        ),
        DataReady(device=device, seconds=0.21, nbytes=images * 3 * 32 * 32),
        _placed_on(device),
        _memory(device),
    ]
    last = config.epochs if upto_epoch is None else upto_epoch
    for epoch in range(1, last + 1):
        speed = GPU_IMAGES_PER_S * (0.3 if epoch == 1 else 1.0 + 0.01 * epoch)  # cuDNN autotune
        events.append(Progress(epoch, steps // 2, steps, speed, 2.31 - 0.01 * epoch))
        events.append(
            EpochFinished(
                epoch=epoch,
                seconds=images / speed,
                images_per_second=speed,
                loss=2.305 - 0.01 * epoch,
                accuracy=0.1,
                warmup=epoch == 1,
                eval_seconds=0.01,
                images=images,
            )
        )
        events.append(_memory(device))
    if upto_epoch is not None:
        if progress_step is not None:
            speed = GPU_IMAGES_PER_S * 1.02
            events.append(Progress(last + 1, progress_step, steps, speed, 2.3))
        return events
    return [*events, Finished(epochs_completed=config.epochs)]


def _placed_on(device: Device) -> Placement:
    """The recorded CPU run's placement (the real model's groups and sizes), all on
    ``device``, as a resident GPU run places it."""
    (recorded,) = (event for event in stream("cpu_run") if isinstance(event, Placement))
    on = str(device)
    rows = tuple(
        replace(row, device=on, state_device=on if row.state_device else None)
        for row in recorded.rows
    )
    return replace(recorded, rows=rows, inputs_device=on, labels_device=on, dataset_device=on)


def _memory(device: Device) -> Memory:
    """A CUDA allocator's figures after an epoch (made up), in the shape the engine's
    ``memory_reading`` gives them on CUDA."""
    return Memory(device, 2 * MiB, 20 * MiB, 12 * MiB, None, 1_310 * MiB, "epoch")


class ScriptedTrainer(ReplayedJob):
    """NOT RECORDABLE WITHOUT A GPU: hands out a typed GPU run at its first drain, as a
    replayed job does; stopped, it ends as ChildProcess ends a child that was stopped
    (``Finished(stopped=True)``)."""

    def __init__(self, config: RunConfig, events: Sequence[Event], pid: int = 40_321) -> None:
        super().__init__(events)
        self.config = config
        self._pid = pid

    def stop(self, *, wait: bool = True) -> None:
        if not self.stopped:
            super().stop(wait=wait)
            self._events.append(Finished(epochs_completed=0, stopped=True))


def _silent_experiment(config: object) -> ReplayedJob:
    """NOT RECORDABLE WITHOUT A GPU: an experiment on the CPU and cuda:0. It starts and
    says nothing; replay ``sync_stall_cpu`` (tests/ui/streams) to see one run."""
    return ReplayedJob(())


def scripted_setup(
    script: Callable[[RunConfig], list[Event]] = gpu_run_events,
    *,
    devices: DevicesListed = DEVICES,
    defaults: RunConfig | None = None,
    cuda: str = "12.4",
) -> RunnerSetup:
    """NOT RECORDABLE WITHOUT A GPU: a runner beside two H100s whose trainers play
    ``script(config)`` on ``cuda:N``, its torch a build for ``cuda`` (the stand-in's driver
    runs 12.4) that lists ``devices``. A CPU run (a comparison's baseline) replays the
    recorded ``cpu_run``, so it needs the recorded settings as ``defaults``."""
    trainers: list[ScriptedTrainer] = []
    cpu: list[Replay] = []  # read once a CPU run starts: most tests never start one

    def build(config: RunConfig) -> ScriptedTrainer | ReplayedJob:
        if config.device.kind == "cpu":
            if not cpu:
                cpu.append(Replay(BY_NAME["cpu_run"]))
            return cpu[0].job(config)
        trainer = ScriptedTrainer(config, script(config), pid=40_321 + len(trainers))
        trainers.append(trainer)
        return trainer

    return RunnerSetup(
        trainer=build,
        experiment=_silent_experiment,
        list_devices=lambda: devices,
        installed=lambda: cuda_build(cuda),
        defaults=defaults or RunConfig(),
        drain_interval_s=0.02,
        watch_interval_s=3600.0,  # the scripted pids are not real processes: never watch them
        cores=RECORDED_CORES,  # its CPU runs replay the recordings
    )
