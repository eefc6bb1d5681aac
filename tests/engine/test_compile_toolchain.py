"""``--compile`` without a compiler or Python's headers: one line, kind ``toolchain``, no crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gputui.engine.toolchain import INSTALL_HINT, TOOLCHAIN, missing_for_compile
from tests.helpers import ROOT

CXX = "clang++" if sys.platform == "darwin" else "g++"
"""The C++ compiler Inductor looks for when ``CXX`` is unset."""


def which_of(*found: str) -> Callable[[str], str | None]:
    """A stand-in for :func:`shutil.which` that finds only ``found``."""
    return lambda name: f"/usr/bin/{name}" if name in found else None


@pytest.mark.parametrize("variable", [None, "CXX"])
def test_a_compiled_cpu_run_without_a_compiler_ends_in_one_line_before_compiling(
    tmp_path: Path, variable: str | None
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX")}
    env["PATH"] = str(tmp_path)  # an empty folder: no g++, gcc, cc or clang
    if variable:
        env[variable] = "/nowhere/g++"
    args = ["--device", "cpu", "--dataset", "synthetic", "--compile", "--limit", "64"]
    args += ["--batch-size", "32", "--epochs", "1", "--threads", "1", "--json", "--no-record"]
    done = subprocess.run(
        [sys.executable, "-m", "gputui", "bench", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    [run] = json.loads(done.stdout)["runs"]
    error = run["error"]
    assert run["status"] == "error" and error["kind"] == TOOLCHAIN
    why = "CXX=/nowhere/g++ is not a program" if variable else f"CXX unset, no {CXX} on PATH"
    assert error["message"] == (
        f"--compile cannot build kernels: no C++ compiler ({why}); {INSTALL_HINT}"
    )
    assert run["epochs"] == [] and run["device_name"] is None  # refused before the run began
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("environ", "found", "missing"),
    [
        ({}, which_of("gcc"), None),
        ({}, which_of("clang"), None),
        ({}, which_of("cc", "g++"), "no C compiler (CC unset, no gcc or clang on PATH)"),
        ({"CC": "/opt/cc-12"}, which_of("gcc"), "no C compiler (CC=/opt/cc-12 is not a program)"),
        ({"CC": "ccache gcc"}, which_of("ccache"), None),
    ],
)
def test_cuda_needs_the_c_compiler_triton_looks_for(
    environ: dict[str, str],
    found: Callable[[str], str | None],
    missing: str | None,
    tmp_path: Path,
) -> None:
    (tmp_path / "Python.h").touch()
    line = missing_for_compile("cuda", environ, found, str(tmp_path))
    expected = f"--compile cannot build kernels: {missing}; {INSTALL_HINT}"
    assert line == (None if missing is None else expected)


@pytest.mark.parametrize(
    ("environ", "found", "missing"),
    [
        ({}, which_of("icpx"), None),
        ({}, which_of("g++"), None),
        ({}, which_of("gcc"), "no C++ compiler (CXX unset, no icpx or clang++ or g++ on PATH)"),
    ],
)
def test_xpu_needs_the_cxx_compiler_intel_s_triton_looks_for(
    environ: dict[str, str],
    found: Callable[[str], str | None],
    missing: str | None,
    tmp_path: Path,
) -> None:
    (tmp_path / "Python.h").touch()
    line = missing_for_compile("xpu", environ, found, str(tmp_path))
    assert line == (
        None if missing is None else f"--compile cannot build kernels: {missing}; {INSTALL_HINT}"
    )


def test_missing_python_headers_are_named_with_the_compiler(tmp_path: Path) -> None:
    line = missing_for_compile("cpu", {}, which_of(), str(tmp_path))
    assert line is not None and line.startswith(
        f"--compile cannot build kernels: no C++ compiler (CXX unset, no {CXX} on PATH) and "
        f"no Python headers (no Python.h in {tmp_path}); "
    )
    assert "build-essential" in line and "python3-dev" in line and "drop --compile" in line


def test_a_machine_with_both_and_mps_are_not_refused(tmp_path: Path) -> None:
    (tmp_path / "Python.h").touch()
    assert missing_for_compile("cpu", {}, which_of(CXX), str(tmp_path)) is None
    assert missing_for_compile("mps", {}, which_of(), str(tmp_path / "none")) is None
