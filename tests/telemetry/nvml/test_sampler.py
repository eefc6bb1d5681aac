"""NvmlSampler's start, library, close and calls that do not return
(``gputui.telemetry.nvml.sampler``), against the stand-in libnvidia-ml.so.1."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gputui.telemetry.nvml import (
    NvmlSampler,
    calls_in_flight,
    describe_nvml_error,
    format_cuda_version,
    is_stale,
)
from gputui.telemetry.nvml.calls import _CallsInFlight
from gputui.telemetry.readings import DriverCall, GpuState, NvmlReading, nvml_hung
from tests.fakenvml import LIBRARY_NAME, FakeNvml
from tests.helpers import ROOT
from tests.telemetry.nvml.conftest import H100, FakeClock, assert_one_sentence

LIBRARY_MISSING = (
    "No NVIDIA driver library (libnvidia-ml.so.1) was found; "
    "install the NVIDIA driver to monitor NVIDIA GPUs."
)


def test_hanging_driver_blocks_only_the_sampling_thread(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, tmp_path: Path
) -> None:
    hang = tmp_path / "hang"
    fake_nvml_env.setenv("FAKE_NVML_HANG_FILE", str(hang))
    assert len(sampler.sample().gpus) == 2  # no file yet: answers at once

    hang.touch()
    results: list[NvmlReading] = []
    worker = threading.Thread(target=lambda: results.append(sampler.sample()), daemon=True)
    worker.start()
    worker.join(timeout=0.3)
    assert worker.is_alive(), "the sample should block while the hang file exists"
    assert results == []

    hang.unlink()
    worker.join(timeout=10)
    assert not worker.is_alive()
    (reading,) = results
    assert [g.state for g in reading.gpus] == [GpuState.OK, GpuState.OK]


def test_close_does_not_wait_forever_for_a_hung_sample(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, clock: FakeClock, tmp_path: Path
) -> None:
    hang = tmp_path / "hang"
    fake_nvml_env.setenv("FAKE_NVML_HANG_FILE", str(hang))
    sampler = NvmlSampler(clock=clock)
    sampler.sample()
    hang.touch()
    worker = threading.Thread(target=sampler.sample, daemon=True)
    worker.start()
    closer = threading.Thread(target=sampler.close, daemon=True)
    closer.start()
    closer.join(timeout=10)
    try:
        assert not closer.is_alive(), "close() should give up on a sample stuck in the driver"
    finally:
        hang.unlink()
        worker.join(timeout=10)
    after = sampler.sample()
    assert not after.status.available
    assert_one_sentence(after.status.error)


@pytest.mark.parametrize(
    ("error", "words", "code"),
    [
        ("DRIVER_NOT_LOADED", "modprobe nvidia", 9),
        ("NO_PERMISSION", "/dev/nvidia", 4),
        ("LIB_RM_VERSION_MISMATCH", "reboot", 18),
        ("18", "reboot", 18),
        ("UNKNOWN", "nvidia-smi", 999),
    ],
)
def test_init_failure_is_one_sentence_with_the_fix(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, error: str, words: str, code: int
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_INIT_ERROR", error)
    reading = sampler.sample()

    assert not reading.status.available
    assert reading.gpus == ()
    assert words in (reading.status.error or "")
    assert_one_sentence(reading.status.error)
    assert reading.status.error_code == code  # NVML's own code, for the doctor's --json


def test_init_is_retried_at_most_every_30_seconds(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_INIT_ERROR", "DRIVER_NOT_LOADED")
    assert not sampler.sample().status.available

    fake_nvml_env.delenv("FAKE_NVML_INIT_ERROR")  # the driver gets loaded
    clock.now += 10.0
    assert not sampler.sample().status.available  # too soon to ask again
    clock.now += 21.0
    reading = sampler.sample()
    assert reading.status.available
    assert len(reading.gpus) == 2


def test_gpu_count_failure_is_a_sentence(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_FAIL", "count=NO_PERMISSION")
    reading = sampler.sample()
    assert not reading.status.available
    assert "/dev/nvidia" in (reading.status.error or "")
    assert reading.status.error_code == 4
    assert fake_nvml.calls("nvmlShutdown") == 1  # what was started is shut down


def test_no_gpus_is_available_and_empty(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "0")
    reading = sampler.sample()
    assert reading.status.available
    assert reading.gpus == ()


def test_library_at_a_missing_path_is_a_sentence(
    fake_nvml_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / LIBRARY_NAME
    with NvmlSampler(library_path=missing) as sampler:
        reading = sampler.sample()
    assert not reading.status.available
    assert reading.gpus == ()
    assert str(missing) in (reading.status.error or "")
    assert_one_sentence(reading.status.error)
    assert reading.status.error_code is None  # no NVML call failed: it never loaded


def test_library_path_loads_that_library(
    load_nvml: Callable[..., FakeNvml], fake_nvml_dir: Path, clock: FakeClock
) -> None:
    from tests.fakenvml import unload_fake_nvml

    unload_fake_nvml()
    with NvmlSampler(fake_nvml_dir / LIBRARY_NAME, clock=clock) as sampler:
        reading = sampler.sample()
    assert reading.status.available
    assert [g.name for g in reading.gpus] == [H100, H100]


def _sample_in_child(env: dict[str, str]) -> tuple[dict[str, object], str]:
    code = (
        "import json; from gputui.telemetry.nvml import NvmlSampler; "
        "r = NvmlSampler().sample(); "
        "print(json.dumps({'error': r.status.error, 'gpus': [g.name for g in r.gpus], "
        "'cuda': r.status.cuda_driver_version}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    )
    return json.loads(done.stdout), done.stderr


def test_child_process_finds_the_stand_in_on_ld_library_path(
    fake_nvml_dir: Path, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_GPU_COUNT": "8"}
    result, stderr = _sample_in_child(env)
    assert result == {"error": None, "gpus": [H100] * 8, "cuda": "12.4"}
    assert stderr == ""


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None,
    reason="a real NVIDIA driver library is installed here",
)
def test_no_driver_library_is_a_sentence(tmp_path: Path) -> None:
    env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path)}
    result, stderr = _sample_in_child(env)
    assert result == {"error": LIBRARY_MISSING, "gpus": [], "cuda": None}
    assert stderr == ""


@pytest.mark.parametrize(
    ("version", "text"),
    [(12040, "12.4"), (11080, "11.8"), (12020, "12.2"), (13000, "13.0"), (10010, "10.1")],
)
def test_cuda_version_is_major_dot_minor(version: int, text: str) -> None:
    assert format_cuda_version(version) == text


def test_cuda_version_from_the_driver(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_CUDA_VERSION", "11080")
    fake_nvml_env.setenv("FAKE_NVML_DRIVER_VERSION", "520.61.05")
    status = sampler.sample().status
    assert (status.driver_version, status.cuda_driver_version) == ("520.61.05", "11.8")


def test_unanswered_system_facts_are_none(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_UNSUPPORTED", "cuda_version,driver_version")
    reading = sampler.sample()
    assert reading.status.available
    assert (reading.status.driver_version, reading.status.cuda_driver_version) == (None, None)
    assert len(reading.gpus) == 2


def test_closed_sampler_shuts_nvml_down_once(fake_nvml: FakeNvml, clock: FakeClock) -> None:
    sampler = NvmlSampler(clock=clock)
    assert sampler.sample().status.available
    sampler.close()
    sampler.close()
    assert fake_nvml.calls("nvmlShutdown") == 1
    reading = sampler.sample()
    assert not reading.status.available
    assert_one_sentence(reading.status.error)


@pytest.mark.parametrize(
    ("taken_at", "now", "interval", "stale"),
    [
        (10.0, 11.9, 1.0, False),  # within two periods
        (10.0, 12.1, 1.0, True),
        (10.0, 11.2, 0.25, False),  # short intervals get a second of slack
        (10.0, 11.3, 0.25, True),
        (10.0, 29.0, 10.0, False),
        (10.0, 30.5, 10.0, True),
    ],
)
def test_is_stale(taken_at: float, now: float, interval: float, stale: bool) -> None:
    assert is_stale(taken_at, now, interval) is stale


def test_unknown_init_error_keeps_the_bindings_words() -> None:
    sentence = describe_nvml_error(999, "Unknown Error")
    assert "Unknown Error" in sentence
    assert_one_sentence(sentence)


def test_the_hang_knob_holds_a_call_inside_the_library_until_released(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    """``FAKE_NVML_HANG`` (tests/fakenvml/README.md): the named call sleeps in the C library."""
    import pynvml

    fake_nvml_env.setenv("FAKE_NVML_HANG", "init=600")
    worker = threading.Thread(target=pynvml.nvmlInit, daemon=True)
    worker.start()
    worker.join(timeout=0.3)
    assert worker.is_alive(), "nvmlInit should sleep inside the library"
    assert fake_nvml.calls_inside() == 1
    fake_nvml.release_hangs()
    worker.join(timeout=10)
    assert not worker.is_alive() and fake_nvml.calls_inside() == 0
    pynvml.nvmlShutdown()


@pytest.mark.parametrize(
    "value", ["init", "init=soon", "init=-1", "nvmlNoSuchCall=1", "x:count=1", "init=1," * 1000]
)
def test_a_malformed_hang_knob_fails_init_saying_so(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    value: str,
) -> None:
    import pynvml

    fake_nvml_env.setenv("FAKE_NVML_HANG", value)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlInit()
    assert "fake_nvml: bad FAKE_NVML_HANG" in capfd.readouterr().err


TEARDOWN_UNDER_A_CALL = """
import os, sys, threading, time
import pynvml

