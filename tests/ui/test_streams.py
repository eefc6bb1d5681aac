"""The recorded event streams the runner's tests replay: read strictly by the protocol's
parser, replayed only into the configs they were recorded with, and still what the real
trainer emits (a fresh recording of each scenario has the same kinds of events in order)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest

from gputui.jobs.config import RunConfig
from gputui.jobs.events import (
    EVENT_TYPES,
    DevicesListed,
    EpochFinished,
    Error,
    Event,
    ExperimentStarted,
    Finished,
    Placement,
    RunStarted,
)
from tests.ui.streams.record import record_devices, record_scenario, write
from tests.ui.streams.replay import (
    FOLDER,
    RecordingError,
    Replay,
    devices,
    load,
    stream,
    streams,
)
from tests.ui.streams.scenarios import BY_NAME, RECORDED, SCENARIOS, Scenario

pytestmark = [pytest.mark.timeout(240), pytest.mark.long_module]


def kinds(events: Sequence[Event]) -> list[str]:
    """The event types in order, a run of one type counted once (progress reads come as
    often as the clock allows)."""
    return [kind for kind, _ in itertools.groupby(type(event).TYPE for event in events)]


def ending(event: Event) -> tuple[str, object]:
    """How a stream ended, in kind: finished or stopped, or the error's kind."""
    if isinstance(event, Finished):
        return ("finished", event.stopped)
    if isinstance(event, Error):
        return ("error", event.kind)
    return (type(event).TYPE, None)


def until_epoch_1(events: Sequence[Event]) -> list[Event]:
    """``events`` through the end of epoch 1: where a stop or a kill lands after it depends
    on the clock."""
    first = next(i for i, e in enumerate(events) if isinstance(e, EpochFinished))
    return list(events[: first + 1])


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda scenario: scenario.name)
def test_each_recording_is_its_scenario_s_jobs_each_ending_once(scenario: Scenario) -> None:
    jobs = streams(scenario.name)
    assert len(jobs) == len(scenario.configs)
    for config, events in zip(scenario.configs, jobs, strict=True):
        if scenario.ending == "data":  # it failed before it started
            assert len(events) == 1
            continue
        started = next(e for e in events if isinstance(e, RunStarted | ExperimentStarted))
        if isinstance(config, RunConfig):
            assert isinstance(started, RunStarted)
            recorded = (started.device, started.epochs, started.batch_size, started.precision)
            assert recorded == (config.device, config.epochs, config.batch_size, config.precision)
            assert started.train_images == config.limit
        else:
            assert isinstance(started, ExperimentStarted)
            assert (started.experiment, started.devices) == (config.experiment, config.devices)
    assert (
        ending(jobs[-1][-1])
        == {
            "finish": ("finished", False),
            "stop": ("finished", True),
            "kill": ("error", "killed"),
            "data": ("error", "data"),
        }[scenario.ending]
    )


def test_the_device_listing_is_this_machine_s() -> None:
    listed = devices()
    assert [str(option.name) for option in listed.devices] == ["cpu", "cuda", "mps"]
    assert [option.usable for option in listed.devices] == [True, False, False]


