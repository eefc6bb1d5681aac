"""Acting on GPU processes in the real app: sort, filter, and end them with a signal.

The app reads the stand-in NVML library (tests/fakenvml) through the real sampler;
``FAKE_NVML_PROCESSES`` lists real ``sleep`` children started here as GPU processes, so
the psutil join, the pid-reuse check and the signals are all real.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from textual.pilot import Pilot

from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.polling import Samplers
from gputui.telemetry.readings import GpuProcess
from gputui.telemetry.signals import HOST_PIDS_REFUSAL
from gputui.ui.monitor.app import NO_SELECTION, READONLY_REFUSAL, MonitorApp
from gputui.ui.monitor.process_rows import SORT_KEYS, ProcessOrder
from gputui.ui.widgets.process_table import ProcessTable
from gputui.ui.widgets.signal_dialog import SignalDialog
from tests.fakenvml import FakeNvml
from tests.fakeprocfs import IN_DOCKER, IN_POD, IN_SLURM, jobs_tree
from tests.helpers import wait_for
from tests.ui.fakes import (
    MPS_ON_LINUX,
    NO_DRIVER,
    OK_STATUS,
    GiB,
    ScriptedSampler,
    cpu_reading,
    gpu_reading,
    nvml_reading,
    screen_text,
    settled,
    wait_until,
)
from tests.ui.runner_fakes import scripted_setup

Sleepers = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def sleepers() -> Iterator[Sleepers]:
    """Starts ``sleep SECONDS`` children (or ``command``); any still running afterwards are
    killed."""
    started: list[subprocess.Popen[bytes]] = []

    def start(seconds: int = 600, command: Sequence[str] = ()) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(command or ["sleep", str(seconds)], stdout=subprocess.PIPE)
        started.append(child)
        return child

    yield start
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait()


def nvml_app(
    fake_nvml_env: pytest.MonkeyPatch, processes: str, *, readonly: bool = False
) -> MonitorApp:
    """The real app on the stand-in NVML's 2 H100s, listing ``processes`` (``GPU:PID:BYTES``)."""
    fake_nvml_env.setenv("FAKE_NVML_PROCESSES", processes)
    samplers = Samplers(
        cpu=ScriptedSampler(cpu_reading()),  # type: ignore[arg-type]
        nvml=NvmlSampler(),
        mps=ScriptedSampler(MPS_ON_LINUX),  # type: ignore[arg-type]
    )
    return MonitorApp(samplers, interval=0.25, runner=scripted_setup(), readonly=readonly)


def table_of(app: MonitorApp) -> ProcessTable:
    return app.monitor.process_table


def pids(app: MonitorApp) -> list[int]:
    """The pids in the table, in the order shown."""
    return [int(cells[1]) for cells in table_of(app).shown.values()]


def notices(app: MonitorApp) -> list[str]:
    return [notification.message for notification in app._notifications]


async def select_pid(pilot: Pilot[object], app: MonitorApp, pid: int) -> None:
    """Move the selection down to the row of ``pid``, as a user would."""
    table = table_of(app)
    table.focus()
    for _ in range(len(table.shown)):
        await pilot.press("down")
        await pilot.pause()
        if table.selected is not None and table.selected.process.pid == pid:
            return
    raise AssertionError(f"pid {pid} is not in the table: {pids(app)}")


def heading(app: MonitorApp) -> str:
    """The process table's heading, as drawn."""
    return table_of(app).lines[0].plain


def started_python(sleepers: Sleepers, setup: str = "") -> subprocess.Popen[bytes]:
    """A Python child that runs ``setup`` then sleeps, once it says it has run it."""
    code = f"import time\n{setup}\nprint('ready', flush=True)\ntime.sleep(600)"
    child = sleepers(command=[sys.executable, "-c", code])
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    return child


async def exit_signal(pilot: Pilot[object], child: subprocess.Popen[bytes]) -> int:
    """The signal that ended ``child``, waited for while the app runs (a blocking wait held
    the event loop before the app had sent it)."""
    await wait_until(pilot, lambda: child.poll() is not None)
    return -child.wait()


