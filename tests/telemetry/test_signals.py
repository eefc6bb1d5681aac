"""Signalling a shown process, against real child processes."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import replace

import psutil
import pytest

from gputui.telemetry.readings import GpuProcess
from gputui.telemetry.signals import HOST_PIDS_REFUSAL, signal_process


def shown(child: subprocess.Popen[bytes], *, started_later_s: float = 0.0) -> GpuProcess:
    """``child`` as a reading shows it (``started_later_s``: a reading of another process
    that had the same pid)."""
    live = psutil.Process(child.pid)
    return GpuProcess(
        child.pid,
        live.username(),
        " ".join(live.cmdline()),
        2**30,
        create_time=live.create_time() + started_later_s,
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_the_signal_reaches_the_process_shown(
    sleeper: subprocess.Popen[bytes], signum: signal.Signals
) -> None:
    process = shown(sleeper)
    result = signal_process(process, signum)
    assert result.sent
    assert result.message == f"Sent {signum.name} to pid {sleeper.pid} ({process.user}: sleep 600)."
    assert sleeper.wait(timeout=10) == -signum


def test_a_pid_that_now_names_another_process_is_not_signalled(
    sleeper: subprocess.Popen[bytes],
) -> None:
    result = signal_process(shown(sleeper, started_later_s=-5.0), signal.SIGKILL)
    assert not result.sent
    assert result.message == (
        f"Not sent: pid {sleeper.pid} is another process now (the one shown exited and its "
        "pid was reused)."
    )
    assert sleeper.poll() is None  # still running


def test_a_process_whose_start_is_unknown_is_not_signalled(
    sleeper: subprocess.Popen[bytes],
) -> None:
    process = GpuProcess(sleeper.pid, None, None, None)  # as psutil could not see it
    result = signal_process(process, signal.SIGKILL)
    assert not result.sent and "started is unknown" in result.message
    assert sleeper.poll() is None


def test_a_process_that_exited_says_so(sleeper: subprocess.Popen[bytes]) -> None:
    process = shown(sleeper)
    sleeper.kill()
    sleeper.wait()
    result = signal_process(process, signal.SIGTERM)
    assert result == type(result)(False, f"Not sent: pid {sleeper.pid} has already exited.")


def test_host_pids_are_never_signalled(sleeper: subprocess.Popen[bytes]) -> None:
    result = signal_process(shown(sleeper), signal.SIGKILL, host_pids=True)
    assert (result.sent, result.message) == (False, HOST_PIDS_REFUSAL)
    assert sleeper.poll() is None


def test_a_host_pid_matched_to_a_local_process_signals_the_local_one(
    sleeper: subprocess.Popen[bytes],
) -> None:
    """In a pid namespace, NVML's pid 4242 proven to be the local ``sleeper``
    (telemetry.devnodes): the signal goes to the local pid, named with the host's."""
    process = replace(shown(sleeper), pid=4242, local_pid=sleeper.pid)
    result = signal_process(process, signal.SIGTERM, host_pids=True)
    assert result.message == (
        f"Sent SIGTERM to pid {sleeper.pid} (host pid 4242) ({process.user}: sleep 600)."
    )
    assert sleeper.wait(timeout=10) == -signal.SIGTERM


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to signal as another user")
def test_no_permission_is_one_line_not_an_exception(sleeper: subprocess.Popen[bytes]) -> None:
    """User ``nobody`` asks to end root's process: the kernel refuses, the result says so.

    A forked child drops to ``nobody`` (a new interpreter could not read root's Python)."""
    process = shown(sleeper)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            result = signal_process(process, signal.SIGTERM)
            os.write(write_end, f"{result.sent} {result.message}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        said = answer.read().decode()
    os.waitpid(child, 0)
    assert said == (
        f"False Not sent: no permission to signal pid {sleeper.pid} ({process.user}: "
        "sleep 600); run gputui as its user or as root."
    )
    assert sleeper.poll() is None
