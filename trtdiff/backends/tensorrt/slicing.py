"""Mark in batches: split the marked tensors into engines that each fit a device-memory budget.

Marking every tensor gives each its own device buffer: users run out of GPU memory on 24 GB
cards and need over 60 GB of host memory (NVIDIA/TensorRT #4442, #4443, #3161). `split_marks`
cuts the marked tensors, in the network's layer order (the ONNX parser adds layers in node
order, so topological), into contiguous slices whose sizes fit the budget together with the
network's own outputs; the builder builds one engine per slice (`select_marks` sets its marks),
so every tensor is marked by exactly one engine (the network outputs by all of them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from trtdiff.backends.tensorrt.marking import MarkPlan, _known_sizes, _layers, _outputs
from trtdiff.errors import OptionError, param

MAX_ENGINES = 64
# The part of the GPU's free memory the marked tensors may take when no budget is given: the
# engine's weights and activations, ONNX Runtime and PyTorch need the rest.
DEFAULT_FREE_FRACTION = 0.5

TRT_API = ("INetworkDefinition.mark_output", "INetworkDefinition.unmark_output", "ITensor.is_network_output")
TRT_OPTIONAL_API: tuple[str, ...] = ()


def default_budget(device: int | None) -> tuple[int | None, str]:
    """(budget, where it came from): half the free memory of GPU `device`; None (no limit) without one."""
    if device is None:
        return None, "no GPU visible"
    try:
        import torch

        free, _ = torch.cuda.mem_get_info(device)
    except Exception:  # noqa: BLE001 -- no CUDA, no driver, a GPU that went away: no budget, one engine
        return None, "no GPU memory figure"
    return int(free * DEFAULT_FREE_FRACTION), f"half of the {free:,} bytes free on GPU {device}"


def split_marks(plan: MarkPlan, budget: int | None, why: str = "") -> MarkPlan:
    """`plan` with its extra marks cut into contiguous slices that fit `budget` bytes each (None: no limit).

    Every slice's engine also holds the network's own outputs, which count against each slice.
    A tensor larger than the budget gets an engine of its own. `why` says where the budget came from.
    """
    if budget is not None and budget <= 0:
        raise OptionError("must be a positive number of bytes", parameter="mark_budget_bytes", value=budget)
    plan = dataclasses.replace(plan, budget_bytes=budget)
    extra = plan.extra_marks()
    total = plan.marked_bytes()
    if budget is None or plan.mode != "all" or total <= budget or len(extra) < 2:
        return plan
    sizes = _known_sizes(plan)
    room = budget - sum(sizes[t] for t in plan.outputs)
    slices = contiguous_slices(extra, sizes, room)
    if len(slices) > MAX_ENGINES:
        raise OptionError(
            f"marking every tensor needs {total:,} bytes, which would take {len(slices)} engines (at most "
            f"{MAX_ENGINES}); give a larger budget or use {param('outputs')} unfused",
            parameter="mark_budget_bytes",
            value=budget,
        )
    unknown = sum(1 for t in plan.marked if plan.sizes.get(t) is None)
    note = (
        f"mark budget: the {len(plan.marked)} marked tensors need {total:,} bytes of GPU memory, over the budget "
        f"of {budget:,} bytes{f' ({why})' if why else ''}; built {len(slices)} engines, each marking a contiguous "
        "slice of the graph in topological order (every engine also returns the network outputs)"
        + (f"; {unknown} sizes unknown, counted as the largest known" if unknown else "")
    )
    return dataclasses.replace(plan, slices=tuple(slices), notes=(*plan.notes, note))


def contiguous_slices(names: Sequence[str], sizes: Mapping[str, int], room: int) -> list[tuple[str, ...]]:
    """`names`, in order, in consecutive groups whose summed sizes stay within `room` (a larger one alone)."""
    slices: list[tuple[str, ...]] = []
    current: list[str] = []
    used = 0
    for name in names:
        size = sizes.get(name, 0)
        if current and used + size > room:
            slices.append(tuple(current))
            current, used = [], 0
        current.append(name)
        used += size
    if current:
        slices.append(tuple(current))
    return slices


def select_marks(network: Any, plan: MarkPlan, index: int) -> None:
    """Make engine `index`'s marks the network's outputs: its slice and the network's own outputs, no others."""
    keep = set(plan.engine_marks()[index])
    extra = set(plan.extra_marks())
    for layer in _layers(network):
        for tensor in _outputs(layer):
            if tensor.name not in extra:
                continue
            if tensor.name in keep and not tensor.is_network_output:
                network.mark_output(tensor)
            elif tensor.name not in keep and tensor.is_network_output:
                network.unmark_output(tensor)
