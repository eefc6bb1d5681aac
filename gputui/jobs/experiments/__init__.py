"""``gputui experiment``'s parent side, shared with the runner pane: the report
(:mod:`.report`)."""
