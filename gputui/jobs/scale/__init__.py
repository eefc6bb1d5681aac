"""``gputui scale``'s parent side, shared with the runner pane: the world sizes and their
configs (:mod:`.plan`) and the report (:mod:`.report`)."""
