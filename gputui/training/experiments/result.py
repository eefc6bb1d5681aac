"""An experiment's events gathered into a result: rows per device, the sentence, the JSON.

Torch-free, for the CLI and the runner pane alike: feed every event to
:meth:`ExperimentResult.absorb` as it arrives; the rows are there at once.

The JSON (``gputui experiment ... --json``, :meth:`ExperimentResult.to_json_dict`)::

    {
      "experiment": "batch-sweep",          # or "sync-stall", "pipelines"
      "status": "ok",                       # "ok", "stopped" or "error"
      "error": null,                        # or {"message", "kind", "detail"}
      "settings": {"devices", "batch_sizes", "steps", "warmup_steps", "budget_s",
                   "dataset", "dataset_source", "dataset_note", "images", "threads",
                   "workers", "torch_version"},   # null when it never started
      "device_results": [
        {"device": "cpu", "device_name": "...", "status": "ok",   # or "error"
         "error": null,                      # one line when the device failed
         "data_phase": "...",                # batch-sweep: what the data share measures
         "pinned": false,
         "rows": [ ... ],                    # the experiment's rows, fields below
         "summary": { ... }}                 # per experiment, below; null when incomplete
      ],
      "conclusion": "On cpu, ..."           # one sentence; null when it did not finish
    }

Rows (``error`` is null, or why the row has no figures, e.g. "out of memory"):

- batch-sweep: ``batch_size, steps, images_per_second, data_ms, compute_ms,
  data_share`` (0 to 1); summary ``{"best_batch_size", "best_images_per_second"}``.
- sync-stall: ``mode`` (``every_step`` or ``once``), ``batch_size, steps, rounds,
  ms_per_step, images_per_second, spread_ms``; summary ``{"every_step_ms",
  "once_ms", "cost_ms", "slowdown", "noise_ms", "verdict"}``, ``verdict`` one of
  ``slower``, ``no_difference``, ``faster``.
- pipelines: ``pipeline`` (``classic`` or ``resident``), ``batch_size, steps,
  ms_per_step, images_per_second, workers, pinned, setup_s``; summary
  ``{"resident_over_classic"}``.

Every row also carries its ``device``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from gputui.training.events import Error, Event, Finished, Note
from gputui.training.experiments.conclusions import pipelines_ratio, sync_stall_summary
from gputui.training.experiments.events import (
    BatchSweepRow,
    DeviceFailed,
    ExperimentConcluded,
    ExperimentDevice,
    ExperimentStarted,
    PipelineRow,
    Row,
    SyncStallRow,
)

SCHEMA_FIELDS_SKIPPED = ("pid",)
"""``ExperimentStarted`` fields left out of ``settings`` (they differ every run)."""


@dataclass
class DeviceResult:
    """One device's part of an experiment."""

    device: str
    """Canonical device string."""
    info: ExperimentDevice | None = None
    """The device's announcement (name, what the data phase is)."""
    rows: list[Row] = field(default_factory=list)
    """Rows in the order they were measured."""
    failure: DeviceFailed | None = None
    """Why the device stopped early, if it did."""

    def summary(self, experiment: str) -> dict[str, Any] | None:
        """The experiment's per-device figures (see the module doc); ``None`` if incomplete."""
        if experiment == "batch-sweep":
            ok = [r for r in self.rows if isinstance(r, BatchSweepRow) and r.images_per_second]
            if not ok:
                return None
            best = max(ok, key=lambda r: r.images_per_second or 0.0)
            return {
                "best_batch_size": best.batch_size,
                "best_images_per_second": best.images_per_second,
            }
        if experiment == "sync-stall":
            stall = sync_stall_summary([r for r in self.rows if isinstance(r, SyncStallRow)])
            return dataclasses.asdict(stall) if stall is not None else None
        ratio = pipelines_ratio([r for r in self.rows if isinstance(r, PipelineRow)])
        return {"resident_over_classic": ratio} if ratio is not None else None


@dataclass
class ExperimentResult:
    """Everything an experiment's stream said, gathered per device."""

    experiment: str
    """The experiment asked for."""
    started: ExperimentStarted | None = None
    """The start event: devices, data, steps."""
    devices: dict[str, DeviceResult] = field(default_factory=dict)
    """Each device's result, in the order they ran."""
    conclusion: str | None = None
    """The one-sentence result, once the experiment finished."""
    finished: Finished | None = None
    """The last event, when the run ended without error."""
    error: Error | None = None
    """The last event, when the run failed."""
    notes: list[str] = field(default_factory=list)
    """Anything else the child said, one line each."""

    def absorb(self, event: Event) -> Row | None:
        """Keep what the result needs from ``event``; returns it when it is a row."""
        if isinstance(event, BatchSweepRow | SyncStallRow | PipelineRow):
            self._device(event.device).rows.append(event)
            return event
        if isinstance(event, ExperimentStarted):
            self.started = event
        elif isinstance(event, ExperimentDevice):
            self._device(event.device).info = event
        elif isinstance(event, DeviceFailed):
            self._device(event.device).failure = event
        elif isinstance(event, ExperimentConcluded):
            self.conclusion = event.conclusion
        elif isinstance(event, Finished):
            self.finished = event
        elif isinstance(event, Error):
            self.error = event
        elif isinstance(event, Note):
            self.notes.append(event.message)
        return None

    @property
    def status(self) -> str:
        """``ok``, ``stopped`` or ``error`` (a failed device makes the whole run ``error``)."""
        if self.error is not None or any(d.failure for d in self.devices.values()):
            return "error"
        return "stopped" if self.finished is None or self.finished.stopped else "ok"

    def to_json_dict(self) -> dict[str, Any]:
        """The result as the documented JSON object (see the module doc)."""
        settings = None
        if self.started is not None:
            settings = {
                key: list(value) if isinstance(value, tuple) else value
                for key, value in dataclasses.asdict(self.started).items()
                if key not in {"experiment", *SCHEMA_FIELDS_SKIPPED}
            }
        error = None
        if self.error is not None:
            error = {
                "message": self.error.message,
                "kind": self.error.kind,
                "detail": self.error.detail,
            }
        return {
            "experiment": self.experiment,
            "status": self.status,
            "error": error,
            "settings": settings,
            "device_results": [
                {
                    "device": result.device,
                    "device_name": result.info.device_name if result.info else None,
                    "status": "error" if result.failure else "ok",
                    "error": result.failure.message if result.failure else None,
                    "data_phase": result.info.data_phase if result.info else None,
                    "pinned": result.info.pinned if result.info else False,
                    "rows": [dataclasses.asdict(row) for row in result.rows],
                    "summary": result.summary(self.experiment),
                }
                for result in self.devices.values()
            ],
            "conclusion": self.conclusion,
        }

    def _device(self, device: str) -> DeviceResult:
        if device not in self.devices:
            self.devices[device] = DeviceResult(device)
        return self.devices[device]
