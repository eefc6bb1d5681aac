"""The fleet view, ``gputui --hosts``: the app (:mod:`.app`) and its rows (:mod:`.rows`)."""
