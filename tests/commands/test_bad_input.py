"""Bad input to every ``gputui`` flag: exit 2, one line on stderr, nothing on stdout.

The matrix is derived from the real parser (``gputui.commands.build_parser()``): every
command and subcommand, every flag, with bad values chosen from each flag's kind
(a number, a choice, a switch) plus the cases registered for it in ``SPECIFIC``.
A flag added later is covered by the generic cases at once, and
``test_every_flag_that_takes_a_value_has_specific_bad_values`` fails until its
own boundaries are registered. Hypothesis then fuzzes whole command lines.

Every command's handler runs for real: ``no_side_effects`` stops each only where it
would start something (the monitor, a server, a recording, the doctor's checks, a
trainer's or an experiment's child) or read a GPU, so every check a command makes
before that runs as a user's would. A few real ``python -m gputui`` runs prove the
end-to-end behaviour, including the checks that only the child process can make
(device strings, which need torch).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gputui.commands
import gputui.commands.bench
import gputui.commands.doctor
import gputui.commands.experiment
import gputui.commands.record
import gputui.commands.replay
import gputui.commands.scale
import gputui.commands.serve
import gputui.commands.snapshot
import gputui.commands.topo
import gputui.doctor.run
import gputui.jobs.bench.run
import gputui.jobs.config
import gputui.recording.recorder
import gputui.serve.run
import gputui.telemetry.polling
from gputui.device import CPU, Device
from gputui.jobs.config import DEFAULT_BATCH_SIZES
from gputui.jobs.events import DeviceOption, DevicesListed, Error, Event
from tests.commands.test_cli import ROOT

# --- the parser, walked ------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One parser in the tree: ``gputui``, ``gputui bench``, ``gputui experiment pipelines``..."""

    path: tuple[str, ...]
    """The words after ``gputui`` that select it."""
    parser: argparse.ArgumentParser
    """Its parser."""

    @property
    def name(self) -> str:
        """How a user writes it."""
        return " ".join(("gputui", *self.path))


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Command]:
    """Every parser under ``parser``, itself first."""
    yield Command(path, parser)
    sub = subcommands(parser)
    if sub is not None:
        for name, child in sub.choices.items():
            yield from walk(child, (*path, name))


def subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any] | None:
    """The parser's subcommand action, if it has one."""
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return found[0] if found else None


def flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's options, less ``--help`` and ``--version``."""
    skip = (argparse._HelpAction, argparse._VersionAction)
    return [a for a in parser._actions if a.option_strings and not isinstance(a, skip)]


def takes_value(action: argparse.Action) -> bool:
    """Whether the flag is followed by one value (every value flag in gputui is)."""
    return action.nargs is None


COMMANDS = list(walk(gputui.commands.build_parser()))
ALL_FLAGS = sorted({a.option_strings[0] for c in COMMANDS for a in flags(c.parser)})
VALUE_FLAGS = sorted(
    {a.option_strings[0] for c in COMMANDS for a in flags(c.parser) if takes_value(a)}
)

# --- bad values --------------------------------------------------------------------------

LONG_NAME = "x" * 5000
"""Longer than any file name may be (ENAMETOOLONG), and a 5000-character value."""

NUMBER_BAD = (
    "",
    " ",
    "abc",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "-1",
    "1e999",
    "0x10",
    "1 2",
    "1\n2",
    "\x00",
    "\x1b[31m",
    "💥",
    "\udcff",  # a byte that is not UTF-8, as Python receives it in argv
    "9" * 5000,
)
"""Bad for every flag that takes a number: no number, not finite, negative, junk."""

