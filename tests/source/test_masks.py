"""An attention mask's -inf (or finfo.min) is given, not an FP16 overflow; a finite computation past 65504 is one.

Before: `trtdiff inspect` on a clean causal attention exited 1 with "WARNING fp16-overflow ... largest inf at
/Where_output_0" (the masked scores' -inf counted as a magnitude).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from trtdiff.cli.app import main
from trtdiff.source.masks import computed_magnitude, mask_tensors
from trtdiff.source.onnx_graph import graph_from_model

INSPECT = ["inspect", "--no-config", "--input-shape", "1x8x16", "--opset", "17"]


@pytest.mark.parametrize("mask", ["masked_fill", "additive", "finfo"])
def test_a_causal_attention_mask_is_no_fp16_overflow(mask: str) -> None:
    result = CliRunner().invoke(main, [*INSPECT, f"tests.attention_models:{mask}"])
    assert result.exit_code == 0, result.output
    assert "fp16-overflow" not in result.output and "FP16 range not checked" not in result.output


@pytest.mark.parametrize(
    ("model", "node"),
    [("scaled", "/Mul"), ("overflowing_scores", "/Mul")],  # x * 1e5; scores x 1e5 before the mask
)
def test_a_finite_computation_past_65504_still_warns(model: str, node: str) -> None:
    result = CliRunner().invoke(main, [*INSPECT, f"tests.attention_models:{model}"])
    assert result.exit_code == 1, result.output
    assert f"WARNING fp16-overflow: {node} (the model itself)" in result.stdout
    assert "/Where" not in result.stdout  # the masked scores carry the Mul's overflow, and are not named for it


def _graph() -> onnx.ModelProto:
    """scores (input) + mask (input) -> Softmax, and scores x gain (a constant)."""
    nodes = [
        helper.make_node("Add", ["scores", "mask"], ["masked"], name="/Add"),
        helper.make_node("Softmax", ["masked"], ["probs"], name="/Softmax"),
        helper.make_node("Mul", ["scores", "gain"], ["big"], name="/Mul"),
    ]
    values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 2]) for n in ("scores", "mask", "probs", "big")]
    gain = helper.make_tensor("gain", TensorProto.FLOAT, [], [-1e6])  # a huge negative factor is no mask
    graph = helper.make_graph(nodes, "masks", values[:2], values[2:], initializer=[gain])
    return helper.make_model(graph)


def test_which_tensors_carry_a_mask(tmp_path: Path) -> None:
    graph = graph_from_model(_graph(), tmp_path / "masks.onnx")
    fed = {"scores": np.ones((2, 2), np.float32), "mask": np.array([[0, -np.inf], [0, 0]], np.float32)}
    assert mask_tensors(graph, fed) == {"masked"}  # not "big": a factor of -1e6 makes no mask
    assert mask_tensors(graph, {**fed, "mask": np.zeros((2, 2), np.float32)}) == set()
    values = np.array([-np.inf, np.finfo(np.float32).min, 2.0, -5.0, np.nan], np.float32)
    assert computed_magnitude(values, mask=True) == 5.0
    assert computed_magnitude(values, mask=False) == np.inf
    assert computed_magnitude(np.array([-np.inf, np.nan], np.float32), mask=True) is None
