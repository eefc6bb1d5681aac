"""The runner pane's parts: where it gets its child processes (:mod:`.setup`)."""
