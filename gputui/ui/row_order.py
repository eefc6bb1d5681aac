"""How a table's rows are shown: a sort key, its direction, and a filter (pure: no widgets).

The process table (:mod:`gputui.ui.monitor.process_rows`) and the fleet view
(:mod:`gputui.ui.fleet.rows`) each subclass :class:`RowOrder` with their own keys and
default; what a key means, and how rows are sorted by it, stays with each table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, TypeVar

_Order = TypeVar("_Order", bound="RowOrder")


@dataclass(frozen=True, slots=True)
class RowOrder:
    """A sort key, its direction and a filter; a key change is the subclass's own
    :meth:`next_key`, which says whether the direction is kept."""

    KEYS: ClassVar[tuple[str, ...]] = ()
    """The keys the sort cycles through, in order."""

    key: str = ""
    """One of :attr:`KEYS`."""
    reverse: bool = False
    """The key's natural order turned round."""
    filter: str = ""
    """Text a row must hold; empty: every row."""

    def following_key(self) -> str:
        """The key after this one in :attr:`KEYS`, the first again after the last."""
        return self.KEYS[(self.KEYS.index(self.key) + 1) % len(self.KEYS)]

    def reversed(self: _Order) -> _Order:
        """The same key the other way round."""
        return replace(self, reverse=not self.reverse)

    def filtered(self: _Order, text: str) -> _Order:
        """The same order, keeping only the rows that hold ``text``."""
        return replace(self, filter=text)