async def test_o_cycles_the_sort_and_O_reverses_it(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sleepers: Sleepers
) -> None:
    small, big, middle = sleepers(), sleepers(), sleepers()
    fake_nvml_env.setenv("FAKE_NVML_PROCESS_UTILIZATION", f"1:{small.pid}:90,0:{middle.pid}:40")
    app = nvml_app(
        fake_nvml_env,
        f"1:{small.pid}:{GiB},0:{big.pid}:{3 * GiB},0:{middle.pid}:{2 * GiB}",
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await wait_until(pilot, lambda: len(table_of(app).shown) == 3)
        by_gpu = [*sorted([big.pid, middle.pid]), small.pid]
        assert pids(app) == by_gpu and heading(app).startswith("GPU▲ ")
        await pilot.press("o")  # GPU memory, largest first
        await wait_until(pilot, lambda: pids(app) == [big.pid, middle.pid, small.pid])
        assert "  GPU mem▼  " in heading(app) and "GPU mem▼" in screen_text(app)
        assert table_of(app).border_subtitle is None  # the sort is in the heading alone
        await pilot.press("O")
        await wait_until(pilot, lambda: pids(app) == [small.pid, middle.pid, big.pid])
        assert table_of(app).order == ProcessOrder("memory", reverse=True)
        assert "  GPU mem▲  " in heading(app) and "▼" not in heading(app)
        await pilot.press("o")  # SM %, the busiest first (the big one ran no kernel: 0 %)
        await wait_until(pilot, lambda: pids(app) == [small.pid, middle.pid, big.pid])
        assert "SM %▼" in screen_text(app)
        assert " 90% " in screen_text(app)
        for _ in range(len(SORT_KEYS) - 2):  # the other keys, then back to GPU
            await pilot.press("o")
        await wait_until(pilot, lambda: table_of(app).order == ProcessOrder())
        assert pids(app) == by_gpu and heading(app).startswith("GPU▲ ")


async def test_o_sorts_by_host_cpu_host_memory_elapsed_time_and_type(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sleepers: Sleepers
) -> None:
    """Real processes on GPU 1: the oldest, one holding 96 MiB, and one spinning on a
    core; on GPU 0 a newer graphics process, first in the default order. Each new column
    puts its own process on top (a busy core, then the most memory, then the oldest)."""
    oldest = started_python(sleepers)
    # Start times count 10 ms ticks, and a Python's start-up here can take less than one:
    # the others start once a process started now is younger, so the oldest is older.
    born = psutil.Process(oldest.pid).create_time()
    wait_for(lambda: psutil.Process(sleepers().pid).create_time() > born)
    hog = started_python(sleepers, "held = b'x' * (96 << 20)")  # every byte written: resident
    spinner = sleepers(command=["sh", "-c", "while :; do :; done"])
    newest = sleepers()
    started = {child.pid: psutil.Process(child.pid).create_time() for child in (oldest, hog)}
    assert started[oldest.pid] < started[hog.pid]
    fake_nvml_env.setenv("FAKE_NVML_GRAPHICS_PROCESSES", f"0:{newest.pid}:{GiB},1:{hog.pid}:{GiB}")
    listed = f"1:{oldest.pid}:{GiB},1:{hog.pid}:{GiB},1:{spinner.pid}:{GiB}"
    app = nvml_app(fake_nvml_env, listed)
    async with app.run_test(size=(160, 40)) as pilot:
        await settled(pilot)
        await wait_until(pilot, lambda: len(table_of(app).shown) == 4)
        assert pids(app)[0] == newest.pid
        for _ in range(SORT_KEYS.index("cpu")):
            await pilot.press("o")
        await wait_until(pilot, lambda: pids(app)[0] == spinner.pid)
        assert "  CPU %▼  " in heading(app) and "CPU %▼" in screen_text(app)
        await pilot.press("o")
        await wait_until(pilot, lambda: pids(app)[0] == hog.pid)
        assert "  Host mem▼  " in heading(app)
        await pilot.press("o")
        await wait_until(pilot, lambda: pids(app)[0] == oldest.pid)
        assert "  Elapsed▼  " in heading(app)
        for _ in range(SORT_KEYS.index("type") - SORT_KEYS.index("elapsed")):
            await pilot.press("o")
        compute = sorted([oldest.pid, spinner.pid])  # then C+G, then G
        await wait_until(pilot, lambda: pids(app) == [*compute, hog.pid, newest.pid])
        assert "  Type▲  " in heading(app)
        cells = table_of(app).shown
        assert [row[2] for row in cells.values()] == ["C", "C", "C+G", "G"]


async def test_the_job_column_names_each_container_pod_and_slurm_job(
    tmp_path: Path, fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    """Three processes in a fake procfs (``GPUTUI_PROCFS``): one in a Docker container, one
    in a pod's container, one in a Slurm job's step; each named, sorted by ``o`` and found by
    ``/``."""
    fake_nvml_env.setenv("GPUTUI_PROCFS", str(jobs_tree(tmp_path).root))
    listed = f"0:{IN_DOCKER}:{GiB},0:{IN_POD}:{2 * GiB},1:{IN_SLURM}:{3 * GiB}"
    app = nvml_app(fake_nvml_env, listed)
    async with app.run_test(size=(200, 50)) as pilot:
        await settled(pilot)
        await wait_until(pilot, lambda: len(table_of(app).shown) == 3)
        jobs = {int(cells[1]): cells[4] for cells in table_of(app).shown.values()}
        assert jobs == {IN_DOCKER: "trainer", IN_POD: "ml/resnet-0", IN_SLURM: "slurm 1234.0"}
        assert "  Job  " in heading(app)
        shown = screen_text(app)
        assert all(job in shown for job in jobs.values())
        for _ in range(SORT_KEYS.index("job")):
            await pilot.press("o")
        await wait_until(pilot, lambda: pids(app) == [IN_POD, IN_SLURM, IN_DOCKER])
        assert "  Job▲  " in heading(app)
        await pilot.press("slash", *"SLURM 1234", "enter")
        await wait_until(pilot, lambda: pids(app) == [IN_SLURM])


async def test_slash_filters_enter_selects_the_first_match_and_escape_clears(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sleepers: Sleepers
) -> None:
    first, second, third = sleepers(600), sleepers(601), sleepers(601)
    app = nvml_app(fake_nvml_env, f"0:{first.pid}:{GiB},0:{second.pid}:{GiB},1:{third.pid}:{GiB}")
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await wait_until(pilot, lambda: len(table_of(app).shown) == 3)
        table = table_of(app)
        assert app.monitor.process_filter is None  # built when first opened
        await pilot.press("slash")
        await wait_until(pilot, lambda: app.focused is app.monitor.process_filter)
        field = app.monitor.process_filter
        assert field is not None and field.display
        await pilot.press(*"SLEEP 601", "enter")  # any case, any cell
        await wait_until(pilot, lambda: set(pids(app)) == {second.pid, third.pid})
        assert table.selected is not None and table.selected.process.pid == pids(app)[0]
        assert app.focused is table and not field.display
        assert table.border_subtitle == "filter 'SLEEP 601': 2 of 3"
        await pilot.press("down")  # the arrows move through the matching rows
        await wait_until(pilot, lambda: table.selected.process.pid == pids(app)[1])  # type: ignore[union-attr]
        await pilot.press("escape")
        await wait_until(pilot, lambda: len(pids(app)) == 3)
        assert table.order.filter == "" and table.border_subtitle is None
        assert table.selected.process.pid == pids(app)[2]  # type: ignore[union-attr]
        await pilot.press("slash", *"no such process", "enter")
        await wait_until(pilot, lambda: pids(app) == [])
        assert table.selected is None
        await pilot.press("slash")  # the filter line opens holding the filter applied
        await wait_until(pilot, lambda: field.display and field.value == "no such process")
        await pilot.press("escape")  # Escape in the line clears it too
        await wait_until(pilot, lambda: len(pids(app)) == 3 and not field.display)


@pytest.mark.parametrize(
    ("key", "signum"), [("T", signal.SIGTERM), ("K", signal.SIGKILL), ("I", signal.SIGINT)]
)
async def test_T_K_and_I_ask_then_y_sends_the_signal(
    fake_nvml: FakeNvml,
    fake_nvml_env: pytest.MonkeyPatch,
    sleepers: Sleepers,
    key: str,
    signum: signal.Signals,
) -> None:
    bystander, target = sleepers(), sleepers(599)
    app = nvml_app(fake_nvml_env, f"0:{bystander.pid}:{GiB},1:{target.pid}:{2 * GiB}")
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await wait_until(pilot, lambda: len(table_of(app).shown) == 2)
        await select_pid(pilot, app, target.pid)
        await pilot.press(key)
        await wait_until(pilot, lambda: isinstance(app.screen, SignalDialog))
        text = screen_text(app)
        user = psutil.Process(target.pid).username()
        assert f"Send {signum.name} to pid {target.pid}?" in text
        assert f"user     {user}" in text and "command  sleep 599" in text
        await pilot.press("y")
        assert await exit_signal(pilot, target) == signum
        await wait_until(pilot, lambda: not isinstance(app.screen, SignalDialog))
        assert notices(app) == [f"Sent {signum.name} to pid {target.pid} ({user}: sleep 599)."]
        assert bystander.poll() is None


async def test_n_or_escape_leaves_the_process_running(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sleepers: Sleepers
) -> None:
    target = sleepers()
    app = nvml_app(fake_nvml_env, f"0:{target.pid}:{GiB}")
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await select_pid(pilot, app, target.pid)
        for key, cancel in (("T", "n"), ("K", "escape"), ("I", "n")):
            await pilot.press(key)
            await wait_until(pilot, lambda: isinstance(app.screen, SignalDialog))
            await pilot.press(cancel)
            await wait_until(pilot, lambda: not isinstance(app.screen, SignalDialog))
        # its answer handled: a signal sent would have been said, as it was sent
        assert target.poll() is None and notices(app) == []
        assert table_of(app).order.filter == ""  # Escape closed the dialog only


async def test_T_with_nothing_selected_says_how_to_select(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sleepers: Sleepers
) -> None:
    target = sleepers()
    app = nvml_app(fake_nvml_env, f"0:{target.pid}:{GiB}")
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("T")
        await wait_until(pilot, lambda: notices(app) == [NO_SELECTION])
        assert not isinstance(app.screen, SignalDialog) and target.poll() is None


async def test_a_pid_whose_start_time_changed_is_not_signalled(sleepers: Sleepers) -> None:
    """The row was read from a process that started 5 s before the one that has its pid
    now (the first exited, the kernel gave its pid to the second): y sends nothing."""
    target = sleepers()
    started = psutil.Process(target.pid).create_time()
    earlier = GpuProcess(target.pid, "ada", "python train.py", GiB, create_time=started - 5)
    reading = nvml_reading([gpu_reading(0, processes=(earlier,))])
    samplers = Samplers(
        cpu=ScriptedSampler(cpu_reading()),  # type: ignore[arg-type]
        nvml=ScriptedSampler(reading),  # type: ignore[arg-type]
        mps=ScriptedSampler(MPS_ON_LINUX),  # type: ignore[arg-type]
    )
    app = MonitorApp(samplers, interval=60, runner=scripted_setup())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await select_pid(pilot, app, target.pid)
        await pilot.press("K")
        await wait_until(pilot, lambda: isinstance(app.screen, SignalDialog))
        await pilot.press("y")
        message = (
            f"Not sent: pid {target.pid} is another process now (the one shown exited and "
            "its pid was reused)."
        )
        await wait_until(pilot, lambda: notices(app) == [message])
        assert target.poll() is None


async def test_host_pids_are_refused_with_the_reason(sleepers: Sleepers) -> None:
    """In a pid namespace of our own the table shows the host's pids: none is ours."""
    target = sleepers()
    shown = GpuProcess(target.pid, None, None, GiB)  # as the sampler reads a host pid
    reading = nvml_reading(
        [gpu_reading(0, processes=(shown,))], status=replace(OK_STATUS, host_pids=True)
    )
    samplers = Samplers(
        cpu=ScriptedSampler(cpu_reading()),  # type: ignore[arg-type]
        nvml=ScriptedSampler(reading),  # type: ignore[arg-type]
        mps=ScriptedSampler(MPS_ON_LINUX),  # type: ignore[arg-type]
    )
    app = MonitorApp(samplers, interval=60, runner=scripted_setup())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await select_pid(pilot, app, target.pid)
        for key in ("T", "K", "I"):
            await pilot.press(key)
        await wait_until(pilot, lambda: notices(app) == [HOST_PIDS_REFUSAL] * 3)
        assert not isinstance(app.screen, SignalDialog) and target.poll() is None


async def test_a_read_only_app_refuses_with_a_message(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch, sleepers: Sleepers
) -> None:
    target = sleepers()
    app = nvml_app(fake_nvml_env, f"0:{target.pid}:{GiB}", readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await select_pid(pilot, app, target.pid)
        for key in ("T", "K", "I"):
            await pilot.press(key)
        await wait_until(pilot, lambda: notices(app) == [READONLY_REFUSAL] * 3)
        assert not isinstance(app.screen, SignalDialog) and target.poll() is None


async def test_a_process_psutil_cannot_see_is_refused_before_asking(
    fake_nvml: FakeNvml, fake_nvml_env: pytest.MonkeyPatch
) -> None:
    """NVML lists a pid with no local process (exited, or another user's hidden): with no
    start time to check the pid against, T says why at once instead of asking in vain."""
    gone = next(pid for pid in range(4_000_000, 4_100_000) if not psutil.pid_exists(pid))
    app = nvml_app(fake_nvml_env, f"0:{gone}:{GiB}")
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await select_pid(pilot, app, gone)
        await pilot.press("T")
        await wait_until(pilot, lambda: len(notices(app)) == 1)
        assert notices(app)[0].startswith(f"Not sent: when pid {gone} started is unknown")
        assert not isinstance(app.screen, SignalDialog)


async def test_no_filter_line_opens_without_a_process_table() -> None:
    samplers = Samplers(
        cpu=ScriptedSampler(cpu_reading()),  # type: ignore[arg-type]
        nvml=ScriptedSampler(nvml_reading(status=NO_DRIVER)),  # type: ignore[arg-type]
        mps=ScriptedSampler(MPS_ON_LINUX),  # type: ignore[arg-type]
    )
    app = MonitorApp(samplers, interval=60, runner=scripted_setup())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert table_of(app).display is False
        await pilot.press("slash", "x")
        await pilot.pause()
        assert app.monitor.process_filter is None and not app.monitor.filtering
