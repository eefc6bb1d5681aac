"""Recordings made on this machine: :class:`Recorder` writes frames on a thread of its own
(``gputui record`` and the monitor's ``--record`` alike), and :func:`record` runs ``gputui
record`` from start to stop.

This machine's readings come from the one sampling engine
(:class:`~gputui.telemetry.polling.Poller`), a frame each beat once every source has answered,
its text as it came (it is made printable only where it is shown); a fleet's from the fleet
view's own source (:class:`FleetSampled`), read once a beat. ``gputui record`` stops after
``--duration``, on SIGTERM or Ctrl+C, or at the first write that fails (a full disk), keeping
what was written.
"""

from __future__ import annotations

import contextlib
import math
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, TextIO

from gputui import __version__
from gputui.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, Stop, stop_on_signals
from gputui.fleet.hosts import NOT_READ, FleetSource
from gputui.fleet.report import fleet_as_dict
from gputui.format import fmt_bytes, fmt_counted, one_line
from gputui.recording.frames import (
    DECIMALS,
    FLEET,
    FORMAT_VERSION,
    FULL_EVERY,
    HOST,
    Header,
    rounded,
)
from gputui.recording.render import fmt_offset
from gputui.recording.runs import RunnerEntry, entry_as_dict
from gputui.recording.writer import RecordingWriter, cannot_write
from gputui.telemetry.polling import SOURCES, Beat, Latest, Poller, Samplers
from gputui.telemetry.readings import Snapshot
from gputui.telemetry.selection import GpuSelection
from gputui.telemetry.snapshot import AGES, snapshot_as_dict, source_ages


class FleetSampled:
    """A fleet, read by the fleet view's own source: each frame holds every host as
    ``gputui snapshot --hosts --json`` writes it (its age as of the frame), and the source's
    own error (Prometheus not answering)."""

    def __init__(
        self, fleet: FleetSource, source: str, what: str, clock: Callable[[], float]
    ) -> None:
        """Record what ``fleet`` (not started yet) reads: ``source`` (``exporters`` or
        ``prometheus``) for the header, ``what`` (the hosts, in words) for the line that says
        what is recorded, ``clock`` the one its readings' ``taken_at`` are on."""
        self.fleet = fleet
        self.source: str | None = source
        self.what = what
        self._clock = clock
        self._generation = 0

    def new(self) -> tuple[float, dict[str, Any]] | None:
        generation = self.fleet.generation
        if generation in (0, self._generation):  # nothing read yet, or nothing new
            return None
        now = self._clock()
        latest = self.fleet.latest()
        if any(host.error == NOT_READ and host.taken_at is None for host in latest):
            return None  # the first round is not over: no host is down for want of a turn
        self._generation = generation
        hosts = [
            host if host.error is None else replace(host, error=one_line(host.error))
            for host in latest
        ]
        data = fleet_as_dict(hosts, now)
        error = self.fleet.error
        data["error"] = None if error is None else one_line(error)
        return now, rounded(data)


WAKE_S = 0.5
"""How often ``gputui record``'s main thread looks up (a failed write, the duration's end)."""


