"""The monitor's beat: when each source polls, and which readings are painted together.

Every source polls on one beat (multiples of the interval since the app started), so their
readings arrive together and are painted in one batch, once a beat. A source is polled
again only once its reading has arrived, so polls never pile up; a sample that overran its
beat waits for the next one, resting at least ``MIN_REST`` of an interval, so a slow driver
never gets back-to-back calls.

Pure: the clock is passed in (``now``) and nothing here starts a timer; the app turns what
:class:`BeatScheduler` answers into event-loop timers. So the schedule is tested without an
app, a loop or a wait.
"""

from __future__ import annotations

MIN_REST = 0.1
"""Shortest pause between two polls of a source, as a share of the interval."""


class BeatScheduler:
    """Which sources are due on which beat, which are in flight, and the readings in hand."""

    def __init__(self, interval: float, epoch: float) -> None:
        """Beats every ``interval`` seconds from ``epoch`` (seconds on the app's clock)."""
        self.interval = interval
        self.epoch = epoch
        self.in_flight: set[str] = set()
        """Sources sampling now."""
        self.pending: dict[str, object] = {}
        """Readings that arrived this beat and are not painted yet, by source."""
        self._due: dict[int, list[str]] = {}  # beat number -> the sources to poll then

    def restart(self, epoch: float) -> None:
        """Count beats from ``epoch`` (the app's start, once it is mounted)."""
        self.epoch = epoch

    def beat_time(self, beat: int) -> float:
        """When beat number ``beat`` comes."""
        return self.epoch + beat * self.interval

    def started(self, source: str) -> None:
        """``source`` is sampling."""
        self.in_flight.add(source)

    def arrived(self, source: str, reading: object) -> None:
        """``source``'s reading is in: keep it until the beat is painted."""
        self.in_flight.discard(source)
        self.pending[source] = reading

    def failed(self, source: str) -> None:
        """``source``'s sample raised: it is no longer in flight, and brought nothing."""
        self.in_flight.discard(source)

    def take(self) -> dict[str, object]:
        """The readings to paint now; the batch starts empty again."""
        pending, self.pending = self.pending, {}
        return pending

    def schedule(self, source: str, now: float) -> float | None:
        """Put ``source``'s next poll on the next beat that leaves it ``MIN_REST`` of rest.

        Returns:
            Seconds from ``now`` to that beat when ``source`` is the first one due then (the
            caller starts one timer for the beat, which polls every source due by then);
            ``None`` when a timer for that beat is already set.
        """
        beat = int((now - self.epoch) // self.interval) + 1
        if self.beat_time(beat) - now < self.interval * MIN_REST:
            beat += 1
        due = self._due.setdefault(beat, [])
        due.append(source)
        return self.beat_time(beat) - now if len(due) == 1 else None

    def due(self, now: float) -> list[str]:
        """The sources to poll now: every beat that has come (within half an interval: a
        timer may fire a little early), oldest first. A later beat's sources stay: their
        own timer will come."""
        ready: list[str] = []
        for beat in sorted(self._due):
            if self.beat_time(beat) - now > self.interval / 2:
                break
            ready.extend(self._due.pop(beat))
        return ready
