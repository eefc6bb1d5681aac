"""``gputui serve [--listen HOST:PORT] [--interval SECONDS] [--processes[=raw]] [--jobs]
[--tls-cert FILE --tls-key FILE]`` and ``gputui serve --print-rules | --print-dashboard``.

Exit status: 0 after SIGTERM, 130 after Ctrl+C, 2 for a usage error (an address that
cannot be listened on included). The server is imported in the handler.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from gputui.commands.args import argument_type, examples, interval_seconds, usage_error
from gputui.commands.output import write_out
from gputui.serve.listen import DEFAULT_LISTEN, ListenError, parse_listen

PROCESSES_REDACTED = "redacted"
"""``--processes`` alone: command lines with their secrets redacted."""
PROCESSES_RAW = "raw"
"""``--processes=raw``: command lines as they are."""


listen_address = argument_type(parse_listen, ListenError)
"""Parse ``--listen``: ``HOST:PORT``, an IPv6 host in brackets."""


def readable_file(text: str) -> str:
    """Parse ``--tls-cert`` and ``--tls-key``: a regular file this user may read."""
    try:
        usable = os.path.isfile(text) and os.access(text, os.R_OK)
    except (OSError, ValueError):  # a null byte, a name too long
        usable = False
    if not usable:
        shown = text if len(text) <= 60 else f"{text[:57]}..."
        raise argparse.ArgumentTypeError(f"{shown!r} is not a file that can be read")
    return text


def add_serve_command(commands: Any) -> argparse.ArgumentParser:
    """Add ``serve`` to ``gputui``'s subcommands (``commands`` is ``add_subparsers()``)."""
    serve: argparse.ArgumentParser = commands.add_parser(
        "serve",
        help="serve the readings to Prometheus (GET /metrics) and as JSON (GET /snapshot)",
        description=(
            "Run an exporter: sample the host and every GPU every --interval seconds, on "
            "threads of their own, and serve the latest readings over HTTP until stopped: GET "
            "/metrics in Prometheus's text format, GET /snapshot as `gputui snapshot --json` "
            "prints it. A scrape never waits for the driver; gputui_sample_age_seconds says "
            "how old the readings are. Read-only. Prints the address it listens on. "
            "--print-rules and --print-dashboard print Prometheus alerting rules or a Grafana "
            "dashboard over these series instead, and exit 0. Exit status: 0 after SIGTERM, "
            "130 after Ctrl+C, 2 for a usage error."
        ),
        epilog=examples(
            ("gputui serve", "serve this machine only, on http://127.0.0.1:9922"),
            (
                "gputui serve --listen 0.0.0.0:9922 --interval 5 --processes",
                "listen on every network, sampling every 5 seconds,\nwith each GPU's processes",
            ),
            (
                "gputui serve --print-rules",
                "print alerting rules for Prometheus, serving nothing",
            ),
        ),
    )
    serve.add_argument(
        "--listen",
        type=listen_address,
        metavar="HOST:PORT",
        help=f"address to serve on, :PORT for every IPv4 address (0.0.0.0:PORT), [IPv6]:PORT for "
        "IPv6, port 0 for any free port "
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
        nargs="?",
        const=PROCESSES_REDACTED,
        choices=(PROCESSES_REDACTED, PROCESSES_RAW),
        metavar="raw",
        help="also serve the processes on each GPU: pid, user, command line and memory; "
        f"{PROCESSES_REDACTED} (the default) shows the values of --password=, token= and the "
        f"like and URLs' credentials in command lines as ***, {PROCESSES_RAW} as they are",
    )
    serve.add_argument(
        "--jobs",
        action="store_true",
        help="also serve the GPU memory and SM use of each container, Kubernetes pod and "
        "Slurm job, its processes' added up (labels kind and name; no pid, no command line)",
    )
    serve.add_argument(
        "--tls-cert",
        type=readable_file,
        metavar="FILE",
        help="serve HTTPS with this PEM certificate (with --tls-key)",
    )
    serve.add_argument(
        "--tls-key",
        type=readable_file,
        metavar="FILE",
        help="the PEM private key of --tls-cert",
    )
    printed = serve.add_mutually_exclusive_group()
    printed.add_argument(
        "--print-rules",
        action="store_true",
        help="print Prometheus alerting rules (YAML) over these series and exit, serving "
        "nothing: a GPU, NVML or the exporter down, ECC errors, a pending row remap, a "
        "slowdown, stale readings, an idle GPU whose memory is held",
    )
    printed.add_argument(
        "--print-dashboard",
        action="store_true",
        help="print a Grafana dashboard (JSON) over these series and exit, serving nothing: "
        "a row per host, a panel per reading",
    )
    serve.set_defaults(handler=run_serve_command)
    return serve


SERVING_FLAGS = {
    "listen": "--listen",
    "serve_interval": "--interval",
    "processes": "--processes",
    "tls_cert": "--tls-cert",
    "tls_key": "--tls-key",
}
"""The flags that only shape a running server, by ``dest``."""


def run_serve_command(args: argparse.Namespace) -> int:
    """Serve until stopped; 0 after SIGTERM, 130 after Ctrl+C, 2 if it cannot listen.
    ``--print-rules`` and ``--print-dashboard`` print and return 0."""
    if args.print_rules or args.print_dashboard:
        printing = "--print-rules" if args.print_rules else "--print-dashboard"
        serving = [flag for dest, flag in SERVING_FLAGS.items() if getattr(args, dest) is not None]
        if serving:
            return usage_error(
                "gputui serve",
                f"{printing} prints and exits, serving nothing: leave out {serving[0]}",
            )
        # only what is printed loads
        if args.print_rules:
            from gputui.serve.rules import rules_yaml

            write_out(rules_yaml(), end="")
        else:
            from gputui.serve.dashboard import dashboard_json

            write_out(dashboard_json(), end="")
        return 0
    # the exporter's modules (prometheus_client) load only to serve
    from gputui.serve.run import ServeError, serve
    from gputui.serve.tls import TlsError, server_context

    if (args.tls_cert is None) != (args.tls_key is None):
        given = "--tls-cert" if args.tls_key is None else "--tls-key"
        missing = "--tls-key" if args.tls_key is None else "--tls-cert"
        return usage_error("gputui serve", f"{given} needs {missing} too (or leave both out)")
    interval = args.serve_interval if args.serve_interval is not None else args.interval
    try:
        tls = None if args.tls_cert is None else server_context(args.tls_cert, args.tls_key)
        return serve(
            parse_listen(DEFAULT_LISTEN) if args.listen is None else args.listen,
            interval_s=interval,
            processes=args.processes is not None,
            jobs=args.jobs,
            raw_commands=args.processes == PROCESSES_RAW,
            tls=tls,
            announce=write_out,
        )
    except (ServeError, TlsError) as error:
        return usage_error("gputui serve", str(error))
