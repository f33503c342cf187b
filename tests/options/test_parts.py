"""trtdiff.options: fields routed to their parts by name, and every validate() rule naming its parameter."""

from __future__ import annotations

import dataclasses
import math

import pytest

from trtdiff.errors import OptionError
from trtdiff.options import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_MEMORY_BYTES,
    BackendOptions,
    BuildSettings,
    CompareOptions,
    ExportOptions,
    GateOptions,
    LoadOptions,
)
from trtdiff.report import Thresholds


def test_defaults() -> None:
    options = CompareOptions()
    assert options.load == LoadOptions() and options.export == ExportOptions()
    assert options.runtime.backends is None and options.runtime.ort_provider == "auto"
    assert options.runtime.chunk_bytes == DEFAULT_CHUNK_BYTES and options.runtime.memory_bytes == DEFAULT_MEMORY_BYTES
    assert options.thresholds == Thresholds(min_cosine=0.9999, rtol=1e-3, max_abs=None)
    assert options.force is False
    options.validate()


def test_with_fields_routes_each_field_to_its_part() -> None:
    options = CompareOptions().with_fields(
        model_class="pkg.mod:Net",
        seed=3,
        opset=13,
        exporter="dynamo",
        backends=["torch", "onnxruntime"],
        chunk_bytes=64,
        rtol=1e-4,
        max_abs=0.5,
        num_samples=4,
        min_miou=0.9,
        force=True,
    )
    assert options.load == LoadOptions(model_class="pkg.mod:Net", seed=3)
    assert options.export == ExportOptions(opset=13, exporter="dynamo")
    assert options.runtime == BackendOptions(backends=("torch", "onnxruntime"), chunk_bytes=64)
    assert options.thresholds == Thresholds(min_cosine=0.9999, rtol=1e-4, max_abs=0.5)
    assert options.gate == GateOptions(num_samples=4, min_miou=0.9)
    assert options.force is True


def test_with_fields_returns_a_copy_and_keeps_other_fields() -> None:
    base = CompareOptions().with_fields(opset=13, input_shapes=["1x3x8x8"])
    changed = base.with_fields(opset=10)
    assert base.export.opset == 13 and changed.export.opset == 10
    assert changed.load.input_shapes == ("1x3x8x8",)
    assert base.with_fields() == base


def test_lists_become_tuples_and_dicts_stay() -> None:
    options = CompareOptions().with_fields(
        input_shapes=["x:1x3x8x8", "y:1x4"],
        input_files=["a.npy"],
        require=["onnxruntime"],
        mean=[0.5, 0.5, 0.5],
        size=[8, 8],
        recordings={"onnxruntime": "ort.npz"},
    )
    assert options.load.input_shapes == ("x:1x3x8x8", "y:1x4")
    assert options.load.input_files == ("a.npy",)
    assert options.runtime.require == ("onnxruntime",)
    assert options.gate.mean == (0.5, 0.5, 0.5) and options.gate.size == (8, 8)
    assert options.runtime.recordings == {"onnxruntime": "ort.npz"}
    hash(options.load)  # frozen dataclasses of tuples stay hashable


@pytest.mark.parametrize("name", ["opsets", "input_shape", "gate_options", "fp16", "json"])
def test_unknown_field_is_a_type_error(name: str) -> None:
    """`opsets` (a sweep axis) and `json` (a report file) are options of the command line, not of a comparison."""
    with pytest.raises(TypeError, match=repr(name)):
        CompareOptions().with_fields(**{name: 1})


def test_every_option_of_every_part_can_be_named_tensorrts_too() -> None:
    options = CompareOptions().with_fields(precision="fp16", outputs="none", tf32=True, mark_budget_bytes="64KB")
    assert options.runtime.precision == "fp16" and options.runtime.tensorrt.outputs == "none"
    assert options.runtime.tf32 is True and options.runtime.tensorrt.mark_budget_bytes == 64 << 10
    # Text is read as the command line reads it; an unknown choice is refused on the spot.
    assert CompareOptions().with_fields(memory_bytes="1GB", mean="0.5").runtime.memory_bytes == 1 << 30
    with pytest.raises(OptionError, match="choose one of fp32, fp16"):
        CompareOptions().with_fields(precision="int8")


