"""Shared pytest fixtures. Each block below belongs to one part of the suite."""

from __future__ import annotations

# ---------------------------------------------------------------------------
# Fake NVML: the stand-in libnvidia-ml.so.1 (tests/fakenvml), built with gcc.
# ---------------------------------------------------------------------------
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

from tests.fakenvml import (
    CompilerNotFound,
    FakeNvml,
    build_fake_nvml,
    find_c_compiler,
    load_fake_nvml,
    unload_fake_nvml,
)
from tests.ui.tmux_session import Tmux, tmux_env

# pytest-xdist's workers run with COLUMNS=80 and LINES=24 set, which Textual (and argparse)
# take for the terminal's size, in the tmux and pty sessions the tests start too. A serial
# run has neither: so neither has a worker.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)

# Training in tests takes one thread unless told (the engine reads OMP_NUM_THREADS as torch
# does): the suite runs in parallel already, and torch's threads that wait for each other on
# oversubscribed cores ran the GPU smoke rehearsal's benches 15 times slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")


Report = TypeVar("Report", pytest.TestReport, pytest.CollectReport)

SKIPS_ALLOWED_UNDER_CI = {
    "this kernel does not count fds in /proc/PID/fd's size (before 6.2)": "the host's kernel",
    "no cgroup v2 hierarchy here": "the host's cgroup mode, which no container changes",
    "for a CPU-only torch on Linux": "the torch there, CPU or CUDA build, is the one tested",
}
"""The only reasons (or their beginnings) a test may skip for under CI (``CI=true``), each
with why CI cannot make it run. Every command a test needs is installed by ``.ci/run``, so
under CI a skip for any other reason (gcc, tmux or openssl missing, say) fails the run."""


def held_to_the_skip_budget(report: Report) -> Report:
    """Under CI, a skip outside ``SKIPS_ALLOWED_UNDER_CI`` is reported as a failure."""
    if os.environ.get("CI") != "true" or not report.skipped or hasattr(report, "wasxfail"):
        return report
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if not any(reason.startswith(f"Skipped: {allowed}") for allowed in SKIPS_ALLOWED_UNDER_CI):
        report.outcome = "failed"
        report.longrepr = f"under CI, a skip not in SKIPS_ALLOWED_UNDER_CI: {reason}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport() -> Generator[None, pytest.TestReport, pytest.TestReport]:
    return held_to_the_skip_budget((yield))


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report() -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    return held_to_the_skip_budget((yield))


def pytest_configure() -> None:
    """SIGINT as a terminal's shell gives it: a suite started in the background (`cmd &` in
    a script) inherits SIGINT ignored, and so would every child the tests signal as Ctrl+C
    does (a sleeper the monitor interrupts, a run stopped as Ctrl+C stops it): they would
    not stop, and the tests would fail or wait out their timeouts."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files marked ``long_module`` first (the rest keep their order): xdist hands the
    files out in this order, and a file of minutes handed out last would end the run
    minutes after the other workers."""
    items.sort(key=lambda item: item.get_closest_marker("long_module") is None)


FakeNvmlBuilder = Callable[[Sequence[str]], Path]
"""Builds the stand-in library with the given symbols omitted; returns its folder."""


@pytest.fixture(scope="session")
def fake_nvml_builder(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> FakeNvmlBuilder:
    """Build the stand-in NVML library (cached by source hash + flags); skip without gcc.

    Builds land in pytest's cache folder so later sessions reuse them (a session
    tmp folder when the cache plugin is off).
    """
    if find_c_compiler() is None:
        pytest.skip("no C compiler (gcc or cc) to build the stand-in libnvidia-ml.so.1")
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        out_dir = Path(cache.mkdir("fake_nvml"))
    else:
        out_dir = tmp_path_factory.mktemp("fake_nvml")

    def build(omit: Sequence[str] = ()) -> Path:
        try:
            return build_fake_nvml(out_dir, omit=omit)
        except CompilerNotFound as err:
            pytest.skip(str(err))

    return build


@pytest.fixture(scope="session")
def fake_nvml_dir(fake_nvml_builder: FakeNvmlBuilder) -> Path:
    """Folder holding the full stand-in ``libnvidia-ml.so.1`` (for ``LD_LIBRARY_PATH``)."""
    return fake_nvml_builder(())


@pytest.fixture
def fake_nvml_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Clear every ``FAKE_NVML_*`` variable; set knobs on the returned monkeypatch."""
    for name in list(os.environ):
        if name.startswith("FAKE_NVML_"):
            monkeypatch.delenv(name)
    return monkeypatch


@pytest.fixture
def load_nvml(
    fake_nvml_builder: FakeNvmlBuilder, fake_nvml_env: pytest.MonkeyPatch
) -> Iterator[Callable[..., FakeNvml]]:
    """Point in-process ``pynvml`` at a stand-in library: ``load_nvml(omit=[...])``.

    ``FAKE_NVML_*`` variables start cleared; set them (``fake_nvml_env.setenv``)
    before the first ``nvmlInit``. The bindings forget the library afterwards.
    """

    loaded: list[FakeNvml] = []

    def load(omit: Sequence[str] = ()) -> FakeNvml:
        loaded.append(load_fake_nvml(fake_nvml_builder(omit)))
        return loaded[-1]

    yield load
    for fake in loaded:  # no test leaves a thread asleep in the library for the next one
        fake.release_hangs()
    unload_fake_nvml()


@pytest.fixture
def fake_nvml(load_nvml: Callable[..., FakeNvml]) -> FakeNvml:
    """The full stand-in library, loaded into in-process ``pynvml`` (defaults: 2 H100s)."""
    return load_nvml()


# ---------------------------------------------------------------------------
# (end of fake NVML fixtures)
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# gputui in a real terminal (tmux); the helpers are in tests/ui/tmux_session.py.
# ---------------------------------------------------------------------------
@pytest.fixture
def tmux(fake_nvml_dir: Path) -> Iterator[Tmux]:
    """A tmux server of the test's own, set to run gputui on 2 simulated H100s; skips without
    tmux. ``tmux.env`` may be changed before ``start``; the server is killed afterwards."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    session = Tmux(tmux_env(fake_nvml_dir))
    yield session
    session.kill_server()


# ---------------------------------------------------------------------------
# (end of tmux fixtures)
# ---------------------------------------------------------------------------


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A ``sleep 600`` child (a real process to list on a GPU, or to signal); killed afterwards
    if the test left it running."""
    child = subprocess.Popen(["sleep", "600"])
    yield child
    if child.poll() is None:
        child.kill()
    child.wait()


@pytest.fixture
def ctrl_c_reaches_children() -> Iterator[None]:
    """The processes the test starts take SIGINT as a terminal's Ctrl+C ends them.

    A test run started as a shell's background job has SIGINT ignored, and a child inherits
    an ignored signal (a Python child then never raises KeyboardInterrupt). A handled one
    is reset to the default in the child: so handle it here while the test runs.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
