"""Derived references: ONNX nodes run in PyTorch on PyTorch's values, kept only where a recorded value vouches.

The evaluator must compute each op as the ONNX spec does (checked against the spec
evaluator); a derived value must equal ONNX Runtime's on a clean export, for the first sample
and for any later capture; an edited node inside a decomposed op breaks the vouching and its
region stays unpaired instead of being compared with a wrong reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from arch_models import ARCHITECTURES
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from torch import nn

import trtdiff
from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.backends.pytorch.capture import DERIVED_PREFIX, TorchCapture, capture
from trtdiff.pairing.evaluate import NodeEvaluator
from trtdiff.pairing.pairs import Pairing, pair
from trtdiff.source.export import export_onnx
from trtdiff.source.inputs import make_inputs
from trtdiff.source.loading import from_module
from trtdiff.source.onnx_graph import graph_from_model, load_graph

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
W = RNG.standard_normal((5, 6)).astype(np.float32)

# op type, attributes, extra constant inputs (name -> value)
NODES: list[tuple[str, dict[str, object], dict[str, np.ndarray]]] = [
    ("Sigmoid", {}, {}),
    ("Erf", {}, {}),
    ("Softplus", {}, {}),
    ("HardSigmoid", {"alpha": 1.0 / 6, "beta": 0.5}, {}),
    ("HardSwish", {}, {}),
    ("LeakyRelu", {"alpha": 0.1}, {}),
    ("Clip", {}, {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}),
    ("Div", {}, {"c": np.array(1.4142135, np.float32)}),
    ("Pow", {}, {"c": np.array(2.0, np.float32)}),
    ("Softmax", {"axis": -1}, {}),
    ("Softmax", {"axis": 2}, {}),
    ("ReduceMean", {"axes": [-1], "keepdims": 1}, {}),
    ("MatMul", {}, {"w": W}),
    ("LayerNormalization", {"axis": -1, "epsilon": 1e-5}, {"s": W[0, :5], "b": W[1, :5]}),
    ("Transpose", {"perm": [0, 2, 3, 1]}, {}),
    ("Reshape", {}, {"shape": np.array([0, -1, 5], np.int64)}),
    ("Flatten", {"axis": 2}, {}),
    ("Unsqueeze", {}, {"axes": np.array([0, -1], np.int64)}),
    ("Split", {"axis": 1}, {"split": np.array([1, 2], np.int64)}),
    (
        "Slice",
        {},
        {
            "s": np.array([1, -1], np.int64),
            "e": np.array([3, -4], np.int64),
            "a": np.array([2, 3]),
            "st": np.array([1, -1]),
        },
    ),
    ("Gather", {"axis": 1}, {"i": np.array([[2, 0], [-1, 1]], np.int64)}),
    ("Pad", {"mode": "constant"}, {"p": np.array([0, 0, 1, 2, 0, 0, 0, 1], np.int64), "v": np.array(0.5, np.float32)}),
    ("Expand", {}, {"shape": np.array([3, 1, 1, 1, 1], np.int64)}),
    ("Resize", {"mode": "linear"}, {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 1.5], np.float32)}),
    (
        "Resize",
        {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
        {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 2], np.float32)},
    ),
    (
        "Conv",
        {"pads": [1, 0, 0, 1], "strides": [1, 2], "group": 3},
        {"w": RNG.standard_normal((6, 1, 2, 3)).astype(np.float32)},
    ),
]


def _model(op_type: str, attrs: dict[str, object], constants: dict[str, np.ndarray], outputs: int) -> onnx.ModelProto:
    names = ["x", *constants]
    node = helper.make_node(op_type, names, [f"y{i}" for i in range(outputs)], **attrs)
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, X.shape)],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(outputs)],
        [numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize(("op_type", "attrs", "constants"), NODES, ids=[f"{n[0]}-{i}" for i, n in enumerate(NODES)])
def test_each_op_computes_what_the_onnx_spec_does(
    op_type: str, attrs: dict[str, object], constants: dict[str, np.ndarray], tmp_path: Path
) -> None:
    outputs = 2 if op_type == "Split" else 1
    model = _model(op_type, attrs, constants, outputs)
    expected = ReferenceEvaluator(model).run(None, {"x": X})
    graph = graph_from_model(model, tmp_path / "one.onnx")
    evaluator = NodeEvaluator(graph)
    got = evaluator.run(graph.nodes[0], {"x": torch.from_numpy(X)})
    assert got is not None and len(got) == outputs
    for value, reference in zip(got, expected, strict=True):
        assert value is not None and value.dtype == torch.float32
        np.testing.assert_allclose(value.numpy(), reference, rtol=1e-5, atol=1e-6)


def test_an_unknown_op_or_an_unfoldable_input_gives_no_value(tmp_path: Path) -> None:
    model = _model("Hardmax", {}, {}, 1)
    graph = graph_from_model(model, tmp_path / "one.onnx")
    assert NodeEvaluator(graph).run(graph.nodes[0], {"x": torch.from_numpy(X)}) is None
    model = _model("Reshape", {}, {}, 1)  # no shape input, no static output shape
    model.graph.node[0].input.append("")
    graph = graph_from_model(model, tmp_path / "two.onnx")
    assert NodeEvaluator(graph).run(graph.nodes[0], {"x": torch.from_numpy(X)}) is None


@pytest.fixture(scope="module")
def vit(tmp_path_factory: pytest.TempPathFactory) -> tuple[nn.Module, Path]:
    arch = ARCHITECTURES["vit"]
    model = arch.model()
    path = tmp_path_factory.mktemp("derive") / "vit.onnx"
    export_onnx(
        from_module(model), make_inputs(["x"], shapes=[arch.shape], seed=0), opset=17, exporter="torchscript", path=path
    )
    return model, path


def _ort(path: Path, feeds: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    values: dict[str, np.ndarray] = {}
    for chunk in OnnxRuntimeBackend(load_graph(path)).run(feeds, names):
        values.update(chunk)
    return values


def _derived(result: Pairing) -> dict[str, str]:
    return {tensor: p.key for tensor, p in result.pairs.items() if p.method == "derived"}


def test_derived_values_equal_onnx_runtime_on_every_sample(vit: tuple[nn.Module, Path]) -> None:
    model, path = vit
    graph = load_graph(path)
    first = make_inputs(["x"], shapes=[ARCHITECTURES["vit"].shape], seed=0)
    result = pair(graph, capture(model, first), {n for n, _ in model.named_modules()})
    derived = _derived(result)
    kinds = {graph.node_of(t).op_type for t in derived}
    # attention's Softmax is recorded (torch_attention), GELU's pieces and the reshapes between ops are not
    assert {
        "MatMul",
        "Mul",
        "Transpose",
        "Split",
        "Squeeze",
        "Erf",
        "Tanh",
        "Gather",
    } <= kinds and "Softmax" not in kinds
    second = make_inputs(["x"], shapes=[ARCHITECTURES["vit"].shape], seed=7)
    later = capture(model, second)  # a new capture knows nothing of the pairing: the pairing computes them on demand
    assert not any(key in later.store for key in derived.values())
    expected = _ort(path, second, list(derived))
    for tensor, key in derived.items():
        np.testing.assert_allclose(result.value(later, key), expected[tensor], rtol=1e-4, atol=1e-5, err_msg=tensor)


def test_a_derived_key_without_its_pairing_is_refused(vit: tuple[nn.Module, Path]) -> None:
    model, path = vit
    feeds = make_inputs(["x"], shapes=[ARCHITECTURES["vit"].shape], seed=0)
    key = next(iter(_derived(pair(load_graph(path), capture(model, feeds), {n for n, _ in model.named_modules()}))))
    fresh: TorchCapture = capture(model, feeds)
    with pytest.raises(KeyError, match="no derivation"):
        fresh.value(f"{DERIVED_PREFIX}no-such:{key}")


def test_derivations_travel_with_their_pairing_not_with_the_process(vit: tuple[nn.Module, Path]) -> None:
    """Two pairings of one capture keep their own keys; a later sample's values come through each pairing."""
    model, path = vit
    graph, names = load_graph(path), {n for n, _ in model.named_modules()}
    shape = ARCHITECTURES["vit"].shape
    first = capture(model, make_inputs(["x"], shapes=[shape], seed=0))
    one, two = pair(graph, first, names), pair(graph, first, names)
    assert _derived(one).keys() == _derived(two).keys() and not set(_derived(one).values()) & set(
        _derived(two).values()
    )
    later = capture(model, make_inputs(["x"], shapes=[shape], seed=3))
    from trtdiff.analysis.engine import CapturedValues  # what attribution reads for a later sample

    tensors = sorted(_derived(one))[:8]
    through_one = CapturedValues(later, one, tuple(graph.graph_outputs)).values(tensors)
    through_two = CapturedValues(later, two, tuple(graph.graph_outputs)).values(tensors)
    assert set(through_one) == set(tensors)
    for tensor in tensors:
        np.testing.assert_array_equal(through_one[tensor], through_two[tensor])
    with pytest.raises(KeyError, match="no derivation"):  # the capture alone computes nothing
        later.value(_derived(one)[tensors[0]].replace(one.derivation.prefix, f"{DERIVED_PREFIX}gone:"))


