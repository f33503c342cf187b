"""trtdiff.inspect_model: the embedded DeepLabV3+ at opsets 10/11/13, one hand-made ONNX file per finding
(each fires its own finding and nothing else), PyTorch models' modules, JSON and the terminal view."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from rich.console import Console
from torch import nn

from trtdiff.errors import TrtdiffError
from trtdiff.hypotheses.inspect import inspect_model
from trtdiff.render.inspect_text import render_inspection
from trtdiff.report.inspection import Inspection

FACTORY = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"
SHAPE = "1x3x64x64"
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _value(name: str, shape: list, dtype: int = F32) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _init(name: str, values: object, dtype: type = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def _save(folder: Path, nodes: list, inputs: list, outputs: list, inits: list = (), opset: int = 13) -> Path:
    graph = helper.make_graph(nodes, "handmade", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="handmade")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = folder / f"model{len(list(folder.iterdir()))}.onnx"
    onnx.save(model, str(path))
    return path


def _resize(folder: Path, opset: int, mode: str, *, name: str = "/up/Resize", sizes=None, scales=None, **attrs) -> Path:
    """x (1x1x4x4) -> Resize -> y, with constant scales or sizes, at `opset` (Upsample below 10)."""
    inits = [_init("scales", scales)] if scales is not None else []
    inits += [_init("sizes", sizes, np.int64)] if sizes is not None else []
    if opset < 10:
        node = helper.make_node("Upsample", ["x", "scales"], ["y"], name=name, mode=mode)
    elif opset == 10:
        node = helper.make_node("Resize", ["x", "scales"], ["y"], name=name, mode=mode)
    else:
        inputs = ["x", "", "scales" if scales is not None else "", "sizes" if sizes is not None else ""]
        if opset < 13:
            inits.append(_init("roi", []))
            inputs[1] = "roi"
        node = helper.make_node("Resize", inputs, ["y"], name=name, mode=mode, **attrs)
    return _save(folder, [node], [_value("x", [1, 1, 4, 4])], [_value("y", [None] * 4)], inits, opset)


def _softmax(folder: Path) -> Path:
    node = helper.make_node("Softmax", ["x"], ["y"], name="/head/Softmax", axis=1)
    return _save(folder, [node], [_value("x", [2, 3, 4])], [_value("y", [2, 3, 4])], opset=11)


def _argmax(folder: Path) -> Path:
    node = helper.make_node("ArgMax", ["x"], ["y"], name="/head/ArgMax", axis=1)
    return _save(folder, [node], [_value("x", [2, 5])], [_value("y", [2], I64)])


def _wide_constant(folder: Path) -> Path:
    """An INT64 constant beyond INT32 in constant arithmetic that ends up added to the data as zero."""
    nodes = [
        helper.make_node("Max", ["big", "one"], ["m"], name="/Max"),
        helper.make_node("Mul", ["m", "zero"], ["z"], name="/Mul"),
        helper.make_node("Cast", ["z"], ["zf"], name="/Cast", to=F32),
        helper.make_node("Add", ["x", "zf"], ["y"], name="/Add"),
    ]
    inits = [_init("big", [2**40], np.int64), _init("one", [1], np.int64), _init("zero", [0], np.int64)]
    return _save(folder, nodes, [_value("x", [1, 4])], [_value("y", [1, 4])], inits)


def _overflow(folder: Path) -> Path:
    node = helper.make_node("Mul", ["x", "gain"], ["y"], name="/big/Mul")
    return _save(folder, [node], [_value("x", [1, 16])], [_value("y", [1, 16])], [_init("gain", [1e6])])


def _qdq(folder: Path, scale: float) -> Path:
    """x -> QuantizeLinear -> DequantizeLinear -> y, sharing one scale, as quantize_static writes them."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="/x/QuantizeLinear"),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="/x/DequantizeLinear"),
    ]
    inits = [_init("s", scale), _init("zp", 0, np.int8)]
    return _save(folder, nodes, [_value("x", [1, 4])], [_value("y", [1, 4])], inits)


