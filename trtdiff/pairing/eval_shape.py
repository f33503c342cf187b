"""ONNX ops that move values without computing new ones, in PyTorch: reshapes, transposes, slices, joins.

A reshape-like op takes its output shape from shape inference where it is static (the exporter
computes it with shape arithmetic that is the same for every input of these shapes), else from
its folded shape input, with ONNX's rules (0 copies a dimension, -1 is inferred).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from trtdiff.pairing.eval_ops import Call, Op, Unsupported


def _target(call: Call, fallback: tuple[int, ...] | None) -> tuple[int, ...]:
    static = call.out_shapes[0] if call.out_shapes else None
    if static is not None:
        return static
    if fallback is None:
        raise Unsupported("an output shape that is neither static nor folded")
    return fallback


def _reshape(call: Call) -> list[torch.Tensor]:
    x = call.arg(0)
    wanted = call.ints(1, "shape")
    fallback = None
    if wanted is not None:
        keep_zero = bool(call.attrs.get("allowzero", 0))
        fallback = tuple(x.shape[i] if d == 0 and not keep_zero else d for i, d in enumerate(wanted))
        fallback = tuple(x.reshape(fallback).shape)
    return [x.reshape(_target(call, fallback))]


def _flatten(call: Call) -> list[torch.Tensor]:
    x = call.arg(0)
    axis = int(call.attrs.get("axis", 1)) % (x.dim() + 1) if x.dim() else 0
    return [x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))]


def _squeeze(call: Call) -> list[torch.Tensor]:
    x = call.arg(0)
    axes = call.ints(1, "axes")
    if axes is None:
        fallback = tuple(d for d in x.shape if d != 1)
    else:
        drop = {a % x.dim() for a in axes}
        fallback = tuple(d for i, d in enumerate(x.shape) if i not in drop)
    return [x.reshape(_target(call, fallback))]


def _unsqueeze(call: Call) -> list[torch.Tensor]:
    x = call.arg(0)
    axes = call.ints(1, "axes")
    fallback = None
    if axes is not None:
        rank = x.dim() + len(axes)
        added = {a % rank for a in axes}
        dims = iter(x.shape)
        fallback = tuple(1 if i in added else next(dims) for i in range(rank))
    return [x.reshape(_target(call, fallback))]


def _transpose(call: Call) -> list[torch.Tensor]:
    x = call.arg(0)
    perm = call.attrs.get("perm")
    return [x.permute(*(int(p) for p in perm) if perm is not None else reversed(range(x.dim())))]


def _expand(call: Call) -> list[torch.Tensor]:
    x = call.arg(0)
    wanted = call.ints(1, "shape")
    fallback = tuple(torch.broadcast_shapes(tuple(x.shape), tuple(wanted))) if wanted is not None else None
    return [x.expand(_target(call, fallback))]


def _tile(call: Call) -> list[torch.Tensor]:
    repeats = call.ints(1, "repeats")
    if repeats is None:
        raise Unsupported("Tile without known repeats")
    return [call.arg(0).repeat(*repeats)]


def _split(call: Call) -> list[torch.Tensor]:
    x = call.arg(0)
    axis = int(call.attrs.get("axis", 0)) % x.dim()
    sizes = call.ints(1, "split")
    if sizes is None and all(s is not None for s in call.out_shapes):
        sizes = [s[axis] for s in call.out_shapes if s is not None]
    if sizes is None:
        count = int(call.attrs.get("num_outputs", len(call.out_shapes)))
        sizes = [-(-x.shape[axis] // count)] * count
        sizes[-1] = x.shape[axis] - sum(sizes[:-1])
    return list(torch.split(x, sizes, dim=axis))


def _slice(call: Call) -> list[torch.Tensor]:
    x = call.arg(0)
    starts = call.ints(1, "starts")
    ends = call.ints(2, "ends")
    if starts is None or ends is None:
        raise Unsupported("Slice without known starts and ends")
    axes = call.ints(3, "axes") or list(range(len(starts)))
    steps = call.ints(4, "steps") or [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis %= x.dim()
        picked = range(*slice(start, end, step).indices(x.shape[axis]))  # numpy's clamping, as the ONNX spec
        x = x.index_select(axis, torch.tensor(list(picked), dtype=torch.int64))
    return [x]


def _gather(call: Call) -> list[torch.Tensor]:
    x, indices = call.arg(0), call.arg(1)
    axis = int(call.attrs.get("axis", 0)) % x.dim()
    flat = indices.reshape(-1).long()
    flat = torch.where(flat < 0, flat + x.shape[axis], flat)
    picked = x.index_select(axis, flat)
    return [picked.reshape(*x.shape[:axis], *indices.shape, *x.shape[axis + 1 :])]


def _concat(call: Call) -> list[torch.Tensor]:
    parts = [call.arg(i) for i in range(len(call.inputs))]
    return [torch.cat(parts, dim=int(call.attrs["axis"]))]


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}


def _pad(call: Call) -> list[torch.Tensor]:
    x = call.arg(0)
    pads = call.ints(1, "pads")
    mode = call.attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if pads is None or mode not in _PAD_MODES or call.optional(3) is not None:
        raise Unsupported("Pad of an unusual form")
    rank = x.dim()
    torch_pads = [p for axis in reversed(range(rank)) for p in (pads[axis], pads[axis + rank])]
    while len(torch_pads) > 2 and torch_pads[-1] == 0 and torch_pads[-2] == 0:
        torch_pads = torch_pads[:-2]  # non-constant modes pad only the trailing dimensions
    if mode != "constant":
        return [F.pad(x, torch_pads, mode=_PAD_MODES[mode])]
    return [F.pad(x, torch_pads, value=call.number(2, "value", 0.0))]


SHAPE_OPS: dict[str, Op] = {
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Transpose": _transpose,
    "Expand": _expand,
    "Tile": _tile,
    "Split": _split,
    "Slice": _slice,
    "Gather": _gather,
    "Concat": _concat,
    "Pad": _pad,
}