def test_whole_parts_are_accepted() -> None:
    gate = GateOptions(inputs_dir="images", per_layer=True)
    settings = BuildSettings(precision="fp16", optimization_level=2)
    thresholds = Thresholds(min_cosine=0.99, rtol=1e-2)
    options = CompareOptions().with_fields(gate=gate, thresholds=thresholds, load=LoadOptions(seed=7))
    assert options.gate is gate and options.thresholds is thresholds and options.load.seed == 7
    # TensorRT's build settings are one field of the runtime part.
    assert CompareOptions().with_fields(tensorrt=settings).runtime.tensorrt is settings


def test_a_field_applies_on_top_of_a_whole_part_given_with_it() -> None:
    options = CompareOptions().with_fields(gate=GateOptions(inputs_dir="images"), min_miou=0.5)
    assert options.gate == GateOptions(inputs_dir="images", min_miou=0.5)


def test_gate_many() -> None:
    assert not GateOptions().many
    assert GateOptions(inputs_dir="images").many and GateOptions(num_samples=1).many


def test_build_settings_to_dict() -> None:
    settings = BuildSettings(precision="fp16", input_shapes=(("x", (1, 3, 8, 8)),), compute_capabilities=("8.9",))
    data = settings.to_dict()
    assert data["input_shapes"] == {"x": [1, 3, 8, 8]}
    assert data["precision"] == "fp16" and data["outputs"] == "all" and data["compute_capabilities"] == ("8.9",)
    assert set(data) == {f.name for f in dataclasses.fields(BuildSettings)}


INVALID = [
    ({"exporter": "onnxscript"}, "exporter"),
    ({"onnx": "m.onnx", "save_onnx": "out.onnx"}, "save_onnx"),
    ({"backends": ["torch", "tvm"]}, "backends"),
    ({"require": ["tensorrt", "tvm"]}, "require"),
    ({"recordings": {"torch": "t.npz"}}, "recordings"),
    ({"memory_bytes": 0}, "memory_bytes"),
    ({"chunk_bytes": -1}, "chunk_bytes"),
    ({"tensorrt": BuildSettings(outputs="some")}, "outputs"),  # type: ignore[arg-type]
    ({"tensorrt": BuildSettings(precision="int8")}, "precision"),  # type: ignore[arg-type]
    ({"tensorrt": BuildSettings(precision_constraints="strict")}, "precision_constraints"),  # type: ignore[arg-type]
    ({"tensorrt": BuildSettings(optimization_level=6)}, "optimization_level"),
    ({"tensorrt": BuildSettings(optimization_level=-1)}, "optimization_level"),
    ({"tensorrt": BuildSettings(workspace_bytes=0)}, "workspace_bytes"),
    ({"min_cosine": 2.0}, "min_cosine"),
    ({"min_cosine": -1.5}, "min_cosine"),
    ({"rtol": -1e-3}, "rtol"),
    ({"max_abs": -1.0}, "max_abs"),
    ({"min_cosine": math.nan}, "min_cosine"),
    ({"rtol": math.nan}, "rtol"),
    ({"rtol": math.inf}, "rtol"),
    ({"max_abs": math.nan}, "max_abs"),
    ({"max_abs": math.inf}, "max_abs"),
    ({"max_quant_steps": math.nan}, "max_quant_steps"),
    ({"max_quant_steps": -1.0}, "max_quant_steps"),
    ({"max_noise_ratio": math.nan}, "max_noise_ratio"),
    ({"max_noise_ratio": 0.0}, "max_noise_ratio"),
    ({"allow_nonfinite": 3}, "allow_nonfinite"),
    ({"num_samples": 0}, "num_samples"),
    ({"inputs_dir": "images", "num_samples": 3}, "num_samples"),
    ({"labels_dir": "masks"}, "labels_dir"),
    ({"min_miou": 1.5}, "min_miou"),
    ({"min_miou": -0.1}, "min_miou"),
    ({"max_miou_drop": 2.0, "inputs_dir": "images", "labels_dir": "masks"}, "max_miou_drop"),
    ({"max_miou_drop": 0.05, "inputs_dir": "images"}, "max_miou_drop"),
    ({"num_samples": 2, "recordings": {"onnxruntime": "ort.npz"}}, "recordings"),
    ({"inputs_dir": "images", "recordings": {"onnxruntime": "ort.npz"}}, "recordings"),
    ({"num_samples": 2, "input_files": ["x.npy"]}, "num_samples"),
]


