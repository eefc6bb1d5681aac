"""The trainer's child process, driven through ``ChildProcess`` as the UI drives it.

Each test really starts ``python -m gputui.engine train`` and trains on the
CPU; cleanup is checked with psutil: no child or DataLoader worker is left.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from gputui.device import CPU, Device
from gputui.engine.records import EPOCH_COLUMNS, EPOCHS_FILE
from gputui.jobs.config import RunConfig
from gputui.jobs.events import (
    DevicesListed,
    EpochFinished,
    Error,
    Event,
    Finished,
    Note,
    Progress,
    RunStarted,
    parse_event,
)
from gputui.jobs.folders import EVENTS_FILE
from gputui.jobs.process import ChildProcess, close_record, list_devices, oom_kills
from gputui.jobs.runner import ui_friendly, ui_friendly_threads
from tests.helpers import ROOT

EVENT_TIMEOUT_S = 60


def config(tmp_path: Path, **changes: object) -> RunConfig:
    """A tiny run, as the runner pane asks for it beside the monitor."""
    base = ui_friendly(
        RunConfig(
            device=CPU,
            epochs=2,
            batch_size=32,
            dataset="synthetic",
            limit=256,
            test_limit=64,
            runs_dir=str(tmp_path / "runs"),
            progress_interval_s=0.01,
        )
    )
    return base.with_changes(**changes)


def wait_for(trainer: ChildProcess, kind: type[Event]) -> list[Event]:
    seen: list[Event] = []
    for event in trainer.events(EVENT_TIMEOUT_S):
        seen.append(event)
        if isinstance(event, kind):
            return seen
    raise AssertionError(f"no {kind.__name__} in {seen}")


def family(pid: int) -> list[psutil.Process]:
    parent = psutil.Process(pid)
    return [parent, *parent.children(recursive=True)]


def assert_all_gone(processes: list[psutil.Process], timeout_s: float = 10) -> None:
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    assert not alive, f"left behind: {alive}"


@dataclass(frozen=True)
class FinishedRun:
    """What a run in the child showed, from its start to its end."""

    trainer: ChildProcess
    child: psutil.Process
    """The child, as it was found right after it started."""
    pid: int | None
    running: bool
    """Whether the child ran right after ``start()`` returned."""
    events: list[Event]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    """One tiny recorded run (two epochs) in a real child, streamed to its end; the tests of a
    finished run check it together (each child costs seconds of CPU before its first step).
    It is started as the UI starts runs: from a worker thread that ends at once."""
    runs = tmp_path_factory.mktemp("finished")
    started: list[tuple[ChildProcess, int | None, bool, psutil.Process]] = []

    def start() -> None:
        trainer = ChildProcess(config(runs)).start()
        started.append((trainer, trainer.pid, trainer.running, psutil.Process(trainer.pid)))

    worker = threading.Thread(target=start)
    worker.start()
    worker.join()
    [(trainer, pid, running, child)] = started
    events = list(trainer.events(EVENT_TIMEOUT_S))
    trainer.wait(10)
    return FinishedRun(trainer, child, pid, running, events)


def test_a_run_in_the_child_streams_every_event_and_exits(finished_run: FinishedRun) -> None:
    trainer, events = finished_run.trainer, finished_run.events
    assert finished_run.pid is not None and finished_run.running
    names = [type(e).__name__ for e in events if not isinstance(e, Progress | Note)]
    assert names == [
        "RunStarted",
        "DataReady",
        "Placement",
        "Memory",
        "EpochFinished",
        "Memory",
        "EpochFinished",
        "Memory",
        "Finished",
    ]
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.pid == trainer.pid == finished_run.pid
    assert started.nice >= 10  # lowered, so a UI beside it stays responsive
    assert started.num_threads == ui_friendly_threads()
    assert isinstance(events[-1], Finished) and not events[-1].stopped
    assert trainer.returncode == 0 and not trainer.running
    assert trainer.next_event(0) is None  # the stream has ended, and stays ended
    assert_all_gone([finished_run.child], 1)


def test_the_childs_quick_exit_leaves_its_run_folder_complete(finished_run: FinishedRun) -> None:
    # The child ends with os._exit (no interpreter teardown): nothing may be lost by it.
    assert finished_run.trainer.wait(10) == 0
    finished = finished_run.events[-1]
    assert isinstance(finished, Finished) and finished.run_dir is not None
    run_dir = Path(finished.run_dir)
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    assert lines and '"type":"finished"' in lines[-1]
    assert len((run_dir / "epochs.csv").read_text().splitlines()) == 1 + 2  # header, 2 epochs


FAULT_PROBE = """
import resource, sys
from gputui.engine.lifecycle import keep_freed_memory

took = keep_freed_memory() if sys.argv[1] == "keep" else False
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def step():  # as a training step does: a few activations alive together, then all freed
    blocks = [bytearray(4 << 20) for _ in range(3)]
    del blocks
for _ in range(3):
    step()
before = faults()
for _ in range(10):
    step()
