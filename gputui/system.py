"""Asking the operating system a question by running one of its commands.

Torch-free and Textual-free, below every layer, so that the engine (which may not import
telemetry) and telemetry ask ``sysctl`` the same way.
"""

from __future__ import annotations

import subprocess


def read_sysctl(name: str, *, timeout_s: float) -> str | None:
    """The value of a ``sysctl`` variable (macOS and the BSDs: ``machdep.cpu.brand_string``),
    as ``sysctl -n`` prints it, stripped; ``None`` when ``sysctl`` could not be run, did not
    finish within ``timeout_s``, or does not know the name."""
    try:
        done = subprocess.run(
            ["sysctl", "-n", name],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip()
