"""``gputui replay FILE`` (the monitor driven by a recording), ``gputui replay --summary FILE
[--json]``, and ``gputui snapshot --from FILE [--at TIME]``.

Exit status: 0 when the recording read to its end (a last line cut short by a recorder that
was killed included) or the replay was quit, 1 when a damaged line stopped the reading (what
came before it is still printed) or the recording holds no whole frame yet, 2 for a usage
error: a file that is not a recording, or of a newer format, included.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputui.commands.args import examples, recording_file, usage_error
from gputui.commands.output import failed, not_a_terminal, say, text_width, write_out
from gputui.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from gputui.format import one_line

if TYPE_CHECKING:
    from gputui.recording.reader import Problem, Recording


def add_replay_command(commands: Any) -> argparse.ArgumentParser:
    """Add ``replay`` to ``gputui``'s subcommands (``commands`` is ``add_subparsers()``)."""
    replay: argparse.ArgumentParser = commands.add_parser(
        "replay",
        help="replay a recording made by gputui record in the monitor (a fleet's in the fleet "
        "view), or sum it up",
        description=(
            "Open the monitor driven by a recording that `gputui record` wrote (a fleet's, "
            "recorded with --hosts, in the fleet view): every panel, "
            "the process table, the sparklines and health as they were shown, with a status "
            "line saying the recorded time (UTC, and since the start), the host, the speed and "
            "where the replay is. Keys: space pauses and plays, left and right step one "
            "recorded interval, [ and ] a minute, g goes to a time (an offset such as 1:02:03, "
            "a UTC time such as 03:00:00 UTC, start or end), - and + play slower and faster "
            "(0.25x to 16x), l loops. "
            "A replay is read-only: it sends no signal and starts no run. A damaged line "
            "stops the replay there, said in one line, after what came before. With "
            "--summary, print for each GPU the time it was recorded, its utilization and "
            "memory (mean, p95 and max), the energy it used, how long it was throttled and "
            "whether it stopped answering, and the processes that used it with their peak "
            "memory and time on it, as text or JSON (of a fleet, each host's time unreachable "
            "and each of its GPUs so). A recording of several files "
            "(--max-size) is read from FILE on; `gputui snapshot --from FILE --at TIME` prints "
            "one frame. Exit status: 0 when the file read to its end, 1 when a damaged line "
            "stopped the summary (the figures cover the frames before) or the file holds no "
            "whole frame yet, 2 for a usage error or a file that is not a recording."
        ),
        epilog=examples(
            ("gputui replay night.ndjson.gz", "the night in the monitor, from its start"),
            ("gputui replay night.ndjson.gz --speed 16 --loop", "fast, over and over"),
            ("gputui replay --summary night.ndjson.gz --json", "each GPU's night, as JSON"),
        ),
    )
    replay.add_argument(
        "file", nargs="?", type=recording_file, metavar="FILE", help="the recording to read"
    )
    replay.add_argument(
        "--summary", action="store_true", help="print each GPU's figures over the recording"
    )
    replay.add_argument("--json", action="store_true", help="with --summary, print JSON")
    replay.add_argument(
        "--speed",
        type=replay_speed,
        default=None,
        metavar="X",
        help="recorded seconds a second: 0.25, 0.5, 1, 2, 4, 8 or 16 (default: 1)",
    )
    replay.add_argument("--paused", action="store_true", help="start paused at the first frame")
    replay.add_argument("--loop", action="store_true", help="start again after the last frame")
    replay.set_defaults(handler=run_replay_command)
    return replay


def replay_speed(text: str) -> float:
    """Parse ``--speed``: one of the replay's speeds (``16``, ``0.25``, ``4x``)."""
    from gputui.recording.player import SPEEDS  # its imports are heavy: see run_replay_command

    try:
        speed = float(text.removesuffix("x"))
    except ValueError:
        speed = math.nan
    if speed not in SPEEDS:
        raise argparse.ArgumentTypeError(
            f"{one_line(text)[:20]!r} is not a replay speed: write 0.25, 0.5, 1, 2, 4, 8 or 16"
        )
    return speed


