"""Make the README's SVG screenshots of the real app (and PNGs beside them with rsvg-convert).

Run from the repository root (needs gcc for the stand-in NVML library)::

    python screenshots/make_screenshots.py

What each screenshot shows, honestly:

- ``monitor.svg``: the live monitor; the CPU panel is this machine (psutil), the two
  H100s are simulated by the stand-in ``libnvidia-ml.so.1`` (tests/fakenvml) read
  through the real ``nvidia-ml-py`` bindings.
- ``compare.svg``: a finished CPU-vs-cuda:0 comparison. The CPU run is replayed from a
  recording of the real trainer on a CPU (tests/ui/streams); the machine that makes
  the screenshots has no GPU, so the cuda:0 run is an *injected, made-up event stream*
  (tests/ui/runner_fakes.py); the monitor beside it is the stand-in NVML library.
- ``compare_cpu_vs_cpu.svg``: a REAL comparison, trained here: the CPU against itself
  (tiny synthetic data), the same code path as CPU against a GPU.
- ``placement.svg``: the runner after a REAL CPU run: where each parameter group,
  its Adam state and the input batches live.
- ``experiment.svg``: a REAL sync-stall experiment (issue 6) on this machine's CPU.
- ``doctor.svg``: the Doctor screen after a REAL doctor run (screenshots/doctor.py):
  this machine's CPU-only torch and CPU figures, diagnosed against the two H100s of
  the stand-in NVML library.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from textual.widgets import Select  # noqa: E402

from gputui.device import CPU  # noqa: E402
from gputui.jobs.config import RunConfig  # noqa: E402
from gputui.jobs.results import Phase  # noqa: E402
from gputui.jobs.runner import UI_NICE, RunnerSetup  # noqa: E402
from gputui.telemetry.polling import Samplers  # noqa: E402
from gputui.ui.monitor.app import MonitorApp  # noqa: E402
from screenshots.doctor import shoot_doctor  # noqa: E402
from tests.fakenvml import build_fake_nvml, load_fake_nvml  # noqa: E402
from tests.ui.runner_fakes import scripted_setup  # noqa: E402
from tests.ui.streams.scenarios import RECORDED  # noqa: E402

OUT = Path(__file__).resolve().parent
TINY_REAL = RunConfig(
    nice=UI_NICE,
    device=CPU,
    epochs=3,
    batch_size=64,
    dataset="synthetic",
    limit=4096,
    test_limit=512,
    threads=1,
    record=False,
)
"""A real run of a few seconds on this machine."""


async def _until(condition: Callable[[], bool], timeout_s: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise TimeoutError(f"timed out waiting for {condition}")
        await asyncio.sleep(0.05)


async def shoot(
    name: str,
    runner: RunnerSetup,
    size: tuple[int, int],
    *,
    key: str | None = None,
    toggle: bool = False,
    experiment: str | None = None,
    title: str,
) -> Path:
    """Run the app at ``size``, optionally press ``key`` and wait for the run, then save."""
    app: MonitorApp = MonitorApp(Samplers.real(), interval=0.5, runner=runner)
    async with app.run_test(size=size) as pilot:
        await _until(lambda: app.handled["nvml"] >= 3 and app.handled["cpu"] >= 3)
        if toggle:
            await pilot.press("t")
        if app.runner.display:  # a hidden pane is never built and lists no devices
            await _until(lambda: bool(app.runner.devices) or app.runner.devices_error is not None)
        if experiment is not None:
            app.runner.query_one("#runner-experiment", Select).value = experiment
            await pilot.press("x")
            await pilot.pause(0.2)
            await _until(lambda: not app.runner.busy)
        elif key is not None:
            await pilot.press(key)
            await _until(
                lambda: (
                    app.runner.session is not None
                    and app.runner.session.phase in (Phase.FINISHED, Phase.FAILED)
                )
            )
        await pilot.pause(0.6)
        path = OUT / f"{name}.svg"
        path.write_text(app.export_screenshot(title=title))
    app.wait_for_samplers(1.0)
    return path


async def main() -> int:
    lib_dir = build_fake_nvml(Path(tempfile.gettempdir()) / "gputui-fake-nvml")
    load_fake_nvml(lib_dir)  # this process's pynvml reads the 2 simulated H100s
    real = RunnerSetup(defaults=TINY_REAL)  # the real trainer and this machine's devices
    made = [
        await shoot("monitor", scripted_setup(), (140, 42), title="gputui · 2 simulated H100s"),
        await shoot(
            "compare",
            scripted_setup(defaults=RECORDED),  # the recorded CPU run's settings
            (170, 50),
            key="c",
            title="gputui · recorded CPU run vs cuda:0 (injected event stream: no GPU here)",
        ),
        await shoot(
            "compare_cpu_vs_cpu",
            real,
            (170, 50),
            key="c",
            title="gputui · real run: CPU vs CPU (tiny synthetic data)",
        ),
        await shoot(
            "placement",
            real,
            (100, 40),
            key="r",
            toggle=True,
            title="gputui · placement after a real CPU run",
        ),
        await shoot(
            "experiment",
            RunnerSetup(defaults=TINY_REAL, experiment_budget_s=0.5),
            (100, 40),
            toggle=True,
            experiment="sync-stall",
            title="gputui · real sync-stall experiment on this CPU",
        ),
    ]
    made.append(await shoot_doctor(OUT))
    converter = shutil.which("rsvg-convert")
    for svg in made:
        if converter is not None:
            subprocess.run([converter, str(svg), "-o", str(svg.with_suffix(".png"))], check=True)
        print(svg.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
