"""``gputui serve --print-rules``: checked by a real ``promtool check rules``, and each alert by
``promtool test rules`` on series that should fire it and series that should not."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from gputui.serve.metrics import THROTTLE_REASONS, VENDOR_THROTTLE_REASONS
from gputui.serve.rules import ALERT_RULES, SLOWDOWN_REASONS, AlertRule, rules_yaml
from gputui.telemetry.readings import Vendor
from tests.serve.served import gputui_serve, promtool


def host(number: int) -> dict[str, str]:
    """The scrape labels of the series of host ``gpu-NN``."""
    return {"job": "gputui", "instance": f"gpu-{number:02d}:9922"}


HOST = host(1)
"""The host the GPU series come from."""

GiB = 2**30


def gpu(index: int, uuid: str | None = None, **labels: str) -> dict[str, str]:
    """The labels of one NVIDIA GPU's series on ``HOST`` (an empty ``uuid``: not known)."""
    uuid = f"GPU-{index}" if uuid is None else uuid
    return {**HOST, "gpu": str(index), "uuid": uuid, "vendor": "nvidia", **labels}


def series(name: str, labels: dict[str, str]) -> str:
    """A series in promtool's notation: ``name{label="value",...}``."""
    return name + "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in labels.items()) + "}"


@dataclass(frozen=True)
class Fired:
    """One alert expected to fire."""

    labels: dict[str, str]
    """The series' labels (an empty one is no label)."""
    value: str = ""
    """How ``$value`` reads in its annotations (as Prometheus's template functions write it)."""


@dataclass(frozen=True)
class Case:
    """Input series for one alert, and what fires when."""

    series: list[tuple[str, dict[str, str], str]]
    """Each series' name, labels and values (promtool's ``1+0x9``), one a minute."""
    checks: list[tuple[str, list[Fired]]]
    """At each evaluation time, the alerts that fire (none: an empty list)."""


