"""The layers never leak at run time: every module but the app's imported together brings no
Textual, every one outside the engine no torch (import-linter's contracts, in ``.ci/run``, hold
each module's own imports); and no module imports another that imports it back.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT


def _modules(package: str) -> list[str]:
    pkg = __import__(package, fromlist=["_"])
    found = [package]
    for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}."):
        found.append(info.name)
    return found


def _imported_after(modules: list[str]) -> set[str]:
    """The top-level packages in ``sys.modules`` after importing ``modules``, in a fresh
    interpreter (so that nothing another test imported hides a leak)."""
    imports = "; ".join(f"import {module}" for module in modules)
    code = f"import json, sys; {imports}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return {name.split(".")[0] for name in json.loads(out)}


HEADLESS = (
    _modules("gputui.telemetry")
    + _modules("gputui.doctor")
    + _modules("gputui.serve")
    + _modules("gputui.fleet")
    + _modules("gputui.recording")
    + _modules("gputui.jobs")
    + _modules("gputui.engine")
    + _modules("gputui.commands")
    + ["gputui.device", "gputui.files", "gputui.format", "gputui.exits", "gputui.pci"]
    + ["gputui.system"]
)
"""Every module but the app's: none may import Textual or Rich."""

TORCH_FREE = [
    module
    for module in _modules("gputui")
    if not module.startswith("gputui.engine") and module != "gputui.__main__"  # it runs gputui
]
"""Every module outside the engine."""


def test_headless_modules_import_no_textual_even_through_other_packages() -> None:
    """import-linter sees gputui's own imports; this sees what they bring at run time."""
    assert not _imported_after(HEADLESS) & {"textual", "rich"}


def test_only_the_engine_imports_torch_even_through_other_packages() -> None:
    assert "torch" not in _imported_after(TORCH_FREE)


def test_no_import_cycle_between_gputui_s_modules() -> None:
    """Counting imports inside functions too, as grimp (import-linter's graph) sees them."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("gputui")
    modules = sorted(graph.modules)
    cycles = []
    for module in modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(imported=module, importer=imported):
                cycles.append(f"{module} -> {imported} -> ... -> {module}")
    assert not cycles, "\n".join(cycles)


def test_a_module_over_600_lines_says_why_at_its_top() -> None:
    """Issue 41: a long file is a choice, written down where a reader opens it."""
    for path in sorted((ROOT / "gputui").rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 600:
            assert "Over 600 lines: " in (ast.get_docstring(ast.parse(text)) or ""), path
