"""`trtdiff build` and TensorRT in `compare`, for real with TensorRT-RTX where it is installed.

On this project's machines TensorRT-RTX builds on the CPU but no engine can run (see
docs/tensorrt.md), so `compare` must skip TensorRT with the reason and `--require tensorrt`
must exit 2. Tests that need TensorRT skip when it is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_output import without_progress
from click.testing import CliRunner
from onnx import TensorProto, helper

import trtdiff
from trtdiff.backends.registry import open_backend, open_backends
from trtdiff.backends.tensorrt import probe
from trtdiff.cli.app import main
from trtdiff.errors import OptionError
from trtdiff.options import BackendOptions
from trtdiff.report import BuildReport
from trtdiff.source.onnx_graph import GraphInfo, load_graph

FACTORY = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"
SHAPE = "1x3x64x64"
FOUND = probe()
needs_builder = pytest.mark.skipif(not FOUND.can_build, reason=f"TensorRT cannot build here: {FOUND.reason}")
cannot_run = pytest.mark.skipif(FOUND.can_run, reason="checks the skip path; TensorRT can run here")


@cannot_run
def test_compare_skips_tensorrt_with_the_reason(resnet_model) -> None:
    report = trtdiff.compare(resnet_model, input_shapes=[SHAPE], opset=13)
    assert report.backends == ("torch", "onnxruntime") and report.passed
    assert report.tensorrt is not None and report.tensorrt.status == "skipped"
    assert report.tensorrt.reason == FOUND.reason
    assert any(note.startswith("TensorRT skipped: ") for note in report.notes)


@cannot_run
def test_require_tensorrt_exits_2_with_one_line() -> None:
    result = CliRunner().invoke(main, ["compare", FACTORY, "--input-shape", SHAPE, "--require", "tensorrt"])
    assert result.exit_code == 2
    lines = without_progress(result.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: --require tensorrt: TensorRT cannot run here")


@cannot_run
def test_onnx_model_needs_a_second_onnx_backend(tmp_path: Path, export_example) -> None:
    result = CliRunner().invoke(main, ["compare", str(export_example(13))])
    assert result.exit_code == 2  # the CLI words pipeline/run.py's "comparing needs two" for an ONNX file (issue 40)
    assert "compare ONNX backends alone with --backends onnxruntime,onnx-reference" in result.stderr


def _relu(tmp_path: Path) -> GraphInfo:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "relu.onnx")
    return load_graph(tmp_path / "relu.onnx")


def test_tensorrt_refuses_bf16_where_it_opens_and_builds(tmp_path: Path) -> None:
    """--precision bf16 stops TensorRT (open, build) in one line; the options alone pass (other backends take it)."""
    feeds = {"x": np.zeros((1, 3, 8, 8), np.float32)}
    with pytest.raises(OptionError, match="bf16 engines are not built by trtdiff yet") as caught:
        open_backend("tensorrt", _relu(tmp_path), BackendOptions(precision="bf16"), feeds=feeds)
    assert caught.value.parameter == "precision"
    result = CliRunner().invoke(main, ["build", FACTORY, "--input-shape", SHAPE, "--precision", "bf16"])
    assert result.exit_code == 2 and without_progress(result.stderr).strip().splitlines() == [
        "Error: --precision bf16: TensorRT is built at fp32 or fp16 here; bf16 engines are not built by trtdiff yet"
    ]


@cannot_run
def test_bf16_is_not_refused_where_tensorrt_is_skipped(tmp_path: Path) -> None:
    feeds = {"x": np.zeros((1, 3, 8, 8), np.float32)}
    with open_backends(_relu(tmp_path), feeds, BackendOptions(precision="bf16"), ["tensorrt"]) as opened:
        assert opened.backends == () and opened.tensorrt is not None and opened.tensorrt.status == "skipped"


@needs_builder
def test_build_reports_the_mark_plan_and_name_map(tmp_path: Path) -> None:
    out = tmp_path / "build.json"
    engine = tmp_path / "model.engine"
    result = CliRunner().invoke(
        main,
        ["build", FACTORY, "--input-shape", SHAPE, "--opset", "13", "--json", str(out), "--save-engine", str(engine)],
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # the terminal wraps at 80 columns
    assert "50 debug tensors + 1 output" in text and "not returned" in text
    assert "1 engine, 1 run per sample planned (mark budget 1,073,741,824 bytes, fixed default)" in text
    report = BuildReport.from_json(out.read_text())
    trt = report.tensorrt
    assert trt.status == "built" and trt.outputs_mode == "all" and trt.marked == 51 and trt.debug_marked == 50
    assert {"network input", "shape tensor", "constant/weights"} <= {r.reason.split(":")[0] for r in trt.not_returned}
    assert trt.name_map["/decoder/Resize_output_0"] == "/decoder/Resize_output_0"
    assert trt.plain_engine is not None and engine.stat().st_size == trt.plain_engine.plan_bytes > 0  # what ships
    assert (tmp_path / "model.marked.engine").stat().st_size == trt.plan_bytes > 0
    assert "TF32" not in trt.flags and trt.tf32_built is False
    again = CliRunner().invoke(main, ["build", FACTORY, "--input-shape", SHAPE, "--save-engine", str(engine)])
    assert again.exit_code == 2 and "exists" in again.stderr


@pytest.mark.slow
@needs_builder
def test_build_modes_precision_and_engine_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = trtdiff.build(FACTORY, input_shapes=[SHAPE], opset=13, engine_cache=cache)
    second = trtdiff.build(FACTORY, input_shapes=[SHAPE], opset=13, engine_cache=cache)
    assert not first.tensorrt.from_cache and second.tensorrt.from_cache
    assert first.tensorrt.cache_key == second.tensorrt.cache_key
    tf32 = trtdiff.build(FACTORY, input_shapes=[SHAPE], opset=13, engine_cache=cache, tf32=True)
    assert tf32.tensorrt.cache_key != first.tensorrt.cache_key and tf32.tensorrt.tf32
    from trtdiff.backends.tensorrt.builder import BuildSettings

    none = trtdiff.build(FACTORY, input_shapes=[SHAPE], opset=13, tensorrt=BuildSettings(outputs="none"))
    assert none.tensorrt.marked == 1
    unfused = trtdiff.build(FACTORY, input_shapes=[SHAPE], opset=13, tensorrt=BuildSettings(outputs="unfused"))
    assert unfused.tensorrt.outputs_mode == "unfused"
    fp16 = trtdiff.build(FACTORY, input_shapes=[SHAPE], opset=13, precision="fp16")
    # the FP16 conversion is the comparison's, made once for every ONNX backend: a note of the build, not TensorRT's
    assert fp16.tensorrt.precision == "fp16" and any(note.startswith("fp16: the ONNX graph") for note in fp16.notes)
    assert {row.built for row in fp16.tensorrt.layer_precisions} >= {"FP16"}


@needs_builder
def test_build_of_the_embedded_deeplab_meets_the_issue(tmp_path: Path) -> None:
    """Issue 18, done when: one marked engine naming >= 90% of the ONNX tensors, engines 1, runs >= 2 under a tiny
    budget; fusions_split is read from the two real plans (TensorRT-RTX 1.7.1 compiles the same kernels for the
    debug-marked engine as for the plain one, so the list is empty here and a note says what that means)."""
    out = tmp_path / "build.json"
    result = CliRunner().invoke(
        main,
        ["build", FACTORY, "--input-shape", SHAPE, "--opset", "13", "--trt-mark-budget", "64KB", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # the terminal wraps at 80 columns
    assert "1 engine, 16 runs per sample planned (mark budget 65,536 bytes, given)" in text, text
    assert "returns 51 of 51 tensors computed from the inputs (100%)" in text
    data = json.loads(out.read_text())["tensorrt"]
    assert data["engines"] == 1 and data["runs_per_sample"] >= 2 and data["mark_budget_bytes"] == 64 * 1024
    assert data["tensors_returned"] >= 0.9 * data["tensors_computed"] > 0
    assert data["fusions_split"] == [] and data["fusions_split_source"].startswith("plan-scan")
    assert data["plain_engine"]["plan_bytes"] > 0 and data["marking_check"]["status"] == "not run"
    assert len(data["layer_precisions"]) >= 20 and data["precision_source"].startswith("plan-scan")
    assert {(row["asked"], row["built"]) for row in data["layer_precisions"]} == {("FP32", "FP32")}
    report = BuildReport.from_json(out.read_text())
    assert report.tensorrt.marking_check is not None and report.tensorrt.layer_precisions[0].built == "FP32"


@needs_builder
def test_build_json_never_overwrites_other_files(tmp_path: Path) -> None:
    precious = tmp_path / "mine.json"
    precious.write_text(json.dumps({"layers": []}))
    result = CliRunner().invoke(main, ["build", FACTORY, "--input-shape", SHAPE, "--json", str(precious)])
    assert result.exit_code == 2 and "not a trtdiff build" in result.stderr
