"""Which node is wrong: local error per node, culprits, drift, and export-or-runtime verdicts.

The accumulated error of a tensor mixes everything upstream. The *local* error runs the
node alone on the candidate, fed with the reference's values for its inputs (one shadow
model holding a copy of every compared node, run once; see shadow.py), and compares its
output with the reference's. In a reduced-precision comparison the local error is judged
against the node's own noise: the same shadow model's float32 twin (analysis.upcast) run on
the same candidate, fed the reference's values unrounded, gives what the precision makes at
that node alone, so a 1% weight change stands out many times over where the benchmark's
accumulated error at the tensor would hide it. A node is a *culprit* when its local error alone breaks the
thresholds and its tensor diverges; a diverged node whose local error holds is inherited.
For each culprit the ONNX spec evaluator (`onnx.reference`) gives a third opinion: agreeing
with the candidate means the ONNX graph computes something else than PyTorch (an export
problem), agreeing with the reference means the runtime deviates from the spec.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.analysis.metrics import compare_tensors
from trtdiff.analysis.noise import is_noise
from trtdiff.analysis.quant_noise import (
    LINEAR,
    WeightRounding,
    channel_axis,
    input_rounding,
    linear_variance,
    moved_like,
    weight_roundings,
)
from trtdiff.analysis.shadow import (
    ShadowModel,
    as_onnx,
    build_shadow,
    cast,
    each_as_onnx,
    embed,
    in_parallel,
    submodel,
)
from trtdiff.analysis.upcast import as_float32
from trtdiff.backends.base import fetch
from trtdiff.backends.registry import BACKENDS, open_backend, spec_evaluator, tolerates_rewrite_failure
from trtdiff.errors import describe_error
from trtdiff.pairing.qdq import exclusion_patterns, to_exclude, unwritable
from trtdiff.report import Contributor, Culprit, Drift, ErrorFigures, number
from trtdiff.source.onnx_graph import graph_from_model, typed_inputs

if TYPE_CHECKING:
    import onnx

    from trtdiff.analysis.judge import Judge
    from trtdiff.backends.base import OnnxBackend
    from trtdiff.report import BackendPair, Layer, PairMetrics, Verdict
    from trtdiff.source.onnx_graph import GraphInfo, NodeInfo

MAX_CONTRIBUTORS = 5
# Reference values by ONNX tensor name, for the tensors among `names` the reference has.
ValuesOf = Callable[[Sequence[str]], dict[str, np.ndarray]]
# Opens a candidate backend of the same kind and settings on another ONNX model (None: cannot).
OpenLike = Callable[[str, "GraphInfo", Mapping[str, np.ndarray]], "OnnxBackend | None"]


@dataclass(frozen=True)
class Reference:
    """One reference backend: its values, and which tensors it has a value for."""

    name: str
    values: ValuesOf
    has: Callable[[str], bool]


@dataclass
class LocalRun:
    """Local errors of one pair, the candidate's local outputs where they diverge, and the shadow model."""

    pair: BackendPair
    metrics: dict[str, PairMetrics]
    diverged: dict[str, tuple[np.ndarray, np.ndarray]]  # tensor -> (reference, candidate's local output)
    shadow: ShadowModel
    feeds: dict[str, np.ndarray]
    overflowed: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Reference values past the graph's type (reduced precision) -> the nodes reading them, which got no
    local error: they stay in higher precision with the overflow (`kept_after`)."""

    def kept_after(self, tensor: str, graph: GraphInfo) -> tuple[str, ...]:
        """The nodes that must stay in higher precision with an overflow at `tensor`: those reading a value
        past the type's range from it, and from them in turn, until the values fit again."""
        kept: list[str] = []
        frontier = [tensor]
        nodes = {node.name: node for node in graph.nodes} if self.overflowed else {}
        while frontier:
            for name in self.overflowed.get(frontier.pop(), ()):
                if name not in kept and name in nodes:
                    kept.append(name)
                    frontier.extend(nodes[name].outputs)
        return tuple(kept)


