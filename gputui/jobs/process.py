"""The parent's handle on the engine's child process (``python -m gputui.engine MODE``):
start it, read its events, stop it.

Nothing here raises for a failed job. Whatever the child does (crash, get killed, exit
without a word), its stream ends with exactly one ``Finished`` or ``Error`` (for
:func:`list_devices`, ``DevicesListed``); and when the child ends, or this process does,
the child's whole process group (DataLoader workers too) goes with it.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import gputui
from gputui.jobs.config import DeviceQuery, Portable
from gputui.jobs.events import (
    TERMINAL_TYPES,
    DevicesListed,
    EpochFinished,
    Error,
    Event,
    Finished,
    RunStarted,
    parse_event,
)
from gputui.jobs.folders import EVENTS_FILE

log = logging.getLogger(__name__)

GROUP_GONE_S = 1.0
"""The most :meth:`ChildProcess.stop` waits for the killed group's processes to be gone."""
DEFAULT_GRACE_S = 3.0
"""Seconds between SIGTERM and SIGKILL when stopping."""
KILL_WAIT_S = 2.0
"""How long :func:`run_to_end` waits for a child it killed to be reaped."""
STDERR_TAIL_LINES = 60
READER_JOIN_S = 2.0
ENGINE = "gputui.engine"
"""The child's module, run with ``python -m``."""
_POLL_S = 0.1
_live: weakref.WeakSet[ChildProcess] = weakref.WeakSet()


