"""Hosts that send what they should not, all real servers on loopback: values out of range,
a redirect to another port or to FTP, an answer that trickles, streams or never ends, and a
host of 10,000 GPUs. Each is refused on its own, in one line, on time; the others are read."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from gputui.commands import main
from gputui.fleet.exporters import GPUTUI, MAX_SERIES, read_samples
from gputui.fleet.exposition import parse_text
from gputui.fleet.hosts import HostReading, HungSince
from gputui.fleet.prometheus import (
    GPU_SERIES_QUERY,
    UP_QUERY,
    PrometheusError,
    PrometheusPoller,
    read_prometheus,
)
from gputui.fleet.scrape import FleetPoller, scrape, scrape_all
from gputui.fleet.targets import parse_hosts, parse_target
from gputui.serve.metrics import GPU_SERIES
from gputui.telemetry.readings import GpuState
from gputui.telemetry.snapshot import gpu_as_dict
from tests.fleet.hosts import (
    DCGM_EXPOSITION,
    HOSTILE_EXPOSITION,
    HUNG_EXPOSITION,
    Serve,
    ftp_server,
    json_server,
    raw_host,
    redirecting,
    static_exporter,
    streaming,
    trickling,
)
from tests.helpers import wait_for

MIB = 1024**2


def test_each_bad_value_is_refused_alone_with_a_note() -> None:
    exposition = read_samples(parse_text(HOSTILE_EXPOSITION))
    assert exposition.source == GPUTUI and exposition.sample_age_s == 0.0
    first, second = exposition.gpus  # GPU "²" is not one
    assert first.utilization_percent == 50 and first.sm_clock_mhz == 1980
    assert first.memory_total_bytes == 85520809984
    assert first.memory_used_bytes is None and first.temperature_c is None
    assert first.power_w is None and first.performance_state is None
    (process,) = first.processes or ()  # the pid "²" is not one
    assert (process.pid, process.gpu_memory_bytes) == (4242, None)
    assert second.utilization_percent is None and second.performance_state is None
    assert sorted(exposition.notes) == sorted(
        [
            "gputui_sample_age_seconds = inf: not a number from 0 to 3.1536e+07 seconds; "
            "the readings are dated by the scrape",
            "GPU 0 gputui_gpu_memory_used_bytes = 1e+308: not a number from 0 to 1.1259e+15; "
            "read as n/a",
            "GPU 0 gputui_gpu_temperature_celsius = -273: not a number from -40 to 150; "
            "read as n/a",
            "GPU 0 gputui_gpu_power_watts = NaN: not a number; read as n/a",
            "GPU 0 gputui_gpu_performance_state = 1e+300: not a whole number from 0 to 15; "
            "read as n/a",
            "GPU 0 gputui_gpu_process_memory_bytes of pid 4242 = NaN: not a number; read as n/a",
            "GPU 0 gputui_gpu_process_memory_bytes: pid '²' is not a process id",
            "GPU 1 gputui_gpu_utilization_ratio = 1.5: utilization_percent 150 is not a number "
            "from 0 to 100; read as n/a",
            "GPU 1 gputui_gpu_performance_state = 2.5: not a whole number from 0 to 15; "
            "read as n/a",
        ]
    )


def test_snapshot_hosts_keeps_a_healthy_host_beside_a_hostile_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with (
        static_exporter(HOSTILE_EXPOSITION) as hostile,
        static_exporter(DCGM_EXPOSITION.read_text()) as dcgm,
    ):
        code = main(["snapshot", "--json", "--timeout", "10", "--hosts", f"{hostile},{dcgm}"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")  # both answered
    bad, good = json.loads(out)["hosts"]
    assert bad["up"] and 0 <= bad["age_seconds"] < 10  # +Inf: the age is the scrape's
    assert bad["gpus"][0]["memory_used_bytes"] is None
    assert bad["gpus"][0]["performance_state"] is None
    assert bad["gpus"][0]["utilization_percent"] == 50
    assert len(bad["notes"]) == 9
    expected = read_samples(parse_text(DCGM_EXPOSITION.read_text()))
    assert good["gpus"] == [gpu_as_dict(gpu) for gpu in expected.gpus]
    assert good["notes"] == []


def test_the_table_names_the_first_refused_value(capsys: pytest.CaptureFixture[str]) -> None:
    with static_exporter(HOSTILE_EXPOSITION) as hostile:
        assert main(["snapshot", "--timeout", "10", "--hosts", hostile]) == 0
    headline = capsys.readouterr().out.splitlines()[0]
    assert headline.startswith(f"{hostile}  up · gputui · 2 GPUs · gputui_sample_age_seconds")


# --- The whole exchange within one deadline --------------------------------------------------


@pytest.mark.parametrize(
    ("head", "said"),
    [
        (b"HTTP/1.1 200 OK\r\nX-Slow: ", "the answer did not finish within 1 s"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n",
            "the answer did not finish within 1 s",
        ),
    ],
    ids=["headers", "body"],
)
def test_a_trickling_host_is_cut_off_at_its_deadline(head: bytes, said: str) -> None:
    with raw_host(trickling(head)) as host:
        reading = scrape(parse_target(host.address), 1.0)
        wait_for(lambda: host.hung_up, "the reader never hung up on the trickle")
    assert not reading.up and reading.error is not None and reading.error.startswith(said)


@pytest.mark.parametrize(
    ("content_length", "said"),
    [
        (2 * 1024**3, "the answer is larger than 16 MiB, the most gputui reads"),
        (None, "the answer did not finish within 2 s"),
    ],
    ids=["declared", "streamed"],
)
def test_two_gigabytes_at_a_mebibyte_a_second_are_refused_on_time(
    content_length: int | None, said: str
) -> None:
    with raw_host(streaming(MIB, content_length)) as host:
        (reading,) = scrape_all(parse_hosts(host.address), timeout_s=2.0)
        wait_for(lambda: host.hung_up, "the reader never hung up on the stream")
    assert reading.error is not None and reading.error.startswith(said)


def test_the_fleet_view_marks_a_trickling_host_down_at_its_deadline() -> None:
    with raw_host(trickling(b"HTTP/1.1 200 OK\r\n\r\n")) as host:
        poller = FleetPoller(parse_hosts(host.address), interval_s=0.5, timeout_s=1.0)
        poller.start()
        try:
            wait_for(lambda: poller.latest()[0].error != "not read yet")
            (reading,) = poller.latest()
            wait_for(lambda: host.hung_up, "the reader never hung up on the trickle")
        finally:
            poller.stop()
    assert not reading.up
    assert reading.error is not None and reading.error.startswith("the answer did not finish")


# --- Redirects --------------------------------------------------------------------------------


def test_a_redirect_to_another_port_is_not_followed() -> None:
    with static_exporter(DCGM_EXPOSITION.read_text()) as other:
        location = f"http://{other}/metrics"
        with raw_host(redirecting(location)) as host:
            (reading,) = scrape_all(parse_hosts(host.address), timeout_s=5.0)
    assert not reading.up and reading.gpus == ()  # not the other port's GPUs
    assert reading.error == (
        f"redirected to {location} (HTTP 302): gputui follows no redirects; "
        "name the address it points to instead"
    )


def test_a_redirect_to_ftp_never_logs_in() -> None:
    with raw_host(ftp_server) as ftp:
        with raw_host(redirecting(f"ftp://{ftp.address}/metrics")) as host:
            (reading,) = scrape_all(parse_hosts(host.address), timeout_s=2.0)
        assert (ftp.connections, bytes(ftp.received)) == (0, b"")  # (its read had ended)
    assert reading.error is not None and reading.error.startswith(
        f"redirected to ftp://{ftp.address}/metrics (HTTP 302)"
    )


# --- Many series ------------------------------------------------------------------------------


def _gpus(count: int, series: int) -> str:
    """``gputui serve``'s exposition of ``count`` GPUs, each with ``series`` readings."""
    lines = []
    for index in range(count):
        labels = f'gpu="{index}",uuid="GPU-{index:08d}"'
        lines.append(f'gputui_gpu_info{{{labels},name="NVIDIA H100",bus_id="",driver="550"}} 1')
        lines.append(f"gputui_gpu_up{{{labels}}} 1")
        lines += [f"{reading.name}{{{labels}}} 0.25" for reading in GPU_SERIES[:series]]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def ten_thousand_gpus() -> Iterator[str]:
    """A host of 10,000 GPUs: its parse takes longer than its deadline of 1 s."""
    with static_exporter(_gpus(10_000, series=6)) as address:
        yield address