def _batchnorm(folder: Path) -> Path:
    inits = [_init(n, v) for n, v in (("s", [1, 1, 1]), ("b", [0, 0, 0]), ("mean", [0, 0, 0]), ("var", [1, 1, 1]))]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y"], name="/bn/BN", epsilon=1e-5)
    return _save(folder, [node], [_value("x", [1, 3, 4, 4])], [_value("y", [1, 3, 4, 4])], inits)


def _layernorm(folder: Path, epsilon: float) -> Path:
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], name="/ln/LN", axis=-1, epsilon=epsilon)
    inits = [_init("s", np.ones(8)), _init("b", np.zeros(8))]
    return _save(folder, [node], [_value("x", [2, 8])], [_value("y", [2, 8])], inits, opset=17)


def _instancenorm(folder: Path, epsilon: float) -> Path:
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="/in/IN", epsilon=epsilon)
    inits = [_init("s", np.ones(2)), _init("b", np.zeros(2))]
    return _save(folder, [node], [_value("x", [1, 2, 4, 4])], [_value("y", [1, 2, 4, 4])], inits)


def _groupnorm(folder: Path) -> Path:
    """GroupNorm(2 groups, 4 channels) as the TorchScript exporter writes it below opset 18."""
    nodes = [
        helper.make_node("Reshape", ["x", "grouped"], ["g"], name="/gn/Reshape"),
        helper.make_node("InstanceNormalization", ["g", "ones", "zeros"], ["n"], name="/gn/IN", epsilon=1e-5),
        helper.make_node("Reshape", ["n", "shape"], ["r"], name="/gn/Reshape_1"),
        helper.make_node("Mul", ["r", "w"], ["m"], name="/gn/Mul"),
        helper.make_node("Add", ["m", "b"], ["y"], name="/gn/Add"),
    ]
    inits = [_init("grouped", [1, 2, -1], np.int64), _init("shape", [1, 4, 2, 2], np.int64)]
    inits += [_init("ones", np.ones(2)), _init("zeros", np.zeros(2))]
    inits += [_init("w", np.ones((4, 1, 1))), _init("b", np.zeros((4, 1, 1)))]
    return _save(folder, nodes, [_value("x", [1, 4, 2, 2])], [_value("y", [1, 4, 2, 2])], inits)


