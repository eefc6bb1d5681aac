"""Messages that sampler threads post to the app.

A newer reading replaces an older one still waiting in the queue (``can_replace``),
so a busy screen handles the latest reading once instead of a backlog.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from gputui.telemetry.readings import CpuReading, MpsReading, NvmlReading


@dataclass
class CpuSampled(Message):
    """The host sampler returned a reading."""

    reading: CpuReading
    """The new reading."""

    def can_replace(self, message: Message) -> bool:
        """A newer host reading supersedes an unhandled older one."""
        return isinstance(message, CpuSampled)


@dataclass
class NvmlSampled(Message):
    """The NVML sampler returned a reading."""

    reading: NvmlReading
    """The new reading."""

    def can_replace(self, message: Message) -> bool:
        """A newer NVML reading supersedes an unhandled older one."""
        return isinstance(message, NvmlSampled)


@dataclass
class MpsSampled(Message):
    """The MPS sampler returned a reading."""

    reading: MpsReading
    """The new reading."""

    def can_replace(self, message: Message) -> bool:
        """A newer MPS reading supersedes an unhandled older one."""
        return isinstance(message, MpsSampled)


@dataclass
class SamplerFailed(Message):
    """A sampler raised (they should not); the app logs it and polls again."""

    source: str
    """``cpu``, ``nvml`` or ``mps``."""
    error: str
    """The exception, in one line."""
