"""The parent side of every torch job, torch-free: what a job is asked to do
(:mod:`.config`), the one event protocol (:mod:`.events`), the one child-process
runner (:mod:`.process`) and what stops it (:mod:`.interrupt`), the one results model
(:mod:`.results`); then each job's home, which its command and the UI share
(:mod:`.bench`, :mod:`.scale`, :mod:`.experiments`).

The jobs themselves run in :mod:`gputui.engine`, in a child process.
"""
