"""trtdiff.source.shape_values: shape arithmetic from static shapes equals what a run of the whole graph gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from trtdiff.examples.deeplabv3plus import deeplabv3plus_resnet
from trtdiff.source.onnx_graph import GraphInfo, graph_from_model
from trtdiff.source.shape_values import folded


def _whole_run(graph: GraphInfo, names: list[str], feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    model = onnx.ModelProto()
    model.CopyFrom(graph.model)
    model.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in names)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(names, session.run(names, feeds), strict=True))


def _constant_run(model: onnx.ModelProto, names: list[str]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(names, session.run(names, {}), strict=True))


def test_the_demos_resize_sizes_are_folded_to_what_the_whole_graph_computes(tmp_path: Path) -> None:
    """DeepLabV3+'s upsampling sizes (Shape -> Slice -> Concat of a feature map's shape) with no run of the graph."""
    torch.manual_seed(0)
    path = tmp_path / "demo.onnx"
    torch.onnx.export(
        deeplabv3plus_resnet().eval(), (torch.zeros(1, 3, 96, 64),), str(path), opset_version=17, dynamo=False
    )
    graph = graph_from_model(onnx.load(str(path)), path)
    names = [t for t in graph.node_outputs if t not in graph.data_tensors and graph.node_of(t).op_type != "Constant"]
    assert len(names) >= 6 and any(graph.node_of(t).op_type == "Concat" for t in names)
    model = folded(graph, names)
    assert model is not None and not model.graph.input
    assert {n.op_type for n in model.graph.node} <= {"Constant", "Slice", "Concat", "Cast"}
    feeds = {graph.graph_inputs[0]: np.random.default_rng(0).standard_normal((1, 3, 96, 64), dtype=np.float32)}
    ours, theirs = _constant_run(model, names), _whole_run(graph, names, feeds)
    for name in names:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


def _shape_graph(input_shape: list[int | str], start: int | None = None, end: int | None = None) -> GraphInfo:
    """x -> Relu -> r; Shape(r)[start:end] -> s; Size(r) -> n; ArgMax(r) -> k (an integer tensor read from data)."""
    attributes = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"], **attributes),
        helper.make_node("Size", ["r"], ["n"]),
        helper.make_node("Mul", ["s", "two"], ["s2"]),
        helper.make_node("ArgMax", ["r"], ["k"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "shapes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, input_shape)],
        [helper.make_tensor_value_info(t, TensorProto.INT64, None) for t in ("s2", "n", "k")],
        initializer=[numpy_helper.from_array(np.array(2, dtype=np.int64), "two")],
    )
    return graph_from_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), Path("s.onnx"))


@pytest.mark.parametrize(("start", "end"), [(None, None), (1, None), (-2, None), (0, -1), (-9, 99), (3, 1)])
def test_shape_with_start_and_end_and_size_match_onnx_runtime(start: int | None, end: int | None) -> None:
    graph = _shape_graph([2, 3, 4, 5], start, end)
    model = folded(graph, ["s2", "n"])
    assert model is not None
    feeds = {"x": np.ones((2, 3, 4, 5), dtype=np.float32)}
    ours, theirs = _constant_run(model, ["s2", "n"]), _whole_run(graph, ["s2", "n"], feeds)
    for name in ("s2", "n"):
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


def test_nothing_is_folded_from_a_dynamic_dimension_or_from_data() -> None:
    assert folded(_shape_graph(["batch", 3, 4, 5]), ["s2"]) is None  # the whole graph runs for it instead
    assert folded(_shape_graph([2, 3, 4, 5]), ["k"]) is None  # ArgMax reads values, not a shape
    assert folded(_shape_graph([2, 3, 4, 5]), ["s2", "k"]) is None


def test_an_fp16_layer_check_runs_the_graph_once_reading_its_resize_sizes_from_the_folded_model(
    opened_backends: list,
) -> None:
    """Each node alone (the FP16 layer check) is fed the demo's Resize sizes from the folded model; the
    comparison's own ONNX Runtime runs its graph once, for the comparison (before: once more for those sizes)."""
    import trtdiff

    torch.manual_seed(0)
    report = trtdiff.compare(
        deeplabv3plus_resnet().eval(), input_shapes=["1x3x64x64"], precision="fp16", backends=["torch", "onnxruntime"]
    )
    assert report.passed
    main, *others = opened_backends
    assert main.session_runs == 1
    assert any(b.graph.path.name.endswith(".shape-values.onnx") for b in others)


def test_nothing_is_folded_through_a_random_op_or_one_outside_the_standard_domain() -> None:
    """A second run would not repeat a random value, and another domain's op may not run alone: the graph's own
    run gives those tensors."""
    shape = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    out = [helper.make_tensor_value_info("y", TensorProto.INT64, None)]
    for node in (
        helper.make_node("RandomUniform", [], ["y0"], shape=[2], dtype=TensorProto.FLOAT),
        helper.make_node("Thing", [], ["y0"], domain="com.example"),
    ):
        nodes = [node, helper.make_node("Cast", ["y0"], ["y"], to=TensorProto.INT64)]
        graph = helper.make_graph(nodes, "g", shape, out)
        opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
        info = graph_from_model(helper.make_model(graph, opset_imports=opsets), Path("r.onnx"))
        assert folded(info, ["y"]) is None, node.op_type
