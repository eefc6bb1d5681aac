"""The runner without a screen: REAL trainer children on the CPU, driven through
:class:`~gputui.jobs.runner.Runner` as the pane drives it (a drain on a timer), and the
devices it offers before torch is asked, from torch's files and what the monitor sees."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from gputui.device import CPU, Device
from gputui.jobs.config import JobConfig
from gputui.jobs.devices import DeviceInventory, installed_torch, seen_devices
from gputui.jobs.events import DeviceOption, DevicesListed, Event, Finished
from gputui.jobs.results import Phase
from gputui.jobs.runner import Choices, Runner, RunnerSetup
from tests.ui.runner_fakes import TINY_RUN

pytestmark = [pytest.mark.timeout(180), pytest.mark.long_module]

TINY = TINY_RUN  # a CPU run of seconds
ON_THE_CPU = Choices(CPU, CPU, {}, "sync-stall")
CPU_BUILD = DeviceInventory("2.13.0+cpu", False, None, (), False, False, "Linux", "CPU")
CPU_ONLY = DevicesListed(
    devices=(
        DeviceOption(CPU, True, "AMD EPYC"),
        DeviceOption(Device("cuda"), False, "NVIDIA GPU (CUDA)", "built without CUDA"),
    ),
    torch_version="2.13.0+cpu",
)
"""A listing of torch's, without the child that says it (for the refusals)."""


class Heard:
    """A tap: what the runner received, in order."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, tuple[JobConfig, ...], str | None]] = []
        self.drains: list[tuple[Event, ...]] = []
        self.stops = self.asks = self.answers = 0

    def begun(self, kind: str, configs: tuple[JobConfig, ...], scaling: str | None) -> None:
        self.jobs.append((kind, configs, scaling))

    def drained(self, events: tuple[Event, ...]) -> None:
        self.drains.append(events)

    def stop_asked(self) -> None:
        self.stops += 1

    def devices_asked(self, answered: bool) -> None:
        self.asks += not answered
        self.answers += answered


def until_idle(runner: Runner, timeout_s: float = 120.0) -> None:
    """Drain as the pane's timer does until the runner is idle."""
    deadline = time.monotonic() + timeout_s
    while runner.busy:
        assert time.monotonic() < deadline, "the runner is still busy"
        runner.drain()
        time.sleep(0.05)


def test_a_comparison_asks_torch_once_then_trains_both_runs() -> None:
    """The real device listing child, then two real CPU runs; a replay of what the tap heard
    takes a second runner through the same steps to the same session."""
    heard = Heard()
    runner = Runner(RunnerSetup(installed=lambda: CPU_BUILD, defaults=TINY), tap=heard)
    runner.offer(
        seen_devices(
            CPU_BUILD, nvidia=["H100"], driver_cuda="12.4", amd=[], intel=[], cpu_name="CPU"
        )
    )
    assert not runner.checked and runner.config(ON_THE_CPU, Device("cuda")).device == Device("cuda")
    assert runner.start(ON_THE_CPU, compare=True)
    assert runner.busy and runner.checking and runner.session is None and not heard.jobs
    assert heard.asks == 1
    until_idle(runner)
    assert runner.checked and runner.devices[0].name == CPU
    assert runner.devices[0].description != "CPU"  # torch's list now: the model's name
    session = runner.session
    assert session is not None and session.phase is Phase.FINISHED, session.runs[-1].error
    assert [run.device for run in session.runs] == [CPU, CPU]
    assert all(len(run.epochs) == 2 for run in session.runs)
    assert session.speedup is not None and session.speedup.steady is not None
    assert runner.trainer is None and runner.trainer_pid is None
    assert heard.jobs == [("training", (TINY, TINY), None)]
    assert runner.events_seen == sum(len(drain) for drain in heard.drains)

    replayed = Runner(RunnerSetup(list_devices=lambda: pytest.fail("a replay asks no torch")))
    assert heard.answers == 1
    replayed.replay_asked(False)
    assert replayed.checking and replayed.busy  # as the pane was while torch was asked
    replayed.replay_asked(True)
    assert not replayed.checking and not replayed.busy
    replayed.replay_asked(False)
    replayed.replay_job(*heard.jobs[0])
    assert not replayed.checking
    for events in heard.drains:
        replayed.replay_events(events)
    again = replayed.session
    assert again is not None and again.phase is Phase.FINISHED and not replayed.busy
    assert [len(run.epochs) for run in again.runs] == [2, 2]
    assert again.speedup == session.speedup
    replayed.clear()
    assert replayed.session is None and replayed.kind == "training"


def test_a_run_stopped_mid_epoch_is_stopped_and_told() -> None:
    heard = Heard()
    setup = RunnerSetup(
        list_devices=lambda: CPU_ONLY, defaults=TINY.with_changes(limit=8192, epochs=5)
    )
    runner = Runner(setup, tap=heard)
    assert runner.start(ON_THE_CPU)
    deadline = time.monotonic() + 120
    while not (runner.session and runner.session.current and runner.session.current.progress):
        assert time.monotonic() < deadline
        runner.drain()
        time.sleep(0.05)
    pid = runner.trainer_pid
    assert pid is not None and runner.session.current.started is not None
    assert pid == runner.session.current.started.pid
    runner.stop()
    until_idle(runner)
    assert runner.session.phase is Phase.STOPPED and heard.stops == 1
    finished = runner.session.runs[0].finished
    assert isinstance(finished, Finished) and finished.stopped and finished.epochs_completed < 5


