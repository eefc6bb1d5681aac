"""A Grafana dashboard over ``gputui serve``'s series: ``gputui serve --print-dashboard``.

A row per host (repeated for each value of the ``instance`` variable), a panel per reading;
the ``job``, ``instance`` and ``gpu`` variables choose what is shown, and ``workload`` the
containers, pods and Slurm jobs of the per-job panels (``gputui serve --jobs``). The panels are data
here (:data:`PANELS`), so that a test can run every query against a real Prometheus.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gputui.serve.metrics import (
    BENIGN_THROTTLE_REASONS,
    GPU_INFO,
    GPU_PROCESS_MEMORY,
    GPU_THROTTLED,
    GPU_UP,
    JOB_MEMORY,
    JOB_SM,
    SAMPLE_AGE,
)

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
"""Every panel's and variable's data source: the one the ``datasource`` variable picks."""

HOST = 'job=~"$job", instance=~"$instance"'
"""The matchers of one host's series (the row's ``instance``)."""
GPUS = f'{HOST}, gpu=~"$gpu"'
"""The matchers of the chosen GPUs' series on one host."""
JOBS = f'{HOST}, name=~"$workload"'
"""The matchers of the chosen containers', pods' and Slurm jobs' series on one host."""


@dataclass(frozen=True, slots=True)
class Query:
    """One query of a panel."""

    expr: str
    """PromQL, with the dashboard's variables in it."""
    legend: str
    """Grafana's legend format (``GPU {{gpu}}``)."""


@dataclass(frozen=True, slots=True)
class Panel:
    """One panel of a host's row."""

    title: str
    """Its title."""
    description: str
    """What it shows, in the panel's info tooltip."""
    unit: str
    """Grafana's unit id (``percentunit``, ``bytes``, ``celsius``...)."""
    queries: tuple[Query, ...]
    """Its queries, each a set of lines."""
    kind: str = "timeseries"
    """Grafana's panel type: ``timeseries``, or ``state-timeline`` for a 0/1 state."""
    most: float | None = None
    """The axis' top, where the reading has one (a ratio's 1)."""


def _gpu_query(metric: str, legend: str = "") -> Query:
    """One series per GPU: ``metric`` on the chosen GPUs, named by vendor and index (``nvidia
    0``, ``amd 0``) and ``legend``."""
    return Query(f"{metric}{{{GPUS}}}", f"{{{{vendor}}}} {{{{gpu}}}} {legend}".rstrip())


def _gpu_rate(counter: str, legend: str) -> Query:
    """A counter's rate a second, one series per GPU, over Grafana's rate window."""
    return Query(
        f"rate({counter}{{{GPUS}}}[$__rate_interval])",
        f"{{{{vendor}}}} {{{{gpu}}}} {legend}",
    )


PANELS = (
    Panel(
        "GPUs answering",
        "Whether each GPU answers: down while the driver has lost it, cannot open it, or its "
        "calls hang (gputui_gpu_up).",
        "none",
        (_gpu_query(GPU_UP),),
        kind="state-timeline",
    ),
    Panel(
        "Utilization",
        "Share of time a kernel was running on the GPU.",
        "percentunit",
        (_gpu_query("gputui_gpu_utilization_ratio"),),
        most=1,
    ),
    Panel(
        "Memory",
        "Device memory in use, and installed.",
        "bytes",
        (
            _gpu_query("gputui_gpu_memory_used_bytes", "used"),
            _gpu_query("gputui_gpu_memory_total_bytes", "installed"),
        ),
    ),
    Panel(
        "Temperature",
        "GPU core temperature.",
        "celsius",
        (_gpu_query("gputui_gpu_temperature_celsius"),),
    ),
    Panel(
        "Power",
        "Power draw, and the enforced power limit.",
        "watt",
        (
            _gpu_query("gputui_gpu_power_watts"),
            _gpu_query("gputui_gpu_power_limit_watts", "limit"),
        ),
    ),
    Panel(
        "Clocks",
        "The SM and memory clocks now.",
        "hertz",
        (
            _gpu_query("gputui_gpu_sm_clock_hertz", "SM"),
            _gpu_query("gputui_gpu_memory_clock_hertz", "memory"),
        ),
    ),
    Panel(
        "Throttled GPUs by reason",
        "How many of the chosen GPUs have their clocks held down, by reason; an idle GPU's "
        "low clocks are left out. thermal and hw_thermal: too hot; hw_slowdown and "
        "hw_power_brake: the board asked it to slow down; power_cap: at its power limit; "
        "current_limit, peak_current_limit, vr_current_limit (AMD, Intel): at a current limit.",
        "short",
        (
            Query(
                f"sum by (reason) ({GPU_THROTTLED}{{{GPUS}, "
                f'reason!~"{"|".join(BENIGN_THROTTLE_REASONS)}"}})',
                "{{reason}}",
            ),
        ),
    ),
    Panel(
        "ECC errors and row remaps",
        "Uncorrected ECC errors since the driver was loaded, and whether a memory row remap "
        "waits for a GPU reset (1).",
        "short",
        (
            _gpu_query("gputui_gpu_ecc_uncorrected_errors_total", "uncorrected ECC errors"),
            _gpu_query("gputui_gpu_remapped_rows_pending", "row remap pending"),
        ),
    ),
    Panel(
        "Processes' GPU memory",
        "GPU memory each process uses (only where gputui serve runs with --processes).",
        "bytes",
        (_gpu_query(GPU_PROCESS_MEMORY, "pid {{pid}} {{user}}"),),
    ),
    Panel(
        "PCIe throughput",
        "Bytes a second received and sent over PCIe.",
        "Bps",
        (
            _gpu_query("gputui_gpu_pcie_rx_bytes_per_second", "received"),
            _gpu_query("gputui_gpu_pcie_tx_bytes_per_second", "sent"),
        ),
    ),
    Panel(
        "NVLink throughput",
        "Bytes a second received and sent over NVLink, every link (payload alone; only GPUs "
        "with NVLink).",
        "Bps",
        (
            _gpu_rate("gputui_gpu_nvlink_rx_bytes_total", "received"),
            _gpu_rate("gputui_gpu_nvlink_tx_bytes_total", "sent"),
        ),
    ),
    Panel(
        "GPU memory by job",
        "GPU memory the processes of each container, pod or Slurm job use, on every GPU of "
        "the host (only where gputui serve runs with --jobs).",
        "bytes",
        (Query(f"{JOB_MEMORY}{{{JOBS}}}", "{{kind}} {{name}}"),),
    ),
    Panel(
        "SMs busy by job",
        "GPUs' worth of SMs each container, pod or Slurm job kept busy: its processes' shares "
        "added up over the GPUs (only where gputui serve runs with --jobs).",
        "short",
        (Query(f"{JOB_SM}{{{JOBS}}}", "{{kind}} {{name}}"),),
    ),
    Panel(
        "Readings' age",
        "How old the oldest reading gputui serve serves is; it grows while sampling is stuck.",
        "s",
        (Query(f"{SAMPLE_AGE}{{{HOST}}}", "age"),),
    ),
)
"""The panels of each host's row, in order."""


