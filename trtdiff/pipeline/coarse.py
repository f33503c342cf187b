"""Coarse to fine (`--capture stats`): statistics for every layer, every value only around the first suspicious one.

1. The first recording of PyTorch, the one the pairing reads, summarizes each value as the
   forward makes it (analysis.statistics) and holds values only within its share of
   `--memory-limit`, and the final outputs whatever their size: nothing is written to disk
   (pipeline.reference.FirstRecording).
2. Sample 0's tensors come from the ONNX backends chunk by chunk (the first one runs its graph
   once, in segments where they do not fit), are summarized where they are and dropped; every
   pair of summaries is judged (`Judge.summaries`), the final outputs compared in full (`statistics_pass`).
3. Where a layer is suspicious, PyTorch is recorded again keeping only the REGION layers around
   the first one, the final outputs and what their nodes read (`kept_near`), the backends are
   asked for those tensors, and those layers are compared in full; the culprit pass then runs on them alone,
   each node fed the reference's values at its inputs. Every other layer keeps the figures of
   its statistics, marked so (`PairMetrics.statistics`).

`compare_statistics` runs those steps for a comparison (pipeline.run.Run).

The cost is one forward and one run of each backend, and a second of each only where something
is suspicious; memory is one chunk, the summaries (a few kilobytes a tensor) and the outputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.analysis.control_flow import held_inside
from trtdiff.analysis.engine import BackendValues, Compared, Engine, Pass, ValueSource
from trtdiff.analysis.results import build_layers, sample_results
from trtdiff.analysis.statistics import Summary, summarize
from trtdiff.backends.store import to_host
from trtdiff.pipeline.prepare import Progress, timed

if TYPE_CHECKING:
    from trtdiff.backends.pytorch.records import TorchCapture
    from trtdiff.pairing.pairs import Pairing
    from trtdiff.pipeline.run import Run
    from trtdiff.report import BackendPair, Layer, PairMetrics, SampleResult, SegmentationSummary
    from trtdiff.source.onnx_graph import GraphInfo
    from trtdiff.source.samples import SampleSource

REGION = 8
"""Layers compared in full on each side of the first suspicious one (in the order layers are numbered)."""


def statistics_pass(current: Pass, reference: Mapping[str, Summary], engine: Engine) -> tuple[Compared, list[str]]:
    """Sample 0 compared by statistics (the final outputs in full), and its suspicious tensors in order.

    `reference`: PyTorch's summaries by ONNX tensor; the PyTorch source of `current` gives only the
    final outputs. The ONNX backends' values come in the engine's chunks (`Engine.chunks`), each
    summarized where it is and dropped; each pair is judged by the engine's judge.
    """
    finals = set(engine.outputs)
    backends = Pass(current.sample, tuple(s for s in current.sources if isinstance(s, BackendValues)), current.tensors)
    torch = next((s for s in current.sources if not isinstance(s, BackendValues)), None)
    kept: dict[str, dict[str, np.ndarray]] = {s.name: {} for s in current.sources}
    if torch is not None:
        kept[torch.name] = {t: to_host(v) for t, v in torch.values([t for t in current.tensors if t in finals]).items()}
    metrics: dict[str, dict[BackendPair, PairMetrics]] = {}
    flagged: set[str] = set()
    for group, values in engine.chunks(backends):
        summed: dict[str, dict[str, Summary]] = {}
        for name, tensors in values.items():
            kept[name].update((t, v) for t, v in tensors.items() if t in finals)
            summed[name] = {t: summarize(v) for t, v in tensors.items() if t not in finals}
        del values
        if torch is not None:
            summed[torch.name] = {t: reference[t] for t in group if t in reference and t not in finals}
        for tensor in group:
            if tensor in finals:  # every value of the final outputs
                entry = engine.compare(tensor, kept)
            else:
                entry, suspicious = _by_summaries(tensor, summed, engine)
                if suspicious:
                    flagged.add(tensor)
            if entry:
                metrics[tensor] = entry
    ordered = {t: metrics[t] for t in current.tensors if t in metrics}
    return Compared(current.sample, ordered, kept), [t for t in current.tensors if t in flagged]


def _by_summaries(
    tensor: str, summed: Mapping[str, Mapping[str, Summary]], engine: Engine
) -> tuple[dict[BackendPair, PairMetrics], bool]:
    """`tensor` judged by its summaries for each pair that has both (Judge.summaries); whether one is suspicious."""
    entry: dict[BackendPair, PairMetrics] = {}
    suspicious = False
    for pair in engine.pairs:
        ref, cand = summed.get(pair.reference, {}).get(tensor), summed.get(pair.candidate, {}).get(tensor)
        if ref is not None and cand is not None:
            entry[pair], flagged = engine.judge.summaries(tensor, ref, cand, pair)
            suspicious = suspicious or flagged
    return entry, suspicious


def region(tensors: Sequence[str], first: str, outputs: Sequence[str]) -> tuple[str, ...]:
    """The layers compared in full: REGION on each side of the first suspicious tensor `first`, and the final
    outputs (compared in full anyway: their nodes are searched for culprits too), in the order of `tensors`."""
    at = list(tensors).index(first)
    near = set(tensors[max(0, at - REGION) : at + REGION + 1]) | set(outputs)
    return tuple(t for t in tensors if t in near)


def kept_near(graph: GraphInfo, pairing: Pairing, capture: TorchCapture, tensors: Sequence[str]) -> frozenset[str]:
    """The recorded values a full comparison of `tensors` and its culprit pass read: theirs, their nodes' inputs',
    back through every input with no recorded value of its own (a derived value is computed from its node's
    inputs; the culprit pass runs an unpaired one, a Flatten before the last Gemm, inside the node's subgraph,
    from the paired values before it), with an If's branch values."""
    wanted = set(tensors)
    for tensor in tensors:
        node = graph.node_of(tensor)
        if node is not None:
            wanted.update(t for t in node.inputs if t)
    stack = [t for t in wanted if _computed(pairing, t)]
    while stack:
        node = graph.node_of(stack.pop())
        for name in node.inputs if node is not None else ():
            if name and name not in wanted:
                wanted.add(name)
                if _computed(pairing, name):
                    stack.append(name)
    keys = {pairing.pairs[t].key for t in wanted if t in pairing.pairs}
    keys.update(held_inside(graph, capture, pairing))
    return frozenset(keys)


