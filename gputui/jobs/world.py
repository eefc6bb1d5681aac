"""A distributed job's world, as torchrun (and ``gputui scale``) describes it to each rank in
the environment. Torch-free: ``gputui bench`` reads it in the parent, the engine's trainer in
the child. Only some of the variables set is refused in one line: a rank that guessed the
rest would wait for peers that never come.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from gputui.jobs.config import ConfigError

REQUIRED = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
"""What a rank cannot do without; ``LOCAL_WORLD_SIZE`` defaults to ``WORLD_SIZE``."""
LAUNCH_HINT = (
    "start gputui with torchrun, which sets them all "
    "(torchrun --nproc-per-node N -m gputui bench ...), or unset them"
)


@dataclass(frozen=True)
class World:
    """One rank's place in a job of ``world_size`` processes."""

    rank: int
    """This process's rank, 0 to ``world_size - 1``; rank 0 prints and records."""
    local_rank: int
    """Its rank on this node: the GPU it trains on (``cuda:LOCAL_RANK``, or the one GPU
    it sees when its launcher shows each rank only its own)."""
    world_size: int
    """Processes in the whole job."""
    local_world_size: int
    """Processes on this node."""
    master_addr: str
    """Where rank 0's store listens."""
    master_port: int

    @classmethod
    def one_machine(cls, rank: int, world_size: int, master_addr: str, master_port: int) -> World:
        """Rank ``rank`` of a job whose processes all run on this machine (as ``gputui
        scale`` starts them): its rank on the node is its rank in the job."""
        return cls(rank, rank, world_size, world_size, master_addr, master_port)

    @property
    def nodes(self) -> int:
        """Machines in the job (torchrun starts the same number of ranks on each)."""
        return max(1, -(-self.world_size // max(self.local_world_size, 1)))

    @property
    def leader(self) -> bool:
        """Whether this rank speaks for the job (prints the result, writes the run folder)."""
        return self.rank == 0

    def environ(self) -> dict[str, str]:
        """The variables that describe this rank, as torchrun sets them."""
        return {
            "RANK": str(self.rank),
            "LOCAL_RANK": str(self.local_rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }


def world_from_env(environ: Mapping[str, str]) -> World | None:
    """This process's world, or ``None`` when it is not a rank of a distributed job.

    Raises:
        ConfigError: one line when only some of the variables are set, or one is not a
            number in its range.
    """
    present = [name for name in REQUIRED if environ.get(name, "").strip()]
    if not present:
        return None
    missing = [name for name in REQUIRED if name not in present]
    if missing:
        raise ConfigError(
            f"{', '.join(present)} {'is' if len(present) == 1 else 'are'} set but "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not: {LAUNCH_HINT}"
        )
    world_size = _number(environ, "WORLD_SIZE", 1)
    rank = _number(environ, "RANK", 0, world_size - 1)
    local_world_size = (
        _number(environ, "LOCAL_WORLD_SIZE", 1, world_size)
        if environ.get("LOCAL_WORLD_SIZE", "").strip()
        else world_size
    )
    return World(
        rank=rank,
        local_rank=_number(environ, "LOCAL_RANK", 0, local_world_size - 1),
        world_size=world_size,
        local_world_size=local_world_size,
        master_addr=environ["MASTER_ADDR"].strip(),
        master_port=_number(environ, "MASTER_PORT", 1, 65535),
    )


def check_endpoint(world: World, environ: Mapping[str, str]) -> None:
    """Refuse at once an endpoint that can never work, rather than let a rank wait for it.

    torch's ``env://`` keeps retrying a name that does not resolve, and rank 0 keeps
    serving its store on an address that is not this machine's, each until the
    collective timeout (minutes). A name that does not resolve is refused for every rank;
    an address rank 0 cannot listen on, for rank 0 alone, and only when it serves the
    store itself (under torchrun's c10d rendezvous the agent does,
    ``TORCHELASTIC_USE_AGENT_STORE=True``).

    Raises:
        ConfigError: one line naming the variable and what to set it to.
    """
    where = f"MASTER_ADDR={world.master_addr!r}"
    try:
        found = socket.getaddrinfo(world.master_addr, world.master_port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(
            f"{where} does not resolve ({why}): set it to rank 0's host name or address "
            "(torchrun --rdzv-endpoint HOST:PORT)"
        ) from None
    if not world.leader or environ.get("TORCHELASTIC_USE_AGENT_STORE", "") == "True":
        return
    family, kind, proto, _, address = found[0]
    with socket.socket(family, kind, proto) as probe:
        try:
            probe.bind((address[0], 0))
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL:
                return  # anything else is the store's to report, with its port
            raise ConfigError(
                f"{where} ({address[0]}) is not an address of this machine, but rank 0 runs "
                "here and serves the job's store there: set MASTER_ADDR to this machine's "
                "name or address"
            ) from None


def backend_for(device_type: str, *, xccl_available: bool = True) -> str:
    """torch.distributed's backend for a device type: ``nccl`` for CUDA (on a ROCm build it
    is RCCL, AMD's NCCL, under NCCL's name), ``xccl`` for Intel GPUs, ``gloo`` for the CPU.

    Raises:
        ConfigError: for ``xpu`` when this torch has no XCCL
            (``torch.distributed.is_xccl_available()``), in one line.
    """
    if device_type == "xpu":
        if not xccl_available:
            raise ConfigError(
                "this torch has no XCCL (torch.distributed.is_xccl_available() is False), the "
                "backend that joins ranks on Intel GPUs: install a recent XPU build of torch, "
                "or use --device cpu"
            )
        return "xccl"
    return "nccl" if device_type == "cuda" else "gloo"


def backend_text(backend: str, torch_build: str) -> str:
    """The backend as the report names it: ``nccl (RCCL)`` on a ROCm build, else itself."""
    return f"{backend} (RCCL)" if backend == "nccl" and torch_build == "rocm" else backend


def _number(environ: Mapping[str, str], name: str, least: int, most: int | None = None) -> int:
    text = environ[name].strip()
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < least or (most is not None and value > most):
        upper = f" to {most}" if most is not None else " or more"
        raise ConfigError(f"{name}={text!r} must be a whole number, {least}{upper}: {LAUNCH_HINT}")
    return value