def test_an_edited_node_inside_gelu_leaves_its_region_unpaired(vit: tuple[nn.Module, Path], tmp_path: Path) -> None:
    model, path = vit
    edited = onnx.load(str(path))
    erf = next(n for n in edited.graph.node if n.op_type == "Erf" and "blocks.0" in n.name)
    erf.op_type = "Tanh"
    edited_path = tmp_path / "edited.onnx"
    onnx.save(edited, str(edited_path))
    graph = load_graph(edited_path)
    feeds = make_inputs(["x"], shapes=[ARCHITECTURES["vit"].shape], seed=0)
    result = pair(graph, capture(model, feeds), {n for n, _ in model.named_modules()})
    scope = "/blocks/blocks.0/mlp/act/"
    inside = {
        n.outputs[0]: n.op_type for n in graph.nodes if n.name.startswith(scope) and n.outputs[0] in graph.data_tensors
    }
    unpaired = {op for tensor, op in inside.items() if tensor not in result.pairs}
    assert unpaired == {"Div", "Tanh", "Add", "Mul"}  # the last Mul stays paired with GELU's output
    second = [t for n in graph.nodes if n.name.startswith("/blocks/blocks.1/mlp/act/") for t in n.outputs]
    assert all(t in result.pairs for t in second if t in graph.data_tensors)  # the other GELU is untouched


