"""Scripted trainers and a fixed device list, so the runner pane's snapshots are deterministic.

Only the snapshot tests (and the monitor's tests, which must not start a torch child to
list devices) use these; the runner's pilot tests train for real through ChildProcess.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gputui.jobs.config import ExperimentConfig, RunConfig
from gputui.jobs.events import (
    DataReady,
    DeviceOption,
    DevicesListed,
    EpochFinished,
    Error,
    Event,
    ExperimentConcluded,
    ExperimentDevice,
    ExperimentStarted,
    Finished,
    Memory,
    Placement,
    PlacementRow,
    Progress,
    RunStarted,
    SyncStallRow,
)
from gputui.ui.widgets.runner.setup import RunnerSetup

MiB = 1024**2

DEVICES = DevicesListed(
    devices=(
        DeviceOption("cpu", True, "AMD EPYC 7763 64-Core Processor"),
        DeviceOption("cuda:0", True, "NVIDIA H100 80GB HBM3"),
        DeviceOption("cuda:1", True, "NVIDIA H100 80GB HBM3"),
        DeviceOption("mps", False, "Apple MPS", reason="MPS exists only on Apple silicon Macs"),
    ),
    torch_version="2.13.0",
)
"""A box with two H100s (as the stand-in NVML library shows), and MPS unusable."""

CPU_ONLY = DevicesListed(
    devices=(
        DeviceOption("cpu", True, "AMD EPYC 7763 64-Core Processor"),
        DeviceOption("cuda", False, "CUDA", reason="this torch build has no CUDA (2.13.0+cpu)"),
        DeviceOption("mps", False, "Apple MPS", reason="MPS exists only on Apple silicon Macs"),
    ),
    torch_version="2.13.0+cpu",
)
"""This machine: the CPU only."""

SPEED = {"cpu": 1_450.0, "cuda:0": 21_800.0, "cuda:1": 21_500.0}
"""Made-up steady throughputs (images/s) for the scripted runs."""


def run_events(
    config: RunConfig,
    *,
    pid: int = 40_321,
    upto_epoch: int | None = None,
    progress_step: int | None = None,
    error: Error | None = None,
) -> list[Event]:
    """The events of a run of ``config`` on a 50,000-image dataset, with made-up timings.

    Args:
        config: The run.
        pid: The trainer's pid in RunStarted.
        upto_epoch: Stop after this many epochs without finishing (a run in flight).
        progress_step: Then add a Progress at this step of the next epoch.
        error: End with this error after the first epoch instead.
    """
    device = "cuda:0" if config.device == "cuda" else config.device
    ips = SPEED.get(device, 1_000.0)
    images = 50_000
    steps = images // config.batch_size
    resident = config.pipeline == "resident"
    on = device if resident else "cpu"
    events: list[Event] = [
        RunStarted(
            device=device,
            device_name="test device",
            torch_version="2.13.0",
            dataset="synthetic",
            dataset_source="generated",
            dataset_note=None,
            train_images=images,
            test_images=10_000,
            pipeline=config.pipeline,
            precision=config.precision,
            batch_size=config.batch_size,
            epochs=config.epochs,
            steps_per_epoch=steps,
            compile=False,
            channels_last=False,
            cpu_bf16=False,
            num_threads=15,
            num_workers=0,
            nice=10,
            pid=pid,
            run_dir=None,
            math={"bf16": "bf16 autocast, IEEE fp32 elsewhere", "tf32": "TF32"}.get(
                config.precision, "IEEE fp32"
            ),
        ),
        DataReady(device=on, seconds=0.21, nbytes=184_320_000),
        Placement(
            rows=(
                _row("conv", "module", device, 10_000),
                _row("fc", "module", device, 52_006),
                _row("param_groups[0]", "param_group", device, 62_006),
            ),
            inputs_device=device,
            inputs_dtype="torch.float32",
            inputs_memory_format="contiguous",
            labels_device=device,
            dataset_device=on,
            pinned=False,
        ),
    ]
    last = config.epochs if upto_epoch is None else upto_epoch
    for epoch in range(1, last + 1):
        warmup = 0.3 if device.startswith("cuda") else 0.9  # cuDNN autotune, allocator
        speed = ips * (warmup if epoch == 1 else 1.0 + 0.01 * epoch)
        events.append(Progress(epoch, steps // 2, steps, speed, 2.0 - 0.2 * epoch))
        events.append(
            EpochFinished(
                epoch=epoch,
                seconds=images / speed,
                images_per_second=speed,
                loss=1.9 - 0.25 * epoch,
                accuracy=0.30 + 0.07 * epoch,
                warmup=epoch == 1,
                eval_seconds=0.4,
                images=images,
            )
        )
        events.append(_memory(device))
        if error is not None:
            return [*events, error]
    if upto_epoch is not None:
        if progress_step is not None:
            events.append(
                Progress(last + 1, progress_step, steps, ips * 1.02, 1.9 - 0.2 * (last + 1))
            )
        return events
    return [*events, Finished(epochs_completed=config.epochs)]


def _row(group: str, kind: str, device: str, params: int) -> PlacementRow:
    return PlacementRow(
        group=group,
        kind=kind,
        device=device,
        dtype="torch.float32",
        param_tensors=4 if kind == "module" else 8,
        params=params,
        param_bytes=params * 4,
        buffer_device=None,
        buffers=0,
        buffer_bytes=0,
        state_device=device,
        state_dtype="torch.float32",
        state_tensors=8 if kind == "module" else 16,
        state_elements=2 * params,
        state_bytes=8 * params,
        step_device="cpu",
    )


def _memory(device: str) -> Memory:
    if device.startswith("cuda"):
        return Memory(device, 212 * MiB, 256 * MiB, 240 * MiB, None, 1_310 * MiB, "epoch")
    return Memory(device, None, None, 880 * MiB, None, 870 * MiB, "process")


class ScriptedTrainer:
    """Hands out a fixed list of events at its first drain, like a trainer that was quick."""

    def __init__(self, config: RunConfig, events: Sequence[Event], pid: int = 40_321) -> None:
        self.config = config
        self._events = list(events)
        self._pid = pid
        self.started = False
        self.stopped = False

    @property
    def pid(self) -> int | None:
        return self._pid if self.started else None

    def start(self) -> ScriptedTrainer:
        self.started = True
        return self

    def drain(self) -> list[Event]:
        events, self._events = self._events, []
        return events

    def stop(self, *, wait: bool = True) -> None:
        if not self.stopped:
            self.stopped = True
            self._events.append(Finished(epochs_completed=0, stopped=True))


def sync_stall_events(config: ExperimentConfig) -> list[Event]:
    """A made-up sync-stall experiment on each device: a GPU stalls, a CPU does not."""
    events: list[Event] = [
        ExperimentStarted(
            experiment="sync-stall",
            devices=config.devices,
            batch_sizes=(config.batch_size,),
            steps=200,
            warmup_steps=2,
            budget_s=2.0,
            dataset="synthetic",
            dataset_source="generated",
            dataset_note=None,
            images=50_000,
            threads=15,
            workers=2,
            torch_version="2.13.0",
            pid=40_400,
        )
    ]
    for device in config.devices:
        gpu = device.startswith("cuda")
        events.append(ExperimentDevice(device, "test device", None, False))
        for mode, ms in (("every_step", 3.9 if gpu else 41.0), ("once", 2.6 if gpu else 40.9)):
            ips = config.batch_size / ms * 1000
            events.append(SyncStallRow(device, mode, config.batch_size, 200, 5, ms, ips, 0.1))
    events.append(
        ExperimentConcluded(
            "sync-stall",
            "On cuda:0, reading the loss every step cost 1.3 ms per step (+50%); "
            "on cpu it made no measurable difference.",
        )
    )
    return [*events, Finished(epochs_completed=0)]


def scripted_setup(
    script: Callable[[RunConfig], list[Event]] = run_events,
    *,
    devices: DevicesListed | Error = DEVICES,
    defaults: RunConfig | None = None,
) -> RunnerSetup:
    """A runner whose trainers play ``script(config)`` and whose devices are ``devices``."""
    trainers: list[ScriptedTrainer] = []

    def build(config: RunConfig) -> ScriptedTrainer:
        trainer = ScriptedTrainer(config, script(config), pid=40_321 + len(trainers))
        trainers.append(trainer)
        return trainer

    return RunnerSetup(
        trainer=build,
        experiment=lambda config: ScriptedTrainer(RunConfig(), sync_stall_events(config)),
        list_devices=lambda: devices,
        defaults=defaults or RunConfig(),
        drain_interval_s=0.02,
        watch_interval_s=3600.0,  # the scripted pids are not real processes: never watch them
    )
