"""The engine in a child process under an address-space limit: a real out-of-memory on the CPU.

``python -m tests.engine.limited -m gputui.engine MODE ... CONFIG_JSON`` (:data:`LIMITED` is
a ``ChildProcess``'s ``python``) trains a tiny run first (a first run imports much of torch
lazily), then limits its own address space (``RLIMIT_AS``) to what it holds then plus
:data:`HEADROOM_MIB`, and runs the engine as ``python -m gputui.engine`` does. Set from the
child's own address space, the limit leaves the same room on every machine and under any load.
"""

from __future__ import annotations

import resource
import runpy
import sys
from collections.abc import Sequence

HEADROOM_MIB = 350
"""The room left above what the warmed-up child holds."""
OOM_BATCH = 4096
"""A batch that does not fit in :data:`HEADROOM_MIB`: with its data it needs about 200 MiB
more. Of the batches the trainer then tries (half of it, a quarter, ...), half fits with
about 50 MiB to spare, and one of them fits from a headroom of about 150 MiB on."""
LIMITED = [sys.executable, "-m", "tests.engine.limited"]
"""The interpreter, with its arguments, that runs the engine under the limit."""


def main(engine: Sequence[str]) -> None:
    """Warm up, limit this process's address space, and run the engine with ``engine``'s
    arguments (``-m gputui.engine`` and the rest)."""
    assert list(engine[:2]) == ["-m", "gputui.engine"], engine
    from gputui.engine.lifecycle import keep_freed_memory

    keep_freed_memory()  # as the engine does, before torch allocates
    import torch

    from gputui.engine.trainer import run_training
    from gputui.jobs.config import RunConfig

    torch.set_num_threads(1)  # the limited runs ask for one thread: none is started later
    tiny = RunConfig(dataset="synthetic", limit=64, test_limit=64, batch_size=8, epochs=1)
    assert run_training(tiny.with_changes(record=False), lambda event: None) == 0
    with open("/proc/self/status") as status:  # VmSize: the address space RLIMIT_AS limits
        held = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    limit = held + HEADROOM_MIB * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.argv = ["gputui.engine", *engine[2:]]
    runpy.run_module("gputui.engine", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