def test_what_torch_cannot_use_is_refused_once_it_has_said_so() -> None:
    """Before torch is asked, a device greyed as seen is no proof (torch decides); once it
    has listed the devices, each choice is checked against its answer at once."""
    asked: list[bool] = []

    def listing() -> DevicesListed:
        asked.append(True)
        return CPU_ONLY

    runner = Runner(RunnerSetup(list_devices=listing, trainer=lambda c: pytest.fail(str(c))))
    cuda = Choices(Device("cuda", 0), CPU, {}, "sync-stall")
    assert runner.start(cuda)
    until_idle(runner)
    assert runner.message == "✗ cuda:0 is unusable: built without CUDA"
    assert runner.session is None and asked == [True]
    assert not runner.start(Choices(Device("cuda", 1), CPU, {}, "sync-stall"))
    assert runner.message == "✗ cuda:1 is unusable: built without CUDA" and asked == [True]
    assert runner.world_sizes(Device("mps")) is None
    assert runner.message == (
        "✗ torch.distributed has no backend for mps: choose cpu, a CUDA or an XPU GPU"
    )
    assert runner.world_sizes(CPU) == ((1, 2), "cpu")
    assert not runner.start_scaling(Choices(Device("cuda"), CPU, {}, ""), (1, 2), "weak")
    assert runner.message is not None and runner.message.startswith("✗ cuda is unusable")


def test_a_bad_value_is_refused_before_torch_is_asked() -> None:
    runner = Runner(RunnerSetup(list_devices=lambda: pytest.fail("asked torch")))
    assert not runner.start(Choices(CPU, CPU, {"epochs": 0}, "sync-stall"))
    assert runner.message == "✗ epochs must be a whole number from 1 to 1000, got 0"
    assert not runner.busy


def test_a_listing_torch_could_not_give_is_said_and_the_job_waits() -> None:
    from gputui.jobs.events import Error

    runner = Runner(RunnerSetup(list_devices=lambda: Error("torch did not import")))
    assert runner.start(ON_THE_CPU)
    until_idle(runner)
    assert runner.message == "Could not list devices: torch did not import"
    assert runner.session is None and not runner.checked


@pytest.mark.parametrize(
    ("build", "driver", "offered"),
    [
        ("13.0", "12.4", [("cpu", True), ("cuda", False), ("mps", False)]),
        ("12.6", "12.4", [("cpu", True), ("cuda:0", True), ("cuda:1", True), ("mps", False)]),
        ("12.4", None, [("cpu", True), ("cuda:0", True), ("cuda:1", True), ("mps", False)]),
        (None, "12.4", [("cpu", True), ("cuda", False), ("mps", False)]),
    ],
)
def test_the_devices_seen_are_those_this_torch_could_use(
    build: str | None, driver: str | None, offered: list[tuple[str, bool]]
) -> None:
    """A driver of an older major CUDA than the build's cannot start it (an older minor often
    can: torch's own listing decides); a CPU build uses no GPU, with the engine's words."""
    installed = DeviceInventory(
        f"2.13.0+cu{build}" if build else "2.13.0+cpu",
        bool(build),
        build,
        (),
        False,
        False,
        "Linux",
        "CPU",
    )
    listed = seen_devices(
        installed,
        nvidia=["H100", "H100"],
        driver_cuda=driver,
        amd=["MI300X"],
        intel=[],
        cpu_name="EPYC",
    )
    assert [(str(o.name), o.usable) for o in listed.devices] == offered
    assert listed.cuda_version == build and listed.torch_build == ("cuda" if build else "cpu")
    if build is None:
        assert listed.devices[1].reason == (
            "this torch 2.13.0+cpu was built without CUDA; install a CUDA build of torch, as "
            "gputui doctor explains"
        )


def test_rocm_and_xpu_builds_see_the_amd_and_intel_gpus() -> None:
    rocm = DeviceInventory("2.6.0+rocm6.2", True, "6.2", (), False, False, "Linux", "CPU", "6.2")
    listed = seen_devices(
        rocm, nvidia=["H100"], driver_cuda="12.4", amd=["MI300X"], intel=["Arc"], cpu_name="x"
    )
    assert [(str(o.name), o.description) for o in listed.devices][:2] == [
        ("cpu", "x"),
        ("cuda:0", "MI300X"),
    ]
    assert listed.torch_build == "rocm" and listed.cuda_version is None
    xpu = DeviceInventory(
        "2.13.0+xpu", False, None, (), False, False, "Linux", "CPU", xpu_built=True
    )
    listed = seen_devices(
        xpu, nvidia=[], driver_cuda=None, amd=[], intel=["Arc B580"], cpu_name="x"
    )
    assert [str(o.name) for o in listed.devices if o.usable] == ["cpu", "xpu:0"]


def test_the_installed_torch_is_read_without_importing_it() -> None:
    """In a fresh interpreter: what ``torch/version.py`` says, and torch not imported."""
    code = (
        "import json, sys; from gputui.jobs.devices import installed_torch as t; i = t(); "
        "print(json.dumps([i.torch_version, i.cuda_version, i.hip_version, 'torch' in "
        "sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    version, cuda, hip, imported = json.loads(out.stdout)
    import torch

    assert not imported
    built = torch.version.cuda or torch.version.hip
    assert (version, cuda, hip) == (torch.__version__, built, torch.version.hip)
    assert installed_torch().torch_version == version