def _shape_chain(folder: Path) -> Path:
    """Reshape(x, [Shape(x)[0], -1]) with a dynamic batch dimension."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="/Shape"),
        helper.make_node("Gather", ["s", "first"], ["n"], name="/Gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "zero"], ["n1"], name="/Unsqueeze"),
        helper.make_node("Concat", ["n1", "minus"], ["shape"], name="/Concat", axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"], name="/Reshape"),
    ]
    inits = [_init("first", 0, np.int64), _init("zero", [0], np.int64), _init("minus", [-1], np.int64)]
    return _save(folder, nodes, [_value("x", ["batch", 3, 4])], [_value("y", ["batch", 12])], inits)


def _slice_clamped(folder: Path) -> Path:
    """A huge INT64 Slice end (TensorRT clamps it): nothing to report."""
    node = helper.make_node("Slice", ["x", "start", "end", "axes"], ["y"], name="/Slice")
    inits = [_init("start", [1], np.int64), _init("end", [2**63 - 1], np.int64), _init("axes", [1], np.int64)]
    return _save(folder, [node], [_value("x", [1, 8])], [_value("y", [1, 7])], inits)


LINEAR_X2 = {"scales": [1, 1, 2, 2]}
CASES: dict[str, tuple[Callable[[Path], Path], set[str], str | None]] = {
    "resize-opset10": (lambda f: _resize(f, 10, "linear", **LINEAR_X2), {"resize-no-coordinate-mode"}, "error"),
    "upsample-opset9": (lambda f: _resize(f, 9, "linear", **LINEAR_X2), {"resize-no-coordinate-mode"}, "error"),
    "nearest-1.5": (
        lambda f: _resize(
            f, 13, "nearest", scales=[1, 1, 1.5, 1.5], coordinate_transformation_mode="asymmetric", nearest_mode="floor"
        ),
        {"nearest-fractional-scale"},
        "warning",
    ),
    "pytorch-half-pixel-to-1": (
        lambda f: _resize(f, 13, "linear", sizes=[1, 1, 1, 4], coordinate_transformation_mode="pytorch_half_pixel"),
        {"pytorch-half-pixel-size-1"},
        "warning",
    ),
    "asymmetric-linear": (
        lambda f: _resize(f, 11, "linear", **LINEAR_X2, coordinate_transformation_mode="asymmetric"),
        {"asymmetric-coordinates"},
        "warning",
    ),
    "softmax-axis-1-opset11": (_softmax, {"softmax-axis"}, "warning"),
    "argmax-int64": (_argmax, {"int64-narrowed"}, "info"),
    "int64-constant-beyond-int32": (_wide_constant, {"int64-narrowed"}, "info"),
    "fp16-overflow": (_overflow, {"fp16-overflow"}, "warning"),
    "batchnorm": (_batchnorm, {"batchnorm-unfolded"}, "info"),
    "qdq-zero-scale": (lambda f: _qdq(f, 0.0), {"qdq-scale"}, "error"),
    "qdq-scale-is-fine": (lambda f: _qdq(f, 0.02), set(), None),
    "layernorm-eps-1e-3": (lambda f: _layernorm(f, 1e-3), {"unusual-epsilon"}, "info"),
    "layernorm-eps-1e-12": (lambda f: _layernorm(f, 1e-12), {"epsilon-underflow"}, "warning"),
    "instancenorm-eps-1e-9": (lambda f: _instancenorm(f, 1e-9), {"epsilon-underflow"}, "warning"),
    "groupnorm-as-instancenorm": (_groupnorm, {"groupnorm-instancenorm"}, "info"),
    "shape-chain-dynamic": (_shape_chain, {"shape-chains"}, "info"),
    "slice-int64-max-is-fine": (_slice_clamped, set(), None),
    "half-pixel-linear-is-fine": (
        lambda f: _resize(f, 13, "linear", **LINEAR_X2, coordinate_transformation_mode="half_pixel"),
        set(),
        None,
    ),
}


def _codes(inspection: Inspection) -> set[str]:
    return {f.code for f in inspection.findings}


@pytest.mark.parametrize("case", list(CASES))
def test_each_handmade_file_fires_its_own_finding_only(case: str, tmp_path: Path) -> None:
    build, codes, worst = CASES[case]
    inspection = inspect_model(build(tmp_path))
    assert _codes(inspection) == codes, [f.message for f in inspection.findings]
    assert inspection.worst == worst
    assert inspection.clean == (worst in (None, "info"))
    assert inspection.exporter == "given" and inspection.producer_name == "handmade"
    assert not any(note.startswith("FP16 range not checked") for note in inspection.notes), inspection.notes
    for finding in inspection.findings:
        assert finding.nodes and finding.message and finding.advice


def test_findings_name_the_nodes_and_the_scope(tmp_path: Path) -> None:
    inspection = inspect_model(_resize(tmp_path, 10, "linear", **LINEAR_X2))
    (finding,) = inspection.findings
    assert finding.nodes == ("/up/Resize",) and finding.module == "up"
    (row,) = inspection.resizes
    assert (row.mode, row.coordinate_transformation_mode, row.scales) == ("linear", None, (1.0, 1.0, 2.0, 2.0))
    assert (row.input_shape, row.output_shape) == ((1, 1, 4, 4), (1, 1, 8, 8))
    assert inspection.opset == 10 and inspection.opset_imports == {"ai.onnx": 10}
    assert inspection.inputs == {"x": "1x1x4x4"}


def test_a_zero_qdq_scale_is_one_error_naming_the_dequantize(tmp_path: Path) -> None:
    """The QuantizeLinear shares the DequantizeLinear's scale: one finding, at the DequantizeLinear a comparison
    names as the culprit."""
    (finding,) = inspect_model(_qdq(tmp_path, 0.0)).findings
    assert finding.nodes == ("/x/DequantizeLinear",) and finding.severity == "error"
    assert finding.message == "DequantizeLinear /x/DequantizeLinear: its scale s is 0: every value dequantizes to 0"


class _Interp(nn.Module):
    def __init__(self, align_corners: bool) -> None:
        super().__init__()
        self.align_corners = align_corners

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=self.align_corners)


class _Up(nn.Module):
    def __init__(self, align_corners: bool) -> None:
        super().__init__()
        self.up = _Interp(align_corners)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(x)


@pytest.mark.parametrize(
    ("align_corners", "opset", "mode", "code"),
    [
        (True, 10, None, "align-corners-lost"),
        (True, 13, "half_pixel", "align-corners-lost"),
        (False, 13, "asymmetric", "asymmetric-coordinates"),
        (False, 13, "align_corners", "coordinate-mismatch"),
    ],
)
def test_pytorch_align_corners_against_the_given_file(
    align_corners: bool, opset: int, mode: str | None, code: str, tmp_path: Path
) -> None:
    attrs = {} if mode is None else {"coordinate_transformation_mode": mode}
    path = _resize(tmp_path, opset, "linear", **LINEAR_X2, **attrs)
    inspection = inspect_model(_Up(align_corners).eval(), onnx=str(path))
    assert _codes(inspection) == {code} and inspection.worst == "error"
    (row,) = inspection.resizes
    assert (row.module, row.torch_op, row.align_corners) == ("up", "upsample_bilinear2d", align_corners)
    assert row.source is not None and "F.interpolate" in row.source
    assert inspection.findings[0].module == "up"


@pytest.fixture(scope="module")
def deeplab() -> dict[int, Inspection]:
    return {opset: inspect_model(FACTORY, input_shapes=[SHAPE], opset=opset) for opset in (10, 11, 13)}


@pytest.mark.slow
def test_deeplab_opset10_flags_the_decoder_and_final_resizes(deeplab: dict[int, Inspection]) -> None:
    """The ASPP pooling Resize upsamples a 1x1 map: every coordinate mode gives the same values, so it is not
    flagged (the README's demo shows it agreeing with PyTorch at opset 10)."""
    inspection = deeplab[10]
    errors = [f for f in inspection.findings if f.severity == "error"]
    assert [(f.code, f.nodes, f.module) for f in errors] == [
        ("resize-no-coordinate-mode", ("/decoder/Resize",), "decoder"),
        ("resize-no-coordinate-mode", ("/Resize",), ""),
    ]
    assert _codes(inspection) == {"resize-no-coordinate-mode", "shape-chains"}
    assert not inspection.clean and inspection.worst == "error"
    assert all(e.source is not None and "deeplabv3plus.py" in e.source for e in errors)
    pooling = inspection.resizes[0]
    assert pooling.module == "aspp.branches.4" and pooling.broadcasts and pooling.input_shape == (1, 32, 1, 1)


@pytest.mark.parametrize("opset", [11, 13])
def test_deeplab_from_opset11_has_no_resize_finding(deeplab: dict[int, Inspection], opset: int) -> None:
    inspection = deeplab[opset]
    assert _codes(inspection) == {"shape-chains"} and inspection.clean
    assert {r.coordinate_transformation_mode for r in inspection.resizes} == {"half_pixel"}
    assert inspection.opset == opset and inspection.exporter == "torchscript"
    assert inspection.producer.startswith("pytorch ")


def test_deeplab_reports_each_resize_with_its_module_and_call(deeplab: dict[int, Inspection]) -> None:
    for inspection in deeplab.values():
        assert [r.module for r in inspection.resizes] == ["aspp.branches.4", "decoder", ""]
        assert {(r.torch_op, r.align_corners) for r in inspection.resizes} == {("upsample_bilinear2d", False)}
        assert [r.output_shape for r in inspection.resizes] == [(1, 32, 8, 8), (1, 32, 16, 16), (1, 5, 64, 64)]
    assert deeplab[10].resizes[1].scales == (1.0, 1.0, 2.0, 2.0)  # folded from Shape arithmetic
    assert deeplab[13].resizes[1].sizes == (1, 32, 16, 16)


class _Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="nearest")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(x)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = _Head()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(self.head(x), scale_factor=0.5, mode="bilinear", align_corners=False)


