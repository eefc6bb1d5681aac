"""The engine's child process: ``python -m gputui.engine MODE [--parent-pid PID]
[--watch-stdin] CONFIG_JSON``, one mode per config type (:data:`CONFIGS`).

Events go to the real standard output, a JSON line each; anything else printed goes to
standard error, so the stream stays clean. Whatever happens, the last event says how the
job ended: a crash becomes an ``Error`` with its traceback.
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType

from gputui.device import DeviceError
from gputui.engine.lifecycle import (
    EventStream,
    die_with_parent,
    exit_now,
    install_stop_signals,
    keep_freed_memory,
    lower_priority,
    start_parent_watchdog,
)
from gputui.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from gputui.jobs.config import (
    ConfigError,
    DeviceQuery,
    ExperimentConfig,
    JobConfig,
    Portable,
    ProbeConfig,
    RunConfig,
    ScaleConfig,
    default_threads,
)
from gputui.jobs.events import DevicesListed, Emit, Error

CONFIGS: dict[str, type[Portable]] = {
    config.MODE: config
    for config in (RunConfig, ScaleConfig, ExperimentConfig, ProbeConfig, DeviceQuery)
}
"""Each mode's config type."""
USAGE = (
    "usage: python -m gputui.engine {train,scale,experiment,probe,devices} [--parent-pid PID] "
    "[--watch-stdin] [CONFIG_JSON]"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one job; returns the process's exit code."""
    keep_freed_memory()  # before torch allocates anything
    stream = EventStream.take_stdout()
    args = list(sys.argv[1:] if argv is None else argv)
    what = CONFIGS[args[0]].WHAT if args and args[0] in CONFIGS else "engine"
    try:
        return _main(args, stream)
    except BaseException as exc:  # the last resort: never die without saying why
        message = f"the {what} crashed: {type(exc).__name__}: {exc}".splitlines()[0]
        stream.emit(Error(message=message, detail=traceback.format_exc(), kind="crash"))
        return EXIT_FAILED


def _main(args: list[str], stream: EventStream) -> int:
    mode = args.pop(0) if args else None
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
            return _usage(stream, f"bad engine argument {arg!r}")
    config_type = CONFIGS.get(mode or "")
    if config_type is None:
        return _usage(stream, f"unknown engine mode {mode!r}")
    if payload is None:
        return _usage(stream, f"no {config_type.NAME} given")
    if parent_pid is not None:
        die_with_parent(parent_pid)
    if watch_stdin:
        start_parent_watchdog(parent_pid if parent_pid is not None else os.getppid())
    try:
        config = config_type.from_json(payload)
        config.validate()
    except ConfigError as exc:
        stream.emit(Error(message=str(exc), kind="config"))
        return EXIT_USAGE
    # Probing and listing never poll a stop flag: a signal ends them at once, as by default.
    if isinstance(config, ProbeConfig):  # it imports torch itself, to report a failed import
        # each mode loads only its own modules (torch's parts among them)
        from gputui.engine.probe import run_probe

        run_probe(config, stream.emit)
        return EXIT_OK
    if isinstance(config, DeviceQuery):
        return _list_devices(config, stream.emit)
    assert isinstance(config, JobConfig)
    stop = install_stop_signals()
    lower_priority(config.nice)
    if isinstance(config, ScaleConfig):  # the ranks import torch; this process launches them
        # (as above)
        from gputui.engine.scale import run_scale

        return run_scale(config, stream.emit, stop.is_set)
    torch = _import_torch()
    if not isinstance(config, RunConfig) or config.device.kind == "cpu":
        # A GPU run keeps torch's own host threads unless told; CPU work takes what it asks.
        torch.set_num_threads(config.threads or default_threads())
    elif config.threads is not None:
        torch.set_num_threads(config.threads)
    run: Callable[..., int]  # each mode's module loads torch: imported once it is wanted
    if isinstance(config, RunConfig):
        # (as above)
        from gputui.engine.trainer import run_training as run
    else:
        # (as above)
        from gputui.engine.experiments import run_experiment as run
    return run(config, stream.emit, stop.is_set)


def _usage(stream: EventStream, message: str) -> int:
    stream.emit(Error(message=f"{message}; {USAGE}", kind="config"))
    return EXIT_USAGE


def _import_torch() -> ModuleType:
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy
    import torch  # after keep_freed_memory (see main) and this filter

    return torch


def _list_devices(query: DeviceQuery, emit: Emit) -> int:
    torch = _import_torch()
    from gputui.engine.devices import chosen_devices, device_options, torch_build  # torch's

    try:
        chosen = chosen_devices(query.check)
    except DeviceError as exc:
        emit(Error(message=str(exc), kind="device"))
        return EXIT_USAGE
    emit(
        DevicesListed(
            devices=tuple(device_options()),
            torch_version=torch.__version__,
            chosen=chosen,
            cuda_version=torch.version.cuda,
            torch_build=torch_build(),
        )
    )
    return EXIT_OK


if __name__ == "__main__":
    exit_now(main())
