"""Text from outside never drives the terminal (issue 26): a real process with a crafted
command line on a stand-in GPU with a crafted name, and hostile exporters and a hostile
Prometheus on loopback, through ``gputui snapshot``, the monitor (on a real pty and through
the pilot), ``gputui serve``, ``snapshot --hosts``/``--prometheus`` and the fleet view. Each
shows the crafted text visibly (``\\x1b]0;pwned\\x07``), and JSON keeps it exactly.

The last tests put crafted text into every string field of every reading and run each text
renderer on them, so that a field or a renderer added later cannot skip the sanitiser.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from textual.widgets import Static

from gputui.commands.snapshot import render_snapshot_table
from gputui.doctor.checks import DoctorReport
from gputui.doctor.render import render_text as render_doctor_text
from gputui.fleet.hosts import HostReading
from gputui.fleet.prometheus import PrometheusPoller
from gputui.fleet.report import render_fleet_table
from gputui.fleet.scrape import FleetPoller
from gputui.fleet.targets import parse_hosts
from gputui.serve.metrics import LatestCollector
from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.polling import Latest
from gputui.telemetry.readings import (
    GpuProcess,
    MigDeviceReading,
    MpsReading,
    NvmlStatus,
    Snapshot,
    Workload,
)
from gputui.ui.fleet.app import FleetApp, FleetView
from tests.helpers import ROOT, gputui, gputui_env
from tests.hostile import (
    BACKWARDS,
    C1_CSI,
    CLIPBOARD,
    CRAFTED,
    SECRET,
    SHOWN_TITLE,
    TITLE,
    crafted,
    crafted_process,
    unsafe,
)
from tests.pty_run import run_on_a_pty, shown_text
from tests.serve.served import Served
from tests.ui.doctor_fakes import REPORT, FixedDoctor
from tests.ui.fakes import (
    T0,
    ScriptedSampler,
    cpu_reading,
    fake_app,
    gpu_reading,
    lost_gpu,
    nvml_reading,
    screen_text,
    settled,
    wait_until,
)

GPU_NAME = TITLE + "NVIDIA" + BACKWARDS + "\tH100" + C1_CSI
"""A GPU name with a title, a bidi override, a tab and a C1 control (no comma: the stand-in
library splits its names at commas)."""
REASON = TITLE + CLIPBOARD + "\x1b[2J\t\x9b"
"""An HTTP reason phrase that a hostile host sends (Latin-1, as HTTP carries it)."""
PASSWORD_SHOWN = "--password=***"


@pytest.fixture
def crafted_gpu() -> Iterator[dict[str, str]]:
    """The stand-in library's knobs for a crafted GPU name and a crafted process on GPU 0."""
    with crafted_process() as child:
        yield {
            "FAKE_NVML_GPU_COUNT": "1",
            "FAKE_NVML_GPU_NAME": GPU_NAME,
            "FAKE_NVML_PROCESSES": f"0:{child.pid}:1073741824",
        }


def assert_shown_visibly(text: str, *, newlines: bool = True) -> None:
    """No control, C1 or bidi character in ``text``; the crafted title reads visibly."""
    assert unsafe(text, newlines=newlines) == [], text
    assert SHOWN_TITLE in text, text


# --- a crafted process and GPU name on this machine ------------------------------------


def test_snapshot_shows_a_crafted_process_and_gpu_name_visibly(
    fake_nvml_dir: Path, crafted_gpu: dict[str, str]
) -> None:
    done = gputui("snapshot", lib_dir=fake_nvml_dir, knobs=crafted_gpu)
    assert done.returncode == 0, done.stderr
    assert_shown_visibly(done.stdout)
    assert f"GPU 0  {SHOWN_TITLE}NVIDIA\\u202egnp.exe\\tH100\\x9b31m\n" in done.stdout
    (row,) = [line for line in done.stdout.splitlines() if "pwned" in line and "evil" in line]
    assert row.lstrip().startswith("0  ")  # one row: no newline or tab split or shifted it


