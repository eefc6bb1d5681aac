"""The series made from readings: names, labels, units, and what an unknown reading becomes."""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gputui.serve.metrics import COMMAND_LABEL_MAX, GPU_SERIES, LatestCollector, metric_families
from gputui.telemetry.polling import Latest
from gputui.telemetry.readings import (
    CpuReading,
    DrmReading,
    GpuProcess,
    GpuState,
    MpsReading,
    NvlinkThroughput,
    NvmlReading,
    NvmlStatus,
    Workload,
)
from tests.ui.fakes import gpu_reading

NOW = 1000.0

CPU = CpuReading(
    utilization_percent=37.5,
    per_core_percent=(25.0, 50.0),
    logical_cores=2,
    physical_cores=1,
    model_name="Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz",
    load_average=(0.5, 0.25, 0.125),
    frequency_mhz=2300.0,
    frequency_max_mhz=None,
    memory_used_bytes=3 * 2**30,
    memory_total_bytes=16 * 2**30,
    swap_used_bytes=0,
    swap_total_bytes=0,
    self_cpu_percent=1.5,
    self_rss_bytes=40 * 2**20,
    taken_at=NOW - 0.5,
)

GPU = gpu_reading(
    0,
    uuid="GPU-6f1c2a9e-3b7d-4c5e-9a1f-2d8e7b6c5a40",
    utilization_percent=87.0,
    memory_utilization_percent=41.0,
    memory_used_bytes=60 * 2**30,
    temperature_c=66.0,
    power_w=512.25,
    sm_clock_mhz=1755.0,
    pcie_rx_bytes_per_s=3.5 * 2**30,
    pcie_tx_bytes_per_s=None,
    encoder_utilization_percent=12.0,
    decoder_utilization_percent=0.0,
    nvlink_links_active=18,
    nvlink_throughput=NvlinkThroughput(
        rx_bytes=3 * 2**40, tx_bytes=2**40, rx_bytes_per_s=5e9, tx_bytes_per_s=None
    ),
    processes=(
        GpuProcess(
            pid=4242,
            user="alice",
            command="python train.py " + "x" * 400,
            gpu_memory_bytes=2**30,
            sm_utilization_percent=87.0,
        ),
        GpuProcess(pid=77, user=None, command=None, gpu_memory_bytes=4096, kind="graphics"),
        GpuProcess(
            pid=78, user="bob", command="hidden", gpu_memory_bytes=None, sm_utilization_percent=0.0
        ),
    ),
    energy_j=123456.789,
    ecc_uncorrected_errors=2,
    remapped_rows_pending=True,
    throttle_reasons=("power cap", "HW slowdown"),
)

LOST = dataclasses.replace(
    GPU,
    index=1,
    uuid=None,
    state=GpuState.LOST,
    **{series.field: None for series in GPU_SERIES},
    throttle_reasons=None,
    processes=(),
)

NVML = NvmlReading(
    status=NvmlStatus(available=True, driver_version="550.54.15", cuda_driver_version="12.4"),
    gpus=(GPU, LOST),
    taken_at=NOW - 0.25,
)

MPS = MpsReading(supported_platform=False, message="Not a Mac.", taken_at=NOW - 0.75)

LATEST = Latest(
    started_at=NOW - 60, cpu=CPU, nvml=NVML, mps=MPS, drm=DrmReading(gpus=(), taken_at=NOW - 0.1)
)


def scrape(
    latest: Latest, *, now: float = NOW, processes: bool = True, jobs: bool = False
) -> dict[str, list[Sample]]:
    """The exposition prometheus_client writes, parsed back: each series' samples."""
    registry = CollectorRegistry()
    collector = LatestCollector(
        lambda: latest, interval_s=1.0, processes=processes, jobs=jobs, clock=lambda: now
    )
    registry.register(collector)
    found: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def values(samples: list[Sample], **labels: str) -> list[float]:
    return [s.value for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]