def test_a_host_of_ten_thousand_gpus_is_read_after_its_deadline(ten_thousand_gpus: str) -> None:
    (reading,) = scrape_all(parse_hosts(ten_thousand_gpus), timeout_s=1.0)
    assert reading.error is None and len(reading.gpus) == 10_000
    assert reading.gpus[-1].utilization_percent == 25


def test_a_host_sending_too_many_series_is_refused_alone() -> None:
    too_many = "".join(f'gputui_gpu_up{{gpu="{n}",uuid=""}} 1\n' for n in range(MAX_SERIES + 1))
    with static_exporter(too_many) as flood, static_exporter(DCGM_EXPOSITION.read_text()) as dcgm:
        flooded, fine = scrape_all(parse_hosts(f"{flood},{dcgm}"), timeout_s=5.0)
    assert flooded.error == (
        f"{MAX_SERIES + 1} series sent; gputui reads at most {MAX_SERIES} from one host"
    )
    assert fine.up and len(fine.gpus) == 2


# --- Prometheus ---------------------------------------------------------------------------


def _vector(result: object) -> bytes:
    """An instant query's answer holding ``result``."""
    answer = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return json.dumps(answer).encode()


def _series(name: str, value: str, **labels: str) -> dict[str, object]:
    return {"metric": {"__name__": name, "job": "gpus", **labels}, "value": [1.7e9, value]}