def test_snapshot_json_keeps_the_text_exactly_with_the_secret_redacted(
    fake_nvml_dir: Path, crafted_gpu: dict[str, str]
) -> None:
    done = gputui("snapshot", "--json", lib_dir=fake_nvml_dir, knobs=crafted_gpu)
    assert done.returncode == 0, done.stderr
    assert done.stdout.isascii()  # JSON escapes every control and bidi character
    (gpu,) = json.loads(done.stdout)["gpus"]
    assert gpu["name"] == GPU_NAME
    (process,) = gpu["processes"]
    assert process["command"].startswith(TITLE + "evil -c ")
    assert f" {PASSWORD_SHOWN} {CLIPBOARD} " in process["command"]
    assert SECRET not in done.stdout


def test_the_monitor_on_a_real_terminal_never_writes_the_crafted_text_raw(
    fake_nvml_dir: Path, crafted_gpu: dict[str, str]
) -> None:
    env = gputui_env(fake_nvml_dir, {**crafted_gpu, "TERM": "xterm-256color"})
    run = run_on_a_pty(
        [sys.executable, "-m", "gputui"],
        env=env,
        cwd=ROOT,
        size=(300, 50),  # the process table beside the runner, its command column long enough
        timeout_s=60,
        until=lambda shown: "evil -c import time" in shown_text(shown),
    )
    text = shown_text(run.shown)
    assert "evil -c import time" in text, text[-2000:]
    for raw in (TITLE, CLIPBOARD, "\x1b]0;", "\x1b]52;", BACKWARDS, "\u2067", "\x9b", SECRET):
        assert raw.encode() not in run.shown, raw
    assert SHOWN_TITLE in text  # the GPU's name and the process's command, visibly
    assert PASSWORD_SHOWN in text


async def test_the_monitor_process_table_shows_a_crafted_process_visibly(
    fake_nvml: Any, fake_nvml_env: pytest.MonkeyPatch, crafted_gpu: dict[str, str]
) -> None:
    for name, value in crafted_gpu.items():
        fake_nvml_env.setenv(name, value)
    app = fake_app(nvml=NvmlSampler())
    async with app.run_test(size=(250, 50)) as pilot:
        await settled(pilot)
        await wait_until(pilot, lambda: "evil -c import time" in screen_text(app))
        text = screen_text(app)
        (cells,) = app.monitor.process_table.shown.values()
    assert_shown_visibly(text)
    assert cells[-1].startswith(SHOWN_TITLE + "evil -c import time; time.sleep(600) --pass")
    assert SECRET not in text and SECRET not in cells[-1]


