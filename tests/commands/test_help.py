"""What a new user reads: every command's ``--help`` and the README's usage block.

Walked from the real parser (``tests.commands.test_bad_input.walk``), so a command or flag
added later is held to the same rules at once: a description, two or three examples
that really run, ranges written one way, no word left unexplained, and the README's
usage block listing exactly the flags each command has.
"""

from __future__ import annotations

import argparse
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from gputui.commands import build_parser
from gputui.commands.args import chosen_parser
from tests.commands.test_bad_input import (
    COMMANDS,
    Command,
    flags,
    no_side_effects,  # noqa: F401 (a fixture)
    run_main,
)
from tests.helpers import ROOT, gputui
from tests.recording.made import write

EXAMPLES_HEADING = "examples:"


def examples(parser: argparse.ArgumentParser) -> list[str]:
    """The command lines of a parser's epilog: its lines that start ``  gputui``.

    Each may be followed by lines indented further that say what it does.
    """
    _, _, block = (parser.epilog or "").partition(EXAMPLES_HEADING + "\n")
    return [line.strip() for line in block.splitlines() if line.startswith("  gputui")]


EXAMPLES = [(command, line) for command in COMMANDS for line in examples(command.parser)]
EXAMPLE_IDS = [line for _, line in EXAMPLES]


def help_page(command: Command, columns: int = 80) -> str:
    """``gputui ... --help`` as a user sees it in a terminal ``columns`` wide."""
    done = gputui(*command.path, "--help", knobs={"COLUMNS": str(columns)})
    assert (done.returncode, done.stderr) == (0, "")
    return done.stdout


def help_texts(command: Command) -> list[str]:
    """Everything written for ``command``'s help: its description, epilog and every
    shown flag's help (``%(default)s`` and the like filled in, as argparse shows them)."""
    parser = command.parser
    texts = [parser.description or "", parser.epilog or ""]
    formatter = parser._get_formatter()
    for action in parser._actions:
        if action.help and action.help != argparse.SUPPRESS:
            texts.append(formatter._expand_help(action))
        if isinstance(action, argparse._SubParsersAction):
            texts.extend(choice.help or "" for choice in action._choices_actions)
    return texts


# --- descriptions and examples -----------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_every_command_says_what_it_does_and_gives_examples(command: Command) -> None:
    """A description of one paragraph (what it does and prints), then two or three examples."""
    description = command.parser.description or ""
    assert len(description) >= 150, f"{command.name}: too short to say what it does and prints"
    assert "\n" not in description, f"{command.name}: the description is one paragraph"
    epilog = command.parser.epilog or ""
    assert epilog.startswith(EXAMPLES_HEADING + "\n"), command.name
    assert 2 <= len(examples(command.parser)) <= 3, epilog


def test_gputui_and_its_package_name_every_vendor_it_reads() -> None:
    """The top ``--help`` and the package's description once left out AMD and Intel."""
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["description"]
    for text in (build_parser().description or "", package):
        assert all(vendor in text for vendor in ("NVIDIA", "AMD", "Intel", "MPS")), text


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_the_examples_are_shown_as_written_and_the_prose_is_wrapped(command: Command) -> None:
    """argparse's own formatter runs an epilog's lines together into one paragraph; the
    examples must keep their lines, while the description still wraps to the terminal."""
    for columns in (60, 100):
        page = help_page(command, columns)
        lines = page.splitlines()
        for line in examples(command.parser):
            assert f"  {line}" in lines, f"{line!r} is not a line of {command.name} --help"
        after_usage = page.split("\n\n", 1)[1].splitlines()  # argparse cannot cut a usage
        assert max(len(line) for line in after_usage if not line.startswith("  gputui")) <= columns
        first_words = " ".join((command.parser.description or "").split()[:3])
        assert first_words in " ".join(page.split())  # wrapped, not cut


@pytest.mark.parametrize(("command", "line"), EXAMPLES, ids=EXAMPLE_IDS)
def test_every_example_parses_and_passes_every_check_before_a_child_starts(
    command: Command,
    line: str,
    no_side_effects: list[str],  # noqa: F811 (the fixture)
) -> None:
    """Each example is a valid command line for the command it illustrates: parsed by the
    real parser, then run through ``main`` with every side effect replaced by a recorder
    (the trainer's and the experiment's children included), so that a pair of flags that
    is refused together fails here too."""
    words = shlex.split(line)
    assert words[0] == "gputui"
    parser = build_parser()
    try:
        args = parser.parse_args(words[1:])
    except SystemExit:  # argparse's way of refusing it
        pytest.fail(f"{line!r} does not parse")
    chosen = chosen_parser(parser, args).prog  # the command or one under it (an experiment)
    assert f"{chosen} ".startswith(f"{command.name} "), chosen
    for name in (word for word in words if ".ndjson" in word and words[1] == "replay"):
        if not Path(name).exists():  # the recording it replays, in the commands' folder
            write(Path(name), 3, codec="gzip")
    outcome = run_main(words[1:])
    assert outcome.code != 2, outcome
    assert "error:" not in outcome.err, outcome


def quick(line: str) -> bool:
    """Whether an example is cheap enough to run for real here: a tiny run on generated
    images (``--limit``), or one that reads only this machine (``snapshot``,
    ``doctor --quick``)."""
    words = shlex.split(line)
    if words[1:2] == ["scale"]:  # ranks: run once, by test_distributed's row test, with --json
        return False
    if "--limit" in words:
        assert "--dataset" in words and "synthetic" in words, f"{line!r} would read CIFAR-10"
        return True
    local = not {"--hosts", "--hostfile", "--prometheus"} & set(words)
    return local and (words[1:2] == ["snapshot"] or words[1:3] == ["doctor", "--quick"])


