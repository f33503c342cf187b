"""How two values of one tensor are judged: the thresholds, in the units the graph and the run call for.

Float32 tensors by cosine and relative error (analysis.metrics); tensors the graph's own Q/DQ
nodes quantize in quantization steps (analysis.quant); in a reduced-precision comparison, the
float tensors a reduced-precision backend computes by their noise ratio (analysis.reduced). One
object, built once per comparison, used by the engine, the culprit pass and the spec's verdict;
`summaries` judges two tensors' statistics (`--capture stats`, analysis.statistics) the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trtdiff.analysis.metrics import compare_tensors
from trtdiff.analysis.noise import REDUCED_LEVELS
from trtdiff.analysis.quant import in_steps
from trtdiff.analysis.reduced import ReducedPrecision, explained, in_noise

_STANDING = frozenset({"non_finite", "shape", "mismatches", "quant_scale"})  # wrong whatever the precision

if TYPE_CHECKING:
    import numpy as np

    from trtdiff.analysis.statistics import Summary
    from trtdiff.pairing.qdq import Quantization
    from trtdiff.report import BackendPair, PairMetrics, Thresholds


@dataclass(frozen=True)
class Judge:
    """The thresholds, the tensors quantized (empty without Q/DQ), and the reduced precision (None at FP32)."""

    thresholds: Thresholds
    quantized: Mapping[str, Quantization] = field(default_factory=dict)
    reduced: ReducedPrecision | None = None
    unquantized: frozenset[str] = frozenset()
    """In a graph with Q/DQ nodes, the sources whose values are not quantized (the float model): against them,
    a tensor's accumulated error is the quantization of every layer before it (`accumulated`)."""

    def between_runs(self) -> Thresholds:
        """What two runs of one compiled runtime (the plain model against the marked one) are held to: the
        thresholds, with rtol widened at reduced precision to the noise it makes (`max_noise_ratio` ULP of
        it), since splitting a fusion rounds an FP16 value once more."""
        if self.reduced is None:
            return self.thresholds
        noise = self.thresholds.max_noise_ratio * REDUCED_LEVELS[self.reduced.precision].rel_err
        return dataclasses.replace(self.thresholds, rtol=max(self.thresholds.rtol, noise))

    def __call__(
        self,
        tensor: str,
        reference: Any,
        candidate: Any,
        pair: BackendPair | None = None,
        noise: float | None = None,
        explained_by: tuple[np.ndarray, int] | None = None,
    ) -> PairMetrics:
        """The metrics of `candidate` against `reference` for `tensor`, judged in its units (`pair`: whose values).

        `noise`: for a node's local error in a reduced-precision comparison, the error its precision
        makes at that node alone (analysis.culprits measures it), which its noise ratio is taken over.
        `explained_by`: for a node alone reading rounded weights or inputs, the error variance their
        rounding (and its precision) explains at each position, with its output channels' axis
        (analysis.quant_noise): the node is judged by its error over it, against `max_noise_ratio`."""
        metrics = compare_tensors(reference, candidate, self.thresholds)
        if explained_by is not None:
            return explained(reference, candidate, metrics, explained_by, self.thresholds)
        if tensor in self.quantized:
            return in_steps(reference, candidate, metrics, tensor, self.quantized, self.thresholds)
        if self.reduced is not None and self.reduced.applies(pair):
            return in_noise(metrics, tensor, self.reduced, self.thresholds, noise)
        return metrics

    def accumulated(self, tensor: str, reference: Any, candidate: Any, pair: BackendPair) -> PairMetrics:
        """A tensor's error accumulated through the graph, judged as `__call__` does, except in a graph with Q/DQ
        nodes against the float model (`unquantized`): there it is the quantization of every layer before it,
        drift and not a fault, so only NaN/Inf, shapes and integers that differ diverge; each node is judged
        alone (analysis.culprits) and the final outputs by their agreement (gate.checks)."""
        metrics = self(tensor, reference, candidate, pair)
        if pair.reference not in self.unquantized and pair.candidate not in self.unquantized:
            return metrics
        kept = tuple(r for r in metrics.reasons if r.metric in _STANDING)
        return dataclasses.replace(metrics, reasons=kept, diverged=bool(kept), drift=True)

    def summaries(
        self, tensor: str, reference: Summary, candidate: Summary, pair: BackendPair | None = None
    ) -> tuple[PairMetrics, bool]:
        """The bounds two summaries of `tensor` give, judged in its units, and whether the pair is suspicious.

        A verdict from statistics is only ever a proof of failure (analysis.statistics): where the units
        call for a figure the summaries cannot bound, that figure makes the pair suspicious, not diverged:
        a quantized tensor's steps, estimated from the sampled values; a reduced-precision tensor's noise
        ratio where the benchmark has no figure for it (its golden value was not held).
        """
        from trtdiff.analysis.statistics import compare_summaries, suspicious

        metrics = compare_summaries(reference, candidate, self.thresholds)
        flagged = suspicious(reference, candidate, metrics, self.thresholds)
        if metrics.shape_mismatch or metrics.mismatches is not None or metrics.max_abs is None:
            return metrics, flagged
        if tensor in self.quantized:
            estimated = in_steps(reference.sample, candidate.sample, metrics, tensor, self.quantized, self.thresholds)
            kept = tuple(r for r in metrics.reasons if r.metric == "non_finite")
            judged = dataclasses.replace(estimated, reasons=kept, diverged=bool(kept))
            return judged, bool(kept) or estimated.diverged
        if self.reduced is not None and self.reduced.applies(pair):
            judged = in_noise(metrics, tensor, self.reduced, self.thresholds)
            if tensor not in self.reduced.expected:  # against one ULP only: a hint, not a bound
                kept = tuple(r for r in judged.reasons if r.metric != "noise_ratio")
                return dataclasses.replace(judged, reasons=kept, diverged=bool(kept)), judged.diverged
            return judged, judged.diverged
        return metrics, flagged
