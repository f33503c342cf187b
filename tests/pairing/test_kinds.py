"""Kinds that read the feeding op (a Linear's bias add, attention's value product), and shapes that fit through a view."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trtdiff.backends.pytorch.capture import capture
from trtdiff.pairing.kinds import computed_from_inputs, onnx_kinds, record_kind
from trtdiff.pairing.pairs import _type_fits
from trtdiff.source.export import export_onnx
from trtdiff.source.loading import from_module
from trtdiff.source.onnx_graph import TensorType, load_graph


class _Attention(nn.Module):
    """A Linear on a permuted (non-contiguous) map, attention written out, and the fused one."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x.permute(0, 2, 1, 3))  # 1x4x2x8: matmul through bmm, then add of the bias
        scores = torch.softmax(h @ h.transpose(-2, -1), dim=-1)
        return scores @ h + F.scaled_dot_product_attention(h, h, h)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[nn.Module, Path, dict[str, np.ndarray]]:
    torch.manual_seed(0)
    model = _Attention().eval()
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 2, 4, 8)).astype(np.float32)}
    path = tmp_path_factory.mktemp("kinds") / "attention.onnx"
    export_onnx(from_module(model), feeds, opset=17, exporter="torchscript", path=path)
    return model, path, feeds


def test_recorded_kinds_name_the_bias_add_and_both_value_products(
    exported: tuple[nn.Module, Path, dict[str, np.ndarray]],
) -> None:
    model, _, feeds = exported
    captured = capture(model, feeds)
    from_inputs = computed_from_inputs(captured)
    kinds = [record_kind(captured, r, from_inputs) for r in captured.records]
    # the fused SDPA is recorded op by op (torch_attention): scaling, scores, softmax, value product
    written_out = ["permute", "matmul", "gemm", "matmul", "softmax", "attention"]
    assert kinds == [*written_out, "mul", "mul", "matmul", "softmax", "attention", "add"]
    # mm and bmm are recorded as the views matmul made of them: the values the model's code sees
    assert [r.shape for r in captured.records[1:4]] == [(1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 2)]


def test_onnx_kinds_name_the_bias_add_and_both_value_products(
    exported: tuple[nn.Module, Path, dict[str, np.ndarray]],
) -> None:
    _, path, _ = exported
    graph = load_graph(path)
    kinds = onnx_kinds(graph)
    by_type = [(n.op_type, kinds[n.name]) for n in graph.nodes if n.name in kinds and n.op_type in ("MatMul", "Add")]
    assert by_type[:2] == [("MatMul", "matmul"), ("Add", "gemm")]
    assert ("MatMul", "attention") in by_type and by_type[-1] == ("Add", "add")


@pytest.mark.parametrize(
    ("onnx_shape", "torch_shape", "fits"),
    [
        ((64, 3, 49, 49), (192, 49, 49), True),  # bmm for a 4-D MatMul: a view
        ((1, 28, 28, 192), (784, 192), True),  # mm for a Linear on a map
        ((1, 192, 28, 28), (784, 192), False),  # a transposed layout with as many elements
        ((1, 17, 32), (1, 17, 32), True),
        ((None, 17, 32), (2, 17, 32), True),
        ((None, 17, 32), (17, 32), False),  # partly unknown: the rank must agree
        ((None, 17, 32), (2, 16, 32), False),
        (None, (3, 4), True),  # nothing known
    ],
)
def test_shapes_fit_through_a_view_and_never_through_a_transpose(
    onnx_shape: tuple[int | None, ...] | None, torch_shape: tuple[int, ...], fits: bool
) -> None:
    assert _type_fits(TensorType(np.dtype(np.float32), onnx_shape), torch_shape, "float32") is fits