@dataclass(frozen=True, slots=True)
class Variable:
    """One of the dashboard's query variables; each may take several values, or all."""

    name: str
    """Its name in queries (``$instance``)."""
    label: str
    """Its name on the dashboard."""
    query: str
    """Grafana's query for its values: ``label_values(SERIES, LABEL)``."""
    numeric: bool = False
    """Its values sort as numbers (GPU 2 before GPU 10) rather than as text."""


VARIABLES = (
    Variable("job", "Job", f"label_values({SAMPLE_AGE}, job)"),
    Variable("instance", "Host", f'label_values({SAMPLE_AGE}{{job=~"$job"}}, instance)'),
    Variable("gpu", "GPU", f"label_values({GPU_INFO}{{{HOST}}}, gpu)", numeric=True),
    Variable(
        "workload", "Container, pod or Slurm job", f"label_values({JOB_MEMORY}{{{HOST}}}, name)"
    ),
)
"""The query variables, each filtering the next."""

PANEL_WIDTH = 8
"""Three panels side by side (Grafana's grid is 24 wide)."""
PANEL_HEIGHT = 8


def dashboard() -> dict[str, object]:
    """The dashboard's JSON model, as Grafana imports it."""
    return {
        "title": "gputui: GPUs",
        "uid": "gputui-gpus",
        "description": "The readings of gputui serve, a row per host (gputui serve "
        "--print-dashboard).",
        "tags": ["gputui", "gpu"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "annotations": {"list": []},
        "templating": {"list": [_datasource_variable(), *map(_query_variable, VARIABLES)]},
        "panels": _panels(),
    }


def dashboard_json() -> str:
    """The dashboard as Grafana's "Import dashboard" takes it."""
    return json.dumps(dashboard(), indent=2) + "\n"


def _panels() -> list[dict[str, object]]:
    row: dict[str, object] = {
        "id": 1,
        "type": "row",
        "title": "$instance",
        "collapsed": False,
        "repeat": "instance",
        "gridPos": {"h": 1, "w": 24, "x": 0, "y": 0},
        "panels": [],
    }
    per_line = 24 // PANEL_WIDTH
    panels = [row]
    for number, panel in enumerate(PANELS):
        line, column = divmod(number, per_line)
        grid = {
            "h": PANEL_HEIGHT,
            "w": PANEL_WIDTH,
            "x": column * PANEL_WIDTH,
            "y": 1 + line * PANEL_HEIGHT,
        }
        panels.append(_panel(panel, number + 2, grid))
    return panels


def _panel(panel: Panel, number: int, grid: dict[str, int]) -> dict[str, object]:
    defaults: dict[str, object] = {"unit": panel.unit, "min": 0}
    if panel.most is not None:
        defaults["max"] = panel.most
    options: dict[str, object] = {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    if panel.kind == "state-timeline":
        defaults["mappings"] = [
            {
                "type": "value",
                "options": {
                    "0": {"text": "down", "color": "red", "index": 0},
                    "1": {"text": "up", "color": "green", "index": 1},
                },
            }
        ]
        defaults["color"] = {"mode": "thresholds"}
        options.update(showValue="never", mergeValues=True, rowHeight=0.9)
    return {
        "id": number,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": grid,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": [
            {
                "refId": chr(ord("A") + index),
                "datasource": DATASOURCE,
                "expr": query.expr,
                "legendFormat": query.legend,
                "range": True,
            }
            for index, query in enumerate(panel.queries)
        ],
    }


def _datasource_variable() -> dict[str, object]:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
    }


def _query_variable(variable: Variable) -> dict[str, object]:
    return {
        "name": variable.name,
        "label": variable.label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": variable.query,
        "definition": variable.query,
        "refresh": 2,  # on each time range change: hosts come and go
        "multi": True,
        "includeAll": True,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 3 if variable.numeric else 1,  # numerically or alphabetically, ascending
        "hide": 0,
        "regex": "",
        "options": [],
    }
