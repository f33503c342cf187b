"""A dimension baked at export: `int(x.size(0))` traced as a number, the graph run at another batch.

The tensors after the baked Reshape take other shapes than PyTorch's. They are paired on
structure all the same and reported as a shape mismatch (a failing verdict, not unpaired
tensors), and the culprit's fix names the Reshape, the constant that fixed the dimension and
how to export it symbolic; a graph exported with the dimension symbolic passes at any batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from graph_models import BakedBatch

import trtdiff
from trtdiff.source.onnx_graph import load_graph
from trtdiff.source.pitfalls import inspect_graph


def _export(baked: bool, path: Path, dynamic: bool = True) -> tuple[torch.nn.Module, Path]:
    torch.manual_seed(0)
    model = BakedBatch(baked).eval()
    axes = {"x": {0: "batch"}} if dynamic else None
    example = torch.randn(1, 3, 8, 8)
    torch.onnx.export(
        model, (example,), str(path), opset_version=13, dynamo=False, input_names=["x"], dynamic_axes=axes
    )
    return model, path


def test_inspect_names_the_reshape_whose_constant_fixes_a_dynamic_dimension(tmp_path: Path) -> None:
    _, baked = _export(True, tmp_path / "baked.onnx")
    _, symbolic = _export(False, tmp_path / "symbolic.onnx")
    _, static = _export(True, tmp_path / "static.onnx", dynamic=False)
    findings = [f for f in inspect_graph(load_graph(baked))[1] if f.code == "baked-dimension"]
    assert len(findings) == 1 and findings[0].nodes == ("/Reshape",) and findings[0].severity == "error"
    assert "[1, 4, -1], which fixes dimension 0 to 1 where its input's dimension 0 is dynamic" in findings[0].message
    for clean in (symbolic, static):  # computed from Shape at run time, or no dynamic input at all
        assert not [f for f in inspect_graph(load_graph(clean))[1] if f.code == "baked-dimension"]


@pytest.mark.parametrize("batch", [1, 2])
def test_a_baked_batch_fed_another_size_is_a_shape_finding_at_its_reshape(tmp_path: Path, batch: int) -> None:
    model, path = _export(True, tmp_path / "baked.onnx")
    report = trtdiff.compare(model, onnx=str(path), input_shapes=(f"{batch}x3x8x8",), backends=("torch", "onnxruntime"))
    if batch == 1:  # the size it was exported at: right
        assert report.passed and not report.culprits
        return
    assert not report.passed
    first = report.first_divergence
    assert first is not None and first.onnx_node == "/Softmax"
    assert any(r.metric == "shape" and r.detail == "2x4x64 vs 1x4x128" for r in first.reasons)
    assert [c.onnx_node for c in report.culprits] == ["/Softmax"]
    culprit = report.culprits[0]
    assert "/Reshape" in culprit.subgraph and culprit.advice_code == "baked-dimension"
    assert culprit.advice.startswith(
        "/Reshape (Reshape) takes its shape from the constant /Constant_output_0 = [1, 4, -1]"
    )
    assert "int(x.size(0))" in culprit.advice and "dynamic_shapes" in culprit.advice


def test_the_same_model_exported_with_the_batch_symbolic_passes_at_another_batch(tmp_path: Path) -> None:
    model, path = _export(False, tmp_path / "symbolic.onnx")
    report = trtdiff.compare(model, onnx=str(path), input_shapes=("3x3x8x8",), backends=("torch", "onnxruntime"))
    assert report.passed and not report.culprits
    assert report.pairing.float_paired == report.pairing.float_tensors