def local_errors(
    graph: GraphInfo,
    layers: Sequence[Layer],
    pairs: Sequence[BackendPair],
    references: Mapping[str, Reference],
    exact: ValuesOf,
    open_like: OpenLike,
    judge: Judge,
    chunk_bytes: int,
    notes: list[str] | None = None,
) -> list[LocalRun]:
    """The local error of every compared node, per pair whose reference and candidate allow it.

    Each candidate is opened on the shadow model, run, and closed before the next (one engine
    at a time). A compiled runtime's failure there (TensorRT, OpenVINO: BackendSpec.compiled)
    becomes a line in `notes` and that pair has no local errors; everything measured before stands.
    """
    runs: list[LocalRun] = []
    for name, reference in references.items():
        candidates = [p for p in pairs if p.reference == name]
        tensors = [layer.tensor for layer in layers if any(p in layer.pairs for p in candidates)]
        if not candidates or not tensors:
            continue
        shadow = build_shadow(graph, tensors, reference.has)
        shadow = embed(shadow, {t: as_onnx(graph, t, v) for t, v in exact(shadow.exact_inputs).items()})
        values = reference.values(shadow.reference_inputs)
        feeds = each_as_onnx(graph, values)
        shadow, overflowed = _without_unfit(graph, shadow, values, feeds, notes)
        # the inputs as fed: a reference value may have another shape than the graph wrote (a baked dimension)
        shadow = dataclasses.replace(shadow, model=typed_inputs(shadow.model, feeds))
        shadow_graph = graph_from_model(shadow.model, graph.path.with_suffix(".shadow.onnx"))
        twin = _float32_twin(graph, shadow, values, feeds, judge)
        roundings = weight_roundings(graph) if judge.unquantized else {}
        for pair in candidates:
            try:
                runner = open_like(pair.candidate, shadow_graph, feeds)
                if runner is None:
                    continue
                with runner, _opened_twin(open_like, pair, twin, judge) as wider:
                    explain = (
                        _Explain(graph, roundings, feeds, shadow.subgraphs)
                        if pair.reference in judge.unquantized
                        else None
                    )
                    run = _run_local(pair, runner, shadow, feeds, reference, judge, chunk_bytes, wider, explain)
                    runs.append(dataclasses.replace(run, overflowed=overflowed))
            except Exception as error:
                if notes is None or not tolerates_rewrite_failure(pair.candidate):
                    raise
                notes.append(
                    f"culprits: {BACKENDS[pair.candidate].title} failed on the shadow model, so {pair} has no local "
                    f"errors ({describe_error(error)}); the comparison above stands"
                )
    return runs


def _without_unfit(
    graph: GraphInfo,
    shadow: ShadowModel,
    values: Mapping[str, np.ndarray],
    feeds: Mapping[str, np.ndarray],
    notes: list[str] | None,
) -> tuple[ShadowModel, dict[str, tuple[str, ...]]]:
    """`shadow` without the outputs whose nodes read a reference value that does not fit the graph's type,
    and those values -> the nodes reading them.

    In a reduced-precision graph a reference value past float16's range is inf once fed (an
    overflow upstream, the culprit there): every node after it would show NaN/Inf of its own,
    which is not its own error. Those nodes get no local error, and `notes` says why.
    """
    unfit = {t for t, fed in feeds.items() if _overflows(values[t], fed)}
    if not unfit:
        return shadow, {}
    nodes = {node.name: node for node in graph.nodes}
    readers: dict[str, list[str]] = {}
    skipped: list[str] = []
    for tensor, names in shadow.subgraphs.items():
        node = nodes.get(names[0]) if names else None
        read = [t for name in names if name in nodes for t in nodes[name].inputs if t in unfit]
        if read and node is not None:
            skipped.append(tensor)
            for t in read:
                readers.setdefault(t, []).append(node.name)
    if notes is not None and skipped:
        first, node = sorted(unfit)[0], graph.node_of(skipped[0])
        largest = float(np.nanmax(np.abs(np.asarray(values[first], dtype=np.float64))))
        notes.append(
            f"culprits: {len(skipped)} node(s) after an overflow have no local error (e.g. "
            f"{node.name if node is not None else skipped[0]}): the reference's values at their inputs (e.g. "
            f"{first}, up to {largest:.3g}) do not fit {feeds[first].dtype}"
        )
    outputs = {t: local for t, local in shadow.outputs.items() if t not in skipped}
    return dataclasses.replace(shadow, outputs=outputs), {t: tuple(dict.fromkeys(n)) for t, n in readers.items()}


