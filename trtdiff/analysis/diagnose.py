"""The culprit step of `compare`: local errors, culprits or drift, and what fixing each recovers.

Wires the pipeline's values into culprits.py and attribution.py: the references (PyTorch's
recorded values, or an ONNX backend's own), the exact values of shape arithmetic (ONNX
Runtime on the original graph), and candidates reopened on rewritten models with the
settings they ran with. Each culprit gets the fix of the inspect rule that explains it (advice.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.analysis.advice import Interpolations, advise
from trtdiff.analysis.attribution import AttributionInputs, attribute
from trtdiff.analysis.control_flow import subgraph_notes
from trtdiff.analysis.culprits import (
    LocalRun,
    OpenLike,
    Reference,
    ValuesOf,
    exclusion_notes,
    find_culprits,
    judged_locally,
    local_errors,
    with_local,
)
from trtdiff.backends.base import fetch
from trtdiff.backends.registry import exact_backend, open_backend, reopen_backend
from trtdiff.errors import BackendError
from trtdiff.options import DEFAULT_CHUNK_BYTES, DEFAULT_MEMORY_BYTES
from trtdiff.source.masks import computed_magnitude, mask_tensors
from trtdiff.source.onnx_graph import graph_from_model
from trtdiff.source.shape_values import folded

if TYPE_CHECKING:
    from trtdiff.analysis.engine import CapturedValues
    from trtdiff.analysis.judge import Judge
    from trtdiff.analysis.repro import OnCulprits
    from trtdiff.backends.base import OnnxBackend
    from trtdiff.options import BackendOptions, BuildSettings
    from trtdiff.report import (
        Attribution,
        BackendPair,
        Culprit,
        Drift,
        Layer,
        SampleResult,
        SegmentationSummary,
    )
    from trtdiff.source.onnx_graph import GraphInfo
    from trtdiff.source.samples import Sample


@dataclass(frozen=True)
class Findings:
    """Layers with local errors, the culprits (or drift), and the attribution of each culprit."""

    layers: tuple[Layer, ...]
    culprits: tuple[Culprit, ...] = ()
    drift: Drift | None = None
    attribution: tuple[Attribution, ...] = ()
    notes: tuple[str, ...] = ()  # what failed on the way (a TensorRT engine that could not run), for the report


@dataclass(frozen=True)
class Inputs:
    """What the culprit step reads from the comparison that ran.

    `engine`: the comparison's TensorRT engine settings (an engine on a rewritten model is built
    with them, its own outputs and shapes aside). `interpolations` records the PyTorch model's
    upsampling calls (for the advice on a Resize); `name_of` writes the parameters the advice
    names (the CLI passes its flags).
    """

    graph: GraphInfo
    feeds: Mapping[str, np.ndarray]
    backends: tuple[OnnxBackend, ...]
    captured: CapturedValues | None
    runtime: BackendOptions
    engine: BuildSettings
    judge: Judge
    interpolations: Interpolations = lambda: ()
    name_of: Callable[[str], str] = str
    on_culprits: OnCulprits | None = None  # given the culprits and their local runs while those are at hand (repro)
    chunk_bytes: int = DEFAULT_CHUNK_BYTES  # what a runtime returns at once (the comparison's memory budget)
    store_bytes: int = DEFAULT_MEMORY_BYTES  # what attribution's store holds in memory before spilling
    say: Callable[[str], None] = lambda _text: None  # progress of the steps that can take minutes


@dataclass(frozen=True)
class LocalCheck:
    """Every compared node's local error, per pair (`runs`), with what failed on the way (`notes`)."""

    runs: tuple[LocalRun, ...]
    notes: tuple[str, ...] = ()


