"""Record the UI's event streams from the real trainer, on this machine's CPU.

Run from the repository root (a minute or so; commit the files it writes)::

    python -m tests.ui.streams.record            # every scenario
    python -m tests.ui.streams.record cpu_run    # some of them

Each job runs as the runner pane runs it: a :class:`~gputui.jobs.process.ChildProcess`
of the engine, its events read by the parent side. A scenario's file holds every job's
stream in the order the pane starts them, one event a line, written by the protocol's own
encoder (``Event.to_json``); a stream ends with its ``Finished`` or ``Error`` as the parent
hands it on (one the child could not send itself, after a SIGKILL, is the parent's).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from gputui.jobs.events import EpochFinished, Event
from gputui.jobs.process import ChildProcess, list_devices
from tests.ui.streams.scenarios import BY_NAME, DEVICES, SCENARIOS, Scenario

FOLDER = Path(__file__).resolve().parent
"""Where the recordings live."""
JOB_TIMEOUT_S = 300.0
"""Longest wait for any one event (a loaded machine imports torch slowly)."""


def record_devices() -> list[Event]:
    """This machine's device listing, asked of a child as the pane asks."""
    return [list_devices()]


def record_scenario(scenario: Scenario) -> list[Event]:
    """Every job of ``scenario`` run to its end in turn; their events, in order."""
    events: list[Event] = []
    last = len(scenario.configs) - 1
    for index, config in enumerate(scenario.configs):
        ending = scenario.ending if index == last else "finish"
        events += _run(ChildProcess(config), ending)
    return events


def _run(child: ChildProcess, ending: str) -> list[Event]:
    """The events of one job; a ``stop`` or ``kill`` ending comes once epoch 1 has finished."""
    events: list[Event] = []
    with child:
        for event in child.events(JOB_TIMEOUT_S):
            events.append(event)
            if isinstance(event, EpochFinished) and event.epoch == 1:
                _end_early(child, ending)
    return events


def _end_early(child: ChildProcess, ending: str) -> None:
    if ending == "stop":
        child.stop(wait=False)  # SIGTERM: what the pane's ``s`` does
    elif ending == "kill" and child.pid is not None:
        os.kill(child.pid, signal.SIGKILL)  # from outside, as the OOM killer does


def write(name: str, events: Sequence[Event], folder: Path = FOLDER) -> Path:
    """Write ``events`` as ``folder/name.jsonl``, one protocol line each."""
    path = folder / f"{name}.jsonl"
    path.write_text("".join(event.to_json() + "\n" for event in events))
    return path


def main(argv: Sequence[str]) -> int:
    names = list(argv) or [DEVICES, *BY_NAME]
    unknown = [name for name in names if name != DEVICES and name not in BY_NAME]
    if unknown:
        known = ", ".join([DEVICES, *(scenario.name for scenario in SCENARIOS)])
        print(f"unknown scenario {', '.join(unknown)}: choose from {known}", file=sys.stderr)
        return 2
    for name in names:
        events = record_devices() if name == DEVICES else record_scenario(BY_NAME[name])
        path = write(name, events)
        print(f"{path}: {len(events)} events")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
