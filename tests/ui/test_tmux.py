"""End to end in a real terminal: ``python -m gputui`` in tmux, train, quit or hang up.

The monitor reads 2 simulated H100s through the stand-in NVML library; the runner
trains for real on the CPU, made tiny through ``GPUTUI_RUNNER_DEFAULTS``. After
``q`` (or tmux killing the session, which sends SIGHUP as a lost SSH connection
does) no trainer child of that gputui may remain. The session helpers are in
tests/ui/tmux_session.py, the ``tmux`` fixture in tests/conftest.py.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess

import pytest

from tests.fleet.hosts import DCGM_EXPOSITION, dead_port, static_exporter
from tests.ui.tmux_session import Tmux, gone, start_training, trainers_of

pytestmark = [
    pytest.mark.timeout(150),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def test_train_then_quit_leaves_no_trainer(tmux: Tmux) -> None:
    """``q`` during the run asks first (issue 32); ``y`` quits and stops the trainer."""
    pid, trainers = start_training(tmux)
    screen = tmux.wait_for(r"cpu\s+1 warm-up")
    assert "NVIDIA H100" in screen
    tmux.send_keys("q")
    tmux.wait_for(r"Quit gputui and stop the run\?")
    tmux.send_keys("y")
    assert gone(pid), "gputui did not quit"
    for trainer in trainers:
        assert gone(trainer.pid), f"trainer {trainer.pid} outlived gputui"
    assert trainers_of(pid) == []


def test_hangup_stops_the_trainer(tmux: Tmux) -> None:
    """Killing the tmux server hangs up the terminal: SIGHUP, as a lost SSH connection."""
    pid, trainers = start_training(tmux)
    tmux.kill_server()
    assert gone(pid), "gputui survived SIGHUP"
    for trainer in trainers:
        assert gone(trainer.pid), f"trainer {trainer.pid} outlived gputui"
    assert trainers_of(pid) == []


def test_the_first_frame_of_a_long_interval_tells_the_truth(tmux: Tmux) -> None:
    """Issue 18: with ``--interval 60`` the first host reading stays up a minute, and it said
    ``CPU 0%`` and ``gputui 0.0%`` (or ``1611.1%``) while gputui was busy starting."""
    pid = tmux.start("--interval", "60")
    screen = tmux.wait_for(r"gputui \d+\.\d%")
    total = int(re.search(r"CPU [ ▏▎▍▌▋▊▉█·]+ +(\d+)%", screen).group(1))  # type: ignore[union-attr]
    own = float(re.search(r"gputui (\d+\.\d)%", screen).group(1))  # type: ignore[union-attr]
    cores = os.cpu_count() or 1
    assert 0.0 < own <= 100.0 * cores + 20.0  # it was importing Textual: busy, on real cores
    # The whole host cannot read less than gputui alone (the two readings cover windows a
    # few milliseconds apart: some slack). It read 0% beside gputui's 1611%.
    assert total + 15 >= own / cores
    tmux.send_keys("q")
    assert gone(pid), "gputui did not quit"


def test_the_fleet_view_in_a_real_terminal(tmux: Tmux) -> None:
    """``gputui --hosts`` over loopback: a dcgm-exporter and a dead port; s sorts, Ctrl+C
    quits (a real terminal's Ctrl+C, which Textual alone answers with 'Press ^q')."""
    with static_exporter(DCGM_EXPOSITION.read_text()) as dcgm:
        dead = dead_port()
        pid = tmux.start("--hosts", f"{dead},{dcgm}", "--interval", "0.5")
        screen = tmux.wait_for(r"2 hosts, 1 up, 1 down")
        assert f"✕ {dead}  DOWN  connection refused" in screen
        assert f"● {dcgm}  dcgm-exporter · 2 GPUs" in screen
        tmux.send_keys("s")
        tmux.wait_for(r"sorted by util")
        tmux.send_keys("C-c")
        assert gone(pid), "gputui did not quit"


def test_T_then_y_terminates_a_gpu_process_in_a_real_terminal(
    tmux: Tmux, sleeper: subprocess.Popen[bytes]
) -> None:
    tmux.env["FAKE_NVML_PROCESSES"] = f"0:{sleeper.pid}:1073741824"
    pid = tmux.start()
    tmux.wait_for(r"sleep 600")
    tmux.send_keys("Down")  # the table has the keys at start: select its row
    tmux.send_keys("T")
    tmux.wait_for(rf"Send SIGTERM to pid {sleeper.pid}\?")
    tmux.send_keys("y")
    assert sleeper.wait(timeout=15) == -signal.SIGTERM
    tmux.wait_for(rf"Sent SIGTERM to pid {sleeper.pid}")
    tmux.send_keys("q")
    assert gone(pid), "gputui did not quit"


@pytest.mark.parametrize("how", ["--readonly", "GPUTUI_READONLY=1"])
def test_a_read_only_monitor_refuses_in_a_real_terminal(
    tmux: Tmux, sleeper: subprocess.Popen[bytes], how: str
) -> None:
    """The flag and the variable reach the app from the command line: T only says no."""
    tmux.env["FAKE_NVML_PROCESSES"] = f"0:{sleeper.pid}:1073741824"
    if how.startswith("GPUTUI_READONLY"):
        tmux.env["GPUTUI_READONLY"] = "1"
    pid = tmux.start(*(["--readonly"] if how == "--readonly" else []))
    tmux.wait_for(r"sleep 600")
    tmux.send_keys("Down")
    tmux.send_keys("T")
    tmux.wait_for(r"Read-only \(--readonly")
    assert "Send SIGTERM" not in tmux.screen()
    tmux.send_keys("q")
    assert gone(pid), "gputui did not quit"
    assert sleeper.poll() is None
