"""What the subcommands share: the one-line parser, the types of their number flags, the
checks of their folder flags, the flags every job takes (:func:`job_options`), and how a
recording and a time in it are named (``snapshot --from``, ``replay``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import math
import os
import stat
import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from gputui.commands.output import say, write_out
from gputui.device import Device, DeviceError
from gputui.exits import EXIT_USAGE
from gputui.format import ellipsize, one_line
from gputui.jobs.config import DATASETS, EPOCHS_MAX, NICE_MAX, ConfigError, closest
from gputui.jobs.folders import missing_home
from gputui.telemetry.selection import GpuSelection, SelectionError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

INTERVAL_MIN_S = 0.25
INTERVAL_MAX_S = 60.0
THREADS_MAX = 1024
"""Most ``--threads``: more than any machine has cores; torch overflows past 2**31 - 1."""
WORKERS_MAX = 256
"""Most ``--workers``: each is a process holding a copy of the dataset."""
SHOWN_PATH_MAX = 60
"""Longest path an error message shows whole; a longer one is cut, ending in ``...``."""

T = TypeVar("T")


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, except that a block (text between blank lines) with an indented line,
    such as an epilog's examples, is kept as written; every other block is filled as usual."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(
            "\n".join(indent + line for line in block.splitlines())
            if any(line.startswith(" ") for line in block.splitlines())
            else "\n".join(indent + line for line in self._split_lines(block, width - len(indent)))
            for block in text.split("\n\n")
        )

    def _split_lines(self, text: str, width: int) -> list[str]:
        # As argparse's, but a line never ends inside a word: not `held-` then `out`.
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def examples(*pairs: tuple[str, str]) -> str:
    """An epilog of example command lines, each followed by what it does, as
    :class:`HelpFormatter` shows them; keep each line of ``what`` short (54 characters), so
    that it fits a terminal 60 columns wide."""
    return "examples:\n" + "\n".join(
        f"  {line}\n" + "\n".join(f"      {part}" for part in what.splitlines())
        for line, what in pairs
    )


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are a single line that says what to do.

    Flags must be spelled out: no abbreviations, so ``gputui experiment batch-sweep
    --batch-size 64`` is refused rather than read as ``--batch-sizes 64``, and a flag
    added later cannot change what a script's abbreviation means. Its help, and its
    subcommands' (they are made of the same class), is laid out by :class:`HelpFormatter`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # --help and --version: through the one output helper, so that a failed write
        # is one line and exit 1 rather than ignored (argparse drops the OSError).
        if message and (file is None or file is sys.stdout):
            write_out(message, end="")
        else:
            super()._print_message(message, file)

    def parse_args(  # type: ignore[override]  # one signature for argparse's overloads
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """Parse ``args``; a word no parser took is refused by the command it was given to.

        argparse refuses it from the top parser (``gputui: error: unrecognized
        arguments``), though the words belong to a subcommand.
        """
        words = sys.argv[1:] if args is None else list(args)
        if self._subparsers is not None:  # gputui's own flags, before the command
            unknown = self._unknown_leading_flag(words)
            if unknown is not None:  # else argparse skips it, and takes its value as a command
                self.error(unrecognized(unknown, self))
        parsed, extras = self.parse_known_args(words, namespace)
        if extras:
            chosen = chosen_parser(self, parsed)
            chosen.error(unrecognized(extras[0], chosen))
        return parsed

    def _unknown_leading_flag(self, words: Sequence[str]) -> str | None:
        """The first flag before the first positional word that this parser does not know."""
        at = 0
        while at < len(words):
            word = words[at]
            if word in ("-", "--") or not word.startswith("-"):
                return None
            action = self._option_string_actions.get(word.split("=", 1)[0])
            if action is None:
                return word
            at += 1 if "=" in word or action.nargs == 0 else 2
        return None

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A command that is not one is named, with the one it is closest to."""
        commands = action.choices
        is_command = isinstance(action, argparse._SubParsersAction) or action.metavar == "COMMAND"
        if is_command and commands is not None and value not in commands:
            close = closest(str(value), commands)
            noun = str(action.metavar or "command").lower()  # command, experiment
            hint = f"did you mean {close}?" if close else f"the {noun}s: " + ", ".join(commands)
            raise argparse.ArgumentError(None, f"unknown {noun} {value!r}; {hint}")
        super()._check_value(action, value)

    def error(self, message: str) -> NoReturn:
        """Exit 2 with ``message`` on one line of standard error (:func:`usage_line`)."""
        self.exit(EXIT_USAGE, usage_line(self.prog, message) + "\n")


