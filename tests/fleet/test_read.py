"""Reading a fleet: the hosts as the user names them, and each exporter's exposition turned
back into gputui's readings (dcgm-exporter's documented counters, nvitop-exporter's names)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from gputui.commands import main
from gputui.fleet.exporters import DCGM, NVITOP, NotAnExporter, read_samples
from gputui.fleet.exposition import parse_text
from gputui.fleet.targets import TargetError, parse_hosts, parse_target, read_hostfile
from gputui.serve.metrics import metric_families
from gputui.telemetry.bounds import in_range
from gputui.telemetry.polling import Latest
from gputui.telemetry.readings import NvlinkThroughput, NvmlReading, NvmlStatus, health_problems
from tests.fleet.hosts import DCGM_EXPOSITION, nvitop_exposition, serving
from tests.ui.fakes import gpu_reading

MIB = 1024**2


@pytest.mark.parametrize(
    ("entry", "url"),
    [
        ("node1:9400", "http://node1:9400/metrics"),
        ("node1", "http://node1:9922/metrics"),
        ("10.0.0.7:9922", "http://10.0.0.7:9922/metrics"),
        ("[::1]:9400", "http://[::1]:9400/metrics"),
        ("[fe80::1]", "http://[fe80::1]:9922/metrics"),
        ("https://gpu-7.example.org:9400", "https://gpu-7.example.org:9400/metrics"),
        ("http://node1:8000/custom/metrics", "http://node1:8000/custom/metrics"),
    ],
)
def test_a_host_is_read_as_users_write_it(entry: str, url: str) -> None:
    target = parse_target(entry)
    assert (target.name, target.url) == (entry, url)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("node1:0", "port must be a number from 1 to 65535"),
        ("node1:99999", "port must be a number from 1 to 65535"),
        ("node1:http", "port must be a number from 1 to 65535"),
        ("::1:9400", "IPv6 host in brackets"),
        ("[node1]:9400", "not an IPv6 address"),
        ("no de:9400", "not a host name or address"),
        ("ftp://node1", "only http:// and https://"),
        ("node1:9400,,node2:9400", "an empty host"),
        ("node1:9400,node1:9400", "named twice"),
        (" , ", "no hosts given"),
    ],
)
def test_a_bad_host_says_what_to_write(text: str, said: str) -> None:
    with pytest.raises(TargetError, match=said):
        parse_hosts(text)


def test_the_host_file_skips_comments_and_blank_lines(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# rack 1\nnode1:9400\n\n  node2  # the spare\n[::1]:9922\n")
    assert [target.name for target in read_hostfile(str(hostfile))] == [
        "node1:9400",
        "node2",
        "[::1]:9922",
    ]


def test_a_bad_host_file_names_its_line(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1:9400\n# fine\nnode2:port\n")
    with pytest.raises(TargetError, match=r"hosts line 3: 'node2:port': the port must"):
        read_hostfile(str(hostfile))
    hostfile.write_text("# only comments\n\n")
    with pytest.raises(TargetError, match="names no host"):
        read_hostfile(str(hostfile))
    with pytest.raises(TargetError, match=r"cannot read the host file .*No such file"):
        read_hostfile(str(tmp_path / "missing"))


def test_dcgm_exporter_is_read_in_gputui_units() -> None:
    exposition = read_samples(parse_text(DCGM_EXPOSITION.read_text()))
    assert exposition.source == DCGM
    first, second = exposition.gpus
    assert (first.index, first.name, first.uuid, first.bus_id) == (
        0,
        "NVIDIA H100 80GB HBM3",
        "GPU-5f0c2a36-1d7e-4b9f-8a43-0d1b2c3e4f50",
        "00000000:18:00.0",
    )
    assert first.utilization_percent == 87
    assert first.memory_utilization_percent == 41
    assert first.memory_used_bytes == 41088 * MIB
    assert first.memory_total_bytes == (41088 + 40471) * MIB  # used plus free
    assert first.temperature_c == 61
    assert first.power_w == pytest.approx(512.34)
    assert first.energy_j == pytest.approx(123456789.012)  # from mJ
    assert first.sm_clock_mhz == 1980
    assert first.memory_clock_mhz == 2619
    assert first.power_limit_w is None  # not among dcgm-exporter's default counters
    assert first.pcie_link_gen is None  # nor is the PCIe link
    assert first.fan_percent is None
    # GPU 1's MIG instance (GPU_I_ID) reads 99 % and comes first; the GPU itself reads 3 %.
    assert (second.index, second.utilization_percent) == (1, 3)


def test_nvitop_exporter_is_read_in_gputui_units() -> None:
    exposition = read_samples(parse_text(nvitop_exposition()))
    assert exposition.source == NVITOP
    (gpu,) = exposition.gpus  # the MIG device "0:1" is not a GPU of its own
    assert (gpu.index, gpu.name) == (0, "NVIDIA A100-SXM4-40GB")
    assert gpu.uuid == "GPU-11111111-2222-3333-4444-555555555555"
    assert gpu.utilization_percent == 55
    assert (gpu.memory_used_bytes, gpu.memory_total_bytes) == (10240 * MIB, 40960 * MIB)
    assert (gpu.power_w, gpu.power_limit_w) == (250.5, 400)
    assert gpu.pcie_rx_bytes_per_s == 200 * MIB
    assert gpu.memory_clock_mhz == 1215
    assert gpu.fan_percent is None  # NaN: nvitop-exporter's "not available"


def test_an_exposition_of_no_gpu_exporter_says_which_it_reads() -> None:
    node_exporter = "# TYPE node_load1 gauge\nnode_load1 0.5\n"
    with pytest.raises(NotAnExporter, match="gputui serve, dcgm-exporter and nvitop-exporter"):
        read_samples(parse_text(node_exporter))
    with pytest.raises(NotAnExporter, match="gputui serve, dcgm-exporter and nvitop-exporter"):
        read_samples(parse_text("<html><body>login</body></html>"))  # a login page


def test_the_fleet_flags_belong_after_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--hosts", "node1", "snapshot"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "gputui snapshot: error: write the fleet's flags after the command: "
        "gputui snapshot --hosts ... (see 'gputui snapshot --help')\n"
    )


@pytest.mark.parametrize(("columns", "cut"), [(None, False), ("60", True)])
def test_piped_fleet_lines_are_whole_and_a_terminal_s_are_cut_to_it(
    columns: str | None, cut: bool
) -> None:
    """Piped, ``snapshot --hosts`` cut its lines at 80 columns that were not there: ``DOWN:
    no GPU series gputui can read here (it re…``."""
    body = b"# TYPE node_load1 gauge\nnode_load1 0.5\n"  # an exporter, but of no GPU
    with serving(lambda path: ("text/plain; version=0.0.4", body)) as port:
        env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
        env.update({"COLUMNS": columns} if columns else {})
        done = subprocess.run(
            [sys.executable, "-m", "gputui", "snapshot", "--hosts", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
    (line, *_) = done.stdout.splitlines()
    assert done.returncode == 1 and "DOWN: " in line
    assert (len(line) <= 60 and line.endswith("…")) if cut else (len(line) > 80), line


def test_gputui_s_ratios_come_back_as_the_percent_sent() -> None:
    """``0.715`` times 100 is ``71.49999999999999`` in floating point: the fleet's JSON
    showed such noise."""
    exposition = (
        "# TYPE gputui_gpu_utilization_ratio gauge\n"
        'gputui_gpu_utilization_ratio{gpu="0",uuid="GPU-1"} 0.715\n'
        "# TYPE gputui_gpu_fan_speed_ratio gauge\n"
        'gputui_gpu_fan_speed_ratio{gpu="0",uuid="GPU-1"} 0.573\n'
        "# TYPE gputui_gpu_up gauge\n"
        'gputui_gpu_up{gpu="0",uuid="GPU-1"} 1\n'
    )
    (gpu,) = read_samples(parse_text(exposition)).gpus
    assert (gpu.utilization_percent, gpu.fan_percent) == (71.5, 57.3)


@pytest.mark.parametrize(
    ("names", "source"),
    [
        (
            (
                "gputui_gpu_memory_clock_hertz",
                "gputui_gpu_memory_clock_max_hertz",
                "gputui_gpu_pcie_link_gen",
                "gputui_gpu_pcie_link_gen_max",
                "gputui_gpu_pcie_link_width_lanes",
                "gputui_gpu_pcie_link_width_max_lanes",
            ),
            "gputui",
        ),
        (
            (
                "DCGM_FI_DEV_MEM_CLOCK",
                None,
                "DCGM_FI_DEV_PCIE_LINK_GEN",
                "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
                "DCGM_FI_DEV_PCIE_LINK_WIDTH",
                "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH",
            ),
            DCGM,
        ),
    ],
)
def test_the_memory_clock_and_pcie_link_come_back_range_checked(
    names: tuple[str | None, ...], source: str
) -> None:
    """Whole generations and lanes read back as ``int``; half a generation, or a width no
    link has, reads n/a with a note."""
    hertz = 10**6 if source == "gputui" else 1
    sent = [2619 * hertz, 2619 * hertz, 4, 5, 16, 16]
    bad = [-1, 2619 * hertz, 2.5, 5, 16, 1024]

    def exposition(values: list[float]) -> str:
        lines = [
            f'{name}{{gpu="0",uuid="GPU-1",UUID="GPU-1"}} {value}'
            for name, value in zip(names, values, strict=True)
            if name is not None
        ]
        return "\n".join(lines) + "\n"

    read = read_samples(parse_text(exposition(sent)))
    (gpu,) = read.gpus
    assert read.source == source and read.notes == ()
    assert gpu.memory_clock_mhz == 2619
    assert gpu.memory_clock_max_mhz == (2619 if source == "gputui" else None)
    link = (gpu.pcie_link_gen, gpu.pcie_link_gen_max)
    assert (*link, gpu.pcie_link_width_lanes, gpu.pcie_link_width_max_lanes) == (4, 5, 16, 16)
    assert all(type(value) is int for value in link)

    refused = read_samples(parse_text(exposition(bad)))
    (gpu,) = refused.gpus
    assert (gpu.memory_clock_mhz, gpu.pcie_link_gen, gpu.pcie_link_width_max_lanes) == (
        None,
        None,
        None,
    )
    assert (gpu.pcie_link_gen_max, gpu.pcie_link_width_lanes) == (5, 16)
    assert len(refused.notes) == 3
    assert any("not a whole number from 0 to 16" in note for note in refused.notes)


def test_ecc_errors_and_a_pending_remap_come_back_as_health_problems() -> None:
    """The fleet shows them loudly, as the monitor does; 0.5 of a flag is refused."""
    exposition = (
        "# TYPE gputui_gpu_ecc_uncorrected_errors counter\n"
        'gputui_gpu_ecc_uncorrected_errors_total{gpu="0",uuid="GPU-0"} 3\n'
        'gputui_gpu_ecc_uncorrected_errors_total{gpu="1",uuid="GPU-1"} 0\n'
        "# TYPE gputui_gpu_remapped_rows_pending gauge\n"
        'gputui_gpu_remapped_rows_pending{gpu="0",uuid="GPU-0"} 1\n'
        'gputui_gpu_remapped_rows_pending{gpu="1",uuid="GPU-1"} 0.5\n'
    )
    read = read_samples(parse_text(exposition))
    first, second = read.gpus
    assert (first.ecc_uncorrected_errors, first.remapped_rows_pending) == (3, True)
    assert type(first.ecc_uncorrected_errors) is int
    assert health_problems(first) == [
        "3 uncorrected ECC errors",
        "row remap pending: reset the GPU",
    ]
    assert (second.ecc_uncorrected_errors, second.remapped_rows_pending) == (0, None)
    assert len(read.notes) == 1 and "not a whole number from 0 to 1" in read.notes[0]


def test_nvlink_counters_come_back_as_a_gpu_s_nvlink_throughput_without_a_rate() -> None:
    """A rate takes two scrapes, which one read of a host does not have; a GPU without the
    counters has no NVLink throughput at all."""
    exposition = (
        "# TYPE gputui_gpu_nvlink_rx_bytes counter\n"
        'gputui_gpu_nvlink_rx_bytes_total{gpu="0",uuid="GPU-0"} 1099511627776\n'
        "# TYPE gputui_gpu_nvlink_tx_bytes counter\n"
        'gputui_gpu_nvlink_tx_bytes_total{gpu="0",uuid="GPU-0"} 2048\n'
        'gputui_gpu_nvlink_tx_bytes_total{gpu="1",uuid="GPU-1"} 0.5\n'
        "# TYPE gputui_gpu_up gauge\n"
        'gputui_gpu_up{gpu="2",uuid="GPU-2"} 1\n'
    )
    first, second, third = read_samples(parse_text(exposition)).gpus
    assert first.nvlink_throughput == NvlinkThroughput(
        rx_bytes=2**40, tx_bytes=2048, rx_bytes_per_s=None, tx_bytes_per_s=None
    )
    assert second.nvlink_throughput is None  # half a byte: refused
    assert third.nvlink_throughput is None


def test_the_nvlink_links_down_come_back_from_a_gputui_exporter() -> None:
    """What ``gputui serve`` writes of a GPU with links 0 and 17 down reads back as they
    were, as does one whose links are all up; a GPU without the per-link series reads
    ``None``."""
    degraded = gpu_reading(0, nvlink_links_active=16, nvlink_links_down=(0, 17))
    whole = gpu_reading(1, nvlink_links_active=4, nvlink_links_down=())
    pcie = gpu_reading(2)
    nvml = NvmlReading(NvmlStatus(available=True), (degraded, whole, pcie), taken_at=1.0)
    families = metric_families(
        Latest(started_at=0.0, nvml=nvml), 1.0, interval_s=1.0, processes=False
    )
    read = read_samples(parse_text(generate_latest(_Registry(families)).decode()))
    assert read.notes == ()
    assert [gpu.nvlink_links_active for gpu in read.gpus] == [16, 4, None]
    assert [gpu.nvlink_links_down for gpu in read.gpus] == [(0, 17), (), None]


def test_an_nvlink_link_no_gpu_has_or_a_state_neither_up_nor_down_is_refused() -> None:
    exposition = "".join(
        f'gputui_gpu_nvlink_link_up{{gpu="0",uuid="GPU-0",link="{link}"}} {value}\n'
        for link, value in (("0", 0), ("1", 1), ("2", 0.5), ("64", 0), ("x", 0), ("-1", 0))
    )
    read = read_samples(parse_text(exposition))
    (gpu,) = read.gpus
    assert gpu.nvlink_links_down == (0,)
    assert len(read.notes) == 4
    assert "link 2 = 0.5: not 0 or 1" in read.notes[0]
    assert all("is not a whole number from 0 to 63" in note for note in read.notes[1:])


def test_links_down_read_back_from_a_file_are_range_checked_as_a_scrape_s() -> None:
    """A fleet recording's GPU is checked by ``in_range``: a link no GPU has reads n/a."""
    good = gpu_reading(0, nvlink_links_active=16, nvlink_links_down=(0, 17))
    assert in_range(good) == good
    bad = dataclasses.replace(good, nvlink_links_down=(0, 64))
    assert in_range(bad) == dataclasses.replace(good, nvlink_links_down=None)


def test_a_json_answer_says_to_give_the_metrics_address() -> None:
    """``--hosts node1:9922/snapshot`` read "not a Prometheus text exposition ()"."""
    body = b'{"cpu": {"utilization_percent": 3.0}, "nvml": null}'
    with serving(lambda path: ("application/json", body)) as port:
        main_code = main(["snapshot", "--json", "--hosts", f"http://127.0.0.1:{port}/snapshot"])
    assert main_code == 1


def test_a_json_answer_is_named_in_the_host_s_error(capsys: pytest.CaptureFixture[str]) -> None:
    body = b'{"cpu": {"utilization_percent": 3.0}, "nvml": null}'
    with serving(lambda path: ("application/json", body)) as port:
        main(["snapshot", "--json", "--hosts", f"http://127.0.0.1:{port}/snapshot"])
    (host,) = json.loads(capsys.readouterr().out)["hosts"]
    assert host["error"] == (
        "this answers JSON, not a Prometheus exposition: give the exporter's /metrics address"
    )


def test_an_exporter_that_has_not_sampled_yet_is_not_read_as_a_host_without_gpus() -> None:
    """A restarted ``gputui serve`` answers with its host's series before its first GPU
    sample: its GPUs are not yet known, not gone (the fleet keeps their last readings)."""
    latest = Latest(started_at=0.0)
    families = metric_families(latest, 1.0, interval_s=1.0, processes=True)
    before = generate_latest(_Registry(families))
    with pytest.raises(NotAnExporter) as refused:
        read_samples(parse_text(before.decode()))
    assert str(refused.value) == "gputui serve has just started: no GPU reading yet"
    no_gpu = (
        before.decode() + "# TYPE gputui_nvml_available gauge\ngputui_nvml_available 0.0\n"
    )  # a box without NVIDIA's driver, once sampled: a host without GPUs
    assert read_samples(parse_text(no_gpu)).gpus == ()


class _Registry:
    """The families one scrape of ``gputui serve`` serves, for prometheus_client to write."""

    def __init__(self, families: list[Any]) -> None:
        self._families = families

    def collect(self) -> Iterator[Any]:
        return iter(self._families)