def _overflows(value: np.ndarray, fed: np.ndarray) -> bool:
    """Whether feeding `value` as `fed` (cast to the graph's type) made a finite value inf."""
    if fed.dtype.kind != "f" or np.asarray(value).dtype == fed.dtype or _all_finite(fed):
        return False
    return bool(np.count_nonzero(~np.isfinite(fed)) > np.count_nonzero(~np.isfinite(np.asarray(value))))


def _all_finite(values: np.ndarray) -> bool:
    """Whether every value is finite; for float16 by its exponent bits (all ones: inf or NaN), in integers,
    about 20 times numpy's float16 isfinite, which converts each value to float32 first."""
    if values.dtype == np.float16:
        return not bool(np.any((values.view(np.uint16) & 0x7C00) == 0x7C00))
    return bool(np.isfinite(values).all())


def _float32_twin(
    graph: GraphInfo,
    shadow: ShadowModel,
    values: Mapping[str, np.ndarray],
    feeds: Mapping[str, np.ndarray],
    judge: Judge,
) -> tuple[GraphInfo, dict[str, np.ndarray]] | None:
    """In a reduced-precision comparison, the shadow model's float32 twin and its feeds (the reference's values
    unrounded, as float32): what the node computes without the precision. None at FP32."""
    if judge.reduced is None:
        return None
    twin = as_float32(shadow.model)

    def unrounded(name: str) -> np.ndarray:  # as fed (the graph's shape), but float32 and unrounded
        fed = feeds[name]
        if name in values and (fed.dtype.kind == "f" or fed.dtype.name == "bfloat16"):  # ml_dtypes' kind is "V"
            return cast(np.asarray(values[name]), np.dtype(np.float32), split=False).reshape(fed.shape)
        return fed

    twin_feeds = in_parallel(unrounded, feeds)
    return graph_from_model(twin, graph.path.with_suffix(".float32.shadow.onnx")), twin_feeds


_MOVING = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Cast"})
"""Ops that only move values (or retype them): what a linear node reads through them is the same values, placed."""
_PASSING = frozenset(
    {"Add", "Sub", "Reshape", "Transpose", "Identity", "Cast", "Squeeze", "Unsqueeze", "Flatten"}
    | {"QuantizeLinear", "DequantizeLinear"}
)
"""Ops a node alone may run with its linear node (a Linear's bias Add, its Q/DQ) that add no rounding of their own:
the others are fed the reference's exact values."""


@dataclass(frozen=True)
class _Explain:
    """What a quantized graph's precision explains of each node's local error against the float model: the
    rounding of its quantized weights (analysis.quant_noise) and of its inputs where their Q/DQ runs with it
    (attention's two quantized activations), for the values it was fed, with the reduced precision's own noise
    where the graph computes in one (its output against its float32 twin). Only for a node alone whose
    subgraph is one linear node and ops that pass its error on (`_PASSING`); None elsewhere (judged as before)."""

    graph: GraphInfo
    roundings: Mapping[str, WeightRounding]
    feeds: Mapping[str, np.ndarray]
    subgraphs: Mapping[str, tuple[str, ...]]

    def variance(self, tensor: str, value: np.ndarray, wider: np.ndarray | None) -> tuple[np.ndarray, int] | None:
        """The error variance the precision explains at each position of `tensor` (the node alone's output), and
        the axis of its output channels; None where the node alone is not one linear node reading a rounded input
        and ops that pass its error on."""
        nodes = [n for name in self.subgraphs.get(tensor, ()) if (n := self._named(name)) is not None]
        linear = [n for n in nodes if n.op_type in LINEAR and n.outputs]
        if len(linear) != 1 or any(n is not linear[0] and n.op_type not in _PASSING for n in nodes):
            return None
        node = linear[0]
        rounding = self.roundings.get(node.outputs[0])
        sides: list[tuple[np.ndarray, np.ndarray | None]] = []
        for index in (0, 1):
            if rounding is not None and rounding.weight_input == index:
                sides.append((rounding.squared, rounding.variance))
                continue
            found = self._fed(node.inputs[index], nodes) if index < len(node.inputs) else None
            if found is None:
                return None
            sides.append((np.square(found[0]), found[1]))
        variance = linear_variance(self.graph, node, sides[0], sides[1])
        if variance is None:
            return None
        if wider is not None:  # the reduced precision's own rounding, at each position
            variance = variance + np.square(np.asarray(value, np.float64) - np.asarray(wider, np.float64))
        return variance, channel_axis(node, variance.ndim)

    def _fed(self, tensor: str, nodes: Sequence[NodeInfo]) -> tuple[np.ndarray, np.ndarray | None] | None:
        """The values at a linear node's input as the node alone computes them, and their rounding variance where
        a Q/DQ of its subgraph rounds them on the way (None: fed as they are): from the feeds, through the
        subgraph's shape ops (a Transpose and Reshape of an attention output) and its activation Q/DQ."""
        if tensor in self.feeds:
            return np.asarray(self.feeds[tensor], dtype=np.float64), None
        node = self.graph.node_of(tensor)
        if node is None or node not in nodes:
            return None
        if node.op_type == "DequantizeLinear":
            quantize = self.graph.node_of(node.inputs[0])
            if quantize is None or quantize not in nodes or quantize.op_type != "QuantizeLinear":
                return None
            found = self._fed(quantize.inputs[0], nodes)
            rounding = input_rounding(self.graph, node, found[0]) if found is not None else None
            if found is None or rounding is None:
                return None
            return found[0], rounding if found[1] is None else rounding + found[1]
        if node.op_type not in _MOVING:
            return None
        found = self._fed(node.inputs[0], nodes)
        if found is None:
            return None
        moved = moved_like(self.graph, node, found[0])
        variance = moved_like(self.graph, node, found[1]) if found[1] is not None else None
        return (moved, variance) if moved is not None and (found[1] is None or variance is not None) else None

    def _named(self, name: str) -> NodeInfo | None:
        return next((n for n in self.graph.nodes if n.name == name), None)


