"""`python -m gputui`."""

from gputui.commands import main

raise SystemExit(main())
