"""Helpers the test files share: the repository's root, ``gputui`` run as a command and the
environment it gets, a wait for a condition, whether a process runs, a clock that tests move
by hand. (The fixtures they share are in tests/conftest.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root (``PYTHONPATH`` for a child that imports ``gputui``)."""
WAIT_S = 60.0
"""How long a wait for what comes at once on an idle machine may take under load: a
deadline against a hang, not a timing."""


def wait_for(condition: Callable[[], T], what: str = "", timeout_s: float = WAIT_S) -> T:
    """Ask ``condition`` again and again until its answer is true, and return that answer;
    fail, with ``what`` (else the condition), if it is not true within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (answer := condition()):
        assert time.monotonic() < deadline, what or f"never true: {condition}"
        time.sleep(0.01)
    return answer


def running(pid: int) -> bool:
    """Whether process ``pid`` is alive (not gone, not a zombie)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class FakeClock:
    """A monotonic clock that moves only when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def gputui_env(
    lib_dir: Path | None = None, knobs: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A ``gputui`` child's environment: this one's, without the stand-in's knobs
    (``FAKE_NVML_*``), the GPUs chosen here nor ``COLUMNS`` (text is 80 columns wide unless
    ``knobs`` says otherwise), writing UTF-8, with ``knobs``, NVML found only in ``lib_dir``
    (where given) and this checkout importable."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("FAKE_NVML_")}
    for name in ("COLUMNS", "CUDA_VISIBLE_DEVICES"):
        env.pop(name, None)
    env["PYTHONIOENCODING"] = "utf-8"  # whatever the locale
    env.update(knobs or {})
    if lib_dir is not None:
        env["LD_LIBRARY_PATH"] = str(lib_dir)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def gputui(
    *args: str,
    lib_dir: Path | None = None,
    knobs: Mapping[str, str] | None = None,
    timeout_s: float = 120,
    stderr: int = subprocess.PIPE,
) -> subprocess.CompletedProcess[str]:
    """``python -m gputui ARGS`` as users run it (:func:`gputui_env`), its output captured
    (standard error to ``stderr``, if given)."""
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        encoding="utf-8",
        cwd=ROOT,
        env=gputui_env(lib_dir, knobs),
        timeout=timeout_s,
        check=False,
    )


def in_pid_namespace(script: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``sh -c SCRIPT`` as pid 1 of a new pid namespace with its own /proc (``unshare``);
    the test skips where that is not allowed (under CI a skip outside the budget fails)."""
    unshare = shutil.which("unshare")
    pid_ns = [unshare or "unshare", "--pid", "--fork", "--mount-proc"]
    if unshare is None or subprocess.run([*pid_ns, "true"], capture_output=True).returncode:
        pytest.skip("unshare --pid is not allowed here")
    done = subprocess.run(
        [*pid_ns, "sh", "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done