@contextmanager
def _opened_twin(
    open_like: OpenLike, pair: BackendPair, twin: tuple[GraphInfo, dict[str, np.ndarray]] | None, judge: Judge
) -> Iterator[tuple[OnnxBackend, Mapping[str, np.ndarray]] | None]:
    """The float32 twin opened on the pair's candidate, with its feeds, where the pair is judged in a reduced
    precision; None otherwise (or where the candidate cannot open it: judged against the benchmark then)."""
    wanted = twin is not None and judge.reduced is not None and judge.reduced.applies(pair)
    runner = open_like(pair.candidate, twin[0], twin[1]) if wanted and twin is not None else None
    if runner is None or twin is None:
        yield None
        return
    with runner:
        yield runner, twin[1]


def _run_local(
    pair: BackendPair,
    runner: OnnxBackend,
    shadow: ShadowModel,
    feeds: Mapping[str, np.ndarray],
    reference: Reference,
    judge: Judge,
    chunk_bytes: int,
    twin: tuple[OnnxBackend, Mapping[str, np.ndarray]] | None = None,
    explain: _Explain | None = None,
) -> LocalRun:
    """The pair's local errors, chunk by chunk; with the float32 `twin` (reduced precision) each judged against
    the node's own noise: its output against the twin's, same node, same inputs."""
    wanted = list(shadow.outputs.values())
    tensor_of = {local: tensor for tensor, local in shadow.outputs.items()}
    run = LocalRun(pair, {}, {}, shadow, dict(feeds))
    inputs = {name: feeds[name] for name in runner_inputs(runner, feeds)}
    for chunk in runner.run(inputs, wanted, max_bytes=chunk_bytes):
        expected = reference.values([tensor_of[local] for local in chunk])
        wider = fetch(twin[0], dict(twin[1]), list(chunk)) if twin is not None else {}
        for local, value in chunk.items():
            tensor = tensor_of[local]
            if tensor not in expected:
                continue
            noise = compare_tensors(wider[local], value, judge.thresholds).rel_err if local in wider else None
            explained = explain.variance(tensor, value, wider.get(local)) if explain is not None else None
            metrics = judge(tensor, expected[tensor], value, pair, noise, explained)
            run.metrics[tensor] = metrics
            if metrics.diverged:
                run.diverged[tensor] = (np.asarray(expected[tensor]), np.asarray(value))
    return run


def runner_inputs(runner: OnnxBackend, feeds: Mapping[str, np.ndarray]) -> list[str]:
    """The feeds the runner's model takes (its graph inputs), in the order given."""
    graph = getattr(runner, "graph", None)
    names = set(graph.graph_inputs) if graph is not None else set(feeds)
    return [name for name in feeds if name in names]


