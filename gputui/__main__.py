"""`python -m gputui`."""

from gputui.commands import console_main

console_main()