def chosen_parser(
    parser: argparse.ArgumentParser, namespace: argparse.Namespace
) -> argparse.ArgumentParser:
    """The parser of the (sub)command that ``namespace`` was parsed for: ``gputui experiment
    batch-sweep``'s for ``gputui experiment batch-sweep --steps 3``; its ``prog`` names it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            child = action.choices.get(getattr(namespace, action.dest, None) or "")
            if child is not None:
                return chosen_parser(child, namespace)
    return parser


def unrecognized(word: str, parser: argparse.ArgumentParser) -> str:
    """Why ``word`` is refused, naming the flag of ``parser`` it is closest to, if any."""
    message = f"unrecognized argument {word}"
    if word.startswith("-"):
        shown = {
            option.lstrip("-"): option
            for action in parser._actions
            if action.help is not argparse.SUPPRESS
            for option in action.option_strings
            if option.startswith("--")
        }
        name = word.split("=")[0].lstrip("-")
        close = closest(name, shown) or SPELT_ELSEWHERE.get(name, "")
        if close in shown:
            message += f"; did you mean {shown[close]}?"
    return message


SPELT_ELSEWHERE = {"port": "listen"}
"""Other tools' flags, by the one of ours that does their work (exporters' ``--port``)."""


def argument_type(parse: Callable[[str], T], error: type[ValueError]) -> Callable[[str], T]:
    """An argparse ``type`` that parses with ``parse``, its ``error`` a usage error in its words."""

    def parsed(text: str) -> T:
        try:
            return parse(text)
        except error as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parsed


gpu_selection = argument_type(GpuSelection.parse, SelectionError)
"""Parse ``--only``: NVML indexes or UUIDs, comma-separated."""
parse_device = argument_type(Device.parse, DeviceError)
"""Parse ``--device``."""


def seconds(least: float, most: float, flag: str, example: float) -> Callable[[str], float]:
    """An argparse ``type`` for a number of seconds from ``least`` to ``most``.

    ``least`` 0 means "above 0" (0 itself is refused); ``most`` may be infinity.
    """

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        above = least < value if least == 0 else least <= value
        below = value < most if math.isinf(most) else value <= most
        if not (above and below):
            bounds = "above 0" if least == 0 else f"from {least:g}"
            bounds += "" if math.isinf(most) else f" to {most:g}"
            raise argparse.ArgumentTypeError(  # nan and inf end here too
                f"{text!r} is not a number of seconds {bounds}, e.g. {flag} {example:g}"
            )
        return value

    return parse


interval_seconds = seconds(INTERVAL_MIN_S, INTERVAL_MAX_S, "--interval", 1)
"""Parse ``--interval``: seconds between samples, 0.25 to 60."""


def whole_number(least: int, most: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number from ``least`` to ``most`` (no upper bound: None)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least or (most is not None and value > most):
            up_to = "" if most is None else f" and at most {most}"
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number of {least} or more{up_to}"
            )
        return value

    return parse


def whole_numbers(least: int, most: int | None, example: str) -> Callable[[str], tuple[int, ...]]:
    """An argparse ``type`` for a comma-separated list of whole numbers from ``least`` to
    ``most`` (``--batch-sizes 32,64``, ``--world-sizes 1,2,4``)."""

    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(part) for part in text.split(","))
        except ValueError:
            values = ()
        if not values or min(values) < least or (most is not None and max(values) > most):
            bounds = f"{least} or more" if most is None else f"{least} to {most}"
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a comma-separated list of whole numbers of {bounds}, "
                f"e.g. {example}"
            )
        return values

    return parse


def niceness(text: str) -> int:
    """Parse ``--nice``: how much to lower a child process's priority, 0 to 19."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= NICE_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is not a niceness from 0 to {NICE_MAX}")
    return value


