"""Experiments that measure the tutorials' claims on this machine (``gputui experiment``).

- ``batch-sweep``: throughput and the share of each step spent moving data, per batch size.
- ``sync-stall``: the loss read to the host every step against once at the end.
- ``pipelines``: the tutorials' DataLoader against resident data.

Torch-free modules (the UI and the CLI import them): :mod:`.spec` (what to run),
:mod:`.events` (the typed rows the child streams), :mod:`.conclusions` (the one
sentence per experiment, from the numbers), :mod:`.result` (rows gathered per
device, and the JSON), :mod:`.process` (the child process) and :mod:`.cli`.
Torch lives in :mod:`.measure` and :mod:`.child`, which run in the child process.
"""
