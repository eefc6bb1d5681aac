"""The Doctor screen: ``gputui doctor``'s report inside the app (``d``, or the palette).

The doctor blocks for seconds (a child process imports torch and measures every device), so
it runs in a thread worker that posts its report back while the monitor keeps updating. The
runner is injected (:data:`DoctorRunner`), so tests feed a fixed report without torch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, Label, LoadingIndicator
from textual.worker import get_current_worker

from gputui.doctor.checks import DoctorReport, Status
from gputui.doctor.render import summary
from gputui.format import exception_line, for_screen, one_line
from gputui.telemetry.readings import NvmlReading
from gputui.ui.widgets.doctor_report import WIDE, CheckItem, DeviceCard, ReportItem, fix_to_copy

DoctorRunner = Callable[[NvmlReading | None], DoctorReport]
"""Runs the doctor (blocking), given the app's latest NVML reading or ``None``."""

NvmlSource = Callable[[], NvmlReading | None]
"""Gives the app's latest NVML reading, or ``None`` before the first one."""

DOCTOR_COMMAND = "Doctor: why can't PyTorch see the GPU?"
"""The command palette's name for the Doctor screen."""

DOCTOR_HELP = "Check torch, the NVIDIA driver, CUDA and MPS, and measure each device"
"""The command palette's help line for the Doctor screen."""

RUNNING = "Running the doctor…"

WAITING = (
    "torch is imported in a child process (never in the app), then each device is "
    "measured: host memcpy, host ⇄ device bandwidth (GB/s), pageable and pinned, and "
    "matmul FLOP/s in fp32 and bf16. This takes a few seconds; the monitor keeps running."
)
"""What the screen says while the first report is on its way."""
TWO_UP = 140
"""Terminals this wide or wider show device cards two to a row."""
CANCEL_POLL_S = 0.1
"""How often the waiting worker checks whether it was cancelled (screen closed, app quit)."""


def run_real_doctor(nvml: NvmlReading | None) -> DoctorReport:
    """Diagnose this machine and measure every device, in a few seconds (``nvml``: the app's
    latest reading; ``None``: the doctor samples NVML itself)."""
    from gputui.doctor.run import run_doctor  # keeps the app's start-up light

    return run_doctor(nvml=nvml, quick=False)


