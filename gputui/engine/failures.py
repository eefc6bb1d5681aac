"""How a failed run's error reads to the user: one line, with the hint a CUDA error needs.

CUDA reports a kernel's error at a later API call, so the traceback of a "CUDA error"
usually points at an innocent line; ``CUDA_LAUNCH_BLOCKING=1`` makes every launch wait
and the error surface where it happened. torch says so on a later line of its message,
which the one-line summary drops: :func:`failure_line` puts it back.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from gputui.format import exception_line

CUDA_ERROR = re.compile(r"CUDA error|device-side assert|\bcudaError[A-Z]\w*")
"""How a CUDA runtime error reads in torch's messages (``CUDA error: an illegal memory
access was encountered``, ``device-side assert triggered``, ``cudaErrorLaunchFailure``)."""
ERROR_TEXT_MAX = 1000
"""Longest error text passed on; torch's CUDA errors can run to pages."""
LAUNCH_BLOCKING_HINT = (
    "CUDA reports kernel errors late: run again with CUDA_LAUNCH_BLOCKING=1 to see where "
    "it happened"
)


def is_cuda_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a CUDA runtime error (its message, any line, says so)."""
    return CUDA_ERROR.search(str(exc)) is not None


def failure_line(exc: BaseException, environ: Mapping[str, str] = os.environ) -> str:
    """``exc`` as one line (type and first line of its text), and for a CUDA error the
    ``CUDA_LAUNCH_BLOCKING=1`` hint, unless ``environ`` already had it set."""
    line = exception_line(exc)
    if is_cuda_error(exc) and environ.get("CUDA_LAUNCH_BLOCKING", "").strip() != "1":
        line += f"; {LAUNCH_BLOCKING_HINT}"
    return line


def error_text(error: BaseException) -> str:
    """``RuntimeError: Invalid device string: 'cuda0'``: the type and torch's own words."""
    text = f"{type(error).__name__}: {error}".strip()
    return text if len(text) <= ERROR_TEXT_MAX else text[: ERROR_TEXT_MAX - 1] + "…"
