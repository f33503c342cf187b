"""Nodes with subgraphs (If, Loop): outer-scope names read by branches survive every rewrite, and a fault
inside a branch is named at the If (the branch taken in a note), a Loop as a whole.

The inline graphs run fast; the models of tests/graph_models.py (a scripted `if` and `for`) go through
`trtdiff.compare` end to end and are marked slow.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from culprit_models import edited as edited_copy
from graph_models import CASES, Case, export_case
from onnx import TensorProto, helper, numpy_helper

import trtdiff
from trtdiff.analysis.control_flow import inner_keys
from trtdiff.analysis.repro import standalone
from trtdiff.analysis.shadow import build_shadow, inject, local_name, submodel
from trtdiff.source.onnx_graph import GraphInfo, graph_from_model

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 4)).astype(np.float32)
X = RNG.standard_normal((3, 4)).astype(np.float32)


def if_graph() -> GraphInfo:
    """a = x @ W; b = Relu(a); if sum(x) > -100: y = (b @ W) * two (two an outer Constant) else y = a + 1."""
    then = helper.make_graph(
        [
            helper.make_node("MatMul", ["b", "W"], ["t1"], name="ThenMatMul"),
            helper.make_node("Mul", ["t1", "two"], ["t2"], name="ThenMul"),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("t2", TensorProto.FLOAT, [3, 4])],
    )
    other = helper.make_graph(
        [
            helper.make_node("Constant", [], ["one"], name="One", value=numpy_helper.from_array(np.float32(1.0))),
            helper.make_node("Add", ["a", "one"], ["e1"], name="ElseAdd"),
        ],
        "else",
        [],
        [helper.make_tensor_value_info("e1", TensorProto.FLOAT, [3, 4])],
    )
    nodes = [
        helper.make_node("Constant", [], ["two"], name="Two", value=numpy_helper.from_array(np.float32(2.0))),
        helper.make_node("MatMul", ["x", "W"], ["a"], name="MatMul"),
        helper.make_node("Relu", ["a"], ["b"], name="Relu"),
        helper.make_node("ReduceSum", ["x"], ["s"], name="Sum", keepdims=0),
        helper.make_node("Greater", ["s", "low"], ["c"], name="Greater"),
        helper.make_node("If", ["c"], ["y"], name="If", then_branch=then, else_branch=other),
        helper.make_node("Neg", ["y"], ["z"], name="Neg"),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "inline",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
            [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 4])],
            initializer=[numpy_helper.from_array(W, "W"), numpy_helper.from_array(np.float32(-100.0), "low")],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return graph_from_model(model, Path("inline.onnx"))


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _values(graph: GraphInfo) -> dict[str, np.ndarray]:
    a = X @ W
    b = np.maximum(a, 0)
    y = (b @ W) * 2.0
    return {"x": X, "a": a, "b": b, "c": np.array(True), "y": y, "z": -y}


def test_implicit_inputs_are_what_the_branches_read_from_outside() -> None:
    graph = if_graph()
    node = graph.nodes[graph.producer_of["y"]]
    # a from the else-branch (not its own "one"); b, W (an initializer), two (a Constant) from the then-branch
    assert node.implicit == ("a", "b", "W", "two")  # the attributes in order: else_branch, then_branch
    assert node.reads == ("c", "a", "b", "W", "two")
    # the If depends on MatMul and Relu through its branches only
    assert {graph.nodes[i].name for i in graph.ancestors(node.index)} >= {"MatMul", "Relu", "Two"}


def test_shadow_of_an_if_feeds_what_its_branches_read_and_runtime_loads_it() -> None:
    """The rewritten If reads b, a (reference values), W (carried) and two (Constant): checker and ORT accept it."""
    graph = if_graph()
    shadow = build_shadow(graph, ["y", "z"], lambda t: t in {"a", "b", "y"})
    onnx.checker.check_model(shadow.model, full_check=True)
    values = _values(graph)
    feeds = {t: values[t] for t in (*shadow.reference_inputs, *shadow.exact_inputs)}
    assert {"a", "b", "c"} <= set(feeds)
    (local,) = _session(shadow.model).run([local_name("y")], feeds)
    np.testing.assert_allclose(local, values["y"], rtol=1e-5)


def test_a_branch_input_without_reference_is_computed_and_renamed_inside_the_branch() -> None:
    """b has no reference value: Relu is copied under the local name, and the branch reads that name."""
    graph = if_graph()
    shadow = build_shadow(graph, ["y"], lambda t: t == "a")
    onnx.checker.check_model(shadow.model, full_check=True)
    assert shadow.subgraphs["y"] == ("If", "Relu")
    branch = next(n for n in shadow.model.graph.node if n.op_type == "If").attribute
    then = next(a.g for a in branch if a.name == "then_branch")
    assert then.node[0].input[0] == local_name("b")
    values = _values(graph)
    feeds = {t: values[t] for t in (*shadow.reference_inputs, *shadow.exact_inputs)}
    (local,) = _session(shadow.model).run([local_name("y")], feeds)
    np.testing.assert_allclose(local, values["y"], rtol=1e-5)


def test_submodel_of_an_if_and_its_repro_file_load_in_onnx_runtime() -> None:
    graph = if_graph()
    shadow = build_shadow(graph, ["y"], lambda t: t in {"a", "b"})
    alone = standalone(submodel(shadow, "y", graph))
    onnx.checker.check_model(alone, full_check=True)
    values = _values(graph)
    feeds = {v.name: values[v.name] for v in alone.graph.input}
    assert {"a", "b", "c"} <= set(feeds)
    (got,) = _session(alone).run(None, feeds)
    np.testing.assert_allclose(got, values["y"], rtol=1e-5)


def test_a_repro_file_of_a_renamed_branch_input_loads() -> None:
    """repro.standalone takes the shadow prefix off the outer names an If's branches read, too."""
    graph = if_graph()
    shadow = build_shadow(graph, ["y"], lambda t: t == "a")
    alone = standalone(submodel(shadow, "y", graph))
    onnx.checker.check_model(alone, full_check=True)
    values = _values(graph)
    (got,) = _session(alone).run(None, {v.name: values[v.name] for v in alone.graph.input})
    np.testing.assert_allclose(got, values["y"], rtol=1e-5)


