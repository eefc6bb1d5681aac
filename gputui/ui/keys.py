"""The keys both apps share: quitting, on ``q`` and on Ctrl+C as nvitop and nvtop quit
(Textual alone answers Ctrl+C with "Press ^q to quit") and on nvtop's F10, and the help
screen on ``?``, ``h`` and F1 (:mod:`gputui.ui.widgets.keys_help`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.actions import SkipAction
from textual.binding import Binding

if TYPE_CHECKING:
    from textual.screen import Screen

QUIT = Binding("q,f10", "quit", "Quit")
"""``q`` or F10: the app's ``action_quit``."""
CTRL_C = Binding("ctrl+c", "quit(True)", "Quit", show=False, priority=True)
"""Ctrl+C: the same ``action_quit``, from any screen (dialogs, the palette and the help
included: a priority binding), unless there is text to copy (:func:`skip_if_copying`)."""
HELP = Binding("question_mark,h,f1", "help", "Help")
"""``?``, ``h`` or F1: the help screen (the footer shows ``?``)."""


def skip_if_copying(screen: Screen[object]) -> None:
    """Let Ctrl+C copy, as Textual binds it, while ``screen`` has text selected (in its
    focused field, or by the mouse): the app then does not quit.

    Raises:
        SkipAction: when there is a selection, so that the next binding of Ctrl+C runs.
    """
    if getattr(screen.focused, "selected_text", "") or screen.get_selected_text():
        raise SkipAction()  # (``selected_text``: an Input's, a TextArea's)
