"""How much of the output's error, and of the mIoU, each culprit costs: by itself, and with those before it.

The candidate runs the whole graph again, on the same samples, with the reference's value
injected in place of some culprits' outputs; what is left of the final output's error, and
with segmentation outputs the candidate's mIoU, is what fixing those culprits would give.

- Cumulative: for each culprit in topological order, injected there and at every culprit
  before it on the pair. The figures add up along the graph; the last injection leaves what
  no culprit explains.
- Alone: what fixing that culprit by itself recovers. Injecting at a culprit also replaces
  whatever error reaches it from culprits that feed it, so those are credited to them: the
  culprit's own recovery is that of injecting at it and at the culprits feeding it, less
  that of injecting at those alone. Without a culprit feeding it, that is injecting at it
  alone, measured exactly; otherwise the difference of two measured runs (the injection at
  a model output replaces every error before it, which is not what fixing it alone gives).
  Where fixing the feeding culprits recovers nothing measurable, nothing is credited to them.
  On a chain of culprits (each feeding the next) these are the steps of the cumulative
  figures, and cost no extra run.

A recovery smaller than noise is not measurable: with mIoU, less than one pixel's share of
it (`pixel_share`); without, a final rel-err that falls by no more than the rtol and a cosine
that rises by no more than 1 - min-cosine.

The samples (and the reference's values on each, a PyTorch recording per sample) are read
once into a tensor store (memory up to its budget, then disk); then each injected model is
opened, run on every stored sample and closed before the next, so one engine is loaded at a
time. A compiled runtime's failure (TensorRT, OpenVINO) on an injected model is a note; the
attributions already made stand.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.analysis.metrics import compare_tensors
from trtdiff.analysis.segmentation import SegmentationTally, segmentation_output
from trtdiff.analysis.shadow import as_onnx, inject
from trtdiff.backends.base import fetch
from trtdiff.backends.registry import BACKENDS, tolerates_rewrite_failure
from trtdiff.backends.store import TensorStore
from trtdiff.errors import describe_error
from trtdiff.options import DEFAULT_MEMORY_BYTES
from trtdiff.report import Attribution, number
from trtdiff.source.onnx_graph import graph_from_model
from trtdiff.source.samples import Sample

if TYPE_CHECKING:
    from trtdiff.backends.base import OnnxBackend
    from trtdiff.report import BackendPair, Culprit, PairMetrics, SampleResult, SegmentationSummary, Thresholds
    from trtdiff.source.onnx_graph import GraphInfo

# The reference's values on one sample, by ONNX tensor name.
SampleValues = Callable[[Sequence[str]], dict[str, np.ndarray]]
OpenLike = Callable[[str, "GraphInfo", Mapping[str, np.ndarray]], "OnnxBackend | None"]


MAX_ATTRIBUTED = 5
"""Culprits injected per backend pair, in topological order: attribution's cost stays bounded whatever their count."""


@dataclass(frozen=True)
class AttributionInputs:
    """The comparison's graph and samples, each sample's reference values, and what it measured."""

    graph: GraphInfo
    samples: Callable[[], Iterable[tuple[Sample, Mapping[str, np.ndarray], SampleValues]]]
    open_like: OpenLike
    results: Sequence[SampleResult]
    segmentation: SegmentationSummary | None
    thresholds: Thresholds
    store_bytes: int = DEFAULT_MEMORY_BYTES  # the samples' values held in memory, past it on disk (the budget's store)
    say: Callable[[str], None] = lambda _text: None  # progress: one line as each injected graph starts its samples


