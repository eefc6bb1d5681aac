"""``--only``: GPUs named as nvitop's ``--only`` and ``CUDA_VISIBLE_DEVICES`` name them."""

from __future__ import annotations

import pytest

from gputui.telemetry.selection import GpuSelection, SelectionError
from tests.ui.fakes import h100s


def test_indexes_and_uuid_prefixes_pick_their_gpus() -> None:
    reading = h100s(4)
    uuid_of_3 = reading.gpus[3].uuid
    assert uuid_of_3 is not None
    picked = GpuSelection.parse(f" 0 ,2,{uuid_of_3[:12]}").of(reading)
    assert [gpu.index for gpu in picked.gpus] == [0, 2, 3]
    assert GpuSelection.parse("7").of(reading).gpus == ()  # none of these: no GPU shown


@pytest.mark.parametrize("text", ["", ",", "0,,1", "-1", "1.5", "GPU-", "gpu0", "99999"])
def test_anything_else_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(SelectionError, match=r"give NVML indexes or UUIDs, e\.g\. --only 0,2"):
        GpuSelection.parse(text)


def test_gpus_not_here_are_named_beside_those_that_are() -> None:
    """``--only 0,7`` on 4 GPUs once showed GPU 0 alone, without a word about 7."""
    reading = h100s(4)
    assert GpuSelection.parse("0,7").not_here(reading) == "no GPU 7 here (0-3)"
    assert (
        GpuSelection.parse("9,GPU-f00d,7").not_here(reading) == "no GPU 7, 9, GPU-f00d here (0-3)"
    )
    assert GpuSelection.parse("1,GPU-00000003").not_here(reading) is None
    assert GpuSelection.parse("1").not_here(h100s(1)) == "no GPU 1 here (0)"
    assert GpuSelection.parse("7").not_here(h100s(0)) is None  # the monitor says why none