class _TwoNorms(nn.Module):
    """A LayerNorm on a LayerNorm's output (default affine): the second one's row means are rounding noise."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 96)
        self.norm0 = nn.LayerNorm(96)
        self.norm1 = nn.LayerNorm(96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm1(self.norm0(self.fc(x)))


def test_a_derived_value_made_of_rounding_noise_is_not_compared() -> None:
    torch.manual_seed(0)
    report = trtdiff.compare(_TwoNorms().eval(), input_shapes=["1x16x32"], opset=13, culprit=True)
    assert report.passed and not report.culprits  # at opset 13 LayerNorm is ReduceMean, Sub, Pow, ...
    compared = {layer.onnx_node: layer.pairing for layer in report.layers}
    assert compared["/norm0/ReduceMean"] == "derived"  # the mean of the input: a value worth comparing
    assert "/norm1/ReduceMean" not in compared  # the mean of a LayerNorm's output: noise on both sides
    assert compared["/norm1/Sub"] == "derived" and report.pairing.float_paired == report.pairing.float_tensors - 1


def test_a_reduced_precision_graph_is_evaluated_in_its_reference_precision(tmp_path: Path) -> None:
    """An FP16 graph's float Casts pass values through and its constants widen to the float64 golden's values."""
    scale = np.float16(1.2345)
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
        helper.make_node("Mul", ["h", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "fp16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, X.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, X.shape)],
        [numpy_helper.from_array(np.array(scale), "s")],
    )
    info = graph_from_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "h.onnx")
    x = torch.from_numpy(X.astype(np.float64))
    wide = NodeEvaluator(info, widen=True)
    (h,) = wide.run(info.nodes[0], {"x": x}) or [None]
    (y,) = wide.run(info.nodes[1], {"h": x}) or [None]
    assert h is not None and h.dtype == torch.float64 and torch.equal(h, x)
    assert y is not None and y.dtype == torch.float64 and torch.equal(y, x * float(scale))
    (narrow,) = NodeEvaluator(info).run(info.nodes[0], {"x": x}) or [None]
    assert narrow is not None and narrow.dtype == torch.float16  # as the graph computes it
