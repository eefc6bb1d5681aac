"""``gputui scale``'s child: one world size, launched with torch's own launcher.

This process (``python -m gputui.engine scale CONFIG``) starts ``world_size`` ranks
with ``torch.multiprocessing.start_processes``: each sets the variables torchrun
would set (``RANK``, ``MASTER_PORT``...) and trains exactly as ``gputui bench`` under
torchrun does (:func:`gputui.engine.trainer.run_training`). torch's process context
watches them: when one rank fails it ends the others. On Linux, CPU ranks are forked from
this process, which has imported torch and the trainer by then (each spawned rank would
import them again: about 3 CPU-seconds); GPU ranks are spawned, as CUDA requires.

Rank 0's events are passed on as they come; the other ranks send only how they ended.
The last event is decided once every rank is gone, so that it names the rank that
failed first (one killed by a signal, or one with an error of its own) rather than the
ranks that only lost it.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

from gputui.engine.lifecycle import (
    die_with_parent,
    install_stop_signals,
    keep_freed_memory,
)
from gputui.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from gputui.jobs.config import ConfigError, RunConfig, ScaleConfig, default_threads
from gputui.jobs.events import (
    TERMINAL_TYPES,
    Emit,
    EpochFinished,
    Error,
    Event,
    Finished,
    RanksStarted,
    parse_event,
)
from gputui.jobs.world import World, backend_for

LOOPBACK = "127.0.0.1"
_POLL_S = 0.05


def run_scale(config: ScaleConfig, emit: Emit, should_stop: Callable[[], bool]) -> int:
    """Train ``config.world_size`` ranks together; returns 0, 1 (failed) or 2 (usage error)."""
    # torch is loaded here, not at import: job_end and rank_config need none of it
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException, start_processes

    # (with torch.distributed: only for a scaling job)
    from gputui.engine.distributed import xccl_available

    try:  # refused here, once, rather than by every rank it would start
        backend_for(config.device.kind, xccl_available=xccl_available())
    except ConfigError as exc:
        emit(Error(message=str(exc), kind="config"))
        return EXIT_USAGE
    ranks = config.world_size
    run = rank_config(config)
    method = start_method(config.device.kind)
    if method == "fork":  # what every rank loads, loaded once
        import gputui.engine.trainer  # noqa: F401
    mailbox: Any = mp.get_context(method).Queue()
    context = start_processes(  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        _rank_main,
        args=(run.to_json(), mailbox, os.getpid(), _free_port(), ranks),
        nprocs=ranks,
        join=False,
        start_method=method,
    )
    emit(RanksStarted(pids=tuple(context.pids())))
    ends: dict[int, Event] = {}
    epochs = 0

    def take(wait_s: float = 0.0) -> None:
        """Keep each rank's last event, and pass rank 0's others on."""
        nonlocal epochs
        for rank, event in _received(mailbox, wait_s):
            if isinstance(event, TERMINAL_TYPES):
                ends[rank] = event
            elif rank == 0:
                epochs += isinstance(event, EpochFinished)
                emit(event)

    stopping = done = False
    first_failed: int | None = None
    while not done:
        take()
        if should_stop() and not stopping:
            stopping = True
            for process in context.processes:  # each rank stops after its step
                if process.is_alive():
                    process.terminate()
        try:
            done = context.join(timeout=_POLL_S)
        except ProcessException as failed:  # a rank failed; torch has ended the others
            first_failed = failed.error_index
            done = True
    for process in context.processes:
        process.join()
    take(wait_s=0.5)  # what came after the last poll
    exit_codes = [process.exitcode for process in context.processes]
    last = job_end(ends, exit_codes, stopped=stopping, epochs=epochs, first_failed=first_failed)
    emit(last)
    if isinstance(last, Finished):
        return EXIT_OK
    return EXIT_USAGE if last.kind in {"config", "device"} else EXIT_FAILED


def start_method(kind: str) -> str:
    """How the ranks start: forked on a Linux CPU (this process has run no torch op, so no
    thread pool or device is copied into a rank, and each rank sets its own signal handlers
    first); spawned on a GPU, whose runtime cannot be forked, and on macOS, whose system
    libraries are not safe to fork."""
    return "fork" if kind == "cpu" and sys.platform.startswith("linux") else "spawn"


def rank_config(config: ScaleConfig) -> RunConfig:
    """What each rank trains: the config without its world size, the machine's cores shared
    out between the ranks unless ``threads`` says otherwise."""
    fields = {spec.name: getattr(config, spec.name) for spec in dataclasses.fields(RunConfig)}
    if fields["threads"] is None and config.device.kind == "cpu":
        fields["threads"] = max(1, default_threads() // config.world_size)
    return RunConfig(**fields)


def job_end(
    ends: dict[int, Event],
    exit_codes: Sequence[int | None],
    *,
    stopped: bool,
    epochs: int,
    first_failed: int | None = None,
) -> Finished | Error:
    """The job's last event, from how each rank ended.

    A stopped job ends as rank 0 said (or stopped, when it could not say). A job where
    every rank exited 0 ends with rank 0's ``Finished``. Otherwise the first cause is
    named: a rank killed by a signal, else a rank's own error (not one that only lost a
    peer), else a rank that exited without saying why, else rank 0's error. Among ranks
    killed by a signal, ``first_failed`` (the one torch saw fail first) comes first: torch
    kills the others with SIGKILL when they do not end in time.
    """
    first = ends.get(0)
    if stopped:
        if isinstance(first, Finished):
            return first
        return Finished(epochs_completed=epochs, stopped=True)
    if all(code == 0 for code in exit_codes) and isinstance(first, Finished):
        return first
    ranks = len(exit_codes)
    for rank in sorted(range(ranks), key=lambda rank: rank != first_failed):
        code = exit_codes[rank]
        if code is not None and code < 0:
            return Error(
                message=f"rank {rank} of {ranks} was killed by {_signal_name(-code)}; "
                "the other ranks were ended",
                detail=_details(ends),
                kind="rank",
            )
    for rank, end in sorted(ends.items()):
        if isinstance(end, Error) and end.kind != "peer":
            if rank == 0:
                return end
            return dataclasses.replace(end, message=f"rank {rank} of {ranks}: {end.message}")
    for rank, code in enumerate(exit_codes):
        if code and rank not in ends:
            return Error(
                message=f"rank {rank} of {ranks} exited with code {code} without a result",
                detail=_details(ends),
                kind="rank",
            )
    if isinstance(first, Error):
        return first
    return Error(message="the scaling job ended without a result", kind="crash")


def _rank_main(
    index: int, config_json: str, mailbox: Any, agent_pid: int, port: int, ranks: int
) -> None:
    """One rank, in a process of its own: train, then exit with the run's code. It runs at
    the launcher's priority, which ``config.nice`` has set already."""
    stop = install_stop_signals()  # first: a forked rank has the launcher's until now
    keep_freed_memory()
    die_with_parent(agent_pid)
    world = World.one_machine(index, ranks, LOOPBACK, port)
    os.environ.update(world.environ())
    config = RunConfig.from_json(config_json)
    import torch  # (loaded already: by the launcher when forked, by torch's spawn otherwise)

    if config.threads is not None:
        torch.set_num_threads(config.threads)
    # loaded by the launcher when forked; a spawned rank loads it here
    from gputui.engine.trainer import run_training

    def send(event: Event) -> None:
        if index == 0 or isinstance(event, TERMINAL_TYPES):
            mailbox.put((index, event.to_json()))

    raise SystemExit(run_training(config, send, stop.is_set))


def _received(mailbox: Any, wait_s: float = 0.0) -> list[tuple[int, Event]]:
    """Every (rank, event) in the mailbox now (after waiting up to ``wait_s`` for the first)."""
    found: list[tuple[int, Event]] = []
    timeout = wait_s
    while True:
        try:
            rank, line = mailbox.get(timeout=timeout) if timeout else mailbox.get_nowait()
        except (queue.Empty, OSError, EOFError, ValueError):
            return found
        timeout = 0.0
        event = parse_event(line)
        if event is not None:
            found.append((rank, event))


def _details(ends: dict[int, Event]) -> str:
    errors = sorted((rank, end) for rank, end in ends.items() if isinstance(end, Error))
    return "\n".join(f"rank {rank}: {end.message}" for rank, end in errors)


def _free_port() -> int:
    """A loopback port free now, for rank 0's store (torchrun's standalone mode does the same)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
