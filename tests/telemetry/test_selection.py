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
