"""Reduced-precision tensors judged against the error their precision makes (defined in trtdiff.analysis.noise).

In an FP16 or BF16 comparison every layer differs from the float reference by the precision's
own rounding, ten thousand times float32's: cosine and an rtol made for float32 would call every
layer diverged, and a looser rtol would hide a real fault in a layer whose own noise is small.
Each float tensor a reduced-precision backend computes is judged instead by its *noise ratio*:
its rel-err over what the precision's benchmark makes at that tensor (`ReducedPrecision`), against
`max_noise_ratio`. NaN/Inf that differ, a shape mismatch and integer mismatches still diverge.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from trtdiff.analysis.noise import REDUCED_LEVELS
from trtdiff.report import Reason

if TYPE_CHECKING:
    from trtdiff.report import BackendPair, PairMetrics, Thresholds

_KEPT = frozenset({"non_finite", "shape", "mismatches"})  # reasons that stand whatever the precision


@dataclass(frozen=True)
class ReducedPrecision:
    """A comparison in reduced precision: which, the benchmark's error per ONNX tensor, who computes in it.

    `expected`: ONNX tensor -> the benchmark's rel-err against the golden there (tensors without
    one are judged against the precision's rounding alone). `backends`: the backends whose values
    are computed in the precision (a pair with one of them is judged by noise ratio); `emulated`:
    those among them that run the graph without computing in it (OnnxBackend.emulates), whose
    values are no reference for another backend's culprits.
    """

    precision: str
    expected: Mapping[str, float] = field(default_factory=dict)
    backends: frozenset[str] = frozenset()
    emulated: frozenset[str] = frozenset()

    def applies(self, pair: BackendPair | None) -> bool:
        """Whether values of `pair` (None: the graph's own, as the spec evaluator runs it) are judged in it."""
        return pair is None or pair.reference in self.backends or pair.candidate in self.backends

    def error(self, tensor: str) -> float:
        """The error the precision makes at `tensor`: the benchmark's, never less than one ULP of the precision."""
        return max(self.expected.get(tensor, 0.0), REDUCED_LEVELS[self.precision].rel_err)

    @property
    def words(self) -> str:
        """ "FP16" """
        return self.precision.upper()


def in_noise(
    metrics: PairMetrics,
    tensor: str,
    reduced: ReducedPrecision,
    thresholds: Thresholds,
    noise: float | None = None,
) -> PairMetrics:
    """`metrics` of a float tensor judged by its noise ratio (see the module docstring); others unchanged.
    (Quantized tensors never come here: the Judge gives them their steps first.)

    `noise`: the error the precision makes at this node alone (a local error's own noise, measured by
    its float32 twin: analysis.culprits), instead of the benchmark's accumulated error at the tensor."""
    if metrics.rel_err is None or metrics.mismatches is not None or metrics.shape_mismatch:
        return metrics
    rounding = REDUCED_LEVELS[reduced.precision].rel_err / 2  # half an ULP: the node's own output rounded, at least
    ratio = metrics.rel_err / (reduced.error(tensor) if noise is None else max(noise, rounding))
    reasons = [r for r in metrics.reasons if r.metric in _KEPT]
    if ratio > thresholds.max_noise_ratio:
        reasons.append(Reason("noise_ratio", ratio, thresholds.max_noise_ratio, detail=reduced.words))
    return dataclasses.replace(metrics, noise_ratio=ratio, reasons=tuple(reasons), diverged=bool(reasons))


def explained(
    reference: Any,
    candidate: Any,
    metrics: PairMetrics,
    variance: tuple[np.ndarray, int],
    thresholds: Thresholds,
) -> PairMetrics:
    """`metrics` of a node alone judged by its error over what its precision explains there: `variance`, the
    error variance at each position its rounded weights and inputs explain (analysis.quant_noise; with its reduced
    precision's own noise) and the axis of its output channels. The figure is the largest, over the channels, of
    the channel's root mean square error over the root of its mean variance (about 1 for a correct node: a
    scale four times too large in one channel is tens there, where the whole tensor's rms would hide it),
    judged against `max_noise_ratio`; NaN/Inf that differ, shapes and integers still diverge."""
    if metrics.mismatches is not None or metrics.shape_mismatch:
        return metrics
    from trtdiff.backends.store import to_host

    expected, axis = variance
    delta = np.asarray(to_host(candidate), dtype=np.float64) - np.asarray(to_host(reference), dtype=np.float64)
    if delta.shape != expected.shape:
        return metrics
    delta = np.where(np.isfinite(delta), delta, 0.0)
    others = tuple(i for i in range(delta.ndim) if i != axis)
    error = np.mean(np.square(delta), axis=others)
    explained_by = np.mean(expected, axis=others)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.sqrt(np.where(explained_by > 0, error / explained_by, np.where(error > 0, np.inf, 0.0)))
    ratio = float(np.max(ratios, initial=0.0))
    reasons = [r for r in metrics.reasons if r.metric in _KEPT]
    if ratio > thresholds.max_noise_ratio:
        detail = "its weights' and inputs' rounding"
        reasons.append(Reason("noise_ratio", ratio, thresholds.max_noise_ratio, detail=detail))
    return dataclasses.replace(metrics, noise_ratio=ratio, reasons=tuple(reasons), diverged=bool(reasons))
