"""A culprit carries the fix of the inspect rule that explains its node, and no other.

On a hand-made graph the rules are read directly (Softmax flattened below opset 13); on a
real comparison the PyTorch call behind a Resize decides (align_corners lost), which the
ONNX file alone cannot tell.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from culprit_models import edited, export, node, set_attribute
from onnx import TensorProto, helper
from torch import nn

import trtdiff
from trtdiff.analysis.advice import advise
from trtdiff.report import BackendPair, Culprit, ErrorFigures
from trtdiff.source.onnx_graph import GraphInfo, graph_from_model

ORT = BackendPair("torch", "onnxruntime")
BROKEN = ErrorFigures(cosine=0.9, max_abs=0.5, rel_err=0.2)


def _softmax_graph(tmp_path: Path) -> GraphInfo:
    """x (1x4x8) -> Softmax(axis=1) -> Relu, at opset 11: the softmax normalizes over axes 1 and 2 together."""
    nodes = [
        helper.make_node("Softmax", ["x"], ["probs"], name="/attn/Softmax", axis=1),
        helper.make_node("Relu", ["probs"], ["y"], name="/out/Relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    return graph_from_model(model, tmp_path / "softmax.onnx")


def _culprit(tensor: str, node_name: str, op_type: str, verdict: str = "export") -> Culprit:
    return Culprit(tensor, node_name, op_type, None, ORT, BROKEN, BROKEN, verdict, (node_name,))  # type: ignore[arg-type]


def test_softmax_below_opset_13_is_told_to_re_export_at_13(tmp_path: Path) -> None:
    graph = _softmax_graph(tmp_path)
    softmax, relu = _culprit("probs", "/attn/Softmax", "Softmax"), _culprit("y", "/out/Relu", "Relu")
    advised, innocent = advise([softmax, relu], graph)
    assert advised.advice_code == "softmax-axis"
    assert advised.advice == "re-export at opset 13 or higher (opset 13), or move the axis last"  # parameter names
    assert (innocent.advice, innocent.advice_code) == ("", ""), "no rule names the Relu"
    (flagged,) = advise([softmax], graph, name_of=lambda parameter: f"--{parameter}")
    assert "(--opset 13)" in flagged.advice, "the CLI's flags"
    assert dataclasses.replace(advised, advice="", advice_code="") == softmax, "nothing else changes"


def test_an_export_fix_does_not_explain_a_runtime_problem(tmp_path: Path) -> None:
    """The spec evaluator cleared the file: re-exporting would not change what the runtime does."""
    (runtime,) = advise([_culprit("probs", "/attn/Softmax", "Softmax", verdict="runtime")], _softmax_graph(tmp_path))
    assert (runtime.advice, runtime.advice_code) == ("", "")
    (unknown,) = advise([_culprit("probs", "/attn/Softmax", "Softmax", verdict="unknown")], _softmax_graph(tmp_path))
    assert unknown.advice_code == "softmax-axis"


class AlignedUp(nn.Module):
    """conv -> bilinear x2 with align_corners=True -> conv."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.interpolate(self.stem(x), scale_factor=2.0, mode="bilinear", align_corners=True)
        return self.head(y)


@pytest.mark.slow
def test_align_corners_lost_is_read_from_the_pytorch_call(tmp_path: Path) -> None:
    """The file says half_pixel, which the graph alone cannot fault; PyTorch's call had align_corners=True."""
    model = AlignedUp().eval()

    def half_pixel(onnx_model: object) -> str:
        resize = node(onnx_model, "Resize")  # type: ignore[arg-type]
        set_attribute(resize, "coordinate_transformation_mode", "half_pixel")
        return resize.name

    path, resize = edited(export(model, "1x3x16x16", tmp_path / "up11.onnx", 11), tmp_path / "up-hp.onnx", half_pixel)
    report = trtdiff.compare(model, onnx=path, input_shapes=["1x3x16x16"])
    (culprit,) = report.culprits
    assert (culprit.onnx_node, culprit.verdict) == (resize, "export")
    assert culprit.advice_code == "align-corners-lost"
    assert culprit.advice.startswith("re-export at opset 11 or higher (opset 11): align_corners=True is then written")
