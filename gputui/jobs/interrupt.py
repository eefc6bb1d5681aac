"""Ctrl+C during ``gputui bench`` or ``gputui experiment``: stop the job, keep what finished
(a second Ctrl+C kills it); and a rank whose torchrun agent died: stop it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping
from types import FrameType
from typing import Any

from gputui.jobs.process import ChildProcess


class CtrlC:
    """SIGINT, caught for the length of a ``with`` block, as a request to stop a child: the
    first asks it to stop after its current step (it then says what it finished, and its
    run folder is complete), a second kills it."""

    def __init__(self) -> None:
        self.pressed = 0
        """How many times Ctrl+C came so far."""
        self._child: ChildProcess | None = None
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> CtrlC:
        try:
            if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # `gputui bench &`
                self._previous = signal.signal(signal.SIGINT, self._on_sigint)
                self._installed = True
        except ValueError:  # not the main thread: Ctrl+C stays a KeyboardInterrupt
            pass
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def watch(self, child: ChildProcess) -> ChildProcess:
        """Make ``child`` the one Ctrl+C stops (at once, if Ctrl+C already came); returns it."""
        self._child = child
        if self.pressed:
            child.stop(wait=False)
        return child

    def _on_sigint(self, _signum: int, _frame: FrameType | None) -> None:
        self.pressed += 1
        child = self._child
        if child is None:
            return
        if self.pressed == 1:
            child.stop(wait=False)  # after its current step; it then says what it finished
        else:
            child.kill(wait_s=0)


AGENT_POLL_S = 0.5
"""How often :class:`AgentWatch` asks whether the launcher is still this process's parent."""
TORCHRUN_VARIABLE = "TORCHELASTIC_RUN_ID"
"""Set by torchrun's agent in every worker's environment: the agent started this process."""


class AgentWatch:
    """The launcher that started this process (torchrun's agent), watched for a ``with``
    block: once it is gone, the watched child is stopped.

    torchrun starts each worker in a session of its own, so when its agent is SIGKILLed
    no signal reaches the workers: a rank would train on as an orphan, holding its device.
    The kernel gives an orphan another parent (init, or a subreaper), so a parent pid that
    is no longer the agent's says the agent is gone.
    """

    def __init__(self, agent_pid: int | None = None, poll_s: float = AGENT_POLL_S) -> None:
        """Watch ``agent_pid`` (default: this process's parent now) every ``poll_s``."""
        self.agent_pid = os.getppid() if agent_pid is None else agent_pid
        """The launcher's pid."""
        self.gone = False
        """Whether the launcher went away while the block ran."""
        self._poll_s = poll_s
        self._child: ChildProcess | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="agent-watch", daemon=True)

    @staticmethod
    def wanted(environ: Mapping[str, str]) -> bool:
        """Whether this process is a worker torchrun's agent started (its variables say so):
        a rank started by hand, whose shell may end before it, is not watched."""
        return TORCHRUN_VARIABLE in environ

    def __enter__(self) -> AgentWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        self._thread.join()
        # once more: the run may have ended of the agent's death before a poll saw it (a
        # rank whose peer stopped first loses its peers before its own poll comes round)
        self.gone = self.gone or os.getppid() != self.agent_pid

    def watch(self, child: ChildProcess) -> ChildProcess:
        """Make ``child`` the one to stop when the agent goes (at once, if it went); returns it."""
        self._child = child
        if self.gone:
            child.stop(wait=False)
        return child

    def _watch(self) -> None:
        while not self._done.wait(self._poll_s):
            if os.getppid() != self.agent_pid:
                self.gone = True
                if self._child is not None:
                    self._child.stop(wait=False)  # SIGTERM; SIGKILL to its group after grace
                return
