"""The FP16 conversion on the models users have (issue 38): the converted graph loads and runs everywhere.

Before: onnxconverter-common's `convert_float_to_float16` wrote graphs ONNX Runtime refused to load and the
ONNX reference evaluator could not run, and trtdiff exited 2 blaming the user's file: PyTorch's own
TransformerEncoderLayer at opset 17 (a `Cast(to=FLOAT)` of the attention's shape arithmetic left FLOAT
while its output was typed float16), a decoder step with a KV cache (the same Cast on `position_ids`, and
the attention reading the present key/value after their Cast back to float32), a UNet's float timestep,
and a weight read through an Identity whose source stayed FP32 (DeepLabV3+ at opset 17, here a bias
shared with a node kept in FP32).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from tests.converter_models import (
    PATCH_SHAPE,
    RESNET_SHAPE,
    SHARED_SHAPE,
    SHARED_SOURCE,
    decoder_inputs,
    decoder_step,
    export_with,
    patch_encoder,
    resnet18_like,
    shared_bias,
    timestep_unet,
    unet_inputs,
)
from tests.culprit_models import save_archive
from trtdiff.cli.app import main
from trtdiff.source.fp16 import convert_to_fp16
from trtdiff.source.inputs import make_inputs

BACKENDS = "torch,onnxruntime,onnx-reference"
FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16}


def _patch(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    feeds = make_inputs(["x"], shapes=[PATCH_SHAPE], seed=0)
    return export_with(patch_encoder(), feeds, tmp_path / "patch.onnx"), feeds


def _decoder(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    feeds = dict(np.load(decoder_inputs(tmp_path / "step.npz")))
    return export_with(decoder_step(), feeds, tmp_path / "step.onnx"), feeds


def _unet(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    feeds = dict(np.load(unet_inputs(tmp_path / "unet.npz")))
    return export_with(timestep_unet(), feeds, tmp_path / "unet.onnx"), feeds


def _resnet(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    feeds = make_inputs(["x"], shapes=[RESNET_SHAPE], seed=0)
    return export_with(resnet18_like(), feeds, tmp_path / "resnet.onnx"), feeds


EXPORTS: dict[str, Callable[[Path], tuple[Path, dict[str, np.ndarray]]]] = {
    "transformer-encoder-layer": _patch,
    "kv-cache-decoder-step": _decoder,
    "unet-timestep": _unet,
    "resnet18-like": _resnet,
}


def _run_both(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
    """The model's outputs from ONNX Runtime (CPU) and from the ONNX reference evaluator."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return {
        "onnxruntime": list(session.run(None, feeds)),
        "onnx-reference": list(ReferenceEvaluator(model).run(None, feeds)),
    }


def _rel_err(candidate: np.ndarray, reference: np.ndarray) -> float:
    scale = float(np.abs(reference).max()) or 1.0
    return float(np.abs(candidate.astype(np.float64) - reference).max()) / scale


