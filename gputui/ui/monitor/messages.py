"""Messages that sampler threads post to the app.

A newer reading replaces an older one still waiting in the queue (``can_replace``),
so a busy screen handles the latest reading once instead of a backlog.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from textual.message import Message

from gputui.telemetry.readings import CpuReading, DrmReading, MpsReading, NvmlReading

ReadingT = TypeVar("ReadingT", CpuReading, NvmlReading, MpsReading, DrmReading)


@dataclass
class Sampled(Message, Generic[ReadingT]):
    """A sampler returned a reading; each source has its own kind below."""

    reading: ReadingT
    """The new reading."""

    def can_replace(self, message: Message) -> bool:
        """A newer reading supersedes an unhandled older one of the same kind."""
        return isinstance(message, type(self))


class CpuSampled(Sampled[CpuReading]):
    """The host sampler returned a reading."""


class NvmlSampled(Sampled[NvmlReading]):
    """The NVML sampler returned a reading."""


class MpsSampled(Sampled[MpsReading]):
    """The MPS sampler returned a reading."""


class DrmSampled(Sampled[DrmReading]):
    """The AMD and Intel sampler returned a reading."""


@dataclass
class SamplerFailed(Message):
    """A sampler raised (they should not); the app logs it and polls again."""

    source: str
    """``cpu``, ``nvml``, ``mps`` or ``drm``."""
    error: str
    """The exception, in one line."""
