"""One rank of a distributed job: join the process group, shard the data, reduce the figures.

torch.distributed does the work (the rendezvous, DistributedDataParallel's gradient
all-reduce, gloo on the CPU, NCCL on CUDA (RCCL on a ROCm build), XCCL on Intel GPUs); this
module only wires the trainer to it.

Every rank keeps the whole dataset on its device and takes its slice of each global
batch (:class:`gputui.engine.pipelines.Shard`); held-out accuracy and the epoch's loss
are summed over the ranks once per epoch, and an epoch lasts as long as its slowest rank.
"""

from __future__ import annotations

import datetime
import socket
import threading
import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist

from gputui.device import CPU, Device
from gputui.engine.devices import synchronize
from gputui.engine.pipelines import Batch, endless
from gputui.jobs.config import ConfigError
from gputui.jobs.events import StepTimes, WorldJoined
from gputui.jobs.world import World, backend_for

PROBE_STEPS = 20
"""Steps of each kind :func:`time_steps` times, at most: a short run times as many as one
of its epochs holds, at least :data:`PROBE_STEPS_MIN` (else, on a CPU, the probe of a
1,024-image job took five times as long as its epochs)."""
PROBE_STEPS_MIN = 5
WAIT_NOTICE_S = 10.0
"""How long a rank waits for the job's store before it says so (once)."""
PEER_WORDS = ("connection closed", "connection reset", "broken pipe", "timed out", "timeout")
"""Words of a gloo or NCCL error that a lost or silent peer causes."""


class JoinError(Exception):
    """A rank could not join its job: the message says why and what to check."""


def rank_device(world: World, device: Device) -> tuple[Device, str | None]:
    """The device this rank trains on (``cuda`` or ``xpu`` becomes :func:`rank_device_index`'s
    ``cuda:N`` or ``xpu:N``, anything else ``cpu``), and a note when it is not the
    ``LOCAL_RANK``-th.

    Raises:
        ConfigError: when this node shows the rank neither its GPU nor exactly one, or when
            torch has no backend for the device (:func:`backend_for`).
    """
    if device.kind not in ("cuda", "xpu"):
        return CPU, None
    backend_for(device.kind, xccl_available=xccl_available())
    module = torch.cuda if device.kind == "cuda" else getattr(torch, "xpu", None)
    count = module.device_count() if module is not None and module.is_available() else 0
    index = rank_device_index(world.local_rank, count)
    name = "CUDA" if device.kind == "cuda" else "XPU"
    if index is None:
        raise ConfigError(
            f"rank {world.rank} is local rank {world.local_rank}, but this node has "
            f"{count} usable {name} device{'s' if count != 1 else ''}: start at most {count} "
            "ranks per node (--nproc-per-node)"
        )
    if index == world.local_rank:
        return Device(device.kind, index), None
    return Device(device.kind, index), (
        f"local rank {world.local_rank} sees one {name} device (its launcher shows each rank "
        f"only its own GPU, as CUDA_VISIBLE_DEVICES per rank does): it trains on "
        f"{device.kind}:{index}"
    )


def xccl_available() -> bool:
    """``torch.distributed.is_xccl_available()``; False in a torch without it."""
    available = getattr(dist, "is_xccl_available", None)
    return bool(available is not None and available())


def rank_device_index(local_rank: int, device_count: int) -> int | None:
    """The CUDA device a rank trains on, of the ``device_count`` it sees; ``None``: none.

    ``local_rank`` when the rank sees that many (torchrun's way: every rank sees every GPU
    of its node); else ``0`` when it sees exactly one, as some Slurm and Kubernetes
    launchers set ``CUDA_VISIBLE_DEVICES`` to each rank's own GPU.
    """
    if local_rank < device_count:
        return local_rank
    return 0 if device_count == 1 else None