def local_check(
    inputs: Inputs, layers: Sequence[Layer], pairs: Sequence[BackendPair]
) -> tuple[list[Layer], LocalCheck]:
    """The local error of every compared node, and the layers with it (analysis.culprits).

    In a reduced-precision comparison a backend that only emulates the precision is no reference
    for another's local errors (an overflow inside its float32 runs vanishes), and a node whose local
    error is past its own noise diverges though its accumulated error does not (`judged_locally`):
    the layer check of an FP16 comparison is made node by node, not only on the error each tensor
    accumulated."""
    reduced = inputs.judge.reduced
    if reduced is not None:
        pairs = [p for p in pairs if p.reference not in reduced.emulated]
    notes: list[str] = []
    runs = local_errors(
        inputs.graph,
        layers,
        pairs,
        _references(inputs, pairs),
        _exact_values(inputs),
        _opener(inputs),
        inputs.judge,
        inputs.chunk_bytes,
        notes,
    )
    updated = judged_locally(with_local(layers, runs), runs, inputs.judge)
    return updated, LocalCheck(tuple(runs), tuple(notes))


def analyse(
    inputs: Inputs, layers: Sequence[Layer], pairs: Sequence[BackendPair], checked: LocalCheck | None = None
) -> Findings:
    """Local error of every compared node (`checked` where `local_check` measured it already), then the culprits
    in topological order (each with its fix), or drift."""
    if checked is None:
        updated, checked = local_check(inputs, layers, pairs)
    else:
        updated = list(layers)
    runs, notes = list(checked.runs), list(checked.notes)
    culprits, drift = find_culprits(updated, runs, inputs.graph, inputs.judge, inputs.say)
    advised = advise(culprits, inputs.graph, inputs.interpolations, inputs.name_of, _magnitudes(inputs, runs))
    notes += exclusion_notes(advised, inputs.graph)
    notes += subgraph_notes(
        inputs.graph, advised, runs, inputs.captured, _exact_values(inputs), _opener(inputs), inputs.judge.thresholds
    )
    if inputs.on_culprits is not None:
        inputs.on_culprits(advised, runs)
    return Findings(tuple(updated), advised, drift, notes=tuple(notes))


def _magnitudes(inputs: Inputs, runs: Sequence[LocalRun]) -> dict[str, float] | None:
    """In a reduced-precision comparison, the reference's largest |value| at each diverged tensor (an overflow
    past float16's range is then what explains it); None at FP32."""
    if inputs.judge.reduced is None:
        return None
    masks = mask_tensors(inputs.graph, inputs.feeds)  # what an attention mask carries is no overflow
    return {
        tensor: magnitude
        for run in runs
        for tensor, (reference, _) in run.diverged.items()
        if (magnitude := computed_magnitude(reference, tensor in masks)) is not None
    }


def attribute_culprits(
    inputs: Inputs,
    findings: Findings,
    samples: Callable[[], Iterable[tuple[Sample, Mapping[str, np.ndarray]]]],
    torch_values: Callable[[int, Sample], ValuesOf | None],
    results: Sequence[SampleResult],
    segmentation: SegmentationSummary | None,
) -> Findings:
    """The findings with what injecting the reference at each culprit recovers, over the same samples."""
    if not findings.culprits:
        return findings
    live = {backend.name: backend for backend in inputs.backends if _is_live(backend)}

    def with_reference() -> Iterator[tuple[Sample, Mapping[str, np.ndarray], ValuesOf]]:
        for index, (sample, feeds) in enumerate(samples()):
            yield sample, feeds, _sample_reference(index, sample, feeds, torch_values, live, inputs)

    attribution_inputs = AttributionInputs(
        inputs.graph,
        with_reference,
        _opener(inputs),
        results,
        segmentation,
        inputs.judge.thresholds,
        inputs.store_bytes,
        inputs.say,
    )
    notes: list[str] = []
    attribution = attribute(attribution_inputs, findings.culprits, notes)
    return dataclasses.replace(findings, attribution=attribution, notes=(*findings.notes, *notes))


def _sample_reference(
    index: int,
    sample: Sample,
    feeds: Mapping[str, np.ndarray],
    torch_values: Callable[[int, Sample], ValuesOf | None],
    live: Mapping[str, OnnxBackend],
    inputs: Inputs,
) -> ValuesOf:
    """One sample's reference values: PyTorch's (recorded again for that sample), else ONNX Runtime's (the
    registry's exact backend)."""
    recorded = torch_values(index, sample)
    graph_inputs = {name: feeds[name] for name in inputs.graph.graph_inputs if name in feeds}
    if recorded is not None:
        return lambda names: {**_pick(graph_inputs, names), **recorded(names)}
    backend = live.get(exact_backend())
    if backend is None:
        return lambda names: _pick(graph_inputs, names)
    return lambda names: {**_pick(graph_inputs, names), **fetch(backend, feeds, list(names))}