class ChildProcess:
    """One engine child process and the events it streams: ``ChildProcess(config).start()``,
    then :meth:`events` (blocks until the last one), and :meth:`stop` from any thread, at
    any time, as often as wanted."""

    def __init__(
        self,
        config: Portable,
        *,
        grace_s: float = DEFAULT_GRACE_S,
        python: str | Sequence[str] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """Prepare (not start) ``config``'s job (its ``MODE`` picks the engine's mode);
        ``stop()`` waits ``grace_s`` after SIGTERM before SIGKILL.

        Args:
            python: Interpreter for the child, alone or with its flags (``[python, "-S"]``);
                default: this one.
            environ: The child's environment (default: this process's); the ``gputui``
                this process runs from is put first on its path.
        """
        self.config = config
        self.mode = config.MODE
        self.name = config.WHAT
        """What the child is, in its errors: ``trainer``, ``experiment``, ``torch probe``."""
        self.grace_s = grace_s
        self._argv = self._engine_argv(python)
        self._env = child_env(os.environ if environ is None else environ)
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._proc: subprocess.Popen[bytes] | None = None
        self._started = threading.Event()
        self._owner: threading.Thread | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._terminal_seen = False
        self._epochs_seen = 0
        self._stop_requested = False
        self._kill_at: float | None = None
        self._ended = False
        self._run_dir: str | None = None
        self._oom_kills_before: int | None = None
        self.skipped_lines = 0
        """Lines of the child's stdout that were not events this reader knows."""
        self.start_error: str | None = None
        """Why the child could not be started at all (the OS's words), if it could not."""
        self.said_its_end = False
        """Whether the child sent its last event itself (not one that stands in for it)."""

    def _engine_argv(self, python: str | Sequence[str] | None) -> list[str]:
        if python is None or isinstance(python, str):
            python = [python or sys.executable]
        argv = [*python, "-m", ENGINE, self.mode]
        argv += ["--parent-pid", str(os.getpid()), "--watch-stdin"]
        return [*argv, self.config.to_json()]

    # -- public API -------------------------------------------------------------------------

    def start(self) -> ChildProcess:
        """Start the child; returns ``self``. Events then arrive through :meth:`events`."""
        if self._owner is not None:
            raise RuntimeError("this ChildProcess was already started")
        _live.add(self)
        self._owner = threading.Thread(target=self._own, name=f"{self.mode}-owner", daemon=True)
        self._owner.start()
        self._started.wait()
        return self

    def events(self, timeout_s: float | None = None) -> Iterator[Event]:
        """Events in order, until (and including) the last one.

        Raises:
            TimeoutError: when no event came within ``timeout_s`` of the one before (the
                child keeps running).
        """
        while (event := self.next_event(timeout_s)) is not None:
            yield event

    def next_event(self, timeout_s: float | None = None) -> Event | None:
        """The next event, or ``None`` once the stream has ended.

        Raises:
            TimeoutError: when no event came within ``timeout_s``.
        """
        if self._ended:
            return None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
            try:
                item = self._queue.get(timeout=max(wait, 0.0))
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"no {self.name} event within {timeout_s} s") from None
                continue  # short waits keep Ctrl+C responsive in the main thread
            if item is None:
                self._ended = True
            return item

    def drain(self) -> list[Event]:
        """Every event already received, without waiting (for a UI timer)."""
        found: list[Event] = []
        while not self._ended:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self._ended = True
            else:
                found.append(item)
        return found

    def stop(self, *, wait: bool = True) -> None:
        """Stop the run: SIGTERM now, SIGKILL to the whole group after ``grace_s``; with
        ``wait``, block until the child and its workers are gone (about ``grace_s`` plus a
        second at most). Idempotent, and harmless after the child has ended."""
        self._stop_requested = True
        proc = self._proc
        if proc is not None and not _exited(proc):  # not reaped yet: the pid is still ours
            if self._kill_at is None:
                self._kill_at = time.monotonic() + self.grace_s
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        if wait and self._owner is not None and self._owner is not threading.current_thread():
            self._owner.join()

    def kill(self, *, wait_s: float | None = None) -> None:
        """SIGKILL the child's whole process group now (a job hung in a driver call), and
        wait ``wait_s`` at most (``None``: as long as it takes) for it to be reaped: a
        process stuck in the driver may not die at once."""
        self._stop_requested = True
        self._kill_at = time.monotonic()  # the owner thread kills: it alone reaps the child
        if self._owner is not None and self._owner is not threading.current_thread():
            self._owner.join(wait_s)

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Wait for the child (and its cleanup) to end; returns its exit code, or ``None``."""
        if self._owner is not None:
            self._owner.join(timeout_s)
        return self.returncode if self._owner is None or not self._owner.is_alive() else None

    @property
    def pid(self) -> int | None:
        """The child's process id (also its process group id)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        """The child's exit code (negative: killed by that signal); ``None`` while it runs."""
        return self._proc.returncode if self._proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the child process is still alive."""
        return self._proc is not None and not _exited(self._proc)

    @property
    def stderr_tail(self) -> str:
        """The last lines the child wrote to standard error."""
        return "\n".join(self._stderr)

    def __enter__(self) -> ChildProcess:
        return self if self._owner is not None else self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- the owner thread -------------------------------------------------------------------

    def _own(self) -> None:
        """Start the child, wait for it, clean up its group, close the stream.

        The owner thread lives exactly as long as the child because Linux ties the child's
        ``PR_SET_PDEATHSIG`` to the thread that started it, not to this process.
        """
        self._oom_kills_before = oom_kills()
        try:
            proc = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=self._env,
            )
        except OSError as exc:
            self.start_error = str(exc)
            message = f"could not start the {self.name}: {exc}"
            self._finish_stream(Error(message=message, kind="crash"))
            self._started.set()
            return
        self._proc = proc
        self._started.set()
        readers = [
            threading.Thread(target=self._read_stdout, args=(proc,), daemon=True),
            threading.Thread(target=self._read_stderr, args=(proc,), daemon=True),
        ]
        for reader in readers:
            reader.start()
        while not _exited(proc):
            if self._kill_at is not None and time.monotonic() >= self._kill_at:
                _kill_group(proc.pid)
            time.sleep(_POLL_S)
        # The child is a zombie, not yet reaped, so its process group id cannot have been
        # reused: kill whatever it left behind (DataLoader workers), then reap it.
        _kill_group(proc.pid)
        proc.wait()
        _wait_group_gone(proc.pid, GROUP_GONE_S)
        for reader in readers:
            reader.join(READER_JOIN_S)
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        _live.discard(self)
        if self._terminal_seen:
            self._finish_stream(None)
            return
        last = self._missing_end(proc.returncode)
        if self._run_dir is not None:
            close_record(Path(self._run_dir), last)
        self._finish_stream(last)

    def _read_stdout(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = parse_event(line)
            if event is None:
                if line.strip():
                    self.skipped_lines += 1
                continue
            if self._terminal_seen:
                log.debug("ignored an event after the last one: %s", type(event).__name__)
                continue
            if isinstance(event, EpochFinished):
                self._epochs_seen += 1
            if isinstance(event, RunStarted) and event.run_dir:
                self._run_dir = event.run_dir
            if isinstance(event, TERMINAL_TYPES):
                self._terminal_seen = self.said_its_end = True
            self._queue.put(event)

    def _read_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self._stderr.append(line.decode("utf-8", "replace").rstrip())

    def _missing_end(self, returncode: int | None) -> Event:
        """The event that stands in for a child that ended without saying how."""
        if self._stop_requested:
            return Finished(epochs_completed=self._epochs_seen, stopped=True)
        detail = self.stderr_tail
        if returncode is not None and returncode < 0:
            name = _signal_name(-returncode)
            hint = ""
            if -returncode == signal.SIGKILL:
                hint = _sigkill_hint(self._oom_kills_before, oom_kills())
            return Error(
                message=f"the {self.name} was killed by {name}{hint}", detail=detail, kind="killed"
            )
        last = detail.strip().splitlines()[-1] if detail.strip() else ""
        why = f": {last}" if last else ""
        return Error(
            message=f"the {self.name} exited with code {returncode} without a result{why}"[:300],
            detail=detail,
            kind="crash",
        )

    def _finish_stream(self, last: Event | None) -> None:
        if last is not None:
            self._terminal_seen = True
            self._queue.put(last)
        self._queue.put(None)


@dataclass(frozen=True)
class Outcome:
    """How a job that was waited for ended: what it said, and how it went."""

    events: tuple[Event, ...]
    """Every event, in order; the last one ends the stream unless the job timed out."""
    timed_out: bool
    """True when it was killed for taking longer than its time."""
    start_error: str | None
    """Why the child could not be started at all (the OS's words); ``None`` when it was."""
    said_its_end: bool
    """Whether the child sent its last event itself; else the last one stands in for it
    (it crashed, was killed, or exited without saying how)."""
    returncode: int | None
    """The child's exit code (negative: killed by that signal)."""
    stderr_tail: str
    """The last lines the child wrote to standard error."""
    time_limit_s: float = 0.0
    """The time limit it ran under at the end (an event may have changed it)."""

    @property
    def last(self) -> Event | None:
        """The event that ended the stream (``Finished``, ``Error``...), if one did."""
        if self.timed_out or not self.events:
            return None
        return self.events[-1] if isinstance(self.events[-1], TERMINAL_TYPES) else None


def run_to_end(
    config: Portable,
    *,
    timeout_s: float,
    python: str | Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    time_limit_for: Callable[[Event], float | None] | None = None,
) -> Outcome:
    """Run a job and wait for it, for ``timeout_s`` at the most; never raises.

    A job that takes longer (a CUDA init hung in the driver) has its whole process
    group killed; what it said before is kept. A process stuck in the driver may not
    die at once: it is left behind rather than waited for.

    ``python`` and ``environ`` are as :class:`ChildProcess` takes them; ``time_limit_for``
    gives the new limit (seconds from the start) an event sets, or ``None`` to keep the one
    there is: the probe's grows with the GPUs it reports.
    """
    started = time.monotonic()
    limit_s = timeout_s
    child = ChildProcess(config, python=python, environ=environ).start()
    events: list[Event] = []
    timed_out = False
    try:
        while (
            event := child.next_event(max(started + limit_s - time.monotonic(), 0.0))
        ) is not None:
            events.append(event)
            if time_limit_for is not None and (new_limit_s := time_limit_for(event)) is not None:
                limit_s = new_limit_s
    except TimeoutError:
        timed_out = True
        child.kill(wait_s=KILL_WAIT_S)
        events += [event for event in child.drain() if not isinstance(event, TERMINAL_TYPES)]
    return Outcome(
        events=tuple(events),
        timed_out=timed_out,
        start_error=child.start_error,
        said_its_end=child.said_its_end,
        returncode=child.returncode,
        stderr_tail=child.stderr_tail,
        time_limit_s=limit_s,
    )


def list_devices(
    query: DeviceQuery | None = None, timeout_s: float = 120.0
) -> DevicesListed | Error:
    """Every candidate device with its usable flag and reason, asked of the engine's
    ``devices`` mode in a child (the UI and commands never import torch): ``DevicesListed``,
    or an ``Error`` when the child failed or timed out, or (kind ``device``) when a device
    ``query`` checks cannot be used."""
    outcome = run_to_end(query or DeviceQuery(), timeout_s=timeout_s)
    if outcome.timed_out:
        return Error(message=f"listing devices took more than {timeout_s:g} s", kind="crash")
    last = outcome.last
    if isinstance(last, DevicesListed | Error):
        return last
    return Error(message="the device listing ended without listing devices", kind="crash")


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ``, with the ``gputui`` we run from first on the child's path."""
    env = dict(environ)
    root = str(Path(gputui.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the child has exited, without reaping it where the OS allows."""
    if proc.returncode is not None:
        return True
    if hasattr(os, "waitid"):
        with contextlib.suppress(ChildProcessError):
            return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    return proc.poll() is not None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    """Wait until nothing is left of the group just killed: SIGKILL is taken when a process
    next runs, and a loaded machine's ranks still ran after their job's end had been told."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.01)


def oom_kills(vmstat: Path = Path("/proc/vmstat")) -> int | None:
    """How many processes the kernel's out-of-memory killer has ended since boot (its
    ``oom_kill`` count, a cgroup's limit included); ``None`` where it cannot be read."""
    try:
        text = vmstat.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def _sigkill_hint(before: int | None, after: int | None) -> str:
    """Why a child got SIGKILL, as far as the kernel's out-of-memory count tells."""
    if before is None or after is None:
        return " (by a process, or by the OOM killer)"
    if after > before:
        return " (by the OOM killer: out of memory)"
    return " (not by the OOM killer)"


def close_record(run_dir: Path, last: Event) -> None:
    """Write ``last`` at the end of ``run_dir``'s events, for a trainer that could not (it
    was killed); a line the kill cut off is ended first. Never raises: a record that cannot
    be closed is logged."""
    path = run_dir / EVENTS_FILE
    if not path.is_file():
        return
    try:
        with path.open("a+b") as file:
            if file.seek(0, os.SEEK_END):
                file.seek(-1, os.SEEK_END)
                if file.read(1) != b"\n":
                    file.write(b"\n")
            file.write(last.to_json().encode() + b"\n")
    except OSError as exc:
        log.warning("could not close the record in %s: %s", run_dir, exc)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@atexit.register
def _kill_live_children() -> None:
    """At interpreter exit, kill every child still running, with its group."""
    for child in list(_live):
        if child.pid is not None and child.running:
            _kill_group(child.pid)
