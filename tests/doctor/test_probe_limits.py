"""The probe's time: how long each timed loop runs, how many calls it averages, and how
long the parent lets the probe run (it grows with the GPUs the probe reports)."""

from __future__ import annotations

import json
import shlex

import pytest

from gputui.doctor.torch_facts import run_probe
from gputui.engine.measure import MIN_REPS, SLOW_LOOP_MAX_S, seconds_per_call, timed_reps
from gputui.engine.probe import MEASUREMENTS_PER_DEVICE, MIN_LOOP_S, loop_seconds
from gputui.jobs.config import ProbeConfig


class FakeDevice:
    """A call that takes ``call_s`` on a fake clock, counted; ``sync`` is counted too."""

    def __init__(self, call_s: float) -> None:
        self.call_s = call_s
        self.now = 0.0
        self.calls = 0
        self.syncs = 0

    def clock(self) -> float:
        return self.now

    def fn(self) -> None:
        self.calls += 1
        self.now += self.call_s

    def sync(self) -> None:
        self.syncs += 1


def test_eight_gpus_no_longer_split_the_budget_to_nothing() -> None:
    loops = MEASUREMENTS_PER_DEVICE["cpu"] + 8 * MEASUREMENTS_PER_DEVICE["cuda"]
    assert loops == 59
    assert 3.0 / loops < MIN_LOOP_S  # the old share: 0.05 s, two H100 fp32 matmuls
    assert loop_seconds(3.0, loops) == MIN_LOOP_S
    assert loop_seconds(3.0, MEASUREMENTS_PER_DEVICE["cpu"]) == 1.0  # a CPU alone: its share


@pytest.mark.parametrize(
    ("once_s", "loop_s", "reps"),
    [
        (0.022, 0.1, MIN_REPS),  # an H100's 8192-square fp32 matmul: 5, not 2
        (0.001, 0.1, 100),  # fast calls fill the loop
        (0.0001, 1.0, 10_000),
        (1e-12, 1.0, 100_000),  # never more than MAX_REPS
        (0.3, 0.1, MIN_REPS),  # 5 x 0.3 s fits in SLOW_LOOP_MAX_S: still 5
        (0.5, 0.1, 4),  # 5 x 0.5 s would pass SLOW_LOOP_MAX_S: as many as fit in it
        (2.2, 1.0, 0),  # a CPU's emulated bf16 matmul: the sizing call is the figure
        (2.2, 10.0, 4),  # a longer loop than the cap: the loop's own length
    ],
)
def test_timed_reps(once_s: float, loop_s: float, reps: int) -> None:
    assert timed_reps(once_s, loop_s) == reps


def test_timed_reps_fill_the_loop_with_at_least_min_reps() -> None:
    for once_s in (1e-6, 1e-4, 0.01, 0.02, 0.05, 0.1, 0.2, 0.39):
        reps = timed_reps(once_s, MIN_LOOP_S)
        assert reps >= MIN_REPS
        assert reps * once_s >= MIN_LOOP_S - 1e-12
        assert reps * once_s <= max(SLOW_LOOP_MAX_S, 2 * MIN_LOOP_S)


@pytest.mark.parametrize(("call_s", "timed"), [(0.022, 5), (0.001, 100), (3.0, 0)])
def test_seconds_per_call_warms_up_sizes_and_times_the_loop(call_s: float, timed: int) -> None:
    device = FakeDevice(call_s)
    assert seconds_per_call(device.fn, device.sync, MIN_LOOP_S, clock=device.clock) == (
        pytest.approx(call_s)
    )
    assert device.calls == 2 + timed  # the warm-up, the sizing call, then the loop
    assert device.syncs == (3 if timed else 2)  # one per call outside the loop, one after it


def test_the_time_limit_grows_with_the_gpus_measured() -> None:
    config = ProbeConfig()
    per_gpu = ProbeConfig.TIMEOUT_PER_GPU_S
    assert config.time_limit_s(60.0, 0) == 60.0
    assert config.time_limit_s(60.0, 1) == 60.0 + per_gpu
    assert config.time_limit_s(60.0, 8) == 60.0 + 8 * per_gpu
    assert config.time_limit_s(5.0, 8) == 5.0 + 8 * per_gpu  # --timeout sets the base
    assert config.with_changes(measure=False).time_limit_s(60.0, 8) == 60.0  # --quick
    assert config.with_changes(torch_only=True).time_limit_s(60.0, 8) == 60.0


def test_a_gpu_s_seven_loops_fit_in_its_allowance() -> None:
    """A call short enough for MIN_REPS of them in SLOW_LOOP_MAX_S (an H100's 8192-square
    fp32 matmul takes 0.02 s) makes a loop of at most SLOW_LOOP_MAX_S after its warm-up and
    sizing call: seven such loops leave a GPU's allowance room for its context and buffers."""
    longest_call_s = SLOW_LOOP_MAX_S / MIN_REPS
    for once_s in (longest_call_s / 100, longest_call_s / 2, longest_call_s):
        assert timed_reps(once_s, MIN_LOOP_S) * once_s <= SLOW_LOOP_MAX_S + 1e-9
    loop_s = 2 * longest_call_s + SLOW_LOOP_MAX_S
    assert MEASUREMENTS_PER_DEVICE["cuda"] * loop_s < ProbeConfig.TIMEOUT_PER_GPU_S * 0.7


def _child(device_count: int, sleep_s: float) -> list[str]:
    """A stand-in probe: it reports ``device_count`` CUDA devices, then measures for
    ``sleep_s``. A shell, not Python: it reports within a millisecond of its start, well
    inside the base limit it is held to, however loaded the machine."""
    cuda = {"type": "probe_cuda", "available": True, "device_count": device_count}
    step = {"type": "probe_step", "step": "measuring cuda:0"}
    done = {"type": "finished", "epochs_completed": 0, "total_seconds": sleep_s}
    lines = [json.dumps(line) for line in (cuda, step, done)]
    script = (
        f"printf '%s\\n' {shlex.join(lines[:2])}; sleep {sleep_s}; echo {shlex.quote(lines[2])}"
    )
    return ["sh", "-c", script]


def test_the_parent_extends_the_limit_when_the_probe_reports_its_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ProbeConfig, "TIMEOUT_PER_GPU_S", 1.0)
    facts = run_probe(timeout_s=1.0, python=_child(2, 1.5))
    assert facts.failure is None, facts.failure
    assert facts.completed and facts.cuda is not None and facts.cuda.device_count == 2


def test_without_gpus_the_base_limit_holds_and_the_message_says_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ProbeConfig, "TIMEOUT_PER_GPU_S", 0.5)
    facts = run_probe(timeout_s=0.5, python=_child(1, 30))
    assert facts.timed_out
    assert facts.failure == "the torch probe timed out after 1 s while measuring cuda:0"
