"""Real training on the CPU, in this process, on a few hundred synthetic images."""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import torch

from gputui.device import CPU, Device
from gputui.engine import trainer
from gputui.engine.data import load_dataset
from gputui.engine.devices import cpu_bf16, torch_build
from gputui.engine.failures import LAUNCH_BLOCKING_HINT
from gputui.engine.model import CNN
from gputui.engine.pipelines import ClassicPipeline
from gputui.engine.records import EPOCH_COLUMNS, EPOCHS_FILE, EVENTS_FILE
from gputui.engine.step import make_optimizer
from gputui.engine.trainer import run_training
from gputui.jobs.config import RunConfig
from gputui.jobs.events import (
    DataReady,
    EpochFinished,
    Error,
    Event,
    Finished,
    Memory,
    Placement,
    Progress,
    RunStarted,
    parse_event,
)

PARAMS = 30422


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Train with one thread, as the child does on 2 cores: 2 busy cores make OpenMP crawl."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny(tmp_path: Path, **changes: object) -> RunConfig:
    """Two epochs of 8 steps of 32 images, accuracy on 128 held-out images."""
    base = RunConfig(
        device=CPU,
        epochs=2,
        batch_size=32,
        dataset="synthetic",
        limit=256,
        test_limit=128,
        runs_dir=str(tmp_path / "runs"),
        progress_interval_s=0.001,
    )
    return base.with_changes(**changes)


def train(config: RunConfig, stop_after: int | None = None) -> tuple[int, list[Event]]:
    events: list[Event] = []
    code = run_training(
        config,
        events.append,
        should_stop=lambda: stop_after is not None and len(events) >= stop_after,
    )
    return code, events


def kinds(events: list[Event]) -> list[str]:
    return [type(event).__name__ for event in events]


@pytest.fixture(scope="module")
def resident_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[Event], RunConfig]:
    config = tiny(tmp_path_factory.mktemp("resident"))
    code, events = train(config)
    return code, events, config


def test_a_run_streams_its_events_in_order(
    resident_run: tuple[int, list[Event], RunConfig],
) -> None:
    code, events, _ = resident_run
    assert code == 0
    names = [n for n in kinds(events) if n != "Progress"]
    assert names == [
        "RunStarted",
        "DataReady",
        "Placement",
        "Memory",
        "EpochFinished",
        "Memory",
        "EpochFinished",
        "Memory",
        "Finished",
    ]
    started = events[0]
    assert isinstance(started, RunStarted)
    assert (started.device, started.dataset, started.pipeline, started.precision) == (
        CPU,
        "synthetic",
        "resident",
        "fp32",
    )
    assert (started.train_images, started.test_images, started.steps_per_epoch) == (256, 128, 8)
    assert started.torch_version == torch.__version__
    assert started.device_name and started.pid > 0
    assert started.torch_build == torch_build()  # the result says which build ran
    assert not started.channels_last and started.num_workers == 0


def test_progress_is_read_inside_each_epoch(
    resident_run: tuple[int, list[Event], RunConfig],
) -> None:
    _, events, _ = resident_run
    progress = [e for e in events if isinstance(e, Progress)]
    assert {p.epoch for p in progress} == {1, 2}
    for epoch in (1, 2):
        steps = [p.step for p in progress if p.epoch == epoch]
        assert steps == sorted(steps) and steps[0] >= 1 and steps[-1] < 8
    assert all(p.steps_per_epoch == 8 and p.images_per_second > 0 for p in progress)
    assert all(math.isfinite(p.loss) and p.loss > 0 for p in progress)