def _types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    values = [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    types = {v.name: v.type.tensor_type.elem_type for v in values if v.type.HasField("tensor_type")}
    return {**types, **{i.name: i.data_type for i in model.graph.initializer}}


@pytest.mark.parametrize("case", sorted(EXPORTS))
def test_the_converted_graph_loads_and_runs_in_onnx_runtime_and_the_reference_evaluator(
    case: str, tmp_path: Path
) -> None:
    path, feeds = EXPORTS[case](tmp_path)
    fp32 = onnx.load(str(path))
    converted = convert_to_fp16(fp32).model
    # every declared type is what its node computes, and the nodes are in topological order
    onnx.checker.check_model(converted, full_check=True)
    assert any(i.data_type == TensorProto.FLOAT16 for i in converted.graph.initializer)
    # inputs and outputs keep their types, and no integer tensor (shape arithmetic, ids, masks) changes type
    assert [(v.name, v.type) for v in converted.graph.input] == [(v.name, v.type) for v in fp32.graph.input]
    assert [(v.name, v.type.tensor_type.elem_type) for v in converted.graph.output] == [
        (v.name, v.type.tensor_type.elem_type) for v in fp32.graph.output
    ]
    before, after = _types(fp32), _types(converted)
    integer = {name: t for name, t in before.items() if t not in FLOAT_TYPES}
    assert {name: after[name] for name in integer} == integer
    # every tensor the FP32 graph names is still there, so each still pairs with its PyTorch value
    assert {o for n in fp32.graph.node for o in n.output} <= {o for n in converted.graph.node for o in n.output}
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    for runtime, outputs in _run_both(converted, feeds).items():
        for output, reference in zip(outputs, expected, strict=True):
            assert output.dtype == reference.dtype, runtime
            assert _rel_err(output, reference) < 1e-2, runtime  # FP16's rounding, about 1e-3


def test_a_node_kept_in_fp32_whose_bias_another_conv_reads_through_an_identity(tmp_path: Path) -> None:
    """The TorchScript exporter writes the second zero bias as an Identity of the first; keeping the first Conv
    in FP32 kept that bias FP32, and the Identity's output was typed float16."""
    feeds = make_inputs(["x"], shapes=[SHARED_SHAPE], seed=0)
    fp32 = onnx.load(str(export_with(shared_bias(), feeds, tmp_path / "shared.onnx")))
    assert "Identity" in {n.op_type for n in fp32.graph.node}
    conversion = convert_to_fp16(fp32, keep=[SHARED_SOURCE])
    converted = conversion.model
    onnx.checker.check_model(converted, full_check=True)
    kept = next(n for n in converted.graph.node if n.name == SHARED_SOURCE)
    types = _types(converted)
    assert [types[name] for name in kept.input] == [TensorProto.FLOAT] * 3  # the kept Conv computes in FP32
    assert conversion.kept_nodes == (SHARED_SOURCE,)
    expected = ort.InferenceSession(fp32.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for outputs in _run_both(converted, feeds).values():
        assert _rel_err(outputs[0], expected[0]) < 1e-2


def test_range_and_casts_to_integers_stay_as_they_are() -> None:
    """Shape arithmetic Cast to float feeds a Range (kept FP32) and a float16 Mul; a Cast to int64 stays one."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="/Shape"),
        helper.make_node("Gather", ["shape", "first"], ["n"], name="/Gather"),
        helper.make_node("Cast", ["n"], ["n_float"], name="/Cast", to=TensorProto.FLOAT),
        helper.make_node("Range", ["zero", "n_float", "one"], ["positions"], name="/Range"),
        helper.make_node("Mul", ["x", "positions"], ["scaled"], name="/Mul"),
        helper.make_node("Cast", ["scaled"], ["index"], name="/Cast_1", to=TensorProto.INT64),
        helper.make_node("Div", ["scaled", "n_float"], ["y"], name="/Div"),
    ]
    graph = helper.make_graph(
        nodes,
        "range",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [6]),
            helper.make_tensor_value_info("index", TensorProto.INT64, [6]),
        ],
        [
            helper.make_tensor("first", TensorProto.INT64, [], [0]),
            helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
            helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        ],
    )
    fp32 = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    conversion = convert_to_fp16(fp32)
    converted = conversion.model
    onnx.checker.check_model(converted, full_check=True)
    types = _types(converted)
    range_node = next(n for n in converted.graph.node if n.name == "/Range")
    assert [types[name] for name in range_node.input] == [TensorProto.FLOAT] * 3
    assert "Range" in conversion.kept_fp32_ops
    to_int = next(n for n in converted.graph.node if n.name == "/Cast_1")
    assert helper.get_attribute_value(to_int.attribute[0]) == TensorProto.INT64 and types["index"] == TensorProto.INT64
    feeds = {"x": np.linspace(-2.0, 2.0, 6, dtype=np.float32)}
    expected = ReferenceEvaluator(fp32).run(None, feeds)
    for outputs in _run_both(converted, feeds).values():
        np.testing.assert_allclose(outputs[0], expected[0], rtol=2e-3)
        np.testing.assert_array_equal(outputs[1], expected[1])


def _compare(argv: list[str], tmp_path: Path) -> dict[str, object]:
    """`trtdiff compare ... --precision fp16` on the three CPU backends; the exit code must be 0; the JSON report."""
    saved = tmp_path / "report.json"
    args = ["compare", "--no-config", *argv, "--precision", "fp16", "--backends", BACKENDS, "--json", str(saved)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report: dict[str, object] = json.loads(saved.read_text())
    assert report["culprits"] == []
    return report


def test_pytorchs_transformer_encoder_layer_at_opset_17_passes_at_fp16(tmp_path: Path) -> None:
    """The issue's command, exactly: exit 2 before ("Type (tensor(float16)) of output arg (/l/self_attn/Cast_output_0)
    ... does not match expected type (tensor(float))")."""
    report = _compare(["tests.converter_models:patch_encoder", "--input-shape", PATCH_SHAPE, "--opset", "17"], tmp_path)
    notes = report["notes"]
    assert isinstance(notes, list) and any("onnxruntime.transformers.float16" in note for note in notes)


@pytest.mark.slow
def test_pytorchs_transformer_encoder_layer_through_dynamo_at_opset_18_passes_at_fp16(tmp_path: Path) -> None:
    model = ["tests.converter_models:patch_encoder", "--input-shape", PATCH_SHAPE]
    _compare([*model, "--opset", "18", "--exporter", "dynamo"], tmp_path)


def test_a_resnet18_shaped_archive_passes_at_fp16(tmp_path: Path) -> None:
    archive = save_archive(resnet18_like(), RESNET_SHAPE, tmp_path / "resnet18.pt")
    _compare([str(archive), "--input-shape", RESNET_SHAPE], tmp_path)


def test_a_decoder_step_with_a_kv_cache_passes_at_fp16(tmp_path: Path) -> None:
    """Before: exit 2, "Type (tensor(float16)) of output arg (/Cast_output_0) of node (/Cast) does not match"."""
    _compare(["tests.converter_models:decoder_step", "--input", str(decoder_inputs(tmp_path / "step.npz"))], tmp_path)


def test_a_unet_whose_timestep_passes_through_a_float_cast_passes_at_fp16(tmp_path: Path) -> None:
    _compare(["tests.converter_models:timestep_unet", "--input", str(unet_inputs(tmp_path / "unet.npz"))], tmp_path)


def test_keep_fp32_of_a_node_whose_bias_is_shared_through_an_identity_passes(tmp_path: Path) -> None:
    model = ["tests.converter_models:shared_bias", "--input-shape", SHARED_SHAPE, "--keep-fp32", SHARED_SOURCE]
    _compare(model, tmp_path)


def test_a_graph_the_pass_leaves_inconsistent_stops_in_one_line_naming_the_node(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The guard after the pass: were a disagreement left (here the pass is replaced by one that types the
    attention's Cast output as int64), the run stops before any backend with what to try, not with a load error
    blaming the file."""
    import trtdiff.source.fp16 as fp16
    from trtdiff.source.graph_types import TypeRepairs

    def mistyped(model: onnx.ModelProto, *args: object) -> TypeRepairs:
        for value in model.graph.value_info:
            if value.name == "/l/self_attn/Cast_output_0":
                value.type.tensor_type.elem_type = TensorProto.INT64
        return TypeRepairs()

    monkeypatch.setattr(fp16, "make_consistent", mistyped)
    argv = ["compare", "--no-config", "tests.converter_models:patch_encoder", "--input-shape", PATCH_SHAPE]
    result = CliRunner().invoke(main, [*argv, "--precision", "fp16", "--backends", BACKENDS])
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("Error: --precision fp16: the graph onnxruntime.transformers.float16 converted has types")
    assert "node name: /l/self_attn/Sqrt" in line and "--keep-fp32 NODE" in line and "--onnx" in line


def test_a_cast_the_conversion_wrote_twice_is_kept_once_and_nodes_named_alike_told_apart() -> None:
    """On the H200 host the conversion wrote one Cast twice (`X_cast_to_fp32_node`) into smp's DeepLabV3+ ResNet-101
    with its overflowing nodes kept in FP32, and ONNX Runtime refused the graph (exit 2 for a correct file)."""
    from trtdiff.source.fp16 import _unique_node_names

    cast = "x_cast_to_fp32_node"
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["a"], name=cast, to=TensorProto.FLOAT),
            helper.make_node("Cast", ["x"], ["a"], name=cast, to=TensorProto.FLOAT),  # the same node again
            helper.make_node("Neg", ["a"], ["b"], name="neg"),
            helper.make_node("Add", ["a", "b"], ["c"], name="neg"),  # another node of that name
            helper.make_node("Add", ["a", "c"], ["y"], name="neg_2"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(Exception, match="same node name"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _unique_node_names(model.graph)
    assert [n.name for n in model.graph.node] == [cast, "neg", "neg_3", "neg_2"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": np.array([1.5, -2.0], np.float16)})
    np.testing.assert_array_equal(y, [1.5, -2.0])
