"""Run a command on a real pseudo-terminal, with any standard stream sent elsewhere.

For the checks that only a terminal can make: whether ``gputui`` sees a terminal on
standard input, output and error, and what it writes there.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

ESCAPE = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
COLOUR = re.compile(rb"\x1b\[(?:[0-9]+;)*[34]8;[25];")
"""A 256-colour or 24-bit foreground or background in a CSI sequence."""


def shown_text(shown: bytes) -> str:
    """What a terminal shows of ``shown``, escapes left out (positions are lost)."""
    return ESCAPE.sub(b"", shown).decode(errors="replace")


def colours_in(shown: bytes) -> list[bytes]:
    """The 256-colour and 24-bit colour escapes in ``shown``."""
    return COLOUR.findall(shown)


@dataclass(frozen=True)
class PtyRun:
    """How a command on a pty ended, and what it wrote to the pty."""

    returncode: int | None
    """Its exit code; ``None`` when it was still running at the deadline (then killed)."""
    shown: bytes
    """Everything it wrote to the terminal."""


Step = tuple[Callable[[bytes], bool], bytes]
"""A test of what the command has written so far, and the keys to type once it says yes."""


def run_on_a_pty(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    stdin: int | IO[Any] | None = None,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    size: tuple[int, int] = (100, 30),
    timeout_s: float = 30.0,
    cwd: str | os.PathLike[str] | None = None,
    until: Callable[[bytes], bool] | None = None,
    script: Sequence[Step] = (),
    exit_within_s: float | None = None,
) -> PtyRun:
    """Run ``argv`` in a session of its own on a new pty of ``size`` (columns, rows).

    Each standard stream is the pty unless another file is given for it. A command still
    running after ``timeout_s`` is killed; once ``until`` says yes to what it has written,
    it is sent SIGTERM (then killed after 10 s). Either way its ``returncode`` is ``None``.

    With a ``script``, a user types instead: each step waits until its test says yes to
    what the command has written so far, then types its keys. After the last step the
    command has ``exit_within_s`` (at most what is left of ``timeout_s``) to exit.
    """
    master, slave = os.openpty()
    cols, rows = size
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(
        list(argv),
        stdin=slave if stdin is None else stdin,
        stdout=slave if stdout is None else stdout,
        stderr=slave if stderr is None else stderr,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    os.close(slave)
    shown = b""
    deadline = time.monotonic() + timeout_s
    seen_enough = False
    steps = list(script)
    try:
        while not seen_enough and proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    shown += os.read(master, 65536)
                except OSError:  # the pty's other end closed
                    break
                if steps and steps[0][0](shown):
                    os.write(master, steps.pop(0)[1])
                    if not steps and exit_within_s is not None:
                        deadline = min(deadline, time.monotonic() + exit_within_s)
                elif not script:
                    seen_enough = until is not None and until(shown)
        returncode: int | None = None
        if seen_enough:  # SIGTERM, so that it can end its own children
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        else:
            with contextlib.suppress(subprocess.TimeoutExpired):
                returncode = proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        while select.select([master], [], [], 0.1)[0]:  # what it wrote just before it ended
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return PtyRun(returncode, shown)
