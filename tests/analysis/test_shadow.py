"""trtdiff.analysis.shadow on small inline ONNX graphs: which nodes are copied, what they read, and that they reproduce."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtdiff.analysis.shadow import PREFIX, ShadowModel, build_shadow, inject, local_name, submodel
from trtdiff.source.onnx_graph import GraphInfo, graph_from_model

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 4)).astype(np.float32)
BIAS = RNG.standard_normal((4,)).astype(np.float32)


def _graph(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[onnx.TensorProto],
) -> GraphInfo:
    model = helper.make_model(
        helper.make_graph(nodes, "inline", inputs, outputs, initializer=initializers),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return graph_from_model(model, Path("inline.onnx"))


def _float(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def dense_graph() -> GraphInfo:
    """x -> MatMul(W) -> a -> Mul(Constant 2) -> b -> Relu -> r; y = r + a; z = y + BIAS (z not wanted)."""
    nodes = [
        helper.make_node("Constant", [], ["c"], name="Two", value=numpy_helper.from_array(np.float32(2.0))),
        helper.make_node("MatMul", ["x", "W"], ["a"], name="MatMul"),
        helper.make_node("Mul", ["a", "c"], ["b"], name="Mul"),
        helper.make_node("Relu", ["b"], ["r"], name="Relu"),
        helper.make_node("Add", ["r", "a"], ["y"], name="Add"),
        helper.make_node("Add", ["y", "bias"], ["z"], name="AddBias"),
    ]
    return _graph(
        nodes,
        [_float("x", [3, 4])],
        [_float("y", [3, 4]), _float("z", [3, 4])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(BIAS, "bias")],
    )


def reshape_graph() -> GraphInfo:
    """h = Relu(x); the new shape is Shape(h) -> Gather([1, 0, 2]); y = Reshape(h, new shape) + 1."""
    nodes = [
        helper.make_node("Relu", ["x"], ["h"], name="Relu"),
        helper.make_node("Shape", ["h"], ["s"], name="Shape"),
        helper.make_node("Gather", ["s", "order"], ["g"], name="Gather", axis=0),
        helper.make_node("Reshape", ["h", "g"], ["t"], name="Reshape"),
        helper.make_node("Add", ["t", "one"], ["y"], name="Add"),
    ]
    return _graph(
        nodes,
        [_float("x", [2, 3, 4])],
        [_float("y", [3, 2, 4])],
        [
            numpy_helper.from_array(np.array([1, 0, 2], dtype=np.int64), "order"),
            numpy_helper.from_array(np.ones((1,), np.float32), "one"),
        ],
    )


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as trtdiff's backend runs
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _all_values(graph: GraphInfo, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every node output of the original graph, by ONNX Runtime (the graph inputs too)."""
    model = onnx.ModelProto()
    model.CopyFrom(graph.model)
    inferred = onnx.shape_inference.infer_shapes(graph.model)
    known = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    names = list(graph.node_outputs)
    del model.graph.output[:]
    model.graph.output.extend(known[name] for name in names)
    values = dict(zip(names, _session(model).run(names, dict(feeds)), strict=True))
    return {**feeds, **values}


