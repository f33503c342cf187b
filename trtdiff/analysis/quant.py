"""Quantized tensors judged in quantization steps (the figure is defined in trtdiff.analysis.noise).

Between a QuantizeLinear and its DequantizeLinear a tensor holds integers: comparing it with the
float model by cosine and a relative error made for float32 rounding calls every INT8 layer
diverged. A tensor the graph's own Q/DQ nodes quantize (trtdiff.pairing.qdq.quantizations) is
judged instead by its error in steps of that DequantizeLinear's scale against
`max_quant_steps`; NaN/Inf that differ and a shape mismatch still diverge. Every other tensor,
and every tensor of a graph with no Q/DQ, keeps its figures and verdict unchanged (nothing is
computed for them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from trtdiff.analysis.noise import QUANT_PERCENTILE, quant_steps
from trtdiff.backends.store import to_host
from trtdiff.report import Reason

if TYPE_CHECKING:
    from trtdiff.pairing.qdq import Quantization
    from trtdiff.report import PairMetrics, Thresholds

_KEPT = frozenset({"non_finite", "shape", "mismatches"})  # reasons that stand whatever the precision


def in_steps(
    reference: Any,
    candidate: Any,
    metrics: PairMetrics,
    tensor: str,
    quantized: Mapping[str, Quantization],
    thresholds: Thresholds,
) -> PairMetrics:
    """`metrics` of `reference` against `candidate` judged in quantization steps where `tensor` is
    quantized; unchanged otherwise."""
    quantization = quantized.get(tensor)
    if quantization is None or metrics.max_abs is None or metrics.mismatches is not None or metrics.shape_mismatch:
        return metrics
    ref = np.asarray(to_host(reference), dtype=np.float64).reshape(-1)
    cand = np.asarray(to_host(candidate), dtype=np.float64).reshape(-1)
    delta = np.abs(ref - cand)
    delta = delta[np.isfinite(delta)]
    error = float(np.percentile(delta, QUANT_PERCENTILE)) if delta.size else 0.0
    steps = quant_steps(error, quantization.scale)
    reasons = [r for r in metrics.reasons if r.metric in _KEPT]
    if steps > thresholds.max_quant_steps:
        reasons.append(Reason("quant_steps", steps, thresholds.max_quant_steps, detail=quantization.node))
    return dataclasses.replace(metrics, quant_steps=steps, reasons=tuple(reasons), diverged=bool(reasons))