def test_epoch_timing_and_accuracy_are_sane(
    resident_run: tuple[int, list[Event], RunConfig],
) -> None:
    _, events, _ = resident_run
    epochs = [e for e in events if isinstance(e, EpochFinished)]
    assert [(e.epoch, e.warmup, e.images) for e in epochs] == [(1, True, 256), (2, False, 256)]
    for e in epochs:
        assert e.seconds > 0 and e.eval_seconds > 0
        assert e.images_per_second == pytest.approx(e.images / e.seconds)
        assert 0 < e.loss < 10
        assert e.accuracy is not None and 0 <= e.accuracy <= 1
        assert e.accuracy * 128 == pytest.approx(round(e.accuracy * 128))
    ready = next(e for e in events if isinstance(e, DataReady))
    assert ready.device == CPU and ready.seconds >= 0
    assert ready.nbytes == (256 + 128) * (3 * 32 * 32 + 8)
    memory = [e for e in events if isinstance(e, Memory)]
    assert all(
        m.device == CPU and (m.rss_bytes or 0) > 0 and (m.peak_bytes or 0) > 0 for m in memory
    )
    assert all(m.allocated_bytes is None and m.reserved_bytes is None for m in memory)
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert not finished.stopped and finished.epochs_completed == 2
    assert finished.warmup_seconds == epochs[0].seconds
    assert finished.steady_epoch_seconds == epochs[1].seconds
    assert finished.steady_images_per_second == pytest.approx(256 / epochs[1].seconds)
    assert (finished.final_loss, finished.final_accuracy) == (epochs[1].loss, epochs[1].accuracy)
    assert finished.total_seconds is not None
    assert finished.total_seconds > epochs[0].seconds + epochs[1].seconds


def test_the_cpu_s_clock_is_the_wall_said_not_copied_and_the_flops_are_counted_once(
    resident_run: tuple[int, list[Event], RunConfig],
) -> None:
    """Issue 40: the CPU is the host, so its epochs carry the label ``wall`` and no device
    seconds, energy or busy sample (those are a GPU's); RunStarted carries the model's FLOPs
    an image (test_model.py holds the count to a hand count)."""
    _, events, _ = resident_run
    started, finished = events[0], events[-1]
    assert isinstance(started, RunStarted) and started.flops_per_image == 10_959_984
    epochs = [e for e in events if isinstance(e, EpochFinished)]
    assert [(e.device_clock, e.device_seconds, e.energy_joules) for e in epochs] == [
        ("wall", None, None)
    ] * 2
    assert isinstance(finished, Finished) and finished.busy_share is None


def test_placement_puts_every_group_and_the_optimizer_state_on_the_cpu(
    resident_run: tuple[int, list[Event], RunConfig],
) -> None:
    _, events, _ = resident_run
    placement = next(e for e in events if isinstance(e, Placement))
    rows = {row.group: row for row in placement.rows}
    assert list(rows) == ["conv", "fc", "param_groups[0]"]
    assert [rows[g].kind for g in rows] == ["module", "module", "param_group"]
    conv, fc, group = rows["conv"], rows["fc"], rows["param_groups[0]"]
    assert (conv.param_tensors, fc.param_tensors, group.param_tensors) == (8, 6, 14)
    assert conv.params + fc.params == group.params == PARAMS
    for row in placement.rows:
        assert row.device == row.state_device == row.step_device == "cpu"
        assert row.dtype == row.state_dtype == "float32"
        assert row.param_bytes == 4 * row.params
        assert row.state_tensors == 2 * row.param_tensors  # exp_avg and exp_avg_sq
        assert row.state_elements == 2 * row.params
        assert row.state_bytes == 4 * row.state_elements
        assert (row.buffers, row.buffer_bytes, row.buffer_device) == (0, 0, None)
    assert (placement.inputs_device, placement.labels_device, placement.dataset_device) == (
        "cpu",
        "cpu",
        "cpu",
    )
    assert placement.inputs_dtype == "float32"
    assert placement.inputs_memory_format == "contiguous"
    assert not placement.pinned


