"""What bf16 gained over fp32 in ``gputui bench``: one sentence from the measured speedup,
with a reason in the device's terms when it gained nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputui.commands import main
from gputui.device import Device
from gputui.jobs.bench.report import bench_json, render_table
from gputui.jobs.conclusions import BF16_GAIN_MIN, bf16_clause
from gputui.jobs.config import RunConfig
from gputui.jobs.events import EpochFinished, Finished, RunStarted
from gputui.jobs.results import RunRecord, bf16_gain
from tests.commands.test_bench import TINY

EPOCH_IMAGES = 50_000
FP32_EPOCH_S = {"cpu": 34.5, "cuda:0": 2.3, "mps": 9.0}
"""Seconds of an fp32 epoch per device: figures chosen for the verdict, not measured."""


def record(device: str, precision: str, faster: float = 1.0, cpu_bf16: bool = False) -> RunRecord:
    """A finished run whose epochs took ``1 / faster`` of the fp32 epoch's time.

    Typed, not recorded: what is under test is the verdict on a chosen speedup (0.8x, 1.02x),
    which no real run would hit exactly; a bf16 run on a CPU without fast bf16, on a GPU or
    on MPS cannot be recorded on this machine at all.
    """
    config = RunConfig(device=Device.parse(device), precision=precision, epochs=3)
    run = RunRecord(config)
    seconds = FP32_EPOCH_S[device] / faster
    math = "bf16 autocast, IEEE fp32 elsewhere" if precision == "bf16" else "IEEE fp32"
    run.absorb(_started(config, math, cpu_bf16))
    for epoch in (1, 2, 3):
        warmup = 1.5 if epoch == 1 else 1.0
        run.absorb(
            EpochFinished(
                epoch=epoch,
                seconds=seconds * warmup,
                images_per_second=EPOCH_IMAGES / (seconds * warmup),
                loss=2.0 - 0.1 * epoch,
                accuracy=0.3 + 0.05 * epoch,
                warmup=epoch == 1,
                eval_seconds=0.4,
                images=EPOCH_IMAGES,
            )
        )
    run.absorb(Finished(epochs_completed=3))
    return run


def _started(config: RunConfig, math: str, cpu_bf16: bool) -> RunStarted:
    return RunStarted(
        device=config.device,
        device_name="test device",
        torch_version="2.13.0",
        dataset="synthetic",
        dataset_source="generated",
        dataset_note=None,
        train_images=EPOCH_IMAGES,
        test_images=10_000,
        pipeline=config.pipeline,
        precision=config.precision,
        batch_size=config.batch_size,
        epochs=config.epochs,
        steps_per_epoch=EPOCH_IMAGES // config.batch_size,
        compile=False,
        channels_last=False,
        cpu_bf16=cpu_bf16,
        num_threads=15,
        num_workers=0,
        nice=10,
        pid=40_321,
        run_dir=None,
        math=math,
    )


@pytest.mark.parametrize(
    ("device", "reason"),
    [
        ("cuda:0", "too small for tensor cores to matter: each step is bound by kernel launches"),
        ("mps", "too small for the GPU's bf16 math to matter: each step is bound by kernel"),
        ("cpu", "this CPU has no AVX512-BF16 or AMX"),
    ],
)
def test_no_gain_says_why_in_the_device_s_terms(device: str, reason: str) -> None:
    same = bf16_clause(Device.parse(device), 1.03, cpu_fast_bf16=False)
    assert same.startswith(f"on {device}, bf16 trained no faster than fp32 (1.03x its speed): ")
    assert reason in same
    slower = bf16_clause(Device.parse(device), 0.7, cpu_fast_bf16=False)
    assert slower.startswith(f"on {device}, bf16 trained slower than fp32 (0.70x its speed): ")
    assert reason in slower


def test_a_gain_is_given_without_excuses() -> None:
    assert (
        bf16_clause(Device.parse("cuda:0"), 1.8) == "on cuda:0, bf16 trained 1.80x as fast as fp32"
    )
    assert bf16_clause(Device.parse("cpu"), BF16_GAIN_MIN, cpu_fast_bf16=True).endswith(
        "as fast as fp32"
    )


def test_a_cpu_with_bf16_units_that_gained_nothing_blames_the_model_s_size() -> None:
    text = bf16_clause(Device.parse("cpu"), 1.0, cpu_fast_bf16=True)
    assert "AVX512" not in text and "too small for bf16 math to repay autocast's casts" in text


def test_bench_compares_each_bf16_run_with_fp32_on_its_own_device() -> None:
    runs = [
        record("cpu", "fp32"),
        record("cpu", "bf16", faster=0.8),
        record("cuda:0", "fp32"),
        record("cuda:0", "bf16", faster=1.02),
    ]
    assert [bf16_gain(runs, run) for run in runs] == [
        None,
        pytest.approx(0.8),
        None,
        pytest.approx(1.02),
    ]
    table = render_table(runs)
    assert "resident pipeline, fp32 and bf16, batch" in table
    assert "math: cpu fp32: IEEE fp32; cpu bf16: bf16 autocast" in table
    assert table.splitlines()[3] == "devices: cpu, cuda:0: test device"
    assert table.splitlines()[5].split()[:2] == ["device", "precision"]
    assert "speedup: over cpu fp32" in table
    assert (
        "On cpu, bf16 trained slower than fp32 (0.80x its speed): this CPU has no AVX512-BF16 "
        "or AMX" in table
    )
    assert "On cuda:0, bf16 trained no faster than fp32 (1.02x its speed): this model's " in table
    gains = [run["bf16_over_fp32"] for run in bench_json(runs)["runs"]]
    assert gains[0] is None and gains[2] is None
    assert gains[3]["speedup"] == pytest.approx(1.02)
    assert gains[3]["verdict"].startswith("On cuda:0, bf16 trained no faster than fp32")


def test_without_an_fp32_run_on_its_device_bf16_is_not_judged() -> None:
    runs = [record("cpu", "fp32"), record("cuda:0", "bf16", faster=0.5)]
    assert bf16_gain(runs, runs[1]) is None
    table = render_table(runs)
    assert "bf16 trained" not in table and "precision" in table.splitlines()[5]


def test_bench_trains_each_precision_and_judges_bf16_by_what_it_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "--device", "cpu", *TINY, "--no-record", "--json"]
    code = main([*args, "--precision", "fp32", "--precision", "bf16"])
    out, err = capsys.readouterr()
    assert code == 0, err
    fp32, bf16 = json.loads(out)["runs"]
    assert (fp32["precision"], bf16["precision"]) == ("fp32", "bf16")
    assert fp32["bf16_over_fp32"] is None
    gain = bf16["bf16_over_fp32"]
    assert gain["speedup"] == pytest.approx(fp32["epoch_seconds"] / bf16["epoch_seconds"])
    cpu_fast = "no AVX512-BF16 or AMX" in " ".join(bf16["notes"])
    expected = bf16_clause(Device.parse("cpu"), gain["speedup"], cpu_fast_bf16=not cpu_fast)
    assert gain["verdict"] == expected[0].upper() + expected[1:] + "."
