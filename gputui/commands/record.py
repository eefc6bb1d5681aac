"""``gputui record [--output FILE] [--interval SECONDS] [--duration D] [--max-size SIZE]
[--keep N] [--hosts H:P,... | --hostfile FILE | --prometheus URL]``.

Exit status: 0 after the duration or SIGTERM, 130 after Ctrl+C, 1 when a write failed (a
full disk: what was written is kept), 2 for a usage error. The recorder is imported in the
handler.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any

from gputui.commands.args import examples, interval_seconds, new_file, usage_error, whole_number
from gputui.commands.fleet import add_fleet_arguments, fleet_named, fleet_source
from gputui.commands.output import write_out
from gputui.format import ellipsize, one_line

DURATION_MAX_S = 366 * 86400.0
"""The longest ``--duration``: a year."""
SIZE_MIN = 4096
"""The smallest ``--max-size``: a few frames of a big machine."""
_UNITS_S = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_UNITS_B = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(s|m|min|h|d)?", re.IGNORECASE)
_SIZE = re.compile(r"(\d+(?:\.\d+)?)(?:([kmgt])(?:i?b)?|b)?", re.IGNORECASE)


def duration(text: str) -> float:
    """Parse ``--duration``: seconds, or a number with ``s``, ``m`` (or ``min``), ``h`` or ``d``."""
    found = _DURATION.fullmatch(text)
    seconds = float(found.group(1)) * _UNITS_S[(found.group(2) or "").lower()] if found else 0.0
    if not 0 < seconds <= DURATION_MAX_S:
        raise argparse.ArgumentTypeError(
            f"{ellipsize(text, 40)!r} is not a duration from 1 s to 366 d: write 90 (seconds), "
            "30m, 8h or 2d"
        )
    return seconds


def size(text: str) -> int:
    """Parse ``--max-size``: bytes, or a number with ``K``, ``M``, ``G`` or ``T`` (binary
    units: ``100M`` is 100 MiB)."""
    found = _SIZE.fullmatch(text)
    count = 0
    if found and len(text) < 32:
        count = int(float(found.group(1)) * _UNITS_B[(found.group(2) or "").lower()])
    if count < SIZE_MIN:
        raise argparse.ArgumentTypeError(
            f"{ellipsize(text, 40)!r} is not a size of 4K or more: write 100M, 2G or 4096 (bytes)"
        )
    return count


def default_file(now: dt.datetime, host: str, codec: str, copy: int = 1) -> Path:
    """Where a recording goes without ``--output``: ``gputui-HOST-20261126-030000.ndjson.zst``
    in the current folder (``-030000-2`` for the second started in that second)."""
    suffix = {"zstd": ".ndjson.zst", "gzip": ".ndjson.gz"}.get(codec, ".ndjson")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", host) or "host"
    return Path(f"gputui-{name}-{now:%Y%m%d-%H%M%S}{f'-{copy}' if copy > 1 else ''}{suffix}")


def add_record_command(commands: Any) -> argparse.ArgumentParser:
    """Add ``record`` to ``gputui``'s subcommands (``commands`` is ``add_subparsers()``)."""
    # off `gputui --help`'s path: the recorder's modules load to record
    from gputui.recording.codec import ZSTD_INSTALL

    record: argparse.ArgumentParser = commands.add_parser(
        "record",
        help="record this machine's readings, or a fleet's, to a file, to replay later anywhere",
        description=(
            "Record what the monitor reads (the host, every GPU with its health and "
            "processes, MPS) every --interval seconds into a file, one frame a line in the "
            "JSON of `gputui snapshot --json`, each frame only what changed since the last "
            "whole one, with an index beside the file for seeking. The name says the "
            f"compression: .zst for zstd (needs the zstandard module: {ZSTD_INSTALL}), .gz "
            "for gzip, .ndjson for none; any other name gets zstd where it is installed, "
            "else gzip. Command lines have their secrets redacted. A recorder killed at any "
            "moment leaves a file that replays up to its last whole frame. Read it back with "
            "`gputui replay --summary FILE` or `gputui snapshot --from FILE --at TIME`. Exit "
            "status: 0 after --duration or SIGTERM, 130 after Ctrl+C, 1 when a write failed "
            "(a full disk: what was written is kept), 2 for a usage error. With --hosts, "
            "--hostfile or --prometheus it records a fleet as the fleet view reads it, each "
            "frame every host in the JSON of `gputui snapshot --hosts ... --json`: whether it "
            "answered (and why not), its GPUs."
        ),
        epilog=examples(
            (
                "gputui record --output night.ndjson.gz --duration 8h",
                "eight hours into a gzip file",
            ),
            (
                "gputui record --interval 5 --max-size 100M --keep 10",
                "every 5 s, a new file each 100 MiB, the newest 10 kept",
            ),
            (
                "gputui record --hosts node1,node2",
                "two hosts, as the fleet view reads them, until Ctrl+C",
            ),
        ),
    )
    record.add_argument(
        "--output",
        "-o",
        type=new_file,
        metavar="FILE",
        help="the file to write, which must not exist; later files take its name with .1, "
        ".2... before the suffixes (default: gputui-HOST-DATE-TIME.ndjson.zst here, "
        "gputui-fleet-... for a fleet, .gz without zstandard)",
    )
    record.add_argument(
        "--interval",
        dest="record_interval",
        type=interval_seconds,
        metavar="SECONDS",
        help="seconds between samples, 0.25 to 60 (default: gputui's --interval, 1)",
    )
    record.add_argument(
        "--duration",
        type=duration,
        metavar="D",
        help="stop after this long: seconds, or 30m, 8h, 2d (default: until Ctrl+C or SIGTERM)",
    )
    record.add_argument(
        "--max-size",
        type=size,
        metavar="SIZE",
        help="start a new file once one reaches SIZE bytes, or 100M, 2G (binary units; at "
        "least 4K); every file is kept unless --keep says (default: one file)",
    )
    record.add_argument(
        "--keep",
        type=whole_number(1),
        metavar="N",
        help="with --max-size: keep the newest N files, deleting the oldest (with its index) "
        "as a new one starts; replay and snapshot --from read from the oldest left, by the "
        "first file's name (default: keep every file)",
    )
    add_fleet_arguments(record)
    record.set_defaults(handler=run_record_command)
    return record


