"""A frame's changes: what :func:`changes` writes, :func:`changed` reads back exactly."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputui.recording.frames import (
    DECIMALS,
    FormatError,
    changed,
    changes,
    first_part_path,
    part_path,
    rounded,
)
from gputui.telemetry.readings import DrmReading, MpsReading, NvmlReading, NvmlStatus, Snapshot
from gputui.telemetry.snapshot import snapshot_as_dict
from tests.ui.fakes import cpu_reading, h100s

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
KEYS = st.sampled_from(["index", "pid", "name", "=", "len", "0", "1", "processes", "t"])
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=24,
)


@given(JSON, JSON)
def test_the_changes_between_any_two_values_make_the_second_from_the_first(
    old: Any, new: Any
) -> None:
    """Keys named like the format's own members (``=``, ``len``, digits) included: the format
    must not mistake data for its markers."""
    kept = copy.deepcopy(old)
    if old == new:
        return
    delta = json.loads(json.dumps(changes(old, new)))  # as a line holds it
    assert changed(old, delta) == new
    assert old == kept  # the whole frame it was applied to is not changed


def gpu(index: int, utilization: float, processes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "index": index,
        "name": "H100",
        "utilization_percent": utilization,
        "processes": processes,
    }


def test_a_frame_carries_only_what_changed() -> None:
    old = {"gpus": [gpu(0, 10.0, [{"pid": 1}]), gpu(1, 20.0, [])], "cpu": {"per_core": [1.0, 2.0]}}
    new = copy.deepcopy(old)
    new["gpus"][1]["utilization_percent"] = 30.0
    new["gpus"][0]["processes"] = []
    new["cpu"]["per_core"] = [1.0, 3.0]
    assert changes(old, new) == {
        "gpus": {"0": {"processes": {"len": 0}}, "1": {"utilization_percent": 30.0}},
        "cpu": {"per_core": [1.0, 3.0]},  # a list of numbers is written whole
    }
    assert changes(old, copy.deepcopy(old)) == {}


def test_a_gpu_that_appears_is_written_whole_and_one_that_loses_keys_replaced() -> None:
    old = {"gpus": [gpu(0, 10.0, [])], "nvml": {"error": None, "extra": 1}}
    new = {"gpus": [gpu(0, 10.0, []), gpu(1, 5.0, [])], "nvml": {"error": "gone"}}
    assert changes(old, new) == {
        "gpus": {"1": {"=": gpu(1, 5.0, [])}, "len": 2},
        "nvml": {"=": {"error": "gone"}},
    }


@pytest.mark.parametrize(
    ("old", "change"),
    [
        ({"a": 1}, {"=": 1, "b": 2}),  # a replacement with other members
        ([1, 2], {"len": -1}),
        ([1, 2], {"len": "2"}),
        ([1, 2], {"len": 10**9}),
        ([1, 2], {"x": 1}),
        ([1, 2], {"5": 1}),
        ([1, 2], {"٣": 1}),  # a digit, but not an ASCII one
        (None, {"a": 1}),  # a change to an object where there is none
        (3, {"a": 1}),
    ],
)
def test_a_change_that_does_not_fit_is_a_format_error(old: Any, change: Any) -> None:
    with pytest.raises(FormatError):
        changed(old, change)


def test_numbers_are_written_to_a_thousandth() -> None:
    assert rounded({"a": [1.23456, 2], "b": 0.1 + 0.2, "c": float("inf")}) == {
        "a": [1.235, 2],
        "b": 0.3,
        "c": None,
    }


def test_a_snapshot_converted_rounded_is_the_snapshot_rounded() -> None:
    """The recorder rounds as it converts (``decimals``), in one pass: the same data as
    rounding the converted snapshot."""
    nvml = h100s(3)
    gpu = replace(nvml.gpus[0], power_w=212.34567, temperature_c=float("nan"))
    snapshot = Snapshot(
        cpu=cpu_reading(33.33333, load_average=(1.23456, float("inf"), 0.1 + 0.2)),
        nvml=NvmlReading(NvmlStatus(available=True), (gpu, *nvml.gpus[1:]), taken_at=1.0),
        mps=MpsReading(supported_platform=True, message=None, utilization_percent=12.3456789),
        drm=DrmReading((), taken_at=1.0),
    )
    converted = snapshot_as_dict(snapshot, decimals=DECIMALS)
    assert converted == rounded(snapshot_as_dict(snapshot))
    assert converted["cpu"]["load_average"] == [1.235, None, 0.3]
    assert converted["gpus"][0]["power_w"] == 212.346


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("box.ndjson.zst", "box.1.ndjson.zst"),
        ("box.ndjson.gz", "box.1.ndjson.gz"),
        ("box.NDJSON", "box.1.NDJSON"),
        ("box.gz", "box.1.gz"),
        ("night.v2.jsonl", "night.v2.1.jsonl"),
        ("box", "box.1"),
    ],
)
def test_parts_are_numbered_before_the_suffixes(first: str, second: str) -> None:
    folder = Path("/data")
    assert part_path(folder / first, 1) == folder / second
    assert first_part_path(folder / second, 1) == folder / first
    assert first_part_path(folder / first, 1) is None  # renamed: its number is not in it