def find_culprits(
    layers: Sequence[Layer],
    runs: Sequence[LocalRun],
    graph: GraphInfo,
    judge: Judge,
    say: Callable[[str], None] = lambda _text: None,
) -> tuple[list[Culprit], Drift | None]:
    """Culprits in topological order (local and accumulated error both break the thresholds), or drift.

    The ONNX spec evaluator runs once per culprit node and reference (pairs with the same reference read
    the same shadow model and feeds), saying so through `say`: it is numpy, and a large Conv takes seconds."""
    by_pair = {run.pair: run for run in runs}
    quantized = judge.quantized
    culprits: list[Culprit] = []
    evaluated: dict[tuple[str, str], np.ndarray | None] = {}
    for layer in layers:
        for pair, run in by_pair.items():
            local, accumulated = run.metrics.get(layer.tensor), layer.pairs.get(pair)
            if local is None or accumulated is None or not (local.diverged and accumulated.diverged):
                continue
            if (pair.reference, layer.tensor) not in evaluated:
                say(f"the ONNX spec evaluator on {layer.onnx_node} (culprit {len(culprits) + 1})")
            verdict, spec = _verdict(run, layer.tensor, graph, judge, evaluated)
            kept = _kept(graph, layer, run, judge)
            culprits.append(
                Culprit(
                    tensor=layer.tensor,
                    onnx_node=layer.onnx_node,
                    op_type=layer.op_type,
                    module=layer.module,
                    pair=pair,
                    local=ErrorFigures.of(local),
                    accumulated=ErrorFigures.of(accumulated),
                    verdict=verdict,
                    subgraph=run.shadow.subgraphs.get(layer.tensor, (layer.onnx_node,)),
                    spec=spec,
                    noise_level=is_noise(ErrorFigures.of(local), layer.dtype),
                    quantization=q.describe() if (q := quantized.get(layer.tensor)) else "",
                    exclude=exclusion_patterns(graph, kept),
                    exclude_nodes=kept,
                )
            )
    return culprits, (None if culprits else _drift(layers, runs))


def with_local(layers: Sequence[Layer], runs: Sequence[LocalRun]) -> list[Layer]:
    """The layers with their local errors (None where none was computed)."""
    updated = []
    for layer in layers:
        local = {run.pair: run.metrics[layer.tensor] for run in runs if layer.tensor in run.metrics}
        updated.append(dataclasses.replace(layer, local=local or None))
    return updated


def judged_locally(layers: Sequence[Layer], runs: Sequence[LocalRun], judge: Judge) -> list[Layer]:
    """In a reduced-precision comparison: a layer whose node's local error is past its own noise (the node alone,
    against its float32 twin) diverges on that pair, with that reason, though the error it accumulated is within
    the benchmark's: a 1% weight change makes about 20 times FP16's noise at its node, and about 7 times the
    benchmark's accumulated error at a deep layer."""
    if judge.reduced is None and not judge.unquantized:
        return list(layers)
    updated = []
    for layer in layers:
        pairs = dict(layer.pairs)
        for run in runs:
            local, accumulated = run.metrics.get(layer.tensor), pairs.get(run.pair)
            if local is None or accumulated is None or accumulated.diverged or not local.diverged:
                continue
            alone = tuple(dataclasses.replace(r, detail=_alone(r.detail)) for r in local.reasons)
            pairs[run.pair] = dataclasses.replace(accumulated, diverged=True, reasons=(*accumulated.reasons, *alone))
        updated.append(dataclasses.replace(layer, pairs=pairs) if pairs != layer.pairs else layer)
    return updated


def _alone(detail: str | None) -> str:
    """A local error's reason detail, said to be the node's alone ("FP16, of the node alone")."""
    return f"{detail}, of the node alone" if detail else "of the node alone"


def _drift(layers: Sequence[Layer], runs: Sequence[LocalRun]) -> Drift | None:
    """The largest local contributors on the first pair that diverges with no culprit."""
    for run in runs:
        if not any((m := layer.pairs.get(run.pair)) is not None and m.diverged for layer in layers):
            continue
        ranked = sorted(
            (layer for layer in layers if layer.tensor in run.metrics),
            key=lambda layer: -_size(run.metrics[layer.tensor]),
        )
        contributors = tuple(
            Contributor(
                layer.tensor, layer.onnx_node, layer.op_type, layer.module, ErrorFigures.of(run.metrics[layer.tensor])
            )
            for layer in ranked[:MAX_CONTRIBUTORS]
        )
        return Drift(run.pair, contributors)
    return None


