"""Issue 40 item 3: the CUDA-graph step's static-buffer path, on the CPU where nothing is
captured. The GPU replays what this path feeds: the same buffers, the same step, so the
model must train exactly as the eager step trains it."""

from __future__ import annotations

import torch

from gputui.device import Device
from gputui.engine.model import CNN
from gputui.engine.step import WARMUP_STEPS, StaticStep, make_optimizer, make_step
from gputui.engine.trainer import graphs_apply
from gputui.jobs.config import RunConfig
from gputui.jobs.world import World

CPU = torch.device("cpu")


def _trained(static: bool, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> list[float]:
    """Each step's loss, training a fresh CNN (seed 0) on ``batches`` in order."""
    torch.manual_seed(0)
    model = CNN()
    step = make_step(model, make_optimizer(model, CPU), CPU, graphed=static)
    if static:
        step = StaticStep(step, CPU, capture=False)
    losses = [float(step(x, y)) for x, y in batches]
    if isinstance(step, StaticStep):
        assert step.graph is None and step.failed is None
    return losses


def _batches(count: int, size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(size, 3, 32, 32, generator=generator), torch.randint(0, 10, (size,)))
        for _ in range(count)
    ]


def test_the_static_buffer_path_trains_as_the_eager_step_does() -> None:
    # two batches in turn, past the warm-up a GPU would capture at, and a last batch of
    # another shape (eager)
    first, second = _batches(2, 32)
    batches = [first, second] * (WARMUP_STEPS + 2) + _batches(1, 8)
    eager, static = _trained(False, batches), _trained(True, batches)
    assert static == eager  # bit for bit: the same kernels on the same values
    # and it learned: Adam fits the first batch's noise as it comes round again (a step that
    # did nothing would pass the line above)
    assert eager[-3] < eager[0]


def test_each_batch_reaches_the_step_through_buffers_that_never_move() -> None:
    seen: list[tuple[int, torch.Tensor]] = []

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        seen.append((x.data_ptr(), x.clone()))
        return y.float().mean()

    static = StaticStep(step, CPU, capture=False)
    batches = _batches(3, 4)
    for x, y in batches:
        assert float(static(x, y)) == float(y.float().mean())
    assert len({pointer for pointer, _ in seen}) == 1  # one buffer, as a graph replays it
    assert all(torch.equal(got, x) for (_, got), (x, _) in zip(seen, batches, strict=True))
    assert static.calls == 3


def test_graphs_are_asked_only_where_they_can_run() -> None:
    cuda, config = torch.device("cuda", 0), RunConfig(device=Device("cuda", 0))
    assert graphs_apply(config, cuda, None, hip="")
    assert not graphs_apply(config.with_changes(graphs=False), cuda, None, hip="")  # --no-graphs
    assert not graphs_apply(config, CPU, None, hip="")
    assert not graphs_apply(config, cuda, None, hip="6.4.43484")  # ROCm: a capture can hang
    assert not graphs_apply(config.with_changes(pipeline="classic"), cuda, None, hip="")
    assert not graphs_apply(config.with_changes(compile=True), cuda, None, hip="")
    world = World.one_machine(0, 2, "127.0.0.1", 29500)
    assert not graphs_apply(config, cuda, world, hip="")
