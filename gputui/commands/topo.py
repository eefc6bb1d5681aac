"""``gputui topo [--json] [--timeout SECONDS]``: how the NVIDIA GPUs reach each other.

Exit status: 0 with a topology, 1 when there is none (no NVML, no GPU, a driver that did not
answer in time), 2 for a usage error.
"""

from __future__ import annotations

import argparse
from typing import Any

from gputui.commands.args import examples, seconds
from gputui.commands.output import write_out
from gputui.exits import EXIT_FAILED, EXIT_OK
from gputui.telemetry.polling import NVML_TIMEOUT_S, read_nvml_topology
from gputui.telemetry.topology import render_topology_json, render_topology_text

timeout_seconds = seconds(1, 600, "--timeout", NVML_TIMEOUT_S)


def add_topo_command(commands: Any) -> argparse.ArgumentParser:
    """Add ``topo`` to ``gputui``'s subcommands (``commands`` is ``add_subparsers()``)."""
    topo: argparse.ArgumentParser = commands.add_parser(
        "topo",
        help="print how the NVIDIA GPUs reach each other (NVLink, PCIe), as nvidia-smi topo -m",
        description=(
            "Print a matrix of the NVIDIA GPUs, as `nvidia-smi topo -m` does: for each pair, "
            "the NVLink links between them (NV#), else where their PCIe paths meet (PIX, PXB, "
            "PHB, NODE, SYS), with a legend; or JSON. The monitor shows the same on n. "
            "Exit status: 0 with a topology, 1 when there is none (no NVIDIA driver, no GPU, "
            "a driver that did not answer within --timeout), 2 for a usage error."
        ),
        epilog=examples(
            ("gputui topo", "the matrix and its legend"),
            ("gputui topo --json", "each pair's ancestor and links, as JSON"),
        ),
    )
    topo.add_argument("--json", action="store_true", help="print JSON instead of a matrix")
    topo.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=NVML_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long the NVIDIA driver may take, 1 to 600 (default: {NVML_TIMEOUT_S:g})",
    )
    topo.set_defaults(handler=run_topo_command)
    return topo


def run_topo_command(args: argparse.Namespace) -> int:
    """Read the topology once and print it; 1 when there is none."""
    topology = read_nvml_topology(args.timeout)
    write_out(render_topology_json(topology) if args.json else render_topology_text(topology))
    return EXIT_FAILED if topology.error is not None else EXIT_OK
