"""``gputui experiment --json`` is what the README shows: its keys at every depth, each
experiment's row and summary fields, and every verdict."""

from __future__ import annotations

import re
import typing
from typing import Any

import pytest

from gputui.device import CPU
from gputui.jobs.conclusions import PipelinesSummary, SyncStallSummary
from gputui.jobs.events import (
    BatchSweepRow,
    Event,
    ExperimentConcluded,
    ExperimentDevice,
    ExperimentStarted,
    Finished,
    PipelineRow,
    SyncStallRow,
)
from gputui.jobs.results import ExperimentResult
from tests.readme import README, keys_of, readme_json

ROWS: dict[str, list[Event]] = {
    "batch-sweep": [BatchSweepRow(CPU, 32, 20, 9000.0, 0.4, 3.2, 0.11)],
    "sync-stall": [
        SyncStallRow(CPU, "every_step", 256, 60, 3, 33.4, 7665.0, 0.8),
        SyncStallRow(CPU, "once", 256, 60, 3, 33.1, 7734.0, 0.6),
    ],
    "pipelines": [
        PipelineRow(CPU, "classic", 256, 60, 41.0, 6244.0, 2, False, None, None, 3, 1.2),
        PipelineRow(CPU, "resident", 256, 60, 33.0, 7757.0, 0, False, 0.2, None, 3, 0.7),
    ],
}
"""A device's complete rows for each experiment."""


def result_json(experiment: str) -> dict[str, Any]:
    """What ``gputui experiment EXPERIMENT --json`` prints for a run on the CPU."""
    started = ExperimentStarted(
        experiment=experiment,
        devices=(CPU,),
        batch_sizes=(256,),
        steps=200,
        warmup_steps=2,
        budget_s=2.0,
        dataset="synthetic",
        dataset_source="generated",
        dataset_note=None,
        images=50000,
        threads=2,
        workers=2,
        torch_version="2.13.0+cpu",
        pid=4242,
    )
    device = ExperimentDevice(CPU, "Intel(R) Xeon(R) Processor", None, False)
    result = ExperimentResult(experiment)
    for event in [started, device, *ROWS[experiment], ExperimentConcluded(experiment, "On cpu.")]:
        result.absorb(event)
    result.absorb(Finished(epochs_completed=0))
    return result.to_json_dict()


def table_row(experiment: str) -> tuple[str, str]:
    """The README table's cells for ``experiment``: a row's fields, and the summary's."""
    prefix = f"| `{experiment}` |"
    line = next(line for line in README.read_text().splitlines() if line.startswith(prefix))
    _, _, fields, summary, _ = line.split("|")
    return fields, summary


def names(cell: str) -> set[str]:
    """The field names in a table cell: its words in backticks, left of any parentheses."""
    return set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", cell)))


def test_the_readme_shows_the_json_as_it_is() -> None:
    shown = readme_json("experiment-json")
    real = result_json(shown["experiment"])
    assert keys_of(shown) == keys_of(real)
    assert list(shown) == list(real)


@pytest.mark.parametrize("experiment", list(ROWS))
def test_the_readme_lists_each_experiments_fields(experiment: str) -> None:
    [device] = result_json(experiment)["device_results"]
    fields, summary = table_row(experiment)
    assert names(fields) == set(device["rows"][0]) - {"device", "error"}
    assert names(summary) == set(device["summary"])


@pytest.mark.parametrize(
    ("experiment", "summary"), [("sync-stall", SyncStallSummary), ("pipelines", PipelinesSummary)]
)
def test_the_readme_lists_every_verdict(experiment: str, summary: type) -> None:
    _, cell = table_row(experiment)
    listed = re.search(r"`verdict` \(([^)]*)\)", cell)
    assert listed is not None
    verdict = typing.get_type_hints(summary)["verdict"]
    assert set(re.findall(r"`(\w+)`", listed.group(1))) == set(typing.get_args(verdict))
