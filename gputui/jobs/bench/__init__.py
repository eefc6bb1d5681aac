"""``gputui bench``'s parent side: the report of its runs (:mod:`.report`)."""
