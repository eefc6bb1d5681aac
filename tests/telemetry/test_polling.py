"""The sampling engine: its beats, what it samples on its own thread and what on each source's,
the sampler thread (results, errors, walking away from a hang), and the lazy samplers."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from pathlib import Path

from gputui.telemetry.apple import MpsSampler
from gputui.telemetry.drm import DrmSampler
from gputui.telemetry.polling import (
    Beat,
    LazySampler,
    Poller,
    Samplers,
    SamplerThread,
    close_sampler,
    pending_call,
    read_topology,
    stop_sampler,
)
from gputui.telemetry.readings import DriverCall, GpuTopology, NvmlReading, NvmlStatus
from tests.helpers import WAIT_S, FakeClock, wait_for
from tests.telemetry.sysfs_trees import mi300x_box
from tests.ui.fakes import (
    MPS_ON_LINUX,
    CountingCpuSampler,
    HangingSampler,
    RaisingSampler,
    ScriptedSampler,
    cpu_reading,
    h100s,
)


class Replies:
    """Collects a sampler thread's replies, and the thread each came on."""

    def __init__(self) -> None:
        self._replies: queue.SimpleQueue[tuple[object, BaseException | None, threading.Thread]]
        self._replies = queue.SimpleQueue()

    def __call__(self, value: object, error: BaseException | None) -> None:
        self._replies.put((value, error, threading.current_thread()))

    def next(self) -> tuple[object, BaseException | None, threading.Thread]:
        return self._replies.get(timeout=WAIT_S)

    def none_within(self, seconds: float) -> bool:
        try:
            self._replies.get(timeout=seconds)
        except queue.Empty:
            return True
        return False


def test_samples_run_on_one_daemon_thread_which_replies() -> None:
    thread = SamplerThread("gputui-test")
    replies = Replies()
    seen: list[threading.Thread] = []

    def which() -> str:
        seen.append(threading.current_thread())
        return "reading"

    thread.sample(which, replies)
    first = replies.next()
    thread.sample(which, replies)
    second = replies.next()
    assert first[:2] == second[:2] == ("reading", None)
    assert seen[0] is seen[1] is first[2] is second[2]  # sampled and replied on the thread
    assert seen[0] is not threading.current_thread()
    assert seen[0].daemon and seen[0].name == "gputui-test"
    thread.close()
    assert thread.join(2.0)


def test_sample_returns_before_the_sample_is_taken() -> None:
    thread = SamplerThread("gputui-test")
    replies = Replies()
    release = threading.Event()
    thread.sample(lambda: release.wait(WAIT_S) and "late", replies)
    assert replies.none_within(0.05)  # the caller (the event loop) never waits
    release.set()
    assert replies.next()[:2] == ("late", None)
    thread.close()


def test_an_error_is_handed_to_the_reply_and_the_thread_survives() -> None:
    thread = SamplerThread("gputui-test")
    replies = Replies()

    def broken() -> None:
        raise RuntimeError("driver said no")

    thread.sample(broken, replies)
    value, error, _ = replies.next()
    assert value is None
    assert isinstance(error, RuntimeError) and str(error) == "driver said no"
    thread.sample(lambda: 3, replies)
    assert replies.next()[:2] == (3, None)
    thread.close()


def test_a_hung_sample_holds_only_its_thread() -> None:
    thread = SamplerThread("gputui-test")
    replies = Replies()
    release = threading.Event()
    thread.sample(release.wait, replies)  # returns: it never waits for the sample
    thread.close()
    assert not thread.join(0.05)  # still stuck in the "driver"
    release.set()
    assert thread.join(2.0)


def test_close_runs_the_finalizer_then_ends_and_takes_no_more_samples() -> None:
    thread = SamplerThread("gputui-test")
    replies = Replies()
    sampler = ScriptedSampler(cpu_reading(), cpu_reading())
    thread.sample(sampler.sample, replies)
    replies.next()
    thread.close(sampler.close)
    assert thread.join(2.0)
    assert sampler.closed
    thread.sample(sampler.sample, replies)
    assert replies.none_within(0.1)
    assert sampler.calls == 1


