"""The experiment child process: ``python -m gputui.training.experiments.child``.

Usage::

    python -m gputui.training.experiments.child [--parent-pid PID] [--watch-stdin] CONFIG_JSON

``CONFIG_JSON`` is :meth:`ExperimentConfig.to_json`'s output. Events go to standard
output as JSON lines (:mod:`gputui.training.experiments.events`), everything else
to standard error. It stays safe beside a UI exactly as the trainer's child does,
with the same helpers (:mod:`gputui.training.child`): the first SIGTERM, SIGHUP or
SIGINT stops the run after the current step, a second exits at once; it dies with
its parent (``PR_SET_PDEATHSIG`` and a standard-input watchdog); it lowers its
priority by ``nice`` and uses ``threads`` torch threads (default: every core).
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings
from collections.abc import Sequence

from gputui.training.child import (
    EventStream,
    die_with_parent,
    install_stop_signals,
    lower_priority,
    start_parent_watchdog,
)
from gputui.training.config import ConfigError, available_cores
from gputui.training.events import Error
from gputui.training.experiments.spec import ExperimentConfig

EXIT_USAGE = 2
MODULE = "gputui.training.experiments.child"
"""What ``python -m`` runs."""
USAGE = f"usage: python -m {MODULE} [--parent-pid PID] [--watch-stdin] CONFIG_JSON"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the child; returns its exit code."""
    stream = EventStream.take_stdout()
    try:
        return _main(list(sys.argv[1:] if argv is None else argv), stream)
    except BaseException as exc:  # the last resort: never die without saying why
        stream.emit(
            Error(
                message=f"the experiment crashed: {type(exc).__name__}: {exc}".splitlines()[0],
                detail=traceback.format_exc(),
                kind="crash",
            )
        )
        return 1


def _main(args: list[str], stream: EventStream) -> int:
    parent_pid: int | None = None
    watch_stdin = False
    payload: str | None = None
    while args:
        arg = args.pop(0)
        if arg == "--parent-pid" and args and args[0].isdigit():
            parent_pid = int(args.pop(0))
        elif arg == "--watch-stdin":
            watch_stdin = True
        elif payload is None and not arg.startswith("--"):
            payload = arg
        else:
            stream.emit(Error(message=f"bad experiment argument {arg!r}; {USAGE}", kind="config"))
            return EXIT_USAGE
    if parent_pid is not None:
        die_with_parent(parent_pid)
    if watch_stdin:
        start_parent_watchdog(parent_pid if parent_pid is not None else os.getppid())
    stop = install_stop_signals()
    if payload is None:
        stream.emit(Error(message=f"no experiment config given; {USAGE}", kind="config"))
        return EXIT_USAGE
    try:
        config = ExperimentConfig.from_json(payload)
        config.validate()
    except ConfigError as exc:
        stream.emit(Error(message=str(exc), kind="config"))
        return EXIT_USAGE
    lower_priority(config.nice)
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy
    import torch

    from gputui.training.experiments.measure import run_experiment

    torch.set_num_threads(config.threads or available_cores())
    return run_experiment(config, stream.emit, stop.is_set)


if __name__ == "__main__":
    raise SystemExit(main())