def test_every_gpu_series_carries_the_reading_in_base_units() -> None:
    found = scrape(LATEST)

    labels = {"gpu": "0", "uuid": GPU.uuid, "vendor": "nvidia"}
    expected = {
        "gputui_gpu_utilization_ratio": 0.87,
        "gputui_gpu_memory_utilization_ratio": 0.41,
        "gputui_gpu_memory_used_bytes": 60 * 2**30,
        "gputui_gpu_memory_total_bytes": 80 * 2**30,
        "gputui_gpu_temperature_celsius": 66.0,
        "gputui_gpu_power_watts": 512.25,
        "gputui_gpu_power_limit_watts": 700.0,
        "gputui_gpu_energy_joules_total": 123456.789,
        "gputui_gpu_sm_clock_hertz": 1755e6,
        "gputui_gpu_sm_clock_max_hertz": 1980e6,
        "gputui_gpu_memory_clock_hertz": 2619e6,
        "gputui_gpu_memory_clock_max_hertz": 2619e6,
        "gputui_gpu_pcie_rx_bytes_per_second": 3.5 * 2**30,
        "gputui_gpu_pcie_link_gen": 5.0,
        "gputui_gpu_pcie_link_gen_max": 5.0,
        "gputui_gpu_pcie_link_width_lanes": 16.0,
        "gputui_gpu_pcie_link_width_max_lanes": 16.0,
        "gputui_gpu_performance_state": 0.0,
        "gputui_gpu_ecc_uncorrected_errors_total": 2.0,
        "gputui_gpu_remapped_rows_pending": 1.0,
        "gputui_gpu_encoder_utilization_ratio": 0.12,
        "gputui_gpu_decoder_utilization_ratio": 0.0,
        "gputui_gpu_nvlink_links_active": 18.0,
        "gputui_gpu_nvlink_rx_bytes_total": 3 * 2**40,
        "gputui_gpu_nvlink_tx_bytes_total": 2**40,
    }
    for name, value in expected.items():
        (sample,) = [s for s in found[name] if s.labels.get("gpu") == "0"]
        assert sample.labels == labels, name
        assert sample.value == value, name
    assert set(expected) | {
        "gputui_gpu_fan_speed_ratio",
        "gputui_gpu_fan_rpm",
        "gputui_gpu_pcie_tx_bytes_per_second",
    } == {series.name for series in GPU_SERIES}


def test_a_reading_that_is_not_known_is_left_out_not_zero() -> None:
    found = scrape(LATEST)

    assert "gputui_gpu_fan_speed_ratio" not in found  # no GPU has a fan reading
    assert values(found["gputui_gpu_pcie_rx_bytes_per_second"], gpu="1") == []
    for series in GPU_SERIES:
        assert values(found.get(series.name, []), gpu="1") == [], series.name


def test_each_nvlink_link_reads_1_while_up_and_0_while_down() -> None:
    """GPU 0: 18 links, 0 and 17 down; GPU 2: 4 links, all up; GPU 3 has NVLink but which
    links are down is not known (a recording of an older gputui); the lost GPU 1 and a PCIe
    card (GPU 4) have none."""
    degraded = dataclasses.replace(GPU, nvlink_links_active=16, nvlink_links_down=(0, 17))
    whole = dataclasses.replace(GPU, index=2, nvlink_links_active=4, nvlink_links_down=())
    unsaid = dataclasses.replace(GPU, index=3)
    pcie = dataclasses.replace(GPU, index=4, nvlink_links_active=None, nvlink_throughput=None)
    nvml = dataclasses.replace(NVML, gpus=(degraded, LOST, whole, unsaid, pcie))
    found = scrape(dataclasses.replace(LATEST, nvml=nvml))["gputui_gpu_nvlink_link_up"]

    first = [s for s in found if s.labels["gpu"] == "0"]
    assert [s.labels for s in first] == [
        {"gpu": "0", "uuid": GPU.uuid, "vendor": "nvidia", "link": str(link)} for link in range(18)
    ]
    assert [s.labels["link"] for s in first if s.value == 0] == ["0", "17"]
    assert values(found, gpu="0").count(1.0) == 16
    assert values(found, gpu="2") == [1.0] * 4
    for index in ("1", "3", "4"):
        assert values(found, gpu=index) == []  # not known, or no NVLink: left out


def test_every_throttle_reason_reads_1_while_it_holds_the_clocks_and_0_otherwise() -> None:
    idle = dataclasses.replace(GPU, index=2, throttle_reasons=())
    unsaid = dataclasses.replace(GPU, index=3, throttle_reasons=None)
    new = dataclasses.replace(GPU, index=4, throttle_reasons=("Some new reason",))
    nvml = dataclasses.replace(NVML, gpus=(GPU, LOST, idle, unsaid, new))
    found = scrape(dataclasses.replace(LATEST, nvml=nvml))["gputui_gpu_throttled"]

    reasons = [
        "idle",
        "application_clocks",
        "power_cap",
        "hw_slowdown",
        "sync_boost",
        "thermal",
        "hw_thermal",
        "hw_power_brake",
        "display_clocks",
    ]
    first = [s for s in found if s.labels["gpu"] == "0"]
    assert [s.labels for s in first] == [
        {"gpu": "0", "uuid": GPU.uuid, "vendor": "nvidia", "reason": r} for r in reasons
    ]
    assert [s.labels["reason"] for s in first if s.value == 1] == ["power_cap", "hw_slowdown"]
    assert values(found, gpu="2") == [0.0] * len(reasons)
    assert values(found, gpu="1") == [] and values(found, gpu="3") == []  # not known: left out
    assert values(found, gpu="4", reason="some_new_reason") == [1.0]


