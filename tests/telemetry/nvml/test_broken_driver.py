"""What a broken driver answers, through the real nvidia-ml-py bindings against the stand-in
libnvidia-ml.so.1: strings that are not UTF-8, and numbers no GPU has.

A GPU's name that is not UTF-8 made the bindings' strict decode end every sample with a
traceback (``gputui snapshot`` failed, ``gputui serve`` lost every NVIDIA series); it reads
with each bad byte replaced (U+FFFD). A memory total of ``2**64 - 1`` bytes was shown as
16384 PiB; a value no GPU can take reads n/a, as a remote host's does.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gputui.serve.metrics import LatestCollector
from gputui.telemetry.bounds import in_range
from gputui.telemetry.nvml import NvmlSampler
from gputui.telemetry.polling import Latest
from gputui.telemetry.readings import NvmlReading
from tests.helpers import gputui
from tests.telemetry.nvml.conftest import FakeClock
from tests.ui.fakes import gpu_reading as fake_gpu_reading

NOT_UTF8_NAME = "NVIDIA \udcff\udcfe H100"
"""``b"NVIDIA \\xff\\xfe H100"`` as the environment carries it (surrogate escapes: the
stand-in answers the knob's bytes as they are)."""
SHOWN_NAME = "NVIDIA \ufffd\ufffd H100"
"""That name as gputui reads it: each byte that is not UTF-8 replaced."""
NOT_UTF8_DRIVER = "550.54.\udcff"
SHOWN_DRIVER = "550.54.\ufffd"
ABSURD_BYTES = 2**64 - 1
"""The most an NVML byte count (``unsigned long long``) can say: 16384 PiB."""


def metrics_of(reading: NvmlReading, clock: FakeClock) -> str:
    """What ``gputui serve``'s ``/metrics`` renders of ``reading``."""
    latest = Latest(clock(), nvml=reading)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LatestCollector(lambda: latest, interval_s=1.0, processes=True, clock=clock))
    return generate_latest(registry).decode()


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Each sample of series ``name`` in an exposition: its labels and value."""
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


# --- strings that are not UTF-8 -----------------------------------------------------------


def test_a_name_and_driver_version_that_are_not_utf8_read_with_replacement_characters(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_GPU_NAME", NOT_UTF8_NAME)
    fake_nvml_env.setenv("FAKE_NVML_DRIVER_VERSION", NOT_UTF8_DRIVER)
    reading = sampler.sample()
    assert reading.status.available and reading.status.driver_version == SHOWN_DRIVER
    assert [gpu.name for gpu in reading.gpus] == [SHOWN_NAME, SHOWN_NAME]
    assert all(gpu.utilization_percent is not None for gpu in reading.gpus)
    clock.now += 1.0
    assert [gpu.name for gpu in sampler.sample().gpus] == [SHOWN_NAME, SHOWN_NAME]

    text = metrics_of(reading, clock)
    info = samples(text, "gputui_gpu_info")
    assert [labels["name"] for labels, _ in info] == [SHOWN_NAME, SHOWN_NAME]
    assert [value for _, value in samples(text, "gputui_gpu_up")] == [1.0, 1.0]
    assert len(samples(text, "gputui_gpu_memory_total_bytes")) == 2


def test_a_bus_id_the_bindings_cannot_decode_reads_with_a_replacement_character(
    sampler: NvmlSampler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bindings decode a struct's string as it is read, not in the call: the bus id
    is read inside the call all the same."""
    import pynvml

    answer = pynvml.nvmlDeviceGetPciInfo_v3

    def bad_bus_id(handle: object) -> object:
        info = answer(handle)
        info.busId = b"00000000:18:00.\xff"
        return info

    monkeypatch.setattr(pynvml, "nvmlDeviceGetPciInfo_v3", bad_bus_id)
    reading = sampler.sample()
    assert [gpu.bus_id for gpu in reading.gpus] == ["00000000:18:00.\ufffd"] * 2
    assert [gpu.name for gpu in reading.gpus] == ["NVIDIA H100 80GB HBM3"] * 2


def test_gputui_snapshot_shows_a_name_that_is_not_utf8_and_exits_0(
    fake_nvml_dir: Path,
) -> None:
    knobs = {
        "FAKE_NVML_GPU_COUNT": "1",
        "FAKE_NVML_GPU_NAME": NOT_UTF8_NAME,
        "FAKE_NVML_DRIVER_VERSION": NOT_UTF8_DRIVER,
    }
    done = gputui("snapshot", lib_dir=fake_nvml_dir, knobs=knobs)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert f"GPU 0  {SHOWN_NAME}\n" in done.stdout
    assert SHOWN_DRIVER in done.stdout

    done = gputui("snapshot", "--json", lib_dir=fake_nvml_dir, knobs=knobs)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "NVIDIA \\ufffd\\ufffd H100" in done.stdout  # JSON escapes it
    snapshot = json.loads(done.stdout)
    assert [gpu["name"] for gpu in snapshot["gpus"]] == [SHOWN_NAME]
    assert snapshot["nvml"]["driver_version"] == SHOWN_DRIVER


# --- numbers no GPU has -------------------------------------------------------------------


def test_a_memory_total_no_gpu_has_reads_none_and_the_rest_is_kept(
    fake_nvml_env: pytest.MonkeyPatch, sampler: NvmlSampler, clock: FakeClock
) -> None:
    fake_nvml_env.setenv("FAKE_NVML_MEMORY_TOTAL", f"0:{ABSURD_BYTES}")
    absurd, fine = sampler.sample().gpus
    assert absurd.memory_total_bytes is None
    assert absurd.memory_used_bytes is not None and absurd.memory_used_bytes > 0
    assert absurd.utilization_percent is not None and absurd.name == fine.name
    assert fine.memory_total_bytes == 81559 * 1024 * 1024

    text = metrics_of(sampler.sample(), clock)
    totals = [value for _, value in samples(text, "gputui_gpu_memory_total_bytes")]
    assert totals == [81559 * 1024 * 1024]  # the absurd one is left out, as n/a


def test_gputui_snapshot_shows_n_a_for_a_memory_total_no_gpu_has(fake_nvml_dir: Path) -> None:
    knobs = {"FAKE_NVML_GPU_COUNT": "1", "FAKE_NVML_MEMORY_TOTAL": f"0:{ABSURD_BYTES}"}
    done = gputui("snapshot", lib_dir=fake_nvml_dir, knobs=knobs)
    assert done.returncode == 0, done.stderr
    gpu_part = done.stdout.split("GPU 0 ", 1)[1]
    assert re.search(r"\n    memory +\d+\.\d GiB / n/a ", gpu_part), gpu_part
    assert "PiB" not in done.stdout

    done = gputui("snapshot", "--json", lib_dir=fake_nvml_dir, knobs=knobs)
    assert done.returncode == 0, done.stderr
    (gpu,) = json.loads(done.stdout)["gpus"]
    assert gpu["memory_total_bytes"] is None and gpu["memory_used_bytes"] > 0


@pytest.mark.parametrize("total", [10**33, 10**400, 2.0**51, float("nan"), -1])
def test_in_range_reads_a_byte_count_no_gpu_has_as_none_even_past_a_float(
    total: float,
) -> None:
    """``10**400`` is compared as the int it is (``float()`` of it overflows)."""
    fine = fake_gpu_reading(0)
    checked = in_range(replace(fine, memory_total_bytes=total))  # type: ignore[arg-type]
    assert checked == replace(fine, memory_total_bytes=None)
    assert in_range(fine) is fine  # nothing refused: no copy
