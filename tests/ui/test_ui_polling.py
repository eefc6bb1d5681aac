"""The sampler thread: results, errors, one thread per source, and walking away from a hang."""

from __future__ import annotations

import threading
import time

import pytest

from gputui.ui.polling import Abandoned, LazySampler, SamplerThread, close_sampler
from tests.ui.fakes import ScriptedSampler, cpu_reading


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
