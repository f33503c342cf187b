"""Fusion and precision as run, read from a real OpenVINO runtime graph (get_runtime_model) of a Conv+ReLU model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

pytest.importorskip("openvino")

from tests.backends.openvino.test_openvino_backend import FEEDS, conv_relu_model
from trtdiff.analysis.metrics import compare_tensors
from trtdiff.backends.base import fetch
from trtdiff.backends.compiled.fusion import fusions_split
from trtdiff.backends.compiled.precision import asked_types, layer_precisions
from trtdiff.backends.openvino.fusion import SOURCE_RUNTIME, runtime_graph
from trtdiff.backends.openvino.names import NodeNames
from trtdiff.backends.openvino.runtime import OpenVINOBackend
from trtdiff.report import Report, RuntimeSummary, Thresholds
from trtdiff.source.onnx_graph import GraphInfo, load_graph


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> GraphInfo:
    path = tmp_path_factory.mktemp("openvino_fusion") / "conv_relu.onnx"
    onnx.save(conv_relu_model(), str(path))
    return load_graph(path)


def test_the_plain_model_fuses_conv_bias_and_relu_into_one_layer_named_back_to_onnx(graph: GraphInfo) -> None:
    with OpenVINOBackend(graph) as backend:
        read = runtime_graph(backend.plain, graph, NodeNames(graph, backend.tensors.op_tensors))
    layers = {layer.name: layer for layer in read.fusion.layers}
    assert read.fusion.source == SOURCE_RUNTIME
    # originalLayersNames "conv/WithoutBiases,conv,relu": the Convolution, the bias Add and the ReLU, one kernel.
    conv = layers["conv/WithoutBiases"]
    assert conv.onnx_nodes == ("conv", "relu") and conv.layer_type == "Convolution"
    assert conv.output_types == ("FP32",) and conv.tactic is not None and "f32" in conv.tactic
    # The Add computing graph output y is an op named after the tensor (y), found through the tensor's producer.
    assert layers["y"].onnx_nodes == ("add",)
    assert [layer.name for layer in read.fusion.fused()] == ["conv/WithoutBiases"]
    # The bias reshape OpenVINO generates maps to no ONNX node: listed, not guessed; the layout reorders are added.
    assert read.unmapped_ops and all(op.startswith("Reshape_") for op in read.unmapped_ops)
    assert read.added >= 2


def test_the_marked_model_splits_the_fusion_the_plain_one_ships(graph: GraphInfo) -> None:
    with OpenVINOBackend(graph, compare=compare_tensors) as backend:
        fetch(backend, FEEDS, ["c", "r", "y"])
        names = NodeNames(graph, backend.tensors.op_tensors)
        plain = runtime_graph(backend.plain, graph, names)
        (marked,) = (runtime_graph(model, graph, names) for model in backend.marked_models())
        summary = backend.runtime_summary(Thresholds())
    (split,) = fusions_split(plain.fusion, marked.fusion)
    assert (split.layer, split.onnx_nodes, split.split_into) == (
        "conv/WithoutBiases",
        ("conv", "relu"),
        ("conv/WithoutBiases", "relu"),
    )
    assert summary.fusions_split == (split,) and summary.marking_check is not None
    assert summary.marking_check.status == "same"  # split, and at FP32 the numbers do not move
    assert (summary.precision_asked, summary.precision_compiled, summary.compiled_models) == ("f32", "f32", 2)
    assert summary.marked == 2 and summary.unmapped_tensors == ()
    assert [(r.layer, r.asked, r.built, r.flag) for r in summary.layer_precisions] == [
        ("conv/WithoutBiases", "FP32", "FP32", None),
        ("y", "FP32", "FP32", None),
    ]
    assert Report.from_json(_report_with(summary).to_json()).runtimes == (summary,)


def test_precision_as_run_reads_a_lower_precision_the_plugin_chose(graph: GraphInfo) -> None:
    """Compiled with a bf16 hint on a CPU that has bf16, the runtime graph says bf16: flagged lower than FP32."""
    import openvino as ov

    core = ov.Core()
    if "BF16" not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        pytest.skip("this CPU has no bf16: the CPU plugin compiles a bf16 hint as f32")
    model = core.read_model(graph.model.SerializeToString())
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "bf16"})
    read = runtime_graph(compiled, graph)
    order = {node.name: node.index for node in graph.nodes}
    rows = {row.layer: row for row in layer_precisions(read.fusion, asked_types(graph), order)}
    assert (rows["conv/WithoutBiases"].built, rows["conv/WithoutBiases"].flag) == ("BF16", "lower")
    values = compiled.create_infer_request().infer(FEEDS)[0]
    with OpenVINOBackend(graph) as backend:
        exact = fetch(backend, FEEDS, ["y"])["y"]
    assert not np.array_equal(values, exact)  # bf16 really ran: the numbers moved


def _report_with(summary: RuntimeSummary) -> Report:
    from trtdiff.report import PairingSummary

    return Report(
        passed=True,
        model="m",
        onnx_path=None,
        opset=13,
        exporter="given",
        backends=("onnxruntime", "openvino"),
        reference="onnxruntime",
        inputs={"x": (1, 3, 8, 8)},
        thresholds=Thresholds(),
        first_divergence=None,
        layers=(),
        not_compared=(),
        pairing=PairingSummary(onnx_tensors=0, float_tensors=0, paired_with_torch=0),
        environment={},
        runtimes=(summary,),
    )