def join(
    world: World,
    device: torch.device,
    timeout_s: float,
    notify: Callable[[str], None] | None = None,
    notice_after_s: float = WAIT_NOTICE_S,
) -> tuple[str, float]:
    """Join the job's process group; returns its backend and the seconds the rendezvous took.

    The environment (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``) says
    where rank 0's store is, as torch's ``env://`` reads it (under torchrun that store may
    be the agent's own). Every collective after this gives up after ``timeout_s`` rather
    than torch's default of 10 to 30 minutes. A rank still waiting after
    ``notice_after_s`` tells ``notify`` once what it waits for (a wrong endpoint and a
    late rank 0 look alike until the timeout; the user may know which it is).
    """
    backend = backend_for(device.type, xccl_available=xccl_available())
    started = time.perf_counter()
    notice = None
    if notify is not None:
        notice = threading.Timer(notice_after_s, lambda: notify(waiting(world, timeout_s)))
        notice.daemon = True
        notice.start()
    try:
        dist.init_process_group(
            backend=backend,
            init_method="env://",
            rank=world.rank,
            world_size=world.world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    except Exception as exc:
        raise JoinError(_why_not_joined(world, exc, timeout_s)) from exc
    finally:
        if notice is not None:
            notice.cancel()
    return backend, time.perf_counter() - started


def waiting(world: World, timeout_s: float) -> str:
    """What a rank that has not joined yet waits for, and what the store's address says."""
    where = f"{world.master_addr}:{world.master_port}"
    try:
        with socket.create_connection((world.master_addr, world.master_port), timeout=1.0):
            answer = "something listens there"
        answer += ": the other ranks have not all joined yet"
    except OSError as exc:
        answer = f"nothing answers there ({exc.strerror or type(exc).__name__})"
    return (
        f"rank {world.rank} is still waiting for the {world.world_size}-rank job's store at "
        f"{where}: {answer}; it gives up after {timeout_s:g} s (check MASTER_ADDR, "
        "MASTER_PORT and that every rank was started)"
    )


def _why_not_joined(world: World, exc: Exception, timeout_s: float) -> str:
    where = f"{world.master_addr}:{world.master_port}"
    text = str(exc)
    if "EADDRINUSE" in text or "address already in use" in text.lower():
        return (
            f"rank {world.rank} could not join the {world.world_size}-rank job: port "
            f"{world.master_port} is in use on this machine; pick a free MASTER_PORT "
            "(torchrun --master-port, or another --rdzv-endpoint port)"
        )
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return (
        f"rank {world.rank} could not join the {world.world_size}-rank job at {where} within "
        f"{timeout_s:g} s ({type(exc).__name__}: {first}): check MASTER_ADDR and MASTER_PORT "
        "(torchrun's --rdzv-endpoint) and that every rank was started"
    )


def leave() -> None:
    """Leave the process group, if this process joined one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def joined(world: World, per_rank_batch: int, backend: str, init_seconds: float) -> WorldJoined:
    """The event that says what job this run is part of."""
    return WorldJoined(
        world_size=world.world_size,
        nodes=world.nodes,
        backend=backend,
        per_rank_batch=per_rank_batch,
        global_batch=per_rank_batch * world.world_size,
        init_seconds=init_seconds,
    )


def lost_peer(exc: BaseException) -> bool:
    """Whether ``exc`` is what a rank sees when a peer died or went silent."""
    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(word in text for word in PEER_WORDS)


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.parallel.DistributedDataParallel:
    """``model`` in DDP: rank 0's weights are broadcast to every rank, and each backward
    pass averages the gradients over the ranks (in buckets, overlapped with the pass)."""
    device_ids = [device.index] if device.type in ("cuda", "xpu") else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def total(value: torch.Tensor) -> torch.Tensor:
    """``value`` summed over every rank (in place; every rank gets the sum)."""
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def slowest(seconds: float, device: torch.device) -> float:
    """The longest of every rank's ``seconds``: the job's time is its slowest rank's."""
    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value.item())


def time_steps(
    model: torch.nn.parallel.DistributedDataParallel,
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    batches: Callable[[], Iterator[Batch]],
    device: torch.device,
    steps_per_epoch: int,
) -> StepTimes:
    """Time up to :data:`PROBE_STEPS` steps with the gradients' all-reduce and as many
    without (``no_sync``), alternating, each between two synchronizations; every rank runs
    this together (``steps_per_epoch`` is the same on every rank).

    Without the all-reduce each rank's step is its own compute; the difference of the
    medians is the time a step waits on gradient communication (and on the slowest rank).
    """
    with_sync: list[float] = []
    local: list[float] = []
    feed = endless(batches)
    steps = min(PROBE_STEPS, max(PROBE_STEPS_MIN, steps_per_epoch))
    for _ in range(steps):
        for timings, quiet in ((with_sync, False), (local, True)):
            x, y = next(feed)
            synchronize(device)
            if quiet:
                started = time.perf_counter()
                with model.no_sync():
                    step(x, y)
            else:
                started = time.perf_counter()
                step(x, y)
            synchronize(device)
            timings.append((time.perf_counter() - started) * 1000.0)
    p50, p95 = _quantile(with_sync, 0.5), _quantile(with_sync, 0.95)
    local_p50 = _quantile(local, 0.5)
    return StepTimes(
        steps=steps,
        step_ms_p50=p50,
        step_ms_p95=p95,
        local_step_ms_p50=local_p50,
        allreduce_share=max(0.0, 1.0 - local_p50 / p50) if p50 > 0 else 0.0,
    )


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