@pytest.mark.slow
@pytest.mark.parametrize(("opset", "exporter"), [(13, "torchscript"), (18, "dynamo")])
def test_pytorch_model_reports_the_module_of_each_resize(opset: int, exporter: str) -> None:
    inspection = inspect_model(_Net().eval(), input_shapes=["1x2x4x4"], opset=opset)
    assert inspection.exporter == exporter and inspection.opset == opset
    rows = [(r.module, r.mode, r.torch_op, r.align_corners) for r in inspection.resizes]
    assert rows == [("head.up", "nearest", "upsample_nearest2d", None), ("", "linear", "upsample_bilinear2d", False)]
    assert all(r.source and "test_inspect.py" in r.source for r in inspection.resizes)
    assert _codes(inspection) == set()


def test_json_round_trip_and_parameter_names(deeplab: dict[int, Inspection]) -> None:
    inspection = deeplab[10]
    assert Inspection.from_json(inspection.to_json()) == inspection
    assert "(opset 11)" in inspection.findings[0].advice and "\\u001f" not in inspection.to_json()


def test_terminal_view_fits_80_columns(deeplab: dict[int, Inspection]) -> None:
    out = io.StringIO()
    render_inspection(deeplab[10], Console(file=out, width=80, color_system=None))
    text = out.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80 and not any(line.endswith(" ") for line in lines)
    assert "ERROR resize-no-coordinate-mode: /decoder/Resize (module decoder)" in text
    assert "/Resize (the model itself)" in text
    assert "at deeplabv3plus.py:120: up = F.interpolate(" in text
    assert "fix: re-export at opset 11 or higher (opset 11)" in text
    assert lines[-1] == "ERROR: 2 errors, 0 warnings, 1 info; the findings above say what to change."


