"""``gputui serve --print-dashboard``: a Grafana dashboard whose every query, its variables
filled in as Grafana fills them, returns series from a real Prometheus scraping two real
``gputui serve`` exporters on the stand-in NVML."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from gputui.serve.dashboard import dashboard_json
from tests.fakeprocfs import IN_DOCKER, IN_POD, IN_SLURM, jobs_tree
from tests.serve.served import Served, gputui_serve, prometheus_query, prometheus_scraping

WAIT_S = 60.0
"""How long the exporters and Prometheus may take to have every series stored."""

HOSTS = (
    {
        "FAKE_NVML_GPU_COUNT": "1",
        "FAKE_NVML_PROCESSES": f"0:{IN_DOCKER}:1073741824",
        "FAKE_NVML_CLOCK_EVENTS": "0:0x20",  # thermal
        "FAKE_NVML_ECC_UNCORRECTED": "0:2",
        "FAKE_NVML_REMAPPED_PENDING": "0:1",
        "FAKE_NVML_NVLINKS": "0:18",
    },
    {
        "FAKE_NVML_GPU_COUNT": "2",
        "FAKE_NVML_PROCESSES": f"1:{IN_POD}:2147483648,0:{IN_SLURM}:1048576",
        "FAKE_NVML_NVLINKS": "0:4,1:4",
    },
)
"""Two hosts' stand-in GPUs, with NVLink: one with a GPU in trouble running a Docker
container's process, one calm running a pod's and a Slurm job's (read from a fake procfs,
``tests/fakeprocfs.py``)."""
BUILT_IN = {"__rate_interval": "1m"}
"""Grafana's own variables the queries use, as a dashboard's range of a few minutes fills them."""

_LABEL_VALUES = re.compile(r"label_values\((?P<series>.+), (?P<label>\w+)\)")


@pytest.fixture(scope="module")
def model() -> dict[str, Any]:
    """The dashboard ``gputui serve --print-dashboard`` prints, with no driver at hand."""
    done = gputui_serve("--print-dashboard", lib_dir=Path("/nonexistent"))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == dashboard_json()
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def grafana_regex(values: list[str]) -> str:
    """A multi-value variable as Grafana writes it into a Prometheus query: each value's
    regex characters escaped (the backslash doubled, in PromQL's string), several as (a|b)."""
    escaped = [re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value) for value in values]
    return escaped[0] if len(escaped) == 1 else f"({'|'.join(escaped)})"


def substituted(expr: str, chosen: dict[str, list[str]]) -> str:
    for name, value in BUILT_IN.items():
        expr = expr.replace(f"${name}", value)
    for name, values in chosen.items():
        expr = expr.replace(f"${name}", grafana_regex(values))
    assert "$" not in expr, expr
    return expr


def variable_values(base: str, query: str, chosen: dict[str, list[str]]) -> list[str]:
    """The values Grafana offers for a ``label_values(SERIES, LABEL)`` variable."""
    found = _LABEL_VALUES.fullmatch(query)
    assert found is not None, query
    series = prometheus_query(base, substituted(found["series"], chosen))
    return sorted({one["metric"][found["label"]] for one in series})


@pytest.fixture(scope="module")
def prometheus(
    fake_nvml_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, list[str]]]:
    """A Prometheus scraping the two hosts' exporters: its URL and their addresses."""
    procfs = str(jobs_tree(tmp_path_factory.mktemp("proc")).root)
    with ExitStack() as stack:
        servers = [
            Served.start(
                fake_nvml_dir,
                *("--interval", "0.25", "--processes", "--jobs"),
                knobs={**knobs, "GPUTUI_PROCFS": procfs},
            )
            for knobs in HOSTS
        ]
        for server in servers:
            stack.callback(server.kill)
        targets = [f"127.0.0.1:{server.port}" for server in servers]
        base = stack.enter_context(prometheus_scraping(targets, tmp_path_factory.mktemp("prom")))
        yield base, targets


