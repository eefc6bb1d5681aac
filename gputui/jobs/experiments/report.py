"""The report of an experiment, as text: what ``gputui experiment`` prints and what the
runner pane shows of it, and its progress as it arrives (:class:`ProgressLines`).
"""

from __future__ import annotations

from typing import TextIO

from gputui.format import (
    fmt_columns,
    fmt_count,
    fmt_counted,
    fmt_ms,
    fmt_number,
    fmt_share,
)
from gputui.jobs.events import (
    BatchSweepRow,
    DataProgress,
    DeviceFailed,
    Error,
    Event,
    ExperimentDevice,
    ExperimentStarted,
    Note,
    PipelineRow,
    Row,
    SyncStallRow,
)
from gputui.jobs.results import ExperimentResult, dataset_origin


class ProgressLines:
    """One line on standard error per device and per row, as they arrive.

    A run's :class:`Error` is left out: the handler writes it once, at the end.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._downloading = False

    def show(self, event: Event) -> None:
        """Write what ``event`` says, if it says anything worth a line."""
        if isinstance(event, Error):
            return
        if isinstance(event, DataProgress):
            line = None if self._downloading else "downloading CIFAR-10..."
            self._downloading = True
        else:
            line = experiment_progress_line(event)
        if line:
            self.stream.write(line + "\n")
            self.stream.flush()


def experiment_progress_line(event: Event) -> str | None:
    """One line for a progress display, or ``None`` for events that need none."""
    if isinstance(event, ExperimentStarted):
        return (
            f"{event.experiment}: {event.dataset} data ({event.images:,} images), "
            f"{fmt_counted(event.threads, 'thread')}, "
            f"devices {', '.join(map(str, event.devices))}"
        )
    if isinstance(event, ExperimentDevice):
        return f"{event.device}: {event.device_name}"
    if isinstance(event, BatchSweepRow):
        if event.error is not None or event.data_share is None:
            return f"{event.device}: batch {event.batch_size}: {event.error}"
        return (
            f"{event.device}: batch {event.batch_size}: {fmt_count(event.images_per_second)} "
            f"images/s, data {fmt_share(event.data_share)} of each step"
        )
    if isinstance(event, SyncStallRow):
        how = "every step" if event.mode == "every_step" else "once"
        if event.error is not None or event.ms_per_step is None:
            return f"{event.device}: loss read {how}: {event.error}"
        return f"{event.device}: loss read {how}: {fmt_ms(event.ms_per_step)} ms per step"
    if isinstance(event, PipelineRow):
        if event.error is not None or event.images_per_second is None:
            return f"{event.device}: {event.pipeline}: {event.error}"
        return f"{event.device}: {event.pipeline}: {fmt_count(event.images_per_second)} images/s"
    if isinstance(event, DeviceFailed):
        return f"{event.device}: error: {event.message}"
    if isinstance(event, Note):
        return f"note: {event.message}"
    if isinstance(event, Error) and event.kind not in {"config", "device"}:
        return f"error: {event.message}"
    return None


def render_result(result: ExperimentResult) -> str:
    """The result as text: what ran, one table row per measurement, the conclusion."""
    lines: list[str] = []
    started = result.started
    if started is not None:
        where = dataset_origin(started.dataset_source)
        lines.append(
            f"{result.experiment}: {started.dataset} data ({where}), {started.images:,} images; "
            f"up to {started.steps} timed steps per measurement after {started.warmup_steps} "
            f"warm-up, about {started.budget_s:g} s each; "
            f"{fmt_counted(started.threads, 'CPU thread')}"
        )
        if started.dataset_note:
            lines.append(f"note: {started.dataset_note}")
    for device in result.devices.values():
        if device.info is not None:
            lines.append(f"{device.device}: {device.info.device_name}")
            if device.info.data_phase:
                lines.append(f"  data = {device.info.data_phase}")
    lines.append("")
    lines += _table(result)
    failures = [d.failure for d in result.devices.values() if d.failure is not None]
    lines += [f"{failure.device}: error: {failure.message}" for failure in failures]
    if result.ended and result.status == "stopped":  # while it runs, nothing has stopped
        part = [d for d in result.devices.values() if result.device_status(d.device) == "stopped"]
        stopped = [f"{d.device} after {len(d.rows)} row{'s' * (len(d.rows) != 1)}" for d in part]
        stopped += [f"{device} not measured" for device in result.unreached]
        lines.append(f"stopped: {'; '.join(stopped) or 'before the first measurement'}")
    if result.conclusion:
        lines += ["", result.conclusion]
    return "\n".join(lines)


_TABLES = {
    "batch-sweep": (
        ("device", "batch", "steps", "images/s", "data ms", "compute ms", "data share"),
        None,
    ),
    "sync-stall": (
        ("device", "loss read", "batch", "steps", "ms/step", "images/s", "spread ms"),
        "spread ms: slowest round minus fastest (the noise)",
    ),
    "pipelines": (
        (
            "device",
            "pipeline",
            "batch",
            "steps",
            "ms/step",
            "images/s",
            "spread ms",
            "setup s",
            "workers",
        ),
        "spread ms: slowest round minus fastest (the noise); "
        "setup s: copying the dataset to the device before the first step",
    ),
}
"""Each experiment's table: its header (numbers from ``batch`` on) and its legend."""


def _table(result: ExperimentResult) -> list[str]:
    header, legend = _TABLES[result.experiment]
    rows = [_cells(row) for device in result.devices.values() for row in device.rows]
    lines = fmt_columns([list(header), *rows], right=range(header.index("batch"), len(header)))
    return [*lines, "", legend] if legend else lines


def _cells(row: Row) -> list[str]:
    """One table row: what was measured, then the figures (or why there are none)."""
    if isinstance(row, BatchSweepRow):
        what = [str(row.device), str(row.batch_size)]
        figures = [
            fmt_count(row.images_per_second),
            fmt_ms(row.data_ms),
            fmt_ms(row.compute_ms),
            fmt_share(row.data_share),
        ]
    elif isinstance(row, SyncStallRow):
        how = "every step" if row.mode == "every_step" else "once"
        what = [str(row.device), how, str(row.batch_size)]
        figures = [fmt_ms(row.ms_per_step), fmt_count(row.images_per_second), fmt_ms(row.spread_ms)]
    else:
        what = [str(row.device), row.pipeline, str(row.batch_size)]
        figures = [
            fmt_ms(row.ms_per_step),
            fmt_count(row.images_per_second),
            fmt_ms(row.spread_ms),
            fmt_number(row.setup_s, "{:.2f}"),
            str(row.workers),
        ]
    return [*what, row.error] if row.error is not None else [*what, str(row.steps), *figures]
