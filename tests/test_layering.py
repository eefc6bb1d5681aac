"""The layers never leak: telemetry and training import no Textual, the UI imports no torch.

Each check imports a module in a fresh interpreter and inspects ``sys.modules``,
so nothing another test imported can hide a leak.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest


def _modules(package: str) -> list[str]:
    pkg = __import__(package, fromlist=["_"])
    found = [package]
    for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}."):
        found.append(info.name)
    return found


def _imported_after(module: str) -> set[str]:
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return {name.split(".")[0] for name in json.loads(out)}


HEADLESS = (
    _modules("gputui.telemetry")
    + _modules("gputui.doctor")
    + _modules("gputui.training")
    + ["gputui.cli", "gputui.format"]
)


@pytest.mark.parametrize("module", HEADLESS)
def test_headless_modules_import_no_textual(module: str) -> None:
    leaked = _imported_after(module) & {"textual", "rich"}
    assert not leaked, f"{module} imports {sorted(leaked)}"


@pytest.mark.parametrize(
    "module",
    _modules("gputui.telemetry")
    + _modules("gputui.doctor")
    + _modules("gputui.ui")
    + ["gputui.cli", "gputui.format"],
)
def test_ui_process_never_imports_torch(module: str) -> None:
    assert "torch" not in _imported_after(module), f"{module} imports torch"