def run_replay_command(args: argparse.Namespace) -> int:
    """Replay the recording in the monitor, or print its summary; see the module docstring
    for the exit status."""
    # the recording's modules load here, off the path of `gputui --help`, which builds every
    # subcommand's parser
    from gputui.recording.frames import FLEET
    from gputui.recording.render import (
        render_fleet_summary_json,
        render_fleet_summary_text,
        render_summary_json,
        render_summary_text,
    )
    from gputui.recording.summary import summarise, summarise_fleet

    prog = "gputui replay"
    if args.file is None:
        return usage_error(prog, "name the recording: gputui replay FILE")
    if args.json and not args.summary:
        return usage_error(prog, "--json prints the summary as JSON: add --summary")
    if args.summary:
        playing = [flag for flag in ("speed", "paused", "loop") if getattr(args, flag)]
        if playing:
            wrong = f"--{playing[0]} is for the replay on screen: drop it or --summary"
            return usage_error(prog, wrong)
    recording = opened(prog, args.file)
    if recording is None:
        return EXIT_USAGE
    if not args.summary:
        return _replay(prog, recording, args)
    if recording.kind == FLEET:
        fleet = summarise_fleet(recording)
        if args.json:
            write_out(render_fleet_summary_json(fleet))
        else:
            write_out(render_fleet_summary_text(fleet, text_width()))
    else:
        summary = summarise(recording)
        if args.json:
            write_out(render_summary_json(summary))
        else:
            write_out(render_summary_text(summary, text_width()))
    return said(prog, recording.problem, "the figures cover the frames before it")


def _replay(prog: str, recording: Recording, args: argparse.Namespace) -> int:
    """The monitor (for a fleet's recording, the fleet view) driven by ``recording``, until
    the user quits."""
    # off `gputui --help`'s path, as in run_replay_command; Textual loads only to replay
    from gputui.recording.frames import FLEET
    from gputui.recording.player import FleetPlayer, Player

    player = FleetPlayer(recording) if recording.kind == FLEET else Player(recording)
    if player.current is None:  # (said first: no terminal would show it)
        problem = player.problem
        if problem is not None and not problem.cut:
            return said(prog, problem, "no frame comes before it")
        cut = "" if problem is None else f": {problem}"
        return failed(prog, f"{args.file} holds no whole frame yet{cut}")
    stream = not_a_terminal()
    if stream is not None:
        return usage_error(
            prog,
            f"the replay needs a terminal, and its {stream} is not one; for scripts use "
            "gputui replay --summary FILE or gputui snapshot --from FILE",
        )
    speed = args.speed if args.speed is not None else 1.0
    options = {"playing": not args.paused, "speed": speed, "loop": args.loop}
    if isinstance(player, FleetPlayer):
        # Textual loads only to replay
        from gputui.ui.fleet.replay import run_fleet_replay

        return run_fleet_replay(player, **options)
    # (as above)
    from gputui.ui.monitor.replay import ReplayApp

    app = ReplayApp(player, **options)
    app.run()
    return app.return_code or EXIT_OK


def opened(prog: str, path: Path) -> Recording | None:
    """The recording, or ``None`` after one usage line saying why it cannot be read."""
    from gputui.recording.reader import Recording, RecordingError  # see run_replay_command

    try:
        return Recording.open(path)
    except RecordingError as error:
        usage_error(prog, str(error))
        return None


def said(prog: str, problem: Problem | None, after: str) -> int:
    """Say on standard error where reading stopped early, if it did: 0 for a last line cut
    short (a recorder killed mid-write), 1 for a damaged one."""
    if problem is None:
        return EXIT_OK
    if problem.cut:
        say(f"{prog}: note: {problem}")
        return EXIT_OK
    say(f"{prog}: warning: {problem}; {after}")
    return EXIT_FAILED