def test_lazy_sampler_builds_once_on_first_sample_and_forwards_close() -> None:
    built: list[ScriptedSampler[object]] = []

    def factory() -> ScriptedSampler[object]:
        built.append(ScriptedSampler(cpu_reading(1.0), cpu_reading(2.0)))
        return built[-1]

    lazy = LazySampler(factory)
    lazy.close()  # nothing built: nothing to close
    assert built == []
    assert lazy.sample().utilization_percent == 1.0
    assert lazy.sample().utilization_percent == 2.0
    assert len(built) == 1
    lazy.close()
    assert built[0].closed
    close_sampler(object())  # samplers without close() are fine


class StoppableSampler:
    """A sampler with NVML's extras: ``stop()`` and ``pending_call()``."""

    def __init__(self) -> None:
        self.stopped = False

    def sample(self) -> int:
        return 1

    def stop(self) -> None:
        self.stopped = True

    def pending_call(self) -> DriverCall:
        return DriverCall("nvmlInit", None, 1.0)


def test_lazy_sampler_forwards_stop_even_before_it_is_built_and_the_pending_call() -> None:
    built: list[StoppableSampler] = []

    def factory() -> StoppableSampler:
        built.append(StoppableSampler())
        return built[-1]

    lazy = LazySampler(factory)
    assert pending_call(lazy) is None  # nothing built: no call
    lazy.stop()  # quitting before the first sample was even started
    lazy.sample()
    assert built[0].stopped
    assert pending_call(lazy) == DriverCall("nvmlInit", None, 1.0)
    stop_sampler(object())  # samplers without stop() or pending_call() are fine
    assert pending_call(object()) is None


class TopologySampler(StoppableSampler):
    """A sampler that tells the GPUs' topology, as NVML's does."""

    def topology(self) -> GpuTopology:
        return GpuTopology(gpus=(0,), paths=())


def test_the_topology_is_asked_of_a_sampler_that_tells_built_first_and_stopped_if_asked() -> None:
    built: list[TopologySampler] = []

    def factory() -> TopologySampler:
        built.append(TopologySampler())
        return built[-1]

    lazy = LazySampler(factory)
    lazy.stop()
    assert read_topology(lazy) == GpuTopology(gpus=(0,), paths=())
    assert len(built) == 1 and built[0].stopped  # built on the topology's call, then stopped
    assert read_topology(LazySampler(StoppableSampler)) is None  # a sampler that cannot say
    assert read_topology(object()) is None


class Threads:
    """A sampler that notes the thread each sample runs on, and what the
    reading is."""

    def __init__(self, reading: object) -> None:
        self.reading = reading
        self.on: list[str] = []

    def sample(self) -> object:
        self.on.append(threading.current_thread().name)
        return self.reading


class Noted:
    """Wraps a real sampler (its ``never_blocks`` too), noting each sample's thread."""

    def __init__(self, sampler: MpsSampler | DrmSampler) -> None:
        self.sampler = sampler
        self.on: list[str] = []

    def never_blocks(self) -> bool:
        return self.sampler.never_blocks()

    def sample(self) -> object:
        self.on.append(threading.current_thread().name)
        return self.sampler.sample()


def poll_until_answered(poller: Poller, clock: FakeClock, polls: int) -> None:
    for _ in range(polls):
        poller.poll()
        wait_for(lambda: poller.latest().snapshot() and not poller._busy, "no answer")
        clock.advance(poller.interval_s)  # a beat on: past each source's rest (MIN_REST)


def test_samples_that_cannot_block_are_taken_on_the_polling_thread(tmp_path: Path) -> None:
    mps = Noted(MpsSampler(platform="linux"))
    drm = Noted(DrmSampler(tmp_path / "no-sysfs", procfs=tmp_path / "no-proc"))
    cpu = Threads(cpu_reading())
    nvml = Threads(NvmlReading(NvmlStatus(available=True), h100s(2).gpus, taken_at=1.0))
    clock = FakeClock()
    poller = Poller(Samplers(cpu=cpu, nvml=nvml, mps=mps, drm=drm), interval_s=0.01, clock=clock)
    poll_until_answered(poller, clock, 3)
    here = threading.current_thread().name
    assert (mps.on, drm.on) == ([here] * 3, [here] * 3)
    assert (cpu.on, nvml.on) == (["gputui-cpu"] * 3, ["gputui-nvml"] * 3)
    names = {thread.name for thread in threading.enumerate()}
    assert not names & {"gputui-mps", "gputui-drm", "gputui-pacer"}
    snapshot = poller.latest().snapshot()
    assert snapshot is not None
    assert snapshot.mps.supported_platform is False
    assert snapshot.mps.message == MpsSampler(platform="linux").sample().message
    assert snapshot.drm.gpus == ()
    assert poller.close()


