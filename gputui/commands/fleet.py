"""A fleet on the command line: ``--hosts``, ``--hostfile`` and ``--prometheus``.

Both the monitor (``gputui --hosts ...`` opens the fleet view) and ``gputui snapshot``
take them; the fleet package is imported in the handlers.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

from gputui.commands.args import argument_type, seconds
from gputui.commands.output import failed, terminal_columns, write_out
from gputui.exits import EXIT_FAILED, EXIT_OK
from gputui.fleet.targets import DEFAULT_TIMEOUT_S, Target, TargetError, parse_hosts, read_hostfile
from gputui.format import fmt_counted
from gputui.telemetry.polling import NVML_TIMEOUT_S

if TYPE_CHECKING:
    from gputui.fleet.hosts import FleetSource

host_timeout_seconds = seconds(1, 60, "--timeout", DEFAULT_TIMEOUT_S)
"""Parse ``--timeout``: how long one host, or this machine's NVIDIA driver, may take."""


hosts_list = argument_type(parse_hosts, TargetError)
"""Parse ``--hosts``."""
host_file = argument_type(read_hostfile, TargetError)
"""Parse ``--hostfile``: the file is read as the command line is parsed."""


def prometheus_url(text: str) -> str:
    """Parse ``--prometheus``: a Prometheus server's address, ``http(s)://HOST:PORT``."""
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        port = 0
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Prometheus address: write http://HOST:9090"
        )
    return text


def add_fleet_arguments(parser: argparse.ArgumentParser, dest_prefix: str = "") -> None:
    """``--hosts``, ``--hostfile`` and ``--prometheus``: one of them at most, their
    attributes' names after ``dest_prefix`` (the monitor's own use ``app_``, so that a
    subcommand's defaults never overwrite them)."""
    fleet = parser.add_mutually_exclusive_group()
    fleet.add_argument(
        "--hosts",
        dest=f"{dest_prefix}hosts",
        type=hosts_list,
        metavar="H:P,...",
        help="read these hosts' exporters (gputui serve, dcgm-exporter or nvitop-exporter); "
        "a host without a port is read on gputui serve's port, 9922",
    )
    fleet.add_argument(
        "--hostfile",
        dest=f"{dest_prefix}hostfile",
        type=host_file,
        metavar="FILE",
        help="read the hosts named in FILE, one HOST:PORT a line (# starts a comment)",
    )
    fleet.add_argument(
        "--prometheus",
        dest=f"{dest_prefix}prometheus",
        type=prometheus_url,
        metavar="URL",
        help="read every GPU host a Prometheus server scrapes, e.g. http://HOST:9090",
    )


def add_snapshot_fleet_arguments(snapshot: argparse.ArgumentParser) -> None:
    """The fleet flags, and ``--timeout``, on ``gputui snapshot``: its default depends on
    whether hosts are read or this machine."""
    add_fleet_arguments(snapshot)
    snapshot.add_argument(
        "--timeout",
        type=host_timeout_seconds,
        default=None,
        metavar="SECONDS",
        help=f"how long to wait, 1 to 60 seconds: for this machine's NVIDIA driver "
        f"(default: {NVML_TIMEOUT_S:g}), or with hosts for each host (default: "
        f"{DEFAULT_TIMEOUT_S:g}), its whole answer (--prometheus: all of Prometheus's); a GPU "
        "or host that has not answered by then is shown as hung or down, and the exit code "
        "is 1",
    )


def targets_of(args: argparse.Namespace, dest_prefix: str = "") -> tuple[Target, ...] | None:
    """The hosts ``--hosts`` or ``--hostfile`` named, if either was given."""
    hosts = getattr(args, f"{dest_prefix}hosts") or getattr(args, f"{dest_prefix}hostfile")
    return cast("tuple[Target, ...] | None", hosts)


def fleet_named(args: argparse.Namespace, dest_prefix: str = "") -> bool:
    """Whether ``--hosts``, ``--hostfile`` or ``--prometheus`` was given."""
    return targets_of(args, dest_prefix) is not None or bool(
        getattr(args, f"{dest_prefix}prometheus")
    )


def fleet_source(
    args: argparse.Namespace, interval_s: float, dest_prefix: str = ""
) -> tuple[FleetSource, str, str]:
    """The source that reads the fleet the flags name, every ``interval_s``: each host's
    exporter, or Prometheus. Returns it (not started), ``exporters`` or ``prometheus``, and
    the hosts in words (``3 hosts``, ``the GPU hosts Prometheus scrapes``)."""
    targets = targets_of(args, dest_prefix)
    if targets is not None:
        # one reader of the two loads: prometheus_client only for --prometheus
        from gputui.fleet.scrape import FleetPoller

        what = fmt_counted(len(targets), "host")
        return FleetPoller(targets, interval_s=interval_s), "exporters", what
    # (as above)
    from gputui.fleet.prometheus import PrometheusPoller

    url = getattr(args, f"{dest_prefix}prometheus")
    return (
        PrometheusPoller(url, interval_s=interval_s),
        "prometheus",
        "the GPU hosts Prometheus scrapes",
    )


def run_fleet_app(args: argparse.Namespace) -> int:
    """``gputui --hosts ...``, ``--hostfile`` or ``--prometheus``: the fleet view."""
    # Textual loads only when the fleet view runs
    from gputui.ui.fleet.app import run_fleet_app as run

    return run(fleet_source(args, args.interval, "app_")[0])


def run_fleet_snapshot(args: argparse.Namespace) -> int:
    """``gputui snapshot`` with a fleet: each host once; exit 1 when any did not answer."""
    # the fleet's readers load only when a fleet is read
    from gputui.fleet.prometheus import PrometheusError, read_prometheus
    from gputui.fleet.report import render_fleet_json, render_fleet_table
    from gputui.fleet.scrape import scrape_all

    targets = targets_of(args)
    timeout = DEFAULT_TIMEOUT_S if args.timeout is None else float(args.timeout)
    if targets is not None:
        hosts = scrape_all(targets, timeout)
    else:
        try:
            hosts = read_prometheus(args.prometheus, timeout)
        except PrometheusError as error:
            return failed("gputui snapshot", str(error))
    now = time.monotonic()
    if args.json:
        write_out(render_fleet_json(hosts, now))
    else:
        write_out(render_fleet_table(hosts, now, width=terminal_columns()))
    return EXIT_OK if all(host.up for host in hosts) else EXIT_FAILED
