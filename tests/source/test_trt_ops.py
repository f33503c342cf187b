"""trtdiff.source.trt_ops: ModelOpt's PyTorch route writes FP8 as TensorRT's own Q/DQ ops; they are read as the
standard ops they stand for, so the file is compared (it was exit 2: "not a registered function/op")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner

import trtdiff
from trtdiff.cli.app import main
from trtdiff.source.trt_ops import has_trt_ops, standard_ops

FIXTURES = Path(__file__).parents[1] / "fixtures" / "modelopt"


@pytest.mark.parametrize("name", ["cnn_ts17_torch_fp8.onnx", "llm_ts17_torch_fp8.onnx"])
def test_trt_fp8_q_dq_become_the_standard_ops_and_compute_what_the_float8_grid_gives(name: str) -> None:
    model = onnx.load(str(FIXTURES / name))
    assert has_trt_ops(model)
    standard, notes = standard_ops(model)
    assert not has_trt_ops(standard) and len(notes) == 1 and "trt::TRT_FP8QuantizeLinear as QuantizeLinear" in notes[0]
    onnx.checker.check_model(standard)
    assert all(o.domain != "trt" for o in standard.opset_import)
    session = ort.InferenceSession(standard.SerializeToString())
    (first,) = session.get_inputs()
    x = np.random.default_rng(0).standard_normal([d if isinstance(d, int) else 1 for d in first.shape])
    (out,) = session.run(None, {first.name: x.astype(np.float32)})
    assert np.isfinite(out).all()
    q = next(n for n in standard.graph.node if n.op_type == "QuantizeLinear")
    zero = next(t for t in standard.graph.initializer if t.name == q.input[2])
    assert zero.data_type == onnx.TensorProto.FLOAT8E4M3FN  # FP8, not the int8 a missing zero point means


def test_a_file_without_trt_ops_is_read_as_it_is() -> None:
    model = onnx.load(str(FIXTURES / "cnn_ts17_fp8.onnx"))
    assert standard_ops(model) == (model, ())


def test_the_pytorch_routes_fp8_file_is_compared_and_the_report_says_how_it_was_read(tmp_path: Path) -> None:
    from modelopt_models import modelopt_cnn

    report = trtdiff.compare(modelopt_cnn(), onnx=str(FIXTURES / "cnn_ts17_torch_fp8.onnx"), culprit=False)
    assert any(note.startswith("onnx: read TensorRT's own FP8 Q/DQ ops") for note in report.notes)
    result = CliRunner().invoke(
        main, ["compare", str(FIXTURES / "cnn_ts17_torch_fp8.onnx"), "--backends", "onnxruntime,onnx-reference"]
    )
    assert result.exit_code in (0, 1), result.output  # compared (the verdict is the judging's), not exit 2
