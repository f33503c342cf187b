"""trtdiff.analysis.localize on a small hand-built graph: first divergence in topological order, and suspects.

The graph (node index: name):

    x -> 0:relu -> a -> 2:mul(a, c) -> b -> 3:sig -> d -> 4:add(d, a) -> e -> 5:tail -> t
                        1:const (Constant) -> c
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from trtdiff.analysis.localize import first_divergence, suspects
from trtdiff.report import BackendPair, FirstDivergence, Layer, PairMetrics, Reason
from trtdiff.source.onnx_graph import GraphInfo, graph_from_model

ORT = BackendPair("torch", "onnxruntime")
TRT = BackendPair("torch", "tensorrt")
ORT_TRT = BackendPair("onnxruntime", "tensorrt")

TENSOR_NODE = {
    "a": ("relu", "Relu"),
    "b": ("mul", "Mul"),
    "d": ("sig", "Sigmoid"),
    "e": ("add", "Add"),
    "t": ("tail", "Relu"),
}


@pytest.fixture(scope="module")
def graph() -> GraphInfo:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node(
            "Constant", [], ["c"], name="const", value=helper.make_tensor("cv", TensorProto.FLOAT, [], [2.0])
        ),
        helper.make_node("Mul", ["a", "c"], ["b"], name="mul"),
        helper.make_node("Sigmoid", ["b"], ["d"], name="sig"),
        helper.make_node("Add", ["d", "a"], ["e"], name="add"),
        helper.make_node("Relu", ["e"], ["t"], name="tail"),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    onnx.checker.check_model(model)
    return graph_from_model(model, Path("tiny.onnx"))


def _metrics(diverged: bool, cosine: float = 1.0, max_abs: float = 0.0, rel_err: float = 0.0) -> PairMetrics:
    reasons = (Reason("cosine", cosine, 0.9999),) if diverged else ()
    return PairMetrics(
        cosine=cosine,
        max_abs=max_abs,
        mean_abs=max_abs / 2,
        rel_err=rel_err,
        ref_max_abs=1.0,
        diverged=diverged,
        reasons=reasons,
    )


def _layer(tensor: str, pairs: dict[BackendPair, PairMetrics]) -> Layer:
    node, op_type = TENSOR_NODE[tensor]
    return Layer(
        tensor=tensor,
        onnx_node=node,
        op_type=op_type,
        module=f"module_{tensor}",
        shape=(2,),
        dtype="float32",
        pairs=pairs,
    )


OK = _metrics(False)
BAD = _metrics(True, cosine=0.5, max_abs=0.25, rel_err=0.125)


def test_graph_fixture_is_what_the_docstring_draws(graph: GraphInfo) -> None:
    assert [n.name for n in graph.nodes] == ["relu", "const", "mul", "sig", "add", "tail"]
    assert graph.producer_of == {"a": 0, "c": 1, "b": 2, "d": 3, "e": 4, "t": 5}


def test_no_divergence_gives_none(graph: GraphInfo) -> None:
    layers = [_layer(t, {ORT: OK}) for t in ("a", "b", "d", "e")]
    assert first_divergence(layers, graph, [ORT]) is None


def test_empty_layers_give_none(graph: GraphInfo) -> None:
    assert first_divergence([], graph, [ORT]) is None


def test_first_diverging_layer_in_order_with_its_metrics(graph: GraphInfo) -> None:
    layers = [
        _layer("a", {ORT: OK}),
        _layer("b", {ORT: OK}),
        _layer("d", {ORT: BAD}),
        _layer("e", {ORT: _metrics(True, cosine=0.1)}),
    ]
    first = first_divergence(layers, graph, [ORT])
    assert first == FirstDivergence(
        tensor="d",
        onnx_node="sig",
        op_type="Sigmoid",
        module="module_d",
        pair=ORT,
        cosine=0.5,
        max_abs=0.25,
        rel_err=0.125,
        reasons=(Reason("cosine", 0.5, 0.9999),),
        suspects=("sig",),
    )


def test_pair_order_decides_which_diverged_pair_is_reported(graph: GraphInfo) -> None:
    trt_bad = _metrics(True, cosine=0.75)
    layers = [_layer("a", {ORT: OK, TRT: OK}), _layer("b", {ORT: BAD, TRT: trt_bad})]
    first = first_divergence(layers, graph, [TRT, ORT])
    assert first is not None and first.pair == TRT and first.cosine == 0.75
    first = first_divergence(layers, graph, [ORT, TRT])
    assert first is not None and first.pair == ORT and first.cosine == 0.5


def test_an_agreeing_earlier_pair_does_not_hide_a_later_diverged_one(graph: GraphInfo) -> None:
    layers = [_layer("a", {ORT: OK, TRT: BAD})]
    first = first_divergence(layers, graph, [ORT, TRT])
    assert first is not None and first.pair == TRT


def test_topological_order_wins_over_pair_order(graph: GraphInfo) -> None:
    layers = [_layer("a", {ORT: OK, TRT: BAD}), _layer("b", {ORT: BAD, TRT: BAD})]
    first = first_divergence(layers, graph, [ORT, TRT])
    assert first is not None and (first.tensor, first.pair) == ("a", TRT)


def test_pairs_not_in_pair_order_are_ignored(graph: GraphInfo) -> None:
    layers = [_layer("a", {ORT_TRT: BAD, ORT: OK}), _layer("b", {ORT: OK})]
    assert first_divergence(layers, graph, [ORT]) is None
    first = first_divergence(layers, graph, [ORT, ORT_TRT])
    assert first is not None and (first.tensor, first.pair) == ("a", ORT_TRT)


def test_suspects_are_the_nodes_no_agreeing_tensor_vouches_for(graph: GraphInfo) -> None:
    # Only a and e were compared: mul and sig lie between them, nearest first; the Constant is never a suspect.
    layers = [_layer("a", {ORT: OK}), _layer("e", {ORT: BAD})]
    first = first_divergence(layers, graph, [ORT])
    assert first is not None and first.suspects == ("add", "sig", "mul")


def test_suspects_only_count_agreement_on_the_same_pair(graph: GraphInfo) -> None:
    # d agrees on torch~tensorrt, but that says nothing about torch~onnxruntime.
    layers = [_layer("a", {ORT: OK}), _layer("d", {TRT: OK}), _layer("e", {ORT: BAD})]
    first = first_divergence(layers, graph, [ORT])
    assert first is not None and first.suspects == ("add", "sig", "mul")
    layers = [_layer("a", {ORT: OK}), _layer("d", {ORT: OK}), _layer("e", {ORT: BAD})]
    first = first_divergence(layers, graph, [ORT])
    assert first is not None and first.suspects == ("add",)


def test_a_diverged_earlier_tensor_on_another_pair_vouches_for_nothing(graph: GraphInfo) -> None:
    layers = [_layer("b", {TRT: BAD, ORT: OK}), _layer("e", {ORT: BAD})]
    first = first_divergence(layers, graph, [ORT])
    assert first is not None and first.tensor == "e"
    # b agrees on torch~onnxruntime: mul and relu (its ancestor) are vouched for, sig is not.
    assert first.suspects == ("add", "sig")


def test_nothing_agreeing_leaves_every_non_constant_ancestor(graph: GraphInfo) -> None:
    assert suspects(graph, "e", []) == ("add", "sig", "mul", "relu")
    assert suspects(graph, "t", []) == ("tail", "add", "sig", "mul", "relu")


def test_agreeing_tensor_vouches_for_its_own_ancestors(graph: GraphInfo) -> None:
    assert suspects(graph, "e", ["b"]) == ("add", "sig")
    assert suspects(graph, "t", ["d"]) == ("tail", "add")
    assert suspects(graph, "e", ["d", "a"]) == ("add",)


def test_agreeing_tensors_downstream_or_unknown_vouch_for_nothing(graph: GraphInfo) -> None:
    assert suspects(graph, "b", ["t", "x", "no_such_tensor"]) == ("mul", "relu")


def test_the_first_node_alone(graph: GraphInfo) -> None:
    assert suspects(graph, "a", []) == ("relu",)


def test_a_tensor_no_node_produces_has_no_suspects(graph: GraphInfo) -> None:
    assert suspects(graph, "x", []) == ()
    assert suspects(graph, "no_such_tensor", ["a"]) == ()


def test_shape_arithmetic_feeding_the_node_is_suspect_but_constants_are_not() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Cast", ["s"], ["sf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node(
            "Constant", [], ["k"], name="scale_factor", value=helper.make_tensor("k", TensorProto.FLOAT, [1], [1])
        ),
        helper.make_node("Mul", ["sf", "k"], ["m"], name="scale"),
        helper.make_node("Add", ["x", "m"], ["y"], name="add"),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    graph = graph_from_model(model, Path("shape.onnx"))
    # The shape arithmetic feeding the diverging Add is suspect; the Constant is not.
    assert suspects(graph, "y", []) == ("add", "scale", "cast", "shape")
