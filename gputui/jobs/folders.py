"""Where gputui keeps its files unless told otherwise, and how their folders are made.

The defaults follow the XDG base directories: ``$XDG_STATE_HOME/gputui`` (the run
folders) and ``$XDG_CACHE_HOME/gputui`` (CIFAR-10), else ``~/.local/state/gputui`` and
``~/.cache/gputui``; a relative XDG value is ignored, as the spec says. A folder is
made with its missing parents, but never inside a home folder that does not exist
(``HOME=/nonexistent``, as services run): made by root, that home would be a stray
folder at the top of the file system.
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

    def __init__(self, home: Path) -> None:
        super().__init__(errno.ENOENT, f"the home folder {home} does not exist")
        self.home = home

    def __str__(self) -> str:
        return str(self.strerror)


def user_folder(variable: str, default: str) -> Path:
    """``$VARIABLE/gputui``, else ``~/DEFAULT/gputui``.

    Args:
        variable: The XDG variable, e.g. ``XDG_STATE_HOME``.
        default: Its default, relative to the home folder, e.g. ``.local/state``.
    """
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
        raise MissingHome(home)
    path.mkdir(parents=True, exist_ok=True)