QUICK = list(dict.fromkeys(line for _, line in EXAMPLES if quick(line)))


def test_every_job_command_has_a_quick_example() -> None:
    """A new user can try bench and each experiment in seconds, as its help shows."""
    for name in ("bench", "batch-sweep", "sync-stall", "pipelines"):
        assert any(f" {name} " in line for line in QUICK), name


@pytest.mark.timeout(300)
@pytest.mark.parametrize("line", QUICK)
def test_the_quick_examples_run(line: str, tmp_path: Path) -> None:
    """Really run: exit 0, output on standard output, nothing said wrong (seconds each on a
    quiet machine)."""
    state, cache = tmp_path / "state", tmp_path / "cache"
    knobs = {"XDG_STATE_HOME": str(state), "XDG_CACHE_HOME": str(cache)}
    done = gputui(*shlex.split(line)[1:], knobs=knobs, timeout_s=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert "error" not in done.stderr


# --- the words ---------------------------------------------------------------------------

RANGE_WITH_A_DASH = re.compile(r"\d\s*(?:-|–|\.\.)\s*\d")
"""``0-19``, ``0 - 19``, ``0–19``, ``0..19``: a range not written ``0 to 19``."""


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_ranges_are_written_one_way(command: Command) -> None:
    for text in help_texts(command):
        assert not RANGE_WITH_A_DASH.search(text), f"write 'A to B': {text!r}"


def test_every_range_reads_a_to_b() -> None:
    """The flags with bounds say them, in the one form."""
    for flag, words in (
        ("--interval", "0.25 to 60"),
        ("--threads", "1 to 1024"),
        ("--nice", "0 to 19"),
        ("--workers", "0 to 256"),
        ("--timeout", "1 to 60"),
    ):
        assert any(
            words in (action.help or "")
            for command in COMMANDS
            for action in flags(command.parser)
            if flag in action.option_strings
        ), flag


JARGON = {
    "seed 00": None,  # the notebooks gputui came from: a name a new user has never seen
    "resident": "copied to the device once",
    "classic": "DataLoader",
    "pinned": "page-locked",
    "pageable": "ordinary",
    "sync stall": "wait",
    "tf32": "tensor cores",
    "bf16": "bfloat16",
}
"""Words a new user may not know: each is explained (by the phrase given) on every help page
that uses it; ``None``: never used."""


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_no_word_is_left_unexplained(command: Command) -> None:
    page = " ".join(" ".join(help_texts(command)).split()).lower()
    for word, explained in JARGON.items():
        if word in page:
            assert explained is not None, f"{command.name} --help says {word!r}"
            assert explained.lower() in page, f"{command.name} --help: {word!r} unexplained"


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_every_flag_says_what_it_does(command: Command) -> None:
    """Not only its default (``--epochs N  default: 2``), and each choice is named."""
    formatter = command.parser._get_formatter()
    for action in flags(command.parser):
        if action.help == argparse.SUPPRESS:
            continue
        text = formatter._expand_help(action)
        assert not re.fullmatch(r"\(?default: [^;()]*\)?", text), f"{action.dest}: {text!r}"
        for choice in action.choices or ():
            assert choice in text, f"{action.option_strings[0]} does not explain {choice!r}"


def test_limit_is_documented() -> None:
    """The README's quick runs use ``--limit``; its help says what it counts and its default."""
    for command in COMMANDS:
        for action in flags(command.parser):
            if "--limit" in action.option_strings:
                assert action.help != argparse.SUPPRESS, command.name
                assert "training images" in action.help
                assert "default: all 50,000" in action.help
                assert "--limit N" in help_page(command)


# --- the README --------------------------------------------------------------------------

README = ROOT / "README.md"
USAGE_START, USAGE_END = "<!-- usage:start -->", "<!-- usage:end -->"


def readme_usage() -> dict[str, set[str]]:
    """The flags the README's usage block lists, by command (``gputui bench``: ...).

    An entry starts at a line that starts ``gputui``, continues on the indented lines after
    it, and belongs to the longest command its first words name; ``#`` starts a comment.
    A word after the command that is not a flag (``batch-sweep|sync-stall``) is refused.
    """
    text = README.read_text()
    assert USAGE_START in text and USAGE_END in text
    block = text.split(USAGE_START, 1)[1].split(USAGE_END, 1)[0]
    names = sorted((c.path for c in COMMANDS), key=len, reverse=True)
    listed: dict[str, set[str]] = {}
    command = None
    for line in block.splitlines():
        line = re.sub(r"\s#.*", "", line)
        if line.startswith("gputui"):
            words = line.split()[1:]
            path = next(p for p in names if tuple(words[: len(p)]) == p)
            command = " ".join(("gputui", *path))
            after = words[len(path) : len(path) + 1]
            assert not after or after[0][0] in "-[", f"no such command: {line}"
        if command is not None:
            named = re.findall(r"(?<![\w-])--?[a-z][a-z0-9-]*", line)  # --output, -o
            listed.setdefault(command, set()).update(named)
    return listed


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_the_readme_lists_every_flag_of_every_command(command: Command) -> None:
    """Exactly the flags the parser shows (``--help`` aside): none missing, none stale."""
    shown = {
        option
        for action in command.parser._actions
        if action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)
        for option in action.option_strings
    }
    listed = readme_usage().get(command.name, set())
    assert not shown - listed, f"README's usage lacks {sorted(shown - listed)} ({command.name})"
    assert not listed - shown, f"README's usage lists {sorted(listed - shown)} ({command.name})"


def test_the_readme_says_how_long_the_test_suite_takes() -> None:
    """A new user starting the suite on a small machine is told what to expect."""
    text = " ".join(README.read_text().split())
    assert re.search(r"runs the test suite[^.]*, in about \d+ minutes on \d+ cores", text)