SPECIFIC: dict[str, tuple[str, ...]] = {
    "--interval": ("0", "0.2499", "60.001", "61", "1e-300", "-0.25"),
    "--timeout": ("0", "0.999", "3600.5", "1e308"),
    "--budget": ("0", "-0.0", "1e-400"),
    "--epochs": ("0", "-0", "1.5", "2e3", "1001", "99999999"),
    "--batch-size": ("0", "1.5", "256.0"),
    "--batch-sizes": ("0,32", "32,,64", ",", "32,", "32;64", "-32", "32,0", "1.5"),
    "--world-sizes": ("0", "1,,2", ",", "1,", "1;2", "-1", "1,0", "1.5", "65", "1,65"),
    "--steps": ("0", "1.5"),
    "--warmup": ("0", "1.5"),
    "--limit": ("0", "-5", "1.5"),
    "--workers": ("-1", "0.5", "257", "2147483648"),
    "--threads": ("0", "1.5", "1025", "2147483648"),
    "--nice": ("20", "-1", "1.5", "100"),
    "--device": ("", " ", "\t"),
    "--only": ("", ",", "0,,1", "-1", "x", "GPU-"),  # the rest needs torch: see the real runs below
    "--data-dir": (
        "/proc/gputui-no-such-dir",  # cannot be made, even by root
        "{file}",
        "{under_file}",  # unreadable even as root: a folder inside a regular file
        "",
        " ",
        "{missing}\nx",
        "{missing}\x1b[2J",
        LONG_NAME,
        "~no-such-user-here/cifar",
    ),
    "--runs-dir": (
        "{file}",
        "{under_file}",
        "",
        "~no-such-user-here/runs",
        "/proc/gputui-runs",
        "{missing}\nx",
    ),
    "--tls-cert": ("{missing}", "{under_file}", LONG_NAME),
    "--tls-key": ("{missing}", "{under_file}", LONG_NAME),
    "--hosts": (
        "",
        " , ",
        "node1:0",
        "node1:99999",
        "node1:1e3",
        "::1:9400",
        "[nope]:9922",
        "node1,,node2",
        "node1:9400,node1:9400",
        "ftp://node1",
        "host name",
        "\x1b[2J",
        "9" * 5000,
        ("a" * 64) + ".example.org",
    ),
    "--hostfile": ("{missing}", "{file}", "{under_file}", "", LONG_NAME),
    "--prometheus": ("", "prom:9090", "ftp://prom:9090", "http://", "http://:9090"),
    "--output": (
        "",
        "{file}",  # exists: a recording never writes over a file
        "{under_file}",
        "{missing}/night.ndjson.zst",
        "/",
        LONG_NAME,
        "night\x00.ndjson",
    ),
    "--record": (
        "",
        "{file}",  # exists: a recording never writes over a file
        "{under_file}",
        "{missing}/night.ndjson.zst",
        "/",
        LONG_NAME,
        "night\x00.ndjson",
    ),
    "--speed": ("0", "3", "32", "0.1", "0.125", "16x1", "x", "1/4", "2xx"),
    "--duration": ("0", "0s", "-1m", "1x", "m", "1.5.2h", "10 m", "367d", "1e3"),
    "--max-size": ("0", "1K", "4095", "10X", "M", "1.5.2M", "-1M", "1 M", "1e9"),
    "--keep": ("0", "-1", "1.5", "x", "", "1e3"),
    "--from": ("", "night\x00.ndjson", LONG_NAME),
    "--at": ("-0.5", " 90", "2026-13-01T00:00:00", "yesterday", "end ", "END", "1:30"),
    "--listen": (
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:65536",
        "127.0.0.1:1e3",
        "::1:9922",
        "[::1]",
        "[nope]:9922",
        "999.0.0.1:9922",
        "host name:9922",
        "\x1b[2J:9922",
    ),
}
"""Each value flag's own bad values: boundaries, out of range, paths that cannot be used."""

WORDS = frozenset({"--hosts", "--output", "--record", "--from"})
"""Value flags whose values are names, not numbers: ``inf`` or ``nan`` may name a host or a
file, so they get only their own bad values."""

CHOICE_BAD = ("", " ", "nope", "💥", "\udcff", "a\nb", "\x1b[31m", "x" * 5000)
"""Bad for every flag with choices (plus each flag's first choice upper-cased and padded)."""

SWITCH_BAD = ("1", "", "yes")
"""``--json=VALUE`` and the like: a switch takes no value."""

UNKNOWN_FLAGS = ("--nope", "--nope=1", "-Z", "--💥", "--\x1b[2J", "---", "stray")
"""Not an option of any command (``stray``: a word where none belongs)."""

UNKNOWN_COMMANDS = ("nope", "", "💥", "a\nb", "\udcff", "-", "x" * 5000)
"""Not a subcommand of any command."""


@dataclass(frozen=True)
class Case:
    """One bad command line and what the error must name."""

    argv: tuple[str, ...]
    """The words after ``gputui``; ``{missing}``, ``{file}``, ``{under_file}`` are paths."""
    names: str | None = None
    """Text the error line must hold (``argument --epochs``), when the parser refuses it."""
    id: str = field(default="", compare=False)
    """The test id."""


def _with_value(flag: str, value: str) -> tuple[str, ...]:
    # "-1" and "-inf" after a space may be read as options; with "=" the flag's type sees them
    return (f"{flag}={value}",) if value.startswith("-") else (flag, value)


def _short(value: str) -> str:
    return ascii(value if len(value) <= 16 else f"{value[:12]}...{len(value)}")