def test_injecting_a_tensor_a_branch_reads_reaches_the_branch() -> None:
    graph = if_graph()
    model = inject(graph, ["b"])
    onnx.checker.check_model(model, full_check=True)
    (z,) = _session(model).run(["z"], {"x": X, "b": np.zeros((3, 4), np.float32)})
    np.testing.assert_array_equal(z, np.zeros((3, 4), np.float32))


def test_branch_nodes_pair_with_recorded_ops_back_from_the_if_output() -> None:
    """The then-branch's Mul is the If's record; its MatMul the record feeding it (the Constant aside)."""
    from trtdiff.backends.pytorch.records import TorchRecord

    def record(index: int, sources: tuple[int | None, ...]) -> TorchRecord:
        return TorchRecord(index, "op", "op", None, (3, 4), "float32", (), sources)

    graph = if_graph()
    then = next(a.g for a in graph.model.graph.node[graph.producer_of["y"]].attribute if a.name == "then_branch")
    keys = inner_keys(then, [record(0, (-1, None)), record(1, (0, None)), record(2, (1, None))], 2)
    assert keys == {"t2": "torch:2", "t1": "torch:1"}


# End to end: the models of tests/graph_models.py through trtdiff.compare.

_BY_NAME = {case.name: case for case in CASES}


def _compare(case: Case, path: Path) -> trtdiff.Report:
    torch.manual_seed(0)
    return trtdiff.compare(
        case.build().eval(), onnx=str(path), input_shapes=(case.shape,), backends=("torch", "onnxruntime")
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["if-branch", "if-then-head", "loop-body", "loop-then-head"])
def test_control_flow_faults_are_named_and_clean_twins_pass(name: str, tmp_path: Path) -> None:
    case = _BY_NAME[name]
    clean = export_case(case, tmp_path)
    report = _compare(case, clean)
    assert report.passed and not report.culprits
    assert report.pairing.float_paired == report.pairing.float_tensors  # the If's (Loop's) output too
    edited, expected = edited_copy(clean, tmp_path / f"{name}-edit.onnx", case.edit)
    report = _compare(case, edited)
    assert not report.passed
    assert [c.onnx_node for c in report.culprits] == [expected]
    assert report.attribution and report.attribution[0].onnx_node == expected  # injecting there ran
    if name == "if-branch":
        assert any(f"{expected} is an If that ran its then_branch (condition true)" in n for n in report.notes)
        # the comparison keeps PyTorch's values inside the branch, so the edited node inside is named too
        assert any("its node /Mul diverges" in n for n in report.notes)
    if name == "loop-body":
        assert any(f"{expected} is a Loop, named as a whole" in n for n in report.notes)


@pytest.mark.slow
def test_torch_cond_exports_as_an_if_whose_shadow_model_loads(tmp_path: Path) -> None:
    """The dynamo exporter writes torch.cond as an If whose inline branches read outer names (no local function)."""

    class Cond(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x)
            return torch.cond(
                y.mean() > -100.0, lambda v: self.conv(torch.relu(v[:, :3])) * 2.0, lambda v: v + 1.0, (y,)
            )

    path = tmp_path / "cond.onnx"
    torch.onnx.export(Cond().eval(), (torch.randn(1, 3, 8, 8),), str(path), dynamo=True, opset_version=18)
    graph = graph_from_model(onnx.load(str(path)), path)
    node = next(n for n in graph.nodes if n.op_type == "If")
    assert not graph.model.functions and node.implicit
    shadow = build_shadow(graph, [node.outputs[0]], lambda t: t in graph.data_tensors and t != node.outputs[0])
    onnx.checker.check_model(shadow.model, full_check=True)
    _session(shadow.model)
