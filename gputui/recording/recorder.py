"""``gputui record`` from start to stop: sample this machine as the monitor does, or a fleet
as the fleet view does, write each new reading as a frame, and stop after ``--duration``, on
SIGTERM or Ctrl+C, or at the first write that fails (a full disk), keeping what was written.

This machine's sources are sampled by the exporter's :class:`~gputui.serve.sampling.Poller`
(NVML, and any other source whose driver may hang, on a thread of its own, so that a hung
call holds back only its own source; the host's counters on the recorder's thread); a fleet
by the fleet view's own source (:class:`~gputui.fleet.scrape.FleetPoller` or
:class:`~gputui.fleet.prometheus.PrometheusPoller`). The recorder's loop asks for each sample
itself (no pacing thread wakes beside it) and wakes once a beat: it writes what the last
beat's samples read, if anything new was read (so a frame is never written twice and a slow
sample is written a beat later), then asks for the next. A frame is thus written a beat after
its readings were taken, with the times they were taken.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO

from gputui import __version__
from gputui.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
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
from gputui.serve.sampling import Poller
from gputui.serve.stop import Stop, stop_on_signals
from gputui.telemetry.polling import Samplers, import_real_samplers
from gputui.telemetry.readings import (
    NO_DRM_GPUS,
    CpuReading,
    DrmReading,
    MpsReading,
    NvmlReading,
    Snapshot,
)
from gputui.telemetry.snapshot import AGES, snapshot_as_dict, source_ages


class Sampled(Protocol):
    """What a recording reads: this machine (:class:`MachineSampled`) or a fleet
    (:class:`FleetSampled`)."""

    kind: str
    """The header's ``kind``."""
    source: str | None
    """The header's ``source``."""
    what: str
    """What is recorded, in words: ``this machine``, ``3 hosts``."""

    def start(self) -> None: ...

    def poll(self) -> None:
        """Ask for the next sample, where the loop paces the source (it returns at once)."""

    def close(self) -> None: ...

    def new(self) -> tuple[float, dict[str, Any]] | None:
        """What was read since the last call, with when (on the recorder's clock), as a
        frame's JSON data with its numbers rounded (:func:`~gputui.recording.frames.rounded`);
        ``None`` when nothing new was read."""


class MachineSampled:
    """This machine, sampled as ``gputui serve`` samples it."""

    kind: str = HOST
    source: str | None = None
    what: str = "this machine"

    def __init__(self, samplers: Samplers, interval_s: float, clock: Callable[[], float]) -> None:
        self._poller = Poller(samplers, interval_s, clock=clock)
        self._interval_s = interval_s
        self._last_taken: tuple[float, ...] = ()

    def start(self) -> None:
        self._poller.start(paced=False)

    def poll(self) -> None:
        self._poller.poll()

    def close(self) -> None:
        self._poller.close()

    def new(self) -> tuple[float, dict[str, Any]] | None:
        snapshot = self._poller.latest().snapshot()
        if snapshot is None:
            return None
        taken = (snapshot.cpu.taken_at, snapshot.nvml.taken_at, snapshot.mps.taken_at)
        if taken == self._last_taken:
            return None
        self._last_taken = taken
        at = max(taken)
        return at, frame_readings(snapshot, at, self._interval_s, decimals=DECIMALS)


class FleetSampled:
    """A fleet, read by the fleet view's own source: each frame holds every host as
    ``gputui snapshot --hosts --json`` writes it (its age as of the frame), and the source's
    own error (Prometheus not answering)."""

    kind: str = FLEET

    def __init__(
        self, fleet: FleetSource, source: str, what: str, clock: Callable[[], float]
    ) -> None:
        """Record what ``fleet`` reads.

        Args:
            fleet: The hosts' source (not started yet).
            source: ``exporters`` or ``prometheus``, for the header.
            what: The hosts, in words, for the line that says what is recorded.
            clock: The monotonic clock the source's readings' ``taken_at`` are on.
        """
        self._fleet = fleet
        self.source: str | None = source
        self.what = what
        self._clock = clock
        self._generation = 0

    def start(self) -> None:
        self._fleet.start()

    def poll(self) -> None:
        """The fleet's source paces itself."""

    def close(self) -> None:
        self._fleet.stop()

    def new(self) -> tuple[float, dict[str, Any]] | None:
        generation = self._fleet.generation
        if generation in (0, self._generation):  # nothing read yet, or nothing new
            return None
        now = self._clock()
        latest = self._fleet.latest()
        if any(host.error == NOT_READ and host.taken_at is None for host in latest):
            return None  # the first round is not over: no host is down for want of a turn
        self._generation = generation
        hosts = [
            host if host.error is None else replace(host, error=one_line(host.error))
            for host in latest
        ]
        data = fleet_as_dict(hosts, now)
        error = self._fleet.error
        data["error"] = None if error is None else one_line(error)
        return now, rounded(data)


