"""trtdiff.backends.compiled.precision: each engine layer's built type against the type the graph asks of it."""

from __future__ import annotations

from pathlib import Path

import onnx

from tests.culprit_models import CNN_SHAPE, export, small_cnn
from trtdiff.backends.compiled.fusion import EngineLayer, FusionReport
from trtdiff.backends.compiled.precision import asked_types, conversions, layer_precisions
from trtdiff.source.fp16 import convert_to_fp16
from trtdiff.source.onnx_graph import load_graph


def test_a_cast_kept_at_the_fp32_boundary_is_not_flagged_a_layer_computing_above_fp16_is(tmp_path: Path) -> None:
    """As OpenVINO's CPU plugin reports the FP16 graph on a CPU with native FP16 (issue 36, item 1, seen on an
    H200 host's Xeon): the input Cast kept in FP32 is no finding, nor the last Conv in FP16 fused with the Cast to
    the FP32 output; a Conv computing in FP32 where FP16 is asked is "higher"."""
    fp32 = export(small_cnn(), CNN_SHAPE, tmp_path / "cnn.onnx", 17)
    path = tmp_path / "cnn.fp16.onnx"
    onnx.save(convert_to_fp16(onnx.load(str(fp32))).model, str(path))
    graph = load_graph(path)
    casts = conversions(graph)
    first_cast = next(node for node in graph.nodes if node.op_type == "Cast")
    convs = [node.name for node in graph.nodes if node.op_type == "Conv"]
    out_cast = graph.node_of(graph.graph_outputs[0])  # the Cast back to the FP32 output, fused into the last Conv
    assert out_cast is not None and out_cast.op_type == "Cast"
    assert first_cast.name in casts and not casts & set(convs)
    layers = (
        EngineLayer("in_cast", (first_cast.name,), "originalLayersNames", output_types=("FP32",)),
        EngineLayer("conv_f32", (convs[0],), "originalLayersNames", output_types=("FP32",)),
        EngineLayer("conv_f16", (convs[1],), "originalLayersNames", output_types=("FP16",)),
        EngineLayer("head", (convs[-1], out_cast.name), "originalLayersNames", output_types=("FP16",)),
        EngineLayer("head_as_cast_writes", (convs[-1], out_cast.name), "metadata", output_types=("FP32",)),
        EngineLayer("head_bf16", (convs[-1], out_cast.name), "originalLayersNames", output_types=("BF16",)),
    )
    order = {node.name: node.index for node in graph.nodes}
    rows = layer_precisions(FusionReport(layers, "test"), asked_types(graph), order, casts)
    assert [(r.layer, r.asked, r.built, r.flag) for r in rows] == [
        ("in_cast", "FP16", "FP32", None),
        ("conv_f32", "FP16", "FP32", "higher"),
        ("conv_f16", "FP16", "FP16", None),
        ("head", "FP16", "FP16", None),  # as OpenVINO reports it: what the Conv computes
        ("head_as_cast_writes", "FP32", "FP32", None),  # as TensorRT reports it: what the fused Cast writes
        ("head_bf16", "FP16", "BF16", "lower"),  # neither: judged against what the Conv asks
    ]
    before = layer_precisions(FusionReport(layers, "test"), asked_types(graph), order)  # without the conversions
    assert before[0].flag == "higher"
