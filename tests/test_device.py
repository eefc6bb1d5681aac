"""The device a user names: one reader of its text, one spelling, and its JSON form."""

from __future__ import annotations

import json

import pytest

from gputui.device import CPU, SPELLINGS, Device, DeviceError, parsed_fields, plain
from gputui.jobs.config import ConfigError, DeviceQuery, ExperimentConfig, RunConfig
from gputui.jobs.events import DeviceOption, DevicesListed, Memory, RunStarted, parse_event


@pytest.mark.parametrize(
    ("text", "kind", "index", "spelled"),
    [
        ("cpu", "cpu", None, "cpu"),
        ("cpu:0", "cpu", None, "cpu"),  # torch takes it; a tensor made there is on cpu
        (" cuda ", "cuda", None, "cuda"),
        ("cuda:3", "cuda", 3, "cuda:3"),
        ("cuda:03", "cuda", 3, "cuda:3"),
        ("mps", "mps", None, "mps"),
        ("mps:0", "mps", None, "mps"),  # torch names a tensor's MPS device so
        ("xpu", "xpu", None, "xpu"),
        ("xpu:1", "xpu", 1, "xpu:1"),
    ],
)
def test_a_device_reads_as_torch_writes_it_and_is_spelled_one_way(
    text: str, kind: str, index: int | None, spelled: str
) -> None:
    device = Device.parse(text)
    assert (device.kind, device.index) == (kind, index)
    assert str(device) == spelled
    assert Device.parse(str(device)) == device
    assert f"{device:>8}" == spelled.rjust(8)


def test_a_plain_gpu_is_the_first_once_indexed() -> None:
    assert Device.parse("cuda").indexed() == Device("cuda", 0)
    assert str(Device.parse("xpu").indexed()) == "xpu:0"
    assert Device.parse("cuda:2").indexed() == Device("cuda", 2)
    assert Device.parse("mps").indexed() == Device("mps")
    assert CPU.indexed() is CPU
    assert Device("cuda") != Device("cuda", 0)  # a distributed job's cuda is each rank's own


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu0", f"'gpu0' is not a device: use {SPELLINGS}; did you mean cuda:0?"),
        ("cuda1", f"'cuda1' is not a device: use {SPELLINGS}; did you mean cuda:1?"),
        ("CUDA", f"'CUDA' is not a device: use {SPELLINGS}; did you mean cuda?"),
        (
            "gpu",
            f"'gpu' is not a device: use {SPELLINGS}; an NVIDIA GPU (or an AMD one under "
            "ROCm) is cuda",
        ),
        (
            "amd",
            f"'amd' is not a device: use {SPELLINGS}; an NVIDIA GPU (or an AMD one under "
            "ROCm) is cuda",
        ),
        ("intel", f"'intel' is not a device: use {SPELLINGS}; an Intel GPU is xpu"),
        ("cuda:-1", f"'cuda:-1' is not a device: use {SPELLINGS}"),
        ("cuda:x", f"'cuda:x' is not a device: use {SPELLINGS}"),
        ("cpu:1", "cpu:1: the CPU is one device, cpu (or cpu:0)"),
        ("mps:1", "mps:1: a Mac has one GPU, mps (or mps:0)"),
        ("", f"the device is empty: use {SPELLINGS}"),
        ("  ", f"the device is empty: use {SPELLINGS}"),
        ("cuda\n0", f"'cuda\\n0' is not a device: use {SPELLINGS}"),
    ],
)
def test_a_device_that_is_not_one_is_refused_in_one_line(text: str, message: str) -> None:
    with pytest.raises(DeviceError) as caught:
        Device.parse(text)
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_the_spellings_name_every_kind() -> None:
    assert SPELLINGS == "cpu, cuda, cuda:N, mps, xpu or xpu:N"


def test_a_device_made_by_hand_keeps_the_rules_parse_keeps() -> None:
    """No value can be made whose text would not read back."""
    with pytest.raises(DeviceError):
        Device("cpu", 1)
    with pytest.raises(DeviceError):
        Device("cuda", -1)
    with pytest.raises(DeviceError):
        Device("gpu")  # type: ignore[arg-type]


def test_a_device_travels_in_a_config_as_its_text_and_comes_back_whole() -> None:
    config = RunConfig(device=Device("cuda", 1), epochs=3)
    wire = json.loads(config.to_json())
    assert wire["device"] == "cuda:1"
    assert RunConfig.from_json(config.to_json()) == config
    experiment = ExperimentConfig(experiment="sync-stall", devices=(CPU, Device("xpu")))
    assert json.loads(experiment.to_json())["devices"] == ["cpu", "xpu"]
    assert ExperimentConfig.from_json(experiment.to_json()) == experiment
    query = DeviceQuery(check=(Device("mps"),))
    assert DeviceQuery.from_json(query.to_json()).check == (Device("mps"),)


def test_a_config_naming_a_device_that_is_not_one_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^run config: 'gpu0' is not a device: use cpu"):
        RunConfig.from_json('{"device": "gpu0"}')
    with pytest.raises(ConfigError, match=r"^GPUTUI_RUNNER_DEFAULTS: 'cuda0' is not a device"):
        RunConfig().changed_by_json('{"device": "cuda0"}', "GPUTUI_RUNNER_DEFAULTS")
    assert RunConfig().changed_by_json('{"device": "cuda"}', "x").device == Device("cuda")


def test_a_device_travels_in_an_event_as_its_text() -> None:
    listed = DevicesListed(
        devices=(DeviceOption(CPU, True, "a CPU"), DeviceOption(Device("cuda"), False, "x", "no")),
        torch_version="2.13.0",
        chosen=(CPU,),
        torch_build="cpu",
    )
    line = listed.to_json()
    assert json.loads(line)["devices"][1]["name"] == "cuda"
    assert json.loads(line)["chosen"] == ["cpu"]
    assert parse_event(line) == listed
    memory = Memory(Device("xpu", 0), 1, 2, 3, None, 4, "epoch")
    assert json.loads(memory.to_json())["device"] == "xpu:0"
    assert parse_event(memory.to_json()) == memory


def test_an_event_naming_a_device_that_is_not_one_is_skipped() -> None:
    line = json.loads(Memory(CPU, None, None, None, None, None).to_json())
    for bad in ("gpu0", None, 7):
        assert parse_event(json.dumps({**line, "device": bad})) is None


def test_plain_and_parsed_fields_are_each_other_s_inverse() -> None:
    started_fields = {"device": "cuda:0", "gpu_uuid": None, "dataset": "synthetic"}
    parsed = parsed_fields(RunStarted, started_fields)
    assert parsed == {"device": Device("cuda", 0), "gpu_uuid": None, "dataset": "synthetic"}
    assert plain(parsed) == started_fields
    assert plain({"devices": (CPU, Device("mps"))}) == {"devices": ("cpu", "mps")}
