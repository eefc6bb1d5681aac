"""The event stream's schema and the run config: torch-free, read by the UI process."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from gputui.device import CPU, Device
from gputui.jobs.config import ConfigError, RunConfig
from gputui.jobs.events import (
    EVENT_TYPES,
    SCHEMA_VERSION,
    BatchSweepRow,
    CudaProbed,
    DataProgress,
    DataReady,
    DeviceFailed,
    DeviceOption,
    DeviceProbed,
    DevicesListed,
    EpochFinished,
    Error,
    Event,
    ExperimentConcluded,
    ExperimentDevice,
    ExperimentStarted,
    Finished,
    Memory,
    MpsProbed,
    Note,
    PipelineRow,
    PitfallShown,
    Placement,
    PlacementRow,
    ProbeStep,
    Progress,
    RanksStarted,
    RecordingStopped,
    RunStarted,
    StepTimes,
    SyncStallRow,
    TorchProbed,
    WorldJoined,
    XpuProbed,
    parse_event,
)

ROW = PlacementRow(
    group="conv",
    kind="module",
    device="cpu",
    dtype="float32",
    param_tensors=8,
    params=11608,
    param_bytes=46432,
    buffer_device=None,
    buffers=0,
    buffer_bytes=0,
    state_device="cpu",
    state_dtype="float32",
    state_tensors=16,
    state_elements=23216,
    state_bytes=92864,
    step_device="cpu",
)

SAMPLES: list[Event] = [
    DevicesListed(
        devices=(
            DeviceOption(CPU, True, "Some CPU"),
            DeviceOption(Device("mps"), False, "Apple GPU (MPS)", "MPS needs macOS"),
        ),
        torch_version="2.13.0+cpu",
    ),
    DataProgress(done_bytes=10, total_bytes=100),
    RunStarted(
        device=CPU,
        device_name="Some CPU",
        torch_version="2.13.0+cpu",
        dataset="synthetic",
        dataset_source="generated",
        dataset_note=None,
        train_images=512,
        test_images=256,
        pipeline="resident",
        precision="fp32",
        batch_size=64,
        epochs=2,
        steps_per_epoch=8,
        compile=False,
        channels_last=False,
        cpu_bf16=True,
        num_threads=1,
        num_workers=0,
        nice=10,
        pid=1234,
        run_dir=None,
    ),
    DataReady(device=CPU, seconds=0.01, nbytes=2048),
    Placement(
        rows=(ROW,),
        inputs_device="cpu",
        inputs_dtype="float32",
        inputs_memory_format="contiguous",
        labels_device="cpu",
        dataset_device="cpu",
        pinned=False,
    ),
    Progress(epoch=1, step=3, steps_per_epoch=8, images_per_second=1000.0, loss=2.3),
    EpochFinished(
        epoch=1,
        seconds=1.5,
        images_per_second=341.0,
        loss=2.2,
        accuracy=0.25,
        warmup=True,
        eval_seconds=0.1,
        images=512,
    ),
    Memory(
        device=CPU,
        allocated_bytes=None,
        reserved_bytes=None,
        peak_bytes=5,
        driver_bytes=None,
        rss_bytes=4,
    ),
    Note(message="hello"),
    RecordingStopped(message="stopped recording this run: ...", run_dir="/runs/x"),
    Error(message="out of memory", detail="trace", kind="oom", suggested_batch_size=128),
    Finished(epochs_completed=2, warmup_seconds=1.5, steady_epoch_seconds=1.0),
    WorldJoined(
        world_size=16,
        nodes=2,
        backend="nccl",
        per_rank_batch=256,
        global_batch=4096,
        init_seconds=0.8,
    ),
    RanksStarted(pids=(4242, 4243)),
    StepTimes(
        steps=20, step_ms_p50=0.61, step_ms_p95=0.7, local_step_ms_p50=0.55, allreduce_share=0.1
    ),
    ExperimentStarted(
        experiment="pipelines",
        devices=(CPU,),
        batch_sizes=(256,),
        steps=20,
        warmup_steps=2,
        budget_s=2.0,
        dataset="synthetic",
        dataset_source="generated",
        dataset_note=None,
        images=5632,
        threads=2,
        workers=2,
        torch_version="2.13.0+cpu",
        pid=1234,
    ),
    ExperimentDevice(device=CPU, device_name="Some CPU", data_phase=None, pinned=False),
    BatchSweepRow(CPU, 64, 10, 5000.0, 1.0, 11.0, 1 / 12),
    SyncStallRow(CPU, "once", 256, 30, 3, 21.0, 12_000.0, 0.5),
    PipelineRow(CPU, "classic", 256, 20, 30.0, 8_000.0, 2, False, None),
    DeviceFailed(
        device=Device("cuda", 0), message="cuda:0 failed: RuntimeError: boom", detail="trace"
    ),
    ExperimentConcluded(experiment="pipelines", conclusion="On cpu, it was so."),
    ProbeStep("initialising CUDA"),
    TorchProbed(
        imported=True,
        version="2.13.0+cpu",
        import_warnings=("NumPy is missing",),
        companions={"torchvision": None},
        platform={"machine": "x86_64"},
    ),
    CudaProbed(available=False, device_count=0, init_error="AssertionError: no CUDA"),
    MpsProbed(available=False, warnings=("MPS needs macOS",)),
    XpuProbed(available=True, device_count=2),
    PitfallShown(name="numpy", shown_on="meta", error="TypeError: no", cpu_error=None),
    DeviceProbed(
        device=CPU,
        name="Some CPU",
        memory_bytes=2**34,
        figures={"copy_bytes_per_s": 5e9, "matmul_bf16_tflops": None},
        notes=("host memcpy: copy_ of 64 MiB",),
    ),
]


def test_samples_cover_every_event_type() -> None:
    assert {type(event).TYPE for event in SAMPLES} == set(EVENT_TYPES)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda event: type(event).TYPE)
def test_every_event_round_trips_through_one_json_line(event: Event) -> None:
    line = event.to_json()
    assert "\n" not in line
    body = json.loads(line)
    assert body["v"] == SCHEMA_VERSION
    assert body["type"] == type(event).TYPE
    assert parse_event(line) == event
    assert parse_event((line + "\n").encode()) == event


def test_nested_rows_come_back_as_dataclasses() -> None:
    placement = parse_event(SAMPLES[4].to_json())
    assert isinstance(placement, Placement)
    assert placement.rows == (ROW,)
    assert isinstance(placement.rows[0], PlacementRow)


def test_a_diverged_nan_loss_survives_the_stream() -> None:
    event = Progress(epoch=1, step=1, steps_per_epoch=2, images_per_second=1.0, loss=math.nan)
    parsed = parse_event(event.to_json())
    assert isinstance(parsed, Progress)
    assert math.isnan(parsed.loss)


def test_naming_its_type_makes_a_class_a_frozen_registered_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("gputui.jobs.events.EVENT_TYPES", dict(EVENT_TYPES))

    class Ping(Event, type="test_ping"):
        count: int
        note: str = ""

    ping = Ping(count=3)
    assert parse_event(ping.to_json()) == ping
    assert json.loads(ping.to_json()) == {
        "v": SCHEMA_VERSION,
        "type": "test_ping",
        "count": 3,
        "note": "",
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        ping.count = 4  # type: ignore[misc]
    with pytest.raises(TypeError, match="two event types are called 'note'"):

        class Other(Event, type="note"):
            text: str


def test_unknown_fields_from_a_newer_trainer_are_ignored() -> None:
    body = json.loads(Note(message="hi").to_json())
    body["colour"] = "blue"
    assert parse_event(json.dumps(body)) == Note(message="hi")


@pytest.mark.parametrize(
    "line",
    [
        "",
        "   ",
        "Traceback (most recent call last):",
        "[1, 2, 3]",
        '{"no": "type"}',
        '{"v": 1, "type": 7}',
        '{"v": 2, "type": "hologram", "depth": 3}',  # a type from the future
        '{"v": 1, "type": "note"}',  # a required field missing
        '{"v": 1, "type": "placement", "rows": 5, "inputs_device": "cpu"}',
        '{"v": 1, "type": "placement", "rows": [7], "inputs_device": "cpu"}',
        '{"v": 1, "type": "epoch_fin',  # half a line
        b"\xff\xfe not utf-8",
    ],
)
def test_lines_that_are_not_known_events_are_skipped(line: str | bytes) -> None:
    assert parse_event(line) is None


def test_run_config_round_trips_and_ignores_unknown_keys() -> None:
    config = RunConfig(
        device=Device("cuda", 1), epochs=3, batch_size=128, limit=500, precision="bf16"
    )
    assert RunConfig.from_json(config.to_json()) == config
    body = json.loads(config.to_json())
    body["future_knob"] = True
    assert RunConfig.from_json(json.dumps(body)) == config


@pytest.mark.parametrize("text", ["not json", "[1]", '{"epochs": 1, "device": 5, "x": 1, "y"'])
def test_run_config_from_bad_json_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        RunConfig.from_json(text)


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"batch_size": 0}, "batch size"),
        ({"epochs": 0}, "epochs"),
        ({"epochs": True}, "epochs"),
        ({"dataset": "imagenet"}, "dataset"),
        ({"pipeline": "fast"}, "pipeline"),
        ({"precision": "fp8"}, "precision"),
        ({"nice": 20}, "nice"),
        ({"threads": 0}, "threads"),
        ({"workers": -1}, "workers"),
        ({"limit": 0}, "limit"),
        ({"progress_interval_s": 0}, "progress interval"),
    ],
)
def test_bad_config_values_get_one_line_each(changes: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        RunConfig().with_changes(**changes).validate()
    message = str(caught.value)
    assert needle in message
    assert "\n" not in message


def test_defaults_validate(tmp_path: Path) -> None:
    RunConfig().validate()
    RunConfig(data_dir=str(tmp_path)).validate()
    RunConfig(data_dir=str(tmp_path / "new")).validate()  # the download makes it
