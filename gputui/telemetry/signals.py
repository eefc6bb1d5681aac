"""Signalling a GPU process the monitor showed, only while its pid still names that process.

A pid is a number the kernel hands out again once its process has exited: between the
reading that showed a row and the key that asks to end it, the process may have gone and
another taken its pid. So the process is signalled only if psutil's ``create_time`` is the
one read with the row. Nothing here raises: every outcome is one line for the app to show.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

import psutil

from gputui.format import ellipsize, exception_line, one_line
from gputui.telemetry.readings import GpuProcess, shown_pid

HOST_PIDS_REFUSAL = (
    "Not sent: the table shows the host's pids (gputui runs in a container's pid namespace), "
    "and no process here was proven to be this one; end it from the host."
)
"""Why no signal goes to a pid read from inside a pid namespace of our own."""


@dataclass(frozen=True, slots=True)
class SignalResult:
    """What asking to signal a process came to."""

    sent: bool
    """True when the signal was delivered."""
    message: str
    """One line saying what was sent, or why nothing was."""


def describe(process: GpuProcess) -> str:
    """``pid 4242 (ada: python train.py)``: the process as a result names it (by its local
    pid, with the host's beside it where they differ)."""
    command = ellipsize(one_line(process.command or "command unknown"), 60)
    pid = shown_pid(process)
    host = f" (host pid {process.pid})" if pid != process.pid else ""
    return f"pid {pid}{host} ({one_line(process.user or 'user unknown')}: {command})"


def refusal(process: GpuProcess, *, host_pids: bool = False) -> str | None:
    """Why no signal may go to ``process`` as shown, whatever runs now (one line); ``None``
    when one may, if the pid still names it (so the app need not ask a question in vain).
    With ``host_pids`` (the reading's pids are the host's), only a process matched to a local
    one (``local_pid``) may be signalled."""
    if host_pids and process.local_pid is None:
        return HOST_PIDS_REFUSAL
    if process.create_time is None:
        return (
            f"Not sent: when pid {process.pid} started is unknown (psutil could not see it), "
            "so a process that took its pid since could not be told apart."
        )
    return None


def signal_process(
    process: GpuProcess, signum: signal.Signals, *, host_pids: bool = False
) -> SignalResult:
    """Send ``signum`` to ``process`` (as a reading showed it, with the ``create_time`` read
    then) if its pid still names it; whether it was sent, and one line saying so or why not
    (a pid reused, a process gone, no permission; ``host_pids`` as :func:`refusal`'s)."""
    pid = shown_pid(process)
    refused = refusal(process, host_pids=host_pids)
    if refused is not None:
        return SignalResult(False, refused)
    try:
        live = psutil.Process(pid)
        if live.create_time() != process.create_time:
            return SignalResult(
                False,
                f"Not sent: pid {pid} is another process now (the one shown exited and its "
                "pid was reused).",
            )
        live.send_signal(signum)
    except psutil.NoSuchProcess:
        return SignalResult(False, f"Not sent: pid {pid} has already exited.")
    except (psutil.AccessDenied, PermissionError):
        return SignalResult(
            False,
            f"Not sent: no permission to signal {describe(process)}; "
            "run gputui as its user or as root.",
        )
    except (psutil.Error, OSError) as error:
        return SignalResult(False, f"Not sent to pid {pid}: {exception_line(error)}")
    return SignalResult(True, f"Sent {signum.name} to {describe(process)}.")
