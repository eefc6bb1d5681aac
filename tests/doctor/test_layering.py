"""The doctor is headless and torch-free; the probe imports torch only when it runs."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import gputui.doctor


def _loaded_after(code: str) -> set[str]:
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return {name.split(".")[0] for name in json.loads(out)}


def test_the_doctor_imports_no_torch_and_no_textual() -> None:
    modules = [
        info.name for info in pkgutil.walk_packages(gputui.doctor.__path__, "gputui.doctor.")
    ]
    assert "gputui.doctor.run" in modules
    loaded = _loaded_after("\n".join(f"import {name}" for name in modules))
    assert not loaded & {"torch", "textual", "rich"}


def test_importing_the_probe_does_not_import_torch() -> None:
    loaded = _loaded_after("import gputui.engine.probe")
    assert not loaded & {"torch", "textual", "rich"}
