"""``gputui serve`` end to end: a child process on the stand-in NVML, scraped over loopback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from gputui.serve.metrics import COMMAND_LABEL_MAX, GPU_SERIES
from tests.fakeprocfs import DOCKER_ID, IN_DOCKER, IN_POD, IN_SLURM, jobs_tree
from tests.helpers import ROOT, gputui_env
from tests.serve.served import StartServe, labels_of, promtool

H100 = "NVIDIA H100 80GB HBM3"
NO_NVML_SERIES = "gputui_gpu_fan_rpm"
"""A series NVML gives nothing for (a tachometer's RPM: AMD's hwmon)."""
H100_MEMORY = 81559 * 1024 * 1024

NAMED = (
    "gputui_gpu_utilization_ratio",
    "gputui_gpu_memory_used_bytes",
    "gputui_gpu_memory_total_bytes",
    "gputui_gpu_temperature_celsius",
    "gputui_gpu_power_watts",
    "gputui_gpu_power_limit_watts",
    "gputui_gpu_sm_clock_hertz",
    "gputui_gpu_energy_joules_total",
    "gputui_gpu_up",
    "gputui_gpu_info",
    "gputui_cpu_utilization_ratio",
    "gputui_memory_used_bytes",
    "gputui_sample_age_seconds",
    "gputui_gpu_process_memory_bytes",
)
"""The series issue 16 names."""


def only(samples: list[Any]) -> Any:
    (sample,) = samples
    return sample


def test_metrics_show_the_stand_in_s_readings_with_gpu_and_uuid_labels(
    start_serve: StartServe,
) -> None:
    me = psutil.Process()
    child = start_serve(
        "--interval=60",  # one sample each: /metrics and /snapshot show the same reading
        "--processes",
        FAKE_NVML_GPU_COUNT="3",
        FAKE_NVML_UNSUPPORTED="2:fan,2:mem_clock,2:pcie_link,2:encoder,2:decoder",
        FAKE_NVML_PROCESSES=f"0:{me.pid}:1073741824",
        FAKE_NVML_PROCESS_UTILIZATION=f"0:{me.pid}:42",
        FAKE_NVML_ENCODER_UTILIZATION="0:12",
        FAKE_NVML_DECODER_UTILIZATION="0:40",
        FAKE_NVML_NVLINKS="0:18,1:18",
        FAKE_NVML_NVLINKS_DOWN="0:0x1",
    )
    snapshot = child.wait_for_readings()
    metrics = child.metrics()
    body = child.get("/metrics").body

    for name in NAMED:
        assert name in metrics, name
    gpus = snapshot["gpus"]
    assert len(gpus) == 3
    for gpu in gpus:
        labels = {"gpu": str(gpu["index"]), "uuid": gpu["uuid"], "vendor": "nvidia"}
        assert gpu["uuid"].startswith("GPU-")
        info = only(labels_of(metrics["gputui_gpu_info"], gpu["index"]))
        assert info.labels == {
            **labels,
            "name": H100,
            "bus_id": gpu["bus_id"],
            "driver": "550.54.15",
        }
        assert info.value == 1
        assert only(labels_of(metrics["gputui_gpu_up"], gpu["index"])).value == 1
        for series in GPU_SERIES:
            found = labels_of(metrics.get(series.name, []), gpu["index"])
            json_value = gpu[series.field]
            if json_value is not None and series.part is not None:
                json_value = json_value[series.part]
            if json_value is None:
                assert found == [], series.name  # not supported: left out, not 0
                continue
            sample = only(found)
            assert sample.labels == labels, series.name
            # /snapshot's JSON is to a thousandth; /metrics is not rounded
            rounding = 0.0005 * series.times / series.per
            assert sample.value == pytest.approx(
                json_value * series.times / series.per, abs=rounding
            )

    first = gpus[0]
    value = {
        name: only(labels_of(metrics[name], 0)).value
        for name in {*NAMED, *(series.name for series in GPU_SERIES)}
        if name.startswith("gputui_gpu_")
        and name not in ("gputui_gpu_process_memory_bytes", NO_NVML_SERIES)
    }
    assert value["gputui_gpu_memory_total_bytes"] == H100_MEMORY
    assert value["gputui_gpu_power_limit_watts"] == 700.0
    assert 0 < value["gputui_gpu_utilization_ratio"] <= 1
    assert 345e6 <= value["gputui_gpu_sm_clock_hertz"] <= 1980e6
    assert 1e6 < value["gputui_gpu_energy_joules_total"] < 2e6  # GPU 0 starts at 1 MJ
    assert first["fan_percent"] is not None
    assert gpus[2]["fan_percent"] is None
    assert labels_of(metrics["gputui_gpu_fan_speed_ratio"], 2) == []
    assert value["gputui_gpu_memory_clock_hertz"] == 2619e6
    assert value["gputui_gpu_memory_clock_max_hertz"] == 2619e6
    assert value["gputui_gpu_pcie_link_gen"] in (1, 5)  # Gen1 while idle
    assert value["gputui_gpu_pcie_link_gen_max"] == 5
    assert value["gputui_gpu_pcie_link_width_lanes"] == 16
    assert value["gputui_gpu_pcie_link_width_max_lanes"] == 16
    for name in ("gputui_gpu_memory_clock_hertz", "gputui_gpu_pcie_link_width_max_lanes"):
        assert labels_of(metrics[name], 2) == []  # NotSupported: left out, not 0
    assert gpus[2]["memory_clock_mhz"] is None and gpus[2]["pcie_link_gen"] is None
    engines = ("gputui_gpu_encoder_utilization_ratio", "gputui_gpu_decoder_utilization_ratio")
    assert [value[name] for name in engines] == [0.12, 0.4]
    assert [only(labels_of(metrics[name], 1)).value for name in engines] == [0, 0]
    assert [labels_of(metrics[name], 2) for name in engines] == [[], []]
    for name in engines:
        assert f"# HELP {name} Share of time the video ".encode() in body
    links = "gputui_gpu_nvlink_links_active"
    assert [only(labels_of(metrics[links], i)).value for i in (0, 1)] == [17, 18]
    assert labels_of(metrics[links], 2) == []  # a PCIe card: left out, not 0
    assert f"# HELP {links} NVLink links that are up".encode() in body
    for direction, kib in (("tx", 1024), ("rx", 2048)):  # the stand-in's defaults for GPU 0
        name = f"gputui_gpu_nvlink_{direction}_bytes_total"
        assert f"# TYPE {name} counter".encode() in body
        assert [only(labels_of(metrics[name], i)).value for i in (0, 1)] == [
            17 * kib * 1024,  # 17 links up, one read
            18 * kib * 2 * 1024,
        ]
        assert labels_of(metrics[name], 2) == []  # a PCIe card: left out, not 0
    link_up = "gputui_gpu_nvlink_link_up"
    states = [{s.labels["link"]: s.value for s in labels_of(metrics[link_up], i)} for i in (0, 1)]
    assert states == [
        {str(link): float(link != 0) for link in range(18)},
        dict.fromkeys(map(str, range(18)), 1.0),
    ]
    assert [gpu["nvlink_links_down"] for gpu in gpus] == [[0], [], None]
    assert labels_of(metrics[link_up], 2) == []  # a PCIe card: left out, not 0
    assert f"# TYPE {link_up} gauge".encode() in body

    process = only(metrics["gputui_gpu_process_memory_bytes"])
    assert process.value == 1073741824
    assert process.labels["gpu"] == "0"
    assert process.labels["uuid"] == first["uuid"]
    assert process.labels["pid"] == str(me.pid)
    assert process.labels["user"] == me.username()
    command, label = first["processes"][0]["command"], process.labels["command"]
    if len(command) > COMMAND_LABEL_MAX:  # this pytest's, when it was given many test files
        assert len(label) == COMMAND_LABEL_MAX and command.startswith(label.removesuffix("..."))
    else:
        assert label == command
    assert snapshot["gpus"][0]["processes"][0]["pid"] == me.pid
    busy = only(metrics["gputui_gpu_process_sm_utilization_ratio"])
    assert busy.value == 0.42
    assert busy.labels == process.labels

    cpu = snapshot["cpu"]
    assert only(metrics["gputui_cpu_utilization_ratio"]).value == pytest.approx(
        cpu["utilization_percent"] / 100,
        abs=0.0005 / 100,  # the JSON's, to a thousandth
    )
    assert only(metrics["gputui_memory_used_bytes"]).value == cpu["memory_used_bytes"]
    assert only(metrics["gputui_sample_age_seconds"]).value >= 0

    checked = subprocess.run([promtool(), "check", "metrics"], input=body, capture_output=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == b""  # not even a lint warning


def test_metrics_name_each_processs_job_and_sum_each_jobs_use(
    start_serve: StartServe, tmp_path: Path
) -> None:
    """Processes in a Docker container, a pod (on two GPUs) and a Slurm job, read from a
    fake procfs (``GPUTUI_PROCFS``, tests/fakeprocfs.py): their labels with --processes,
    their sums with --jobs, and promtool accepts both."""
    child = start_serve(
        "--interval=60",
        "--processes",
        "--jobs",
        GPUTUI_PROCFS=str(jobs_tree(tmp_path).root),
        FAKE_NVML_PROCESSES=f"0:{IN_DOCKER}:1024,0:{IN_POD}:2048,1:{IN_POD}:4096,1:{IN_SLURM}:8192",
        FAKE_NVML_PROCESS_UTILIZATION=f"0:{IN_POD}:40,1:{IN_POD}:30,1:{IN_SLURM}:90",
    )
    snapshot = child.wait_for_readings()
    metrics = child.metrics()
    body = child.get("/metrics").body

    jobs = {
        (gpu["index"], process["pid"]): (process["container"], process["pod"], process["slurm_job"])
        for gpu in snapshot["gpus"]
        for process in gpu["processes"]
    }
    assert jobs == {
        (0, IN_DOCKER): ("trainer", None, None),
        (0, IN_POD): ("resnet", "resnet-0", None),
        (1, IN_POD): ("resnet", "resnet-0", None),
        (1, IN_SLURM): (None, None, "1234"),
    }
    labels = {
        (s.labels["gpu"], int(s.labels["pid"])): s.labels
        for s in metrics["gputui_gpu_process_memory_bytes"]
    }
    workload = ("container", "pod", "namespace", "slurm_job", "unit")
    assert {key: labels["0", IN_DOCKER][key] for key in workload} == {
        "container": "trainer",
        "pod": "",
        "namespace": "",
        "slurm_job": "",
        "unit": f"docker-{DOCKER_ID}.scope",
    }
    assert {key: labels["1", IN_POD][key] for key in ("container", "pod", "namespace")} == {
        "container": "resnet",
        "pod": "resnet-0",
        "namespace": "ml",
    }
    assert labels["1", IN_SLURM]["slurm_job"] == "1234"

    def by_job(name: str) -> dict[tuple[str, str], float]:
        return {(s.labels["kind"], s.labels["name"]): s.value for s in metrics[name]}

    assert by_job("gputui_job_gpu_memory_bytes") == {
        ("container", "trainer"): 1024,
        ("pod", "ml/resnet-0"): 2048 + 4096,
        ("slurm_job", "1234"): 8192,
    }
    assert by_job("gputui_job_sm_busy_gpus") == {
        ("container", "trainer"): 0.0,  # no kernel ran
        ("pod", "ml/resnet-0"): 0.7,
        ("slurm_job", "1234"): 0.9,
    }
    checked = subprocess.run([promtool(), "check", "metrics"], input=body, capture_output=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == b""


def test_snapshot_is_what_snapshot_json_prints(
    fake_nvml_dir: Path, start_serve: StartServe
) -> None:
    knobs = {"FAKE_NVML_GPU_COUNT": "2", "FAKE_NVML_PROCESSES": f"1:{os.getpid()}:4096"}
    child = start_serve("--processes", **knobs)
    served_snapshot = child.wait_for_readings()
    answer = child.get("/snapshot")
    printed = subprocess.run(
        [sys.executable, "-m", "gputui", "snapshot", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=gputui_env(fake_nvml_dir, knobs),
        timeout=60,
        check=True,
    ).stdout

    assert answer.headers["Content-Type"] == "application/json"
    assert answer.body.decode().endswith("}\n")  # as printed: indented, one newline
    assert shape(served_snapshot) == shape(json.loads(printed))
    assert served_snapshot["gpus"][1]["processes"][0]["pid"] == os.getpid()


def test_without_processes_no_process_is_served(start_serve: StartServe) -> None:
    # GPU 0 in MIG mode, the process on its MIG device: listed by the device and by the GPU.
    child = start_serve(
        FAKE_NVML_PROCESSES=f"0/0:{os.getpid()}:4096,1:{os.getpid()}:4096",
        FAKE_NVML_MIG_MODE="0:1",
        FAKE_NVML_MIG_DEVICES="0:1:0:1024:10240",
    )
    snapshot = child.wait_for_readings()

    assert "gputui_gpu_process_memory_bytes" not in child.metrics()
    # Not shown is not known from here: null (the key stays), never [] (none).
    assert [gpu["processes"] for gpu in snapshot["gpus"]] == [None, None]
    (device,) = snapshot["gpus"][0]["mig_devices"]
    assert (device["gpu_instance_id"], device["processes"]) == (1, None)
    assert os.getpid() not in pids_in(json.loads(child.get("/snapshot").body))


def pids_in(value: Any) -> set[int]:
    """Every ``pid`` in JSON data, however deep (its digits may be in other numbers)."""
    if isinstance(value, dict):
        found = {value["pid"]} if "pid" in value else set()
        return found.union(*(pids_in(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(pids_in(item) for item in value))
    return set()


def shape(value: Any) -> Any:
    """The keys and list lengths of JSON data, every leaf reduced to None."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return None


