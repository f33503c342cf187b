"""How much of the output's error, and of the mIoU, each culprit costs.

For each culprit in topological order, the candidate runs the whole graph again with the
reference's value injected at that culprit's output and at every culprit before it, on the
same samples: what is left of the final output's error, and with segmentation outputs the
candidate's mIoU, is what fixing those culprits would give. The shares add up along the
graph: the last injection leaves what no culprit explains.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.backends.base import fetch
from trtdiff.gate import SegmentationTally, segmentation_output
from trtdiff.metrics import compare_tensors
from trtdiff.onnx_graph import graph_from_model
from trtdiff.report import Attribution
from trtdiff.shadow import inject

if TYPE_CHECKING:
    from trtdiff.backends.base import OnnxBackend
    from trtdiff.onnx_graph import GraphInfo
    from trtdiff.report import BackendPair, Culprit, PairMetrics, SampleResult, SegmentationSummary, Thresholds
    from trtdiff.samples import Sample

# The reference's values on one sample, by ONNX tensor name.
SampleValues = Callable[[Sequence[str]], dict[str, np.ndarray]]
OpenLike = Callable[[str, "GraphInfo", Mapping[str, np.ndarray]], "OnnxBackend | None"]


@dataclass(frozen=True)
class AttributionInputs:
    """The comparison's graph and samples, each sample's reference values, and what it measured."""

    graph: GraphInfo
    samples: Callable[[], Iterable[tuple[Sample, Mapping[str, np.ndarray], SampleValues]]]
    open_like: OpenLike
    results: Sequence[SampleResult]
    segmentation: SegmentationSummary | None
    thresholds: Thresholds


def attribute(inputs: AttributionInputs, culprits: Sequence[Culprit]) -> tuple[Attribution, ...]:
    """Per culprit, cumulative along each pair's culprits: the final error and mIoU after injecting."""
    attribution: list[Attribution] = []
    for pair in dict.fromkeys(c.pair for c in culprits):
        chain = [c for c in culprits if c.pair == pair]
        before = _before(inputs, pair)
        for count in range(1, len(chain) + 1):
            after = _after(inputs, pair, [c.tensor for c in chain[:count]])
            if after is None:
                break
            culprit = chain[count - 1]
            recovered = None if after.miou is None or before.miou is None else after.miou - before.miou
            attribution.append(
                Attribution(
                    onnx_node=culprit.onnx_node,
                    tensor=culprit.tensor,
                    pair=pair,
                    final_rel_err_before=before.rel_err,
                    final_rel_err_after=after.rel_err,
                    final_cosine_before=before.cosine,
                    final_cosine_after=after.cosine,
                    miou_before=before.miou,
                    miou_after=after.miou,
                    miou_recovered=recovered,
                )
            )
    return tuple(attribution)


@dataclass(frozen=True)
class _Figures:
    """The worst final-output figures over the samples, and the candidate's mIoU."""

    rel_err: float
    cosine: float
    miou: float | None


def _before(inputs: AttributionInputs, pair: BackendPair) -> _Figures:
    metrics = [m for r in inputs.results for per_pair in r.outputs.values() if (m := per_pair.get(pair)) is not None]
    seg = inputs.segmentation
    miou = None
    if seg is not None:
        miou = seg.label_miou.get(pair.candidate) if seg.label_miou else seg.agreement_miou.get(pair)
    return _Figures(_worst_rel(metrics), _worst_cosine(metrics), miou)


def _after(inputs: AttributionInputs, pair: BackendPair, tensors: list[str]) -> _Figures | None:
    graph = inputs.graph
    injected = graph_from_model(inject(graph, tensors), graph.path.with_suffix(".injected.onnx"))
    outputs = list(graph.graph_outputs)
    metrics: list[PairMetrics] = []
    tally: SegmentationTally | None = None
    runner: OnnxBackend | None = None
    for sample, feeds, reference in inputs.samples():
        values = reference([*tensors, *outputs])
        if runner is None:
            runner = inputs.open_like(pair.candidate, injected, {**feeds, **_pick(values, tensors)})
            if runner is None:
                return None
        got = fetch(runner, {**feeds, **_pick(values, tensors)}, [o for o in outputs if o not in tensors])
        got.update(_pick(values, [o for o in outputs if o in tensors]))  # an injected output is the reference's
        for output in outputs:
            if output in values and output in got:
                metrics.append(compare_tensors(values[output], got[output], inputs.thresholds))
        tally = _tally(tally, inputs, pair, values, got, sample)
    miou = None
    if tally is not None:
        summary = tally.summary(pair.reference)
        miou = summary.label_miou.get(pair.candidate) if summary.label_miou else summary.agreement_miou.get(pair)
    return _Figures(_worst_rel(metrics), _worst_cosine(metrics), miou)


def _tally(
    tally: SegmentationTally | None,
    inputs: AttributionInputs,
    pair: BackendPair,
    reference: Mapping[str, np.ndarray],
    candidate: Mapping[str, np.ndarray],
    sample: Sample,
) -> SegmentationTally | None:
    """Add one sample's masks, where the output holds segmentation scores."""
    seg = inputs.segmentation
    output = next(
        (t for t in inputs.graph.graph_outputs if t in reference and segmentation_output(reference[t].shape)), None
    )
    if seg is None or output is None or output not in candidate:
        return tally
    tally = tally or SegmentationTally(seg.num_classes, seg.ignore_index)
    tally.add({pair.reference: reference[output], pair.candidate: candidate[output]}, [pair], sample.label)
    return tally


def _pick(values: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
    return {name: values[name] for name in names if name in values}


def _worst_rel(metrics: Sequence[PairMetrics]) -> float:
    return max((m.rel_err for m in metrics), default=float("nan"))


def _worst_cosine(metrics: Sequence[PairMetrics]) -> float:
    return min((m.cosine for m in metrics), default=float("nan"))
