"""``gputui bench``'s parent side: its runs (:mod:`.run`) and their report (:mod:`.report`),
which the runner pane shows too."""
