"""The sampler thread: results, errors, one thread per source, and walking away from a hang."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time

from gputui.telemetry.polling import (
    HeadStart,
    LazySampler,
    Samplers,
    SamplerThread,
    close_sampler,
    pending_call,
    read_topology,
    stop_sampler,
)
from gputui.telemetry.readings import DriverCall, GpuTopology
from tests.ui.fakes import MPS_ON_LINUX, ScriptedSampler, cpu_reading, h100s

WAIT_S = 5.0


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
    started = time.monotonic()
    thread.sample(release.wait, replies)
    assert time.monotonic() - started < 1.0
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


def test_a_call_runs_after_the_prefetched_sample_and_never_takes_its_place() -> None:
    thread = SamplerThread("gputui-test")
    replies = Replies()
    thread.prefetch(lambda: "first sample")
    thread.call(lambda: "topology", replies)
    assert replies.next()[:2] == ("topology", None)
    thread.sample(lambda: "second sample", replies)
    assert replies.next()[:2] == ("first sample", None)  # the prefetched one, still there
    thread.close()


def test_the_first_sample_takes_the_prefetched_one_without_sampling_again() -> None:
    thread = SamplerThread("gputui-test")
    replies = Replies()
    release = threading.Event()
    sampler = ScriptedSampler(cpu_reading(1.0), cpu_reading(2.0))
    thread.prefetch(lambda: release.wait(WAIT_S) and sampler.sample())
    thread.sample(sampler.sample, replies)  # before the prefetched sample is in
    release.set()
    value, _, replied_on = replies.next()
    assert value.utilization_percent == 1.0  # type: ignore[attr-defined]
    assert replied_on is not threading.current_thread()
    assert sampler.calls == 1  # it took the prefetched sample, no other
    thread.sample(sampler.sample, replies)
    assert replies.next()[0].utilization_percent == 2.0  # type: ignore[attr-defined]
    thread.close()


def test_a_finished_prefetched_sample_is_handed_over_at_once() -> None:
    thread = SamplerThread("gputui-test")
    replies = Replies()
    thread.prefetch(lambda: "first")
    early = thread._early  # no public way to wait for it without taking the sample
    assert early is not None and early.done.wait(WAIT_S)
    thread.sample(lambda: "unused", replies)
    assert replies.next() == ("first", None, threading.current_thread())  # replied right here
    thread.close()


def test_prefetched_hands_over_a_finished_sample_once() -> None:
    thread = SamplerThread("gputui-test")
    replies = Replies()
    release = threading.Event()
    thread.prefetch(lambda: release.wait(WAIT_S) and "first")
    assert thread.prefetched() == (False, None)  # still under way: the next sample gets it
    release.set()
    deadline = time.monotonic() + WAIT_S
    while (taken := thread.prefetched()) == (False, None) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert taken == (True, "first")
    assert thread.prefetched() == (False, None)  # handed over: not again
    thread.sample(lambda: "second", replies)
    assert replies.next()[:2] == ("second", None)
    thread.close()


def test_a_prefetched_error_goes_to_the_first_sample_s_reply() -> None:
    thread = SamplerThread("gputui-test")
    replies = Replies()

    def broken() -> None:
        raise RuntimeError("driver said no")

    thread.prefetch(broken)
    time.sleep(0.05)
    assert thread.prefetched() == (False, None)  # errors are not handed over here
    thread.sample(lambda: "unused", replies)
    value, error, _ = replies.next()
    assert value is None and isinstance(error, RuntimeError)
    thread.sample(lambda: 3, replies)
    assert replies.next()[:2] == (3, None)
    thread.close()


def test_head_start_prefetches_every_source_on_its_own_thread() -> None:
    cpu, nvml, mps = (ScriptedSampler(r) for r in (cpu_reading(7.0), h100s(1), MPS_ON_LINUX))
    head_start = HeadStart.begin(Samplers(cpu=cpu, nvml=nvml, mps=mps))  # type: ignore[arg-type]
    assert set(head_start.threads) == {"cpu", "nvml", "mps", "drm"}
    replies = {source: Replies() for source in head_start.threads}
    head_start.threads["cpu"].sample(cpu.sample, replies["cpu"])
    head_start.threads["nvml"].sample(nvml.sample, replies["nvml"])
    assert replies["cpu"].next()[0].utilization_percent == 7.0  # type: ignore[attr-defined]
    assert len(replies["nvml"].next()[0].gpus) == 1  # type: ignore[attr-defined]
    assert (cpu.calls, nvml.calls) == (1, 1)
    threads = {head_start.threads[s]._thread for s in ("cpu", "nvml", "mps", "drm")}
    assert len(threads) == 4
    for thread in head_start.threads.values():
        thread.close()


def test_the_real_head_start_imports_the_samplers_before_any_thread_starts() -> None:
    """Imported in the sampler threads, they fought Textual's import for the GIL."""
    probe = """
import sys
from gputui.telemetry import polling

seen = []
polling.SamplerThread.prefetch = lambda self, function: seen.append(
    {"psutil", "pynvml", "gputui.telemetry.nvml", "gputui.telemetry.host", "gputui.telemetry.drm"}
    <= set(sys.modules)
)
assert "pynvml" not in sys.modules and "psutil" not in sys.modules
polling.HeadStart.begin()
print(seen)
"""
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[True, True, True, True]"
