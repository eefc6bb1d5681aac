"""The runner pane (:mod:`.pane`), painted from :class:`gputui.jobs.runner.Runner`: the
choices (:mod:`.controls`), then the status line, progress row and the last job's tables and
charts (:mod:`.status`).
"""
