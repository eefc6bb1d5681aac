"""Plays a recording back for ``gputui replay FILE``: the frame shown, stepping and seeking
through the recording, and each frame's readings typed as the live sources give them, so that
the monitor (or, for a fleet recording, the fleet view) draws a replayed frame as it drew the
live one.

No Textual here: the app asks for frames, and draws them.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from gputui.fleet.hosts import HostReading
from gputui.fleet.report import hosts_from_dict
from gputui.format import ellipsize
from gputui.recording.frames import Header
from gputui.recording.reader import Frame, Problem, Recording
from gputui.recording.runs import JobBegun, RunnerEntry, entries_of
from gputui.telemetry.polling import Samplers
from gputui.telemetry.readings import Snapshot
from gputui.telemetry.snapshot import snapshot_from_dict

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
"""The replay's speeds, slowest first (recorded seconds per second)."""
STEP_BACK_S = 0.0005
"""Less than the gap between two frames (their times are written to a thousandth)."""

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Shown(Generic[R]):
    """A frame and its readings."""

    frame: Frame
    """The frame as the recording holds it."""
    readings: R
    """Its readings, typed (each ``taken_at`` is the frame's time): a :class:`Snapshot`, or
    a fleet's :class:`FleetFrame`."""

    @property
    def t(self) -> float:
        """Seconds since the recording started."""
        return self.frame.t


@dataclass(frozen=True, slots=True)
class FleetFrame:
    """A fleet recording's frame, as the fleet view's source gives it."""

    hosts: list[HostReading]
    """Every host (``taken_at`` on the recording's time: the frame's less its age)."""
    error: str | None
    """Why the source as a whole did not answer (Prometheus); ``None`` when it did."""


def fleet_frame(frame: Frame) -> FleetFrame:
    """A fleet recording's frame as the fleet view's source gives it.

    Raises:
        ValueError: the frame is not a fleet's readings; says which value.
    """
    error = frame.readings.get("error")
    if error is not None and not isinstance(error, str):
        raise ValueError("its error is not text")
    return FleetFrame(hosts_from_dict(frame.readings, frame.t), error)


class _Source(Generic[R]):
    """A replay's sampler: the shown frame's reading from one source."""

    def __init__(self, read: Callable[[], R]) -> None:
        self._read = read

    def sample(self) -> R:
        """The shown frame's reading (never blocks)."""
        return self._read()


