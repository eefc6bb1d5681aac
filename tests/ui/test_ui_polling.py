"""The sampler thread: results, errors, one thread per source, and walking away from a hang."""

from __future__ import annotations

import threading
import time

import pytest

from gputui.ui.polling import (
    Abandoned,
    HeadStart,
    LazySampler,
    Samplers,
    SamplerThread,
    close_sampler,
)
from tests.ui.fakes import MPS_ON_LINUX, ScriptedSampler, cpu_reading, h100s


def never() -> bool:
    return False


def test_call_returns_the_result_from_one_daemon_thread() -> None:
    thread = SamplerThread("gputui-test")
    seen: list[threading.Thread] = []

    def which() -> str:
        seen.append(threading.current_thread())
        return "reading"

    assert thread.call(which, never) == "reading"
    assert thread.call(which, never) == "reading"
    assert seen[0] is seen[1]
    assert seen[0] is not threading.current_thread()
    assert seen[0].daemon and seen[0].name == "gputui-test"
    thread.close()
    assert thread.join(2.0)


def test_call_raises_what_the_function_raised() -> None:
    thread = SamplerThread("gputui-test")

    def broken() -> None:
        raise RuntimeError("driver said no")

    with pytest.raises(RuntimeError, match="driver said no"):
        thread.call(broken, never)
    assert thread.call(lambda: 3, never) == 3  # the thread survives
    thread.close()


def test_a_hung_call_is_abandoned_when_cancelled() -> None:
    thread = SamplerThread("gputui-test")
    release = threading.Event()
    cancelled = threading.Event()
    started = time.monotonic()
    threading.Timer(0.2, cancelled.set).start()
    with pytest.raises(Abandoned):
        thread.call(release.wait, cancelled.is_set, check_s=0.02)
    assert time.monotonic() - started < 2.0
    thread.close()
    assert not thread.join(0.05)  # still stuck in the "driver"
    release.set()
    assert thread.join(2.0)


def test_close_runs_the_finalizer_then_ends_and_refuses_more_calls() -> None:
    thread = SamplerThread("gputui-test")
    sampler = ScriptedSampler(cpu_reading())
    thread.call(sampler.sample, never)
    thread.close(sampler.close)
    assert thread.join(2.0)
    assert sampler.closed
    with pytest.raises(Abandoned):
        thread.call(sampler.sample, never)


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


def test_the_first_call_returns_the_prefetched_sample_without_sampling_again() -> None:
    thread = SamplerThread("gputui-test")
    sampler = ScriptedSampler(cpu_reading(1.0), cpu_reading(2.0))
    thread.prefetch(sampler.sample)
    assert thread.call(sampler.sample, never).utilization_percent == 1.0
    assert sampler.calls == 1  # the call waited for the prefetched sample, took no other
    assert thread.call(sampler.sample, never).utilization_percent == 2.0
    thread.close()


def test_prefetched_hands_over_a_finished_sample_once() -> None:
    thread = SamplerThread("gputui-test")
    release = threading.Event()
    thread.prefetch(lambda: release.wait(5.0) and "first")
    assert thread.prefetched() == (False, None)  # still under way: the next call waits for it
    release.set()
    deadline = time.monotonic() + 5.0
    while (taken := thread.prefetched()) == (False, None) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert taken == (True, "first")
    assert thread.prefetched() == (False, None)  # handed over: not again
    assert thread.call(lambda: "second", never) == "second"
    thread.close()


def test_a_prefetched_error_is_raised_by_the_first_call() -> None:
    thread = SamplerThread("gputui-test")

    def broken() -> None:
        raise RuntimeError("driver said no")

    thread.prefetch(broken)
    time.sleep(0.05)
    assert thread.prefetched() == (False, None)  # errors are not handed over here
    with pytest.raises(RuntimeError, match="driver said no"):
        thread.call(lambda: "unused", never)
    assert thread.call(lambda: 3, never) == 3
    thread.close()


def test_head_start_prefetches_every_source_on_its_own_thread() -> None:
    cpu, nvml, mps = (ScriptedSampler(r) for r in (cpu_reading(7.0), h100s(1), MPS_ON_LINUX))
    head_start = HeadStart.begin(Samplers(cpu=cpu, nvml=nvml, mps=mps))  # type: ignore[arg-type]
    assert set(head_start.threads) == {"cpu", "nvml", "mps"}
    assert head_start.threads["cpu"].call(cpu.sample, never).utilization_percent == 7.0
    assert len(head_start.threads["nvml"].call(nvml.sample, never).gpus) == 1
    assert (cpu.calls, nvml.calls) == (1, 1)
    for thread in head_start.threads.values():
        thread.close()
