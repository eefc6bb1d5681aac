"""The Doctor screen, driven by the pilot and fed a fixed report (no torch is spawned).

Snapshots: regenerate with
``python -m pytest tests/ui/test_doctor.py --snapshot-update`` and look at the SVGs in
``__snapshots__/test_doctor`` before committing them.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from textual.binding import Binding, BindingType
from textual.command import CommandPalette
from textual.pilot import Pilot

from gputui.doctor.checks import Check, DoctorReport, Status
from gputui.telemetry.polling import Samplers
from gputui.telemetry.readings import NvmlReading
from gputui.ui.doctor.screen import DOCTOR_COMMAND, DoctorScreen, run_real_doctor
from gputui.ui.monitor.app import MonitorApp
from gputui.ui.widgets.doctor_report import CheckItem, DeviceCard, device_rows, fix_to_copy
from tests.ui.doctor_fakes import INSTALL_CUDA, REPORT, FixedDoctor
from tests.ui.fakes import (
    CountingCpuSampler,
    ScriptedSampler,
    cpu_reading,
    fake_app,
    screen_settled,
    screen_text,
    settled,
    wait_until,
)


@pytest.fixture
def doctors() -> Iterator[list[FixedDoctor]]:
    """Doctors made by a test; released afterwards so no thread stays stuck."""
    made: list[FixedDoctor] = []
    yield made
    for doctor in made:
        doctor.release.set()


def doctor_app(doctor: Any, *, cpu: Any = None, interval: float = 60.0) -> MonitorApp:
    """The real app fed by fakes, with ``doctor`` in place of the real one."""
    app = fake_app(cpu=cpu, interval=interval)
    app.doctor = doctor
    return app


def doctor_screen(app: MonitorApp) -> DoctorScreen:
    screen = app.screen
    assert isinstance(screen, DoctorScreen), type(screen)
    return screen


async def open_doctor(pilot: Pilot[Any]) -> DoctorScreen:
    """Press ``d`` and wait for the report."""
    await pilot.press("d")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, DoctorScreen))
    screen = doctor_screen(pilot.app)  # type: ignore[arg-type]
    await wait_until(pilot, lambda: screen.runs >= 1)
    await screen_settled(pilot)  # the report's cards laid out (loaded cores take frames)
    return screen


async def test_d_shows_the_report_escape_returns_to_the_monitor_and_q_quits() -> None:
    doctor = FixedDoctor()
    app = doctor_app(doctor)
    async with app.run_test(size=(160, 60)) as pilot:
        await settled(pilot)
        assert "d Doctor" in screen_text(app)  # the footer shows the key
        screen = await open_doctor(pilot)
        items = list(screen.query(CheckItem))
        assert [item.check for item in items] == list(REPORT.checks)
        text = screen_text(app)
        assert "Doctor · 1 failed, 1 warning, 2 ok, 2 skipped, 1 shown." in text
        for word, name in (
            ("✗ FAIL", "torch build"),
            ("! warn", "CUDA_VISIBLE_DEVICES"),
            ("✓ ok", "nvidia driver"),
            ("- skip", "driver vs build"),
        ):
            assert any(word in line and name in line for line in text.splitlines()), name
        assert f"fix {INSTALL_CUDA}" in text
        assert "fix `unset CUDA_VISIBLE_DEVICES`" in text
        assert "tip write `'cuda:0'`" in text
        assert "esc Back" in text and "q Quit" in text  # the footer shows both
        assert "Run again" in text and "Copy fix" in text
        assert "Train" not in text  # modal: the monitor's keys are not offered here
        assert doctor.calls == [app.monitor.nvml]  # the app's reading: NVML is not opened again

        cards = list(screen.query(DeviceCard))
        assert [str(card.device.device) for card in cards] == ["cpu", "cuda:0"]
        assert "cuda:0  NVIDIA H100 80GB HBM3" in text
        assert "copy on device   2.90 TB/s read + write" in text
        assert "host memcpy      9.66 GB/s read + write" in text
        assert "host → device    pageable 5.50 GB/s · pinned 24.0 GB/s" in text
        assert "device → host    pageable 4.90 GB/s · pinned n/a" in text
        assert "matmul           fp32 48.2 TFLOP/s · bf16 612 TFLOP/s" in text
        assert "matmul           fp32 124 GFLOP/s · bf16 n/a" in text
        assert "host ⇄ device    n/a (the CPU is the host)" in text
        assert "· device -> host pinned: timed out" in text

        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, DoctorScreen))
        assert "CPU · AMD EPYC 7763" in screen_text(app)
        await open_doctor(pilot)
        await pilot.press("q")  # quits from here too, as on the monitor
        await wait_until(pilot, lambda: not app.is_running)
        assert app.return_code == 0
    assert dict(device_rows(REPORT.devices[0]))["compute"] == "n/a"
    assert dict(device_rows(REPORT.devices[1]))["compute"] == "9.0"


async def test_the_first_failure_is_focused_and_c_copies_its_command() -> None:
    app = doctor_app(FixedDoctor())
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        screen = await open_doctor(pilot)
        focused = screen.focused
        assert isinstance(focused, CheckItem) and focused.check.name == "torch build"
        await pilot.press("c")
        assert app.clipboard == INSTALL_CUDA
        await pilot.press("down", "down")  # driver vs build (no fix), then the warning
        focused = screen.focused
        assert isinstance(focused, CheckItem) and focused.check.name == "CUDA_VISIBLE_DEVICES"
        await pilot.press("c")
        assert app.clipboard == "unset CUDA_VISIBLE_DEVICES"
        await pilot.press("up")
        await pilot.press("c")  # a check without a fix copies nothing
        assert app.clipboard == "unset CUDA_VISIBLE_DEVICES"


def test_fix_to_copy_takes_the_command() -> None:
    assert fix_to_copy(INSTALL_CUDA) == INSTALL_CUDA
    assert fix_to_copy("put both on one device first: `x.to(device) + y.to(device)`") == (
        "x.to(device) + y.to(device)"
    )
    assert fix_to_copy("update the NVIDIA driver") == "update the NVIDIA driver"


def palette_actions(app: MonitorApp) -> set[str]:
    """The actions the command palette offers on the app's screen (the callbacks' names)."""
    return {
        getattr(command.callback, "__name__", "") for command in app.get_system_commands(app.screen)
    }


def binding_actions(bindings: list[BindingType]) -> dict[str, str]:
    """Each key's action method, as the palette's callbacks are named (``action_quit``)."""
    out = {}
    for spec in bindings:
        binding = spec if isinstance(spec, Binding) else Binding(*spec)
        action = binding.action.split("(")[0].rpartition(".")[2]
        out[binding.key] = f"action_{action}"
    return out


async def test_every_key_of_the_monitor_and_the_doctor_is_in_the_command_palette() -> None:
    """The README says every key is in the palette: each binding of the app (on the monitor)
    and of the Doctor screen (on it) has a command that runs its action."""
    app = doctor_app(FixedDoctor())
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        for key, action in binding_actions(MonitorApp.BINDINGS).items():
            assert action in palette_actions(app), f"{key} ({action}) is not in the palette"
        await open_doctor(pilot)
        for key, action in binding_actions(DoctorScreen.BINDINGS).items():
            assert action in palette_actions(app), f"{key} ({action}) is not in the palette"
        assert "action_runner_start" not in palette_actions(app)  # its keys do not work here


async def test_the_palette_command_opens_the_doctor() -> None:
    app = doctor_app(FixedDoctor())
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"doctor")
        await wait_until(pilot, lambda: DOCTOR_COMMAND in screen_text(app))
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, DoctorScreen))
        screen = doctor_screen(app)
        await wait_until(pilot, lambda: screen.runs == 1)
        assert len(screen.query(CheckItem)) == len(REPORT.checks)


async def test_the_monitor_keeps_updating_while_the_doctor_runs(
    doctors: list[FixedDoctor],
) -> None:
    doctor = FixedDoctor(hold=True)
    doctors.append(doctor)
    cpu = CountingCpuSampler()
    app = doctor_app(doctor, cpu=cpu, interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await pilot.press("d")
        await wait_until(pilot, doctor.running.is_set)
        screen = doctor_screen(app)
        assert screen.running
        assert screen.query_one("#doctor-spinner").display  # the loading indicator shows
        text = screen_text(app)
        assert "Running the doctor…" in text
        assert "torch is imported in a child process" in text
        assert "Checks" not in text  # no empty headings
        painted = app.handled["cpu"]
        await wait_until(pilot, lambda: app.handled["cpu"] >= painted + 3)
        await pilot.press("r")  # one run at a time
        assert len(doctor.calls) == 1
        doctor.release.set()
        await wait_until(pilot, lambda: screen.runs == 1)
        assert not screen.running
        assert not screen.query_one("#doctor-spinner").display
        assert len(screen.query(CheckItem)) == len(REPORT.checks)


async def test_closing_mid_run_does_not_wait_for_the_doctor(doctors: list[FixedDoctor]) -> None:
    doctor = FixedDoctor(hold=True)
    doctors.append(doctor)
    app = doctor_app(doctor)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await pilot.press("d")
        await wait_until(pilot, doctor.running.is_set)
        (worker,) = [worker for worker in app.workers if worker.group == "doctor"]
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, DoctorScreen))
        await wait_until(pilot, lambda: worker.is_finished)  # while the doctor still hangs
        assert worker.is_cancelled
        assert not doctor.release.is_set()
        (thread,) = doctor.threads
        assert thread.is_alive() and thread.daemon  # left behind: exiting never waits on it
        assert app.is_running


async def test_r_runs_the_doctor_again() -> None:
    doctor = FixedDoctor()
    app = doctor_app(doctor)
    async with app.run_test(size=(160, 30)) as pilot:
        await settled(pilot)
        screen = await open_doctor(pilot)
        assert screen.query_one("#doctor-devices").has_class("-several")  # two cards a row
        cpu = replace(REPORT.devices[0], name="[bold]CPU[/]", notes=("tensor([1, 2]) [run 7]",))
        cpu_only = DoctorReport(
            checks=(Check("torch", Status.OK, "torch 2.13.0 again."),), devices=(cpu,)
        )
        doctor.report = cpu_only
        await pilot.press("r")
        await wait_until(pilot, lambda: screen.runs == 2)
        assert len(doctor.calls) == 2
        assert [item.check.message for item in screen.query(CheckItem)] == ["torch 2.13.0 again."]
        assert not screen.query_one("#doctor-devices").has_class("-several")
        (card,) = screen.query(DeviceCard)
        assert card.size.width > 150  # one card takes the whole width
        text = screen_text(app)
        assert "cpu  [bold]CPU[/]" in text and "· tensor([1, 2]) [run 7]" in text  # not markup
        doctor.report = DoctorReport(checks=cpu_only.checks)
        await pilot.press("r")
        await wait_until(pilot, lambda: screen.runs == 3)
        assert not screen.query(DeviceCard)
        assert "Devices" not in screen_text(app)


async def test_a_pitfall_shown_reads_info() -> None:
    """Issue 43: a mistake torch raised its error for on purpose reads ``info``, not ``ok``."""
    shown = Check("pitfall: 'cuda0'", Status.INFO, "`torch.device('cuda0')` raises an error")
    app = doctor_app(FixedDoctor(DoctorReport(checks=(shown,))))
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        await open_doctor(pilot)
        assert "i info  pitfall: 'cuda0'" in screen_text(app)


async def test_a_doctor_that_raises_is_reported_not_fatal() -> None:
    def broken(nvml: NvmlReading | None) -> DoctorReport:
        raise RuntimeError("probe [exploded]\nsecond line")

    app = doctor_app(broken)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        screen = await open_doctor(pilot)
        assert screen.error == "RuntimeError: probe [exploded]"
        assert "The doctor could not run (RuntimeError: probe [exploded])" in screen_text(app)
        assert app.is_running


# -- snapshots ---------------------------------------------------------------------------------


async def _doctor_shown(pilot: Pilot[Any]) -> None:
    await settled(pilot)
    await open_doctor(pilot)


def test_doctor_snapshot_80x24(snap_compare: Any) -> None:
    assert snap_compare(doctor_app(FixedDoctor()), terminal_size=(80, 24), run_before=_doctor_shown)


def test_doctor_snapshot_160x50(snap_compare: Any) -> None:
    assert snap_compare(
        doctor_app(FixedDoctor()), terminal_size=(160, 50), run_before=_doctor_shown
    )


def test_the_app_takes_the_doctor() -> None:
    sampler = ScriptedSampler(cpu_reading())
    samplers = Samplers(cpu=sampler, nvml=sampler, mps=sampler)  # type: ignore[arg-type]
    doctor = FixedDoctor()
    assert MonitorApp(samplers, doctor=doctor).doctor is doctor
    real = MonitorApp(samplers).doctor  # production: the real one, imported when first run
    assert real is not run_real_doctor and real.__name__ == "_run_real_doctor"
    assert "run_real_doctor(nvml)" in inspect.getsource(real)