def _size(metrics: PairMetrics) -> float:
    """How large a local error is, for ranking: relative error, then 1 - cosine."""
    rel_err, cosine = number(metrics.rel_err), number(metrics.cosine)  # n/a ranks as the largest
    rel = rel_err if np.isfinite(rel_err) else 1e30
    return rel + (1.0 - cosine if np.isfinite(cosine) else 1.0) * 1e-6


def _verdict(
    run: LocalRun,
    tensor: str,
    graph: GraphInfo,
    judge: Judge,
    evaluated: dict[tuple[str, str], np.ndarray | None],
) -> tuple[Verdict, ErrorFigures | None]:
    """Export or runtime: does the ONNX spec evaluator agree with the candidate or with the reference?
    (`evaluated`: its values by reference and tensor, each computed once.)"""
    if tensor not in run.diverged:
        return "unknown", None
    reference, candidate = run.diverged[tensor]
    key = (run.pair.reference, tensor)
    if key not in evaluated:
        try:
            path = graph.path.with_suffix(".spec.onnx")
            evaluated[key] = _evaluate(submodel(run.shadow, tensor, graph), run.feeds, path)
        except Exception:  # noqa: BLE001 -- a third opinion only; an op the evaluator lacks leaves the verdict open
            evaluated[key] = None
    spec = evaluated[key]
    if spec is None:
        return "unknown", None
    versus_reference, versus_candidate = judge(tensor, reference, spec), judge(tensor, candidate, spec)
    figures = ErrorFigures.of(versus_reference)
    if not _values_differ(versus_reference):
        return "runtime", figures
    if not _values_differ(versus_candidate):
        return "export", figures
    return "unknown", figures


def _values_differ(metrics: PairMetrics) -> bool:
    """Whether two values of a tensor differ: diverged for a reason other than the graph's own scale (a
    "quant_scale" reason holds whatever the values; the spec's verdict asks which side the values agree with)."""
    return any(reason.metric != "quant_scale" for reason in metrics.reasons)


def _kept(graph: GraphInfo, layer: Layer, run: LocalRun, judge: Judge) -> tuple[str, ...]:
    """The nodes a culprit at `layer` keeps in higher precision, once each: around it, then after an overflow."""
    subgraph = run.shadow.subgraphs.get(layer.tensor, ())
    kept = _to_exclude(graph, layer.onnx_node, subgraph, judge)
    return tuple(dict.fromkeys((*kept, *run.kept_after(layer.tensor, graph))))


def exclusion_notes(culprits: Sequence[Culprit], graph: GraphInfo) -> list[str]:
    """One note per node the culprits keep in higher precision that no line of the exclusion list can name alone
    (pairing.qdq.unwritable), saying why: it is left out of `exclude` and must be kept by hand."""
    names = dict.fromkeys(name for culprit in culprits for name in culprit.exclude_nodes)
    return [
        f"exclusion list: {name} is to be kept in higher precision too, but {why}: no regular expression "
        "matches it alone, so it is not in the list; keep it by hand"
        for name in names
        if (why := unwritable(graph, name)) is not None
    ]


def _to_exclude(graph: GraphInfo, node: str, subgraph: Sequence[str], judge: Judge) -> tuple[str, ...]:
    """The nodes to keep in higher precision for a culprit `node` (run locally with `subgraph`): those whose
    inputs are quantized in a quantized graph (pairing.qdq.to_exclude), the node itself in a reduced-precision
    comparison, else none."""
    return to_exclude(graph, node, subgraph) or ((node,) if judge.reduced is not None and node else ())


def _evaluate(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], path: Path) -> np.ndarray:
    """The ONNX spec's output of a one-output model (the registry's spec evaluator, opset-10 Resize included)."""
    graph = graph_from_model(model, path)
    (output,) = graph.graph_outputs
    with open_backend(spec_evaluator(), graph) as backend:
        values = fetch(backend, {name: feeds[name] for name in graph.graph_inputs}, [output])
    return np.asarray(values[output])