def test_a_recording_with_an_unknown_event_fails_with_the_line_and_the_type(
    tmp_path: Path,
) -> None:
    lines = (FOLDER / "cpu_run.jsonl").read_text().splitlines()
    lines.insert(4, '{"v":1,"type":"epoch_halved","epoch":1}')
    (tmp_path / "cpu_run.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordingError) as caught:
        load("cpu_run", tmp_path)
    message = str(caught.value)
    assert message.startswith("cpu_run.jsonl:5: unknown event type 'epoch_halved'")
    assert "python -m tests.ui.streams.record" in message


def test_a_recorded_event_the_protocol_cannot_build_fails_loudly(tmp_path: Path) -> None:
    """A field the protocol now requires, missing from the recording (a renamed field)."""
    lines = (FOLDER / "cpu_run.jsonl").read_text().splitlines()
    lines[1] = lines[1].replace('"nbytes"', '"n_bytes"')  # data_ready
    (tmp_path / "cpu_run.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordingError, match=r"cpu_run.jsonl:2: a 'data_ready' event the proto"):
        load("cpu_run", tmp_path)


def test_an_event_type_dropped_from_the_protocol_breaks_the_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The live parser skips what it does not know; a replay must not."""
    monkeypatch.delitem(EVENT_TYPES, "memory")
    with pytest.raises(RecordingError, match=r"cpu_run.jsonl:4: unknown event type 'memory'"):
        load("cpu_run")


def test_another_protocol_version_breaks_the_replay(tmp_path: Path) -> None:
    lines = (FOLDER / "cpu_run.jsonl").read_text().splitlines()
    lines[0] = lines[0].replace('{"v":1,', '{"v":2,')
    (tmp_path / "cpu_run.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordingError, match=r"cpu_run.jsonl:1: recorded with protocol version 2"):
        load("cpu_run", tmp_path)


def test_a_replay_refuses_a_config_it_did_not_record() -> None:
    replay = Replay(BY_NAME["cpu_run"])
    with pytest.raises(RecordingError, match=r"epochs=2 \(recorded 3\)"):
        replay.job(RECORDED.with_changes(epochs=2))
    job = replay.job(RECORDED).start()
    assert job.drain() == stream("cpu_run") and job.drain() == []
    with pytest.raises(RecordingError, match="the pane started job 2; cpu_run recorded 1"):
        replay.job(RECORDED)


def test_what_the_recorder_writes_the_replay_reads_back(tmp_path: Path) -> None:
    events = stream("cpu_stopped")
    write("copy", events, tmp_path)
    assert load("copy", tmp_path) == events


def test_the_device_listing_is_still_what_a_child_lists() -> None:
    """The same candidates, usable alike, where no accelerator is usable (as here; the CPU's
    name is the machine's own)."""
    (fresh,) = record_devices()
    assert isinstance(fresh, DevicesListed)
    if any(option.usable and option.name.kind != "cpu" for option in fresh.devices):
        pytest.skip("an accelerator is usable here: the recording is of a CPU-only machine")
    offered = [(option.name, option.usable) for option in fresh.devices]
    assert offered == [(option.name, option.usable) for option in devices().devices]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda scenario: scenario.name)
def test_each_recording_is_still_what_the_trainer_emits(scenario: Scenario) -> None:
    """A fresh recording has the same kinds of events in the same order (through epoch 1
    where a stop or a kill follows it, whose moment is the clock's), and ends alike."""
    fresh, recorded = streams_of(record_scenario(scenario)), streams(scenario.name)
    assert len(fresh) == len(recorded)
    for new, old in zip(fresh, recorded, strict=True):
        if scenario.ending in {"stop", "kill"}:
            assert kinds(until_epoch_1(new)) == kinds(until_epoch_1(old))
        else:
            assert kinds(new) == kinds(old)
        assert ending(new[-1]) == ending(old[-1])


def streams_of(events: Sequence[Event]) -> list[list[Event]]:
    """``events`` cut after each job's last event, as :func:`streams` cuts a recording."""
    jobs: list[list[Event]] = [[]]
    for event in events:
        jobs[-1].append(event)
        if isinstance(event, Finished | Error):
            jobs.append([])
    return jobs[:-1]


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_a_typed_gpu_run_holds_to_what_the_trainer_emits(precision: str) -> None:
    """NOT RECORDABLE WITHOUT A GPU (runner_fakes.py): until a GPU's streams are recorded
    (the smoke suite keeps them), a typed run has the recorded CPU run's kinds of events in
    order, its RunStarted sets every field the trainer's does, its placement is the real
    model's, and its math is in the engine's own words."""
    from gputui.device import Device
    from gputui.engine.step import BF16, IEEE_FP32, TF32
    from tests.ui.runner_fakes import gpu_run_events

    recorded = stream("cpu_run")
    typed = gpu_run_events(RECORDED.with_changes(device=Device("cuda", 0), precision=precision))
    assert kinds(typed) == kinds(recorded)
    started, real = typed[0], recorded[0]
    assert isinstance(started, RunStarted) and isinstance(real, RunStarted)
    unset = {name for name, value in vars(started).items() if value is None}
    assert unset <= {name for name, value in vars(real).items() if value is None} | {"gpu_uuid"}
    assert started.math == {"fp32": IEEE_FP32, "tf32": TF32, "bf16": BF16}[precision]
    placed = [e for e in typed if isinstance(e, Placement)]
    sizes = [(r.group, r.kind, r.params, r.param_tensors, r.state_elements) for r in placed[0].rows]
    (real_placed,) = (e for e in recorded if isinstance(e, Placement))
    assert sizes == [
        (r.group, r.kind, r.params, r.param_tensors, r.state_elements) for r in real_placed.rows
    ]


def test_the_typed_device_listings_are_the_engine_s_words() -> None:
    """The GPU listings the runner's tests use are built by the engine's own
    ``device_options`` from typed facts (runner_fakes.listing): no reason is typed by hand,
    and the facts give what the tests rely on: two usable H100s, or a build too new."""
    from gputui.device import Device
    from tests.ui.runner_fakes import CUDA_BUILD_ON_AN_OLD_DRIVER, DEVICES

    assert [(o.name, o.usable) for o in DEVICES.devices][1:3] == [
        (Device("cuda", 0), True),
        (Device("cuda", 1), True),
    ]
    (cuda,) = (o for o in CUDA_BUILD_ON_AN_OLD_DRIVER.devices if o.name.kind == "cuda")
    assert not cuda.usable and cuda.reason is not None and "built for CUDA 13.0" in cuda.reason