pynvml.nvmlInit()
if sys.argv[1] != "idle":
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    threading.Thread(target=pynvml.nvmlDeviceGetTemperature, args=(handle, 0), daemon=True).start()
    while not pynvml.nvmlLib.fake_nvml_calls_inside():  # until the call is asleep in there,
        time.sleep(0.01)  # where exit tears NVML down under it
if sys.argv[1] == "shutdown":
    pynvml.nvmlShutdown()
"""


@pytest.mark.parametrize(
    ("mode", "crash"),
    [
        ("exit", "the library was unloaded (process exit) with 1 call"),
        ("shutdown", "nvmlShutdown tore NVML down with 1 call"),
        ("idle", None),
    ],
)
def test_the_strict_stand_in_crashes_when_nvml_goes_away_under_a_call(
    fake_nvml_dir: Path, mode: str, crash: str | None
) -> None:
    """``FAKE_NVML_CRASH_ON_TEARDOWN=1`` makes the real driver's use after free certain."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
    env.update(
        LD_LIBRARY_PATH=str(fake_nvml_dir),
        FAKE_NVML_CRASH_ON_TEARDOWN="1",
        FAKE_NVML_HANG="temperature=600",
    )
    done = subprocess.run(
        [sys.executable, "-c", TEARDOWN_UNDER_A_CALL, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if crash is not None:
        assert done.returncode == -11
        assert f"fake_nvml: {crash}" in done.stderr
    else:
        assert (done.returncode, done.stderr) == (0, "")


# --- calls that do not return ------------------------------------------------------------


WEDGED = "the driver may be wedged; check `nvidia-smi` and `dmesg`."


class Sampling:
    """One sample of ``sampler`` on a thread of its own, which the test watches hang."""

    def __init__(self, sampler: NvmlSampler) -> None:
        self.results: list[NvmlReading] = []
        self.thread = threading.Thread(
            target=lambda: self.results.append(sampler.sample()), daemon=True
        )
        self.thread.start()

    def result(self) -> NvmlReading:
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "the sample should end once the driver answers"
        (reading,) = self.results
        return reading


def wait_inside(fake: FakeNvml, calls: int = 1) -> None:
    """Wait until ``calls`` calls are asleep inside the stand-in library."""
    deadline = time.monotonic() + 10
    while fake.calls_inside() < calls:
        assert time.monotonic() < deadline, "no call went to sleep inside the library"
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("knob", "function"), [("init", "nvmlInit"), ("count", "nvmlDeviceGetCount")]
)
def test_a_start_that_hangs_is_named_with_how_long(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    sampler: NvmlSampler,
    clock: FakeClock,
    knob: str,
    function: str,
) -> None:
    """The most common wedge: NVML does not even start. Another thread can say which call
    holds it, for how long, and where to look; once it returns the sample goes on."""
    fake_nvml_env.setenv("FAKE_NVML_HANG", f"{knob}=600")
    sampling = Sampling(sampler)
    wait_inside(fake_nvml)
    assert sampler.pending_call() == DriverCall(function, None, clock.now)
    assert [call.function for call in calls_in_flight()] == [function]
    clock.now += 12.0

    hung = sampler.hung_reading()
    assert not hung.status.available and hung.gpus == ()
    assert hung.status.error == f"{function} has not returned for 12 s: {WEDGED}"
    assert hung.status.hung_call == function and nvml_hung(hung)
    assert hung.status.hung_seconds == 12.0

    fake_nvml.release_hangs()
    reading = sampling.result()
    assert reading.status.available and len(reading.gpus) == 2 and not nvml_hung(reading)
    assert sampler.pending_call() is None and calls_in_flight() == ()


def test_a_gpu_call_that_hangs_leaves_the_gpus_read_before_it(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_HANG", "1:temperature=600")
    sampling = Sampling(sampler)
    wait_inside(fake_nvml)
    assert sampler.pending_call() == DriverCall("nvmlDeviceGetTemperature", 1, clock.now)
    clock.now += 5.0

    hung = sampler.hung_reading()
    assert hung.status.available and nvml_hung(hung)
    assert (hung.status.hung_call, hung.status.hung_seconds) == ("nvmlDeviceGetTemperature", 5.0)
    answered, stuck, behind = hung.gpus
    assert answered.state is GpuState.OK and answered.temperature_c is not None
    assert stuck.state is GpuState.HUNG and stuck.name == H100  # what was read is kept
    assert (stuck.temperature_c, stuck.processes) == (None, None)
    assert stuck.error == f"nvmlDeviceGetTemperature on GPU 1 has not returned for 5 s: {WEDGED}"
    assert behind.state is GpuState.HUNG
    assert behind.error == (
        "Not read: NVML had not returned from nvmlDeviceGetTemperature on GPU 1 after 5 s; "
        + WEDGED
    )
    fake_nvml.release_hangs()
    assert [gpu.state for gpu in sampling.result().gpus] == [GpuState.OK] * 3


def test_for_a_reader_that_goes_on_every_gpu_not_known_down_is_hung(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    """``gputui serve``'s view of a stuck sample: what the sample read before the call is as
    old as the call, and no GPU is read again until it returns, so GPU 0 is hung too; GPU 2,
    whose handle NVML refused at the start, stays unreachable."""
    fake_nvml_env.setenv("FAKE_NVML_GPU_COUNT", "3")
    fake_nvml_env.setenv("FAKE_NVML_HANG", "1:temperature=600")
    fake_nvml_env.setenv("FAKE_NVML_FAIL", "2:handle=NO_PERMISSION")
    sampling = Sampling(sampler)
    wait_inside(fake_nvml)
    clock.now += 45.0

    hung = sampler.hung_reading(keep_read=False)
    assert hung.status.available
    assert (hung.status.hung_call, hung.status.hung_seconds) == ("nvmlDeviceGetTemperature", 45.0)
    read_before, stuck, refused = hung.gpus
    assert [gpu.state for gpu in hung.gpus] == [GpuState.HUNG, GpuState.HUNG, GpuState.UNREACHABLE]
    assert read_before.name == H100 and read_before.uuid is not None  # its identity is kept
    assert read_before.temperature_c is None  # its figures are not
    assert read_before.error == (
        "Not read: NVML had not returned from nvmlDeviceGetTemperature on GPU 1 after 45 s; "
        + WEDGED
    )
    assert stuck.error == f"nvmlDeviceGetTemperature on GPU 1 has not returned for 45 s: {WEDGED}"
    assert "no permission" in (refused.error or "")
    fake_nvml.release_hangs()
    assert [gpu.state for gpu in sampling.result().gpus][:2] == [GpuState.OK] * 2


def test_a_stopped_sample_makes_no_call_after_the_one_in_flight(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler
) -> None:
    """Quitting must not wait for a whole sample of slow calls, only for the one in flight."""
    fake_nvml_env.setenv("FAKE_NVML_HANG", "1:temperature=600")
    sampling = Sampling(sampler)
    wait_inside(fake_nvml)
    sampler.stop()
    fake_nvml.release_hangs()
    assert not sampling.result().status.available
    assert fake_nvml.calls("nvmlDeviceGetPowerUsage", 1) == 0  # asked after the temperature
    assert not sampler.sample().status.available  # and no later sample asks anything
    assert fake_nvml.calls("nvmlDeviceGetPowerUsage") == 1  # GPU 0's, before the stop


def test_close_leaves_nvml_running_while_another_thread_is_inside_it(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    """nvmlShutdown under another thread's call frees what it uses (a real driver crashes):
    the sampler that closes then leaves NVML to the process's exit."""
    closing = NvmlSampler(clock=clock)
    assert closing.sample().status.available
    fake_nvml_env.setenv("FAKE_NVML_HANG", "0:temperature=600")
    other = NvmlSampler(clock=clock)
    sampling = Sampling(other)  # its init reads the knob, then its sample hangs
    wait_inside(fake_nvml)
    closing.close()
    assert fake_nvml.calls("nvmlShutdown") == 0
    fake_nvml.release_hangs()
    assert sampling.result().status.available
    other.close()
    assert fake_nvml.calls("nvmlShutdown") == 1


def test_no_call_starts_while_nvml_shuts_down() -> None:
    """The other half of the rule above: a call that comes while nvmlShutdown is in flight
    is not made (it came between two calls of another sampler; the stand-in crashed)."""
    calls = _CallsInFlight()
    assert calls.enter(("nvmlShutdown", None, 0.0), alone=True)
    made: list[bool] = []
    other = threading.Thread(target=lambda: made.append(calls.enter(("nvmlInit", None, 0.0))))
    other.start()
    other.join(5)
    assert made == [False]
    calls.leave()
    other = threading.Thread(target=lambda: made.append(calls.enter(("nvmlInit", None, 0.0))))
    other.start()
    other.join(5)
    assert made == [False, True]
    assert not calls.enter(("nvmlShutdown", None, 0.0), alone=True)  # the other is inside
