"""Where gputui keeps its files unless told otherwise (the XDG base directories), and how
their folders are made: never inside a home folder that does not exist (``HOME=/nonexistent``,
as services run), which, made by root, would be a stray folder at the top of the file system.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

EVENTS_FILE = "events.jsonl"
"""A run folder's record of every event, one line each (the trainer writes it; the parent
closes it for a trainer that could not)."""


class MissingHome(FileNotFoundError):
    """A folder was to be made in a home folder that does not exist."""

    def __str__(self) -> str:
        return str(self.strerror)


def user_folder(variable: str, default: str) -> Path:
    """``$VARIABLE/gputui`` (``XDG_STATE_HOME``), else ``~/DEFAULT/gputui`` (``.local/state``);
    a relative XDG value is ignored, as the spec says."""
    value = os.environ.get(variable, "")
    base = Path(value) if value and Path(value).is_absolute() else Path.home() / default
    return base / "gputui"


def missing_home(path: Path) -> Path | None:
    """The home folder ``path`` lies in, if that home folder does not exist; else ``None``."""
    try:
        home = Path.home()
    except RuntimeError:  # no HOME and no password entry: there is no home to make
        return None
    inside = path.absolute().is_relative_to(home)
    return home if inside and not home.is_dir() else None


def make_folder(path: Path) -> None:
    """Make ``path`` and its missing parents, unless that would make a missing home folder.

    Raises:
        MissingHome: ``path`` lies in a home folder that does not exist.
        OSError: the folder cannot be made.
    """
    home = missing_home(path)
    if home is not None:
        raise MissingHome(errno.ENOENT, f"the home folder {home} does not exist")
    path.mkdir(parents=True, exist_ok=True)