def test_a_card_moves_the_amd_and_intel_source_to_its_thread(tmp_path: Path) -> None:
    drm = Noted(DrmSampler(mi300x_box(tmp_path / "sys"), procfs=tmp_path / "no-proc"))
    assert drm.never_blocks()  # no card known before the first sample lists them
    cpu = Threads(cpu_reading())
    nvml = Threads(NvmlReading(NvmlStatus(available=True), (), taken_at=1.0))
    clock = FakeClock()
    samplers = Samplers(cpu=cpu, nvml=nvml, mps=MpsSampler(platform="linux"), drm=drm)
    poller = Poller(samplers, interval_s=0.01, clock=clock)
    poll_until_answered(poller, clock, 3)
    assert not drm.never_blocks()
    assert drm.on == [threading.current_thread().name] + ["gputui-drm"] * 2
    snapshot = poller.latest().snapshot()
    assert snapshot is not None and len(snapshot.drm.gpus) == 8
    assert poller.close()


class Beats:
    """A subscriber: every beat, in turn."""

    def __init__(self) -> None:
        self.beats: queue.SimpleQueue[Beat] = queue.SimpleQueue()

    def __call__(self, beat: Beat) -> None:
        self.beats.put(beat)

    def next(self) -> Beat:
        return self.beats.get(timeout=WAIT_S)


def four(cpu: object, nvml: object) -> Samplers:
    return Samplers(cpu=cpu, nvml=nvml, mps=ScriptedSampler(MPS_ON_LINUX))  # type: ignore[arg-type]


def test_a_beat_hands_every_source_on_together_and_a_hung_one_holds_it_only_the_grace() -> None:
    nvml = HangingSampler(h100s(1))
    poller = Poller(four(CountingCpuSampler(), nvml), interval_s=0.4)
    beats = Beats()
    assert poller.subscribe(beats) == Beat({})  # nothing in hand yet
    poller.start()
    firsts: dict[str, object] = {}
    while set(firsts) != {"cpu", "nvml", "mps", "drm"}:  # the first readings come as they come
        firsts.update(beats.next().readings)
    assert nvml.hanging.wait(WAIT_S)  # the second beat: NVML hangs from now on
    beat = beats.next()  # the others together, on the beat: NVML held it the grace, no more
    assert set(beat.readings) == {"cpu", "mps", "drm"} and not beat.late
    assert beat.readings["cpu"].utilization_percent == 2.0  # type: ignore[attr-defined]
    assert poller.pending_call() is None and nvml.calls == 2  # never asked again while it hangs
    nvml.release.set()
    late = beats.next()  # answered between two beats: handed on at once, not on a beat
    assert set(late.readings) == {"nvml"} and late.late
    in_hand = poller.subscribe(Beats())
    assert set(in_hand.readings) == {"cpu", "nvml", "mps", "drm"}
    assert poller.close()


def test_a_sampler_that_raises_is_in_its_beat_and_asked_again() -> None:
    raising = RaisingSampler()
    poller = Poller(four(CountingCpuSampler(), raising), interval_s=0.1)
    beats = Beats()
    poller.subscribe(beats)
    poller.start()
    errors = []
    while len(errors) < 2:
        errors += [beat.errors["nvml"] for beat in [beats.next()] if "nvml" in beat.errors]
    assert errors[0] == "RuntimeError: driver said no"
    assert raising.calls >= 2
    assert poller.latest().nvml is None  # nothing came: nothing stands for it
    assert poller.close()


def test_the_real_engine_imports_the_samplers_before_any_thread_starts() -> None:
    """Imported in the sampler threads, they fought Textual's import for the GIL."""
    probe = """
import sys, threading
from gputui.telemetry import polling

seen = []
start = threading.Thread.start
threading.Thread.start = lambda self: (seen.append(
    {"psutil", "pynvml", "gputui.telemetry.nvml", "gputui.telemetry.host", "gputui.telemetry.drm"}
    <= set(sys.modules)
), start(self))
polling.Poller.real(1.0).start()
print(all(seen), len(seen) >= 1)
"""
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "True True"
