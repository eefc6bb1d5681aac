"""The message the sampling engine's threads post to the app."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from gputui.telemetry.polling import Beat


@dataclass
class Sampled(Message):
    """A beat's readings came (their text made printable)."""

    beat: Beat
    """The readings, and the samplers that raised."""
