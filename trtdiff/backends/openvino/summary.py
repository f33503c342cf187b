"""The report's `RuntimeSummary` of an OpenVINO run: read from the compiled models, after the samples ran."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from trtdiff.backends.compiled.fusion import fusions_split
from trtdiff.backends.compiled.precision import asked_types, conversions, layer_precisions
from trtdiff.backends.openvino.fusion import runtime_graph
from trtdiff.backends.openvino.names import NodeNames
from trtdiff.report import EngineLayerInfo, FusionSplit, RuntimeSummary

if TYPE_CHECKING:
    from trtdiff.backends.openvino.names import TensorMap
    from trtdiff.report import MarkingCheck
    from trtdiff.source.onnx_graph import GraphInfo

TITLE = "OpenVINO"


class Compiled(Protocol):
    """What a summary reads of the backend (runtime.OpenVINOBackend, which imports this module)."""

    name: str
    graph: GraphInfo
    tensors: TensorMap
    plain: Any
    version: str
    precision_asked: str
    inference_precision: str
    marked_compiles: int
    marked_tensors: set[str]
    compile_seconds: float

    def marked_models(self) -> tuple[Any, ...]: ...
    def notes(self) -> tuple[str, ...]: ...
    def device_text(self) -> str: ...


def summarize(backend: Compiled, check: MarkingCheck | None) -> RuntimeSummary:
    """What `backend` compiled, fused (plain model) and split (marked models), precision as run, `check`."""
    graph = backend.graph
    names = NodeNames(graph, backend.tensors.op_tensors)
    plain = runtime_graph(backend.plain, graph, names)
    marked = [runtime_graph(compiled, graph, names) for compiled in backend.marked_models()]
    split: dict[str, FusionSplit] = {}
    for each in marked:
        split.update((s.layer, s) for s in fusions_split(plain.fusion, each.fusion))
    order = {node.name: node.index for node in graph.nodes}
    precisions = layer_precisions(plain.fusion, asked_types(graph), order, conversions(graph))
    unmapped_ops = tuple(dict.fromkeys(op for g in (plain, *marked) for op in g.unmapped_ops))
    notes = [*backend.notes()]
    if plain.fusion.note:
        notes.append(f"openvino fusion: {plain.fusion.note}")
    if backend.inference_precision != backend.precision_asked:
        notes.append(
            f"openvino: inference precision {backend.precision_asked} asked, the compiled model reports "
            f"{backend.inference_precision}"
        )
    return RuntimeSummary(
        backend=backend.name,
        title=TITLE,
        version=backend.version,
        device=backend.device_text(),
        precision_asked=backend.precision_asked,
        precision_compiled=backend.inference_precision,
        compiled_models=1 + backend.marked_compiles,
        compile_seconds=round(backend.compile_seconds, 4),
        marked=len(backend.marked_tensors),
        unmapped_tensors=backend.tensors.unmapped,
        unmapped_ops=unmapped_ops,
        fusion_source=plain.fusion.source,
        runtime_layers=len(plain.fusion.layers),
        fused_layers=tuple(EngineLayerInfo(layer.name, layer.onnx_nodes) for layer in plain.fusion.fused()),
        fusions_split=tuple(split.values()),
        layer_precisions=precisions,
        marking_check=check,
        notes=tuple(notes),
    )
