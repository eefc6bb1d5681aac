"""Issues 32 and 43: nvitop's and nvtop's habits. Ctrl+C and F10 quit (as ``q`` does, asking
first during a run), ``?``, ``h`` and F1 list every key, ``j`` and ``k`` move, a read-only
footer, help and palette offer no kill keys, and the ``w`` dialog says which keys start and
cancel."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App
from textual.binding import Binding
from textual.command import CommandPalette
from textual.pilot import Pilot
from textual.widgets import Input

from gputui.fleet.hosts import HostReading
from gputui.ui.fleet.app import FleetApp
from gputui.ui.monitor.app import KEY_AREAS, READONLY_REFUSAL, MonitorApp
from gputui.ui.widgets.keys_help import KeyArea, KeysHelp, action_name
from gputui.ui.widgets.process_table import ProcessTable
from gputui.ui.widgets.quit_dialog import QuitDialog
from gputui.ui.widgets.runner.pane import RunnerPane
from tests.ui.fakes import (
    ScriptedSampler,
    cpu_reading,
    fake_app,
    footer_line,
    screen_text,
    settled,
    wait_until,
)
from tests.ui.runner_fakes import gpu_run_events, scripted_setup


class NoHosts:
    """A fleet source with nothing to show (the keys are under test, not the hosts)."""

    error = None
    generation = 1

    def __init__(self) -> None:
        self.stopped = False

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True

    def latest(self) -> list[HostReading]:
        return []


def training_app() -> MonitorApp:
    """The monitor with a scripted trainer that never finishes its run."""
    return fake_app(runner=scripted_setup(lambda config: gpu_run_events(config, upto_epoch=1)))


async def start_training(pilot: Pilot[Any], app: MonitorApp) -> RunnerPane:
    """Press ``r`` once the devices are listed; the run stays in flight."""
    pane = app.runner
    await wait_until(pilot, lambda: bool(pane.devices))
    await pilot.press("r")
    await wait_until(pilot, lambda: pane.busy and pane.trainer is not None)
    return pane


# -- Ctrl+C -------------------------------------------------------------------------------


async def test_ctrl_c_quits_the_monitor_as_q_does() -> None:
    """Textual alone answers Ctrl+C with 'Press ^q to quit'; the samplers close as after q."""
    cpu = ScriptedSampler(cpu_reading())
    app = fake_app(cpu=cpu)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert not app.is_running and app.return_code == 0
    assert app.wait_for_samplers(5.0) and cpu.closed


@pytest.mark.parametrize("opened", ["question_mark", "ctrl+p", "slash"])
async def test_ctrl_c_quits_from_the_help_the_palette_and_the_filter(opened: str) -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await pilot.press(opened)
        await pilot.pause()
        assert app.screen is not app.screen_stack[0] or isinstance(app.focused, Input)
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert not app.is_running and app.return_code == 0


async def test_ctrl_c_copies_selected_text_instead_of_quitting() -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await pilot.press("slash", *"python")
        field = app.focused
        assert isinstance(field, Input)
        field.select_all()
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.is_running and app.clipboard == "python"


async def test_f10_quits_the_monitor_as_in_nvtop() -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await pilot.press("f10")
        await pilot.pause()
    assert not app.is_running and app.return_code == 0


async def test_ctrl_c_q_and_f10_quit_the_fleet_view() -> None:
    for key in ("ctrl+c", "q", "f10"):
        source = NoHosts()
        app = FleetApp(source)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press(key)
            await pilot.pause()
        assert not app.is_running and app.return_code == 0 and source.stopped, key


# -- nvitop's keys in the process table -------------------------------------------------


async def test_j_and_k_move_through_the_process_table_and_ask_nothing() -> None:
    """Issue 43: a vim or nvitop hand moves with j and k; k asked "Send SIGTERM to pid ...?"
    (the signals are on nvitop's T, K and I: tests/ui/test_processes.py)."""
    app = fake_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        table = app.monitor.process_table
        rows = list(table.shown)
        assert len(rows) >= 2 and app.focused is table
        await pilot.press("j", "j")
        assert table.selected is not None and table.selected.key == rows[1]
        await pilot.press("k")
        await pilot.pause()
        assert table.selected is not None and table.selected.key == rows[0]
        assert app.screen is app.screen_stack[0] and not app._notifications


# -- quitting during a run ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "quits"),
    [("n", False), ("escape", False), ("y", True), ("enter", True), ("ctrl+c", True)],
)
async def test_q_during_a_run_asks_before_it_stops_the_run(answer: str, quits: bool) -> None:
    app = training_app()
    async with app.run_test(size=(160, 50)) as pilot:
        pane = await start_training(pilot, app)
        trainer = pane.trainer
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, QuitDialog))
        text = screen_text(app)
        assert "Quit gputui and stop the run?" in text
        assert "A training run is going in the runner pane." in text
        assert "y or Enter quits and stops it · n or Escape stays" in text
        assert app.is_running and pane.busy
        await pilot.press(answer)
        await pilot.pause()
        if not quits:
            assert app.is_running and pane.busy and not isinstance(app.screen, QuitDialog)
            await pilot.press("q", "y")  # asked again, then quit
            await pilot.pause()
    assert not app.is_running and app.return_code == 0
    assert trainer is not None and trainer.stopped  # type: ignore[attr-defined]


