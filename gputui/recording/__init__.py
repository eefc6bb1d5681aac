"""Recordings of the monitor's readings: ``gputui record`` writes them, ``gputui snapshot
--from`` and ``gputui replay`` read them back.

No Textual and no torch here. ``frames`` is the format (the header, a frame's line, the
changes a frame carries), ``codec`` its compression, ``writer`` and ``recorder`` the writing
side, ``reader`` opens a recording, checks it and seeks in it, ``summary`` sums one up.
"""
