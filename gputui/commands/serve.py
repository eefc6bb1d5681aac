"""``gputui serve [--listen HOST:PORT] [--interval SECONDS] [--processes]``.

Exit status: 0 after SIGTERM, 130 after Ctrl+C, 2 for a usage error (an address that
cannot be listened on included). The server is imported in the handler.
"""

from __future__ import annotations

import argparse
from typing import Any

from gputui.commands.args import interval_seconds, usage_error
from gputui.serve.listen import DEFAULT_LISTEN, ListenAddress, ListenError, parse_listen


def listen_address(text: str) -> ListenAddress:
    """Parse ``--listen``: ``HOST:PORT``, an IPv6 host in brackets."""
    try:
        return parse_listen(text)
    except ListenError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_serve_command(commands: Any) -> argparse.ArgumentParser:
    """Add ``serve`` to ``gputui``'s subcommands (``commands`` is ``add_subparsers()``)."""
    serve = commands.add_parser(
        "serve",
        help="serve the readings to Prometheus (GET /metrics) and as JSON (GET /snapshot)",
        description=(
            "Sample the host and every GPU on threads of their own and serve the latest "
            "readings: GET /metrics in Prometheus's text format, GET /snapshot as "
            "`gputui snapshot --json` prints it. A scrape never waits for the driver; "
            "gputui_sample_age_seconds says how old the readings are. Read-only. "
            "Exit status: 0 after SIGTERM, 130 after Ctrl+C, 2 for a usage error."
        ),
    )
    serve.add_argument(
        "--listen",
        type=listen_address,
        default=parse_listen(DEFAULT_LISTEN),
        metavar="HOST:PORT",
        help=f"address to serve on, [IPv6]:PORT for IPv6, port 0 for any free port "
        f"(default: {DEFAULT_LISTEN}, this machine only)",
    )
    serve.add_argument(
        "--interval",
        dest="serve_interval",
        type=interval_seconds,
        metavar="SECONDS",
        help="seconds between samples, 0.25 to 60 (default: gputui's --interval, 1)",
    )
    serve.add_argument(
        "--processes",
        action="store_true",
        help="also serve the processes on each GPU: pid, user, command line and memory",
    )
    serve.set_defaults(handler=run_serve_command)
    return serve


def run_serve_command(args: argparse.Namespace) -> int:
    """Serve until stopped; 0 after SIGTERM, 130 after Ctrl+C, 2 if it cannot listen."""
    from gputui.serve.run import ServeError, serve

    interval = args.serve_interval if args.serve_interval is not None else args.interval
    try:
        return serve(args.listen, interval_s=interval, processes=args.processes)
    except ServeError as error:
        return usage_error("gputui serve", str(error))
