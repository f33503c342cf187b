"""Attention recorded op by op: the fused kernels are off while the reference is recorded.

In eval mode `nn.MultiheadAttention` (and `nn.TransformerEncoderLayer`) take a fast path that
is one fused aten op, and `F.scaled_dot_product_attention` runs a fused kernel (flash
attention on the CPU): the softmax inside is never recorded, so an error there could only be
named at the next recorded op. While the reference is recorded, the fast path is off and
SDPA runs its math implementation, which dispatches the scaling, the score product, the
softmax and the value product one by one. The flags are read when the op runs, so this holds
inside TorchScript archives and ExportedPrograms too.

The math path computes the same numbers within float tolerance. When the model ran attention
(`AttentionWatch` for eager modules and GraphModules, `script_attention` for TorchScript
archives), the recording's final outputs are checked against a plain forward with the fused
kernels (`output_gap`); beyond ATTENTION_RTOL the reference is recorded with the fused kernels
instead, and a note says so.

A fused kernel that still runs (that fallback, or an archive traced with the MultiheadAttention
fast path in its graph) is recorded through its decomposition (`decomposition`: SDPA's math
implementation, or `F.multi_head_attention_forward`), evaluated on the kernel's own inputs,
when that reproduces the kernel's output to ATTENTION_RTOL; the model goes on with the
kernel's output. Where it does not (or the form is not covered: dropout, a MultiheadAttention
mask), a note names the modules whose inside is not recorded.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

ATTENTION_RTOL = 1e-4
"""How far (max-abs error / max |fused output|) the decomposed path's final outputs may be from the fused one's."""

FUSED_ATTENTION = frozenset(
    {
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_fused_attention_overrideable",
        "_native_multi_head_attention",
        "_transformer_encoder_layer_fwd",
    }
)
"""Aten ops that compute attention in one kernel: what runs inside them is not recorded."""

_CALLS = frozenset({"scaled_dot_product_attention", "multi_head_attention_forward"}) | FUSED_ATTENTION
"""Functions (and aten ops) whose path the decomposed recording changes."""


@contextmanager
def decomposed_attention() -> Iterator[None]:
    """The MultiheadAttention fast path off and SDPA on its math implementation, for the block only."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with sdpa_kernel([SDPBackend.MATH]):
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)


def call_name(func: Any) -> str:
    """The bare name of a torch function or aten op (an overload's name without its ".default")."""
    name = getattr(func, "__name__", "") or ""
    return name.split(".")[0]


class AttentionWatch(TorchFunctionMode):
    """Notes every attention call and the module path it ran in (`path_stack` as forward hooks keep it).

    A TorchFunctionMode sees torch functions of eager modules and the aten calls of a
    GraphModule; nothing inside a TorchScript module (see `script_attention`).
    """

    def __init__(self, path_stack: list[str] | None) -> None:
        super().__init__()
        self.path_stack = path_stack
        self.calls: list[tuple[str, str | None]] = []

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        name = call_name(func)
        if name in _CALLS:
            path = self.path_stack[-1] if self.path_stack else ("" if self.path_stack is not None else None)
            self.calls.append((name, path))
        return func(*args, **(kwargs or {}))


_SCRIPT_ATTENTION: weakref.WeakKeyDictionary[Any, list[tuple[str, str]]] = weakref.WeakKeyDictionary()


def script_attention(module: torch.jit.ScriptModule) -> list[tuple[str, str]]:
    """(op, module path) of every attention node in a TorchScript module's graphs, control flow included.

    Read once per module (each recording asks).
    """
    if module not in _SCRIPT_ATTENTION:
        _SCRIPT_ATTENTION[module] = _script_attention(module)
    return list(_SCRIPT_ATTENTION[module])


def _script_attention(module: torch.jit.ScriptModule) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for path, sub in module.named_modules():
        try:
            graph = sub._c._get_method("forward").graph
        except (AttributeError, RuntimeError):
            continue
        found += [(name, path) for name in _attention_nodes(graph.nodes())]
    return found


def _attention_nodes(nodes: Any) -> Iterator[str]:
    for node in nodes:
        kind = node.kind()
        if kind.startswith("aten::") and kind.removeprefix("aten::") in _CALLS:
            yield kind.removeprefix("aten::")
        for block in node.blocks():
            yield from _attention_nodes(block.nodes())


