"""gputui.ui.monitor.driver: the input thread waits for keys without polling, still tells a lone
Escape from an escape sequence, and ends as soon as it is told to."""

from __future__ import annotations

import os
import selectors
import threading
import time
from collections.abc import AsyncIterator

import pytest
from textual import constants, events
from textual.app import App
from textual.message import Message

from gputui.ui.monitor.driver import POLL_S, QuietLinuxDriver
from tests.ui.fakes import fake_app


class RecordingDriver(QuietLinuxDriver):
    """Keeps each event the input thread sends, and when."""

    def __init__(self, app: App[object]) -> None:
        super().__init__(app)
        self.received: list[tuple[float, Message]] = []

    def process_message(self, message: Message) -> None:
        self.received.append((time.monotonic(), message))


@pytest.fixture
def timeouts(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """The timeout of every ``select()`` the input thread makes."""
    seen: list[float | None] = []
    select = selectors.SelectSelector.select

    def recording(
        self: selectors.SelectSelector, timeout: float | None = None
    ) -> list[tuple[selectors.SelectorKey, int]]:
        seen.append(timeout)
        return select(self, timeout)

    monkeypatch.setattr(selectors.SelectSelector, "select", recording)
    return seen


@pytest.fixture
async def driven() -> AsyncIterator[tuple[RecordingDriver, int, threading.Thread]]:
    """A driver reading a pipe in its input thread, and the pipe's end to type into."""
    driver = RecordingDriver(App())
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


def keys(driver: RecordingDriver) -> list[tuple[float, str]]:
    return [(at, m.key) for at, m in driver.received if isinstance(m, events.Key)]


def wait_for_keys(driver: RecordingDriver, count: int, timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(keys(driver)) < count and time.monotonic() < deadline:
        time.sleep(0.005)


async def test_a_key_comes_at_once_and_then_the_thread_waits_without_a_timeout(
    timeouts: list[float | None], driven: tuple[RecordingDriver, int, threading.Thread]
) -> None:
    driver, typing, _ = driven
    time.sleep(0.3)
    assert timeouts == [None]  # idle: one wait, no polling
    typed = time.monotonic()
    os.write(typing, b"a")
    wait_for_keys(driver, 1)
    [(at, key)] = keys(driver)
    assert key == "a" and at - typed < 0.05
    time.sleep(constants.ESCAPE_DELAY + 3 * POLL_S)
    assert timeouts[-1] is None  # polled a while after the key, then waits again


async def test_a_lone_escape_comes_after_escdelay(
    driven: tuple[RecordingDriver, int, threading.Thread],
) -> None:
    driver, typing, _ = driven
    time.sleep(0.2)
    typed = time.monotonic()
    os.write(typing, b"\x1b")
    wait_for_keys(driver, 1)
    [(at, key)] = keys(driver)
    assert key == "escape"
    assert constants.ESCAPE_DELAY <= at - typed < constants.ESCAPE_DELAY + POLL_S + 0.05


async def test_setting_the_exit_event_ends_a_waiting_thread_at_once(
    driven: tuple[RecordingDriver, int, threading.Thread],
) -> None:
    driver, _, thread = driven
    time.sleep(0.2)
    asked = time.monotonic()
    driver.exit_event.set()
    thread.join(1)
    assert not thread.is_alive() and time.monotonic() - asked < 0.1


def test_the_monitor_reads_keys_through_it() -> None:
    assert fake_app().driver_class is QuietLinuxDriver
