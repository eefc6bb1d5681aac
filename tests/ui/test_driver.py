"""gputui.ui.monitor.driver: the input thread waits for keys without polling, still tells a lone
Escape from an escape sequence, and ends as soon as it is told to."""

from __future__ import annotations

import os
import selectors
import threading
from collections.abc import AsyncIterator

import pytest
from textual import events
from textual.app import App
from textual.message import Message

from gputui.ui.monitor.driver import POLL_S, QuietLinuxDriver
from tests.helpers import WAIT_S, wait_for
from tests.ui.fakes import fake_app


class RecordingDriver(QuietLinuxDriver):
    """Logs, in order, the timeout of each ``select()`` its input thread makes and each key
    it sends."""

    def __init__(self, app: App[object]) -> None:
        super().__init__(app)
        self.log: list[float | str | None] = []

    def process_message(self, message: Message) -> None:
        if isinstance(message, events.Key):
            self.log.append(message.key)


@pytest.fixture
async def driven(
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[RecordingDriver, int, threading.Thread]]:
    """A driver reading a pipe in its input thread, and the pipe's end to type into."""
    driver = RecordingDriver(App())
    select = selectors.SelectSelector.select

    def logged(
        self: selectors.SelectSelector, timeout: float | None = None
    ) -> list[tuple[selectors.SelectorKey, int]]:
        driver.log.append(timeout)
        return select(self, timeout)

    monkeypatch.setattr(selectors.SelectSelector, "select", logged)
    read, write = os.pipe()
    driver.fileno = read
    thread = threading.Thread(target=driver.run_input_thread)
    thread.start()
    yield driver, write, thread
    driver.exit_event.set()
    thread.join(5)
    driver.close()
    os.close(read)
    os.close(write)


async def test_a_key_comes_at_once_and_then_the_thread_waits_without_a_timeout(
    driven: tuple[RecordingDriver, int, threading.Thread],
) -> None:
    driver, typing, _ = driven
    assert wait_for(lambda: driver.log) == [None]  # idle: one wait, no polling
    os.write(typing, b"a")
    wait_for(lambda: driver.log.count(None) == 2)
    first, key, *polls, last = driver.log
    assert (first, key) == (None, "a")  # sent as that wait ended, before any poll
    assert polls and set(polls) == {POLL_S} and last is None  # polled, then waits again


async def test_a_lone_escape_comes_from_a_poll_after_its_read(
    driven: tuple[RecordingDriver, int, threading.Thread],
) -> None:
    driver, typing, _ = driven
    assert wait_for(lambda: driver.log) == [None]
    os.write(typing, b"\x1b")
    wait_for(lambda: "escape" in driver.log)
    first, *polls, key = driver.log[: driver.log.index("escape") + 1]
    assert (first, key) == (None, "escape")
    assert polls and set(polls) == {POLL_S}  # held past its read, until ESCDELAY had passed


async def test_setting_the_exit_event_ends_a_waiting_thread(
    driven: tuple[RecordingDriver, int, threading.Thread],
) -> None:
    driver, _, thread = driven
    assert wait_for(lambda: driver.log) == [None]  # a wait with no timeout: only a wake ends it
    driver.exit_event.set()
    thread.join(WAIT_S)
    assert not thread.is_alive() and driver.log == [None]


def test_the_monitor_reads_keys_through_it() -> None:
    assert fake_app().driver_class is QuietLinuxDriver