class FramePlayer(Generic[R]):
    """Where a replay is in its recording, and the frames it moves through, each read as
    ``decode`` types it.

    Frames are read ahead one at a time from the shown one; a seek reads from the index's
    nearest whole frame. The frames of the sparklines' window before the shown one are kept,
    so that stepping back reads nothing (a seek would read and type the whole window again).
    A damaged or cut-short line ends the frames there: :attr:`problem` says where, and the
    frames before it play as usual.
    """

    def __init__(self, recording: Recording, decode: Callable[[Frame], R]) -> None:
        """Show the first frame of ``recording`` (none where it holds none yet); ``decode``
        types a frame's readings (``ValueError`` where they cannot be)."""
        self._decode = decode
        self.recording = recording
        self.header: Header = recording.header
        self.problem: Problem | None = None
        """The first damaged or cut-short line met, if any."""
        self.current: Shown[R] | None = None
        """The frame shown; ``None`` only for a recording that holds none."""
        self.finished = False
        """Whether the frames ran out after the shown one (the end, or a damaged line)."""
        last = recording.at(math.inf)
        self._note(recording.problem)
        self.last_t = last.t if last is not None else 0.0
        """The last frame's time, as far as it has been read."""
        self._ahead: Iterator[Frame] = iter(())
        self._held: list[Frame] = []  # read, not shown yet: the next frame last
        self._window: deque[Shown[R]] = deque()  # the shown frame last
        self.window_s = 0.0
        """How long before the shown frame the frames are kept (the sparklines' window; a
        seek sets it)."""
        self.seek(0.0)

    @property
    def t(self) -> float:
        """The shown frame's time (0 before any)."""
        return self.current.t if self.current is not None else 0.0

    @property
    def readings(self) -> R:
        """The shown frame's readings.

        Raises:
            LookupError: the recording holds no frame.
        """
        if self.current is None:
            raise LookupError("the recording holds no frame")
        return self.current.readings

    def seek(self, t: float, history_s: float = 0.0) -> list[Shown[R]]:
        """Show the last frame at or before ``t`` seconds (the first frame, where none is);
        returns the frames from ``history_s`` before it (the sparklines' window) to it, the
        new one last; none where the recording holds no frame that can be read."""
        start = t - history_s
        self._ahead = self.recording.frames_from(start)
        self._held.clear()
        self._window.clear()
        self.window_s = history_s
        self.finished = False
        played = self._played(t, at_least_one=True)  # (before the first frame: the first)
        return self._moved([p for p in played[:-1] if p.t > start] + played[-1:])

    def forward(self, until_t: float) -> list[Shown[R]]:
        """Move on through the frames up to ``until_t``; returns those passed, the new shown
        one last (none while the next frame is later)."""
        return self._moved(self._played(until_t, at_least_one=False))

    def _played(self, t: float, *, at_least_one: bool) -> list[Shown[R]]:
        """The frames up to ``t`` (``at_least_one``: the next one, if later), the next one
        held back; a frame that cannot be read ends them."""
        played: list[Shown[R]] = []
        while (frame := self._pull()) is not None:
            if frame.t > t and (played or not at_least_one):
                self._held.append(frame)
                break
            shown = self._shown(frame)
            if shown is None:
                break
            played.append(shown)
            if frame.t > t:
                break
        return played

    def step(self) -> Shown[R] | None:
        """Show the next frame, if there is one; returns it."""
        frame = self._pull()
        if frame is None:
            return None
        self._held.append(frame)
        played = self.forward(frame.t)
        return played[-1] if played else None

    def back(self, history_s: float = 0.0) -> list[Shown[R]]:
        """Show the frame before the shown one (the first stays); as :meth:`seek`, but from
        the frames kept while the window holds the one before (then it ends a frame earlier,
        rather than reaching a frame further back)."""
        window = self._window
        if len(window) < 2 or history_s != self.window_s:
            return self.seek(max(self.t - STEP_BACK_S, 0.0), history_s)
        self._held.append(window.pop().frame)
        self.current = window[-1]
        self.finished = False
        return list(window)

    def _moved(self, played: list[Shown[R]]) -> list[Shown[R]]:
        if played:
            self.current = played[-1]
            self.last_t = max(self.last_t, self.current.t)
            window = self._window
            window.extend(played)
            while len(window) > 1 and window[0].t <= self.current.t - self.window_s:
                window.popleft()
        return played

    def _pull(self) -> Frame | None:
        """The next frame after the shown one, or ``None`` at the end (noting a problem)."""
        if self._held:
            return self._held.pop()
        frame = next(self._ahead, None)
        if frame is None:
            self.finished = True
            self._note(self.recording.problem)
        return frame

    def _shown(self, frame: Frame) -> Shown[R] | None:
        """The frame with its readings; ``None`` (the frames end there) where they are not
        readings of this format."""
        try:
            return Shown(frame, self._decode(frame))
        except ValueError as error:
            self._note(self.recording.not_a_frame(frame, error))
            self.finished = True
            self._ahead = iter(())
            return None

    def _note(self, problem: Problem | None) -> None:
        if self.problem is None:
            self.problem = problem