def exposition_labels(text: str, name: str) -> list[dict[str, str]]:
    """The labels of each sample of series ``name`` in a Prometheus text exposition."""
    return [
        sample.labels
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def test_serve_labels_are_printable_and_secrets_redacted_unless_raw(
    fake_nvml_dir: Path, crafted_gpu: dict[str, str]
) -> None:
    for flag in ("--processes", "--processes=raw"):
        served = Served.start(fake_nvml_dir, "--interval", "0.25", flag, knobs=crafted_gpu)
        try:
            served.wait_for_readings()
            metrics = served.get("/metrics").body.decode()
            snapshot = served.get("/snapshot").json()
        finally:
            served.kill()
        assert unsafe(metrics, newlines=True) == []
        (info,) = exposition_labels(metrics, "gputui_gpu_info")
        assert info["name"].startswith(SHOWN_TITLE)
        (labels,) = exposition_labels(metrics, "gputui_gpu_process_memory_bytes")
        assert labels["command"].startswith(SHOWN_TITLE + "evil -c ")
        (process,) = snapshot["gpus"][0]["processes"]
        assert snapshot["gpus"][0]["name"] == GPU_NAME  # JSON: exact
        assert CLIPBOARD in process["command"]
        if flag == "--processes":
            assert PASSWORD_SHOWN in labels["command"] and SECRET not in metrics
            assert PASSWORD_SHOWN in process["command"] and SECRET not in process["command"]
        else:
            assert f"--password={SECRET}" in labels["command"]
            assert f"--password={SECRET}" in process["command"]


# --- hostile exporters and a hostile Prometheus -----------------------------------------


def crafted_exposition() -> str:
    """What a hostile exporter serves: gputui's series, every label crafted."""
    registry = CollectorRegistry()
    info = Gauge(
        "gputui_gpu_info", "info", ["gpu", "uuid", "name", "bus_id", "driver"], registry=registry
    )
    info.labels("0", "GPU-" + CRAFTED, CRAFTED, CRAFTED, CRAFTED).set(1)
    up = Gauge("gputui_gpu_up", "up", ["gpu", "uuid"], registry=registry)
    up.labels("0", "GPU-" + CRAFTED).set(1)
    busy = Gauge("gputui_gpu_utilization_ratio", "util", ["gpu", "uuid"], registry=registry)
    busy.labels("0", "GPU-" + CRAFTED).set(0.5)
    memory = Gauge(
        "gputui_gpu_process_memory_bytes",
        "memory",
        ["gpu", "uuid", "pid", "user", "command", "kind"],
        registry=registry,
    )
    memory.labels("0", "GPU-" + CRAFTED, "7", CRAFTED, CRAFTED, "compute").set(2**30)
    return generate_latest(registry).decode()


@contextmanager
def http_host(answer: Callable[[BaseHTTPRequestHandler], None]) -> Iterator[str]:
    """A loopback HTTP server whose every GET is answered by ``answer``; yields HOST:PORT."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answer(self)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _send(handler: BaseHTTPRequestHandler, body: bytes, content_type: str) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _refuse(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(500, REASON)
    handler.send_header("Content-Length", "0")
    handler.end_headers()


@contextmanager
def hostile_hosts() -> Iterator[str]:
    """Two hostile hosts, as ``--hosts`` takes them: an exporter whose labels are crafted,
    and one that answers 500 with a crafted reason."""
    exposition = crafted_exposition().encode()
    with (
        http_host(lambda handler: _send(handler, exposition, "text/plain; version=0.0.4")) as a,
        http_host(_refuse) as b,
    ):
        yield f"{a},{b}"


def _prometheus_answer(handler: BaseHTTPRequestHandler) -> None:
    """A Prometheus whose instance labels and series' labels are crafted; one target down."""
    query = urllib.parse.parse_qs(urllib.parse.urlparse(handler.path).query)["query"][0]
    now = time.time()
    if query.startswith("{"):  # the GPU series
        common = {"instance": CRAFTED, "job": "gpu", "gpu": "0", "uuid": "GPU-" + CRAFTED}
        series = [
            ({**common, "__name__": "gputui_gpu_info", "name": CRAFTED}, 1.0),
            ({**common, "__name__": "gputui_gpu_utilization_ratio"}, 0.5),
        ]
    else:  # up, and when each target was last scraped
        up = query == "up"
        series = [
            ({"instance": CRAFTED, "job": "gpu"}, 1.0 if up else now),
            ({"instance": "down" + CRAFTED, "job": "gpu"}, 0.0 if up else now),
        ]
    result = [{"metric": labels, "value": [now, str(value)]} for labels, value in series]
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
    _send(handler, body.encode(), "application/json")


def test_snapshot_hosts_shows_what_hostile_exporters_send_visibly() -> None:
    with hostile_hosts() as hosts:
        table = gputui("snapshot", "--hosts", hosts)
        raw = gputui("snapshot", "--hosts", hosts, "--json")
    assert table.returncode == 1, table.stderr  # one host is down
    assert_shown_visibly(table.stdout)
    assert "HTTP 500 " + SHOWN_TITLE in table.stdout
    up, down = json.loads(raw.stdout)["hosts"]
    assert up["gpus"][0]["name"] == CRAFTED  # JSON: exact
    assert up["gpus"][0]["processes"][0]["command"] == CRAFTED
    assert REASON in down["error"]


def test_snapshot_prometheus_shows_crafted_instances_and_labels_visibly() -> None:
    with http_host(_prometheus_answer) as prometheus:
        done = gputui("snapshot", "--prometheus", f"http://{prometheus}")
    assert done.returncode == 1, done.stderr  # one target is down
    assert_shown_visibly(done.stdout)
    assert done.stdout.count(SHOWN_TITLE) >= 3  # two instances and a GPU name


async def test_the_fleet_view_shows_what_hostile_exporters_send_visibly() -> None:
    with hostile_hosts() as hosts:
        app = FleetApp(FleetPoller(parse_hosts(hosts), interval_s=0.25, timeout_s=2.0))
        async with app.run_test(size=(160, 30)) as pilot:

            def read() -> bool:
                app.update_view()
                text = screen_text(app)
                return "HTTP 500" in text and "1 up, 1 down" in text

            await wait_until(pilot, read, timeout_s=30)
            text = screen_text(app)
            lines = app.query_one(FleetView).plain_lines()
    assert_shown_visibly(text)
    assert any(f"HTTP 500 {SHOWN_TITLE}" in line for line in lines)
    assert len(lines) == 3  # two hosts and one GPU: no row split


async def test_the_fleet_view_shows_a_hostile_prometheus_visibly() -> None:
    with (
        http_host(_prometheus_answer) as good,
        http_host(_refuse) as failing,
    ):
        hosts, _ = await _fleet_screen(f"http://{good}", "1 up, 1 down")
        assert_shown_visibly(hosts)
        refused, title = await _fleet_screen(f"http://{failing}", "HTTP 500")
        assert unsafe(refused, newlines=True) == []
        assert f"HTTP 500 {SHOWN_TITLE}" in title  # the title line cuts it on screen


async def _fleet_screen(prometheus: str, said: str) -> tuple[str, str]:
    """The fleet view of ``prometheus`` once its screen shows ``said``: the screen, and the
    whole title."""
    app = FleetApp(PrometheusPoller(prometheus, interval_s=0.25, timeout_s=2.0))
    async with app.run_test(size=(160, 30)) as pilot:

        def read() -> bool:
            app.update_view()
            return said in screen_text(app)

        await wait_until(pilot, read, timeout_s=30)
        return screen_text(app), str(app.query_one("#fleet-title", Static).render())


# --- every text field of every reading, through every text renderer ---------------------


def _mig_gpu() -> Any:
    process = GpuProcess(pid=9, user="bob", command="python mig.py", gpu_memory_bytes=2**30)
    device = MigDeviceReading(0, 1, 0, 2**30, 10 * 2**30, (process,))
    return gpu_reading(2, mig_mode=True, mig_devices=(device,))


def crafted_snapshots() -> list[Snapshot]:
    """Readings with crafted text in every string: GPUs up, lost and in MIG mode, NVML up
    and down, MPS with a message."""
    gpus = [gpu_reading(0), replace(lost_gpu(1), error="lost"), _mig_gpu()]
    status = NvmlStatus(
        available=True, driver_version="550", cuda_driver_version="12.4", hung_call="nvmlInit"
    )
    mps = MpsReading(supported_platform=True, message="note", gpu_name="Apple M2", taken_at=T0)
    up = Snapshot(cpu=cpu_reading(), nvml=nvml_reading(gpus, status=status), mps=mps)
    down = replace(up, nvml=nvml_reading([], status=NvmlStatus(available=False, error="no")))
    return [crafted(up), crafted(down)]


def crafted_hosts() -> list[HostReading]:
    gpus = (gpu_reading(0), replace(lost_gpu(1), error="lost"))
    return crafted(
        [
            HostReading("node-1", up=True, source="gputui", gpus=gpus, taken_at=T0),
            HostReading("node-2", up=False, error="refused", source="gputui", gpus=gpus),
        ]
    )


def crafted_report() -> DoctorReport:
    """The doctor's report with its checks' text and devices' names crafted (GPU names and
    errors come from outside; a device is parsed, with no outside text in it)."""
    return replace(REPORT, checks=crafted(REPORT.checks), devices=crafted(REPORT.devices))


@pytest.mark.parametrize("width", [80, 40])
def test_every_text_report_shows_every_crafted_field_visibly(width: int) -> None:
    for snapshot in crafted_snapshots():
        assert_shown_visibly(render_snapshot_table(snapshot, width))
    assert_shown_visibly(render_fleet_table(crafted_hosts(), T0, width))
    assert_shown_visibly(render_doctor_text(crafted_report(), width))


@pytest.mark.parametrize("width", [80, 40])
def test_the_process_screen_shows_every_crafted_field_visibly(width: int) -> None:
    """Fed raw readings: the screen draws them visibly itself, whatever fed the history (the
    monitor feeds it sanitised readings, a replay raw ones for the frames before the one it
    paints)."""
    from gputui.telemetry.process_history import ProcessHistory
    from gputui.ui.render.process_history import process_screen_lines, process_title

    workload = Workload(
        container="c", runtime="docker", pod="p", namespace="n", slurm_job="1", unit="u"
    )
    gpu = gpu_reading(0)
    process = replace((gpu.processes or ())[0], workload=workload, create_time=1.0e9)
    history = ProcessHistory(10)
    history.record(T0, [crafted(replace(gpu, processes=(process,)))])
    [key] = history
    track = history.get(key)
    assert track is not None
    lines = process_screen_lines(track, width, 40, trainer=CRAFTED + "run")
    assert_shown_visibly("\n".join(line.plain for line in lines))
    assert_shown_visibly(process_title(track))


def test_every_metrics_label_from_a_crafted_reading_is_printable() -> None:
    snapshot = crafted_snapshots()[0]
    latest = Latest(T0, cpu=snapshot.cpu, nvml=snapshot.nvml, mps=snapshot.mps)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LatestCollector(lambda: latest, interval_s=1.0, processes=True))
    text = generate_latest(registry).decode()
    assert unsafe(text, newlines=True) == []
    labels = exposition_labels(text, "gputui_gpu_process_memory_bytes")
    assert labels and all(SHOWN_TITLE in label["command"] for label in labels)
    assert all(SHOWN_TITLE in label["user"] for label in labels)