def test_a_lost_gpu_says_so_and_keeps_its_identity() -> None:
    found = scrape(LATEST)

    assert values(found["gputui_gpu_up"], gpu="0", uuid=GPU.uuid) == [1.0]
    assert values(found["gputui_gpu_up"], gpu="1", uuid="") == [0.0]  # no UUID: empty label
    (info,) = [s for s in found["gputui_gpu_info"] if s.labels["gpu"] == "1"]
    assert info.labels == {
        "gpu": "1",
        "uuid": "",
        "vendor": "nvidia",
        "name": "NVIDIA H100 80GB HBM3",
        "bus_id": "00000000:17:00.0",
        "driver": "550.54.15",
    }
    assert info.value == 1.0


def test_a_stale_nvml_reading_marks_every_gpu_down_but_keeps_its_values() -> None:
    fresh = scrape(LATEST, now=NOW)
    stale = scrape(LATEST, now=NOW + 5)  # 5.25 s old at a 1 s interval: past 2 s

    assert values(fresh["gputui_gpu_up"], gpu="0") == [1.0]
    assert values(stale["gputui_gpu_up"], gpu="0") == [0.0]
    assert values(stale["gputui_gpu_power_watts"], gpu="0") == [512.25]
    assert stale["gputui_sample_age_seconds"][0].value == pytest.approx(5.75)  # MPS, the oldest


def test_processes_only_when_asked_and_only_with_their_memory() -> None:
    assert "gputui_gpu_process_memory_bytes" not in scrape(LATEST, processes=False)
    samples = scrape(LATEST)["gputui_gpu_process_memory_bytes"]

    assert [s.labels["pid"] for s in samples] == ["4242", "77"]  # 78's memory is not known
    first, second = samples
    assert first.value == 2**30
    assert first.labels["user"] == "alice"
    assert len(first.labels["command"]) == COMMAND_LABEL_MAX
    assert first.labels["command"].endswith("...")
    assert first.labels["kind"] == "compute"
    assert (first.labels["gpu"], first.labels["uuid"]) == ("0", GPU.uuid)
    assert (second.labels["user"], second.labels["command"], second.labels["kind"]) == (
        "",
        "",
        "graphics",
    )


def test_process_sm_utilization_is_a_ratio_left_out_where_unknown() -> None:
    assert "gputui_gpu_process_sm_utilization_ratio" not in scrape(LATEST, processes=False)
    samples = scrape(LATEST)["gputui_gpu_process_sm_utilization_ratio"]

    assert [(s.labels["pid"], s.value) for s in samples] == [("4242", 0.87), ("78", 0.0)]
    assert samples[1].labels["command"] == "hidden"  # its memory is unknown, its SM % is not


IN_POD = Workload(container="resnet", pod="resnet-0", pod_uid="0f1e", namespace="ml")
IN_JOB = Workload(slurm_job="1234", slurm_step="0", unit="slurmstepd.scope")
JOBS = dataclasses.replace(
    NVML,
    gpus=(
        gpu_reading(
            0,
            processes=(
                GpuProcess(1, "ada", "a", 2**30, sm_utilization_percent=40.0, workload=IN_POD),
                GpuProcess(2, "ada", "b", 2**20, sm_utilization_percent=None, workload=IN_POD),
                GpuProcess(3, "bob", "c", 2**31, sm_utilization_percent=90.0, workload=IN_JOB),
                GpuProcess(4, "cy", "d", 2**29, sm_utilization_percent=5.0),  # in no job
            ),
        ),
        gpu_reading(
            1,
            processes=(
                GpuProcess(1, "ada", "a", 2**30, sm_utilization_percent=30.0, workload=IN_POD),
                GpuProcess(
                    5,
                    "dee",
                    "e",
                    None,
                    sm_utilization_percent=12.5,
                    workload=Workload(container="web\x1b[2J", unit="docker-x.scope"),
                ),
            ),
        ),
    ),
)
"""A pod's processes on two GPUs, a Slurm job's, one in no job, and a container whose name
holds an escape sequence."""


