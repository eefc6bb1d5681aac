"""A host's answer parsed only as far as gputui reads it: the same samples prometheus_client's
parser reads from the series gputui reads, whatever the line's shape, with the label sets
of the last answer looked up rather than parsed again; an answer the same as the last is not
parsed at all; and the fleet view's reads come one after another across the interval."""

from __future__ import annotations

import threading
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gputui.fleet.exporters import SERIES_READ, NotAnExporter, Sample, read_samples
from gputui.fleet.exposition import ExpositionParser, parse_text
from gputui.fleet.scrape import FleetPoller, HostScraper, ReadThreads
from gputui.fleet.targets import Target, parse_target
from tests.fleet.hosts import (
    AGE_INF_EXPOSITION,
    DCGM_EXPOSITION,
    HOSTILE_EXPOSITION,
    HUNG_EXPOSITION,
    nvitop_exposition,
    serving,
)


def _parser_reads(text: str) -> list[Sample]:
    """What prometheus_client's parser reads from ``text`` whole (its TYPE lines included)."""
    return [
        Sample(sample.name, sample.labels, float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


@pytest.mark.parametrize(
    "text",
    [
        DCGM_EXPOSITION.read_text(),
        nvitop_exposition(),
        HOSTILE_EXPOSITION,
        HUNG_EXPOSITION,
        AGE_INF_EXPOSITION,
    ],
    ids=["dcgm-exporter", "nvitop-exporter", "hostile", "hung", "age-inf"],
)
def test_an_answer_reads_as_the_parser_reads_it_whole(text: str) -> None:
    assert read_samples(parse_text(text)) == read_samples(_parser_reads(text))
    parser = ExpositionParser()
    parser.parse(text)
    assert read_samples(parser.parse(text)) == read_samples(_parser_reads(text))


def test_only_the_series_read_are_parsed() -> None:
    text = DCGM_EXPOSITION.read_text()
    assert {sample.name for sample in parse_text(text)} <= SERIES_READ
    # A broken line of a series gputui does not read costs nothing; one it reads is refused.
    broken = 'DCGM_FI_DEV_MEMORY_TEMP{gpu="0",UUID="GPU-x" 45\n'
    assert read_samples(parse_text(text + broken)) == read_samples(parse_text(text))
    with pytest.raises(NotAnExporter, match="not a Prometheus text exposition"):
        parse_text(text + broken.replace("MEMORY_TEMP", "GPU_UTIL"))


_LABELS = '{gpu="0",uuid="GPU-a"}'

LINES = [
    f"gputui_gpu_up{_LABELS} 1",
    f"gputui_gpu_up{_LABELS} 1 1700000000000",  # a timestamp
    f"gputui_gpu_up{_LABELS}\t1",
    f"gputui_gpu_up {_LABELS} 1",
    f"gputui_gpu_up{_LABELS}1",
    f"gputui_gpu_up{_LABELS}   1   ",
    f"gputui_gpu_up{_LABELS} 1_000",
    f"gputui_gpu_up{_LABELS} NaN",
    f"gputui_gpu_up{_LABELS} +Inf",
    f"gputui_gpu_up{_LABELS} -inf",
    f"gputui_gpu_up{_LABELS} 1e308",
    f"gputui_gpu_up{_LABELS} 0x10",
    f"gputui_gpu_up{_LABELS} \u0661",  # an Arabic-Indic one: Python's int() takes it
    f"gputui_gpu_up{_LABELS} 1\xa02",
    f"gputui_gpu_up{_LABELS} 1 }}2",
    f"gputui_gpu_up{_LABELS} ",
    'gputui_gpu_up{gpu="0",uuid="GPU-a" 1',
    'gputui_gpu_up{gpu="0",uuid="GPU-a"}} 1',
    'gputui_gpu_up{gpu="0",uuid="GPU-a",} 1',
    'gputui_gpu_up{gpu="0",gpu="1"} 1',
    'gputui_gpu_up{__name__="x",gpu="0"} 1',
    'gputui_gpu_info{gpu="0",uuid="GPU-a",name="x}y {z",bus_id="",driver=""} 1',
    'gputui_gpu_info{gpu="0",uuid="GPU-a",name="a\\"b\\\\",bus_id="",driver=""} 1',
    "gputui_gpu_up{} 1",
    "gputui_sample_age_seconds 5",
    "gputui_sample_age_seconds\t5",
    "gputui_sample_age_seconds  5",
    "gputui_sample_age_seconds 5 123",
    "gputui_sample_age_seconds",
    "gputui_sample_age_seconds 5 {",
    "gputui_sample_age_seconds\xa05",
    "  gputui_sample_age_seconds 5\r",
]


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize("before", ["none", "same labels above", "same labels last time"])
def test_each_line_is_read_as_the_parser_reads_it_or_refused_as_it_refuses_it(
    line: str, before: str
) -> None:
    above = f"gputui_gpu_hung{_LABELS} 0\n" if before == "same labels above" else ""
    parser = ExpositionParser()
    if before == "same labels last time":
        parser.parse(f"gputui_gpu_hung{_LABELS} 0\n")
    text = f"{above}{line}\n"
    try:
        expected: list[Sample] | None = [
            sample for sample in _parser_reads(text) if sample.name in SERIES_READ
        ]
    except ValueError:
        expected = None  # the parser refuses it
    try:
        read = parser.parse(text)
    except NotAnExporter:
        assert expected is None, f"refused a line the parser reads: {line!r}"
        return
    if expected is None:  # taken for a line of a series gputui does not read: skipped
        assert read == parse_text(above), f"read a line the parser refuses: {line!r}"
    else:
        assert [(s.name, dict(s.labels), repr(s.value)) for s in read] == [
            (s.name, dict(s.labels), repr(s.value)) for s in expected
        ]


def test_too_many_series_are_counted_before_any_is_parsed_whole() -> None:
    lines = "".join(f'gputui_gpu_up{{gpu="{n}",broken}} 1\n' for n in range(11))
    with pytest.raises(NotAnExporter, match="11 series sent; gputui reads at most 10"):
        ExpositionParser(max_series=10).parse(lines)


def test_an_answer_the_same_as_the_last_is_not_parsed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[str] = []
    parse = ExpositionParser.parse

    def counted(self: ExpositionParser, text: str) -> list[Sample]:
        parsed.append(text)
        return parse(self, text)

    monkeypatch.setattr(ExpositionParser, "parse", counted)
    scraper = HostScraper(parse_target("node1"))
    body = DCGM_EXPOSITION.read_bytes()
    first = scraper.read(body, taken_at=100.0)
    again = scraper.read(body, taken_at=102.0)
    assert len(parsed) == 1
    assert again.gpus == first.gpus and again.up and again.taken_at == 102.0  # taken anew
    changed = scraper.read(body.replace(b"} 87\n", b"} 88\n"), taken_at=104.0)
    assert len(parsed) == 2 and changed.gpus[0].utilization_percent == 88
    refused = b"<html>login</html>"
    assert not scraper.read(refused, 106.0).up and not scraper.read(refused, 108.0).up
    assert len(parsed) == 3


def test_the_fleet_view_reads_its_hosts_one_after_another_across_the_interval() -> None:
    asked: dict[int, float] = {}
    body = DCGM_EXPOSITION.read_bytes()

    def answer(path: str) -> tuple[str, bytes]:
        node = int(parse_qs(urlsplit(path).query)["node"][0])
        asked.setdefault(node, time.monotonic())
        return "text/plain; version=0.0.4", body

    hosts, interval_s = 16, 1.6
    with serving(answer) as port:
        targets = [
            Target(f"node-{n}", f"http://127.0.0.1:{port}/metrics?node={n}") for n in range(hosts)
        ]
        poller = FleetPoller(targets, interval_s=interval_s, timeout_s=5.0)
        poller.start()
        try:
            assert poller.wait_rounds(1, timeout_s=60)
            threads = [t for t in threading.enumerate() if t.name.startswith("gputui-host-")]
        finally:
            poller.stop()
    assert all(host.up for host in poller.latest())
    firsts = [asked[n] for n in range(hosts)]
    assert firsts == sorted(firsts)  # in the order named
    assert firsts[-1] - firsts[0] >= interval_s / 2  # 15/16 of the interval, less a late start
    assert len(threads) < hosts / 2, f"{len(threads)} threads read {hosts} hosts"


def test_a_read_that_hangs_gets_another_thread_started_for_the_others() -> None:
    threads = ReadThreads(3, name="test-read")
    hung, other = threading.Event(), threading.Event()
    try:
        threads.run(hung.wait)
        threads.run(other.set)
        assert not other.wait(0.2)  # one thread, busy with the read that hangs
        threads.keep_up()
        assert other.wait(10)
    finally:
        hung.set()
        threads.close()
