"""End to end in a real terminal: ``python -m gputui`` in tmux, train, quit or hang up.

The monitor reads 2 simulated H100s through the stand-in NVML library; the runner
trains for real on the CPU, made tiny through ``GPUTUI_RUNNER_DEFAULTS``. After
``q`` (or tmux killing the session, which sends SIGHUP as a lost SSH connection
does) no trainer child of that gputui may remain.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

pytestmark = [
    pytest.mark.timeout(150),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "device": "cpu",
    "dataset": "synthetic",
    "limit": 2048,
    "test_limit": 64,
    "batch_size": 32,
    "epochs": 5,
    "threads": 1,
    "record": False,
}
"""Quick epochs, but enough of them that the run is still going when the test quits."""
WAIT_S = 60.0


class Tmux:
    """One tmux server of our own (``-L``), running gputui in one session."""

    def __init__(self, env: dict[str, str]) -> None:
        self.socket = f"gputui-test-{uuid.uuid4().hex[:8]}"
        self.env = env

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=False
        ).stdout

    def start(self) -> int:
        command = f"cd {ROOT} && exec {sys.executable} -m gputui"
        subprocess.run(
            [
                "tmux",
                "-L",
                self.socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "main",
                "-x",
                "160",
                "-y",
                "50",
                command,
            ],
            env=self.env,
            check=True,
        )
        return int(self.tmux("display-message", "-p", "-t", "main", "#{pane_pid}").strip())

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "main")

    def wait_for(self, pattern: str, timeout_s: float = WAIT_S) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            screen = self.screen()
            if re.search(pattern, screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{pattern!r} never appeared; the screen:\n{self.screen()}")

    def kill_server(self) -> None:
        self.tmux("kill-server")


@pytest.fixture
def tmux(fake_nvml_dir: Path) -> Iterator[Tmux]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("FAKE_NVML_", "TMUX", "PYTEST", "TEXTUAL"))
    }
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(fake_nvml_dir), env.get("LD_LIBRARY_PATH")) if p
    )
    env["GPUTUI_RUNNER_DEFAULTS"] = json.dumps(TINY)
    env["TERM"] = "xterm-256color"
    session = Tmux(env)
    yield session
    session.kill_server()


def trainers_of(pid: int) -> list[psutil.Process]:
    """Trainer children started by the gputui process ``pid`` (they name their parent)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "gputui.training.child" in cmdline and str(pid) in cmdline:
            found.append(process)
    return found


def gone(pid: int, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


def start_training(tmux: Tmux) -> tuple[int, list[psutil.Process]]:
    pid = tmux.start()
    tmux.wait_for(r"NVIDIA · 2 GPUs")
    tmux.wait_for(r"Train r")
    tmux.tmux("send-keys", "-t", "main", "r")
    tmux.wait_for(r"epoch \d/5")
    trainers = [t for t in trainers_of(pid) if "--devices" not in t.info["cmdline"]]
    assert trainers, "no trainer child found while training"
    return pid, trainers


def test_train_then_quit_leaves_no_trainer(tmux: Tmux) -> None:
    pid, trainers = start_training(tmux)
    screen = tmux.wait_for(r"cpu\s+1 warm-up")
    assert "NVIDIA H100" in screen
    tmux.tmux("send-keys", "-t", "main", "q")
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
