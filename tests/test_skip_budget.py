"""The skip budget (tests/conftest.py's SKIPS_ALLOWED_UNDER_CI), held by a real pytest run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import SKIPS_ALLOWED_UNDER_CI
from tests.helpers import ROOT

TESTS = f"""
import pytest

def test_skips_as_allowed():
    pytest.skip({next(iter(SKIPS_ALLOWED_UNDER_CI))!r})

@pytest.mark.skipif(True, reason="tmux is not installed")
def test_skips_for_a_missing_tool():
    pass
"""


def test_under_ci_a_skip_outside_the_budget_fails_the_run_naming_it(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_make_collect_report, pytest_runtest_makereport\n"
    )
    (tmp_path / "test_skips.py").write_text(TESTS)
    env = {
        **os.environ,
        "CI": "true",
        "PYTHONPATH": str(ROOT),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_skips.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stdout
    assert "1 skipped, 1 error" in done.stdout
    assert "ERROR test_skips.py::test_skips_for_a_missing_tool" in done.stdout
    assert "a skip not in SKIPS_ALLOWED_UNDER_CI: Skipped: tmux is not installed" in done.stdout