def test_bad_input_raises_an_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(TrtdiffError, match=r"missing\.onnx"):
        inspect_model(tmp_path / "missing.onnx")


@pytest.mark.slow
def test_cli_inspect_exit_codes_and_json(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from trtdiff.cli.app import main

    out = tmp_path / "inspect.json"
    args = ["inspect", "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet", "--input-shape", "1x3x32x32"]
    flagged = CliRunner().invoke(main, [*args, "--opset", "10", "--json", str(out)])
    assert flagged.exit_code == 1, flagged.output
    assert "ERROR resize-no-coordinate-mode: /decoder/Resize" in flagged.stdout and "(--opset 11)" in flagged.stdout
    data = json.loads(out.read_text())
    assert {f["code"] for f in data["findings"]} >= {"resize-no-coordinate-mode"}
    clean = CliRunner().invoke(main, [*args, "--opset", "13", "--json", str(out)])  # an earlier inspection: rewritten
    assert clean.exit_code == 0, clean.output
    precious = tmp_path / "notes.json"
    precious.write_text('{"mine": true}')
    refused = CliRunner().invoke(main, [*args, "--json", str(precious)])
    assert refused.exit_code == 2 and precious.read_text() == '{"mine": true}'


def test_advice_names_parameters_for_python_callers_and_flags_for_the_cli() -> None:
    from trtdiff.options import flag_of as flag_for

    python = inspect_model(FACTORY, input_shapes=[SHAPE], opset=10)
    advice = next(f.advice for f in python.findings if f.code == "resize-no-coordinate-mode")
    assert "\x1f" not in python.to_json() and "(opset 11)" in advice
    cli = inspect_model(FACTORY, input_shapes=[SHAPE], opset=10, name_of=flag_for)
    assert "(--opset 11)" in next(f.advice for f in cli.findings if f.code == "resize-no-coordinate-mode")
