"""The parent's handle on an experiment child: :class:`ExperimentProcess`.

Torch-free. It is :class:`gputui.training.runner.TrainerProcess` (start, events,
stop, drain, the same guarantees: the stream ends with exactly one ``Finished``
or ``Error``, the child and its DataLoader workers are killed on stop and die
with this process), pointed at the experiment child and its event types.

``TrainerProcess`` hard-codes the child module and the event parser, so two of
its private methods are overridden here, each a copy with one line changed
(marked). A ``module=`` and ``parse=`` argument on ``TrainerProcess`` would let
both overrides go.

Typical use, from a UI thread worker::

    process = ExperimentProcess(ExperimentConfig("batch-sweep", devices=("cuda:0",))).start()
    result = ExperimentResult("batch-sweep")
    for event in process.events():      # rows arrive as each measurement ends
        result.absorb(event)
        post(event)
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time

from gputui.training.events import EpochFinished, Error
from gputui.training.experiments.child import MODULE
from gputui.training.experiments.events import parse_experiment_event
from gputui.training.experiments.spec import ExperimentConfig
from gputui.training.runner import (
    _POLL_S,
    _TERMINAL,
    DEFAULT_GRACE_S,
    READER_JOIN_S,
    TrainerProcess,
    _child_env,
    _exited,
    _kill_group,
    _live,
    log,
)


class ExperimentProcess(TrainerProcess):
    """One experiment child process and the events it streams."""

    def __init__(
        self,
        config: ExperimentConfig,
        *,
        grace_s: float = DEFAULT_GRACE_S,
        python: str | None = None,
    ) -> None:
        """Prepare (not start) an experiment.

        Args:
            config: The experiment.
            grace_s: Seconds ``stop()`` waits after SIGTERM before SIGKILL.
            python: Interpreter for the child (default: this one).
        """
        super().__init__(None, grace_s=grace_s, python=python, child_args=[config.to_json()])
        self.experiment = config
        """The experiment this process runs."""

    def _own(self) -> None:
        """``TrainerProcess._own`` with the experiment child's module."""
        try:
            proc = subprocess.Popen(
                [
                    self._python,
                    "-m",
                    MODULE,  # changed: the trainer's is gputui.training.child
                    "--parent-pid",
                    str(os.getpid()),
                    "--watch-stdin",
                    *self._child_args,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=_child_env(),
            )
        except OSError as exc:
            message = f"could not start the experiment: {exc}"
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
        _kill_group(proc.pid)  # the zombie's group id is still ours: end its workers
        proc.wait()
        for reader in readers:
            reader.join(READER_JOIN_S)
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        _live.discard(self)
        self._finish_stream(None if self._terminal_seen else self._missing_end(proc.returncode))

    def _read_stdout(self, proc: subprocess.Popen[bytes]) -> None:
        """``TrainerProcess._read_stdout`` with the experiment events' parser."""
        assert proc.stdout is not None
        for line in proc.stdout:
            event = parse_experiment_event(line)  # changed: the trainer's is parse_event
            if event is None:
                if line.strip():
                    self.skipped_lines += 1
                continue
            if self._terminal_seen:
                log.debug("ignored an event after the last one: %s", type(event).__name__)
                continue
            if isinstance(event, EpochFinished):
                self._epochs_seen += 1
            if isinstance(event, _TERMINAL):
                self._terminal_seen = True
            self._queue.put(event)
