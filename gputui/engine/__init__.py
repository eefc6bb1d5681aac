"""The engine: every line of gputui that runs torch, in a child process of its own.

Started only as ``python -m gputui.engine MODE`` (:mod:`gputui.engine.__main__`)
by :class:`gputui.jobs.process.ChildProcess`; it reports through the events of
:mod:`gputui.jobs.events`. Nothing outside this package imports it or torch, as
the import-linter contracts in ``pyproject.toml`` hold.
"""