def attribute(
    inputs: AttributionInputs, culprits: Sequence[Culprit], notes: list[str] | None = None
) -> tuple[Attribution, ...]:
    """Per culprit, the final error and mIoU after fixing it alone, and it with every earlier one.

    The samples (and the reference's values on each) are read once into a store; each set of
    culprits is injected once, and each injection runs over the stored samples with its own
    runner, opened and closed in turn. A compiled runtime's failure there is added to `notes`.
    Each culprit costs up to three runs of the graph per sample, so only the first
    `MAX_ATTRIBUTED` culprits of each pair are injected (the earliest: the others most often
    inherit from them); `notes` says how many were left out.
    """
    injections: dict[tuple[BackendPair, frozenset[str]], _Injection] = {}

    def injection(pair: BackendPair, chosen: Sequence[Culprit]) -> _Injection | None:
        if not chosen:
            return None
        key = (pair, frozenset(c.tensor for c in chosen))
        if key not in injections:
            injections[key] = _Injection(pair, chosen, inputs)
        return injections[key]

    rows: list[tuple[Culprit, _Injection, _Injection, _Injection | None]] = []
    for pair in dict.fromkeys(c.pair for c in culprits):
        chain = [c for c in culprits if c.pair == pair]
        if len(chain) > MAX_ATTRIBUTED and notes is not None:
            notes.append(
                f"attribution: the first {MAX_ATTRIBUTED} of {len(chain)} culprits on {pair} were injected; the "
                f"{len(chain) - MAX_ATTRIBUTED} after them were not (each costs up to three runs of the graph a sample)"
            )
        chain = chain[:MAX_ATTRIBUTED]
        for count, culprit in enumerate(chain, start=1):
            feeding = _feeding(inputs.graph, culprit, chain)
            together = injection(pair, chain[:count])
            with_it = injection(pair, [*feeding, culprit])
            assert together is not None and with_it is not None
            rows.append((culprit, together, with_it, injection(pair, feeding)))
    wanted = list(dict.fromkeys([*(c.tensor for c in culprits), *inputs.graph.graph_outputs]))
    with TensorStore(inputs.store_bytes) as store:
        stored = [
            _store(index, sample, feeds, reference(wanted), store)
            for index, (sample, feeds, reference) in enumerate(inputs.samples())
        ]
        for number, each in enumerate(injections.values(), start=1):
            inputs.say(f"attribution: injected graph {number} of {len(injections)} on {each.pair}")
            each.run_all(stored, store, notes)
    return tuple(a for row in rows if (a := _attribution(inputs, *row)) is not None)


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


def _feeding(graph: GraphInfo, culprit: Culprit, chain: Sequence[Culprit]) -> list[Culprit]:
    """The culprits of `chain` whose output reaches `culprit`'s node through the graph, in order."""
    index = graph.producer_of.get(culprit.tensor)
    if index is None:
        return []
    upstream = graph.ancestors(index)
    return [c for c in chain if c is not culprit and graph.producer_of.get(c.tensor) in upstream]


def _attribution(
    inputs: AttributionInputs,
    culprit: Culprit,
    together: _Injection,
    with_it: _Injection,
    feeding: _Injection | None,
) -> Attribution | None:
    """The culprit's figures: cumulative from `together`, alone from `with_it` less `feeding` (None: not run)."""
    before = _before(inputs, culprit.pair)
    cumulative, alone = together.figures(), with_it.figures()
    fed = feeding.figures() if feeding is not None else (before, None)
    if cumulative is None or alone is None or fed is None:
        return None
    (after, share), (fixed, _), (base, _) = cumulative, alone, fed
    thresholds = inputs.thresholds
    # Alone: what injecting at the culprit adds to injecting at the culprits feeding it (`base`), or
    # to nothing where fixing those recovers nothing measurable (crediting them noise would skew it).
    base = base if _measurable(before, base, thresholds, share) else before
    miou_alone = _plus(before.miou, _gain(base.miou, fixed.miou))
    return Attribution(
        onnx_node=culprit.onnx_node,
        tensor=culprit.tensor,
        pair=culprit.pair,
        final_rel_err_before=_known(before.rel_err),
        final_rel_err_after=_known(after.rel_err),
        final_cosine_before=_known(before.cosine),
        final_cosine_after=_known(after.cosine),
        miou_before=before.miou,
        miou_after=after.miou,
        miou_recovered=_gain(before.miou, after.miou),
        final_rel_err_after_alone=_known(max(before.rel_err - (base.rel_err - fixed.rel_err), 0.0)),
        final_cosine_after_alone=_known(min(before.cosine + (fixed.cosine - base.cosine), 1.0)),
        miou_after_alone=miou_alone,
        miou_recovered_alone=_gain(before.miou, miou_alone),
        measurable=_measurable(before, after, thresholds, share),
        measurable_alone=_measurable(base, fixed, thresholds, share),
        miou_pixel_share=share if before.miou is not None else None,
        final_non_finite_before=before.non_finite,
        final_non_finite_after=after.non_finite,
        final_non_finite_after_alone=max(before.non_finite - (base.non_finite - fixed.non_finite), 0),
    )


def _known(figure: float) -> float | None:
    """A final figure for the report: None (n/a) where the outputs had no finite values to compute it over."""
    return None if math.isnan(figure) else figure