def test_processes_carry_what_they_run_in_as_labels() -> None:
    latest = dataclasses.replace(LATEST, nvml=JOBS)
    samples = scrape(latest)["gputui_gpu_process_memory_bytes"]
    labels = {s.labels["pid"]: s.labels for s in samples}
    workload = ("container", "pod", "namespace", "slurm_job", "unit")
    assert {key: labels["1"][key] for key in workload} == {
        "container": "resnet",
        "pod": "resnet-0",
        "namespace": "ml",
        "slurm_job": "",
        "unit": "",
    }
    assert {key: labels["3"][key] for key in workload} == {
        **dict.fromkeys(workload, ""),
        "slurm_job": "1234",
        "unit": "slurmstepd.scope",
    }
    assert all(labels["4"][key] == "" for key in workload)


def test_jobs_only_when_asked_each_summed_over_its_processes_and_gpus() -> None:
    latest = dataclasses.replace(LATEST, nvml=JOBS)
    assert not {name for name in scrape(latest) if name.startswith("gputui_job_")}
    found = scrape(latest, processes=False, jobs=True)
    assert "gputui_gpu_process_memory_bytes" not in found  # no pid, no command line

    memory = {
        (s.labels["kind"], s.labels["name"]): s.value for s in found["gputui_job_gpu_memory_bytes"]
    }
    # the container's memory is not known: left out, not 0
    assert memory == {("pod", "ml/resnet-0"): 2 * 2**30 + 2**20, ("slurm_job", "1234"): 2**31}
    busy = {(s.labels["kind"], s.labels["name"]): s.value for s in found["gputui_job_sm_busy_gpus"]}
    assert busy == {
        ("pod", "ml/resnet-0"): 0.7,  # 40 % of GPU 0 and 30 % of GPU 1
        ("slurm_job", "1234"): 0.9,
        ("container", "web\\x1b[2J"): 0.125,  # printable, as every label's text
    }


def test_host_series_and_the_sample_age() -> None:
    found = scrape(LATEST)

    assert found["gputui_cpu_utilization_ratio"][0].value == 0.375
    assert found["gputui_memory_used_bytes"][0].value == 3 * 2**30
    assert found["gputui_memory_total_bytes"][0].value == 16 * 2**30
    assert found["gputui_nvml_available"][0].value == 1.0
    assert found["gputui_sample_age_seconds"][0].value == pytest.approx(0.75)


def test_before_the_first_readings_only_the_age_is_served() -> None:
    found = scrape(Latest(started_at=NOW - 3))

    assert list(found) == ["gputui_sample_age_seconds"]
    assert found["gputui_sample_age_seconds"][0].value == pytest.approx(3.0)


def test_nvml_that_cannot_start_serves_no_gpu_and_says_so() -> None:
    down = NvmlReading(
        status=NvmlStatus(available=False, error="No NVIDIA driver library was found."),
        gpus=(),
        taken_at=NOW,
    )
    found = scrape(dataclasses.replace(LATEST, nvml=down))

    assert found["gputui_nvml_available"][0].value == 0.0
    assert "gputui_gpu_up" not in found
    assert "gputui_cpu_utilization_ratio" in found


def test_the_series_can_be_read_back_into_readings() -> None:
    """What the cluster view will do: ``field = value * per / times`` for each GPU series."""
    found = scrape(LATEST)
    for series in GPU_SERIES:
        for sample in found.get(series.name, []):
            reading = GPU if sample.labels["gpu"] == "0" else LOST
            value = getattr(reading, series.field)
            if series.part is not None:
                value = getattr(value, series.part)
            assert sample.value * series.per / series.times == pytest.approx(
                float(value)  # a flag reads 1 or 0
            ), series.name


def test_the_families_are_made_fresh_for_each_scrape() -> None:
    first = metric_families(LATEST, NOW, interval_s=1.0, processes=True)
    second = metric_families(LATEST, NOW + 1, interval_s=1.0, processes=True)
    assert [f.name for f in first] == [f.name for f in second]
    assert first[-1].samples[0].value != second[-1].samples[0].value  # the age moved


# --- a driver whose calls hang ------------------------------------------------------------

HUNG_ERROR = "nvmlDeviceGetTemperature on GPU 0 has not returned for 45 s: ..."

HANG = NvmlReading(
    status=dataclasses.replace(
        NVML.status, hung_call="nvmlDeviceGetTemperature", hung_seconds=45.5
    ),
    gpus=(
        dataclasses.replace(
            GPU,
            state=GpuState.HUNG,
            error=HUNG_ERROR,
            **{series.field: None for series in GPU_SERIES},
            processes=None,
        ),
        LOST,
    ),
    taken_at=NOW,
)
"""What the sampler says while GPU 0's call hangs; GPU 1 was lost before."""