def flag_cases() -> list[Case]:
    """Every flag of every command with its own bad values (``SPECIFIC``, a missing value,
    ``--help`` as the value), and the junk any number or choice refuses (``NUMBER_BAD``,
    ``CHOICE_BAD``). A value the parser's type refuses is tried once a flag: where another
    command's flag has the same type (its code and range), it would refuse it again."""
    cases: list[Case] = []
    junk_tried: set[tuple[object, ...]] = set()
    for command in COMMANDS:
        for action in flags(command.parser):
            flag = action.option_strings[0]
            kind = (flag, str(action.choices), *_parts(action.type))
            new_kind = kind not in junk_tried
            junk_tried.add(kind)
            named = f"argument {'/'.join(action.option_strings)}"
            where = f"{command.name} {flag}"
            if not takes_value(action):
                for value in SWITCH_BAD:
                    argv = (*command.path, f"{flag}={value}")
                    cases.append(Case(argv, named, id=f"{where}={_short(value)}"))
                continue
            cases.append(Case((*command.path, flag), named, id=f"{where} (no value)"))
            abbreviated = flag[:-1]  # argparse would take it for the flag; gputui refuses it
            if abbreviated not in {s for a in command.parser._actions for s in a.option_strings}:
                argv = (*command.path, abbreviated, "1")
                cases.append(Case(argv, id=f"{command.name} {abbreviated} (abbreviated)"))
            cases.append(
                Case((*command.path, flag, "--help"), named, id=f"{where} --help (no value)")
            )
            if action.choices is not None:
                first = str(next(iter(action.choices)))
                bad = [*(CHOICE_BAD if new_kind else ()), first.upper(), f"{first} ", f" {first}"]
                values = [(v, named) for v in bad if v not in action.choices]
            elif action.type is not None:
                junk = NUMBER_BAD if flag not in WORDS else ()
                values = [(v, named) for v in (*junk, *SPECIFIC.get(flag, ())) if new_kind]
            else:  # checked after parsing, by the command itself
                values = [(v, None) for v in SPECIFIC.get(flag, ())]
            for value, names in values:
                argv = (*command.path, *_with_value(flag, value))
                cases.append(Case(argv, names, id=f"{where} {_short(value)}"))
    return cases


def _parts(parse: object) -> tuple[object, ...]:
    """What a flag's type function is: its code and the values it closes over (a range's
    bounds), so that two flags of one make and range read as one."""
    code = getattr(parse, "__code__", parse)
    cells = getattr(parse, "__closure__", None) or ()
    return (code, *(repr(cell.cell_contents) for cell in cells))


def command_cases() -> list[Case]:
    """Unknown flags, stray words, flags of other commands and unknown subcommands."""
    cases: list[Case] = []
    for command in COMMANDS:
        own = {s for a in command.parser._actions for s in a.option_strings}
        takes_a_word = any(  # ``replay FILE``: any one word is a file name
            not a.option_strings and not isinstance(a, argparse._SubParsersAction)
            for a in command.parser._actions
        )
        for word in UNKNOWN_FLAGS:
            words = (word, word) if word == "stray" and takes_a_word else (word,)
            cases.append(Case((*command.path, *words), id=f"{command.name} {_short(word)}"))
        sub = subcommands(command.parser)
        foreign = next(flag for flag in VALUE_FLAGS if flag not in own)  # another command's
        names = None if sub is not None and sub.required else "unrecognized argument "
        cases.append(Case((*command.path, foreign), names, id=f"{command.name} {foreign}"))
        if sub is None:
            continue
        for word in UNKNOWN_COMMANDS:
            argv = (*command.path, word)
            cases.append(Case(argv, "unknown ", id=f"{command.name} {_short(word)}"))
        first = next(iter(sub.choices))
        for word in (first.upper(), f"{first} ", first[:-1]):
            argv = (*command.path, word)
            cases.append(Case(argv, "unknown ", id=f"{command.name} {_short(word)}"))
        if sub.required:
            cases.append(
                Case(command.path, "arguments are required", id=f"{command.name} (no command)")
            )
    return cases


CASES = flag_cases() + command_cases()

# --- running main() without side effects ------------------------------------------------


@dataclass
class Outcome:
    """What ``gputui.commands.main(argv)`` did."""

    code: object
    """The exit code: returned, or carried by ``SystemExit``."""
    out: str
    """Standard output."""
    err: str
    """Standard error."""
    exited: bool
    """Whether it ended with ``SystemExit`` (argparse) rather than a return."""


