"""An op the exporter decomposed pairs with the last node of its decomposition; an edit inside it is named there.

The model is ConvNeXt's block (tests/culprit_models.py: a Linear on the permuted map, LayerNorm,
an activation), with the activation and LayerNorm called as functions (no module of their own:
the module pass cannot pair them) or as modules from a TorchScript archive (no module outputs
are known). GELU in its erf and tanh forms, SiLU, HardSwish at opset 13 (no HardSwish op
before 14) and LayerNorm at opset 13 (no LayerNormalization before 17) are all written as
several ONNX nodes. A diffusion UNet's ResBlock (tests/arch_models.py) holds two in a row: GroupNorm
(Reshape, InstanceNormalization, Reshape, Mul, Add), then SiLU (Sigmoid, Mul), at FP32 and FP16.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from arch_models import ARCHITECTURES
from culprit_models import MLP_SHAPE, conv_mlp, edited, export, initializer, node, save_archive, set_attribute
from onnx import numpy_helper
from torch import nn

import trtdiff
from trtdiff.report import BackendPair, Report

ORT = BackendPair("torch", "onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("composite")


def _model(act: str, given: str, folder: Path, opset: int) -> tuple[nn.Module | Path, Path]:
    """The functional model (eager), or the module form as a TorchScript archive; and its ONNX export."""
    module = conv_mlp(act, functional=given == "functional")
    source = export(module, MLP_SHAPE, folder / f"{act}-{given}-{opset}.onnx", opset)
    if given == "archive":
        return save_archive(module, MLP_SHAPE, folder / f"{act}.pt"), source
    return module, source


def _last_before(model: onnx.ModelProto, linear: str) -> str:
    """The node whose output the Linear `linear` (fc1, fc2) multiplies: the end of the decomposition before it."""
    matmul = next(n for n in model.graph.node if n.op_type == "MatMul" and linear in n.name)
    return next(n.name for n in model.graph.node if matmul.input[0] in n.output)


def _describe(report: Report) -> str:
    lines = [f"paired {report.pairing.float_paired}/{report.pairing.float_tensors} {report.pairing.by_method}"]
    lines += [f"culprit {c.onnx_node} {c.subgraph}" for c in report.culprits]
    lines += [f"{layer.onnx_node} {layer.op_type} {layer.pairing} {layer.torch_op}" for layer in report.layers]
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("act", "opset", "aten"),
    [
        ("gelu", 17, "aten.gelu.default"),
        ("gelu-tanh", 17, "aten.gelu.default"),
        ("silu", 17, "aten.silu.default"),
        ("hardswish", 13, "aten.hardswish.default"),
    ],
)
@pytest.mark.parametrize("given", ["functional", "archive"])
def test_the_activation_pairs_with_the_last_node_of_its_decomposition(
    act: str, opset: int, aten: str, given: str, folder: Path
) -> None:
    model, source = _model(act, given, folder, opset)
    last = _last_before(onnx.load(str(source)), "fc2")
    report = trtdiff.compare(model, onnx=source, input_shapes=[MLP_SHAPE])
    assert report.passed and not report.culprits and report.drift is None, _describe(report)
    layer = next(layer for layer in report.layers if layer.onnx_node == last)
    assert (layer.op_type, layer.pairing, layer.torch_op) == ("Mul", "composite", aten), _describe(report)
    assert report.pairing.float_paired == report.pairing.float_tensors


@pytest.mark.parametrize("given", ["functional", "archive"])
def test_layernorm_below_opset_17_pairs_with_its_last_node(given: str, folder: Path) -> None:
    model, source = _model("gelu", given, folder, 13)
    last = _last_before(onnx.load(str(source)), "fc1")
    report = trtdiff.compare(model, onnx=source, input_shapes=[MLP_SHAPE])
    assert report.passed and not report.culprits, _describe(report)
    layer = next(layer for layer in report.layers if layer.onnx_node == last)
    assert (layer.op_type, layer.pairing, layer.torch_op) == ("Add", "composite", "aten.native_layer_norm.default")


def _erf_to_tanh(model: onnx.ModelProto) -> str:
    target = node(model, "Erf")
    target.op_type = "Tanh"
    return target.name


def _erf_input_scaled(model: onnx.ModelProto) -> str:
    """GELU's x / sqrt(2): the divisor 1.1 times larger (a wrong constant)."""
    div = next(n for n in model.graph.node if n.op_type == "Div" and n.output[0] == node(model, "Erf").input[0])
    constant = next(n for n in model.graph.node if div.input[1] in n.output)
    value = numpy_helper.to_array(constant.attribute[0].t)
    constant.attribute[0].t.CopyFrom(numpy_helper.from_array((value * np.float32(1.1)).astype(value.dtype)))
    return div.name


