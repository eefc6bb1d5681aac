"""The runner's scaling view, drawn from a session fed with a real scaling run's recorded
events (``python -m gputui.engine scale``, 1 and 2 gloo ranks on the CPU)."""

from __future__ import annotations

import pytest
from rich.console import Console

from gputui.jobs.results import Phase, Session
from gputui.ui.render.scaling import scaling_body
from tests.jobs.test_scale_report import SLOWER, scaling_session
from tests.ui.streams.scenarios import BY_NAME

CONFIGS = list(BY_NAME["cpu_scaling"].configs)
"""The 1- and 2-rank jobs the pane asks for, as recorded."""


def _text(session: Session, width: int = 100, cores: int | None = None) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(scaling_body(session, width, cores))
    return console.export_text()


@pytest.fixture
def finished() -> Session:
    """The recorded real scaling run (``tests/ui/streams/cpu_scaling.jsonl``, held to the
    trainer by ``test_streams``) as the pane's finished session."""
    return scaling_session()


def test_world_sizes_not_started_are_waiting() -> None:
    session = Session(list(CONFIGS), scaling="weak")
    lines = _text(session).splitlines()
    assert lines[0].split() == ["Ranks", "Progress", "Images/s", "Speedup", "Eff.", "All-red."]
    assert [line.split() for line in lines[1:3]] == [["1", "waiting"], ["2", "waiting"]]
    assert session.phase is Phase.RUNNING and not session.compare


def test_each_world_size_fills_its_bar_then_shows_its_figures(finished: Session) -> None:
    assert finished.phase is Phase.FINISHED
    text = _text(finished)
    one, two = (line.split() for line in text.splitlines()[1:3])
    # ranks, bar, share done, images/s, speedup, efficiency, all-reduce share
    assert len(one) == len(two) == 7, text
    assert (one[0], set(one[1]), one[2]) == ("1", {"█"}, "100%")
    assert one[4:6] == ["1.00x", "100%"] and one[6].endswith("%")
    rates = [run.best_images_per_second or 0.0 for run in finished.runs]
    assert one[3] == f"{rates[0]:,.0f}" and two[3] == f"{rates[1]:,.0f}"
    assert two[4] == f"{rates[1] / rates[0]:.2f}x"
    assert two[5] == f"{rates[1] / rates[0] / 2 * 100:.0f}%"
    assert "weak scaling: every world size keeps the batch of each rank" in " ".join(text.split())


def test_a_world_size_half_way_shows_its_share(finished: Session) -> None:
    """The second world size after the first of its 3 epochs: its bar at a third, the first
    one full."""
    second = finished.runs[1]
    session = Session(list(CONFIGS), scaling="weak")
    session.runs.append(finished.runs[0])
    partial = session.begin(CONFIGS[1])
    partial.absorb(second.started)  # type: ignore[arg-type]
    partial.absorb(second.epochs[0])
    text = _text(session)
    row = text.splitlines()[2]
    assert " 33%" in row
    assert session.phase is Phase.RUNNING


def test_noise_and_oversubscription_are_said_under_the_table() -> None:
    """Issue 26: the recorded 1- and 2-rank runs, the first made slow (an efficiency over
    100%), on one core (two ranks of a thread each): both said, each once."""
    text = " ".join(_text(scaling_session(SLOWER), cores=1).split())
    assert text.count("⚠") == 2
    assert "⚠ 2 ranks: efficiency" in text and "is more than the ranks can add: noise" in text
    assert "⚠ 2 ranks: oversubscribed, 2 ranks x 1 thread on 1 core" in text
    assert "⚠" not in _text(scaling_session(), cores=2)


def test_a_first_world_size_with_a_core_less_than_scale_s_says_so() -> None:
    """Issue 26: the pane's 1-rank CPU run had 1 thread of 2 cores, where ``gputui scale``
    gives it both, so the pane's speedups over it read higher."""
    text = " ".join(_text(scaling_session(), cores=2).split())
    assert (
        "note: the CPU ran here on 1 thread of this machine's 2 cores (a core kept for the "
        "monitor); gputui scale uses all 2, so its 1-rank run is faster, and the speedups over "
        "it lower, than these"
    ) in text
    assert "note: the CPU ran here" not in _text(scaling_session(), cores=1)
