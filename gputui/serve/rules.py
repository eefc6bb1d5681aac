"""Prometheus alerting rules over ``gputui serve``'s series: ``gputui serve --print-rules``.

The rules alert on what the monitor shows loudly. They are data here, written out as YAML
by a small writer of our own: every string is double-quoted (a JSON string is a YAML one),
so no value can turn into a number, a boolean or a second line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gputui.serve.metrics import (
    GPU_INFO,
    GPU_LABELS,
    GPU_PROCESS_MEMORY,
    GPU_THROTTLED,
    GPU_UP,
    NVML_AVAILABLE,
    SAMPLE_AGE,
)

SCRAPE_LABELS = ("job", "instance")
"""The labels Prometheus adds to every series it scrapes: which exporter it came from."""
GPU_KEY = ", ".join((*SCRAPE_LABELS, *GPU_LABELS))
"""The labels that name one GPU across a fleet, for ``by (...)`` and ``on (...)``."""

SLOWDOWN_REASONS = ("thermal", "hw_thermal", "hw_slowdown", "hw_power_brake")
"""The throttle reasons worth an alert: heat or the board holds the clocks down (a power cap
under load and an idle GPU's low clocks are normal). AMD's and Intel's temperature, VR-hot
and PROCHOT reasons come in these words; their current and reliability limits (AMD's TDC, EDC
and FIT, Intel's PL4 and VR TDC) are the chip's own limits under load, as a power cap is, and
``other`` says nothing to act on."""

STALE_AFTER_S = 120
"""Readings older than this are stale: two of the longest ``--interval`` (60 s)."""

_GPU = (
    "GPU {{ $labels.gpu }} ({{ $labels.vendor }}{{ if $labels.uuid }}, {{ $labels.uuid }}"
    "{{ end }}) on {{ $labels.instance }}"
)
"""How a description names the GPU an alert is about."""


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One Prometheus alerting rule."""

    name: str
    """The alert's name (``alertname``)."""
    expr: str
    """The PromQL expression; every series it returns is an alert."""
    for_: str
    """How long the expression must hold before the alert fires (``0s``: at once)."""
    severity: str
    """``critical`` (the GPU cannot be trusted with work) or ``warning``."""
    summary: str
    """One line: what is wrong, and where."""
    description: str
    """What it means and what to do, in a few sentences."""

    def as_dict(self) -> dict[str, object]:
        """The rule as Prometheus's rule file has it."""
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {"summary": self.summary, "description": self.description},
        }


ALERT_RULES = (
    AlertRule(
        "GputuiGpuDown",
        f"{GPU_UP} == 0",
        "1m",
        "critical",
        "GPU {{ $labels.gpu }} on {{ $labels.instance }} does not answer",
        f"{_GPU} has not answered for a minute: the driver lost it (it fell off the bus or "
        "needs a reset), cannot open it, or its calls hang (gputui_gpu_hung is 1). Run "
        "`gputui snapshot` or `nvidia-smi` on the host for the reason, and look for Xid "
        "errors in `dmesg`.",
    ),
    AlertRule(
        "GputuiNvmlUnavailable",
        f"{NVML_AVAILABLE} == 0 and on ({', '.join(SCRAPE_LABELS)}) "
        f'present_over_time({GPU_INFO}{{vendor="nvidia"}}[1d])',
        "2m",
        "critical",
        "NVML does not answer on {{ $labels.instance }}: none of its GPUs can be read",
        "NVML has not answered on {{ $labels.instance }} for 2 minutes, though the host had "
        "NVIDIA GPUs in the last day, so none of them is watched, and CUDA work there likely fails "
        "too: the driver is not loaded, or its library and kernel module differ after a "
        "driver update (reboot, or reload the driver). `gputui doctor` or `nvidia-smi` there "
        "says which.",
    ),
    AlertRule(
        "GputuiExporterDown",
        f"up == 0 and on ({', '.join(SCRAPE_LABELS)}) present_over_time({SAMPLE_AGE}[1d])",
        "2m",
        "warning",
        "gputui serve on {{ $labels.instance }} cannot be scraped",
        "Prometheus has not scraped gputui serve at {{ $labels.instance }} (job "
        "{{ $labels.job }}) for 2 minutes, so none of that host's GPUs is watched: the host "
        "is down or out of reach, or `gputui serve` stopped. (This alert ends a day after "
        "the exporter's last answer.)",
    ),
    AlertRule(
        "GputuiReadingsStale",
        f"{SAMPLE_AGE} > {STALE_AFTER_S}",
        "2m",
        "warning",
        "gputui serve on {{ $labels.instance }} serves old readings",
        "The readings gputui serve on {{ $labels.instance }} serves are "
        "{{ $value | humanizeDuration }} old: its sampling is stuck, on a driver call that "
        "does not return or a host too loaded to run it. Run `gputui snapshot` there, and "
        "look for Xid errors in `dmesg`.",
    ),
    AlertRule(
        "GputuiEccUncorrectedErrors",
        "gputui_gpu_ecc_uncorrected_errors_total > 0",
        "0s",
        "critical",
        "GPU {{ $labels.gpu }} on {{ $labels.instance }} has uncorrected ECC errors",
        f"{_GPU} has had {{{{ $value | humanize }}}} uncorrected ECC errors since its driver "
        "was loaded: work on it may have failed or computed wrong results. Drain it and reset "
        "it (`nvidia-smi -r`, or reboot); if the errors come back, have it checked.",
    ),
    AlertRule(
        "GputuiRowRemapPending",
        "gputui_gpu_remapped_rows_pending == 1",
        "0s",
        "warning",
        "GPU {{ $labels.gpu }} on {{ $labels.instance }} needs a reset for a row remap",
        f"{_GPU} has a memory row remap pending: the faulty row is replaced only when the GPU "
        "is reset. Drain it and reset it (`nvidia-smi -r`, or reboot) when its work allows.",
    ),
    AlertRule(
        "GputuiThrottled",
        f'{GPU_THROTTLED}{{reason=~"{"|".join(SLOWDOWN_REASONS)}"}} == 1',
        "5m",
        "warning",
        "GPU {{ $labels.gpu }} on {{ $labels.instance }} slowed down: {{ $labels.reason }}",
        f"{_GPU} has run with its clocks held down ({{{{ $labels.reason }}}}) for more than 5 "
        "minutes, slower than it can: thermal and hw_thermal mean it is too hot (airflow, "
        "fans, the room), hw_slowdown and hw_power_brake that the board asked it to slow "
        "down (power supply or temperature).",
    ),
    AlertRule(
        "GputuiIdleMemoryHeld",
        f"sum by ({GPU_KEY}) ({GPU_PROCESS_MEMORY}) > 0 "
        f"and on ({GPU_KEY}) gputui_gpu_utilization_ratio == 0",
        "1h",
        "warning",
        "GPU {{ $labels.gpu }} on {{ $labels.instance }} is idle but its memory is held",
        f"{_GPU} has run nothing for an hour while processes hold "
        "{{ $value | humanize1024 }}B of its memory, which keeps others off it: a notebook "
        "left open, or a job that hangs. `gputui` on the host shows whose processes they "
        "are. (Needs `gputui serve --processes`.)",
    ),
)
"""Every rule ``--print-rules`` writes, in one group."""

RULE_GROUP = "gputui"
"""The name of the rule group."""


def rules_yaml(rules: Sequence[AlertRule] = ALERT_RULES) -> str:
    """The rule file Prometheus's ``rule_files`` loads: one group, ``gputui``, of ``rules``."""
    content = {"groups": [{"name": RULE_GROUP, "rules": [rule.as_dict() for rule in rules]}]}
    header = (
        "# Alerting rules for gputui serve's series (gputui serve --print-rules).\n"
        "# Load them with rule_files in prometheus.yml; check them with promtool check rules.\n"
    )
    return header + "\n".join(_yaml(content)) + "\n"


_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _yaml(value: object, indent: str = "") -> list[str]:
    """``value`` (mappings with plain keys, lists, strings, numbers) as YAML block lines."""
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            assert isinstance(key, str) and _KEY.fullmatch(key), key
            if _nested(item):
                lines += [f"{indent}{key}:", *_yaml(item, indent + "  ")]
            else:
                lines.append(f"{indent}{key}: {_scalar(item)}")
        return lines
    if isinstance(value, list):
        lines = []
        for item in value:
            if _nested(item):
                first, *rest = _yaml(item, indent + "  ")
                lines += [f"{indent}- {first[len(indent) + 2 :]}", *rest]
            else:
                lines.append(f"{indent}- {_scalar(item)}")
        return lines
    return [indent + _scalar(value)]


def _nested(value: object) -> bool:
    """Whether ``value`` is written as a block of its own (an empty one is ``{}`` or ``[]``)."""
    return isinstance(value, dict | list) and bool(value)


def _scalar(value: object) -> str:
    """A string double-quoted with every non-ASCII character escaped (``json.dumps``): YAML
    reads it back the same; a number or a boolean as JSON writes it."""
    assert isinstance(value, str | int | float | bool | dict | list), value
    return json.dumps(value)