def _run_shadow(shadow: ShadowModel, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The shadow model's local outputs, fed with `values` (the original graph's own), by original tensor."""
    feeds = {name: values[name] for name in (*shadow.reference_inputs, *shadow.exact_inputs)}
    tensors = list(shadow.outputs)
    got = _session(shadow.model).run([shadow.outputs[t] for t in tensors], feeds)
    return dict(zip(tensors, got, strict=True))


def _nodes(shadow: ShadowModel) -> dict[str, onnx.NodeProto]:
    names = [node.name for node in shadow.model.graph.node]
    assert len(names) == len(set(names)), f"a node was copied twice: {names}"
    return {node.name: node for node in shadow.model.graph.node}


def _has(*tensors: str) -> Callable[[str], bool]:
    wanted = set(tensors)
    return lambda tensor: tensor in wanted


def test_each_wanted_node_is_copied_with_its_inputs_fed_from_outside() -> None:
    graph = dense_graph()
    shadow = build_shadow(graph, ["x", "a", "b", "r", "y"], _has("a", "b", "r"))
    # "x" is a graph input: no node makes it, so it has no local output.
    assert shadow.outputs == {t: local_name(t) for t in ("a", "b", "r", "y")}
    assert local_name("a") == PREFIX + "a"
    assert shadow.subgraphs == {"a": ("MatMul",), "b": ("Mul",), "r": ("Relu",), "y": ("Add",)}
    assert shadow.reference_inputs == ("x", "a", "b", "r")  # graph inputs count as the reference's
    assert shadow.exact_inputs == ()
    nodes = _nodes(shadow)
    assert set(nodes) == {"Two", *(PREFIX + n for n in ("MatMul", "Mul", "Relu", "Add"))}
    assert list(nodes[PREFIX + "Mul"].input) == ["a", "c"] and list(nodes[PREFIX + "Mul"].output) == [local_name("b")]
    assert list(nodes[PREFIX + "Add"].input) == ["r", "a"] and list(nodes[PREFIX + "Add"].output) == [local_name("y")]
    model_graph = shadow.model.graph
    assert [v.name for v in model_graph.input] == ["x", "a", "b", "r"]
    assert [v.name for v in model_graph.output] == [local_name(t) for t in ("a", "b", "r", "y")]
    assert all(v.type.tensor_type.elem_type == TensorProto.FLOAT for v in [*model_graph.input, *model_graph.output])
    assert [d.dim_value for d in model_graph.output[0].type.tensor_type.shape.dim] == [3, 4]
    assert {o.domain: o.version for o in shadow.model.opset_import} == {"": 13}
    onnx.checker.check_model(shadow.model, full_check=True)


def test_initializers_and_constant_nodes_are_kept_and_only_those_used() -> None:
    graph = dense_graph()
    shadow = build_shadow(graph, ["a", "b"], _has("a"))
    initializers = {init.name: numpy_helper.to_array(init) for init in shadow.model.graph.initializer}
    assert set(initializers) == {"W"}  # "bias" feeds AddBias, which no wanted node needs
    np.testing.assert_array_equal(initializers["W"], W)
    (constant,) = [n for n in shadow.model.graph.node if n.op_type == "Constant"]
    assert constant.name == "Two" and list(constant.output) == ["c"]
    assert numpy_helper.to_array(constant.attribute[0].t) == np.float32(2.0)
    assert "c" not in (*shadow.reference_inputs, *shadow.exact_inputs)


def test_a_float_input_without_reference_pulls_its_producer_in() -> None:
    graph = dense_graph()
    shadow = build_shadow(graph, ["r", "y"], _has("a"))
    assert shadow.subgraphs == {"r": ("Relu", "Mul"), "y": ("Add", "Relu", "Mul")}
    assert shadow.reference_inputs == ("a",)  # the MatMul is not pulled: its output has a reference
    nodes = _nodes(shadow)  # Mul and Relu are copied once, shared by both subgraphs
    assert set(nodes) == {"Two", PREFIX + "Mul", PREFIX + "Relu", PREFIX + "Add"}
    assert list(nodes[PREFIX + "Relu"].input) == [local_name("b")]
    assert list(nodes[PREFIX + "Add"].input) == [local_name("r"), "a"]
    # Without any reference the whole ancestry up to the graph input is pulled in.
    bare = build_shadow(graph, ["y"], _has())
    assert bare.subgraphs == {"y": ("Add", "Relu", "Mul", "MatMul")}
    assert bare.reference_inputs == ("x",)


def test_shape_arithmetic_inputs_are_exact_inputs() -> None:
    graph = reshape_graph()
    shadow = build_shadow(graph, ["h", "t", "y"], _has("h", "t"))
    assert shadow.exact_inputs == ("g",)  # Shape -> Gather: the original graph's own values, not the reference's
    assert shadow.reference_inputs == ("x", "h", "t")
    assert shadow.subgraphs == {"h": ("Relu",), "t": ("Reshape",), "y": ("Add",)}
    nodes = _nodes(shadow)
    assert "Shape" not in {n.op_type for n in nodes.values()} and "Gather" not in {n.op_type for n in nodes.values()}
    assert list(nodes[PREFIX + "Reshape"].input) == ["h", "g"]
    (exact,) = [v for v in shadow.model.graph.input if v.name == "g"]
    assert exact.type.tensor_type.elem_type == TensorProto.INT64
    # The data input of the Reshape is pulled in when it has no reference; the shape still comes exact.
    pulled = build_shadow(graph, ["y"], _has())
    assert pulled.subgraphs == {"y": ("Add", "Reshape", "Relu")}
    assert pulled.exact_inputs == ("g",) and pulled.reference_inputs == ("x",)


CASES: dict[str, tuple[Callable[[], GraphInfo], Callable[[str], bool], tuple[int, ...]]] = {
    "dense-all-referenced": (dense_graph, _has("a", "b", "r", "y"), (3, 4)),
    "dense-some-referenced": (dense_graph, _has("a"), (3, 4)),
    "dense-none-referenced": (dense_graph, _has(), (3, 4)),
    "reshape-all-referenced": (reshape_graph, _has("h", "t"), (2, 3, 4)),
    "reshape-none-referenced": (reshape_graph, _has(), (2, 3, 4)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_shadow_model_reproduces_every_node_output_exactly(case: str) -> None:
    make, has_reference, shape = CASES[case]
    graph = make()
    values = _all_values(graph, {"x": RNG.standard_normal(shape).astype(np.float32)})
    wanted = [t for t in graph.node_outputs if t in graph.data_tensors]
    shadow = build_shadow(graph, wanted, has_reference)
    assert set(shadow.outputs) == set(wanted)
    local = _run_shadow(shadow, values)
    for tensor in wanted:
        assert local[tensor].dtype == values[tensor].dtype, tensor
        np.testing.assert_array_equal(local[tensor], values[tensor], err_msg=tensor)


def test_the_shadow_model_computes_from_the_values_fed_not_the_original_ones() -> None:
    graph = dense_graph()
    values = _all_values(graph, {"x": RNG.standard_normal((3, 4)).astype(np.float32)})
    shadow = build_shadow(graph, ["b", "r", "y"], _has("a", "b", "r"))
    fed = {**values, "a": values["a"] + 1, "b": -values["b"]}
    local = _run_shadow(shadow, fed)
    np.testing.assert_array_equal(local["b"], (values["a"] + 1) * np.float32(2))
    np.testing.assert_array_equal(local["r"], np.maximum(-values["b"], 0))
    np.testing.assert_array_equal(local["y"], values["r"] + fed["a"])


def test_submodel_holds_one_subgraph_and_the_spec_evaluator_agrees() -> None:
    from onnx.reference import ReferenceEvaluator

    graph = dense_graph()
    values = _all_values(graph, {"x": RNG.standard_normal((3, 4)).astype(np.float32)})
    shadow = build_shadow(graph, ["a", "y"], _has("a"))
    part = submodel(shadow, "y", graph)
    assert {n.name for n in part.graph.node} == {"Two", *(PREFIX + n for n in ("Add", "Relu", "Mul"))}
    assert [v.name for v in part.graph.input] == ["a"] and [v.name for v in part.graph.output] == [local_name("y")]
    assert not part.graph.initializer  # W belongs to the MatMul, which y's subgraph does not run
    (spec,) = ReferenceEvaluator(part).run(None, {"a": values["a"]})
    np.testing.assert_allclose(spec, values["y"], rtol=1e-6, atol=1e-6)


def test_inject_turns_tensors_into_graph_inputs() -> None:
    graph = dense_graph()
    values = _all_values(graph, {"x": RNG.standard_normal((3, 4)).astype(np.float32)})
    model = inject(graph, ["b"])
    assert "b" in [v.name for v in model.graph.input]
    assert all("b" not in node.output for node in model.graph.node)  # the node that made it writes elsewhere now
    assert "b" not in {v.name for v in model.graph.value_info}
    assert graph.model.graph.node[2].output[0] == "b"  # the original is left as it was
    session = _session(model)
    y, z = session.run(["y", "z"], {"x": values["x"], "b": values["b"]})
    np.testing.assert_array_equal(y, values["y"])
    np.testing.assert_array_equal(z, values["z"])
    other = values["b"] + np.float32(1)
    (y,) = session.run(["y"], {"x": values["x"], "b": other})
    np.testing.assert_array_equal(y, np.maximum(other, 0) + values["a"])


def test_inject_several_tensors_and_a_graph_output() -> None:
    graph = dense_graph()
    values = _all_values(graph, {"x": RNG.standard_normal((3, 4)).astype(np.float32)})
    model = inject(graph, ["a", "y"])
    assert [v.name for v in model.graph.input] == ["x", "a", "y"]
    session = _session(model)
    feeds = {"x": values["x"], "a": values["a"], "y": values["y"]}
    (z,) = session.run(["z"], feeds)
    np.testing.assert_array_equal(z, values["z"])
    (z,) = session.run(["z"], {**feeds, "y": np.zeros_like(values["y"])})
    np.testing.assert_array_equal(z, np.broadcast_to(BIAS, z.shape))


@pytest.mark.parametrize("referenced", ["every-tensor", "activations-only"])
def test_the_shadow_of_an_exported_cnn_reproduces_every_node_output(tmp_path: Path, referenced: str) -> None:
    from culprit_models import CNN_SHAPE, export, small_cnn

    from trtdiff.source.inputs import make_inputs

    graph = graph_from_model(onnx.load(str(export(small_cnn(), CNN_SHAPE, tmp_path / "cnn.onnx", 13))), tmp_path)
    values = _all_values(graph, make_inputs(["x"], shapes=[CNN_SHAPE], seed=0))
    wanted = [t for t in graph.node_outputs if t in graph.data_tensors]
    relus = {t for t in wanted if graph.node_of(t).op_type == "Relu"}
    shadow = build_shadow(graph, wanted, (lambda t: True) if referenced == "every-tensor" else relus.__contains__)
    if referenced == "activations-only":  # each ReLU runs with the Conv before it; each Conv alone
        assert shadow.subgraphs["/stem/relu/Relu_output_0"] == ("/stem/relu/Relu", "/stem/conv/Conv")
        assert shadow.subgraphs["/down/conv/Conv_output_0"] == ("/down/conv/Conv",)
    local = _run_shadow(shadow, values)
    for tensor in wanted:
        np.testing.assert_array_equal(local[tensor], values[tensor], err_msg=tensor)


def test_a_large_cast_in_parts_rounds_as_numpy_does_in_one_step() -> None:
    """float64 to float16 directly (never through float32, which rounds twice), inf past float16's range."""
    from trtdiff.analysis.shadow import cast

    values = np.random.default_rng(0).standard_normal(5_000_000) * 1e3
    values[[3, 4_999_999]] = (1e6, np.nan)
    parted = cast(values, np.dtype(np.float16))
    with np.errstate(over="ignore"):
        assert np.array_equal(parted, values.astype(np.float16), equal_nan=True)
        assert not np.array_equal(parted, values.astype(np.float32).astype(np.float16), equal_nan=True)
    assert np.isinf(parted[3]) and np.isnan(parted[-1])


