"""What a scaling job runs: its world sizes, and one :class:`ScaleConfig` for each.

``gputui scale`` and the runner pane plan their jobs here alike.
"""

from __future__ import annotations

import dataclasses

from gputui.device import Device
from gputui.jobs.config import (
    WORLD_SIZE_MAX,
    ConfigError,
    RunConfig,
    ScaleConfig,
    default_threads,
)

SCALINGS = ("weak", "strong")
"""Weak scaling keeps the per-rank batch; strong keeps the global batch."""
CPU_WORLD_SIZES = (1, 2)
"""The CPU's default: one rank against two (gloo), the cores shared out between them."""


def gpu_world_sizes(gpus: int) -> tuple[int, ...]:
    """The GPUs' default: 1, 2, 4... ranks up to ``gpus``, and ``gpus`` itself."""
    sizes = [1]
    while sizes[-1] * 2 <= gpus:
        sizes.append(sizes[-1] * 2)
    if sizes[-1] != gpus:
        sizes.append(gpus)
    return tuple(sizes)


def world_sizes_from(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` as world sizes, in order, each once.

    Raises:
        ConfigError: one line when ``text`` is not a list of whole numbers of 1 to
            :data:`~gputui.jobs.config.WORLD_SIZE_MAX`.
    """
    try:
        sizes = tuple(int(part) for part in text.replace(" ", "").split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1 or max(sizes) > WORLD_SIZE_MAX:
        raise ConfigError(
            f"world sizes {text.strip()!r} are not whole numbers of 1 to {WORLD_SIZE_MAX}, "
            "comma-separated, e.g. 1,2,4"
        )
    return tuple(sorted(set(sizes)))


def scaling_configs(
    base: RunConfig, sizes: tuple[int, ...], scaling: str, cores: int | None = None
) -> list[ScaleConfig]:
    """One :class:`ScaleConfig` per world size, from ``base`` (its device's kind, its batch:
    per rank in weak scaling, shared out in strong). On the CPU the threads ``base`` may use
    (every core, by default) are shared out between the ranks.

    Raises:
        ConfigError: one line, e.g. a strong-scaling batch the ranks cannot share evenly.
    """
    if scaling not in SCALINGS:
        raise ConfigError(f"scaling {scaling!r} is not one of {', '.join(SCALINGS)}")
    device = Device(base.device.kind)
    configs = []
    for size in sizes:
        per_rank = base.batch_size
        if scaling == "strong":
            per_rank, left = divmod(base.batch_size, size)
            if left or not per_rank:
                raise ConfigError(
                    f"strong scaling splits the batch of {base.batch_size} between the ranks, "
                    f"and {size} ranks cannot share it evenly: use world sizes that divide "
                    "the batch size"
                )
        threads = base.threads
        if device.kind == "cpu":
            threads = max(1, (base.threads or cores or default_threads()) // size)
        fields = {spec.name: getattr(base, spec.name) for spec in dataclasses.fields(RunConfig)}
        fields |= {"device": device, "batch_size": per_rank, "threads": threads, "record": False}
        config = ScaleConfig(**fields, world_size=size)
        config.validate()
        configs.append(config)
    return configs
