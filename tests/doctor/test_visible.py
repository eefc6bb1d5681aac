"""``CUDA_VISIBLE_DEVICES`` parsing: worked cases, and agreement with torch's own parser."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.doctor.visible import parse_visible_devices

UUIDS = (
    "GPU-9e3779b9-6f3c-46ef-8cf3-00000000a100",
    "GPU-3c6ef372-ddcd-4e6d-9ddc-00000000a101",
    "GPU-3c6ef999-1234-4bcd-8123-00000000a102",
)
"""Three GPUs; the last two share the prefix ``GPU-3c6ef`` (an ambiguous partial UUID)."""


@pytest.mark.parametrize(
    ("value", "count", "visible", "problem"),
    [
        (None, 2, (0, 1), None),
        ("0,1", 2, (0, 1), None),
        ("1,0", 2, (1, 0), None),
        ("1", 2, (1,), None),
        (" 1 , 0 ", 2, (1, 0), None),
        ("+1", 2, (1,), None),
        ("", 2, (), None),
        ("   ", 2, (), None),
        ("-1", 2, (), None),
        ("0,-1,1", 2, (0,), None),
        ("0,2", 2, (0,), "'2' names a GPU that does not exist (NVML reports 2 GPUs"),
        ("5", 1, (), "(NVML reports 1 GPU, index 0)"),
        ("0", 0, (), "(NVML reports no GPU)"),
        ("abc", 2, (), "'abc', which is not a GPU index or UUID, ends the list"),
        ("0,,1", 2, (0,), "An empty entry ends the list"),
        ("0,0", 2, (), "GPU 0 is listed twice, which hides every GPU"),
        ("0,5,0", 2, (), "GPU 0 is listed twice"),  # torch checks repeats before the count
        ("1gpu", 2, (1,), "'1gpu' reads as 1; write 1"),
        ("0,GPU-9e37", 3, (0,), "a UUID after indexes"),
    ],
)
def test_indexes(
    value: str | None, count: int, visible: tuple[int, ...], problem: str | None
) -> None:
    result = parse_visible_devices(value, UUIDS[:count])
    assert result.visible == visible
    assert result.is_set is (value is not None)
    assert result.hides_all is (value is not None and visible == ())
    if problem is None:
        assert result.problems == ()
    else:
        assert any(problem in sentence for sentence in result.problems), result.problems


def test_the_list_stops_where_torch_stops_and_keeps_what_was_dropped() -> None:
    result = parse_visible_devices("1,-1,0", UUIDS[:2])
    assert result.kept == ("1",)
    assert result.dropped == ("-1", "0")
    assert result.problems == ()  # -1 is the usual way to hide the rest: not a mistake


def test_without_nvml_only_the_syntax_is_checked() -> None:
    result = parse_visible_devices("0,7", None)
    assert result.visible is None
    assert result.kept == ("0", "7")
    assert result.problems == ()
    assert parse_visible_devices("", None).hides_all
    assert parse_visible_devices("x", None).problems


@pytest.mark.parametrize(
    ("value", "visible", "problem"),
    [
        (UUIDS[1], (1,), None),
        (f"{UUIDS[2]},{UUIDS[0]}", (2, 0), None),
        ("GPU-9e3779b9", (0,), None),  # a unique prefix is enough
        ("GPU-3c6ef", (), "GPU-3c6ef matches 2 GPUs (write more of the UUID)"),
        ("GPU-deadbeef", (), "GPU-deadbeef matches no GPU NVML reports"),
        (f"{UUIDS[0]},GPU-deadbeef,{UUIDS[1]}", (0,), "matches no GPU"),
        (f"{UUIDS[0]},{UUIDS[0]}", (), "listed twice, which hides every GPU"),
        (f"GPU-9e3779b9,{UUIDS[0]}", (), "names GPU 0 again, which hides every GPU"),
        (f"{UUIDS[0]},1", (0,), "'1', not a GPU- UUID, ends the list"),
        (f"{UUIDS[0]}, {UUIDS[1]}", (0,), "which starts with a space"),
    ],
)
def test_uuids(value: str, visible: tuple[int, ...], problem: str | None) -> None:
    result = parse_visible_devices(value, UUIDS)
    assert result.visible == visible
    if problem is None:
        assert result.problems == ()
    else:
        assert any(problem in sentence for sentence in result.problems), result.problems


def test_mig_slices_are_kept_but_cannot_be_resolved() -> None:
    result = parse_visible_devices("MIG-1a2b,MIG-3c4d", UUIDS)
    assert result.mig
    assert result.kept == ("MIG-1a2b", "MIG-3c4d")
    assert result.visible is None
    assert not result.hides_all


# --------------------------------------------------------------------------------------------
# The same answers as torch's own parser, for any list (torch imported here, in the test only).
# --------------------------------------------------------------------------------------------

torch = pytest.importorskip("torch")
_parse = getattr(torch.cuda, "_parse_visible_devices", None)
_to_ordinals = getattr(torch.cuda, "_transform_uuid_to_ordinals", None)


@contextmanager
def _cuda_visible_devices(value: str) -> Iterator[None]:
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = value
    try:
        yield
    finally:
        if saved is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved


def _torch_visible(value: str, uuids: tuple[str, ...]) -> list[int] | None:
    """What torch's NVML-based device count sees, as NVML indexes (None: MIG, not resolved)."""
    with _cuda_visible_devices(value):
        parsed = _parse()
    if parsed and isinstance(parsed[0], str):
        if parsed[0].startswith("MIG-"):
            return None
        return _to_ordinals(parsed, list(uuids))
    ordinals: list[int] = []
    for index in parsed:
        if index >= len(uuids):
            break
        ordinals.append(index)
    return ordinals


ENTRIES = st.sampled_from(
    ["0", "1", "2", "3", "7", "-1", "-3", "", " ", "abc", "1gpu", " 2", "+1", "GPU-", "MIG-1"]
    + [uuid[:n] for uuid in UUIDS for n in (9, 12, len(uuid))]
)


@pytest.mark.skipif(_parse is None or _to_ordinals is None, reason="torch's parser moved")
@settings(max_examples=300, deadline=None)
@given(entries=st.lists(ENTRIES, min_size=1, max_size=5), count=st.integers(0, 3))
def test_agrees_with_torch(entries: list[str], count: int) -> None:
    value = ",".join(entries)
    uuids = UUIDS[:count]
    result = parse_visible_devices(value, uuids)
    expected = _torch_visible(value, uuids)
    assert result.visible == (None if expected is None else tuple(expected)), value
    assert result.hides_all is (expected == []), value
