"""The doctor: why PyTorch can or cannot use the GPUs here, how to fix it, and how fast
each device really is.

Headless: no Textual, and no torch in this process (torch is asked in a child,
``gputui.engine.probe``). The layers:

- :mod:`~gputui.doctor.checks`: the typed report (``Check``, ``DeviceReport``, ``DoctorReport``).
- :mod:`~gputui.doctor.run`: :func:`run_doctor` gathers this machine's facts.
- :mod:`~gputui.doctor.diagnose`: pure rules from facts to checks.
- :mod:`~gputui.doctor.render`: text and JSON.

For the app's Doctor screen: call :func:`run_doctor` in a thread worker (it blocks for
a few seconds, bounded by ``timeout_s`` plus an allowance per GPU) and render ``report.checks`` and
``report.devices``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputui.doctor.checks import Check, DeviceReport, DoctorReport, Status
    from gputui.doctor.render import render_json, render_text
    from gputui.doctor.run import run_doctor

_EXPORTS = {
    "Check": "gputui.doctor.checks",
    "DeviceReport": "gputui.doctor.checks",
    "DoctorReport": "gputui.doctor.checks",
    "Status": "gputui.doctor.checks",
    "render_json": "gputui.doctor.render",
    "render_text": "gputui.doctor.render",
    "run_doctor": "gputui.doctor.run",
}


def __getattr__(name: str) -> Any:
    """Import the public names on first use, so ``gputui --help`` stays instant."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gputui.doctor' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "Check",
    "DeviceReport",
    "DoctorReport",
    "Status",
    "render_json",
    "render_text",
    "run_doctor",
]
