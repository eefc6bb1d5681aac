"""Seed 001's CNN, exactly."""

from __future__ import annotations

import torch

from gputui.engine.model import CNN
from gputui.engine.pace import training_flops_per_image


def test_the_cnn_has_seed_001s_layers_and_parameter_count() -> None:
    model = CNN()
    assert [name for name, _ in model.named_children()] == ["pool", "conv", "fc"]
    convs = [m for m in model.conv if isinstance(m, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.padding) for c in convs] == [
        (3, 6, (5, 5), (0, 0)),
        (6, 16, (5, 5), (3, 3)),
        (16, 16, (5, 5), (0, 0)),
        (16, 16, (3, 3), (0, 0)),
    ]
    linears = [m for m in model.fc if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(64, 120), (120, 84), (84, 10)]
    # 456 + 2416 + 6416 + 2320 (conv) + 7800 + 10164 + 850 (fc)
    assert sum(p.numel() for p in model.parameters()) == 30422


def test_the_pool_is_one_module_used_three_times() -> None:
    model = CNN()
    pools = [m for m in model.conv if isinstance(m, torch.nn.MaxPool2d)]
    assert len(pools) == 3
    assert all(pool is model.pool for pool in pools)


def test_forward_gives_ten_logits_per_image() -> None:
    assert CNN()(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_a_training_image_s_flops_are_its_layers_multiply_adds_twice_over() -> None:
    """Issue 40: torch's FlopCounterMode, checked by hand. Forward: each conv's and linear's
    multiply-adds, 2 FLOPs each. Backward: as many again for the weights' gradients, and for
    the inputs' gradients but the first conv's (the images need none)."""

    def conv(c_in: int, c_out: int, kernel: int, out_side: int) -> int:
        return 2 * c_in * c_out * kernel * kernel * out_side * out_side

    # 32 -> 28, pooled 14 -> 16 (padding 3) -> 12, pooled 6 -> 4, pooled 2: 16 x 2 x 2 = 64
    convs = [conv(3, 6, 5, 28), conv(6, 16, 5, 16), conv(16, 16, 5, 12), conv(16, 16, 3, 4)]
    linears = [2 * 64 * 120, 2 * 120 * 84, 2 * 84 * 10]
    forward = sum(convs) + sum(linears)
    assert forward == 3_888_528
    assert training_flops_per_image() == 3 * forward - convs[0] == 10_959_984
