"""trtdiff.source.onnx_graph on small hand-built ONNX files: nodes, types, data tensors, ancestors, opset."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtdiff.errors import OnnxFileError
from trtdiff.source.onnx_graph import DYNAMO_SCOPES_KEY, GraphInfo, TensorType, graph_from_model, load_graph, opset_of


def _model() -> onnx.ModelProto:
    """x -> relu -> r; Shape(r) -> s; Constant -> c; Reshape(r, s) -> y; Add(r, w) -> a; Mul(a, y) -> out.

    The weight `w` is an initializer also listed among the graph inputs (old exporters do that).
    """
    weight = numpy_helper.from_array(np.full((1, 3, 2, 2), 0.5, dtype=np.float32), "w")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="/backbone/relu/Relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node(
            "Constant", [], ["c"], name="const", value=helper.make_tensor("cv", TensorProto.INT64, [1], [0])
        ),
        helper.make_node("Reshape", ["r", "s"], ["y"], name="reshape"),
        helper.make_node("Add", ["r", "w"], ["a"]),  # unnamed
        helper.make_node("Mul", ["a", "y"], ["out"], name="mul"),
        helper.make_node("Unsqueeze", ["c", "c"], ["cu"], name="const_arith"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 2]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [1, 3, 2, 2]),
        ],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 2, 2]),
            helper.make_tensor_value_info("cu", TensorProto.INT64, [1, 1]),
        ],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="unit-test")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("graph") / "tiny.onnx"
    onnx.save(_model(), str(path))
    return path


@pytest.fixture(scope="module")
def graph(onnx_file: Path) -> GraphInfo:
    return load_graph(onnx_file)


def test_load_graph_reads_nodes_in_file_order(graph: GraphInfo, onnx_file: Path) -> None:
    assert graph.path == onnx_file
    assert [n.name for n in graph.nodes] == [
        "/backbone/relu/Relu",
        "shape",
        "const",
        "reshape",
        "Add_4",
        "mul",
        "const_arith",
    ]
    assert [n.index for n in graph.nodes] == list(range(7))
    assert graph.nodes[3].inputs == ("r", "s") and graph.nodes[3].outputs == ("y",)
    assert graph.nodes[0].op_type == "Relu" and graph.nodes[0].domain == ""
    assert graph.producer == "unit-test"


def test_graph_inputs_exclude_initializers(graph: GraphInfo) -> None:
    assert graph.graph_inputs == ("x",)
    assert graph.initializers == frozenset({"w"})
    assert graph.graph_outputs == ("out", "cu")


def test_node_outputs_in_topological_order(graph: GraphInfo) -> None:
    assert graph.node_outputs == ["r", "s", "c", "y", "a", "out", "cu"]


def test_producer_of_and_node_of(graph: GraphInfo) -> None:
    assert graph.producer_of == {"r": 0, "s": 1, "c": 2, "y": 3, "a": 4, "out": 5, "cu": 6}
    node = graph.node_of("a")
    assert node is not None and node.name == "Add_4"
    assert graph.node_of("x") is None and graph.node_of("w") is None and graph.node_of("nope") is None


def test_tensor_types_of_inferred_values(graph: GraphInfo) -> None:
    relu = graph.tensor_type("r")
    assert relu == TensorType(np.dtype(np.float32), (1, 3, 2, 2))
    assert relu.is_float and relu.nbytes() == 48
    shape = graph.tensor_type("s")
    assert shape.dtype == np.dtype(np.int64) and shape.shape == (4,)
    assert not shape.is_float and shape.nbytes() == 32


def test_tensor_types_of_inputs_initializers_and_outputs(graph: GraphInfo) -> None:
    assert graph.tensor_type("x") == TensorType(np.dtype(np.float32), (1, 3, 2, 2))
    assert graph.tensor_type("w") == TensorType(np.dtype(np.float32), (1, 3, 2, 2))
    assert graph.tensor_type("out").nbytes() == 48


def test_unknown_tensor_has_unknown_type(graph: GraphInfo) -> None:
    unknown = graph.tensor_type("no_such_tensor")
    assert unknown == TensorType(None, None)
    assert unknown.nbytes() is None and not unknown.is_float


@pytest.mark.parametrize(
    ("tensor_type", "nbytes", "is_float"),
    [
        (TensorType(np.dtype(np.float16), (2, 5)), 20, True),
        (TensorType(np.dtype(np.float64), ()), 8, True),
        (TensorType(np.dtype(np.int32), (0, 7)), 0, False),
        (TensorType(np.dtype(np.bool_), (3,)), 3, False),
        (TensorType(np.dtype(np.float32), (None, 3)), None, True),
        (TensorType(np.dtype(np.float32), None), None, True),
        (TensorType(None, (2, 2)), None, False),
    ],
)
def test_tensor_type_nbytes_and_is_float(tensor_type: TensorType, nbytes: int | None, is_float: bool) -> None:
    assert tensor_type.nbytes() == nbytes
    assert tensor_type.is_float is is_float


def test_symbolic_dimension_is_unknown() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
    )
    info = graph_from_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), Path("dyn.onnx"))
    assert info.tensor_type("x").shape == (None, 3)
    assert info.tensor_type("y").nbytes() is None


def test_data_tensors_exclude_constants_and_shape_arithmetic(graph: GraphInfo) -> None:
    # s is the shape of r (not its values); c and cu are constants; w is a weight.
    assert graph.data_tensors == frozenset({"x", "r", "y", "a", "out"})


def test_ancestors(graph: GraphInfo) -> None:
    assert graph.ancestors(0) == set()
    assert graph.ancestors(1) == {0}
    assert graph.ancestors(3) == {0, 1}
    assert graph.ancestors(5) == {0, 1, 3, 4}
    assert graph.ancestors(6) == {2}


def test_torchscript_names_give_scope_pieces(graph: GraphInfo) -> None:
    assert graph.nodes[0].scope_pieces == ("backbone", "relu")
    assert graph.nodes[1].scope_pieces is None
    assert graph.nodes[0].module_path is None


def test_dynamo_metadata_gives_the_module_path() -> None:
    node = helper.make_node("Relu", ["x"], ["y"], name="node_relu")
    entry = node.metadata_props.add()
    entry.key, entry.value = DYNAMO_SCOPES_KEY, "['backbone', 'backbone.act', 'relu']"
    model = helper.make_model(
        helper.make_graph(
            [node],
            "dyn",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        ),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    info = graph_from_model(model, Path("d.onnx"))
    assert info.nodes[0].module_path == "backbone.act"
    assert info.nodes[0].scope_pieces is None
    assert info.opset == 18


def test_opset_is_read_from_the_file(graph: GraphInfo) -> None:
    assert graph.opset == 13


def test_opset_of_reads_the_default_domain_among_others() -> None:
    model = _model()
    del model.opset_import[:]
    model.opset_import.extend([helper.make_opsetid("com.microsoft", 1), helper.make_opsetid("", 11)])
    assert opset_of(model) == 11
    del model.opset_import[:]
    model.opset_import.extend([helper.make_opsetid("ai.onnx", 17)])
    assert opset_of(model) == 17


def test_opset_of_without_default_domain_raises() -> None:
    model = _model()
    del model.opset_import[:]
    model.opset_import.extend([helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(OnnxFileError):
        opset_of(model)


def test_missing_file_raises_naming_it(tmp_path: Path) -> None:
    with pytest.raises(OnnxFileError, match=re.escape("absent_model.onnx")):
        load_graph(tmp_path / "absent_model.onnx")


def test_folder_is_not_an_onnx_file(tmp_path: Path) -> None:
    folder = tmp_path / "a_folder.onnx"
    folder.mkdir()
    with pytest.raises(OnnxFileError, match=re.escape("a_folder.onnx")):
        load_graph(folder)


def test_corrupt_file_raises_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "corrupt_model.onnx"
    path.write_bytes(b"\x08\x07this is not a protobuf \xff\xff\xff\xff")
    with pytest.raises(OnnxFileError, match=re.escape("corrupt_model.onnx")):
        load_graph(path)


def test_truncated_file_raises_naming_it(tmp_path: Path, onnx_file: Path) -> None:
    path = tmp_path / "truncated_model.onnx"
    path.write_bytes(onnx_file.read_bytes()[:-40])
    with pytest.raises(OnnxFileError, match=re.escape("truncated_model.onnx")):
        load_graph(path)


def test_graph_without_nodes_raises_naming_it(tmp_path: Path) -> None:
    model = helper.make_model(
        helper.make_graph(
            [],
            "empty",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    path = tmp_path / "empty_model.onnx"
    onnx.save(model, str(path))
    with pytest.raises(OnnxFileError, match=re.escape("empty_model.onnx")):
        load_graph(path)


def test_graph_from_model_keeps_the_given_model(onnx_file: Path) -> None:
    model = onnx.load(str(onnx_file))
    info = graph_from_model(model, onnx_file)
    assert info.model is model
    assert len(info.model.graph.value_info) == 0  # shape inference does not write into the caller's model