@pytest.mark.parametrize("nvml", ["up", "down"])
async def test_the_monitor_shows_every_crafted_field_visibly(nvml: str) -> None:
    """The head start's first readings and the polled ones after them; then the Doctor."""
    snapshot = crafted_snapshots()[nvml == "down"]
    app = fake_app(
        cpu=ScriptedSampler(snapshot.cpu),
        nvml=ScriptedSampler(snapshot.nvml),
        mps=ScriptedSampler(snapshot.mps),
        interval=0.25,
    )
    app.doctor = FixedDoctor(crafted_report())
    async with app.run_test(size=(200, 60)) as pilot:
        await settled(pilot)
        first = screen_text(app)
        await wait_until(pilot, lambda: min(app.handled.values()) >= 2)
        polled = screen_text(app)
        await pilot.press("d")  # the Doctor screen
        await wait_until(pilot, lambda: "torch build" in screen_text(app))
        doctor = screen_text(app)
    for text in (first, polled, doctor):
        assert_shown_visibly(text)


async def test_the_fleet_view_shows_every_crafted_field_visibly() -> None:
    class Recorded:
        error = CRAFTED
        generation = 1

        def start(self) -> None:
            pass

        def stop(self) -> None:
            pass

        def latest(self) -> list[HostReading]:
            return crafted_hosts()

    app = FleetApp(Recorded())
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.pause()
        text = screen_text(app)
    assert_shown_visibly(text)