print(took, faults() - before)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="glibc's mallopt",
)
def test_the_child_keeps_freed_activations_instead_of_faulting_them_back() -> None:
    def page_faults(mode: str) -> tuple[str, int]:
        done = subprocess.run(
            [sys.executable, "-c", FAULT_PROBE, mode],
            capture_output=True,
            text=True,
            check=True,
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")},
                "PYTHONPATH": str(ROOT),
            },
        )
        took, faults = done.stdout.split()
        return took, int(faults)

    assert page_faults("keep") == ("True", 0)
    took, faults = page_faults("default")
    assert took == "False" and faults > 10 * 1000  # 12 MiB a step, freed back to the kernel


def test_stop_mid_epoch_ends_the_child_and_its_dataloader_workers(tmp_path: Path) -> None:
    run = config(tmp_path, pipeline="classic", workers=2, epochs=100, limit=2000, record=False)
    trainer = ChildProcess(run, grace_s=5).start()
    wait_for(trainer, Progress)
    processes = family(trainer.pid or 0)
    assert len(processes) == 3, processes  # the trainer and its 2 workers
    trainer.stop()
    rest = list(trainer.events(EVENT_TIMEOUT_S))
    assert isinstance(rest[-1], Finished) and rest[-1].stopped
    assert not any(isinstance(e, EpochFinished) for e in rest)
    assert trainer.returncode == 0  # it stopped itself at the SIGTERM, not killed
    assert_all_gone(processes, 2)
    trainer.stop()  # idempotent


def test_a_child_that_ignores_sigterm_is_killed_with_its_group(tmp_path: Path) -> None:
    trainer = ChildProcess(config(tmp_path, epochs=100, record=False), grace_s=0.5).start()
    wait_for(trainer, Progress)
    processes = family(trainer.pid or 0)
    os.kill(trainer.pid or 0, signal.SIGSTOP)  # frozen: it cannot act on SIGTERM
    trainer.stop()
    events = list(trainer.events(EVENT_TIMEOUT_S))
    assert isinstance(events[-1], Finished) and events[-1].stopped
    assert trainer.returncode == -signal.SIGKILL
    assert_all_gone(processes, 2)


def test_a_hang_up_stops_the_run_cleanly(tmp_path: Path) -> None:
    trainer = ChildProcess(config(tmp_path, epochs=100, record=False)).start()
    wait_for(trainer, Progress)
    os.kill(trainer.pid or 0, signal.SIGHUP)  # what a lost SSH session sends
    events = list(trainer.events(EVENT_TIMEOUT_S))
    assert isinstance(events[-1], Finished) and events[-1].stopped
    assert trainer.returncode == 0


def test_a_run_started_from_a_short_lived_thread_survives_that_thread(
    finished_run: FinishedRun,
) -> None:
    # PR_SET_PDEATHSIG fires when the *thread* that forked the child ends; a UI starts runs
    # from worker threads, so ChildProcess forks from its own thread that outlives the child.
    # The shared run was started from a thread that ended before the run's first event.
    events = finished_run.events
    assert isinstance(events[-1], Finished) and not events[-1].stopped, events[-1]


def test_a_killed_child_becomes_one_error_line_that_closes_its_record(tmp_path: Path) -> None:
    """Issue 26: SIGKILLed mid-epoch, its run folder ended on a progress line, and the
    message blamed memory with no reason to. The record now ends with the kill, the signal
    named, and memory is blamed only when the kernel's out-of-memory killer struck."""
    oom_before = oom_kills()
    trainer = ChildProcess(config(tmp_path, epochs=100, limit=2048)).start()  # 64 steps
    [started, *_] = wait_for(trainer, Progress)
    assert isinstance(started, RunStarted) and started.run_dir is not None
    os.kill(trainer.pid or 0, signal.SIGKILL)
    events = list(trainer.events(EVENT_TIMEOUT_S))
    error = events[-1]
    assert isinstance(error, Error) and error.kind == "killed"
    assert sum(isinstance(e, Error | Finished) for e in events) == 1
    assert error.message.startswith("the trainer was killed by SIGKILL (")
    if oom_before is not None and oom_kills() == oom_before:  # nothing was out of memory
        assert error.message == "the trainer was killed by SIGKILL (not by the OOM killer)"
    run_dir = Path(started.run_dir)
    recorded = (run_dir / EVENTS_FILE).read_text().splitlines()
    assert parse_event(recorded[-1]) == error  # the record ends with how the run ended
    assert all(parse_event(line) is not None for line in recorded)
    epochs = sum(json.loads(line)["type"] == "epoch_finished" for line in recorded)
    # the CSV has its header even before its first epoch (it was empty, the header unflushed)
    rows = (run_dir / EPOCHS_FILE).read_text().splitlines()
    assert rows[0] == ",".join(EPOCH_COLUMNS) and len(rows) == 1 + epochs


