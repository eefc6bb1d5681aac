"""Make ``screenshots/doctor.svg``: the app's Doctor screen after a REAL doctor run.

The doctor really runs here: a child process imports this machine's (CPU-only) torch
and measures the CPU. The two H100s it diagnoses against are simulated by the stand-in
``libnvidia-ml.so.1`` (tests/fakenvml), read by the app's real NVML sampler and handed
to the doctor, so the screen shows the headline failure (a CPU-only torch on a machine
with an NVIDIA driver) with its exact fix. ``make_screenshots.py`` calls
:func:`shoot_doctor`; run alone from the repository root (needs gcc)::

    python screenshots/doctor.py
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

from gputui.telemetry.polling import Samplers  # noqa: E402
from gputui.ui.doctor.screen import DoctorScreen  # noqa: E402
from gputui.ui.monitor.app import MonitorApp  # noqa: E402
from tests.fakenvml import build_fake_nvml, load_fake_nvml  # noqa: E402
from tests.ui.runner_fakes import scripted_setup  # noqa: E402

OUT = Path(__file__).resolve().parent
SIZE = (140, 44)
"""Wide enough for a column of check names; tall enough for every check and the CPU."""


async def _until(condition: Callable[[], bool], timeout_s: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise TimeoutError(f"timed out waiting for {condition}")
        await asyncio.sleep(0.05)


async def shoot_doctor(out_dir: Path = OUT, size: tuple[int, int] = SIZE) -> Path:
    """Open the Doctor screen in the real app, wait for the real doctor, save the SVG.

    The stand-in NVML library must already be loaded (see :func:`main`).
    """
    app = MonitorApp(Samplers.real(), interval=0.5, runner=scripted_setup())
    async with app.run_test(size=size) as pilot:
        await _until(lambda: app.handled["nvml"] >= 1 and app.handled["cpu"] >= 1)
        await pilot.press("d")
        await _until(lambda: isinstance(app.screen, DoctorScreen))
        screen = app.screen
        assert isinstance(screen, DoctorScreen)
        await _until(lambda: screen.runs >= 1)
        await pilot.pause(0.3)
        path = out_dir / "doctor.svg"
        path.write_text(
            app.export_screenshot(
                title="gputui · Doctor: real run, CPU-only torch; 2 H100s simulated (stand-in NVML)"
            )
        )
    app.wait_for_samplers(1.0)
    return path


async def main() -> int:
    """Load the stand-in NVML library, shoot, and convert to PNG when rsvg-convert is here."""
    load_fake_nvml(build_fake_nvml(Path(tempfile.gettempdir()) / "gputui-fake-nvml"))
    svg = await shoot_doctor()
    converter = shutil.which("rsvg-convert")
    if converter is not None:
        subprocess.run([converter, str(svg), "-o", str(svg.with_suffix(".png"))], check=True)
    print(svg.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