@pytest.mark.parametrize(("fields", "parameter"), INVALID, ids=[f"{p}-{i}" for i, (_, p) in enumerate(INVALID)])
def test_each_validate_rule_names_its_parameter(fields: dict, parameter: str) -> None:
    with pytest.raises(OptionError) as caught:  # a value of the wrong form is refused as it is read
        CompareOptions().with_fields(**fields).validate()
    assert caught.value.parameter == parameter
    assert str(caught.value).startswith(parameter)


VALID = [
    {"opset": 10, "exporter": "torchscript", "save_onnx": "out.onnx"},
    {"onnx": "m.onnx"},
    {"backends": ["torch", "onnxruntime", "tensorrt"], "require": ["tensorrt"]},
    {"recordings": {"onnxruntime": "ort.npz", "tensorrt": "trt.npz"}},
    {"min_cosine": -1.0, "rtol": 0.0, "max_abs": 0.0},
    {"min_cosine": 1.0},
    {"max_quant_steps": math.inf, "max_noise_ratio": math.inf},  # the two limits that may be switched off
    {"allow_nonfinite": True},
    {"num_samples": 1, "input_files": ["x.npy"]},
    {"num_samples": 5, "input_shapes": ["1x3x8x8"]},
    {"inputs_dir": "images", "labels_dir": "masks", "min_miou": 0.0, "max_miou_drop": 1.0},
    {
        "tensorrt": BuildSettings(
            precision="fp16", precision_constraints="obey", optimization_level=0, workspace_bytes=1
        )
    },
    {"tensorrt": BuildSettings(optimization_level=5, outputs="none")},
]


@pytest.mark.parametrize("fields", VALID)
def test_valid_options_pass(fields: dict) -> None:
    CompareOptions().with_fields(**fields).validate()


def test_part_validate_methods_alone() -> None:
    with pytest.raises(OptionError) as caught:
        ExportOptions(onnx="m.onnx", save_onnx="o.onnx").validate()
    assert caught.value.parameter == "save_onnx"
    with pytest.raises(OptionError) as caught:
        BackendOptions(recordings={"torch": "t.npz"}).validate()
    assert (caught.value.parameter, caught.value.value) == ("recordings", "torch=t.npz")
    with pytest.raises(OptionError) as caught:
        GateOptions(num_samples=0).validate()
    assert (caught.value.parameter, caught.value.value) == ("num_samples", 0)


def test_precision_is_one_option_of_every_backend_bf16_included() -> None:
    """fp32 / fp16 / bf16 on BackendOptions; TensorRT's part only receives it (engine_settings), as TF32."""
    options = CompareOptions().with_fields(precision="bf16", backends=["torch", "onnxruntime"])
    assert options.runtime.precision == "bf16" and options.runtime.tensorrt.precision == "fp32"
    options.validate()  # bf16 is refused only where TensorRT opens, not among the options
    with pytest.raises(OptionError, match="unknown; choose one of fp32, fp16, bf16") as caught:
        BackendOptions(precision="int8").validate()  # type: ignore[arg-type]
    assert caught.value.parameter == "precision"


def test_tensorrt_refuses_bf16_in_one_line() -> None:
    BuildSettings(precision="fp16").validate()
    with pytest.raises(OptionError) as caught:
        BuildSettings(precision="bf16").validate()
    assert caught.value.parameter == "precision"
    assert caught.value.render(lambda name: "--" + name) == (
        "--precision bf16: TensorRT is built at fp32 or fp16 here; bf16 engines are not built by trtdiff yet"
    )
