"""Q/DQ scales no runtime can compute with: zero, negative or not finite.

QuantizeLinear computes x / scale + zero point (rounded, saturated), DequantizeLinear (q - zero
point) x scale. A scale of 0 sends every value to the integer type's limits on the way in (x / 0)
and every integer to 0 on the way out; a negative one flips every sign; NaN or Inf makes NaN,
Inf or the zero point. Such a scale is the fault wherever it sits, whatever the values: measured
in steps of it, every error is infinite (or none is), so the error of the tensors around it says
nothing, and TensorRT's ONNX parser refuses a scale that is not positive ("Scale coefficients must
all be positive"). A zero scale usually comes from calibration that only ever saw zeros there (a
Relu that never fired). Only constant scales are read (initializers, Constant nodes), and only
those of Q/DQ nodes: a graph without them costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.source.onnx_graph import constant_values

if TYPE_CHECKING:
    from trtdiff.source.onnx_graph import GraphInfo

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
# What a scale of each kind does to every value it applies to, per op.
_EFFECTS = {
    "QuantizeLinear": {
        "zero": "quantizes to the type's limits (x / 0)",
        "negative": "quantizes with its sign flipped",
        "nan": "quantizes to an undefined integer (x / NaN)",
        "inf": "quantizes to the zero point (x / inf)",
    },
    "DequantizeLinear": {
        "zero": "dequantizes to 0",
        "negative": "dequantizes with its sign flipped",
        "nan": "dequantizes to NaN",
        "inf": "dequantizes to inf (NaN at the zero point)",
    },
}


@dataclass(frozen=True)
class ScaleFault:
    """A QuantizeLinear or DequantizeLinear (`node`) whose constant scale (`scale`, a tensor) cannot be right:
    `text` says where and what it does ("is 0 at channel 3 of 8: every value there dequantizes to 0")."""

    node: str
    op_type: str
    scale: str
    text: str

    def describe(self) -> str:
        """ "its scale conv2.weight_scale is 0 at channel 3 of 8: every value there dequantizes to 0" """
        return f"its scale {self.scale} {self.text}"


def scale_faults(graph: GraphInfo) -> dict[str, ScaleFault]:
    """Every Q/DQ node of `graph` whose constant scale is zero, negative or not finite, by node name, in graph
    order; {} for a graph without Q/DQ (nothing read)."""
    nodes = [n for n in graph.nodes if n.op_type in QDQ_OPS and len(n.inputs) > 1]
    if not nodes:
        return {}
    values = constant_values(graph, {n.inputs[1] for n in nodes})
    found = {}
    for node in nodes:
        scale = values.get(node.inputs[1])
        text = fault_text(scale, node.op_type) if scale is not None else None
        if text is not None:
            found[node.name] = ScaleFault(node.name, node.op_type, node.inputs[1], text)
    return found


def fault_text(scale: np.ndarray, op_type: str) -> str | None:
    """What is wrong with `scale` (one value, or one per channel) and what it does to the values `op_type`
    computes ("is 0 at channel 3 of 8: every value there dequantizes to 0"); None for a positive, finite one."""
    flat = np.asarray(scale, dtype=np.float64).reshape(-1)
    bad = np.flatnonzero(~(np.isfinite(flat) & (flat > 0)))
    if flat.size == 0 or bad.size == 0:
        return None
    value = float(flat[bad[0]])
    kind = "nan" if np.isnan(value) else "inf" if np.isinf(value) else "zero" if value == 0 else "negative"
    where, there = "", ""
    if flat.size > 1:
        more = f" and {bad.size - 1} more" if bad.size > 1 else ""
        where, there = f" at channel {int(bad[0])}{more} of {flat.size}", " there"
    return f"is {value:g}{where}: every value{there} {_EFFECTS.get(op_type, _EFFECTS['DequantizeLinear'])[kind]}"