def test_every_panel_s_query_returns_series_for_every_host(
    prometheus: tuple[str, list[str]], model: dict[str, Any]
) -> None:
    base, targets = prometheus
    variables = {v["name"]: v for v in model["templating"]["list"] if v["type"] == "query"}
    queries = [
        (panel["title"], target["expr"])
        for panel in model["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]
    deadline = time.monotonic() + WAIT_S
    while True:  # until every query of every host's row answers, as Prometheus stores them
        try:
            job = variable_values(base, variables["job"]["query"], {})
            hosts = variable_values(base, variables["instance"]["query"], {"job": job})
            chosen = {
                host: {
                    "job": job,
                    "instance": [host],
                    "gpu": gpus,
                    "workload": variable_values(
                        base, variables["workload"]["query"], {"job": job, "instance": [host]}
                    ),
                }
                for host in hosts
                if (
                    gpus := variable_values(
                        base, variables["gpu"]["query"], {"job": job, "instance": [host]}
                    )
                )
            }
            empty = [
                f"{host}: {title}: {expr}"
                for host in targets
                for title, expr in queries
                if host not in chosen or not prometheus_query(base, substituted(expr, chosen[host]))
            ]
        except OSError as error:  # Prometheus is not listening yet
            empty = [str(error)]
        if not empty:
            break
        assert time.monotonic() < deadline, "queries that return no series:\n" + "\n".join(empty)
        time.sleep(0.2)

    assert job == ["gpus"]  # the scrape job's name
    assert hosts == sorted(targets)
    assert [chosen[host]["gpu"] for host in targets] == [["0"], ["0", "1"]]
    assert [chosen[host]["workload"] for host in targets] == [["trainer"], ["1234", "ml/resnet-0"]]
    by_job = next(expr for title, expr in queries if title == "GPU memory by job")
    one_job = {**chosen[targets[1]], "workload": ["ml/resnet-0"]}  # the variable narrows it
    memory = prometheus_query(base, substituted(by_job, one_job))
    assert [(s["metric"]["kind"], s["value"][1]) for s in memory] == [("pod", "2147483648")]
    for host in targets:  # a host's row shows its own series alone
        for _, expr in queries:
            for series in prometheus_query(base, substituted(expr, chosen[host])):
                assert series["metric"].get("instance", host) == host, expr
    trouble = chosen[targets[0]]
    throttled = next(expr for title, expr in queries if title.startswith("Throttled"))
    reasons = {
        s["metric"]["reason"]: s["value"][1]
        for s in prometheus_query(base, substituted(throttled, trouble))
    }
    assert reasons["thermal"] == "1" and reasons["power_cap"] == "0"
    assert "idle" not in reasons  # an idle GPU's low clocks are no trouble


def test_a_row_per_host_and_a_panel_per_reading(model: dict[str, Any]) -> None:
    row, *panels = model["panels"]
    assert (row["type"], row["repeat"], row["title"]) == ("row", "instance", "$instance")
    assert not row["collapsed"]  # the panels after it are its own
    assert [p["type"] for p in panels if p["type"] == "row"] == []
    assert len({p["id"] for p in model["panels"]}) == len(model["panels"])
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["y"] >= 1, panel["title"]
        covered = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not covered & cells, f"{panel['title']} overlaps another panel"
        cells |= covered
        assert panel["description"] and panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    titles = " ".join(p["title"] for p in panels).lower()
    for reading in ("utilization", "memory", "temperature", "power", "clocks", "throttled"):
        assert reading in titles, reading
    assert "ecc" in titles and "processes" in titles


def test_every_variable_a_query_uses_is_defined_and_may_be_all(model: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    used = set(re.findall(r"\$(\w+)", json.dumps(model["panels"]))) - set(BUILT_IN)
    assert used == {"job", "instance", "gpu", "workload"}
    for name in used:
        assert variables[name]["multi"] and variables[name]["includeAll"], name
