"""The ``gputui`` command and its subcommands: argparse only, above every other layer.

Every usage error is one line on stderr and exit code 2; nothing here prints a
traceback for bad input. Heavy imports (Textual, the samplers, the jobs) are
made inside the handlers, so ``gputui --help`` is instant and the UI process
never imports torch. Each subcommand lives in a module of its own
(:data:`SUBCOMMANDS`); what they share is :mod:`gputui.commands.args`.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import gc
import importlib
import os
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from gputui import __version__
from gputui.commands.args import (
    OneLineParser,
    chosen_parser,
    examples,
    gpu_selection,
    interval_seconds,
    new_file,
    recorded_time,
    recording_file,
    usage_error,
)
from gputui.commands.fleet import (
    add_fleet_arguments,
    add_snapshot_fleet_arguments,
    fleet_named,
    run_fleet_app,
)
from gputui.commands.output import (
    OutputFailed,
    failed,
    forget_output,
    not_a_terminal,
    write_out,
)
from gputui.exits import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from gputui.format import ellipsize, one_line
from gputui.jobs.config import ConfigError, DeviceQuery

if TYPE_CHECKING:  # the runner's and the recorder's modules load only where the app starts
    from gputui.jobs.runner import RunnerSetup
    from gputui.recording.recorder import Recorder
    from gputui.telemetry.selection import GpuSelection

SUBCOMMANDS = {
    "bench": ("gputui.commands.bench", "add_bench_command"),
    "experiment": ("gputui.commands.experiment", "add_experiment_command"),
    "scale": ("gputui.commands.scale", "add_scale_command"),
    "doctor": ("gputui.commands.doctor", "add_doctor_command"),
    "serve": ("gputui.commands.serve", "add_serve_command"),
    "record": ("gputui.commands.record", "add_record_command"),
    "replay": ("gputui.commands.replay", "add_replay_command"),
    "topo": ("gputui.commands.topo", "add_topo_command"),
}
"""The subcommands defined in their own modules (torch-free; the engines load in the
handlers): the module, and its function that adds the subcommand to the parser."""


def build_parser(wanted: Collection[str] | None = None) -> OneLineParser:
    """The whole command line, subcommands included.

    Args:
        wanted: The :data:`SUBCOMMANDS` whose flags to define (default: all). The
            others are only named, so that ``gputui`` alone does not import their
            modules; see :func:`commands_named`.
    """
    parser = OneLineParser(
        prog="gputui",
        description=(
            "What compute is here, can PyTorch use it, and how much faster is it? With no "
            "command, gputui opens the live monitor in the terminal: the CPU, memory and every "
            "GPU (NVIDIA through its driver's NVML library, AMD and Intel through sysfs, and "
            "Apple's MPS) with utilization, memory, temperature, power, clocks and each GPU's "
            "processes, read every --interval "
            "seconds; it also trains and compares devices (r, c), runs the experiments (x) and "
            "the doctor (d), and sorts, filters and ends GPU processes (o, /, k); q quits. "
            "With --hosts, --hostfile or --prometheus it opens the fleet view instead: a line "
            "per GPU of many hosts, read from their exporters. "
            "The commands print once and exit; each has a --help with examples."
        ),
        epilog=examples(
            ("gputui", "the live monitor (q quits)"),
            ("gputui snapshot --json", "the same readings once, as JSON, for scripts"),
            ("gputui doctor --quick", "can PyTorch use the GPUs here? If not, why not?"),
        ),
    )
    parser.add_argument("--version", action="version", version=f"gputui {__version__}")
    parser.add_argument(
        "--interval",
        type=interval_seconds,
        default=1.0,
        metavar="SECONDS",
        help="seconds between the monitor's readings, 0.25 to 60 (default: 1)",
    )
    parser.add_argument(
        "--readonly",
        action="store_true",
        help=(
            f"never send a signal: the monitor's k, K and i (signal a GPU process) only say it is "
            f"read-only (as does {READONLY_ENV}=1)"
        ),
    )
    parser.add_argument(
        "--only",
        type=gpu_selection,
        metavar="GPUS",
        help="show only these GPUs, by NVML index (nvidia-smi's numbers) or UUID, e.g. 0,2 "
        "(default: every GPU)",
    )
    parser.add_argument(
        "--record",
        type=new_file,
        metavar="FILE",
        help="record what the monitor shows into FILE, a new file, as `gputui record` writes "
        "(.zst zstd, .gz gzip, .ndjson none); replay it with `gputui replay FILE`",
    )
    add_fleet_arguments(parser, dest_prefix="app_")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    snapshot = commands.add_parser(
        "snapshot",
        help="print the monitor's readings once, as a table or JSON",
        description=(
            "Print the monitor's readings once and exit, for scripts and logs: the host (CPU, "
            "memory, swap, load) and each GPU's utilization, memory, temperature, power, "
            "clocks, health and processes, as a table that fits the terminal (80 columns at "
            "most), a line a GPU (--compact) or as JSON. With --hosts, --hostfile or "
            "--prometheus it reads those hosts' exporters instead, prints each host and its "
            "GPUs, and exits 1 when a host did not answer. A driver that does not answer "
            "within --timeout gets the same: what answered is printed, each GPU that did not "
            "is marked hung, and the exit code is 1."
        ),
        epilog=examples(
            ("gputui snapshot", "this machine's readings, as a table"),
            ("gputui snapshot --json", "the same, as JSON (gputui serve's /snapshot too)"),
            (
                "gputui snapshot --hosts localhost --timeout 5",
                "the readings of gputui serve running on this machine",
            ),
        ),
    )
    shown = snapshot.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print JSON instead of a table")
    shown.add_argument(
        "--compact",
        action="store_true",
        help="print a line for the host and one a GPU, as --hosts prints them (nvitop -1's "
        "habit), instead of the whole table",
    )
    add_snapshot_fleet_arguments(snapshot)
    snapshot.add_argument(
        "--from",
        dest="from_file",
        type=recording_file,
        metavar="FILE",
        help="print a frame of a recording that gputui record wrote instead of this machine's "
        "readings (JSON: with its time under recorded)",
    )
    snapshot.add_argument(
        "--at",
        type=recorded_time,
        metavar="TIME",
        help="with --from, the frame to print: the last at or before TIME, given as seconds "
        "since the recording started (90), a date and time in ISO 8601 as `date -Iseconds` "
        "prints them (in this machine's time zone unless they name one) or end (default: end)",
    )
    snapshot.set_defaults(handler=_run_snapshot)

    for name, (module, function) in SUBCOMMANDS.items():
        if wanted is None or name in wanted:
            getattr(importlib.import_module(module), function)(commands)
        else:
            commands.add_parser(name)  # never parsed: it is not on the command line

    help_ = commands.add_parser(
        "help",
        help="print gputui's help, or a command's (as --help does)",
        description=(
            "Print the help of gputui, or of the COMMAND named, exactly as --help prints it: "
            "what it does, every flag with its default, and examples to copy. A misspelt "
            "command is named with the one it is closest to."
        ),
        epilog=examples(
            ("gputui help", "gputui's own help: its flags and commands"),
            ("gputui help bench", "the same as gputui bench --help"),
        ),
    )
    help_.add_argument("topic", nargs="?", choices=list(commands.choices), metavar="COMMAND")
    help_.set_defaults(handler=_run_help)
    return parser


def _run_help(args: argparse.Namespace) -> int:
    """``gputui help [COMMAND]``: the help ``--help`` prints."""
    parser = build_parser()
    shown = chosen_parser(parser, argparse.Namespace(command=args.topic))
    write_out(shown.format_help(), end="")
    return EXIT_OK


def commands_named(argv: Sequence[str]) -> set[str] | None:
    """The :data:`SUBCOMMANDS` a command line may use; ``None`` (all) when it asks for help.

    Any word equal to a subcommand's name counts, even a flag's value: defining a
    subcommand that goes unused costs only time.
    """
    if any(word in ("-h", "--help", "help") for word in argv):
        return None
    return {word for word in argv if word in SUBCOMMANDS}


def _run_app(args: argparse.Namespace) -> int:
    try:
        readonly = readonly_wanted(args.readonly, os.environ)
    except ConfigError as exc:
        return usage_error("gputui", str(exc))
    stream = not_a_terminal()
    if stream is not None:  # checked before Textual loads: the answer comes at once
        return usage_error(
            "gputui",
            f"gputui needs a terminal, and its {stream} is not one; "
            f"for scripts use `gputui snapshot{_fleet_flag(args)}`",
        )
    if fleet_named(args, "app_"):
        return run_fleet_app(args)
    try:
        runner = checked_runner_setup(os.environ)
    except ConfigError as exc:
        return usage_error("gputui", str(exc))
    if args.only is not None:  # a GPU not here is refused, not shown as no GPU at all
        from gputui.telemetry.polling import sample_nvml

        # at most a second before the monitor: a hung driver is the monitor's to show
        not_here = args.only.not_here(sample_nvml(timeout_s=1.0))
        if not_here is not None:
            return usage_error("gputui", f"argument --only: {not_here}")
    # Start-up allocates a lot and frees little, so collecting it only delays the first
    # frame. The app turns collection back on once that frame is out.
    recorder = None
    if args.record is not None:
        recorder = _monitor_recorder(args.record, args.interval, args.only)
        if recorder is None:
            return EXIT_USAGE
    gc.disable()
    try:
        from gputui.telemetry.polling import Poller  # no Textual: the first readings start now

        poller = Poller.real(args.interval)
        poller.start()
        from gputui.ui.monitor.app import run_app  # Textual loads while they are taken

        return run_app(
            interval=args.interval,
            poller=poller,
            runner=runner,
            readonly=readonly,
            only=args.only,
            recorder=recorder,
        )
    finally:
        gc.enable()  # in case the app ended before its first frame
        if recorder is not None:
            write_out(one_line(f"gputui: {recorder.close()}"))


def _monitor_recorder(path: Path, interval_s: float, only: GpuSelection | None) -> Recorder | None:
    """The recorder of ``--record``, its file made; ``None`` after one usage line."""
    # the recorder's modules (0.4 s of imports) load only with --record
    from gputui.recording.codec import codec_for_name, zstd_missing
    from gputui.recording.recorder import Recorder
    from gputui.recording.writer import cannot_write

    codec = codec_for_name(path)
    missing = zstd_missing(path, codec)
    if missing is not None:
        usage_error("gputui", missing)
        return None
    try:
        return Recorder(path, interval_s=interval_s, codec=codec, runner=True, only=only)
    except OSError as error:
        usage_error("gputui", cannot_write(error, path))
        return None


def _fleet_flag(args: argparse.Namespace) -> str:
    """The fleet flag the monitor was given, as ``snapshot`` takes it (`` --hosts ...``)."""
    for flag in ("hosts", "hostfile", "prometheus"):
        if getattr(args, f"app_{flag}", None):
            return f" --{flag} ..."
    return ""


READONLY_ENV = "GPUTUI_READONLY"
"""``1``: the monitor never sends a signal, as with ``--readonly``; ``0`` or empty: it may."""


def readonly_wanted(flag: bool, environ: Mapping[str, str]) -> bool:
    """Whether the monitor is read-only: ``--readonly``, or ``GPUTUI_READONLY=1``.

    Raises:
        ConfigError: ``GPUTUI_READONLY`` holds something other than ``1``, ``0`` or nothing
            (a typo must not leave the kill keys working while the user thinks them off).
    """
    value = environ.get(READONLY_ENV, "")
    if value not in ("", "0", "1"):
        raise ConfigError(
            f"{READONLY_ENV} must be 1 (read-only) or 0, not {ellipsize(repr(value), 40)}"
        )
    return flag or value == "1"


def checked_runner_setup(environ: Mapping[str, str]) -> RunnerSetup:
    """The runner pane's real setup, its choices starting from ``GPUTUI_RUNNER_DEFAULTS``
    (:func:`~gputui.jobs.runner.runner_setup`), their device checked.

    A device other than the CPU is checked by a child that imports torch (this process
    never does), before the app starts: the wait is paid only when the variable names
    one, and a device that is not here is refused as a bad value is, rather than the pane
    quietly starting on another. The pane then offers the devices that child listed, and
    asks torch no more. A torch that cannot list devices at all is the pane's to show.

    Raises:
        ConfigError: one line naming the variable and what to use.
    """
    # the runner's modules load here, not on `gputui --help`'s path
    from gputui.jobs.runner import RUNNER_DEFAULTS_ENV, runner_setup

    setup = runner_setup(environ)
    defaults = setup.defaults
    if defaults.device.kind == "cpu":
        return setup
    # only where the variable names a device: torch is asked then
    from gputui.jobs.events import Error
    from gputui.jobs.process import list_devices

    listed = list_devices(DeviceQuery(check=(defaults.device,)))
    if isinstance(listed, Error):
        if listed.kind in {"config", "device"}:
            raise ConfigError(f"{RUNNER_DEFAULTS_ENV}: {listed.message}")
        return setup
    checked = defaults.with_changes(device=listed.chosen[0])  # cuda reads cuda:0, as listed
    return dataclasses.replace(setup, defaults=checked, listed=listed)


def _run_snapshot(args: argparse.Namespace) -> int:
    # each command's modules load only when it runs (`gputui --help` stays quick)
    from gputui.commands.snapshot import run_snapshot

    return run_snapshot(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gputui``; returns the process exit code."""
    if argv is None:
        argv = sys.argv[1:]
    prog = "gputui"
    try:
        parser = build_parser(commands_named(argv))
        args = parser.parse_args(argv)
        handler = getattr(args, "handler", _run_app)
        prog = chosen_parser(parser, args).prog
        fleet = fleet_named(args, "app_")
        if args.only is not None and (args.command or fleet):
            return usage_error(
                prog, "--only picks this machine's GPUs for the monitor: leave it out here"
            )
        if args.record is not None and args.command:
            return usage_error(prog, "--record records this machine's monitor: leave it out here")
        if args.record is not None and fleet:
            return usage_error(
                prog,
                "--record records this machine's monitor: leave it out here, and record the "
                "fleet with gputui record --hosts ... (or --hostfile, --prometheus)",
            )
        if args.command and fleet:
            return usage_error(
                prog,
                f"write the fleet's flags after the command: gputui {args.command} --hosts ...",
            )
        if handler is not _run_app and sys.stdout is None:  # before the work, not after it
            return usage_error(prog, "standard output is closed: send it to a file or /dev/null")
        return handler(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except OutputFailed as exc:
        return failed(prog, str(exc))
    except BrokenPipeError:  # `gputui snapshot | head`: quiet, like other Unix tools
        forget_output()
        return EXIT_OK


def console_main() -> NoReturn:
    """The ``gputui`` program (and ``python -m gputui``): :func:`main`, then
    :func:`exit_process`. Tests call :func:`main`, which returns."""
    exit_process(main())


def exit_process(code: int) -> NoReturn:
    """End the process with ``code``, the last step of every command's shutdown.

    The app has stopped its samplers, waited for them and shut NVML down where it could
    by now. But a thread may still be inside an NVML call (a wedged driver; a sample
    given up at a deadline): the interpreter's exit would then unload the driver library
    under that call, and a real driver crashes (exit 139). So no NVML call starts from
    here on, and while one is still in flight the process ends as the engine's child
    does, with ``os._exit``: after Python's exit handlers (they end the trainer's
    children) and with its output flushed, but without that teardown.
    """
    if "gputui.telemetry.nvml" in sys.modules:  # else this process never called NVML
        # (loaded: the test above)
        from gputui.telemetry.nvml import end_nvml_calls

        if end_nvml_calls():
            atexit._run_exitfuncs()
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    if stream is not None:
                        stream.flush()
            os._exit(code)
    raise SystemExit(code)