class Player(FramePlayer[Snapshot]):
    """Plays one machine's recording, each frame as the live samplers give it."""

    def __init__(self, recording: Recording) -> None:
        """Show the first frame (none where the recording holds none yet), and read the
        runner pane's entries (``gputui --record``)."""
        super().__init__(
            recording, lambda frame: snapshot_from_dict(frame.readings, taken_at=frame.t)
        )
        self._runner: list[RunnerEntry] = []
        self._runner_t: list[float] = []  # each entry's frame's time
        if self.header.runner:  # read once: a seek back rebuilds the pane from the start
            for frame in recording.frames():
                entries = entries_of([frame.runner])
                self._runner += entries
                self._runner_t += [frame.t] * len(entries)
            self._note(recording.problem)
        self.has_runs = any(isinstance(entry, JobBegun) for entry in self._runner)
        """Whether the runner pane started a job while this was recorded."""

    @property
    def snapshot(self) -> Snapshot:
        """The shown frame's readings.

        Raises:
            LookupError: the recording holds no frame.
        """
        return self.readings

    def runner_entries(self) -> list[RunnerEntry]:
        """What the runner pane had received by the shown frame, in order: the entries of
        that frame and those before it."""
        return self._runner[: bisect.bisect_right(self._runner_t, self.t)]

    def samplers(self) -> Samplers:
        """Samplers that give the shown frame's readings (a replay's engine, never started:
        the replay shows each frame as it moves)."""
        return Samplers(
            cpu=_Source(lambda: self.snapshot.cpu),
            nvml=_Source(lambda: self.snapshot.nvml),
            mps=_Source(lambda: self.snapshot.mps),
            drm=_Source(lambda: self.snapshot.drm),
        )


class FleetPlayer(FramePlayer[FleetFrame]):
    """Plays a fleet's recording, each frame as the fleet view's source gives it."""

    def __init__(self, recording: Recording) -> None:
        """Show the first frame (none where the recording holds none yet)."""
        super().__init__(recording, fleet_frame)


def faster(speed: float, steps: int = 1) -> float:
    """The speed ``steps`` places on in :data:`SPEEDS` (back where negative), within it."""
    at = min(range(len(SPEEDS)), key=lambda i: abs(SPEEDS[i] - speed))
    return SPEEDS[max(0, min(len(SPEEDS) - 1, at + steps))]


_OFFSET = re.compile(r"\+?(?:(\d+):)?(\d{1,2}):(\d{1,2}(?:\.\d+)?)|\+?(\d+(?:\.\d+)?)")
_UTC_SUFFIX = re.compile(r"\s*(?:UTC|Z)$", re.IGNORECASE)


def goto_time(text: str, header: Header) -> float:
    """Where ``g`` goes, in seconds since the recording started: an offset (``90``,
    ``2:30``, ``1:02:03``, ``+1:02:03``), a UTC time of day on the recording's first day or
    after (``03:00:00 UTC``), a date and time (``2026-11-26 03:00:00``; UTC unless it names
    a zone), ``start`` or ``end``.

    Raises:
        ValueError: none of those; one line that says what is.
    """
    text = text.strip()
    if text in ("start", "end"):
        return 0.0 if text == "start" else math.inf
    try:
        return _parse_time(text, header)
    except (ValueError, OverflowError):  # (OverflowError: past what a float or a date holds)
        raise ValueError(
            f"{ellipsize(text, 30)!r} is not a time in the recording: write an offset "
            "(1:02:03), a UTC time (03:00:00 UTC, 2026-11-26 03:00:00), start or end"
        ) from None


def _parse_time(text: str, header: Header) -> float:
    """:func:`goto_time` of ``text``, stripped, neither ``start`` nor ``end``."""
    offset = _OFFSET.fullmatch(text)
    if offset is not None:
        hours, minutes, seconds, plain = offset.groups()
        if plain is not None:
            return float(plain)
        return int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
    bare = _UTC_SUFFIX.sub("", text)
    started = header.started_at
    if len(bare) <= 15:  # a time of day, in UTC
        day = dt.time.fromisoformat(bare)
        when = dt.datetime.combine(started.date(), day, dt.UTC)
        if when < started - dt.timedelta(seconds=1):
            when += dt.timedelta(days=1)
    else:
        if len(bare) > 40:
            raise ValueError
        when = dt.datetime.fromisoformat(bare)
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
    return when.timestamp() - header.started_unix