def _by_query(answers: dict[str, bytes]) -> Callable[[str], bytes]:
    """Answer each of gputui's queries (GPU series, ``up``, ``timestamp(up)``) in turn."""

    def answer(path: str) -> bytes:
        (query,) = parse_qs(urlsplit(path).query)["query"]
        return answers["gpus" if query == GPU_SERIES_QUERY else query]

    return answer


MALFORMED = {
    "result not a list": _vector(5),
    "series not an object": _vector([1, 2]),
    "metric not an object": _vector([{"metric": [], "value": [0, "1"]}]),
    "name not text": _vector([{"metric": {"__name__": 5}, "value": [0, "1"]}]),
    "nested past the stack": b"[" * 100_000,
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=list(MALFORMED))
def test_a_malformed_prometheus_answer_is_one_line(
    body: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    with json_server(lambda path: body) as (url, _):
        code = main(["snapshot", "--prometheus", url, "--timeout", "10"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and err.startswith(f"gputui snapshot: error: {url} ")


def test_the_prometheus_poller_reads_on_after_a_malformed_answer() -> None:
    with json_server(lambda path: _vector([1])) as (url, asked):
        poller = PrometheusPoller(url, interval_s=0.1, timeout_s=5.0)
        poller.start()
        try:
            wait_for(lambda: len(asked) >= 6, f"it stopped asking after {asked}")  # two reads
        finally:
            poller.stop()
    assert poller.error == f"{url} answered a series gputui cannot read: 1"
    assert poller.latest() == []


@pytest.mark.parametrize(
    ("serve", "said"),
    [
        (
            trickling(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"),
            "the answer did not finish within 1 s",
        ),
        (streaming(MIB, 2 * 1024**3), "the answer is larger than 64 MiB, the most gputui reads"),
    ],
    ids=["trickling", "two gigabytes"],
)
def test_a_prometheus_answer_has_one_deadline_and_a_cap(serve: Serve, said: str) -> None:
    with raw_host(serve) as host:
        with pytest.raises(PrometheusError) as refused:
            read_prometheus(f"http://{host.address}", timeout_s=1.0)
        wait_for(lambda: host.hung_up, "the reader never hung up on the answer")
    assert str(refused.value).startswith(f"cannot read Prometheus at http://{host.address}: {said}")


def test_prometheus_behind_a_redirect_is_not_followed() -> None:
    with json_server(lambda path: _vector([])) as (elsewhere, asked):
        location = f"{elsewhere}/api/v1/query?query=up"
        with raw_host(redirecting(location)) as host, pytest.raises(PrometheusError) as refused:
            read_prometheus(f"http://{host.address}", timeout_s=5.0)
    assert f"redirected to {location} (HTTP 302): gputui follows no redirects" in str(refused.value)
    assert asked == []


def test_one_instance_bad_values_through_prometheus_touch_no_other(
    capsys: pytest.CaptureFixture[str],
) -> None:
    labels = {"gpu": "0", "uuid": "GPU-a"}
    answers = {
        "gpus": _vector(
            [
                _series("gputui_gpu_up", "1", instance="bad:9922", **labels),
                _series("gputui_gpu_temperature_celsius", "+Inf", instance="bad:9922", **labels),
                _series("gputui_sample_age_seconds", "+Inf", instance="bad:9922"),
                _series("gputui_gpu_up", "1", instance="good:9922", **labels),
                _series("gputui_gpu_temperature_celsius", "50", instance="good:9922", **labels),
            ]
        ),
        "up": _vector([_series("up", "1", instance=name) for name in ("bad:9922", "good:9922")]),
        UP_QUERY: _vector(
            [
                _series("", "-Inf", instance="bad:9922"),
                _series("", str(time.time()), instance="good:9922"),
            ]
        ),
    }
    with json_server(_by_query(answers)) as (url, _):
        code = main(["snapshot", "--json", "--prometheus", url, "--timeout", "10"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    bad, good = json.loads(out)["hosts"]
    assert (bad["host"], bad["age_seconds"], bad["gpus"][0]["temperature_c"]) == (
        "bad:9922",
        None,  # when Prometheus scraped it is not known
        None,
    )
    assert len(bad["notes"]) == 2
    assert (good["gpus"][0]["temperature_c"], good["notes"]) == (50, [])
    assert 0 <= good["age_seconds"] < 10


# --- A hung GPU -------------------------------------------------------------------------------

HUNG_7_S = "not answering for 7 s: the driver may be wedged; check `nvidia-smi` and `dmesg`."


@pytest.fixture
def hung_host() -> Iterator[str]:
    with static_exporter(HUNG_EXPOSITION) as address:
        yield address


def test_a_hung_gpu_is_hung_not_lost(hung_host: str, capsys: pytest.CaptureFixture[str]) -> None:
    reading = scrape(parse_target(hung_host), 5.0)
    fine, hung = reading.gpus
    assert reading.up and (fine.state, fine.temperature_c) == (GpuState.OK, 45)
    assert (hung.state, hung.error) == (GpuState.HUNG, HUNG_7_S)

    assert main(["snapshot", "--json", "--timeout", "10", "--hosts", hung_host]) == 0
    (host,) = json.loads(capsys.readouterr().out)["hosts"]
    assert [(gpu["state"], gpu["error"]) for gpu in host["gpus"]] == [
        ("ok", None),
        ("hung", HUNG_7_S),
    ]
    assert main(["snapshot", "--timeout", "10", "--hosts", hung_host]) == 0
    line = capsys.readouterr().out.splitlines()[2]
    assert line.split()[:5] == ["1", "NVIDIA", "H100", "80GB", "HBM3"]
    assert line.split("HBM3")[1].split()[:6] == ["hung", "not", "answering", "for", "7", "s:"]


def test_a_hung_gpu_counts_its_seconds_from_when_it_was_first_seen_hung(hung_host: str) -> None:
    first = scrape(parse_target(hung_host), 5.0)
    assert first.taken_at is not None
    hung = HungSince()

    def sentence(reading: HostReading, now: float) -> str | None:
        return hung.track(reading, now).gpus[1].error

    assert sentence(first, first.taken_at + 9.5) == HUNG_7_S.replace("7 s", "9 s")
    later = dataclasses.replace(first, taken_at=first.taken_at + 5)  # a later read, as hung
    assert sentence(later, first.taken_at + 20.2) == HUNG_7_S.replace("7 s", "20 s")
    answers = dataclasses.replace(
        later,
        gpus=(first.gpus[0], dataclasses.replace(first.gpus[1], state=GpuState.OK, error=None)),
    )
    assert sentence(answers, first.taken_at + 21) is None  # answering again: forgotten
    again = dataclasses.replace(first, taken_at=first.taken_at + 30)
    assert sentence(again, first.taken_at + 33) == HUNG_7_S.replace("7 s", "3 s")


def test_a_hung_gpu_read_through_prometheus_is_hung() -> None:
    labels = {"instance": "node:9922", "gpu": "1", "uuid": "GPU-b"}
    answers = {
        "gpus": _vector(
            [_series("gputui_gpu_up", "0", **labels), _series("gputui_gpu_hung", "1", **labels)]
        ),
        "up": _vector([_series("up", "1", instance="node:9922")]),
        UP_QUERY: _vector([_series("", str(time.time()), instance="node:9922")]),
    }
    with json_server(_by_query(answers)) as (url, _):
        (host,) = read_prometheus(url, timeout_s=10.0)
    (gpu,) = host.gpus
    assert (gpu.state, gpu.error) == (
        GpuState.HUNG,
        "not answering: the driver may be wedged; check `nvidia-smi` and `dmesg`.",
    )


def test_a_prometheus_address_with_a_bad_port_is_refused_as_typed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as leaving:
        main(["snapshot", "--prometheus", "http://prom:99999"])
    assert leaving.value.code == 2
    assert capsys.readouterr().err == (
        "gputui snapshot: error: argument --prometheus: 'http://prom:99999' is not a "
        "Prometheus address: write http://HOST:9090 (see 'gputui snapshot --help')\n"
    )
