"""What ``torch.compile`` needs besides Python, checked before a run compiles anything.

Inductor builds the model's kernels with the machine's compiler, against Python's headers:
on the CPU it builds C++ with ``CXX``, else ``g++`` (``clang++`` on macOS); on CUDA,
Triton builds its kernel launcher in C with ``CC``, else ``gcc`` or ``clang``; on XPU, Intel's
Triton builds it in C++ with ``CXX``, else ``icpx``, ``clang++`` or ``g++``. A bare
image (no build-essential, no python3-dev) lacks them, and the first compiled step fails
deep inside the compiler. :func:`missing_for_compile` says so first, in one line, for an
error of kind :data:`TOOLCHAIN` (a smoke suite counts such a run as skipped, not failed).
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from collections.abc import Callable, Mapping
from pathlib import Path

TOOLCHAIN = "toolchain"
"""The ``Error.kind`` of a compiled run this machine cannot build kernels for."""
INSTALL_HINT = (
    "install build-essential and python3-dev (or this Python's headers), or drop --compile"
)


def missing_for_compile(
    device_type: str,
    environ: Mapping[str, str] = os.environ,
    which: Callable[[str], str | None] = shutil.which,
    include_dir: str | None = None,
) -> str | None:
    """One line saying what ``torch.compile`` lacks here for ``device_type`` and what to do;
    ``None``: nothing (and for MPS, whose kernels Metal builds). ``environ`` gives ``CC`` and
    ``CXX``; ``include_dir`` is where Python's headers belong (by default this Python's)."""
    if device_type not in ("cpu", "cuda", "xpu"):
        return None
    missing = []
    if device_type == "cuda":
        compiler = _missing_compiler("C", "CC", ("gcc", "clang"), environ, which)
    elif device_type == "xpu":
        compiler = _missing_compiler("C++", "CXX", ("icpx", "clang++", "g++"), environ, which)
    else:
        default = "clang++" if sys.platform == "darwin" else "g++"
        compiler = _missing_compiler("C++", "CXX", (default,), environ, which)
    if compiler is not None:
        missing.append(compiler)
    include = include_dir if include_dir is not None else sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        missing.append(f"no Python headers (no Python.h in {include})")
    if not missing:
        return None
    return f"--compile cannot build kernels: {' and '.join(missing)}; {INSTALL_HINT}"


def _missing_compiler(
    language: str,
    variable: str,
    programs: tuple[str, ...],
    environ: Mapping[str, str],
    which: Callable[[str], str | None],
) -> str | None:
    named = environ.get(variable, "").strip()
    if named:  # used as it is by Inductor and Triton (Intel's falls back, but it is a mistake)
        found = which(named.split()[0])
        return None if found else f"no {language} compiler ({variable}={named} is not a program)"
    if any(which(program) for program in programs):
        return None
    return f"no {language} compiler ({variable} unset, no {' or '.join(programs)} on PATH)"