def test_the_run_folder_holds_every_event_and_the_epochs(
    resident_run: tuple[int, list[Event], RunConfig],
) -> None:
    _, events, config = resident_run
    started = events[0]
    assert isinstance(started, RunStarted) and started.run_dir is not None
    run_dir = Path(started.run_dir)
    assert run_dir.parent == Path(config.runs_dir or "")
    assert run_dir.name.endswith("-cpu")
    lines = (run_dir / EVENTS_FILE).read_text().splitlines()
    assert [parse_event(line) for line in lines] == events
    with open(run_dir / EPOCHS_FILE, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == EPOCH_COLUMNS
    assert [int(r["epoch"]) for r in rows] == [1, 2]
    assert [r["warmup"] for r in rows] == ["True", "False"]
    assert float(rows[1]["seconds"]) == next(
        e.seconds for e in events if isinstance(e, EpochFinished) and e.epoch == 2
    )


def test_classic_pipeline_with_a_dataloader_worker(tmp_path: Path) -> None:
    code, events = train(tiny(tmp_path, pipeline="classic", workers=1, limit=200, epochs=1))
    assert code == 0, events[-1]
    started = next(e for e in events if isinstance(e, RunStarted))
    assert (started.pipeline, started.num_workers, started.steps_per_epoch) == ("classic", 1, 6)
    placement = next(e for e in events if isinstance(e, Placement))
    assert placement.dataset_device == "cpu" and placement.inputs_device == "cpu"
    epochs = [e for e in events if isinstance(e, EpochFinished)]
    assert [e.images for e in epochs] == [192]  # the short last batch dropped, as resident does
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert finished.steady_epoch_seconds is None and finished.warmup_seconds == epochs[0].seconds


def test_the_classic_pipeline_s_workers_outlive_an_epoch() -> None:
    """Workers started again every epoch would be timed inside it (seconds, where processes
    spawn): the same worker serves the next epoch."""
    data = load_dataset("synthetic", limit=128, test_limit=32)
    pipeline = ClassicPipeline(data, torch.device("cpu"), 32, torch.contiguous_format, 1)
    workers = []
    for _ in range(2):
        assert sum(len(y) for _, y in pipeline.epoch()) == 128
        workers.append({child.pid for child in psutil.Process().children()})
    assert workers[0] and workers[0] == workers[1]
    del pipeline  # its workers end with it


def test_bf16_runs_under_autocast_on_the_cpu(tmp_path: Path) -> None:
    code, events = train(tiny(tmp_path, precision="bf16", epochs=1, record=False))
    assert code == 0, events[-1]
    started = next(e for e in events if isinstance(e, RunStarted))
    fast = cpu_bf16().fast
    assert (
        started.precision == "bf16" and started.channels_last == fast and started.cpu_bf16 == fast
    )
    assert started.run_dir is None
    placement = next(e for e in events if isinstance(e, Placement))
    assert placement.inputs_memory_format == ("channels_last" if fast else "contiguous")
    # autocast computes in bf16; the weights and Adam's state stay float32
    assert all(row.dtype == row.state_dtype == "float32" for row in placement.rows)
    epoch = next(e for e in events if isinstance(e, EpochFinished))
    assert math.isfinite(epoch.loss) and epoch.accuracy is not None


def test_stopping_ends_the_run_with_a_stopped_finish(tmp_path: Path) -> None:
    code, events = train(tiny(tmp_path, epochs=50, record=False), stop_after=4)
    assert code == 0
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.stopped
    assert finished.epochs_completed == 0 and finished.warmup_seconds is None
    assert not any(isinstance(e, EpochFinished) for e in events)


def failing_steps(
    monkeypatch: pytest.MonkeyPatch, fail: Callable[[int, int], Exception | None]
) -> None:
    """The trainer's real step, except where ``fail(call, batch size)`` gives an error: it
    raises that, as a GPU library would where the CPU cannot (a real out-of-memory on the CPU:
    ``tests/engine/test_memory.py``)."""
    make_step = trainer.make_step

    def make(*args: object, **kwargs: object) -> Callable[[torch.Tensor, torch.Tensor], object]:
        step = make_step(*args, **kwargs)  # type: ignore[arg-type]
        calls = itertools.count(1)

        def failing(x: torch.Tensor, y: torch.Tensor) -> object:
            error = fail(next(calls), x.shape[0])
            if error is not None:
                raise error
            return step(x, y)

        return failing

    monkeypatch.setattr(trainer, "make_step", make)


def gpu_out_of_memory(batch: int) -> torch.OutOfMemoryError:
    """torch's own error for a batch the GPU has no room for."""
    return torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {batch} MiB")


def test_the_batch_size_after_out_of_memory_is_probed_beside_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The suggested batch must fit beside the resident dataset, as the retry holds it:
    the probe runs while the run's data is still alive (issue 27 item 6)."""
    import gc
    import weakref

    from gputui.engine.pipelines import ResidentPipeline

    made: list[weakref.ref[ResidentPipeline]] = []
    alive_while_probing: list[bool] = []
    pipeline_init, probe = ResidentPipeline.__init__, trainer.probe_batch_size

    def remembered(self: ResidentPipeline, *args: object, **kwargs: object) -> None:
        pipeline_init(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(weakref.ref(self))

    def probed(*args: object, **kwargs: object) -> int | None:
        gc.collect()
        alive_while_probing.append(any(ref() is not None for ref in made))
        return probe(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ResidentPipeline, "__init__", remembered)
    monkeypatch.setattr(trainer, "probe_batch_size", probed)
    failing_steps(monkeypatch, lambda _, batch: gpu_out_of_memory(batch) if batch >= 20 else None)
    code, events = train(tiny(tmp_path, record=False))
    assert code == 1 and isinstance(events[-1], Error) and events[-1].suggested_batch_size == 16
    assert made and alive_while_probing == [True]
    gc.collect()
    assert all(ref() is None for ref in made)  # and let go once the run has ended


NO_ENGINE = "GET was unable to find an engine to execute this computation"
"""cuDNN's error for a convolution with no room left for its workspace."""


def on_a_nearly_full_gpu(_call: int, batch: int) -> Exception | None:
    """Batches of 20 and more do not fit; 8 to 19 leave cuDNN too little room."""
    if batch >= 20:
        return gpu_out_of_memory(batch)
    return RuntimeError(NO_ENGINE) if batch >= 8 else None


def test_cudnn_failing_while_a_batch_size_is_probed_is_out_of_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_steps(monkeypatch, on_a_nearly_full_gpu)
    code, events = train(tiny(tmp_path, record=False))
    error = events[-1]
    assert code == 1 and isinstance(error, Error)
    assert error.kind == "oom" and error.suggested_batch_size == 4
    assert error.message == "out of memory on cpu at batch size 32; batch size 4 fits: try that"


def test_cudnn_failing_outside_a_probe_is_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_steps(monkeypatch, lambda _, batch: RuntimeError(NO_ENGINE) if batch == 32 else None)
    code, events = train(tiny(tmp_path, record=False))
    error = events[-1]
    assert code == 1 and isinstance(error, Error) and error.kind == "crash"
    assert error.message == f"the trainer crashed: RuntimeError: {NO_ENGINE}"


def test_out_of_memory_even_at_batch_size_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU that another process has filled. (On the CPU, under an address-space limit, the
    memory the failed step let go of always holds a batch of 1.)"""
    failing_steps(monkeypatch, lambda _, batch: gpu_out_of_memory(batch))
    code, events = train(tiny(tmp_path, record=False))
    error = events[-1]
    assert code == 1 and isinstance(error, Error) and error.suggested_batch_size is None
    assert error.message == (
        "out of memory on cpu at batch size 32; even batch size 1 does not fit: free memory on "
        "the device"
    )


def test_a_batch_larger_than_the_data_is_refused_before_the_run_folder_is_made(
    tmp_path: Path,
) -> None:
    """No limit: only the loaded data says how many images there are (50000 synthetic ones)."""
    config = tiny(tmp_path, limit=None, test_limit=1, batch_size=50_001, epochs=1)
    code, events = train(config)
    assert code == 2
    error = events[-1]
    assert isinstance(error, Error) and error.kind == "config"
    assert "larger than the 50,000 training images" in error.message
    assert not Path(config.runs_dir or "").exists()


def test_the_run_s_device_is_made_current_and_its_peak_reset_as_each_epoch_begins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On CUDA these set the current device and reset the peak (tests/engine/test_memory.py,
    test_devices.py); here: the trainer asks for them, for its device, in time."""
    asked: list[tuple[str, torch.device, list[str]]] = []
    events: list[Event] = []

    def spy(name: str) -> Callable[[torch.device], None]:
        def called(device: torch.device) -> None:  # with the events that came before
            asked.append((name, device, [e.TYPE for e in events if e.TYPE != "progress"]))

        return called

    monkeypatch.setattr(trainer, "make_current", spy("make_current"))
    monkeypatch.setattr(trainer, "reset_peak_memory", spy("reset_peak_memory"))
    assert run_training(tiny(tmp_path, epochs=3, record=False), events.append) == 0
    cpu = torch.device("cpu")
    started = ["run_started", "data_ready"]
    epoch_1 = [*started, "placement", "memory", "epoch_finished", "memory"]
    assert asked == [
        ("make_current", cpu, []),
        ("reset_peak_memory", cpu, started),
        ("reset_peak_memory", cpu, epoch_1),
        ("reset_peak_memory", cpu, [*epoch_1, "epoch_finished", "memory"]),
    ]
    memory = [e for e in events if isinstance(e, Memory)]
    assert {m.peak_scope for m in memory} == {"process"}


def device_assert() -> RuntimeError:
    """CUDA's error for a kernel that failed an assert (sticky: every later call raises it)."""
    return RuntimeError("CUDA error: device-side assert triggered\nCompile with ...")


def test_a_cuda_error_says_how_to_find_where_it_happened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    failing_steps(monkeypatch, lambda call, _: device_assert() if call >= 3 else None)
    code, events = train(tiny(tmp_path, record=False))
    error = events[-1]
    assert code == 1 and isinstance(error, Error) and error.kind == "crash"
    assert error.message == (
        "the trainer crashed: RuntimeError: CUDA error: device-side assert triggered; "
        f"{LAUNCH_BLOCKING_HINT}"
    )


def test_a_device_that_breaks_after_running_out_of_memory_still_reports_the_oom(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding a batch size that fits needs the device; when it has broken, the run still
    ends in one ``oom`` error that says both."""
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    failing_steps(  # the probe's first step faults
        monkeypatch, lambda call, batch: gpu_out_of_memory(batch) if call == 1 else device_assert()
    )
    code, events = train(tiny(tmp_path, record=False))
    error = events[-1]
    assert code == 1 and isinstance(error, Error) and error.kind == "oom"
    assert error.message.startswith(
        "out of memory on cpu at batch size 32; then the device failed: RuntimeError: CUDA "
        "error: device-side assert triggered; "
    )
    assert "OutOfMemoryError" in error.detail and "device-side assert" in error.detail


@pytest.mark.parametrize(
    ("changes", "kind", "needle"),
    [
        ({"device": Device("cuda", 99)}, "device", "usable here: cpu"),
        ({"device": Device("mps")}, "device", "usable here: cpu"),
        ({"batch_size": 0}, "config", "batch size"),
        ({"batch_size": 300}, "config", "larger than the 256 training images"),
    ],
)
def test_bad_runs_end_in_one_error_line(
    tmp_path: Path, changes: dict[str, object], kind: str, needle: str
) -> None:
    if changes.get("device") == "mps" and torch.backends.mps.is_available():
        pytest.skip("MPS is usable here")
    code, events = train(tiny(tmp_path, record=False, **changes))
    assert code == 2
    assert len([e for e in events if isinstance(e, Error)]) == 1
    error = events[-1]
    assert isinstance(error, Error) and error.kind == kind and needle in error.message
    assert "\n" not in error.message


def test_the_runs_dir_defaults_to_xdg_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    code, events = train(tiny(tmp_path, runs_dir=None, epochs=1, limit=64))
    assert code == 0
    run_dir = Path(next(e for e in events if isinstance(e, RunStarted)).run_dir or "")
    assert run_dir.parent == tmp_path / "state" / "gputui" / "runs"
    assert json.loads((run_dir / EVENTS_FILE).read_text().splitlines()[-1])["type"] == "finished"


def test_same_seed_same_first_epoch_loss(tmp_path: Path) -> None:
    first = train(tiny(tmp_path, epochs=1, record=False, limit=64))[1]
    second = train(tiny(tmp_path, epochs=1, record=False, limit=64))[1]
    loss = [next(e.loss for e in run if isinstance(e, EpochFinished)) for run in (first, second)]
    assert loss[0] == loss[1]


def test_the_cpu_adam_takes_the_same_steps_as_the_tutorials_adam() -> None:
    # make_optimizer picks a faster implementation (foreach) that must not change a single bit.
    def weights_after_steps(make: Callable[[CNN], torch.optim.Optimizer]) -> torch.Tensor:
        torch.manual_seed(0)
        model = CNN()
        optimizer = make(model)
        data = torch.Generator().manual_seed(1)
        for _ in range(3):
            x = torch.randn(16, 3, 32, 32, generator=data)
            y = torch.randint(0, 10, (16,), generator=data)
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    ours = weights_after_steps(lambda model: make_optimizer(model, torch.device("cpu")))
    tutorial = weights_after_steps(lambda model: torch.optim.Adam(model.parameters()))
    assert torch.equal(ours, tutorial)
