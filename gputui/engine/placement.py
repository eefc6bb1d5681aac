"""Where the model's parameters, buffers and optimizer state live, group by group.

Reads only tensor metadata (device, dtype, size), so it never synchronizes a device.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from gputui.jobs.events import Placement, PlacementRow


def describe_placement(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    dataset_device: str,
    pinned: bool,
) -> Placement:
    """One row per top-level module of ``model`` (not a ``torch.compile`` wrapper) that holds
    tensors, then one per optimizer param group, with where a batch and the dataset are.

    Call it after the first optimizer step: Adam creates its state lazily.
    """
    rows = [
        _row(name, "module", list(module.parameters()), list(module.buffers()), optimizer)
        for name, module in model.named_children()
        if any(True for _ in module.parameters()) or any(True for _ in module.buffers())
    ]
    rows += [
        _row(f"param_groups[{index}]", "param_group", list(group["params"]), [], optimizer)
        for index, group in enumerate(optimizer.param_groups)
    ]
    channels_last = inputs.dim() == 4 and inputs.is_contiguous(memory_format=torch.channels_last)
    return Placement(
        rows=tuple(rows),
        inputs_device=str(inputs.device),
        inputs_dtype=_dtype_name(inputs.dtype),
        inputs_memory_format="channels_last" if channels_last else "contiguous",
        labels_device=str(labels.device),
        dataset_device=dataset_device,
        pinned=pinned,
    )


def _row(
    group: str,
    kind: str,
    params: list[torch.Tensor],
    buffers: list[torch.Tensor],
    optimizer: torch.optim.Optimizer,
) -> PlacementRow:
    state: list[torch.Tensor] = []
    steps: list[torch.Tensor] = []
    for param in params:
        for key, value in optimizer.state.get(param, {}).items():
            if isinstance(value, torch.Tensor):
                (steps if key == "step" else state).append(value)
    return PlacementRow(
        group=group,
        kind=kind,
        device=_devices(params),
        dtype=_dtypes(params),
        param_tensors=len(params),
        params=_elements(params),
        param_bytes=_bytes(params),
        buffer_device=_devices(buffers),
        buffers=_elements(buffers),
        buffer_bytes=_bytes(buffers),
        state_device=_devices(state),
        state_dtype=_dtypes(state),
        state_tensors=len(state),
        state_elements=_elements(state),
        state_bytes=_bytes(state),
        step_device=_devices(steps),
    )


def _devices(tensors: Iterable[torch.Tensor]) -> str | None:
    found = sorted({str(t.device) for t in tensors})
    return ", ".join(found) if found else None


def _dtypes(tensors: Iterable[torch.Tensor]) -> str | None:
    found = sorted({_dtype_name(t.dtype) for t in tensors})
    return ", ".join(found) if found else None


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _elements(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() for t in tensors)


def _bytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)
