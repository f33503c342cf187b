"""Culprits end to end: hand-edited ONNX files of tiny models, from modules and TorchScript archives.

Each edit changes one node; the local error (the node run alone on PyTorch's values) must name
exactly that node, even though every tensor after it diverges too. Clean exports name nothing;
many tiny errors that add up give drift, not a culprit.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from culprit_models import (
    BLOCK_SHAPE,
    CHAIN_SHAPE,
    CNN_SHAPE,
    conv_chain,
    conv_scaled,
    edited,
    export,
    layernorm_epsilon,
    resize_asymmetric,
    save_archive,
    scale_initializer,
    second_relu_leaky,
    small_cnn,
    softmax_to_sigmoid,
    transformer_block,
)
from torch import nn

import trtdiff
from trtdiff.report import BackendPair, Report

ORT = BackendPair("torch", "onnxruntime")
RTOL = 1e-3  # the default


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("culprits")


@pytest.fixture(scope="module")
def models() -> dict[str, tuple[nn.Module, str]]:
    return {"cnn": (small_cnn(), CNN_SHAPE), "block": (transformer_block(), BLOCK_SHAPE)}


@pytest.fixture(scope="module")
def sources(models: dict[str, tuple[nn.Module, str]], folder: Path) -> dict[str, Path]:
    """The clean exports the edits start from: the CNN at opset 13, the transformer block at 17."""
    return {
        "cnn": export(*models["cnn"], folder / "cnn13.onnx", 13),
        "block": export(*models["block"], folder / "block17.onnx", 17),
    }


@pytest.fixture(scope="module")
def archives(models: dict[str, tuple[nn.Module, str]], folder: Path) -> dict[str, Path]:
    """The same models traced and saved as TorchScript archives."""
    return {name: save_archive(model, shape, folder / f"{name}.pt") for name, (model, shape) in models.items()}


@pytest.fixture(scope="module")
def edited_file(sources: dict[str, Path], folder: Path) -> Callable[[str], tuple[Path, str]]:
    """edited_file(case) -> (the edited ONNX file, the edited node's name), made once per case."""
    cache: dict[str, tuple[Path, str]] = {}

    def make(case: str) -> tuple[Path, str]:
        if case not in cache:
            model, edit, _ = EDITS[case]
            cache[case] = edited(sources[model], folder / f"{case}.onnx", edit)
        return cache[case]

    return make


# case -> (model, edit, op type of the edited node)
EDITS: dict[str, tuple[str, Callable[[onnx.ModelProto], str], str]] = {
    "resize-asymmetric": ("cnn", resize_asymmetric, "Resize"),
    "conv-weight-x1.03": ("cnn", conv_scaled, "Conv"),
    "second-relu-call-leaky": ("cnn", second_relu_leaky, "LeakyRelu"),
    "layernorm-epsilon-0.1": ("block", layernorm_epsilon, "LayerNormalization"),
    "softmax-to-sigmoid": ("block", softmax_to_sigmoid, "Sigmoid"),
}
# case -> the inspect rule whose fix the culprit carries ("" where no rule explains the edit)
ADVICE = {
    "resize-asymmetric": "asymmetric-coordinates",
    "conv-weight-x1.03": "",
    "second-relu-call-leaky": "",
    "layernorm-epsilon-0.1": "unusual-epsilon",
    "softmax-to-sigmoid": "",
}


def _cases() -> list[object]:
    marks: dict[tuple[str, str], str] = {}  # (given, case) -> reason, for a case expected to fail
    params: list[object] = []
    for given in ("module", "archive"):
        for case in EDITS:
            reason = marks.get((given, case))
            extra = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            params.append(pytest.param(given, case, id=f"{given}-{case}", marks=extra))
    return params


@pytest.mark.parametrize(("given", "case"), _cases())
def test_the_edited_node_is_the_one_culprit(
    given: str,
    case: str,
    models: dict[str, tuple[nn.Module, str]],
    archives: dict[str, Path],
    edited_file: Callable[[str], tuple[Path, str]],
) -> None:
    name, _, op_type = EDITS[case]
    module, shape = models[name]
    path, node = edited_file(case)
    report = trtdiff.compare(module if given == "module" else archives[name], onnx=path, input_shapes=[shape])
    assert not report.passed and report.exporter == "given"
    assert [c.onnx_node for c in report.culprits] == [node], _describe(report)
    culprit = report.culprits[0]
    assert report.culprit == culprit and report.drift is None
    assert (culprit.pair, culprit.op_type, culprit.verdict, culprit.subgraph) == (ORT, op_type, "export", (node,))
    assert culprit.local.rel_err > RTOL and culprit.accumulated.rel_err > RTOL
    assert culprit.spec is not None and culprit.spec.rel_err > RTOL  # the spec computes the edit too
    assert culprit.advice_code == ADVICE[case] and bool(culprit.advice) == bool(ADVICE[case])
    # Every other node, however far its tensor drifted, is innocent on its own.
    innocent = [layer for layer in report.layers if layer.onnx_node != node]
    assert all(layer.local is not None and not layer.local[ORT].diverged for layer in innocent), _describe(report)
    assert any(layer.pairs[ORT].diverged for layer in innocent)  # the error did travel downstream
    (attribution,) = report.attribution
    assert (attribution.onnx_node, attribution.pair) == (node, ORT)
    assert attribution.final_rel_err_before > RTOL and attribution.final_rel_err_after < 1e-5
    if case == "conv-weight-x1.03":  # a scale error: cosine is blind to it, the relative error is not
        assert culprit.local.cosine > 0.9999 and culprit.accumulated.cosine > 0.9999
        assert 0.01 < culprit.local.rel_err < 0.031
    if case == "second-relu-call-leaky":  # the first call of the same ReLU module is innocent and agrees
        first = next(layer for layer in report.layers if layer.onnx_node == "/block/relu/Relu")
        assert not first.pairs[ORT].diverged and not first.local[ORT].diverged


def test_decomposed_layernorm_epsilon_is_found_through_the_module_output(
    models: dict[str, tuple[nn.Module, str]], folder: Path
) -> None:
    """At opset 13 LayerNorm is decomposed: the epsilon Add has no PyTorch value of its own.

    The culprit can only be the node the module's output pairs with (the last of /ln1/), and
    the edited Add must be in the subgraph its local error ran.
    """
    module, shape = models["block"]
    path, add = edited(export(module, shape, folder / "block13.onnx", 13), folder / "ln13.onnx", layernorm_epsilon)
    last = [n.name for n in onnx.load(str(path)).graph.node if n.name.startswith("/ln1/")][-1]
    report = trtdiff.compare(module, onnx=path, input_shapes=[shape])
    assert add.startswith("/ln1/Add") and last != add
    assert [c.onnx_node for c in report.culprits] == [last], _describe(report)
    culprit = report.culprits[0]
    assert culprit.subgraph[0] == last and add in culprit.subgraph and culprit.verdict == "export"


CLEAN = [
    pytest.param("cnn", 11, "torchscript", id="cnn-11"),
    pytest.param("cnn", 13, "torchscript", id="cnn-13"),
    pytest.param("cnn", 17, "torchscript", id="cnn-17"),
    pytest.param("cnn", 18, "dynamo", id="cnn-18-dynamo"),
    pytest.param("block", 13, "torchscript", id="block-13"),
    pytest.param("block", 17, "torchscript", id="block-17"),
    pytest.param("block", 18, "dynamo", id="block-18-dynamo"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "opset", "exporter"), CLEAN)
def test_clean_export_has_no_culprit_and_no_drift(
    name: str, opset: int, exporter: str, models: dict[str, tuple[nn.Module, str]]
) -> None:
    module, shape = models[name]
    report = trtdiff.compare(module, input_shapes=[shape], opset=opset, exporter=exporter, culprit=True)
    assert (report.opset, report.exporter) == (opset, exporter)
    assert report.passed and report.first_divergence is None
    assert report.culprits == () and report.culprit is None and report.drift is None and report.attribution == ()
    assert report.layers and all(layer.local is not None for layer in report.layers), _describe(report)
    worst = max(layer.local[ORT].rel_err for layer in report.layers)
    assert not any(layer.local[ORT].diverged for layer in report.layers) and worst < 1e-5


def test_small_errors_that_add_up_are_drift_not_a_culprit(folder: Path) -> None:
    module = conv_chain()

    def scale_every_conv(model: onnx.ModelProto) -> str:
        convs = [n for n in model.graph.node if n.op_type == "Conv"]
        for conv in convs:
            scale_initializer(model, conv.input[1], 1.0006)
        assert len(convs) == 12
        return ""

    path, _ = edited(
        export(module, CHAIN_SHAPE, folder / "chain.onnx", 13), folder / "chain-x1.0006.onnx", scale_every_conv
    )
    report = trtdiff.compare(module, onnx=path, input_shapes=[CHAIN_SHAPE])
    (output,) = report.outputs
    assert not report.passed and output.pairs[ORT].rel_err > 5 * RTOL  # 12 x 6e-4 of scale
    assert report.first_divergence is not None
    assert report.culprits == () and report.culprit is None and report.attribution == ()
    assert not any(layer.local[ORT].diverged for layer in report.layers)
    drift = report.drift
    assert drift is not None and drift.pair == ORT
    assert 1 <= len(drift.contributors) <= 5
    assert all(c.op_type == "Conv" and 5e-4 < c.local.rel_err < RTOL for c in drift.contributors), drift
    sizes = [c.local.rel_err for c in drift.contributors]
    assert sizes == sorted(sizes, reverse=True)


@pytest.mark.slow
def test_opset10_example_names_both_bilinear_resizes_and_attributes_them() -> None:
    report = trtdiff.compare(
        "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet", input_shapes=["1x3x64x64"], opset=10
    )
    assert [(c.onnx_node, c.verdict, c.pair) for c in report.culprits] == [
        ("/decoder/Resize", "export", ORT),
        ("/Resize", "export", ORT),
    ], _describe(report)
    assert report.culprit is not None and report.culprit.onnx_node == "/decoder/Resize"
    # The ASPP pooling Resize upsamples a 1x1 map, where every coordinate mode agrees.
    aspp = next(layer for layer in report.layers if layer.onnx_node == "/aspp/branches.4/Resize")
    assert aspp.local is not None and not aspp.local[ORT].diverged and not aspp.pairs[ORT].diverged
    first, second = report.attribution
    assert [a.onnx_node for a in report.attribution] == ["/decoder/Resize", "/Resize"]
    assert first.pair == second.pair == ORT
    assert first.final_rel_err_before == second.final_rel_err_before > RTOL
    (output,) = report.outputs
    assert first.final_rel_err_before == pytest.approx(output.pairs[ORT].rel_err)
    assert second.final_rel_err_after == 0.0 and second.final_cosine_after == pytest.approx(1.0)
    assert second.miou_after == 1.0


def _describe(report: Report) -> str:
    """What the report said, for assertion messages."""
    culprits = [(c.onnx_node, c.verdict, c.subgraph) for c in report.culprits]
    local = [
        (layer.onnx_node, f"{layer.local[ORT].rel_err:.1e}")
        for layer in report.layers
        if layer.local is not None and ORT in layer.local and layer.local[ORT].diverged
    ]
    return f"culprits {culprits}; drift {report.drift}; diverged locally {local}; not compared {report.not_compared}"