CASES = {
    "GputuiGpuDown": Case(
        [
            ("gputui_gpu_up", gpu(0), "1 1 0 0 0 0"),  # lost at 2m
            ("gputui_gpu_up", gpu(1, uuid=""), "0 0 0 0 0 0"),  # lost before it had a UUID
            ("gputui_gpu_up", gpu(2), "1 1 1 1 1 1"),
            ("gputui_gpu_up", gpu(3), "1 0 1 0 1 0"),  # never down a whole minute
        ],
        [("0m", []), ("2m", [Fired(gpu(1, uuid=""))]), ("5m", [Fired(gpu(0)), Fired(gpu(1, ""))])],
    ),
    "GputuiNvmlUnavailable": Case(
        [
            ("gputui_nvml_available", HOST, "1 1 0 0 0 0"),  # gone at 2m, with its GPUs
            ("gputui_gpu_info", gpu(0, name="NVIDIA H100 80GB HBM3"), "1 1 stale"),
            ("gputui_nvml_available", host(2), "0 0 0 0 0 0"),  # never had an NVIDIA GPU
            ("gputui_gpu_info", {**host(2), "gpu": "0", "vendor": "amd"}, "1 1 1 1 1 1"),
            ("gputui_nvml_available", host(3), "1 1 1 1 1 1"),
            ("gputui_gpu_info", {**host(3), "gpu": "0", "vendor": "nvidia"}, "1 1 1 1 1 1"),
        ],
        [("3m", []), ("5m", [Fired(HOST)])],
    ),
    "GputuiExporterDown": Case(
        [
            ("up", HOST, "1 1 1 0 0 0 0 0 0"),  # down from 3m
            ("gputui_sample_age_seconds", HOST, "0.5 0.5 0.5 stale"),
            ("up", {"job": "node", "instance": "gpu-01:9100"}, "0 0 0 0 0 0 0 0 0"),  # not gputui
            ("up", host(2), "1+0x8"),
            ("gputui_sample_age_seconds", host(2), "0.5+0x8"),
        ],
        [("4m", []), ("6m", [Fired(HOST)])],
    ),
    "GputuiReadingsStale": Case(
        [
            ("gputui_sample_age_seconds", HOST, "0 0 60 120 180 240 300 360"),  # stuck at 0m
            ("gputui_sample_age_seconds", host(2), "0.5 1+0x6"),
            ("gputui_sample_age_seconds", host(3), "130 1 130 1 130 1 130 1"),
        ],
        [("5m", []), ("7m", [Fired(HOST, "6m 0s")])],
    ),
    "GputuiEccUncorrectedErrors": Case(
        [
            ("gputui_gpu_ecc_uncorrected_errors_total", gpu(0), "0 0 2 2 2"),
            ("gputui_gpu_ecc_uncorrected_errors_total", gpu(1), "0 0 0 0 0"),
        ],
        [("1m", []), ("3m", [Fired(gpu(0), "2")])],
    ),
    "GputuiRowRemapPending": Case(
        [
            ("gputui_gpu_remapped_rows_pending", gpu(0), "0 0 1 1"),
            ("gputui_gpu_remapped_rows_pending", gpu(1), "0 0 0 0"),
        ],
        [("1m", []), ("2m", [Fired(gpu(0))])],
    ),
    "GputuiThrottled": Case(
        [
            ("gputui_gpu_throttled", gpu(0, reason="thermal"), "0 1+0x9"),  # from 1m
            ("gputui_gpu_throttled", gpu(0, reason="power_cap"), "1+0x10"),  # normal under load
            ("gputui_gpu_throttled", gpu(1, reason="hw_slowdown"), "1 1 1 1 0 1+0x5"),  # a break
            ("gputui_gpu_throttled", gpu(2, reason="hw_thermal"), "0+0x10"),
            ("gputui_gpu_throttled", gpu(0, vendor="amd", reason="thermal"), "1+0x10"),
            ("gputui_gpu_throttled", gpu(0, vendor="amd", reason="current_limit"), "1+0x10"),
            ("gputui_gpu_throttled", gpu(0, vendor="intel", reason="hw_slowdown"), "0 1+0x9"),
            ("gputui_gpu_throttled", gpu(0, vendor="intel", reason="vr_current_limit"), "1+0x10"),
            ("gputui_gpu_throttled", gpu(0, vendor="intel", reason="other"), "1+0x10"),
        ],
        [
            ("5m", [Fired(gpu(0, vendor="amd", reason="thermal"))]),
            (
                "7m",
                [
                    Fired(gpu(0, reason="thermal")),
                    Fired(gpu(0, vendor="amd", reason="thermal")),
                    Fired(gpu(0, vendor="intel", reason="hw_slowdown")),
                ],
            ),
        ],
    ),
    "GputuiIdleMemoryHeld": Case(
        [
            ("gputui_gpu_utilization_ratio", gpu(0), "0+0x80"),
            ("gputui_gpu_process_memory_bytes", gpu(0, pid="100", user="ada"), f"{GiB}+0x80"),
            ("gputui_gpu_process_memory_bytes", gpu(0, pid="101", user="bo"), f"{GiB}+0x80"),
            ("gputui_gpu_utilization_ratio", gpu(1), "0+0x80"),  # idle, nothing held
            ("gputui_gpu_utilization_ratio", gpu(2), "0.5+0x80"),  # busy
            ("gputui_gpu_process_memory_bytes", gpu(2, pid="200", user="ada"), f"{GiB}+0x80"),
            ("gputui_gpu_utilization_ratio", gpu(3), "0+0x30 0.02 0+0x48"),  # ran at 31m
            ("gputui_gpu_process_memory_bytes", gpu(3, pid="300", user="cy"), f"{GiB}+0x80"),
        ],
        [("59m", []), ("70m", [Fired(gpu(0), "2Gi")])],
    ),
}
"""Each alert's case: the series that fire it, and beside them series that must not."""

RULES = {rule.name: rule for rule in ALERT_RULES}

UUID_IF_KNOWN = "{{ if $labels.uuid }}, {{ $labels.uuid }}{{ end }}"


def render(template: str, labels: dict[str, str], value: str) -> str:
    """An annotation as Prometheus fills it in, for the few template forms the rules use."""
    uuid = labels.get("uuid", "")
    text = template.replace(UUID_IF_KNOWN, f", {uuid}" if uuid else "")
    text = re.sub(r"\{\{ \$value(?: \| \w+)? \}\}", value, text)
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda found: labels.get(found[1], ""), text)
    assert "{{" not in text, f"a template form render() does not know: {text}"
    return text