def test_a_scrape_while_the_driver_hangs_serves_the_last_reading_at_once(
    start_serve: StartServe, tmp_path: Path
) -> None:
    hang = tmp_path / "hang"
    child = start_serve("--interval", "0.25", FAKE_NVML_HANG_FILE=str(hang))
    child.wait_for_readings()
    before = child.metrics()
    hang.touch()  # every NVML device query blocks from now on, until the file goes

    # Each scrape must answer while the sampler is stuck (Served.get fails after 10 s); the
    # age grows until the GPUs read as down, and hung, their last values still served.
    ages = [only(child.metrics()["gputui_sample_age_seconds"]).value]
    while True:
        metrics = child.metrics()
        ages.append(only(metrics["gputui_sample_age_seconds"]).value)
        if all(sample.value == 0 for sample in metrics["gputui_gpu_up"]):
            break
        assert len(ages) < 2000, ages[-5:]
        time.sleep(0.01)
    assert ages[-1] > ages[0]
    assert ages[-1] > 1.25  # past max(2 * interval, interval + 1): stale
    assert [sample.value for sample in metrics["gputui_gpu_hung"]] == [1, 1]  # not lost
    assert len(metrics["gputui_gpu_memory_total_bytes"]) == 2
    call = only(metrics["gputui_nvml_hung_seconds"])
    assert call.labels["call"].startswith("nvmlDevice") and call.value > 0
    snapshot = child.get("/snapshot").json()
    assert [gpu["state"] for gpu in snapshot["gpus"]] == ["hung", "hung"]
    assert snapshot["nvml"]["hung_call"] == call.labels["call"]

    hang.unlink()  # the driver answers again: fresh readings, the GPUs up again
    while not all(sample.value == 1 for sample in child.metrics()["gputui_gpu_up"]):
        time.sleep(0.01)
    metrics = child.metrics()
    assert only(metrics["gputui_sample_age_seconds"]).value < ages[-1]
    assert [sample.value for sample in metrics["gputui_gpu_hung"]] == [0, 0]
    assert "gputui_nvml_hung_seconds" not in metrics
    snapshot = child.get("/snapshot").json()
    assert [gpu["state"] for gpu in snapshot["gpus"]] == ["ok", "ok"]
    assert (snapshot["nvml"]["hung_call"], snapshot["nvml"]["hung_seconds"]) == (None, None)
    assert len(before["gputui_gpu_up"]) == 2
    code, _, err = child.stop()
    assert (code, err) == (0, "")