class DoctorScreen(ModalScreen[None]):
    """The doctor's checks and devices; runs the doctor when shown and on ``r``. Modal, so
    the monitor's keys do not reach through it, but opaque and full-size."""

    CSS_PATH = Path(__file__).with_name("doctor.tcss")
    HORIZONTAL_BREAKPOINTS = [  # noqa: RUF012  # Textual's own attribute, which it types
        (0, "-narrow"),
        (WIDE, "-wide"),
        (TWO_UP, "-two-up"),
    ]
    """Wide screens give check names a column; wider ones put device cards side by side."""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Back"),
        Binding("q", "app.quit", "Quit"),  # as on the monitor (a modal screen hides the app's)
        Binding("r", "run_again", "Run again"),
        Binding("c", "copy_fix", "Copy fix"),
    ]

    @dataclass
    class Finished(Message):
        """The doctor returned a report."""

        report: DoctorReport

    @dataclass
    class Failed(Message):
        """The runner raised (it should not): the screen says so instead of the report."""

        error: str
        """The exception, in one line."""

    def __init__(self, runner: DoctorRunner, nvml: NvmlSource = lambda: None) -> None:
        """Build the screen; the doctor starts when it is mounted (``nvml``: the app's latest
        reading, so the doctor does not open NVML again)."""
        super().__init__()
        self.runner = runner
        self.nvml = nvml
        self.report: DoctorReport | None = None
        self.error: str | None = None
        """Why the last run failed, if it did."""
        self.running = False
        self.runs = 0
        """Reports (or failures) received (tests wait on it)."""

    def compose(self) -> ComposeResult:
        """Status bar, the scrolling report, footer."""
        with Horizontal(id="doctor-bar"):
            yield LoadingIndicator(id="doctor-spinner")
            yield Label(RUNNING, id="doctor-summary", markup=False)
        with VerticalScroll(id="doctor-body"):
            yield Label(WAITING, id="doctor-waiting", markup=False)
            yield Label("Checks", id="doctor-checks-title", classes="doctor-heading")
            yield Vertical(id="doctor-checks")
            yield Label(
                "Devices (bandwidth: bytes copied per second)",
                id="doctor-devices-title",
                classes="doctor-heading",
            )
            yield Vertical(id="doctor-devices")
        yield Footer()

    def on_mount(self) -> None:
        self.start()

    def start(self) -> None:
        """Run the doctor in a thread, unless it is running already."""
        if self.running:
            return
        self.running = True
        self.set_class(self.report is None, "-empty")
        self.set_class(True, "-running")
        self.refresh_bindings()
        self.query_one("#doctor-summary", Label).update(RUNNING)
        self._run(self.nvml())

    @work(thread=True, exclusive=True, exit_on_error=False, group="doctor")
    def _run(self, nvml: NvmlReading | None) -> None:
        """Run the doctor off the event loop and post what came of it. The doctor runs in a
        daemon thread this worker waits on, so that closing the screen or quitting mid-run
        returns at once (its result dropped; its probe child ends on its own)."""
        worker = get_current_worker()
        outcome: list[DoctorReport | BaseException] = []

        def doctor() -> None:
            try:
                outcome.append(self.runner(nvml))
            except Exception as error:
                outcome.append(error)

        thread = threading.Thread(target=doctor, name="gputui-doctor", daemon=True)
        thread.start()
        while thread.is_alive() and not worker.is_cancelled:
            thread.join(CANCEL_POLL_S)
        if worker.is_cancelled or not outcome:
            return
        result = outcome[0]
        if isinstance(result, DoctorReport):  # its text made printable (GPU names, errors)
            self.post_message(self.Finished(for_screen(result)))
        else:
            self.post_message(self.Failed(one_line(exception_line(result))))

    async def on_doctor_screen_finished(self, message: Finished) -> None:
        """Show the report and focus the check most worth reading."""
        self.running = False
        self.report = message.report
        self.error = None
        report = message.report
        self.set_class(False, "-running", "-empty", "-error")
        self.set_class(report.failed, "-failed")
        self.refresh_bindings()
        self.query_one("#doctor-summary", Label).update(f"Doctor · {summary(report)}")
        checks = self.query_one("#doctor-checks", Vertical)
        devices = self.query_one("#doctor-devices", Vertical)
        with self.app.batch_update():
            await checks.remove_children()
            await devices.remove_children()
            items = [CheckItem(check) for check in report.checks]
            await checks.mount_all(items)
            await devices.mount_all([DeviceCard(device) for device in report.devices])
            self.set_class(not report.devices, "-no-devices")
            devices.set_class(len(report.devices) > 1, "-several")
        self.runs += 1
        first = _most_urgent(items)
        if first is not None:
            first.focus()
            self.query_one("#doctor-body", VerticalScroll).scroll_home(animate=False)

    def on_doctor_screen_failed(self, message: Failed) -> None:
        """Say why the doctor did not run; keep the last report, if any."""
        self.running = False
        self.error = message.error
        self.set_class(False, "-running")
        self.set_class(True, "-error")
        self.refresh_bindings()
        self.query_one("#doctor-summary", Label).update(
            f"The doctor could not run ({message.error}); press r to try again."
        )
        self.runs += 1

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Dim "Run again" while the doctor runs, and "Copy fix" until there is a report."""
        if action == "run_again" and self.running:
            return None
        if action == "copy_fix" and self.report is None:
            return None
        return True

    def system_commands(self) -> Iterator[SystemCommand]:
        """This screen's keys as command palette entries (the app adds Textual's)."""
        yield SystemCommand(
            "Back", "Close the Doctor, back to the monitor (escape)", self.action_close
        )
        yield SystemCommand(
            "Run the doctor again", "Run every check again (r)", self.action_run_again
        )
        yield SystemCommand("Copy fix", "Copy the selected check's fix (c)", self.action_copy_fix)

    def action_close(self) -> None:
        """Back to the monitor (a run still going finishes on its own, unseen)."""
        self.dismiss()

    def action_run_again(self) -> None:
        self.start()

    def action_focus_item(self, step: int) -> None:
        """Focus the next (``1``) or previous (``-1``) check or device; past either end,
        scroll to that end."""
        items = list(self.query(ReportItem))
        if not items:
            return
        focused = self.focused
        index = items.index(focused) + step if isinstance(focused, ReportItem) else 0
        body = self.query_one("#doctor-body", VerticalScroll)
        if index < 0:
            body.scroll_home(animate=False)
        elif index >= len(items):
            body.scroll_end(animate=False)
        else:
            items[index].focus()

    def action_copy_fix(self) -> None:
        """Copy the focused check's fix to the clipboard."""
        focused = self.focused
        if not isinstance(focused, CheckItem):
            self.notify("Select a check (↑/↓) to copy its fix.", timeout=3)
            return
        fix = focused.check.fix
        if not fix:
            self.notify(f"'{focused.check.name}' has no fix to copy.", timeout=3, markup=False)
            return
        text = fix_to_copy(fix)
        self.app.copy_to_clipboard(text)
        self.notify(text, title="Copied", timeout=4, markup=False)


def _most_urgent(items: list[CheckItem]) -> CheckItem | None:
    """The first failed check, else the first warning, else the first check."""
    for status in (Status.FAIL, Status.WARN):
        for item in items:
            if item.check.status is status:
                return item
    return items[0] if items else None