def run_record_command(args: argparse.Namespace) -> int:
    """Record until stopped; see the module docstring for the exit status."""
    # the recorder's modules (0.4 s of imports) load only to record
    from gputui.recording.codec import codec_for_name, default_codec, zstd_missing
    from gputui.recording.recorder import FleetSampled, record
    from gputui.recording.writer import cannot_write

    prog = "gputui record"
    if args.keep is not None and args.max_size is None:
        return usage_error(prog, "--keep needs --max-size: without it there is only one file")
    fleet = fleet_named(args)
    now, name, copy = dt.datetime.now(), "fleet" if fleet else socket.gethostname(), 1
    path = args.output or default_file(now, name, default_codec())
    codec = codec_for_name(path)
    missing = zstd_missing(path, codec)
    if missing is not None:
        return usage_error(prog, missing)
    interval = args.record_interval if args.record_interval is not None else args.interval
    sampled = None
    if fleet:
        source, read_from, what = fleet_source(args, interval)
        sampled = FleetSampled(source, read_from, what, time.monotonic)
    while True:
        try:
            return record(
                path,
                interval_s=interval,
                codec=codec,
                duration_s=args.duration,
                max_size=args.max_size,
                keep=args.keep,
                sampled=sampled,
                announce=lambda line: write_out(one_line(line)),  # (the path is the user's)
                err=sys.stderr,
            )
        except OSError as error:
            if args.output is not None or not isinstance(error, FileExistsError):
                return usage_error(prog, cannot_write(error, path))
            copy += 1  # another recorder started in the same second: the next name
            path = default_file(now, name, codec, copy)