async def test_ctrl_c_during_a_run_asks_and_a_second_ctrl_c_quits() -> None:
    app = training_app()
    async with app.run_test(size=(160, 50)) as pilot:
        pane = await start_training(pilot, app)
        trainer = pane.trainer
        await pilot.press("ctrl+c")
        await wait_until(pilot, lambda: isinstance(app.screen, QuitDialog))
        assert app.is_running
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert not app.is_running and trainer is not None and trainer.stopped  # type: ignore[attr-defined]


async def test_q_after_the_run_ended_quits_at_once() -> None:
    app = training_app()
    async with app.run_test(size=(160, 50)) as pilot:
        pane = await start_training(pilot, app)
        await pilot.press("s")
        await wait_until(pilot, lambda: not pane.busy)
        await pilot.press("q")
        await pilot.pause()
    assert not app.is_running and app.return_code == 0


# -- the help -----------------------------------------------------------------------------


def shown_keys(areas: list[KeyArea]) -> dict[str, set[str]]:
    """Each area's keys as the help shows them."""
    return {area: {key for keys, _ in rows for key in keys.split()} for area, rows in areas}


@pytest.mark.parametrize("key", ["question_mark", "h", "f1"])
async def test_the_help_opens_on_question_mark_h_and_f1_and_escape_closes_it(key: str) -> None:
    app = fake_app()
    async with app.run_test(size=(100, 50)) as pilot:
        await settled(pilot)
        await pilot.press(key)
        await wait_until(pilot, lambda: isinstance(app.screen, KeysHelp))
        text = screen_text(app)
        for heading in ("gputui: every key", "Monitor", "Runner", "GPU processes"):
            assert heading in text
        assert "Train the chosen configuration" in text  # what r does, as the palette says
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, KeysHelp))
        assert app.is_running


async def test_the_help_lists_every_key_of_the_monitor_and_the_process_table() -> None:
    app = fake_app()
    async with app.run_test(size=(100, 50)) as pilot:
        await settled(pilot)
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, KeysHelp))
        help_screen = app.screen
        assert isinstance(help_screen, KeysHelp)
        shown = shown_keys(list(help_screen.areas))
        bound = [(b, None) for b in Binding.make_bindings(MonitorApp.BINDINGS)]
        bound += [(b, "GPU processes") for b in Binding.make_bindings(ProcessTable.BINDINGS)]
        bound += [(b, "Monitor") for b in App.BINDINGS if isinstance(b, Binding)]  # ^q
        bound += [(Binding(app.COMMAND_PALETTE_BINDING, "command_palette"), "Monitor")]
        for binding, area in bound:
            if binding.action == "help_quit":
                continue  # Textual's Ctrl+C, which gputui's replaces
            if area is None:
                action = action_name(binding)
                area = next((a for p, a in KEY_AREAS.items() if action.startswith(p)), "Monitor")
            key = app.get_key_display(binding)
            assert key in shown[area], f"{binding.key} ({binding.action}) not in {area}: {shown}"
        processes = dict(dict(help_screen.areas)["GPU processes"])
        assert (
            processes["I"] == "Send SIGINT (as Ctrl+C) to the selected GPU process, once y confirms"
        )
        assert processes["T"].startswith("Send SIGTERM")  # nvitop's T, K and I
        assert processes["K"].startswith("Send SIGKILL")