def test_a_driver_hung_from_the_start_serves_its_gpus_as_hung_within_seconds(
    start_serve: StartServe,
) -> None:
    """The first sample never ends: NVML counted two GPUs, read GPU 0, and hangs on GPU 1's
    temperature. Once the readings are overdue (1.25 s at this interval), both endpoints say
    so: every GPU NVML counted, hung (not lost), and the call, with how long it has waited."""
    child = start_serve("--interval", "0.25", FAKE_NVML_HANG="1:temperature=600")
    snapshot = child.wait_for_readings()  # a 503 only until then
    metrics = child.metrics()
    body = child.get("/metrics").body

    assert snapshot["nvml"]["available"] is True
    assert snapshot["nvml"]["hung_call"] == "nvmlDeviceGetTemperature"
    assert snapshot["nvml"]["hung_seconds"] > 0
    first, second = snapshot["gpus"]
    assert (first["state"], second["state"]) == ("hung", "hung")
    assert first["uuid"].startswith("GPU-") and first["name"] == H100
    assert second["error"].startswith("nvmlDeviceGetTemperature on GPU 1 has not returned for ")
    assert first["error"].startswith(
        "Not read: NVML had not returned from nvmlDeviceGetTemperature on GPU 1 after "
    )
    assert first["temperature_c"] is None  # the figures of a sample that never ended

    assert only(metrics["gputui_nvml_available"]).value == 1
    up, hung = metrics["gputui_gpu_up"], metrics["gputui_gpu_hung"]
    assert [s.labels for s in hung] == [s.labels for s in up]
    assert [s.labels["uuid"] for s in up] == [first["uuid"], second["uuid"]]
    assert [s.value for s in up] == [0, 0] and [s.value for s in hung] == [1, 1]
    assert len(metrics["gputui_gpu_info"]) == 2
    assert only(metrics["gputui_nvml_hung_seconds"]).labels == {"call": "nvmlDeviceGetTemperature"}
    checked = subprocess.run([promtool(), "check", "metrics"], input=body, capture_output=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == b""


def test_nvml_whose_start_hangs_is_served_as_unavailable_with_the_call(
    start_serve: StartServe,
) -> None:
    child = start_serve("--interval", "0.25", FAKE_NVML_HANG="init=600")
    snapshot = child.wait_for_readings()
    metrics = child.metrics()

    assert snapshot["gpus"] == []
    nvml = snapshot["nvml"]
    assert (nvml["available"], nvml["hung_call"]) == (False, "nvmlInit")
    assert nvml["error"].startswith("nvmlInit has not returned for ")
    assert only(metrics["gputui_nvml_available"]).value == 0
    assert only(metrics["gputui_nvml_hung_seconds"]).labels == {"call": "nvmlInit"}
    assert "gputui_gpu_up" not in metrics


def test_a_lost_gpu_reads_up_0_and_keeps_its_identity(start_serve: StartServe) -> None:
    # GPU 1 answers its static facts, then is lost within the first sample.
    child = start_serve(FAKE_NVML_GPU_COUNT="2", FAKE_NVML_LOST="1:8", FAKE_NVML_NVLINKS="0:18")
    snapshot = child.wait_for_readings()
    metrics = child.metrics()

    assert [gpu["state"] for gpu in snapshot["gpus"]] == ["ok", "lost"]
    assert only(labels_of(metrics["gputui_gpu_up"], 0)).value == 1
    lost_up = only(labels_of(metrics["gputui_gpu_up"], 1))
    assert lost_up.value == 0
    assert [sample.value for sample in metrics["gputui_gpu_hung"]] == [0, 0]  # lost, not hung
    assert lost_up.labels["uuid"] == snapshot["gpus"][1]["uuid"]
    assert lost_up.labels["uuid"].startswith("GPU-")
    assert only(labels_of(metrics["gputui_gpu_info"], 1)).labels["name"] == H100
    for series in GPU_SERIES:  # a lost GPU's readings are unknown: left out, not 0
        assert labels_of(metrics.get(series.name, []), 1) == [], series.name
        if series.name != NO_NVML_SERIES:
            assert len(labels_of(metrics[series.name], 0)) == 1, series.name


def test_only_get_of_the_two_paths_is_served(start_serve: StartServe) -> None:
    child = start_serve()
    child.wait_for_readings()

    for path in ("/", "/metrics/", "/favicon.ico", "/snapshot.json", "/kill"):
        assert child.get(path).status == 404, path
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for path in ("/metrics", "/snapshot"):
            answer = child.get(path, method)
            assert answer.status == 405, (method, path)
            assert answer.headers["Allow"] == "GET, HEAD"
    for path in ("/metrics", "/snapshot"):  # a health check: GET's answer without the body
        head, get = child.get(path, "HEAD"), child.get(path)
        assert (head.status, head.body) == (200, b"")
        assert head.headers["Content-Type"] == get.headers["Content-Type"]
        assert int(head.headers["Content-Length"]) > 0

    for junk in (b"GET /metr", b"HELLO\r\n\r\n", b"\x16\x03\x01\x02\x00\x01"):  # cut, bad, TLS
        with socket.create_connection(("127.0.0.1", child.port), timeout=10) as raw:
            raw.sendall(junk)
            raw.shutdown(socket.SHUT_WR)
            raw.recv(4096)  # whatever the server says, it says it to this client only
    assert child.get("/metrics").status == 200
    assert child.stop() == (0, "", "")  # nothing printed for the bad clients


@pytest.mark.usefixtures("ctrl_c_reaches_children")
@pytest.mark.parametrize(("signal_number", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_sigterm_and_ctrl_c_stop_it_cleanly(
    start_serve: StartServe, signal_number: int, code: int
) -> None:
    child = start_serve("--interval", "0.25")
    child.wait_for_readings()

    assert child.stop(signal_number) == (code, "", "")
    assert "127.0.0.1" in child.first_line


def test_a_scrape_never_asks_nvml(start_serve: StartServe) -> None:
    # The stand-in's query counter moves each reading: equal readings across many scrapes
    # (at an interval longer than the test) mean the scrapes asked the driver nothing.
    child = start_serve("--interval", "60")
    child.wait_for_readings()
    first = child.get("/snapshot").body
    for _ in range(20):
        child.get("/metrics")
    assert child.get("/snapshot").body == first