def test_closing_a_record_ends_a_line_the_kill_cut_off(tmp_path: Path) -> None:
    progress = Progress(epoch=1, step=3, steps_per_epoch=8, images_per_second=100.0, loss=2.3)
    killed = Error(message="the trainer was killed by SIGKILL", kind="killed")
    events = tmp_path / EVENTS_FILE
    events.write_text(progress.to_json() + "\n" + progress.to_json()[:20])  # cut mid-line
    close_record(tmp_path, killed)
    lines = events.read_text().splitlines()
    assert lines[0] == progress.to_json() and lines[1] == progress.to_json()[:20]
    assert parse_event(lines[2]) == killed and len(lines) == 3
    close_record(tmp_path / "gone", killed)  # no folder: nothing is made
    assert not (tmp_path / "gone").exists()


def test_the_out_of_memory_count_is_read_from_vmstat(tmp_path: Path) -> None:
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("pgfault 12\noom_kill 3\nnr_free_pages 9\n")
    assert oom_kills(vmstat) == 3
    vmstat.write_text("pgfault 12\n")  # a kernel before 4.13
    assert oom_kills(vmstat) is None
    assert oom_kills(tmp_path / "absent") is None


PARENT = textwrap.dedent(
    """
    import sys, time
    from gputui.jobs.config import RunConfig
    from gputui.jobs.events import Progress
    from gputui.jobs.process import ChildProcess

    trainer = ChildProcess(RunConfig.from_json(sys.argv[1])).start()
    for event in trainer.events(60):
        if isinstance(event, Progress):
            print(trainer.pid, flush=True)
            break
    time.sleep(120)
    """
)


def test_the_child_and_its_workers_die_when_the_parent_is_killed(tmp_path: Path) -> None:
    run = config(tmp_path, pipeline="classic", workers=1, epochs=100, limit=2000, record=False)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, run.to_json()], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip().isdigit(), line
        processes = family(int(line))
        assert len(processes) == 2  # the trainer and its worker
        parent.kill()
        parent.wait(10)
        assert_all_gone(processes, 10)
    finally:
        parent.kill()
        parent.wait(10)


def fake_child(tmp_path: Path, script: str) -> str:
    """An executable standing in for ``python``: it ignores its arguments and runs ``script``."""
    path = tmp_path / "fake-python"
    path.write_text("#!/bin/sh\n" + textwrap.dedent(script))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_garbage_and_unknown_event_types_are_skipped(tmp_path: Path) -> None:
    finished = Finished(epochs_completed=1).to_json()
    python = fake_child(
        tmp_path,
        f"""
        echo 'Downloading something...'
        echo '{{"v": 9, "type": "from_the_future", "x": 1}}'
        echo '{{"v": 1, "type": "note", "message": "still here"}}'
        echo '{finished}'
        echo '{{"v": 1, "type": "note", "message": "after the end"}}'
        """,
    )
    trainer = ChildProcess(RunConfig(), python=python).start()
    events = list(trainer.events(EVENT_TIMEOUT_S))
    assert events == [Note("still here"), Finished(epochs_completed=1)]
    assert trainer.skipped_lines == 2


def test_a_child_that_dies_without_a_result_becomes_an_error_with_its_stderr(
    tmp_path: Path,
) -> None:
    python = fake_child(tmp_path, "echo 'Traceback: boom' >&2\nexit 3\n")
    trainer = ChildProcess(RunConfig(), python=python).start()
    events = list(trainer.events(EVENT_TIMEOUT_S))
    assert len(events) == 1
    error = events[0]
    assert isinstance(error, Error) and error.kind == "crash"
    assert error.message == "the trainer exited with code 3 without a result: Traceback: boom"
    assert error.detail == "Traceback: boom"


def test_a_missing_interpreter_becomes_an_error(tmp_path: Path) -> None:
    trainer = ChildProcess(RunConfig(), python=str(tmp_path / "nope")).start()
    events = list(trainer.events(EVENT_TIMEOUT_S))
    assert len(events) == 1 and isinstance(events[0], Error)
    assert events[0].message.startswith("could not start the trainer:")
    assert trainer.pid is None
    trainer.stop()


def test_list_devices_asks_a_child() -> None:
    listed = list_devices()
    assert isinstance(listed, DevicesListed), listed
    names = [str(option.name) for option in listed.devices]
    assert names[0] == "cpu" and listed.devices[0].usable
    assert "mps" in names
    unusable = [option for option in listed.devices if not option.usable]
    assert all(option.reason for option in unusable)
    import torch

    assert listed.cuda_version == torch.version.cuda  # the build's CUDA: None for a CPU build


def test_an_unusable_device_is_an_error_event_from_the_child(tmp_path: Path) -> None:
    trainer = ChildProcess(config(tmp_path, device=Device("cuda", 99))).start()
    events = list(trainer.events(EVENT_TIMEOUT_S))
    assert len(events) == 1 and isinstance(events[0], Error)
    assert events[0].kind == "device" and "usable here: cpu" in events[0].message
    assert trainer.returncode == 2
