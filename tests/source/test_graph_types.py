"""Declared types made to agree with what flows (trtdiff.source.graph_types), on graphs written as converters wrote them.

Each graph below is a fault a float16 converter left (issue 38); before the pass ONNX Runtime refused it at
load or the ONNX reference evaluator stopped in it; after it, both run it.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from trtdiff.source.graph_types import make_consistent, topological_order, type_error

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[tuple[str, int, list[int]]],
    outputs: list[tuple[str, int, list[int]]],
    initializers: list[onnx.TensorProto] = (),  # type: ignore[assignment]
    value_info: list[tuple[str, int, list[int]]] = (),  # type: ignore[assignment]
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(*o) for o in outputs],
        list(initializers),
        value_info=[helper.make_tensor_value_info(*v) for v in value_info],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _half(name: str, values: list[float], dims: list[int]) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.array(values, dtype=np.float16).reshape(dims), name)


def _runs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The outputs of ONNX Runtime and of the reference evaluator, which must agree; ONNX's checker passes first."""
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    runtime, spec = session.run(None, feeds), ReferenceEvaluator(model).run(None, feeds)
    for a, b in zip(runtime, spec, strict=True):
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=1e-3, atol=1e-3)
    return list(runtime)


def _refused(model: onnx.ModelProto) -> None:
    assert type_error(model) is not None
    with pytest.raises(Exception, match="Type"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_a_cast_to_float_typed_float16_is_typed_as_it_computes_and_its_reader_gets_a_cast() -> None:
    """TorchScript's attention scale: Shape -> Cast(to=FLOAT) -> Sqrt -> Div(1, .), the output typed float16 as
    onnxconverter-common typed it, the Div's other input converted to float16."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="/Shape"),
        helper.make_node("Cast", ["shape"], ["dim"], name="/Cast", to=F32),
        helper.make_node("Sqrt", ["dim"], ["root"], name="/Sqrt"),
        helper.make_node("Div", ["one", "root"], ["scale"], name="/Div"),
        helper.make_node("Mul", ["x", "scale"], ["y"], name="/Mul"),
    ]
    declared = [("shape", TensorProto.INT64, [1]), ("dim", F16, [1]), ("root", F16, [1]), ("scale", F16, [1])]
    model = _model(nodes, [("x", F16, [4])], [("y", F16, [4])], [_half("one", [1.0], [1])], declared)
    _refused(model)
    repairs = make_consistent(model)
    assert repairs.cast_inputs == ("/Div",) and set(repairs.retyped) == {"dim", "root"}
    assert repairs.sentence().startswith("inputs Cast to one float type at /Div; declared types corrected")
    (y,) = _runs(model, {"x": np.full(4, 2.0, dtype=np.float16)})
    np.testing.assert_allclose(y, 1.0, rtol=1e-3)  # 2 / sqrt(4)
    assert type_error(model) is None


def test_nodes_are_put_in_topological_order_keeping_the_given_order_where_it_is_one() -> None:
    nodes = [
        helper.make_node("Relu", ["h"], ["y"], name="/Relu"),
        helper.make_node("Cast", ["x"], ["h"], name="graph_input_cast0", to=F16),
        helper.make_node("Neg", ["x"], ["z"], name="/Neg"),
    ]
    model = _model(nodes, [("x", F32, [3])], [("y", F16, [3]), ("z", F32, [3])])
    assert topological_order(model.graph) == 2
    assert [n.name for n in model.graph.node] == ["graph_input_cast0", "/Relu", "/Neg"]
    assert topological_order(model.graph) == 0
    _runs(model, {"x": np.array([-1.0, 0.0, 2.0], dtype=np.float32)})


def test_a_subgraphs_read_of_an_outer_value_orders_its_writer_first() -> None:
    branch = helper.make_graph(
        [helper.make_node("Identity", ["outer"], ["out"], name="/then")],
        "then",
        [],
        [helper.make_tensor_value_info("out", F32, [2])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["outer"], ["out2"], name="/else")],
        "else",
        [],
        [helper.make_tensor_value_info("out2", F32, [2])],
    )
    nodes = [
        helper.make_node("If", ["flag"], ["y"], name="/If", then_branch=branch, else_branch=other),
        helper.make_node("Relu", ["x"], ["outer"], name="/Relu"),
    ]
    model = _model(nodes, [("x", F32, [2]), ("flag", TensorProto.BOOL, [])], [("y", F32, [2])])
    assert topological_order(model.graph) == 2 and model.graph.node[0].name == "/Relu"
    make_consistent(model)
    (y,) = _runs(model, {"x": np.array([-1.0, 3.0], dtype=np.float32), "flag": np.array(False)})
    np.testing.assert_array_equal(y, [-0.0, -3.0])


def test_an_output_read_again_inside_is_read_before_its_cast_back_to_float32() -> None:
    """A KV cache's present key: a graph output (Cast back to float32 for keep_io_types) that the attention reads
    again; onnxconverter-common left the MatMul reading the float32 output beside a float16 query."""
    nodes = [
        helper.make_node("Cast", ["past"], ["past16"], name="past_cast", to=F16),
        helper.make_node("Cast", ["q"], ["q16"], name="q_cast", to=F16),
        helper.make_node("Concat", ["past16", "q16"], ["present16"], name="/Concat", axis=0),
        helper.make_node("Cast", ["present16"], ["present"], name="present_cast", to=F32),
        helper.make_node("MatMul", ["q16", "present"], ["scores16"], name="/MatMul"),
        helper.make_node("Cast", ["scores16"], ["scores"], name="scores_cast", to=F32),
    ]
    declared = [("q16", F16, [1, 2]), ("present16", F16, [2, 2]), ("scores16", F16, [1, 2])]
    model = _model(
        nodes,
        [("past", F32, [1, 2]), ("q", F32, [1, 2])],
        [("present", F32, [2, 2]), ("scores", F32, [1, 2])],
        [],
        declared,
    )
    _refused(model)
    repairs = make_consistent(model)
    assert repairs.cast_inputs == ("/MatMul",)
    present, scores = _runs(
        model, {"past": np.full((1, 2), 2.0, dtype=np.float32), "q": np.ones((1, 2), dtype=np.float32)}
    )
    assert present.dtype == np.float32 and scores.dtype == np.float32
    np.testing.assert_array_equal(scores, [[3.0, 3.0]])


def test_an_identity_of_a_weight_kept_in_float32_feeding_a_float16_conv() -> None:
    """DeepLabV3+ at opset 17: the exporter writes a shared bias as an Identity of another Conv's; that one was
    kept in FP32, the Identity's output typed float16."""
    bias = onnx.numpy_helper.from_array(np.zeros(2, dtype=np.float32), "bias")
    weight = _half("w", [1.0] * 8, [2, 4, 1, 1])
    nodes = [
        helper.make_node("Identity", ["bias"], ["shared"], name="Identity_0"),
        helper.make_node("Cast", ["x"], ["x16"], name="x_cast", to=F16),
        helper.make_node("Conv", ["x16", "w", "shared"], ["y16"], name="/Conv"),
        helper.make_node("Cast", ["y16"], ["y"], name="y_cast", to=F32),
    ]
    declared = [("shared", F16, [2]), ("x16", F16, [1, 4, 2, 2]), ("y16", F16, [1, 2, 2, 2])]
    model = _model(nodes, [("x", F32, [1, 4, 2, 2])], [("y", F32, [1, 2, 2, 2])], [bias, weight], declared)
    _refused(model)
    repairs = make_consistent(model)
    assert repairs.retyped == ("shared",) and repairs.cast_inputs == ("/Conv",)
    (y,) = _runs(model, {"x": np.ones((1, 4, 2, 2), dtype=np.float32)})
    np.testing.assert_allclose(y, 4.0)


def test_a_kept_node_computes_in_float32_and_an_op_without_float16_gets_float32() -> None:
    """A node named in `kept` gets float32 inputs; Range has no float16 form at opset 17, so it gets float32 too."""
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], name="x_cast", to=F16),
        helper.make_node("Mul", ["x16", "x16"], ["square"], name="/Mul"),
        helper.make_node("Range", ["zero16", "limit16", "one16"], ["positions"], name="/Range"),
        helper.make_node("Add", ["square", "positions"], ["total"], name="/Add"),
        helper.make_node("Cast", ["total"], ["y"], name="y_cast", to=F32),
    ]
    halves = [_half("zero16", [0.0], []), _half("limit16", [3.0], []), _half("one16", [1.0], [])]
    model = _model(nodes, [("x", F32, [3])], [("y", F32, [3])], halves)
    repairs = make_consistent(model, kept={"/Mul"})
    assert repairs.cast_inputs == ("/Mul", "/Range")
    types = {v.name: v.type.tensor_type.elem_type for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    assert types["square"] == types["positions"] == types["total"] == F32  # inputs that agree are left as they are
    (y,) = _runs(model, {"x": np.array([300.0, 1.0, 2.0], dtype=np.float32)})
    np.testing.assert_allclose(y, [90000.0, 2.0, 6.0])  # 300² stays finite: the square computes in float32


def test_a_round_trip_the_conversion_added_between_kept_nodes_is_dropped_unless_it_writes_a_name_compared() -> None:
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["square"], name="/Mul"),
        helper.make_node("Cast", ["square"], ["square16"], name="square_to_fp16", to=F16),
        helper.make_node("Cast", ["square16"], ["square32"], name="square_to_fp32", to=F32),
        helper.make_node("Div", ["square32", "scale"], ["y"], name="/Div"),
        helper.make_node("Cast", ["square16"], ["z"], name="z_cast", to=F32),
    ]
    scale = onnx.numpy_helper.from_array(np.array([65536.0], dtype=np.float32), "scale")
    model = _model(nodes, [("x", F32, [2])], [("y", F32, [2]), ("z", F32, [2])], [scale])

    def added(node: onnx.NodeProto) -> bool:
        return node.op_type == "Cast"

    make_consistent(model, kept={"/Mul", "/Div"}, added=added, names={"square", "y"})
    assert [n.name for n in model.graph.node] == ["/Mul", "/Div", "z_cast"]  # z is a graph output: it stays
    y, z = _runs(model, {"x": np.array([300.0, 2.0], dtype=np.float32)})
    np.testing.assert_allclose(y, [90000.0 / 65536.0, 4.0 / 65536.0], rtol=1e-6)
    assert z[0] == 90000.0  # read before the float16 copy (which would be inf)


def test_a_graph_output_that_flows_float16_is_cast_back_to_its_declared_float32() -> None:
    nodes = [helper.make_node("Max", ["x16", "x16"], ["y"], name="/Max")]
    model = _model(nodes, [("x16", F16, [2])], [("y", F32, [2])])
    repairs = make_consistent(model)
    assert repairs.cast_outputs == ("y",) and "outputs y Cast back to FP32" in repairs.sentence()
    (y,) = _runs(model, {"x16": np.array([1.5, -2.0], dtype=np.float16)})
    assert y.dtype == np.float32


def test_what_the_pass_cannot_repair_is_named_by_the_strict_check() -> None:
    """An integer and a float input of one Add: no float16 conversion makes such a graph; the check names it."""
    nodes = [helper.make_node("Add", ["x", "n"], ["y"], name="/Add")]
    model = _model(nodes, [("x", F16, [2]), ("n", TensorProto.INT64, [2])], [("y", F16, [2])])
    assert not make_consistent(model)
    error = type_error(model)
    assert error is not None and "/Add" in error