def label_sets(samples: list[Sample]) -> list[dict[str, str]]:
    return [dict(sample.labels) for sample in samples]


def test_every_gpu_has_a_hung_series_with_the_labels_of_its_up_series() -> None:
    found = scrape(LATEST)

    assert label_sets(found["gputui_gpu_hung"]) == label_sets(found["gputui_gpu_up"])
    assert [s.value for s in found["gputui_gpu_hung"]] == [0.0, 0.0]  # ok, and lost: not hung
    assert "gputui_nvml_hung_seconds" not in found


def test_a_hung_gpu_reads_down_and_hung_with_its_last_values_and_the_call() -> None:
    found = scrape(dataclasses.replace(LATEST, hang=HANG), now=NOW + 45)

    assert label_sets(found["gputui_gpu_hung"]) == label_sets(found["gputui_gpu_up"])
    assert values(found["gputui_gpu_hung"], gpu="0", uuid=GPU.uuid) == [1.0]
    assert values(found["gputui_gpu_up"], gpu="0") == [0.0]
    assert values(found["gputui_gpu_hung"], gpu="1") == [0.0]  # lost is not hung
    assert values(found["gputui_gpu_power_watts"], gpu="0") == [512.25]  # the last value
    (call,) = found["gputui_nvml_hung_seconds"]
    assert (call.labels, call.value) == ({"call": "nvmlDeviceGetTemperature"}, 45.5)
    assert found["gputui_nvml_available"][0].value == 1.0


def test_gpus_hung_before_their_first_reading_are_listed_by_identity() -> None:
    found = scrape(dataclasses.replace(LATEST, nvml=None, hang=HANG))

    assert values(found["gputui_gpu_hung"], gpu="0") == [1.0]
    assert values(found["gputui_gpu_up"], gpu="0") == [0.0]
    assert [s.labels["gpu"] for s in found["gputui_gpu_info"]] == ["0", "1"]
    for series in GPU_SERIES:
        assert series.name not in found, series.name  # nothing was ever read
    assert found["gputui_nvml_available"][0].value == 1.0


def test_nvml_whose_start_hangs_is_unavailable_and_names_the_call() -> None:
    starting = NvmlReading(
        status=NvmlStatus(
            available=False,
            error="nvmlInit has not returned for 3 s: ...",
            hung_call="nvmlInit",
            hung_seconds=3.25,
        ),
        gpus=(),
        taken_at=NOW,
    )
    found = scrape(dataclasses.replace(LATEST, nvml=None, hang=starting))

    assert found["gputui_nvml_available"][0].value == 0.0
    assert "gputui_gpu_up" not in found and "gputui_gpu_hung" not in found
    (call,) = found["gputui_nvml_hung_seconds"]
    assert (call.labels, call.value) == ({"call": "nvmlInit"}, 3.25)


def test_name_filters_select_the_named_series_and_describe_names_every_family() -> None:
    """``/metrics?name[]=...`` (prometheus_client's restricted registry) finds a family only
    through ``describe``: every family a scrape yields, a hang's and the processes' too."""
    collector = LatestCollector(
        lambda: dataclasses.replace(LATEST, hang=HANG), interval_s=1.0, processes=True
    )
    described = {family.name for family in collector.describe()}
    assert {family.name for family in collector.collect()} <= described
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    names = ["gputui_gpu_up", "gputui_gpu_energy_joules_total", "gputui_cpu_utilization_ratio"]
    text = generate_latest(registry.restricted_registry(names)).decode()
    shown = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert shown == set(names)


def test_values_carry_no_float_noise() -> None:
    """A percent made a ratio reads as written: 71.5 % is 0.715, not 0.7149999999999999."""
    gpu = dataclasses.replace(GPU, utilization_percent=71.5, fan_percent=57.3)
    cpu = dataclasses.replace(CPU, utilization_percent=55.00000000000001)
    latest = dataclasses.replace(LATEST, cpu=cpu, nvml=dataclasses.replace(NVML, gpus=(gpu,)))
    registry = CollectorRegistry()
    registry.register(LatestCollector(lambda: latest, interval_s=1.0, processes=False))
    text = generate_latest(registry).decode()

    assert 'gputui_gpu_utilization_ratio{gpu="0",' in text
    assert "} 0.715\n" in text and "} 0.573\n" in text
    assert "gputui_cpu_utilization_ratio 0.55\n" in text
    assert "99999" not in text and "00000000001" not in text
