"""How much of the output's error, and of the mIoU, each culprit costs.

For each culprit in topological order, the candidate runs the whole graph again with the
reference's value injected at that culprit's output and at every culprit before it, on the
same samples: what is left of the final output's error, and with segmentation outputs the
candidate's mIoU, is what fixing those culprits would give. The shares add up along the
graph: the last injection leaves what no culprit explains.

The samples (and the reference's values on each, a PyTorch recording per sample) are read
once into a tensor store (memory up to its budget, then disk); then each injected model is
opened, run on every stored sample and closed before the next, so one engine is loaded at a
time. A TensorRT failure on an injected model is a note; the attributions already made stand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.analysis.culprits import close_backend
from trtdiff.analysis.metrics import compare_tensors
from trtdiff.analysis.shadow import inject
from trtdiff.backends.base import fetch
from trtdiff.backends.store import TensorStore
from trtdiff.errors import describe_error
from trtdiff.gate.checks import SegmentationTally, segmentation_output
from trtdiff.report import Attribution
from trtdiff.source.onnx_graph import graph_from_model
from trtdiff.source.samples import Sample

if TYPE_CHECKING:
    from trtdiff.backends.base import OnnxBackend
    from trtdiff.report import BackendPair, Culprit, PairMetrics, SampleResult, SegmentationSummary, Thresholds
    from trtdiff.source.onnx_graph import GraphInfo

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


def attribute(
    inputs: AttributionInputs, culprits: Sequence[Culprit], notes: list[str] | None = None
) -> tuple[Attribution, ...]:
    """Per culprit, cumulative along each pair's culprits: the final error and mIoU after injecting.

    The samples (and the reference's values on each) are read once into a store; each
    injection then runs over them with its own runner, opened and closed in turn.
    """
    injections = [
        _Injection(pair, chain[:count], inputs)
        for pair in dict.fromkeys(c.pair for c in culprits)
        for chain in [[c for c in culprits if c.pair == pair]]
        for count in range(1, len(chain) + 1)
    ]
    wanted = list(dict.fromkeys([*(c.tensor for c in culprits), *inputs.graph.graph_outputs]))
    with TensorStore() as store:
        stored = [
            _store(index, sample, feeds, reference(wanted), store)
            for index, (sample, feeds, reference) in enumerate(inputs.samples())
        ]
        for injection in injections:
            injection.run_all(stored, store, notes)
    return tuple(a for injection in injections if (a := injection.result(_before(inputs, injection.pair))))


@dataclass(frozen=True)
class _Stored:
    """One sample in the store: its name, and the keys of its label, feeds and reference values."""

    name: str
    index: int
    feeds: tuple[str, ...]
    values: tuple[str, ...]
    has_label: bool


def _store(
    index: int, sample: Sample, feeds: Mapping[str, np.ndarray], values: Mapping[str, np.ndarray], store: TensorStore
) -> _Stored:
    for name, value in feeds.items():
        store.put((index, "feed", name), np.asarray(value))
    for name, value in values.items():
        store.put((index, "value", name), np.asarray(value))
    if sample.label is not None:
        store.put((index, "label"), np.asarray(sample.label))
    return _Stored(sample.name, index, tuple(feeds), tuple(values), sample.label is not None)


def _load(stored: _Stored, store: TensorStore) -> tuple[Sample, dict[str, np.ndarray], dict[str, np.ndarray]]:
    feeds = {name: store.get((stored.index, "feed", name)) for name in stored.feeds}
    values = {name: store.get((stored.index, "value", name)) for name in stored.values}
    label = store.get((stored.index, "label")) if stored.has_label else None
    return Sample(stored.name, (), label), feeds, values


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


class _Injection:
    """The candidate with the reference's values at some culprits' outputs, run sample by sample."""

    def __init__(self, pair: BackendPair, culprits: Sequence[Culprit], inputs: AttributionInputs) -> None:
        self.pair, self.culprit, self.inputs = pair, culprits[-1], inputs
        self.tensors = [c.tensor for c in culprits]
        graph = inputs.graph
        self.graph = graph_from_model(inject(graph, self.tensors), graph.path.with_suffix(".injected.onnx"))
        self.runner: OnnxBackend | None = None
        self.unavailable = False
        self.metrics: list[PairMetrics] = []
        self.tally: SegmentationTally | None = None

    def run_all(self, stored: Sequence[_Stored], store: TensorStore, notes: list[str] | None) -> None:
        """Run the injected graph on every stored sample with one runner, closed at the end."""
        try:
            for item in stored:
                self.add(*_load(item, store))
        except Exception as error:
            if self.pair.candidate != "tensorrt" or notes is None:
                raise
            self.unavailable = True
            notes.append(
                f"attribution: TensorRT failed on the model injected at {self.culprit.onnx_node}, so its "
                f"attribution is missing ({describe_error(error)}); the comparison and the other attributions stand"
            )
        finally:
            if self.runner is not None:
                close_backend(self.runner)

    def add(self, sample: Sample, feeds: Mapping[str, np.ndarray], values: Mapping[str, np.ndarray]) -> None:
        """Run the injected graph on one sample and compare its outputs with the reference's."""
        if self.unavailable:
            return
        fed = {**feeds, **_pick(values, self.tensors)}
        if self.runner is None:
            self.runner = self.inputs.open_like(self.pair.candidate, self.graph, fed)
            if self.runner is None:
                self.unavailable = True
                return
        outputs = list(self.inputs.graph.graph_outputs)
        got = fetch(self.runner, fed, [o for o in outputs if o not in self.tensors])
        got.update(_pick(values, [o for o in outputs if o in self.tensors]))  # an injected output is the reference's
        for output in outputs:
            if output in values and output in got:
                self.metrics.append(compare_tensors(values[output], got[output], self.inputs.thresholds))
        self.tally = _tally(self.tally, self.inputs, self.pair, values, got, sample)

    def result(self, before: _Figures) -> Attribution | None:
        """What the injection left of the error, beside `before` (None where the candidate cannot be reopened)."""
        if self.unavailable or self.runner is None:
            return None
        miou = None
        if self.tally is not None:
            summary = self.tally.summary(self.pair.reference)
            miou = (
                summary.label_miou.get(self.pair.candidate)
                if summary.label_miou
                else summary.agreement_miou.get(self.pair)
            )
        recovered = None if miou is None or before.miou is None else miou - before.miou
        return Attribution(
            onnx_node=self.culprit.onnx_node,
            tensor=self.culprit.tensor,
            pair=self.pair,
            final_rel_err_before=before.rel_err,
            final_rel_err_after=_worst_rel(self.metrics),
            final_cosine_before=before.cosine,
            final_cosine_after=_worst_cosine(self.metrics),
            miou_before=before.miou,
            miou_after=miou,
            miou_recovered=recovered,
        )


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