def check_data_options(args: argparse.Namespace) -> None:
    """Refuse ``--data-dir`` with ``--dataset synthetic`` (which reads nothing), then check
    the folder (:func:`check_data_dir`), before any child starts.

    Raises:
        ConfigError: one line naming the flags and what to do.
    """
    if args.data_dir is None:
        return
    if args.dataset == "synthetic":
        raise ConfigError(
            "--data-dir says where CIFAR-10 is, and --dataset synthetic reads no files: "
            "leave --data-dir out, or use --dataset cifar10"
        )
    check_data_dir(args.data_dir)


def check_data_dir(text: str) -> None:
    """Refuse a ``--data-dir`` that cannot be a folder before any child starts. An existing
    one may be read-only (a shared copy of the data set); a missing one is made only by the
    download, never by a command that may still refuse.

    Raises:
        ConfigError: one line naming the flag and what to do.
    """
    _check_folder(text, "--data-dir", "data dir", "the default cache folder", writes=False)


def check_runs_dir(text: str) -> None:
    """Refuse a ``--runs-dir`` that cannot be written to before any child starts: a run
    that trained and then could not be recorded would be lost.

    Raises:
        ConfigError: one line naming the flag and what to do.
    """
    _check_folder(text, "--runs-dir", "runs dir", "the default runs folder", writes=True)


def _check_folder(text: str, flag: str, what: str, default: str, *, writes: bool) -> None:
    """Refuse ``text`` as a folder for ``flag`` with one line. Where the job ``writes``, or
    the folder is still to be made, a file is written and removed in it (or in the folder it
    will be made in): permission bits, a read-only mount or a full disk show up here rather
    than after the work. Nothing is made."""
    leave_out = f"or leave {flag} out to use {default}"
    if not text.strip():
        raise ConfigError(f"{what} is empty: name a folder, {leave_out}")
    shown = _shown_path(text)
    if any(ord(character) < 32 or ord(character) == 127 for character in text):
        raise ConfigError(f"{what} {shown} holds a control character: name a folder, {leave_out}")
    try:
        path = Path(text).expanduser()
        kind = _kind(path)
        nearest, nearest_kind = path, kind
        if kind is None:  # made here: what would it be made in?
            nearest = next(p for p in path.absolute().parents if _kind(p) is not None)
            nearest_kind = _kind(nearest)
        writable = os.access(nearest, os.W_OK | os.X_OK)
    except (OSError, RuntimeError, ValueError) as exc:  # a name too long; ~user, no such user
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(
            f"{what} {shown} cannot be used ({reason.rstrip('.')}): name a folder, {leave_out}"
        ) from None
    if kind == "file":
        raise ConfigError(f"{what} {shown} is not a folder: name a folder, {leave_out}")
    home = missing_home(path) if kind is None else None
    if home is not None:
        raise ConfigError(
            f"{what} {shown} lies in the home folder {_shown_path(str(home))}, which does not "
            "exist: name a folder outside it"
        )
    if nearest_kind == "file":
        raise ConfigError(
            f"{what} {shown} cannot be made inside the file {_shown_path(str(nearest))}: "
            f"name a folder, {leave_out}"
        )
    if (writes or kind is None) and not writable:
        where = "" if nearest == path else f" (it would be made in {_shown_path(str(nearest))})"
        raise ConfigError(
            f"{what} {shown} is not writable{where}: name a folder you may write to, {leave_out}"
        )
    if not writes and kind is not None:
        return
    try:  # in the folder, or where it will be made (made only by the run)
        with tempfile.TemporaryFile(dir=nearest, prefix=".gputui-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(
            f"{what} {shown} cannot be written to ({reason}): name a folder you may write to, "
            f"{leave_out}"
        ) from None