def _plus(value: float | None, delta: float | None) -> float | None:
    return None if value is None or delta is None else value + delta


def _gain(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def pixel_share(confusion: np.ndarray) -> float | None:
    """What one pixel is worth in the mIoU of `confusion`: 1 / (classes averaged x pixels counted).

    A pixel that moves into (or out of) a class's intersection changes that class's IoU by
    1/union, at least 1/pixels, and the mean over the classes by at least 1/(classes x
    pixels); a change of the mIoU smaller than that is not one pixel's worth (float noise, or
    a recovery that is none). Pixels counted: those the mIoU counts over all samples (labelled
    and not ignored, against labels); classes averaged: those present in either mask.
    """
    pixels = float(confusion.sum())
    classes = int(((confusion.sum(axis=0) + confusion.sum(axis=1)) > 0).sum())
    return 1.0 / (classes * pixels) if pixels and classes else None


def _measurable(before: _Figures, after: _Figures, thresholds: Thresholds, share: float | None) -> bool:
    """Whether going from `before` to `after` recovers more than noise (see the module docstring).

    Fewer final-output positions whose NaN/Inf differ always counts, with an mIoU too (argmax
    masks can hide NaN that a gate on finite outputs fails).
    """
    if after.non_finite < before.non_finite:
        return True
    if before.miou is not None and after.miou is not None and share is not None:
        return after.miou - before.miou >= share
    rel = before.rel_err - after.rel_err > thresholds.rtol
    cos = after.cosine - before.cosine > 1.0 - thresholds.min_cosine
    return bool(rel or cos)


@dataclass(frozen=True)
class _Figures:
    """The worst final-output figures over the samples, and the candidate's mIoU."""

    rel_err: float
    cosine: float
    miou: float | None
    non_finite: int = 0
    """Positions, over every sample's final outputs, where the two sides' NaN/Inf differ."""


def _before(inputs: AttributionInputs, pair: BackendPair) -> _Figures:
    metrics = [m for r in inputs.results for per_pair in r.outputs.values() if (m := per_pair.get(pair)) is not None]
    seg = inputs.segmentation
    miou = None
    if seg is not None:
        miou = seg.label_miou.get(pair.candidate) if seg.label_miou else seg.agreement_miou.get(pair)
    return _Figures(_worst_rel(metrics), _worst_cosine(metrics), miou, _non_finite(metrics))


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
            if notes is None or not tolerates_rewrite_failure(self.pair.candidate):
                raise
            self.unavailable = True
            title = BACKENDS[self.pair.candidate].title
            notes.append(
                f"attribution: {title} failed on the model injected at {self.culprit.onnx_node}, so its "
                f"attribution is missing ({describe_error(error)}); the comparison and the other attributions stand"
            )
        finally:
            if self.runner is not None:
                self.runner.close()

    def add(self, sample: Sample, feeds: Mapping[str, np.ndarray], values: Mapping[str, np.ndarray]) -> None:
        """Run the injected graph on one sample and compare its outputs with the reference's."""
        if self.unavailable:
            return
        graph = self.inputs.graph
        fed = {**feeds, **{t: as_onnx(graph, t, v) for t, v in _pick(values, self.tensors).items()}}
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

    def figures(self) -> tuple[_Figures, float | None] | None:
        """The final figures the injection left, and one pixel's share of its mIoU (None: it could not run)."""
        if self.unavailable or self.runner is None:
            return None
        miou, share = None, None
        if self.tally is not None:
            summary = self.tally.summary(self.pair.reference)
            labels = bool(summary.label_miou)
            miou = summary.label_miou.get(self.pair.candidate) if labels else summary.agreement_miou.get(self.pair)
            confusion = self.tally.labels.get(self.pair.candidate) if labels else self.tally.agreement.get(self.pair)
            share = pixel_share(confusion) if confusion is not None else None
        figures = _Figures(_worst_rel(self.metrics), _worst_cosine(self.metrics), miou, _non_finite(self.metrics))
        return figures, share


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
    return max((number(m.rel_err) for m in metrics), default=float("nan"))


def _non_finite(metrics: Sequence[PairMetrics]) -> int:
    return sum(m.non_finite_mismatches for m in metrics)


def _worst_cosine(metrics: Sequence[PairMetrics]) -> float:
    return min((number(m.cosine) for m in metrics), default=float("nan"))