def _computed(pairing: Pairing, tensor: str) -> bool:
    """Whether the value of `tensor` is computed from its node's inputs: derived, or not paired at all."""
    return tensor not in pairing.pairs or _derived(pairing, tensor)


def _derived(pairing: Pairing, tensor: str) -> bool:
    pair = pairing.pairs.get(tensor)
    return pair is not None and pairing.derivation is not None and pairing.derivation.owns(pair.key)


def merge(layers: Sequence[Layer], full: Sequence[Layer]) -> list[Layer]:
    """`layers` (figures from statistics) with the layers of `full` (every value compared) in their place."""
    by_tensor = {layer.tensor: layer for layer in full}
    return [dataclasses.replace(by_tensor[x.tensor], index=x.index) if x.tensor in by_tensor else x for x in layers]


def statistics_note(layers: Sequence[Layer], compared: Sequence[str], first: str | None) -> str:
    """What the report says of a statistics comparison: which verdicts come from statistics alone."""
    alone = sum(1 for layer in layers if any(m.statistics for m in layer.pairs.values()))
    head = (
        f"--capture stats: {alone} of {len(layers)} layers judged from statistics alone (bounds: a layer they fail "
        "fails in full; one they pass may still fail between the sampled positions)"
    )
    if first is None:
        return f"{head}; no layer was suspicious, so none was compared in full but the final outputs"
    return (
        f"{head}; {len(compared)} layers were compared in full: those around the first suspicious one, {first}, "
        "and the final outputs"
    )


def compare_statistics(
    run: Run, samples: SampleSource, summaries: Mapping[str, Summary], timings: dict[str, float], say: Progress
) -> tuple[Run, list[Layer], list[SampleResult], SegmentationSummary | None]:
    """`--capture stats` (pipeline.coarse): sample 0 by statistics, the region around its first suspicious layer in
    full (the run then reads that recording), every sample's outputs in full."""
    prepared, reference = run.prepared, run.reference
    graph = prepared.graph
    say(f"running {', '.join(b.name for b in prepared.backends)} and comparing every layer's statistics")
    passes = run.passes(samples.stream(prepared.model_feeds, prepared.input_names, prepared.dtypes), say)
    current = next(passes)
    by_tensor = reference.summaries(summaries)
    outputs = tuple(graph.graph_outputs)
    with timed(timings, "run_and_compare"):
        first, suspicious = statistics_pass(current, by_tensor, run.engine())
    layers = build_layers(graph, first.metrics, reference.pairing, reference.capture)
    if suspicious:
        tensors = region([layer.tensor for layer in layers], suspicious[0], outputs)
        say(f"comparing the {len(tensors)} layers around {suspicious[0]} in full")
        with timed(timings, "region"):
            run, full = _recorded_region(run, current, tensors, suspicious[0])
        layers = merge(layers, full)
    with timed(timings, "samples"):
        results, segmentation = sample_results(
            chain([first], run.engine().run(passes)), outputs, run.pairs, run.backends[0], run.options.gate.ignore_index
        )
    return run, layers, results, segmentation


def _recorded_region(run: Run, current: Pass, tensors: tuple[str, ...], first: str) -> tuple[Run, list[Layer]]:
    """The layers `tensors` compared in full: PyTorch (where it takes part) recorded again keeping what they and
    their culprit pass read, every ONNX backend asked for them."""
    prepared, reference = run.prepared, run.reference
    graph, pairing, capture = prepared.graph, reference.pairing, reference.capture
    sources: list[ValueSource] = [BackendValues(b, prepared.feeds) for b in prepared.backends]
    if reference.recorder is not None and pairing is not None and capture is not None:
        reference = reference.region(kept_near(graph, pairing, capture, tensors) | frozenset(capture.output_keys))
        assert reference.fine is not None
        sources.insert(0, reference.fine)
    compared = next(run.engine().run([Pass(current.sample, tuple(sources), tensors)]))
    fine = dataclasses.replace(run, reference=reference, region=tensors, region_first=first)
    recorded = reference.fine.capture if reference.fine is not None else None
    return fine, build_layers(graph, compared.metrics, pairing, recorded)