def record(
    path: Path,
    *,
    interval_s: float,
    codec: str,
    duration_s: float | None = None,
    max_size: int | None = None,
    keep: int | None = None,
    samplers: Samplers | None = None,
    sampled: FleetSampled | None = None,
    stop: Stop | None = None,
    announce: Callable[[str], None] = print,
    err: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Record this machine's readings (or a fleet's, ``sampled``) into ``path``, a new file,
    until ``duration_s`` ends or ``stop`` is called (SIGTERM and SIGINT call it too).

    ``codec``, ``max_size`` and ``keep`` are :class:`Recorder`'s; ``samplers`` default to the
    real ones (secrets redacted), on ``clock``. ``announce`` writes the line saying where it
    records and the last one saying what; ``err`` the line saying why it stopped early.

    Returns:
        0 when the duration ended or after SIGTERM, 130 after Ctrl+C, 1 when a write failed.

    Raises:
        OSError: ``path`` cannot be made (it exists, its folder is gone...).
    """
    kind, source, what = (
        (HOST, None, "this machine") if sampled is None else (FLEET, sampled.source, sampled.what)
    )
    stop = stop if stop is not None else Stop()
    recorder = Recorder(
        path,
        interval_s=interval_s,
        codec=codec,
        max_size=max_size,
        keep=keep,
        kind=kind,
        source=source,
        clock=clock,
    )
    started = clock()
    end = None if duration_s is None else started + duration_s
    restore = stop_on_signals(stop)
    poller = None
    try:
        if sampled is None:
            if samplers is None:
                poller = Poller.real(interval_s, name="gputui-record")
            else:
                poller = Poller(samplers, interval_s, clock=clock, name="gputui-record")
            recorder.hang = poller.latest
            poller.subscribe(recorder.take)
            poller.start()
        else:
            sampled.fleet.start()
        until = "" if duration_s is None else f" for {_seconds(duration_s)}"
        announce(
            f"gputui record: recording {what} every {interval_s:g} s{until} into "
            f"{path} ({codec}; Ctrl+C stops)"
        )
        beat = interval_s if sampled is not None else WAKE_S
        while recorder.failure is None:
            left = math.inf if end is None else end - clock()
            if left <= 0:
                stop(EXIT_OK)
                break
            if stop.event.wait(min(beat, left)):
                break
            if sampled is not None and (new := sampled.new()) is not None:
                recorder.frame(*new)
    except KeyboardInterrupt:  # Ctrl+C before our handler was in place
        stop(EXIT_INTERRUPTED)
    finally:
        restore()
        if poller is not None:
            poller.close()
        elif sampled is not None:
            sampled.fleet.stop()
        said = recorder.close()
    if recorder.failure is not None:
        if err is not None:
            err.write(one_line(f"gputui record: stopped: {recorder.failure}") + "\n")
            err.flush()
        return EXIT_FAILED
    announce(f"gputui record: {said}")
    return stop.code


def frame_readings(snapshot: Snapshot, at: float, interval_s: float) -> dict[str, Any]:
    """A frame's readings written at ``at``: ``snapshot``, its numbers to :data:`DECIMALS`
    places, with the age of each source's reading a beat or more old
    (:data:`~gputui.telemetry.snapshot.AGES`), so that a replay shows a hung source as stale."""
    readings = snapshot_as_dict(snapshot, decimals=DECIMALS)
    ages = source_ages(snapshot, at, older_than=interval_s)
    if ages:
        readings[AGES] = ages
    return readings


QUEUED_FRAMES = 64
"""Frames a :class:`Recorder` holds for its writer thread at most (a minute at 1 s); while the
disk keeps it full, newer frames are dropped."""
CLOSE_WAIT_S = 10.0
"""How long closing waits for the writer thread to write what it holds and close the file."""
Severity = Literal["warning", "error"]
_Queued = tuple[float, "Snapshot | dict[str, Any]", tuple[dict[str, object], ...]]
"""A frame for the writer thread: when, its readings (ready-made for a fleet), the runner's
entries since the frame before."""


class Recorder:
    """Writes a recording's frames on a thread of its own, so that a slow or hung disk (NFS)
    never holds back the sampling nor the monitor: while :data:`QUEUED_FRAMES` wait for it,
    newer frames are dropped. A write that fails (a full disk) stops the recording, keeping
    what was written; :meth:`news` says each of these once, in one line.

    This machine's frames come from the engine's beats (:meth:`take`), once every source
    has answered, with what the runner pane received since the frame before
    (:mod:`gputui.recording.runs`); a fleet's come ready-made (:meth:`frame`).
    """

    def __init__(
        self,
        path: Path,
        *,
        interval_s: float,
        codec: str,
        max_size: int | None = None,
        keep: int | None = None,
        kind: str = HOST,
        source: str | None = None,
        runner: bool = False,
        only: GpuSelection | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Create the file (it must not exist), write its header and start the writer thread.

        ``path``, ``codec``, ``max_size`` and ``keep`` are as
        :class:`~gputui.recording.writer.RecordingWriter`'s; ``kind``, ``source`` and
        ``runner`` as the header's (``runner`` for the monitor's, whose frames may carry its
        runner's jobs); ``only`` records these GPUs alone (the monitor's ``--only``).

        Raises:
            OSError: the file cannot be made.
        """
        self.path = path
        self._clock = clock
        self._started = clock()
        self._interval_s = interval_s
        self._only = only
        header = Header(
            version=FORMAT_VERSION,
            recording=uuid.uuid4().hex,
            part=0,
            host=socket.gethostname(),
            gputui_version=__version__,
            interval_s=interval_s,
            full_every=FULL_EVERY,
            started_unix=time.time(),
            kind=kind,
            source=source,
            runner=runner,
        )
        self._writer = RecordingWriter(path, header, codec=codec, max_size=max_size, keep=keep)
        self.hang: Callable[[], Latest] | None = None
        """The engine's latest readings, whose ``hang`` stands for NVML's reading while a call
        holds it back (``gputui record``); ``None``: the last reading stands."""
        self._lock = threading.Lock()  # beats come on the engine's threads, entries on the app's
        self._latest: dict[str, object] = {}
        self._framed = False  # a frame was queued: late readings wait for the next beat
        self._runner: list[dict[str, object]] = []  # since the last frame queued
        self._queue: queue.Queue[_Queued | None] = queue.Queue(QUEUED_FRAMES)
        self._told: set[str] = set()
        self.failure: str | None = None
        """Why the recording stopped early, in one line (set by the writer thread)."""
        self.dropped = 0
        """Frames dropped while the writer thread had :data:`QUEUED_FRAMES` waiting."""
        self._thread = threading.Thread(target=self._write_frames, name="gputui-record-writer")
        self._thread.daemon = True  # (a disk that never answers cannot hold the exit)
        self._thread.start()

    @property
    def last_t(self) -> float | None:
        """The latest frame's time written (seconds since the start), if any; :meth:`flush`
        first for the frames queued."""
        return self._writer.last_t

    def runner(self, entry: RunnerEntry) -> None:
        """The runner pane received ``entry`` now: it goes into the next frame queued."""
        if self.failure is None:
            with self._lock:
                self._runner.append(entry_as_dict(self._now(), entry))

    def take(self, beat: Beat) -> None:
        """A beat's readings: queue a frame of the latest of each source, once every source
        has answered (never blocks); a late reading waits for the next beat's frame."""
        if self.failure is None:
            with self._lock:
                self._latest.update(beat.readings)
                if not (beat.late and self._framed):
                    self._queue_frame()

    def frame(self, at: float, data: dict[str, Any]) -> None:
        """Queue a ready-made frame (a fleet's, rounded) read at ``at``."""
        if self.failure is None:
            self._put((at, data, ()))

    def _now(self) -> float:
        return max(self._clock() - self._started, 0.0)

    def _queue_frame(self, wait_s: float | None = None) -> None:
        """Queue a frame of the latest readings with the runner's entries since the frame
        before; where the queue is full (waiting ``wait_s`` at most; else not at all), the
        frame is dropped and the entries wait for the next one."""
        latest = self._latest
        nvml = latest.get("nvml")
        if self.hang is not None and (hung := self.hang().hang) is not None:
            nvml = hung  # (stuck from its first call on, too)
        if nvml is None or not all(source in latest for source in SOURCES if source != "nvml"):
            return  # not every source has answered yet
        self._framed = True
        cpu, mps, drm = latest["cpu"], latest["mps"], latest["drm"]
        if self._only is not None:
            nvml, drm = self._only.of(nvml), self._only.of(drm)  # type: ignore[type-var]  # (the sources' readings)
        snapshot = Snapshot(cpu=cpu, nvml=nvml, mps=mps, drm=drm)  # type: ignore[arg-type]  # (the same)
        if self._put((self._clock(), snapshot, tuple(self._runner)), wait_s):
            self._runner = []

    def _put(self, item: _Queued, wait_s: float | None = None) -> bool:
        try:
            self._queue.put(item, block=wait_s is not None, timeout=wait_s)
        except queue.Full:
            self.dropped += 1
            return False
        return True

    def news(self) -> list[tuple[str, Severity]]:
        """What the monitor has not said yet, each once: frames dropped, the recording
        stopped."""
        news: list[tuple[str, Severity]] = []
        if self.dropped and "dropped" not in self._told:
            self._told.add("dropped")
            news.append(
                (
                    f"Recording falls behind: {self.path} takes frames slower than they come, "
                    "so frames are dropped until it catches up.",
                    "warning",
                )
            )
        if self.failure is not None and "failed" not in self._told:
            self._told.add("failed")
            news.append((f"Recording stopped: {self.failure}.", "error"))
        return news

    def flush(self) -> None:
        """Wait until the writer thread has written every frame queued."""
        self._queue.join()

    def _write_frames(self) -> None:
        """The writer thread: write each frame queued, then close the file."""
        while (item := self._queue.get()) is not None:
            if self.failure is None:
                self._write(*item)
            self._queue.task_done()
        if self.failure is None:
            try:
                self._writer.close()
            except OSError as error:
                self._failed(error)
        self._queue.task_done()

    def _write(
        self, at: float, readings: Snapshot | dict[str, Any], runner: tuple[dict[str, object], ...]
    ) -> None:
        """Write the frame read at ``at``, with the runner's entries since the frame before."""
        if isinstance(readings, Snapshot):
            readings = frame_readings(readings, at, self._interval_s)
        try:
            self._writer.write(max(at - self._started, 0.0), readings, runner)
        except OSError as error:  # a full disk: what reached the file stays
            self._failed(error)

    def _failed(self, error: OSError) -> None:
        self._writer.abandon()
        frames, last_t = self._writer.frames, self._writer.last_t
        self.failure = (
            f"{cannot_write(error, self._writer.parts[-1])}; the {fmt_counted(frames, 'frame')} "
            f"written before {'are' if frames != 1 else 'is'} kept"
            + ("" if last_t is None else f" (up to +{fmt_offset(last_t)})")
        )

    def close(self) -> str:
        """Write what is queued, with a last frame for what the runner received since the
        frame before, if anything, and close the files (waiting :data:`CLOSE_WAIT_S` at
        most); returns the line that says what was recorded where."""
        with self._lock:
            if self.failure is None and self._runner:
                self._queue_frame(wait_s=CLOSE_WAIT_S)
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=CLOSE_WAIT_S)
        self._thread.join(CLOSE_WAIT_S)
        if self._thread.is_alive():
            return (
                f"Recording stopped: {self.path} took no frame for {CLOSE_WAIT_S:g} s; "
                "what reached it is kept."
            )
        writer = self._writer
        files = "" if len(writer.parts) == 1 else f", {len(writer.parts)} files"
        if writer.deleted:
            files += f", the oldest {writer.deleted} deleted (--keep {writer.keep})"
        if self.dropped:
            files += f", {fmt_counted(self.dropped, 'frame')} dropped while the disk was slow"
        line = (
            f"{fmt_counted(writer.frames, 'frame')} recorded in {self.path} "
            f"({fmt_bytes(writer.size)}{files})"
        )
        return line if self.failure is None else f"Recording stopped: {self.failure}. {line}"


def _seconds(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size:g} {unit}"
    return f"{seconds:g} s"
