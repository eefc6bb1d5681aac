"""The run folder: every event as JSONL, the epochs as CSV, TensorBoard when installed.

A run folder is ``<runs dir>/<YYYYmmdd-HHMMSS>-<device>``, the runs dir being
``$XDG_STATE_HOME/gputui/runs`` (``~/.local/state/gputui/runs``) unless the
config names another. Only host-side values from events are written, so
recording never synchronizes a device; TensorBoard gets epoch-level scalars
plus the loss that progress reads already fetched.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import shutil
import time
from pathlib import Path
from typing import IO, Any

from gputui.jobs.events import EpochFinished, Event, Progress, RunStarted
from gputui.jobs.folders import EVENTS_FILE, make_folder, user_folder

EPOCHS_FILE = "epochs.csv"
TENSORBOARD_DIR = "tensorboard"
EPOCH_COLUMNS = (
    "epoch",
    "seconds",
    "images_per_second",
    "loss",
    "accuracy",
    "warmup",
    "eval_seconds",
    "images",
)


def default_runs_dir() -> Path:
    """``$XDG_STATE_HOME/gputui/runs``, or ``~/.local/state/gputui/runs``."""
    return user_folder("XDG_STATE_HOME", ".local/state") / "runs"


class RunRecorder:
    """Writes one run's folder as its events pass by."""

    def __init__(self, run_dir: Path) -> None:
        """Open the files of ``run_dir`` (which must exist), TensorBoard's when installed."""
        self.run_dir = run_dir
        self._events: IO[str] = open(run_dir / EVENTS_FILE, "w", encoding="utf-8")  # noqa: SIM115
        self._epochs_file: IO[str] = open(  # noqa: SIM115
            run_dir / EPOCHS_FILE, "w", encoding="utf-8", newline=""
        )
        self._epochs = csv.writer(self._epochs_file)
        self._epochs.writerow(EPOCH_COLUMNS)
        self._epochs_file.flush()  # a run killed before its first epoch leaves a header
        self._steps_per_epoch = 0
        self._writer: Any = _summary_writer(run_dir / TENSORBOARD_DIR)

    @classmethod
    def create(cls, runs_dir: Path | None, device: str) -> RunRecorder:
        """Make a fresh run folder under ``runs_dir`` (default: :func:`default_runs_dir`).

        Raises:
            OSError: when the folder cannot be made.
        """
        parent = runs_dir if runs_dir is not None else default_runs_dir()
        make_folder(parent)  # never a missing home folder
        stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{device.replace(':', '')}"
        for attempt in range(1, 1000):
            run_dir = parent / (stem if attempt == 1 else f"{stem}-{attempt}")
            try:
                run_dir.mkdir()
            except FileExistsError:
                continue
            try:
                return cls(run_dir)
            except OSError:  # a full disk: no half-made folder is left
                shutil.rmtree(run_dir, ignore_errors=True)
                raise
        raise FileExistsError(f"too many runs named {stem} in {parent}")

    def record(self, event: Event) -> None:
        """Write ``event``: always to the JSONL, epochs to the CSV and TensorBoard."""
        self._events.write(event.to_json() + "\n")
        self._events.flush()
        if isinstance(event, RunStarted):
            self._steps_per_epoch = event.steps_per_epoch
            if self._writer is not None:
                self._writer.add_text("run", f"`{event.to_json()}`")
        elif isinstance(event, Progress) and self._writer is not None:
            step = (event.epoch - 1) * self._steps_per_epoch + event.step
            self._writer.add_scalar("Train/Loss", event.loss, step)
        elif isinstance(event, EpochFinished):
            self._epochs.writerow([getattr(event, name) for name in EPOCH_COLUMNS])
            self._epochs_file.flush()
            if self._writer is not None:
                self._writer.add_scalar("Epoch/Loss", event.loss, event.epoch)
                if event.accuracy is not None:
                    self._writer.add_scalar("Epoch/Accuracy", event.accuracy, event.epoch)
                self._writer.add_scalar("Epoch/Seconds", event.seconds, event.epoch)
                self._writer.add_scalar(
                    "Epoch/ImagesPerSecond", event.images_per_second, event.epoch
                )
                self._writer.flush()

    def close(self) -> None:
        """Flush and close every file.

        Raises:
            OSError: when what was left to write cannot be (a full disk).
        """
        if self._writer is not None:
            self._writer.close()
        self._events.close()
        self._epochs_file.close()

    def discard(self) -> None:
        """Close every file, whatever is left unwritten, and remove the folder: a record
        that could not be written whole (a full disk) is not left half-written."""
        with contextlib.suppress(Exception):  # a failed flush, or TensorBoard's own error
            self.close()
        for file in (self._events, self._epochs_file):
            with contextlib.suppress(OSError):
                file.close()  # closed even when its flush failed above
        shutil.rmtree(self.run_dir, ignore_errors=True)


def _summary_writer(path: Path) -> Any:
    if importlib.util.find_spec("tensorboard") is None:  # torch's SummaryWriter needs it
        return None
    try:
        # only where tensorboard is installed: the package is optional
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # a broken tensorboard install: skipped, as when it is absent
        return None
    return SummaryWriter(log_dir=str(path))
