"""gputui in a real terminal: ``python -m gputui`` in a tmux server of the test's own.

The monitor reads 2 simulated H100s through the stand-in NVML library; the runner
trains for real on the CPU, made tiny through ``GPUTUI_RUNNER_DEFAULTS``. Use the
``tmux`` fixture (tests/conftest.py); it kills the server afterwards. The pane stays
after gputui exits (``remain-on-exit``), so a test can read what gputui left on the
terminal: whether it is still in the alternate screen, still tracking the mouse.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from tests.helpers import ROOT, WAIT_S, gputui_env, running

TINY: dict[str, Any] = {
    "device": "cpu",
    "dataset": "synthetic",
    "limit": 2048,
    "test_limit": 64,
    "batch_size": 32,
    "epochs": 5,
    "threads": 1,
    "record": False,
    "progress_interval_s": 0.05,
}
"""Quick epochs, but enough of them that the run is still going when the test quits; each
epoch shows its progress (an epoch can be shorter than the default interval between reads)."""


def tmux_env(fake_nvml_dir: Path, runner_defaults: dict[str, Any] | None = None) -> dict[str, str]:
    """This environment for gputui in tmux: the stand-in NVML, tiny runs, no test variables."""
    defaults = {"GPUTUI_RUNNER_DEFAULTS": json.dumps(runner_defaults or TINY)}
    env = gputui_env(fake_nvml_dir, {**defaults, "TERM": "xterm-256color"})
    return {k: v for k, v in env.items() if not k.startswith(("TMUX", "PYTEST", "TEXTUAL"))}


class Tmux:
    """One tmux server of our own (``-L``), running gputui in one session."""

    def __init__(self, env: dict[str, str]) -> None:
        self.socket = f"gputui-test-{uuid.uuid4().hex[:8]}"
        self.env = env
        """gputui's environment; change it before :meth:`start`."""

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=False
        ).stdout

    def start(self, *args: str) -> int:
        """Start ``gputui ARGS`` at 160x50; returns its pid."""
        command = shlex.join([sys.executable, "-m", "gputui", *args])
        command = f"cd {shlex.quote(str(ROOT))} && exec {command}"
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
        self.tmux("set-option", "-t", "main", "remain-on-exit", "on")
        return int(self.pane("#{pane_pid}"))

    def pane(self, fmt: str) -> str:
        """A tmux format of the pane, e.g. ``#{alternate_on}``."""
        return self.tmux("display-message", "-p", "-t", "main", fmt).strip()

    def send_keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "main", *keys)

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

    def wait_dead(self, timeout_s: float = 15.0) -> bool:
        """Wait until tmux has seen gputui exit (the pane is dead); whether it has."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.pane("#{pane_dead}") == "1":
                return True
            time.sleep(0.1)
        return False

    def kill_server(self) -> None:
        self.tmux("kill-server")


def trainers_of(pid: int) -> list[psutil.Process]:
    """Trainer children started by the gputui process ``pid`` (they name their parent)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "gputui.engine" in cmdline and "train" in cmdline and str(pid) in cmdline:
            found.append(process)
    return found


def gone(pid: int, timeout_s: float = 15.0) -> bool:
    """Wait up to ``timeout_s`` for process ``pid`` to end; whether it has."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not running(pid):
            return True
        time.sleep(0.1)
    return False


def start_training(tmux: Tmux) -> tuple[int, list[psutil.Process]]:
    """Start gputui, wait for the GPUs and the runner, press ``r``; gputui's pid and trainer."""
    epochs = json.loads(tmux.env["GPUTUI_RUNNER_DEFAULTS"]).get("epochs", TINY["epochs"])
    pid = tmux.start()
    tmux.wait_for(r"NVIDIA · 2 GPUs")
    tmux.wait_for(r"Train r")
    tmux.send_keys("r")
    tmux.wait_for(rf"epoch \d+/{epochs}")
    trainers = trainers_of(pid)
    assert trainers, "no trainer child found while training"
    return pid, trainers
