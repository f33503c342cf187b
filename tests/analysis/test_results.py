"""trtdiff.analysis.results: the engine's findings turned into layers, sample results (with mIoU), pairing and environment."""

from __future__ import annotations

import platform

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from trtdiff.analysis.engine import Compared
from trtdiff.analysis.metrics import compare_tensors
from trtdiff.analysis.results import build_layers, environment, mark_failures, pairing_summary, sample_results
from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.backends.pytorch.capture import capture
from trtdiff.errors import InputError
from trtdiff.pairing.pairs import Pairing, TorchPair
from trtdiff.report import BackendPair, SampleResult, ThresholdCheck, Thresholds
from trtdiff.source.onnx_graph import GraphInfo, load_graph
from trtdiff.source.samples import Sample

TORCH_ORT = BackendPair("torch", "onnxruntime")
THRESHOLDS = Thresholds()


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> GraphInfo:
    """x -> Relu -> Mul(2) -> y, plus shape arithmetic (Shape -> Cast) that is never worth pairing."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="/act/Relu"),
        helper.make_node("Mul", ["r", "two"], ["y"], name="/Mul"),
        helper.make_node("Shape", ["y"], ["s"], name="/Shape"),
        helper.make_node("Cast", ["s"], ["sf"], name="/Cast", to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 2, 2])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2, 2]),
            helper.make_tensor_value_info("sf", TensorProto.FLOAT, [4]),
        ],
        [numpy_helper.from_array(np.array(2.0, np.float32), "two")],
    )
    path = tmp_path_factory.mktemp("results") / "g.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return load_graph(path)


def _metrics(seed: int, scale: float = 1.0) -> dict:
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal((1, 2, 2, 2)).astype(np.float32)
    return {TORCH_ORT: compare_tensors(ref, ref * scale, THRESHOLDS)}


def test_layers_follow_the_graph_order_not_the_metrics_order(graph: GraphInfo) -> None:
    metrics = {"y": _metrics(0, 1.5), "r": _metrics(1)}
    layers = build_layers(graph, metrics, None, None)
    assert [(layer.tensor, layer.onnx_node, layer.op_type, layer.is_output) for layer in layers] == [
        ("r", "/act/Relu", "Relu", False),
        ("y", "/Mul", "Mul", True),
    ]
    assert [layer.diverged for layer in layers] == [False, True]
    assert layers[1].pairs == metrics["y"]
    assert all(layer.shape == (1, 2, 2, 2) and layer.dtype == "float32" for layer in layers)
    assert all(layer.module is None and layer.torch_op is None and layer.pairing is None for layer in layers)


def test_layers_carry_module_op_and_pairing_method(graph: GraphInfo) -> None:
    class Act(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(x) * 2.0

    captured = capture(Act(), {"x": np.ones((1, 2, 2, 2), np.float32)})
    pairing = Pairing(
        pairs={
            "r": TorchPair("torch:0", "scoped", "aten.relu.default", "act"),
            "y": TorchPair("torch:1", "global", "aten.mul.Tensor", ""),
        },
        node_modules={"/act/Relu": "act", "/Mul": None},
    )
    layers = build_layers(graph, {"r": _metrics(0), "y": _metrics(1)}, pairing, captured)
    assert [(layer.module, layer.torch_op, layer.pairing) for layer in layers] == [
        ("act", "aten.relu.default", "scoped"),
        ("", "aten.mul.Tensor", "global"),
    ]


def test_only_compared_tensors_become_layers(graph: GraphInfo) -> None:
    assert build_layers(graph, {}, None, None) == []
    assert [layer.tensor for layer in build_layers(graph, {"y": _metrics(0)}, None, None)] == ["y"]


def test_pairing_summary_counts_float_tensors_computed_from_the_inputs(graph: GraphInfo) -> None:
    summary = pairing_summary(graph, None)
    assert (summary.onnx_tensors, summary.float_tensors, summary.paired_with_torch, summary.by_method) == (4, 2, 0, {})
    pairing = Pairing(
        {"r": TorchPair("torch:0", "scoped", None, "act"), "y": TorchPair("torch:1", "global", None, "")}, {}
    )
    summary = pairing_summary(graph, pairing)
    assert summary.paired_with_torch == 2 and summary.by_method == {"scoped": 1, "global": 1}


def _logits(mask: np.ndarray, classes: int = 3) -> np.ndarray:
    """(1, C, H, W) scores whose argmax is `mask`."""
    scores = np.zeros((1, classes, *mask.shape), np.float32)
    for c in range(classes):
        scores[0, c][mask == c] = 1.0
    return scores


REFERENCE_MASK = np.array([[0, 1], [2, 2]])
MOVED_MASK = np.array([[0, 1], [2, 1]])  # one pixel of class 2 became class 1


def _compared(name: str, ref_mask: np.ndarray, cand_mask: np.ndarray, label: np.ndarray | None = None) -> Compared:
    torch_out, ort_out = _logits(ref_mask), _logits(cand_mask)
    metrics = {"out": {TORCH_ORT: compare_tensors(torch_out, ort_out, THRESHOLDS)}}
    return Compared(Sample(name, (), label), metrics, {"torch": {"out": torch_out}, "onnxruntime": {"out": ort_out}})


def test_segmentation_miou_is_tallied_for_an_nchw_output() -> None:
    compared = [_compared("same", REFERENCE_MASK, REFERENCE_MASK), _compared("moved", REFERENCE_MASK, MOVED_MASK)]
    results, segmentation = sample_results(iter(compared), ("out",), (TORCH_ORT,), "torch", None)
    assert [r.name for r in results] == ["same", "moved"]
    assert results[0].agreement_miou == {TORCH_ORT: 1.0} and results[0].changed_pixels == {TORCH_ORT: 0.0}
    # IoU per class of the moved sample: class 0: 1/1, class 1: 1/2, class 2: 1/2.
    assert results[1].agreement_miou[TORCH_ORT] == pytest.approx(2 / 3)
    assert results[1].changed_pixels[TORCH_ORT] == pytest.approx(0.25)
    assert results[1].outputs == {"out": compared[1].metrics["out"]}
    assert segmentation is not None and segmentation.num_classes == 3 and segmentation.ignore_index is None
    # Over both samples (8 pixels): class 0: 2/2, class 1: 2/3, class 2: 3/4.
    assert segmentation.agreement_miou[TORCH_ORT] == pytest.approx((1 + 2 / 3 + 3 / 4) / 3)
    assert segmentation.agreement_per_class[TORCH_ORT] == pytest.approx((1.0, 2 / 3, 3 / 4))
    assert segmentation.changed_pixels[TORCH_ORT] == pytest.approx(1 / 8)
    assert segmentation.label_miou == {} and segmentation.miou_drop == {}


def test_labels_score_each_backend_and_the_drop() -> None:
    label = REFERENCE_MASK[None]
    compared = [_compared("a", REFERENCE_MASK, MOVED_MASK, label)]
    results, segmentation = sample_results(iter(compared), ("out",), (TORCH_ORT,), "torch", None)
    assert results[0].label_miou["torch"] == 1.0
    assert results[0].label_miou["onnxruntime"] == pytest.approx(2 / 3)
    assert segmentation is not None and segmentation.miou_drop == {"onnxruntime": pytest.approx(1 / 3)}


def test_ignore_index_leaves_pixels_out_of_the_label_score() -> None:
    label = np.array([[[0, 1], [2, 255]]])  # the moved pixel is ignored
    compared = [_compared("a", REFERENCE_MASK, MOVED_MASK, label)]
    results, _ = sample_results(iter(compared), ("out",), (TORCH_ORT,), "torch", 255)
    assert results[0].label_miou == {"torch": 1.0, "onnxruntime": 1.0}


def test_a_mask_of_the_wrong_size_names_the_sample_and_labels_dir() -> None:
    compared = [_compared("cat_001", REFERENCE_MASK, REFERENCE_MASK, np.zeros((1, 3, 3), np.int64))]
    with pytest.raises(InputError) as caught:
        sample_results(iter(compared), ("out",), (TORCH_ORT,), "torch", None)
    assert caught.value.parameter == "labels_dir"
    assert "the mask of cat_001" in str(caught.value)


def test_outputs_that_are_not_segmentation_scores_have_no_miou() -> None:
    values = {"torch": {"out": np.ones((1, 5), np.float32)}, "onnxruntime": {"out": np.ones((1, 5), np.float32)}}
    metrics = {"out": {TORCH_ORT: compare_tensors(values["torch"]["out"], values["onnxruntime"]["out"], THRESHOLDS)}}
    results, segmentation = sample_results(
        [Compared(Sample("s", ()), metrics, values)], ("out", "other"), (TORCH_ORT,), "torch", None
    )
    assert segmentation is None
    assert results == [SampleResult("s", {"out": metrics["out"], "other": {}})]


def test_a_single_channel_output_is_not_segmentation() -> None:
    values = {"torch": {"out": np.ones((1, 1, 2, 2), np.float32)}, "onnxruntime": {"out": np.ones((1, 1, 2, 2))}}
    _, segmentation = sample_results([Compared(Sample("s", ()), {}, values)], ("out",), (TORCH_ORT,), "torch", None)
    assert segmentation is None


def _check(check_id: str, failing: tuple[str, ...]) -> ThresholdCheck:
    return ThresholdCheck(
        id=check_id,
        scope="outputs",
        threshold="min_cosine",
        metric="cosine",
        pair=TORCH_ORT,
        backend=None,
        limit=0.9999,
        worst=0.5,
        worst_sample=None,
        passed=not failing,
        failing_samples=failing,
    )


def test_mark_failures_lists_the_checks_each_sample_fails() -> None:
    results = [SampleResult(n, {}) for n in ("a", "b", "c")]
    checks = [_check("outputs/min-cosine", ("a", "c")), _check("outputs/rtol", ("c",)), _check("ok", ())]
    marked = mark_failures(results, checks)
    assert [(r.name, r.failed) for r in marked] == [
        ("a", ("outputs/min-cosine",)),
        ("b", ()),
        ("c", ("outputs/min-cosine", "outputs/rtol")),
    ]
    assert results[0].failed == ()  # the inputs are left as they were


def test_environment_names_versions_and_each_backend(graph: GraphInfo) -> None:
    backend = OnnxRuntimeBackend(graph)
    env = environment([backend], "cpu")
    assert env["python"] == platform.python_version()
    assert env["torch"] == torch.__version__ and env["onnx"] == onnx.__version__
    assert env["torch_device"] == "cpu" and env["onnxruntime"] == backend.describe()
    assert "torch_device" not in environment([], None)


@pytest.mark.slow
def test_pairing_counts_float_tensors_and_the_rest_by_kind() -> None:
    import trtdiff

    report = trtdiff.compare(
        "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet", input_shapes=["1x3x32x32"], opset=13
    )
    summary = report.pairing
    assert (summary.float_paired, summary.float_tensors) == (51, 51)
    assert set(summary.other_tensors) <= {"identity", "constant", "shape", "integer"}
    assert summary.float_tensors + sum(summary.other_tensors.values()) == summary.onnx_tensors
    assert summary.other_tensors.get("shape", 0) > 0  # the Resize sizes come from Shape arithmetic