def expected(rule: AlertRule, fired: Fired) -> dict[str, object]:
    labels = {name: value for name, value in fired.labels.items() if value}
    annotations = {
        "summary": render(rule.summary, labels, fired.value),
        "description": render(rule.description, labels, fired.value),
    }
    return {"exp_labels": {**labels, "severity": rule.severity}, "exp_annotations": annotations}


def promtool_test(rules: Path, tests: list[dict[str, object]], tmp_path: Path) -> str:
    """Run ``promtool test rules`` on ``tests`` (JSON is YAML) against ``rules``; its output."""
    file = tmp_path / "tests.yml"
    file.write_text(json.dumps({"rule_files": [str(rules)], "tests": tests}, indent=1))
    done = subprocess.run(
        [promtool(), "test", "rules", str(file)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``gputui serve --print-rules`` printed, in a file."""
    file = tmp_path_factory.mktemp("rules") / "gputui.rules.yml"
    done = gputui_serve("--print-rules", lib_dir=Path("/nonexistent"))  # needs no driver
    assert (done.returncode, done.stderr) == (0, "")
    file.write_text(done.stdout)
    return file


def test_the_printed_rules_pass_promtool_check_rules(printed: Path) -> None:
    assert printed.read_text() == rules_yaml()
    checked = subprocess.run(
        [promtool(), "check", "rules", str(printed)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERT_RULES)} rules found" in checked.stdout


def test_every_alert_has_a_case() -> None:
    assert set(CASES) == set(RULES)


@pytest.mark.parametrize("name", list(CASES))
def test_the_alert_fires_on_its_series_and_not_on_the_others(
    name: str, printed: Path, tmp_path: Path
) -> None:
    rule, case = RULES[name], CASES[name]
    test = {
        "interval": "1m",
        "input_series": [
            {"series": series(metric, labels), "values": values}
            for metric, labels, values in case.series
        ],
        "alert_rule_test": [
            {
                "eval_time": at,
                "alertname": name,
                "exp_alerts": [expected(rule, one) for one in fired],
            }
            for at, fired in case.checks
        ],
    }
    assert "SUCCESS" in promtool_test(printed, [test], tmp_path)


def test_each_alert_says_where_and_what_to_do() -> None:
    """The host in every summary and description; the GPU too where the alert is a GPU's."""
    for rule in ALERT_RULES:
        about_a_gpu = any(
            "gpu" in one.labels for _, fired in CASES[rule.name].checks for one in fired
        )
        for text in (rule.summary, rule.description):
            assert "{{ $labels.instance }}" in text, rule.name
            assert ("{{ $labels.gpu }}" in text) == about_a_gpu, rule.name
        assert rule.severity in ("critical", "warning"), rule.name
        assert rule.description.endswith((".", ".)")), rule.name


def test_the_slowdowns_alerted_on_are_reasons_the_exporter_serves() -> None:
    assert set(SLOWDOWN_REASONS) < set(THROTTLE_REASONS)
    assert "power_cap" not in SLOWDOWN_REASONS and "idle" not in SLOWDOWN_REASONS
    for vendor in (Vendor.AMD, Vendor.INTEL):  # their heat and PROCHOT, not their limits
        alerted = set(SLOWDOWN_REASONS) & set(VENDOR_THROTTLE_REASONS[vendor])
        assert alerted == {"thermal", "hw_thermal", "hw_slowdown"}, vendor


def test_any_text_comes_back_from_the_yaml_as_written(tmp_path: Path) -> None:
    """Prometheus's own YAML reader gets every string back: nothing becomes a number, a
    boolean, a comment or a line of its own."""
    said = 'yes: no # not a comment "quoted" \\back\\slash\ttab\nline ü 1e3 \u2028 - [x] &a *a'
    rule = AlertRule("Tricky", "vector(1)", "0s", "warning", "no", said)
    rules = tmp_path / "tricky.yml"
    rules.write_text(rules_yaml([rule]))
    test = {
        "input_series": [],
        "alert_rule_test": [
            {
                "eval_time": "0m",
                "alertname": "Tricky",
                "exp_alerts": [
                    {
                        "exp_labels": {"severity": "warning"},
                        "exp_annotations": {"summary": "no", "description": said},
                    }
                ],
            }
        ],
    }
    assert "SUCCESS" in promtool_test(rules, [test], tmp_path)
