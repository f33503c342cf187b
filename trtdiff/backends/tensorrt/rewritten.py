"""TensorRT on a model trtdiff rewrote: the culprit step's shadow model, attribution's injected one.

The TensorRT spec's `reopens` hook (backends.registry.reopen_backend): one engine, no plain
engine beside it (so no marking check), built with the comparison's engine settings, its own
outputs and input shapes aside. A model of several outputs (the shadow model: one per
compared node) gets a sink (`with_sink`): its outputs become debug tensors of that one
engine, captured under the comparison's mark budget, instead of thousands of network outputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from trtdiff.source.onnx_graph import typed_inputs

if TYPE_CHECKING:
    from trtdiff.backends.tensorrt.runtime import TensorRTBackend
    from trtdiff.options import BackendOptions, BuildSettings
    from trtdiff.source.onnx_graph import GraphInfo

SINK = "trtdiff.sink"


def reopen(
    graph: GraphInfo, feeds: Mapping[str, np.ndarray], runtime: BackendOptions, engine: BuildSettings | None = None
) -> TensorRTBackend:
    """TensorRT on a rewritten model, with the settings, capture and mark budget of the comparison (one engine)."""
    import tempfile

    from trtdiff.backends.tensorrt.onnx_files import save_for_parser
    from trtdiff.backends.tensorrt.runtime import TensorRTBackend
    from trtdiff.source.onnx_graph import graph_from_model

    model, settings = rewritten_model(graph, feeds, runtime, engine)
    with tempfile.TemporaryDirectory(prefix="trtdiff-") as folder:  # TensorRT's parser reads a file
        path = save_for_parser(model, Path(folder) / graph.path.name)
        return TensorRTBackend.with_settings(graph_from_model(model, path), settings, runtime, plain_engine=False)


def rewritten_model(
    graph: GraphInfo, feeds: Mapping[str, np.ndarray], runtime: BackendOptions, engine: BuildSettings | None = None
) -> tuple[onnx.ModelProto, BuildSettings]:
    """The model TensorRT builds for a rewritten graph, and its settings (from the comparison's `engine`).

    Inputs typed from the values fed. A model of several outputs (the shadow model: one per
    compared node) gets a sink (`with_sink`): its outputs become debug tensors of one
    engine, captured under the comparison's mark budget, instead of network outputs.
    """
    model = typed_inputs(graph.model, feeds)
    settings = rewritten_settings(graph, feeds, runtime, engine)
    if len(graph.graph_outputs) > 1:
        model = with_sink(model, graph.graph_outputs)
        settings = dataclasses.replace(settings, outputs="all", bisect_marks=False)
    return model, settings


def rewritten_settings(
    graph: GraphInfo, feeds: Mapping[str, np.ndarray], runtime: BackendOptions, engine: BuildSettings | None = None
) -> BuildSettings:
    """The comparison's engine settings for a rewritten model: same precision and TF32, its own outputs and shapes.

    `engine`: the settings the comparison derived; none given: derived from `runtime` as it does.
    """
    from trtdiff.backends.tensorrt.builder import input_shapes_from
    from trtdiff.backends.tensorrt.settings import engine_settings

    shapes = input_shapes_from({name: feeds[name] for name in graph.graph_inputs if name in feeds})
    settings = engine if engine is not None else engine_settings(runtime)
    return dataclasses.replace(settings, outputs="none", input_shapes=shapes)


def with_sink(model: onnx.ModelProto, outputs: Sequence[str]) -> onnx.ModelProto:
    """A copy of `model` whose one graph output (SINK) depends on each of `outputs`, which become inner values.

    TensorRT then returns them as debug tensors of one engine (the same capture and mark budget
    as the comparison) instead of as thousands of network outputs; a debug tensor alone does
    not keep its layer alive (TensorRT-RTX drops a marked tensor nothing consumes), so each is
    reduced into the sink: Cast to float, ReduceSum to a scalar, one Sum of them all.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    kept = [value for value in graph.output if value.name not in set(outputs)]
    del graph.output[:]
    graph.output.extend(kept)
    sums = []
    for index, name in enumerate(outputs):
        cast, total = f"{SINK}/cast{index}", f"{SINK}/sum{index}"
        graph.node.append(helper.make_node("Cast", [name], [cast], name=cast, to=onnx.TensorProto.FLOAT))
        graph.node.append(helper.make_node("ReduceSum", [cast], [total], name=total, keepdims=0))
        sums.append(total)
    graph.node.append(helper.make_node("Sum", sums, [SINK], name=SINK))
    graph.output.append(helper.make_tensor_value_info(SINK, onnx.TensorProto.FLOAT, []))
    return copy
