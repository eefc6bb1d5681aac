"""The parent side of every torch job, torch-free: what a job is asked to do
(:mod:`.config`), the one event protocol (:mod:`.events`), the one child-process
runner (:mod:`.process`), the one results model (:mod:`.results`) and the reports
that the commands and the UI both show (:mod:`.bench.report`).

The jobs themselves run in :mod:`gputui.engine`, in a child process.
"""