async def test_the_help_lists_every_key_of_the_fleet_view() -> None:
    app = FleetApp(NoHosts())
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("h")
        await wait_until(pilot, lambda: isinstance(app.screen, KeysHelp))
        help_screen = app.screen
        assert isinstance(help_screen, KeysHelp)
        shown = shown_keys(list(help_screen.areas))["Fleet"]
        for binding in Binding.make_bindings(FleetApp.BINDINGS):
            assert app.get_key_display(binding) in shown, binding
        assert "Sort by the next key: host, util, memory, temp, power" in screen_text(app)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, KeysHelp))


async def test_the_palette_names_each_key_from_its_binding() -> None:
    app = fake_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        helps = {command.title: command.help for command in app.get_system_commands(app.screen)}
        assert helps["Help"] == "Every key, by area: monitor, runner, GPU processes (?, h, f1)"
        assert helps["Clear process filter"] == "Show every GPU process again (esc)"
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))


# -- read-only ----------------------------------------------------------------------------


async def test_a_read_only_footer_offers_no_kill_keys_and_k_still_says_why() -> None:
    app = fake_app(readonly=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        footer = footer_line(app)
        assert "Kill" not in footer and "TK" not in footer and "Interrupt" not in footer, footer
        assert "q Quit" in footer and "/ Filter" in footer
        await pilot.press("T", "I")
        await wait_until(pilot, lambda: len(app._notifications) == 2)
        assert [notice.message for notice in app._notifications] == [READONLY_REFUSAL] * 2


SIGNAL_COMMANDS = ("Terminate process", "Kill process", "Interrupt process")
"""The palette's entries that send a signal (``T``, ``K``, ``I``)."""


@pytest.mark.parametrize("readonly", [True, False])
async def test_a_read_only_help_and_palette_offer_no_kill_keys(readonly: bool) -> None:
    """As a replay's: ``T``, ``K`` and ``I`` are not offered where they only refuse."""
    app = fake_app(readonly=readonly)
    async with app.run_test(size=(100, 50)) as pilot:
        await settled(pilot)
        titles = {command.title for command in app.get_system_commands(app.screen)}
        assert "Sort processes" in titles and "Process history" in titles
        assert all((title in titles) is not readonly for title in SIGNAL_COMMANDS), titles
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, KeysHelp))
        help_screen = app.screen
        assert isinstance(help_screen, KeysHelp)
        processes = shown_keys(list(help_screen.areas))["GPU processes"]
        assert "o" in processes and "/" in processes
        assert all((key in processes) is not readonly for key in ("T", "K", "I")), processes
        text = screen_text(app)
        assert ("Send SIGKILL" in text) is not readonly and "Sort the GPU processes" in text


# -- the w dialog -------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(160, 50), (80, 24)])
async def test_the_scale_dialog_says_enter_starts_and_escape_cancels(
    size: tuple[int, int],
) -> None:
    app = fake_app()
    async with app.run_test(size=size) as pilot:
        pane = app.runner
        await pilot.pause()
        if not pane.display:  # at 80 columns: show the runner pane, which lists the devices
            await pilot.press("t")
        await wait_until(pilot, lambda: bool(pane.devices))
        await pilot.press("w")
        await wait_until(pilot, lambda: bool(app.screen.query("#scale-sizes")))
        await pilot.pause()
        text = screen_text(app)
        assert "weak: each rank keeps the batch size" in text
        assert "share it." in text  # the help wraps: its end was cut at any width
        assert "Enter starts the run · Escape cancels" in text
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.screen.query("#scale-sizes"))
        assert not pane.busy
