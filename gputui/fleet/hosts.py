"""One host's state in a fleet view: what it said last, and whether it still answers."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from gputui.fleet.exporters import Exposition, hung_error
from gputui.telemetry.readings import GpuReading, GpuState

NOT_READ = "not read yet"
"""The error of a host whose first read has not ended yet."""


@dataclass(frozen=True, slots=True)
class HostReading:
    """One host's latest readings, or why there are none."""

    host: str
    """The host as the user named it (or Prometheus's ``instance`` label)."""
    up: bool
    """True when the last attempt to read it answered with readings."""
    error: str | None = None
    """Why the last attempt failed, in words; ``None`` when it answered."""
    source: str | None = None
    """The exporter that answered: ``gputui``, ``dcgm-exporter`` or ``nvitop-exporter``."""
    gpus: tuple[GpuReading, ...] = ()
    """Its GPUs; a host that stopped answering keeps its last ones (see ``taken_at``)."""
    taken_at: float | None = None
    """``time.monotonic()`` when those readings were taken; ``None`` when it never answered."""
    via: str = "http"
    """``http`` (its own /metrics) or ``prometheus`` (a Prometheus server's API)."""
    notes: tuple[str, ...] = ()
    """Values it sent that cannot be readings (read as ``None``), one sentence each."""

    def age_s(self, now: float) -> float | None:
        """Seconds since the readings shown were taken; ``None`` when there are none."""
        return None if self.taken_at is None else max(0.0, now - self.taken_at)

    def failed(self, error: str) -> HostReading:
        """This host after a failed attempt: down, with its last readings kept as stale."""
        return replace(self, up=False, error=error)

    @classmethod
    def answered(
        cls, host: str, exposition: Exposition, taken_at: float | None, via: str = "http"
    ) -> HostReading:
        """``host`` up with what its exporter said, asked at ``taken_at`` (its readings are
        dated back by the age the exporter gives)."""
        return cls(
            host,
            up=True,
            source=exposition.source,
            gpus=exposition.gpus,
            taken_at=None if taken_at is None else taken_at - exposition.sample_age_s,
            via=via,
            notes=exposition.notes,
        )


class HungSince:
    """When each hung GPU of a fleet was first seen hung, so that its sentence counts up
    ("not answering for 12 s") from one read to the next, whatever each read's age."""

    def __init__(self) -> None:
        self._since: dict[str, dict[tuple[int, str | None], float]] = {}
        """By host, by GPU (index and UUID): when it was first seen hung."""

    def track(self, host: HostReading, now: float) -> HostReading:
        """``host`` with each hung GPU's sentence counted from when it was first seen hung
        (its readings' time then); forgets the GPUs of ``host`` that answer again."""
        if not host.up or host.taken_at is None:
            return host
        before = self._since.get(host.host, {})
        since = {
            (gpu.index, gpu.uuid): before.get((gpu.index, gpu.uuid), host.taken_at)
            for gpu in host.gpus
            if gpu.state is GpuState.HUNG
        }
        self._since[host.host] = since
        if not since:
            return host
        gpus = tuple(
            replace(gpu, error=hung_error(now - since[gpu.index, gpu.uuid]))
            if gpu.state is GpuState.HUNG
            else gpu
            for gpu in host.gpus
        )
        return replace(host, gpus=gpus)


class FleetSource(Protocol):
    """Where a fleet view gets its hosts: each host's own exporter, or Prometheus."""

    error: str | None
    """Why the source as a whole failed (Prometheus not answering); ``None`` when fine."""
    generation: int
    """Grows whenever something new was read."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def latest(self) -> list[HostReading]: ...