@pytest.mark.parametrize("edit", [_erf_to_tanh, _erf_input_scaled], ids=["erf-to-tanh", "erf-input-scaled"])
@pytest.mark.parametrize("given", ["functional", "archive"])
def test_an_edit_inside_gelu_names_a_node_of_its_decomposition(given: str, edit: object, folder: Path) -> None:
    module, source = _model("gelu", given, folder, 17)
    path, edited_node = edited(source, folder / f"{given}-{edit.__name__}.onnx", edit)  # type: ignore[attr-defined]
    model = onnx.load(str(path))
    last = _last_before(model, "fc2")
    decomposition = {n.name for n in model.graph.node if n.op_type != "Constant"} - {
        n.name for n in model.graph.node if any(part in n.name for part in ("fc1", "fc2", "dwconv", "Transpose"))
    }
    report = trtdiff.compare(module, onnx=path, input_shapes=[MLP_SHAPE])
    assert not report.passed and [c.onnx_node for c in report.culprits] == [last], _describe(report)
    culprit = report.culprits[0]
    assert edited_node in culprit.subgraph and len(culprit.subgraph) <= 5, _describe(report)
    assert set(culprit.subgraph) <= decomposition and culprit.verdict == "export"
    fc2 = next(layer for layer in report.layers if "fc2" in layer.onnx_node and layer.op_type == "Add")
    assert fc2.local is not None and not fc2.local[ORT].diverged  # the next Linear is innocent


def test_a_rewritten_decomposition_that_computes_the_same_is_not_paired_against_its_values(folder: Path) -> None:
    """GELU's final x 0.5 folded into the next Linear's weight: a correct file whose decomposition ends elsewhere.

    No node computes GELU's value, and the values downstream vouch for the region: the GELU
    stays unpaired (its nodes derived) and the comparison passes, never a false culprit.
    """

    def fold_half(model: onnx.ModelProto) -> str:
        half = next(n for n in model.graph.node if n.op_type == "Mul" and n.name == _last_before(model, "fc2"))
        produced = next(n for n in model.graph.node if half.input[0] in n.output or half.input[1] in n.output)
        product = half.input[0] if half.input[0] in produced.output else half.input[1]
        matmul = next(n for n in model.graph.node if n.op_type == "MatMul" and "fc2" in n.name)
        weight = initializer(model, matmul.input[1])
        weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(0.5), weight.name))
        matmul.input[0] = product
        model.graph.node.remove(half)
        return half.name

    for given in ("functional", "archive"):
        model, source = _model("gelu", given, folder, 17)
        path, _ = edited(source, folder / f"{given}-fold-half.onnx", fold_half)
        report = trtdiff.compare(model, onnx=path, input_shapes=[MLP_SHAPE], culprit=True)
        assert report.passed and not report.culprits and report.drift is None, _describe(report)
        assert all(layer.torch_op != "aten.gelu.default" for layer in report.layers), _describe(report)


def _groupnorm_epsilon(model: onnx.ModelProto) -> str:
    """The first GroupNorm's InstanceNormalization takes epsilon 0.5: named at the GroupNorm's Add."""
    set_attribute(node(model, "InstanceNormalization", "/norm1/"), "epsilon", 0.5)
    return node(model, "Add", "/norm1/").name


def _sigmoid_to_tanh(model: onnx.ModelProto) -> str:
    """The SiLU after it computes x * tanh(x): named at the SiLU's Mul."""
    node(model, "Sigmoid", "/nonlinearity/").op_type = "Tanh"
    return node(model, "Mul", "/nonlinearity/").name


@pytest.mark.parametrize("edit", [_groupnorm_epsilon, _sigmoid_to_tanh], ids=["groupnorm-epsilon", "sigmoid-to-tanh"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("given", ["eager", "archive"])
def test_an_edit_in_a_groupnorm_followed_by_silu_names_its_own_last_node(
    given: str, precision: str, edit: object, folder: Path
) -> None:
    """A diffusion UNet's ResBlock: from an archive (no module outputs) the GroupNorm could not pair while the
    SiLU reading it had no pair, nor the SiLU while its input had none: the next Conv was named, with 8 nodes."""
    arch = ARCHITECTURES["resblock"]
    module = arch.model()
    source = export(module, arch.shape, folder / "resblock.onnx", 17)
    path, expected = edited(source, folder / f"resblock-{edit.__name__}.onnx", edit)  # type: ignore[attr-defined]
    model = module if given == "eager" else save_archive(module, arch.shape, folder / "resblock.pt")
    report = trtdiff.compare(model, onnx=path, input_shapes=[arch.shape], precision=precision)
    assert not report.passed and [c.onnx_node for c in report.culprits] == [expected], _describe(report)
    subgraph = report.culprits[0].subgraph
    if edit is _groupnorm_epsilon:
        assert len(subgraph) == 5 and any("InstanceNormalization" in n for n in subgraph), _describe(report)
        silu = next(
            layer
            for layer in report.layers
            if layer.onnx_node == node(onnx.load(str(path)), "Mul", "/nonlinearity/").name
        )
        assert silu.torch_op == "aten.silu.default" and silu.local is not None and not silu.local[ORT].diverged
    else:
        assert len(subgraph) == 2 and any("Sigmoid" in n for n in subgraph), _describe(report)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_resblock_archive_whose_silu_module_is_called_twice_passes(precision: str, folder: Path) -> None:
    """The exporter scopes the second call at its caller ("/Sigmoid"), the recording at the module: the first
    call's Sigmoid and Mul were paired with the two SiLU ops in order, and a correct model failed at FP32."""
    arch = ARCHITECTURES["resblock"]
    archive = save_archive(arch.model(), arch.shape, folder / "resblock-clean.pt")
    report = trtdiff.compare(archive, input_shapes=[arch.shape], precision=precision, culprit=True)
    assert report.passed and not report.culprits, _describe(report)
    assert report.pairing.float_paired == report.pairing.float_tensors
    assert "scope" not in report.pairing.by_method, _describe(report)