def _kind(path: Path) -> str | None:
    """``folder``, ``file`` (anything else that is there), or ``None`` when nothing is.

    Raises:
        OSError: when the path cannot be looked at (a name too long, no permission).
        ValueError: for a null byte in the path.
    """
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # not there, or "inside" a file
        return None
    return "folder" if stat.S_ISDIR(mode) else "file"


def _shown_path(text: str) -> str:
    """``text`` as an error message shows a path: one printable line, cut when very long."""
    shown = one_line(text)
    return shown if len(shown) <= SHOWN_PATH_MAX else f"{shown[: SHOWN_PATH_MAX - 3]}..."


def job_options(*, devices: bool = True) -> argparse.ArgumentParser:
    """The flags ``gputui bench``, every ``gputui experiment`` and ``gputui scale`` take, as
    a parent parser; ``devices=False`` leaves ``--device`` to the command (scale takes one
    kind of device, not a list)."""
    common = argparse.ArgumentParser(add_help=False)
    if devices:
        common.add_argument(
            "--device",
            dest="devices",
            action="append",
            type=parse_device,
            metavar="DEV",
            help="cpu, cuda (the first NVIDIA GPU, or AMD GPU under a ROCm build of torch), "
            "cuda:N (GPU N, counted from 0), mps (an Apple GPU) or xpu, xpu:N (an Intel GPU); "
            "repeat for several (default: cpu and every usable accelerator)",
        )
    common.add_argument(
        "--dataset",
        choices=DATASETS,
        default="auto",
        help="auto: CIFAR-10 if it is already on disk, else synthetic (never downloads); "
        "cifar10: the CIFAR-10 photos (50,000 for training, 10,000 held out), downloaded "
        "once if they are not on disk; synthetic: generated CIFAR-10-sized images, nothing "
        "read or downloaded (default: auto)",
    )
    common.add_argument(
        "--data-dir",
        metavar="PATH",
        help="an existing folder to find CIFAR-10 in, and download it to (default: "
        "$XDG_CACHE_HOME/gputui or ~/.cache/gputui, then ./data)",
    )
    common.add_argument(
        "--no-download",
        action="store_true",
        help="never download CIFAR-10: use it only if it is already on disk",
    )
    common.add_argument(
        "--limit",
        type=whole_number(1),
        metavar="N",
        help="use only the first N training images, for a quick run; 1 or more (default: all "
        "50,000)",
    )
    common.add_argument(
        "--threads",
        type=whole_number(1, THREADS_MAX),
        metavar="N",
        help=f"CPU threads the training may use, 1 to {THREADS_MAX} (default: "
        "$OMP_NUM_THREADS where set, else every core)",
    )
    common.add_argument(
        "--nice",
        type=niceness,
        default=0,
        metavar="N",
        help=f"lower the training process's priority by N, 0 to {NICE_MAX}, so that other "
        "work on the machine goes first (default: 0)",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return common


def job_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~gputui.jobs.config.JobConfig` fields that :func:`job_options` and
    :func:`workers_option` set (``workers`` only when given: else the config's default)."""
    settings = {
        "dataset": args.dataset,
        "data_dir": args.data_dir,
        "download": not args.no_download,
        "limit": args.limit,
        "threads": args.threads,
        "nice": args.nice,
    }
    if getattr(args, "workers", None) is not None:
        settings["workers"] = args.workers
    return settings


def epochs_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--epochs``: passes over the training images, the first one the warm-up."""
    parser.add_argument(
        "--epochs",
        type=whole_number(1, EPOCHS_MAX),
        default=2,
        metavar="N",
        help=f"passes over the training images, 1 to {EPOCHS_MAX}; the first is the warm-up "
        "(default: 2)",
    )


def batch_size_option(
    parser: argparse.ArgumentParser, what: str = "images per training step"
) -> None:
    """Add ``--batch-size B`` (default 256, seed 001's); ``what`` says what B counts."""
    parser.add_argument(
        "--batch-size",
        type=whole_number(1),
        default=256,
        metavar="B",
        help=f"{what}, 1 or more (default: 256)",
    )


def workers_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--workers``: DataLoader workers for the classic pipeline."""
    parser.add_argument(
        "--workers",
        type=whole_number(0, WORKERS_MAX),  # None when not given, so bench can tell
        metavar="N",
        help="processes that prepare the batches on the CPU for the classic pipeline (a "
        f"DataLoader's workers), 0 to {WORKERS_MAX}; 0 prepares them in the training process "
        "itself (default: 2)",
    )


def usage_line(prog: str, message: str) -> str:
    """The one form of every usage error: ``PROG: error: MESSAGE (see 'PROG --help')``, one
    line, ``PROG`` the (sub)command it was given to (``gputui experiment batch-sweep``)."""
    return one_line(f"{prog}: error: {message} (see '{prog} --help')")


def usage_error(prog: str, message: str) -> int:
    """Write :func:`usage_line` on standard error; returns exit code 2."""
    say(usage_line(prog, message))
    return EXIT_USAGE


# --- recordings ---------------------------------------------------------------------------

NAME_MAX = 255
"""The longest name of one file or folder in a path (Linux's, macOS's)."""


def recording_file(text: str) -> Path:
    """Parse a recording's file name; whether it is one is checked once the command runs."""
    if not text or "\x00" in text or any(len(part) > NAME_MAX for part in text.split(os.sep)):
        raise argparse.ArgumentTypeError(f"{ellipsize(text, 60)!a} is not a file name")
    return Path(text)


def new_file(text: str) -> Path:
    """Parse ``--output``: a file that does not exist yet, in a folder that does."""
    shown = ellipsize(text, 60)
    path = Path(text)
    try:
        if not text or text.endswith(os.sep):
            raise argparse.ArgumentTypeError(f"{shown!r} is not a file name")
        path.lstat()
    except FileNotFoundError:
        folder = path.parent
        if not folder.is_dir():
            raise argparse.ArgumentTypeError(f"the folder of {shown!r} does not exist") from None
        if not os.access(folder, os.W_OK):
            raise argparse.ArgumentTypeError(f"the folder of {shown!r} cannot be written") from None
        return path
    except ValueError:  # a NUL in it
        raise argparse.ArgumentTypeError(f"{shown!a} is not a file name") from None
    except OSError as error:
        reason = "the name is too long" if error.errno == errno.ENAMETOOLONG else error.strerror
        raise argparse.ArgumentTypeError(f"{shown!r} cannot be used: {reason}") from None
    raise argparse.ArgumentTypeError(
        f"{shown!r} exists: name a new file (a recording never writes over one)"
    )


@dataclass(frozen=True, slots=True)
class RecordedTime:
    """A time in a recording, as ``--at`` gives it."""

    seconds: float | None = None
    """Seconds since the recording started."""
    wall: dt.datetime | None = None
    """A date and time (with its time zone)."""

    def since_start(self, started_unix: float) -> float:
        """Seconds since the recording started; ``math.inf`` for ``end``."""
        if self.seconds is not None:
            return self.seconds
        if self.wall is not None:
            return self.wall.timestamp() - started_unix
        return math.inf

    def __str__(self) -> str:
        if self.seconds is not None:
            return f"{self.seconds:g} s"
        return "end" if self.wall is None else self.wall.isoformat()


END = RecordedTime()
"""``--at end``: the last frame."""


def recorded_time(text: str) -> RecordedTime:
    """Parse ``--at``: seconds since the recording started, a date and time as ISO 8601
    writes it (without a zone: this machine's), or ``end``."""
    if text == "end":
        return END
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is not None:
        if math.isfinite(seconds) and seconds >= 0 and text.strip() == text:
            return RecordedTime(seconds=seconds)
    elif len(text) <= 40:
        try:
            wall = dt.datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            return RecordedTime(wall=wall if wall.tzinfo else wall.astimezone())
    raise argparse.ArgumentTypeError(
        f"{ellipsize(text, 40)!r} is not a time in the recording: write seconds since it "
        "started (90), a date and time (2026-11-26T03:00:00, this machine's time zone unless "
        "given) or end"
    )
