"""`trtdiff.inspect_model`: confirm or rule out the usual suspects without running a comparison.

Export (or read the ONNX file) as `compare` would; report the opset and exporter as written,
every Resize/Upsample (attributes, constant scales or sizes, shapes, the PyTorch call behind
it: one forward pass records align_corners, module and source line) and the findings of
`trtdiff.source.pitfalls`, with each tensor's magnitude from one ONNX Runtime run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trtdiff.backends.pytorch.interpolations import record_interpolations
from trtdiff.errors import BackendError
from trtdiff.options import BackendOptions, CompareOptions
from trtdiff.pipeline.prepare import prepare
from trtdiff.report.inspection import Inspection
from trtdiff.source.masks import computed_magnitude, mask_tensors
from trtdiff.source.onnx_graph import GraphInfo
from trtdiff.source.pitfalls import inspect_graph, worst_severity

if TYPE_CHECKING:
    import torch


def inspect_model(
    model: str | Path | torch.nn.Module,
    options: CompareOptions | None = None,
    *,
    name_of: Callable[[str], str] = str,
    **fields: Any,
) -> Inspection:
    """Export `model` (or read the ONNX file) as `compare` would and report what may break its numbers.

    Options as for `compare` (the model, inputs, export and ONNX Runtime provider are read),
    e.g. `inspect_model("model.pt", opset=10, input_shapes=["1x3x512x512"])`. Advice names
    parameters as `name_of` writes them (the parameter itself; the CLI passes its flags).
    """
    options = (options or CompareOptions()).with_fields(**fields)
    options.export.validate()
    options.runtime.validate()
    with prepare(model, options, backends=()) as prepared:
        graph, module = prepared.graph, prepared.loaded.module
        calls = record_interpolations(module, prepared.model_feeds) if prepared.has_torch and module is not None else []
        magnitudes, note = tensor_magnitudes(graph, prepared.feeds, options.runtime)
        names = {name for name, _ in module.named_modules()} if module is not None else None
        resizes, findings = inspect_graph(graph, calls=calls, magnitudes=magnitudes, module_names=names)
        declared = graph.model
        return Inspection(
            model=prepared.loaded.source,
            onnx_path=prepared.onnx_path,
            opset=graph.opset,
            opset_imports={entry.domain or "ai.onnx": int(entry.version) for entry in declared.opset_import},
            exporter=prepared.exporter,
            producer_name=declared.producer_name,
            producer_version=declared.producer_version,
            inputs=_input_shapes(graph),
            resizes=tuple(resizes),
            findings=tuple(findings),
            worst=worst_severity(findings),
            notes=(*prepared.notes, *([note] if note else [])),
        ).named(name_of)


def _input_shapes(graph: GraphInfo) -> dict[str, str]:
    """Each graph input's shape as written: "1x3xheightxwidth" (symbolic dimensions by name, "?" unnamed)."""
    values = [v for v in graph.model.graph.input if v.name in graph.graph_inputs and v.type.HasField("tensor_type")]
    dims = {
        v.name: [
            str(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else d.dim_param or "?"
            for d in v.type.tensor_type.shape.dim
        ]
        for v in values
    }
    return {name: "x".join(shape) or "scalar" for name, shape in dims.items()}


def tensor_magnitudes(
    graph: GraphInfo, feeds: Mapping[str, np.ndarray], runtime: BackendOptions
) -> tuple[dict[str, float] | None, str | None]:
    """Largest |value| of each float tensor computed from the inputs (ONNX Runtime on `feeds`), or a note why not.

    What an attention mask carries (-inf, finfo.min: source.masks) is left out: it was given, not computed."""
    from trtdiff.backends.registry import exact_backend, open_backend

    wanted = [t for t in graph.node_outputs if t in graph.data_tensors]
    sizes = {t: n for t in wanted if (n := graph.tensor_type(t).nbytes()) is not None}
    masks = mask_tensors(graph, feeds)
    magnitudes: dict[str, float] = {}
    try:
        with open_backend(exact_backend(), graph, runtime) as backend:
            for chunk in backend.run(feeds, wanted, sizes=sizes, max_bytes=runtime.chunk_bytes):
                for name, value in chunk.items():
                    if (magnitude := computed_magnitude(value, name in masks)) is not None:
                        magnitudes[name] = magnitude
    except BackendError as error:
        return None, f"FP16 range not checked: {error}"
    return magnitudes, None