def record(
    path: Path,
    *,
    interval_s: float,
    codec: str,
    duration_s: float | None = None,
    max_size: int | None = None,
    keep: int | None = None,
    samplers: Samplers | None = None,
    sampled: Sampled | None = None,
    stop: Stop | None = None,
    announce: Callable[[str], None] = print,
    err: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Record this machine's readings into ``path`` until stopped.

    Args:
        path: The recording's first file; it must not exist.
        interval_s: Seconds between samples.
        codec: ``zstd``, ``gzip`` or ``none``.
        duration_s: Stop after this long; ``None``: only when told.
        max_size: Start a new file once one reaches this many bytes.
        keep: Keep this many files at most, deleting the oldest; ``None``: every one.
        samplers: This machine's sources (default: the real ones, command lines' secrets
            redacted).
        sampled: What to record, where not this machine (:class:`FleetSampled`).
        stop: Stops the recording when called (SIGTERM and SIGINT call it too).
        announce: Writes the line saying where it records, and the last one saying what.
        err: Where the line saying why the recording stopped early goes (standard error).
        clock: Monotonic clock, the samplers' (readings' ``taken_at`` are on it).

    Returns:
        0 when the duration ended or after SIGTERM, 130 after Ctrl+C, 1 when a write failed.

    Raises:
        OSError: ``path`` cannot be made (it exists, its folder is gone...).
    """
    if sampled is None:
        if samplers is None:
            import_real_samplers()
            samplers = Samplers.real()
        sampled = MachineSampled(samplers, interval_s, clock)
    stop = stop if stop is not None else Stop()
    started = clock()
    header = new_header(interval_s, kind=sampled.kind, source=sampled.source)
    writer = RecordingWriter(path, header, codec=codec, max_size=max_size, keep=keep)
    restore = stop_on_signals(stop)
    failed = None
    try:
        sampled.start()
        until = "" if duration_s is None else f" for {_seconds(duration_s)}"
        announce(
            f"gputui record: recording {sampled.what} every {interval_s:g} s{until} into "
            f"{path} ({codec}; Ctrl+C stops)"
        )
        end = None if duration_s is None else started + duration_s
        sampled.poll()
        polled, ended = started, False
        while True:
            if end is not None and clock() + interval_s / 2 >= end:
                # the last samples: written half a beat on (the duration ends within it)
                if not stop.event.wait(max(0.0, polled + interval_s / 2 - clock())):
                    failed = _write_new(sampled, writer, started)
                    stop(EXIT_OK)
                    ended = True
                break
            if stop.event.wait(max(0.0, polled + interval_s - clock())):
                break
            # one wake a beat: write what the last beat's samples read (done long since),
            # then ask for the next ones
            failed = _write_new(sampled, writer, started)
            if failed is not None:
                break
            now = clock()
            sampled.poll()
            # fell behind: go on from this whole interval, without a burst to catch up
            polled += interval_s * max(1, int((now - polled) // interval_s))
        if failed is None and not ended:  # stopped between two beats: what was read since
            failed = _write_new(sampled, writer, started)
    except KeyboardInterrupt:  # Ctrl+C before our handler was in place
        stop(EXIT_INTERRUPTED)
    finally:
        restore()
        sampled.close()
        try:
            if failed is None:
                writer.close()
        except OSError as error:
            failed = error
        if failed is not None:
            writer.abandon()
    if failed is not None:
        line = (
            f"gputui record: stopped: {cannot_write(failed, writer.parts[-1])}; the "
            f"{fmt_counted(writer.frames, 'frame')} written before "
            f"{'are' if writer.frames != 1 else 'is'} kept"
            + ("" if writer.last_t is None else f" (up to +{fmt_offset(writer.last_t)})")
        )
        if err is not None:
            err.write(one_line(line) + "\n")
            err.flush()
        return EXIT_FAILED
    files = "" if len(writer.parts) == 1 else f", {len(writer.parts)} files"
    if writer.deleted:
        files += f", the oldest {writer.deleted} deleted (--keep {keep})"
    announce(
        f"gputui record: {fmt_counted(writer.frames, 'frame')} in {path} "
        f"({fmt_bytes(writer.size)}{files})"
    )
    return stop.code


def _write_new(sampled: Sampled, writer: RecordingWriter, started: float) -> OSError | None:
    """Write what ``sampled`` read since the last frame, if anything; the error of a write
    that failed (a full disk: what reached the file stays)."""
    new = sampled.new()
    if new is None:
        return None
    try:
        writer.write(new[0] - started, new[1], already_rounded=True)
    except OSError as error:
        return error
    return None


def frame_readings(
    snapshot: Snapshot, at: float, interval_s: float, *, decimals: int | None = None
) -> dict[str, Any]:
    """A frame's readings written at ``at``: ``snapshot``, with the age of each source's
    reading a beat or more old (:data:`~gputui.telemetry.snapshot.AGES`), so that a replay
    shows a hung source as stale; its numbers rounded to ``decimals`` places as they are
    converted where given (the ages are rounded to 3 places, :data:`DECIMALS`, always)."""
    readings = snapshot_as_dict(snapshot, decimals=decimals)
    ages = source_ages(snapshot, at, older_than=interval_s)
    if ages:
        readings[AGES] = ages
    return readings


def new_header(
    interval_s: float, *, kind: str = HOST, source: str | None = None, runner: bool = False
) -> Header:
    """The header of a recording made on this machine that starts now: of this machine, or
    of a fleet (``kind``, ``source``: :class:`~gputui.recording.frames.Header`'s); ``runner``:
    of the monitor, whose frames may carry its runner pane's jobs."""
    return Header(
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


QUEUED_FRAMES = 64
"""Frames ``--record`` holds for its writer thread at most (a minute at 1 s); while the disk
keeps it full, newer frames are dropped."""
CLOSE_WAIT_S = 10.0
"""How long quitting waits for the writer thread to write what it holds and close the file."""
Severity = Literal["warning", "error"]
_Queued = tuple[float, Snapshot, tuple[dict[str, object], ...]]
"""A frame for the writer thread: when it was painted, its readings, the runner's entries."""


class ShownRecorder:
    """Records what the monitor shows (``gputui --record FILE``): a frame each time it paints
    new readings, once every source has answered, with what the runner pane received since
    the frame before (:mod:`gputui.recording.runs`).

    Frames are encoded, compressed and written on a thread of their own, so that a slow or
    hung disk (NFS) never holds the monitor back: while :data:`QUEUED_FRAMES` wait for it,
    newer frames are dropped. A write that fails (a full disk) stops the recording, keeping
    what was written; :meth:`news` says each of these once, in one line.
    """

    def __init__(
        self,
        path: Path,
        *,
        interval_s: float,
        codec: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Create the file (it must not exist), write its header and start the writer thread.

        Raises:
            OSError: the file cannot be made.
        """
        self.path = path
        self._clock = clock
        self._started = clock()
        self._interval_s = interval_s
        header = new_header(interval_s, runner=True)
        self._writer = RecordingWriter(path, header, codec=codec)
        self._latest: dict[str, object] = {}
        self._runner: list[dict[str, object]] = []  # since the last frame queued
        self._queue: queue.Queue[_Queued | None] = queue.Queue(QUEUED_FRAMES)
        self._told: set[str] = set()
        self.failed: str | None = None
        """Why the recording stopped early, in one line (set by the writer thread); ``None``
        while it goes on."""
        self.dropped = 0
        """Frames dropped while the writer thread had :data:`QUEUED_FRAMES` waiting."""
        self._thread = threading.Thread(target=self._write_frames, name="gputui-record")
        self._thread.daemon = True  # (a disk that never answers cannot hold the exit)
        self._thread.start()

    @property
    def last_t(self) -> float | None:
        """The latest frame's time written (seconds since the recording started), if any;
        :meth:`flush` first for the frames queued."""
        return self._writer.last_t

    def runner(self, entry: RunnerEntry) -> None:
        """The runner pane received ``entry`` now: it goes into the next frame queued."""
        if self.failed is None:
            self._runner.append(entry_as_dict(self._now(), entry))

    def shown(self, readings: Mapping[str, object]) -> None:
        """The monitor painted ``readings`` (by source: ``cpu``, ``nvml``, ``mps``, ``drm``):
        queue a frame of the latest of each, at the monitor's clock (never blocks)."""
        if self.failed is not None:
            return
        self._latest.update(readings)
        self._queue_frame()

    def _now(self) -> float:
        return max(self._clock() - self._started, 0.0)

    def _queue_frame(self, wait_s: float | None = None) -> None:
        """Queue a frame of the latest readings with the runner's entries since the frame
        before; where the queue is full (waiting ``wait_s`` at most; else not at all), the
        frame is dropped and the entries wait for the next one."""
        cpu, nvml, mps = (self._latest.get(source) for source in ("cpu", "nvml", "mps"))
        drm = self._latest.get("drm", NO_DRM_GPUS)
        if not (
            isinstance(cpu, CpuReading)
            and isinstance(nvml, NvmlReading)
            and isinstance(mps, MpsReading)
            and isinstance(drm, DrmReading)
        ):
            return  # not every source has answered yet
        snapshot = Snapshot(cpu=cpu, nvml=nvml, mps=mps, drm=drm)
        item = (self._clock(), snapshot, tuple(self._runner))
        try:
            self._queue.put(item, block=wait_s is not None, timeout=wait_s)
        except queue.Full:
            self.dropped += 1
            return
        self._runner = []

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
        if self.failed is not None and "failed" not in self._told:
            self._told.add("failed")
            news.append((self.failed, "error"))
        return news

    def flush(self) -> None:
        """Wait until the writer thread has written every frame queued."""
        self._queue.join()

    def _write_frames(self) -> None:
        """The writer thread: write each frame queued, then close the file."""
        while (item := self._queue.get()) is not None:
            if self.failed is None:
                self._write(*item)
            self._queue.task_done()
        if self.failed is None:
            try:
                self._writer.close()
            except OSError as error:
                self._writer.abandon()
                self.failed = f"Recording stopped: {cannot_write(error, self._writer.parts[-1])}"
        self._queue.task_done()

    def _write(self, at: float, snapshot: Snapshot, runner: tuple[dict[str, object], ...]) -> None:
        """Write the frame painted at ``at`` (on the monitor's clock), with the runner's
        entries since the frame before."""
        readings = frame_readings(snapshot, at, self._interval_s)
        try:
            self._writer.write(max(at - self._started, 0.0), readings, runner)
        except OSError as error:  # a full disk: what reached the file stays
            self._writer.abandon()
            self.failed = (
                f"Recording stopped: {cannot_write(error, self._writer.parts[-1])}; the "
                f"{fmt_counted(self._writer.frames, 'frame')} written "
                f"before {'are' if self._writer.frames != 1 else 'is'} kept."
            )

    def close(self) -> str:
        """Write what is queued, with a last frame for what the runner received since the
        frame before, if anything, and close the files (waiting :data:`CLOSE_WAIT_S` at
        most); returns the line that says what was recorded where."""
        if self.failed is None and self._runner:
            self._queue_frame(wait_s=CLOSE_WAIT_S)
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=CLOSE_WAIT_S)
        self._thread.join(CLOSE_WAIT_S)
        if self._thread.is_alive():
            return (
                f"Recording stopped: {self.path} took no frame for {CLOSE_WAIT_S:g} s; "
                "what reached it is kept."
            )
        files = "" if len(self._writer.parts) == 1 else f", {len(self._writer.parts)} files"
        dropped = ""
        if self.dropped:
            dropped = f", {fmt_counted(self.dropped, 'frame')} dropped while the disk was slow"
        line = (
            f"{fmt_counted(self._writer.frames, 'frame')} recorded in {self.path} "
            f"({fmt_bytes(self._writer.size)}{files}{dropped})"
        )
        return line if self.failed is None else f"{self.failed} {line}"


def _seconds(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size:g} {unit}"
    return f"{seconds:g} s"
