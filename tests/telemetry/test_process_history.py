"""Each GPU process's history (issue 29): keyed by pid and start time, fed one reading at a
time, bounded in processes and samples, and told when a process has left its GPUs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputui.telemetry.process_history import ProcessHistory
from gputui.telemetry.readings import GpuProcess, GpuReading, GpuState, Vendor

GiB = 1024**3


def gpu(label: int | str, *processes: GpuProcess, listed: bool = True) -> GpuReading:
    """A GPU (``amd0``: an AMD one) listing ``processes`` (``listed=False``: unknown)."""
    amd = isinstance(label, str)
    return GpuReading(
        index=int(str(label).removeprefix("amd")),
        vendor=Vendor.AMD if amd else Vendor.NVIDIA,
        name="GPU",
        uuid=None,
        bus_id=None,
        state=GpuState.OK,
        utilization_percent=None,
        memory_utilization_percent=None,
        memory_used_bytes=None,
        memory_total_bytes=None,
        temperature_c=None,
        power_w=None,
        power_limit_w=None,
        sm_clock_mhz=None,
        sm_clock_max_mhz=None,
        fan_percent=None,
        pcie_rx_bytes_per_s=None,
        pcie_tx_bytes_per_s=None,
        performance_state=None,
        processes=processes if listed else None,
    )


def proc(
    pid: int, gib: float | None, sm: float | None = 50.0, started: float | None = 100.0
) -> GpuProcess:
    memory = None if gib is None else int(gib * GiB)
    return GpuProcess(
        pid=pid,
        user="ada",
        command="python train.py",
        gpu_memory_bytes=memory,
        create_time=started,
        sm_utilization_percent=sm,
    )


def test_a_process_memory_and_sm_are_kept_beat_by_beat() -> None:
    history = ProcessHistory(10)
    for beat, gib in enumerate((1, 3, 2)):
        history.record(float(beat), [gpu(0, proc(7, gib, sm=10.0 * beat))])
    track = history.get((7, 100.0))
    assert track is not None and not track.ended
    assert [(s.t, s.gpu_memory_bytes, s.sm_utilization_percent) for s in track.samples] == [
        (0.0, 1 * GiB, 0.0),
        (1.0, 3 * GiB, 10.0),
        (2.0, 2 * GiB, 20.0),
    ]
    assert (track.first_t, track.last_t, track.peak_memory_bytes) == (0.0, 2.0, 3 * GiB)
    history.record(2.0, [gpu(0, proc(7, 9))])  # the same reading again: no new sample
    assert len(track.samples) == 3


def test_a_process_on_several_gpus_sums_its_memory_and_averages_its_sm() -> None:
    history = ProcessHistory(10)
    history.record(0.0, [gpu(0, proc(7, 1, sm=20.0)), gpu(1, proc(7, 2, sm=60.0)), gpu(2)])
    history.record(1.0, [gpu(0, proc(7, None, sm=None)), gpu(1, proc(7, None, sm=None))])
    track = history.get((7, 100.0))
    assert track is not None and track.gpus == ("0", "1")
    first, second = track.samples
    assert (first.gpu_memory_bytes, first.sm_utilization_percent) == (3 * GiB, 40.0)
    assert (second.gpu_memory_bytes, second.sm_utilization_percent) == (None, None)  # n/a


def test_a_reused_pid_starts_a_new_history_and_ends_the_old() -> None:
    history = ProcessHistory(10)
    history.record(0.0, [gpu(0, proc(7, 1, started=100.0))])
    history.record(1.0, [gpu(0, proc(7, 5, started=250.0))])
    old, new = history.get((7, 100.0)), history.get((7, 250.0))
    assert old is not None and new is not None and old is not new
    assert old.ended and old.ended_t == 1.0 and len(old.samples) == 1
    assert not new.ended and [s.gpu_memory_bytes for s in new.samples] == [5 * GiB]


def test_a_process_ends_only_when_a_reading_of_its_gpus_leaves_it_out() -> None:
    history = ProcessHistory(10)
    history.record(0.0, [gpu(0, proc(7, 1)), gpu(1)])
    history.record(0.5, [gpu("amd0", proc(8, 2))])  # another vendor's reading
    history.record(1.0, [gpu(0, listed=False), gpu(1)])  # its GPU's processes unknown
    track = history.get((7, 100.0))
    assert track is not None and not track.ended
    history.record(2.0, [gpu(0), gpu(1)])
    assert track.ended and track.ended_t == 2.0
    assert len(track.samples) == 1  # kept
    history.record(3.0, [gpu(0, proc(7, 4))])  # it came back to its GPU
    assert not track.ended and len(track.samples) == 2


def test_processes_are_bounded_the_longest_gone_forgotten_first() -> None:
    history = ProcessHistory(3, max_processes=2)
    history.record(0.0, [gpu(0, proc(1, 1), proc(2, 1))])
    history.record(1.0, [gpu(0, proc(2, 1))])  # 1 ended
    history.record(2.0, [gpu(0, proc(2, 1), proc(3, 1))])  # 3 is new: 1, gone longest, goes
    assert sorted(key[0] for key in history) == [2, 3]
    for beat in range(3, 10):
        history.record(float(beat), [gpu(0, proc(2, beat), proc(3, 1))])
    track = history.get((2, 100.0))
    assert track is not None and [s.t for s in track.samples] == [7.0, 8.0, 9.0]


def test_a_new_process_pushes_out_an_ended_one_before_a_running_one() -> None:
    history = ProcessHistory(3, max_processes=2)
    history.record(0.0, [gpu(0, proc(1, 1)), gpu(1, proc(2, 1))])
    history.record(1.0, [gpu(0, listed=False), gpu(1, proc(2, 1))])  # 1 runs, unseen
    history.record(2.0, [gpu(0, listed=False), gpu(1)])  # 2 ended, seen after 1
    history.record(3.0, [gpu(0, listed=False), gpu(1, proc(3, 1))])
    assert sorted(key[0] for key in history) == [1, 3]


def test_a_sample_older_than_a_process_s_last_is_ignored_and_clear_forgets_all() -> None:
    history = ProcessHistory(10)
    history.record(5.0, [gpu(0, proc(7, 1))])
    history.record(2.0, [gpu(0, proc(7, 9))])  # older: a replay that seeks clears first
    history.record(3.0, [gpu(0)])  # older: does not end it
    track = history.get((7, 100.0))
    assert track is not None and not track.ended
    assert [(s.t, s.gpu_memory_bytes) for s in track.samples] == [(5.0, 1 * GiB)]
    history.clear()
    assert len(history) == 0
    history.record(2.0, [gpu(0, proc(7, 9))])
    again = history.get((7, 100.0))
    assert again is not None and again.first_t == 2.0 and len(again.samples) == 1


def test_an_ended_process_is_forgotten_a_window_after_it_was_last_seen() -> None:
    history = ProcessHistory.for_window(1.0, 60.0)
    assert history.maxlen == 60 and history.keep_ended_s == 60.0
    history.record(0.0, [gpu(0, proc(1, 1), proc(2, 1))])
    history.record(1.0, [gpu(0, proc(2, 1))])
    history.record(60.0, [gpu(0, proc(2, 1))])
    assert (1, 100.0) in history
    history.record(61.5, [gpu(0, proc(2, 1))])
    assert (1, 100.0) not in history and (2, 100.0) in history  # the running one stays


def test_a_process_without_a_start_time_is_known_by_its_pid() -> None:
    history = ProcessHistory(5)
    history.record(0.0, [gpu(0, replace(proc(7, 1), create_time=None))])
    assert history.get((7, None)) is not None


@pytest.mark.parametrize("bad", [{"maxlen": 0}, {"maxlen": 1, "max_processes": 0}])
def test_empty_bounds_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        ProcessHistory(**bad)