def decomposition(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Callable[[], torch.Tensor] | None:
    """The fused attention op `func` on these arguments, as the ops it stands for (None: a form not covered).

    Calling the result computes the op's first output again, op by op, under the decomposed
    flags (so a TorchDispatchMode around the call records each step).
    """
    names = [argument.name for argument in func._schema.arguments]
    bound = dict(zip(names, args, strict=False)) | dict(kwargs)
    if float(bound.get("dropout_p", 0.0) or 0.0) != 0.0:
        return None
    packet = func._overloadpacket.__name__
    if packet == "_native_multi_head_attention":
        return _multi_head(bound)
    if packet.startswith("_scaled_dot_product_") and packet in FUSED_ATTENTION:
        return _sdpa(bound)
    return None


def _sdpa(bound: dict[str, Any]) -> Callable[[], torch.Tensor]:
    mask = bound.get("attn_mask", bound.get("attn_bias"))

    def run() -> torch.Tensor:
        with decomposed_attention():
            result = torch.ops.aten._scaled_dot_product_attention_math(
                bound["query"],
                bound["key"],
                bound["value"],
                mask,
                0.0,
                bool(bound.get("is_causal", False)),
                scale=bound.get("scale"),
            )[0]
        output: torch.Tensor = result
        return output

    return run


def _multi_head(bound: dict[str, Any]) -> Callable[[], torch.Tensor] | None:
    """`_native_multi_head_attention` (batch first) as `F.multi_head_attention_forward` (sequence first)."""
    query, key, value = bound["query"], bound["key"], bound["value"]
    if bound.get("mask") is not None or query.dim() != 3 or query.is_nested:
        return None

    def run() -> torch.Tensor:
        q = query.transpose(0, 1)  # the same tensor stays the same: the packed in-projection of self-attention
        k = q if key is query else key.transpose(0, 1)
        v = q if value is query else k if value is key else value.transpose(0, 1)
        with decomposed_attention():
            out, _ = F.multi_head_attention_forward(
                q,
                k,
                v,
                int(bound["embed_dim"]),
                int(bound["num_head"]),
                bound["qkv_weight"],
                bound["qkv_bias"],
                None,
                None,
                False,
                0.0,
                bound["proj_weight"],
                bound["proj_bias"],
                training=False,
                need_weights=False,
            )
        return out.transpose(0, 1)

    return run


def output_gap(recorded: Sequence[np.ndarray], plain: Sequence[np.ndarray]) -> float:
    """The largest max-abs error / max |plain| over the outputs; inf when shapes or non-finite values differ."""
    if len(recorded) != len(plain):
        return float("inf")
    worst = 0.0
    for ours, theirs in zip(recorded, plain, strict=True):
        if ours.shape != theirs.shape:
            return float("inf")
        if not np.issubdtype(theirs.dtype, np.floating):
            if not np.array_equal(ours, theirs):
                return float("inf")
            continue
        a, b = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
        finite = np.isfinite(b)
        if not np.array_equal(finite, np.isfinite(a)) or not np.array_equal(a[~finite], b[~finite], equal_nan=True):
            return float("inf")
        if not finite.any():
            continue
        scale = float(np.abs(b[finite]).max())
        error = float(np.abs(a[finite] - b[finite]).max())
        worst = max(worst, error / scale if scale > 0 else (0.0 if error == 0 else float("inf")))
    return worst


def modules_named(paths: Sequence[str | None]) -> str:
    """`a.b`, `c` (the model itself for the empty path), in order, once each."""
    names = dict.fromkeys("the model itself" if p == "" else f"`{p}`" for p in paths if p is not None)
    return ", ".join(names) if names else "the model"


def fused_note(fused: Sequence[tuple[str, str | None]], script_paths: Sequence[tuple[str, str]]) -> str | None:
    """The note for fused attention kernels that ran while recording (op, module path where known), if any."""
    if not fused:
        return None
    ops = sorted({op for op, _ in fused})
    paths: list[str | None] = [path for _, path in fused]
    if all(p is None for p in paths):  # a TorchScript archive: the graph says where its attention nodes are
        paths = [path for op, path in script_paths if op in FUSED_ATTENTION] or [p for _, p in script_paths]
    return (
        f"attention ran fused in {modules_named(paths)} ({', '.join(f'aten.{op}' for op in ops)}) and its "
        "decomposition could not stand in for it: the ops inside it are not paired, so an error inside is named "
        "at the nearest recorded node"
    )