def test_float32_to_float16_and_back_round_as_numpy_does_on_every_kind_of_value() -> None:
    """The torch conversion (analysis.metrics.half_cast; numpy's is 10-100x slower on subnormals and overflows)
    gives numpy's values bit for bit: random bit patterns (every exponent, subnormals, infinities, NaN), ties at
    the rounding boundaries, and the edges of float16's range. NaN stays NaN (its payload bits may differ)."""
    from trtdiff.analysis.shadow import cast

    rng = np.random.default_rng(1)
    bits = rng.integers(0, 1 << 32, size=3_000_000, dtype=np.uint64).astype(np.uint32)
    ties = (np.arange(1 << 16, dtype=np.uint32) << 13) | (1 << 12)  # halfway between two float16 values
    edges = np.array([65504, 65519.996, 65520, -65520, 6.1035156e-05, 5.9604645e-08, 2.9802322e-08, 0], np.float32)
    values = np.concatenate([bits.view(np.float32), ties.view(np.float32), edges])
    with np.errstate(over="ignore", invalid="ignore"):
        expected = values.astype(np.float16)
    halved = cast(values, np.dtype(np.float16))
    assert halved.dtype == np.float16 and halved.shape == values.shape
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(halved), nan)
    assert np.array_equal(halved[~nan].view(np.uint16), expected[~nan].view(np.uint16))
    every_half = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    for halves in (every_half, halved):  # one call, and 3 million values in parts on the comparing threads
        widened = cast(halves, np.dtype(np.float32))
        nan = np.isnan(halves)
        assert widened.dtype == np.float32 and np.array_equal(np.isnan(widened), nan)
        assert np.array_equal(widened[~nan], halves[~nan].astype(np.float32))