def _references(inputs: Inputs, pairs: Sequence[BackendPair]) -> dict[str, Reference]:
    """Each pair's reference as a source of values: PyTorch's recording, or a live ONNX backend."""
    graph_inputs = {name: inputs.feeds[name] for name in inputs.graph.graph_inputs if name in inputs.feeds}
    live = {backend.name: backend for backend in inputs.backends if _is_live(backend)}
    references: dict[str, Reference] = {}
    for name in dict.fromkeys(pair.reference for pair in pairs):
        if name == "torch" and inputs.captured is not None:
            references[name] = _torch_reference(inputs.captured, graph_inputs)
        elif name in live:
            references[name] = _backend_reference(live[name], inputs.feeds, graph_inputs)
    return references


def _torch_reference(captured: CapturedValues, graph_inputs: Mapping[str, np.ndarray]) -> Reference:
    def values(names: Sequence[str]) -> dict[str, np.ndarray]:
        return {**_pick(graph_inputs, names), **captured.values(names)}

    return Reference("torch", values, lambda tensor: tensor in captured.keys)


def _backend_reference(
    backend: OnnxBackend, feeds: Mapping[str, np.ndarray], graph_inputs: Mapping[str, np.ndarray]
) -> Reference:
    available = backend.available()

    def values(names: Sequence[str]) -> dict[str, np.ndarray]:
        return {**_pick(graph_inputs, names), **fetch(backend, feeds, [n for n in names if n in available])}

    return Reference(backend.name, values, lambda tensor: tensor in available)


def _pick(values: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
    return {name: values[name] for name in names if name in values}


def _exact_values(inputs: Inputs) -> ValuesOf:
    """Shape arithmetic and other non-float tensors, as ONNX Runtime (the registry's exact backend) computes them
    on the original graph.

    Where they follow from the graph's static shapes alone (source.shape_values), from the small model that
    computes them so; else from a run of the whole graph: the comparison's own ONNX Runtime where it ran
    live, else one opened (with the comparison's provider) for this call and closed after it.
    """

    def exact(names: Sequence[str]) -> dict[str, np.ndarray]:
        if not names:
            return {}
        name = exact_backend()
        constant = folded(inputs.graph, names)
        if constant is not None:
            path = inputs.graph.path.with_suffix(".shape-values.onnx")
            try:
                with open_backend(name, graph_from_model(constant, path), inputs.runtime) as opened:
                    return fetch(opened, {}, list(names))
            except BackendError:  # the small model would not run where the graph does: the graph runs instead
                pass
        runner = next((b for b in inputs.backends if b.name == name and _is_live(b)), None)
        if runner is not None:
            return fetch(runner, inputs.feeds, list(names))
        with open_backend(name, inputs.graph, inputs.runtime) as opened:
            return fetch(opened, inputs.feeds, list(names))

    return exact


def _opener(inputs: Inputs) -> OpenLike:
    """Open a candidate of the same kind and settings on another model (None for recordings): as its spec reopens
    one (registry.reopen_backend: TensorRT builds one engine with the comparison's engine settings)."""
    live = {backend.name for backend in inputs.backends if _is_live(backend)}
    runtime, engine = inputs.runtime, inputs.engine

    def open_like(name: str, graph: GraphInfo, feeds: Mapping[str, np.ndarray]) -> OnnxBackend | None:
        if name not in live:
            return None
        return reopen_backend(name, graph, feeds, runtime, engine)

    return open_like


def _is_live(backend: OnnxBackend) -> bool:
    """Whether the backend runs here (a recording replays what ran elsewhere)."""
    from trtdiff.backends.recorded import RecordedBackend

    return not isinstance(backend, RecordedBackend)