def run_main(argv: list[str]) -> Outcome:
    """Call ``gputui.commands.main(argv)`` here; anything but ``SystemExit`` propagates."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: object = gputui.commands.main(argv)
            exited = False
        except SystemExit as exc:
            code, exited = exc.code, True
        except Ran:  # taken, and stopped where it would have started something
            code, exited = 0, False
    return Outcome(code, out.getvalue(), err.getvalue(), exited)


USAGE_LINE = re.compile(r"(gputui(?: [a-z-]+)*): error: (.+) \(see '\1 --help'\)")
"""The one form of a usage error: ``gputui COMMAND: error: MESSAGE (see 'gputui COMMAND
--help')``."""


def prog_of(argv: Sequence[str]) -> str:
    """The (sub)command a command line names, as its usage errors must: ``gputui experiment
    batch-sweep`` for ``experiment batch-sweep --nope``."""
    path = max((c.path for c in COMMANDS if tuple(argv[: len(c.path)]) == c.path), key=len)
    return " ".join(("gputui", *path))


def assert_one_line_usage_error(outcome: Outcome, prog: str | None = None) -> str:
    """Exit 2, nothing on stdout, one printable line on stderr in the one form (by ``prog``,
    when given); returns that line."""
    assert outcome.code == 2, outcome
    assert outcome.out == "", outcome
    err = outcome.err
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, repr(err)
    line = err[:-1]
    assert line.isprintable(), f"control characters in {line!r}"  # no \r, \x1b, \udcff
    form = USAGE_LINE.fullmatch(line)
    assert form is not None, f"not 'gputui COMMAND: error: MESSAGE (see ...)': {line}"
    if prog is not None:
        assert form.group(1) == prog, line
    return line


class StubChild:
    """Stands in for ``ChildProcess``: starts nothing.

    It says what ``script`` holds (nothing, unless a test sets it), as the real child
    would say it.
    """

    started: ClassVar[list[object]] = []
    """Every config handed to a stand-in child (reset by ``no_side_effects``)."""
    script: ClassVar[list[Event]] = []
    """The events every stand-in child reports (reset by ``no_side_effects``)."""

    def __init__(self, config: object) -> None:
        self.config = config

    def start(self) -> StubChild:
        """Record the config that would have run."""
        StubChild.started.append(self.config)
        return self

    def events(self) -> Iterator[Event]:
        """``script``; with none, the run reads as stopped (exit 1)."""
        return iter(StubChild.script)

    def stop(self) -> None:
        """Nothing to stop."""


REAL_HANDLERS = {
    gputui.commands._run_app: "the monitor: its poller and the fleet view",
    gputui.commands._run_snapshot: "snapshot: the readings and the fleet's",
    gputui.commands.bench.run_bench_command: "bench: StubChild, and a listing of 8 GPUs",
    gputui.commands.experiment.run_experiment_command: "experiment: StubChild",
    gputui.commands.scale.run_scale: "scale: StubChild, and a listing of 8 GPUs",
    gputui.commands.doctor.run_doctor_command: "doctor: its checks",
    gputui.commands.serve.run_serve_command: "serve: the server, once TLS is loaded",
    gputui.commands.record.run_record_command: "record: the recorder, once its file is named",
    gputui.commands.replay.run_replay_command: "replay: the player on screen",
    gputui.commands.topo.run_topo_command: "topo: the NVML reading",
    gputui.commands._run_help: "help: prints help only",
}
"""Every subcommand handler, which runs for real, and the side effect ``no_side_effects``
stops it at: what would start a child, a server, a recording or the app, or read a GPU."""


class Ran(Exception):
    """A stopped side effect was reached: the command line was taken (``run_main`` reads it
    as exit 0)."""


@pytest.fixture
def no_side_effects(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[str]]:
    """Run every command's own checks for real, stopping each at its side effect (a child,
    a server, a recording, the app, a GPU reading); returns what was reached. The commands
    run in a folder of their own, where a file a command line names may be made."""
    ran: list[str] = []
    workdir = tmp_path_factory.getbasetemp() / "commands-run-here"
    workdir.mkdir(exist_ok=True)

    def reached(name: str) -> Any:
        def side_effect(*args: object, **kwargs: object) -> NoReturn:
            ran.append(name)
            raise Ran(name)

        return side_effect

    monkeypatch.chdir(workdir)
    monkeypatch.setattr(StubChild, "started", [])
    monkeypatch.setattr(StubChild, "script", [])
    monkeypatch.setattr(gputui.commands, "not_a_terminal", lambda: None)
    monkeypatch.setattr(gputui.commands, "run_fleet_app", reached("fleet view"))
    monkeypatch.setattr(gputui.telemetry.polling.Poller, "real", reached("monitor"))
    monkeypatch.setattr(gputui.commands.snapshot, "take_snapshot", reached("snapshot"))
    monkeypatch.setattr(gputui.commands.snapshot, "run_fleet_snapshot", reached("fleet"))
    monkeypatch.setattr(gputui.doctor.run, "run_doctor", reached("doctor"))
    monkeypatch.setattr(gputui.serve.run, "serve", reached("serve"))
    monkeypatch.setattr(gputui.recording.recorder, "record", reached("record"))
    monkeypatch.setattr(gputui.commands.replay, "_replay", reached("replay"))
    monkeypatch.setattr(gputui.commands.topo, "read_nvml_topology", reached("topology"))
    monkeypatch.setattr(gputui.jobs.bench.run, "ChildProcess", StubChild)
    monkeypatch.setattr(gputui.commands.experiment, "ChildProcess", StubChild)
    monkeypatch.setattr(gputui.commands.scale, "ChildProcess", StubChild)
    monkeypatch.setattr(gputui.commands.scale, "list_devices", eight_gpus)
    monkeypatch.setattr(gputui.jobs.bench.run, "list_devices", eight_gpus)
    yield ran


def eight_gpus(query: object = None) -> DevicesListed:
    """Stands in for the engine's device listing on a machine of 8 usable GPUs."""
    cuda = [DeviceOption(Device("cuda", i), True, "NVIDIA H100 80GB HBM3") for i in range(8)]
    return DevicesListed(
        devices=(DeviceOption(CPU, True, "a CPU"), *cuda),
        torch_version="2.13.0",
        chosen=(CPU,),
    )


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A folder that does not exist, a regular file, and a folder inside that file."""
    folder = tmp_path_factory.mktemp("paths")
    file = folder / "a-file"
    file.write_text("not a folder\n")
    return {
        "missing": str(folder / "no-such-folder"),
        "file": str(file),
        "under_file": str(file / "folder"),
    }


def _fill(argv: tuple[str, ...], paths: dict[str, str]) -> list[str]:
    out = []
    for word in argv:
        for name, path in paths.items():
            word = word.replace("{" + name + "}", path)
        out.append(word)
    return out


# --- the matrix --------------------------------------------------------------------------


def test_every_command_s_side_effects_are_intercepted() -> None:
    """A new subcommand must be added to ``REAL_HANDLERS`` (and ``no_side_effects``) first."""
    for command in COMMANDS:
        if subcommands(command.parser) is not None and command.path:
            continue  # ``experiment``: its handler is set on it, its leaves are checked
        handler = command.parser.get_default("handler")
        if not command.path:
            assert handler is None, "gputui itself runs the app: gputui.commands._run_app"
            continue
        if handler is None:  # set on the parent: ``gputui experiment batch-sweep``
            parent = next(c for c in COMMANDS if c.path == command.path[:1])
            handler = parent.parser.get_default("handler")
        assert handler in REAL_HANDLERS, (
            f"{command.name}: register how the fuzz keeps {handler} from doing anything"
        )


def test_every_flag_that_takes_a_value_has_specific_bad_values() -> None:
    """A new value flag needs its own boundaries in ``SPECIFIC`` (choices need none)."""
    missing = [
        f"{command.name} {action.option_strings[0]}"
        for command in COMMANDS
        for action in flags(command.parser)
        if takes_value(action)
        and action.choices is None
        and action.option_strings[0] not in SPECIFIC
    ]
    assert not missing, f"register bad values in SPECIFIC for: {', '.join(missing)}"
    stale = set(SPECIFIC) - set(VALUE_FLAGS)
    assert not stale, f"SPECIFIC names flags no command has: {sorted(stale)}"


def test_the_matrix_covers_every_command_and_flag() -> None:
    covered = {word for case in CASES for word in case.argv}
    covered |= {word.split("=")[0] for case in CASES for word in case.argv}
    assert set(ALL_FLAGS) <= covered
    assert {command.path[-1] for command in COMMANDS if command.path} <= covered
    assert len(CASES) > 500  # every flag of 7 commands, 10 to 25 values each


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in CASES])
def test_bad_input_exits_2_with_one_line(
    case: Case, no_side_effects: list[str], paths: dict[str, str]
) -> None:
    outcome = run_main(_fill(case.argv, paths))
    line = assert_one_line_usage_error(outcome, prog_of(case.argv))
    if case.names is not None:
        assert case.names in line, line
    assert no_side_effects == [] and StubChild.started == []  # nothing started


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "--epoch", "3"], "unrecognized argument --epoch; did you mean --epochs?"),
        (
            ["bench", "--batch-sizes", "32"],
            "unrecognized argument --batch-sizes; did you mean --batch-size?",
        ),
        (
            ["experiment", "sync-stall", "--batch-sizes=32"],
            "unrecognized argument --batch-sizes=32; did you mean --batch-size?",
        ),
        (["experiment", "batch-sweep", "--epochs", "3"], "unrecognized argument --epochs"),
        (["doctor", "--jsn"], "unrecognized argument --jsn; did you mean --json?"),
        (["snapshot", "--host", "a"], "unrecognized argument --host; did you mean --hosts?"),
        (["serve", "--interval=1", "now"], "unrecognized argument now"),
        (["bench", "--limi", "3"], "unrecognized argument --limi; did you mean --limit?"),
        (  # --warmup is for tests only: not offered
            ["experiment", "sync-stall", "--warmu", "3"],
            "unrecognized argument --warmu",
        ),
        (["--jsn"], "unrecognized argument --jsn"),
    ],
)
def test_an_unknown_flag_is_refused_by_its_command_with_the_flag_it_is_closest_to(
    argv: list[str], message: str, no_side_effects: list[str]
) -> None:
    """argparse refused every unknown word as ``gputui: error: unrecognized arguments``,
    whichever subcommand it was given to, and named no flag it might have meant."""
    line = assert_one_line_usage_error(run_main(argv), prog_of(argv))
    assert f": error: {message}" in line
    if "did you mean" not in message:
        assert "did you mean" not in line


TOO_BIG = "batch size 128 is larger than the 64 training images: use a batch size of at most 64"


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--batch-size", "128"],
        ["experiment", "batch-sweep", "--batch-sizes", "32,128"],
        ["experiment", "sync-stall", "--batch-size", "128"],
        ["experiment", "pipelines", "--batch-size", "128"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_batch_larger_than_the_limit_is_refused_by_every_job_alike(
    argv: list[str], no_side_effects: list[str]
) -> None:
    """One rule (``check_batch_fits``): bench refused it before a child started, batch-sweep
    measured it, and the other experiments left it to their child."""
    outcome = run_main([*argv, "--device", "cpu", "--limit", "64"])
    line = assert_one_line_usage_error(outcome, prog_of(argv))
    assert f": error: {TOO_BIG} (see " in line
    assert StubChild.started == []


def test_the_default_sweep_keeps_the_batch_sizes_the_limit_holds() -> None:
    """Without ``--batch-sizes``, ``--limit 100`` sweeps 32 and 64 rather than refusing 2048."""
    parser = gputui.commands.build_parser()
    for limit, sizes in (("100", (32, 64)), ("20", (20,)), ("4096", DEFAULT_BATCH_SIZES)):
        args = parser.parse_args(["experiment", "batch-sweep", "--limit", limit])
        assert gputui.commands.experiment.validated_config(args).sizes == sizes


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "4"], "--workers sets the classic pipeline's DataLoader workers, and "),
        (["--workers", "0", "--pipeline", "resident"], "and the resident pipeline has none: "),
        (["--no-record", "--runs-dir", "."], "--runs-dir says where run folders go, and --no-re"),
        (["--runs-dir", ".", "--no-record"], "and --no-record writes none: leave one out"),
    ],
)
def test_bench_refuses_flags_that_cannot_both_apply(
    argv: list[str], message: str, no_side_effects: list[str]
) -> None:
    """Each was accepted and one of the two flags silently did nothing."""
    line = assert_one_line_usage_error(
        run_main(["bench", "--device", "cpu", *argv]), "gputui bench"
    )
    assert message in line
    assert StubChild.started == []


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--device", "cpu"],
        ["experiment", "batch-sweep"],
        ["experiment", "sync-stall"],
        ["experiment", "pipelines"],
        ["scale", "--device", "cpu"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_data_dir_the_synthetic_set_never_reads_is_refused(
    argv: list[str], no_side_effects: list[str], tmp_path: Path
) -> None:
    """Issue 32: ``--data-dir`` with ``--dataset synthetic`` was taken and silently unused."""
    data = ["--data-dir", str(tmp_path)]
    line = assert_one_line_usage_error(
        run_main([*argv, "--dataset", "synthetic", *data]), prog_of(argv)
    )
    assert ": error: --data-dir says where CIFAR-10 is, and --dataset synthetic reads no " in line
    assert StubChild.started == []
    run_main([*argv, "--dataset", "cifar10", *data])  # where it applies, it is taken
    assert getattr(StubChild.started[0], "data_dir", None) == str(tmp_path)


@pytest.mark.parametrize(
    "argv",
    [["--workers", "4", "--pipeline", "classic"], ["--runs-dir", "."], ["--no-record"], []],
)
def test_bench_takes_flags_that_fit_together(argv: list[str], no_side_effects: list[str]) -> None:
    run_main(["bench", "--device", "cpu", *argv])
    [config] = StubChild.started
    assert isinstance(config, gputui.jobs.config.RunConfig)
    assert config.workers == (4 if "--workers" in argv else 2)


def test_bench_checks_every_device_before_the_first_trains(
    no_side_effects: list[str],
) -> None:
    """Several devices are checked in this process (with torch): junk in the second one."""
    outcome = run_main(["bench", "--device", "cpu", "--device", "cu\nda\x1b💥"])
    line = assert_one_line_usage_error(outcome, "gputui bench")
    assert "is not a device" in line
    assert StubChild.started == []


@pytest.mark.parametrize("path", [c.path for c in COMMANDS], ids=[c.name for c in COMMANDS])
def test_help_works_for_every_command(
    path: tuple[str, ...], no_side_effects: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not bad input, but the same walk: ``--help`` is exit 0 and usage on stdout."""
    monkeypatch.setenv("COLUMNS", "80")
    outcome = run_main([*path, "--help"])
    assert (outcome.code, outcome.err) == (0, "")
    assert outcome.out.startswith(f"usage: {' '.join(('gputui', *path))}")
    assert no_side_effects == []


def test_the_experiment_flags_are_checked_without_side_effects() -> None:
    """``validated_config`` is the experiment's whole pre-flight check, callable alone."""
    parser = gputui.commands.build_parser()
    args = parser.parse_args(["experiment", "sync-stall", "--data-dir", LONG_NAME])
    with pytest.raises(gputui.jobs.config.ConfigError, match="File name too long"):
        gputui.commands.experiment.validated_config(args)
    args = parser.parse_args(["experiment", "pipelines", "--batch-size", "8", "--steps", "3"])
    config = gputui.commands.experiment.validated_config(args)
    assert (config.experiment, config.batch_size, config.steps) == ("pipelines", 8, 3)


def test_an_experiment_s_device_error_from_its_child_is_one_usage_line(
    no_side_effects: list[str],
) -> None:
    """The child refuses the device (it needs torch to judge it): exit 2, one printable line."""
    StubChild.script = [
        Error(message="cuda:7: there is no GPU 7\x1b[0m\n(usable: cpu)", kind="device")
    ]
    outcome = run_main(["experiment", "sync-stall", "--device", "cuda:7"])
    line = assert_one_line_usage_error(outcome, "gputui experiment sync-stall")
    assert line.startswith("gputui experiment sync-stall: error: cuda:7: there is no GPU 7\\x1b")


def test_an_experiment_that_crashes_says_so_once(no_side_effects: list[str]) -> None:
    """Not bad input: exit 1, and the error is one line, written once (not also as progress)."""
    StubChild.script = [Error(message="the experiment crashed: boom\nat line 2", kind="crash")]
    outcome = run_main(["experiment", "pipelines", "--device", "cpu"])
    assert (outcome.code, outcome.exited) == (1, False)
    assert outcome.err == (
        "gputui experiment pipelines: error: the experiment crashed: boom\\nat line 2\n"
    )


def test_bench_turns_the_child_s_config_error_into_one_usage_line(
    no_side_effects: list[str],
) -> None:
    """``--batch-size`` above the images loaded: only the child knows; it says kind=config."""
    message = "batch size 100,000 is larger than the 50,000 training images: use at most 50,000"
    StubChild.script = [Error(message=message, kind="config")]
    outcome = run_main(["bench", "--device", "cpu", "--batch-size", "100000"])
    line = assert_one_line_usage_error(outcome, "gputui bench")
    assert line == f"gputui bench: error: {message} (see 'gputui bench --help')"


# --- fuzzing -----------------------------------------------------------------------------

FUZZ_WORDS = sorted({word for c in COMMANDS for word in c.path} | set(ALL_FLAGS))
VALUES = (
    "0",
    "1",
    "2",
    "19",
    "0.25",
    "60",
    "-1",
    "nan",
    "inf",
    "",
    " ",
    "cpu",
    "cuda",
    "synthetic",
    "auto",
    "classic",
    "fp32",
    "bf16",
    "32,64",
    "-h",
    "--",
    "-",
    "=",
)
FUZZ_SETTINGS = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _word(command: Command) -> st.SearchStrategy[str]:
    own = sorted(s for a in command.parser._actions for s in a.option_strings) or FUZZ_WORDS
    return st.one_of(
        st.sampled_from(own),
        st.sampled_from(FUZZ_WORDS),
        st.sampled_from(VALUES),
        st.text(max_size=12),
        st.builds("{}={}".format, st.sampled_from(own), st.text(max_size=6)),
    )


def _argv(command: Command) -> st.SearchStrategy[list[str]]:
    return st.lists(_word(command), max_size=7).map(lambda rest: [*command.path, *rest])


ARGV = st.sampled_from(COMMANDS).flatmap(_argv)
"""A command's words, then a mixture of its flags, any flag, plausible values and junk."""


def check_outcome(outcome: Outcome) -> None:
    """What any command line may do: exit 0/1/2; a 2 is one line; never a traceback."""
    assert "Traceback" not in outcome.err + outcome.out
    if outcome.code == 2:
        assert_one_line_usage_error(outcome)
    elif outcome.exited:  # --help, --version
        assert outcome.code == 0 and outcome.err == "" and outcome.out, outcome
    else:
        assert outcome.code in {0, 1}, outcome  # 1: a stand-in child stops without a result


@FUZZ_SETTINGS
@given(argv=ARGV)
def test_fuzzed_command_lines_never_escape_the_usage_error(
    argv: list[str], no_side_effects: list[str]
) -> None:
    check_outcome(run_main(argv))


VALUE_ACTIONS = [
    (command, action)
    for command in COMMANDS
    for action in flags(command.parser)
    if takes_value(action)
]


@FUZZ_SETTINGS
@given(
    target=st.sampled_from(VALUE_ACTIONS),
    value=st.one_of(st.text(max_size=20), st.sampled_from(NUMBER_BAD + CHOICE_BAD)),
)
def test_any_value_for_any_flag_is_taken_or_refused_in_one_line(
    target: tuple[Command, argparse.Action], value: str, no_side_effects: list[str]
) -> None:
    command, action = target
    flag = action.option_strings[0]
    outcome = run_main([*command.path, f"{flag}={value}"])
    check_outcome(outcome)
    if outcome.exited and outcome.code == 2:  # the parser refused it: the error names the flag
        assert f"argument {flag}" in outcome.err, outcome.err


# --- real runs: python -m gputui ---------------------------------------------------------


def start_gputui(*args: str) -> subprocess.Popen[str]:
    """Start ``python -m gputui ARGS`` as a user would (argv passes through the OS as bytes)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("FAKE_NVML")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", "gputui", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )


def assert_real_usage_errors(runs: dict[str, list[str]]) -> None:
    """Run each command line at once, side by side; each must be exit 2 and one line."""
    started = {needle: start_gputui(*args) for needle, args in runs.items()}
    try:
        for needle, process in started.items():
            out, err = process.communicate(timeout=120)
            assert process.returncode == 2, (process.args, process.returncode, err)
            assert out == ""
            assert "Traceback" not in err
            assert err.endswith("\n") and err.count("\n") == 1, err
            assert err[:-1].isprintable(), repr(err)
            form = USAGE_LINE.fullmatch(err[:-1])
            assert form is not None and form.group(1) == prog_of(runs[needle]), err
            assert needle in err, err
    finally:
        for process in started.values():
            process.kill()
            process.wait()


def test_a_real_usage_error_is_one_printable_line() -> None:
    assert_real_usage_errors(
        {
            "gputui: error: unrecognized argument --nope\\nx": ["--nope\nx"],
            "gputui experiment batch-sweep: error: unrecognized argument --batch-size; did you "
            "mean --batch-sizes? (see 'gputui experiment batch-sweep --help')\n": [
                "experiment",
                "batch-sweep",
                "--batch-size",
                "64",
            ],
            "argument --interval: '\\udcff'": ["--interval", "\udcff"],  # the byte 0xff
            "ignored explicit argument '\\x1b[2J'": ["bench", "--json=\x1b[2J"],
        }
    )


TINY = ["--dataset", "synthetic", "--limit", "64", "--batch-size", "32", "--threads", "1"]


def test_a_device_that_is_not_one_is_refused_in_one_printable_line() -> None:
    """Refused by the device's own parse, before any child: exit 2 and one line."""
    assert_real_usage_errors(
        {
            "gputui bench: error: argument --device: 'cu\\nda💥' is not a device": [
                "bench",
                "--device",
                "cu\nda💥",
                *TINY,
                "--no-record",
            ],
            "gputui experiment sync-stall: error: argument --device: 'cuda:\\x1b1' is not a "
            "device": [
                "experiment",
                "sync-stall",
                "--device",
                "cuda:\x1b1",
                *TINY,
                "--steps",
                "1",
            ],
        }
    )


# --- GPUTUI_READONLY: the environment's one switch of the monitor -------------------------

READONLY_BAD = ("yes", "true", "on", "2", "-1", " 1", "1 ", "01", "1\n", "\x1b[31m", "💥", "\udcff")
"""Not ``1``, ``0`` or empty: refused, so that a typo never leaves the kill keys working."""


@pytest.mark.parametrize("value", [*READONLY_BAD, "x" * 5000], ids=_short)
def test_a_bad_gputui_readonly_is_one_usage_line(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked before anything else the monitor needs (here: no terminal, so nothing past the
    check could start), and the line names the variable."""
    monkeypatch.setenv("GPUTUI_READONLY", value)
    monkeypatch.setattr(gputui.commands, "not_a_terminal", lambda: "standard input")
    for argv in ([], ["--readonly"]):
        line = assert_one_line_usage_error(run_main(argv), "gputui")
        assert "GPUTUI_READONLY must be 1 (read-only) or 0, not " in line, line
        assert len(line) < 200


@pytest.mark.parametrize(
    ("flag", "value", "readonly"),
    [
        (False, None, False),
        (False, "", False),
        (False, "0", False),
        (False, "1", True),
        (True, None, True),
        (True, "0", True),  # the flag wins: either one makes the monitor read-only
    ],
)
def test_readonly_is_the_flag_or_gputui_readonly_1(
    flag: bool, value: str | None, readonly: bool
) -> None:
    environ = {} if value is None else {"GPUTUI_READONLY": value}
    assert gputui.commands.readonly_wanted(flag, environ) is readonly


def test_a_real_bad_gputui_readonly_is_one_line() -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith("FAKE_NVML")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["GPUTUI_READONLY"] = "yes"
    done = subprocess.run(
        [sys.executable, "-m", "gputui"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "gputui: error: GPUTUI_READONLY must be 1 (read-only) or 0, not 'yes' "
        "(see 'gputui --help')\n"
    )
