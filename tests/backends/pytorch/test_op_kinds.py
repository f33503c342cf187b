"""trtdiff.backends.pytorch.op_kinds: the shared vocabulary that lets pairing match an aten op with an ONNX node."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from trtdiff.backends.pytorch.op_kinds import (
    ATEN_KINDS,
    DECOMPOSED_KINDS,
    ONLY_DECOMPOSED,
    ONNX_KINDS,
    aten_kind,
    onnx_kind,
)


@pytest.mark.parametrize(
    ("packet", "kind"),
    [
        ("convolution", "conv"),
        ("relu", "relu"),
        ("relu_", "relu"),
        ("hardtanh_", "clip"),
        ("_native_batch_norm_legit_no_training", "batch_norm"),
        ("upsample_bilinear2d", "resize"),
        ("upsample_nearest2d", "resize"),
        ("addmm", "gemm"),
        ("bmm", "matmul"),
        ("cat", "concat"),
        ("mean", "mean"),
        ("avg_pool2d", "avgpool"),
        ("max_pool2d_with_indices", "maxpool"),
        ("constant_pad_nd", "pad"),
        ("_softmax", "softmax"),
    ],
)
def test_aten_kind(packet: str, kind: str) -> None:
    assert aten_kind(packet, ()) == kind


@pytest.mark.parametrize("packet", ["view", "reshape", "_to_copy", "expand", "slice", "no_such_op", ""])
def test_aten_ops_without_a_kind(packet: str) -> None:
    assert aten_kind(packet, ()) is None


def _conv_args(transposed: object) -> tuple:
    return (None, None, None, [1, 1], [0, 0], [1, 1], transposed, [0, 0], 1)


def test_transposed_convolution_is_its_own_kind() -> None:
    assert aten_kind("convolution", _conv_args(True)) == "conv_transpose"
    assert aten_kind("convolution", _conv_args(False)) == "conv"
    assert aten_kind("convolution", _conv_args(1)) == "conv"  # only the bool True marks a transposed conv


@pytest.mark.parametrize(
    ("output_size", "kind"),
    [([1, 1], "mean"), ((1, 1), "mean"), ([1], "mean"), ([2, 2], "avgpool"), ([1, 2], "avgpool"), (1, "avgpool")],
)
def test_adaptive_average_pool_to_ones_is_a_global_mean(output_size: object, kind: str) -> None:
    assert aten_kind("adaptive_avg_pool2d", (None, output_size)) == kind
    assert aten_kind("_adaptive_avg_pool2d", (None, output_size)) == kind


def test_adaptive_average_pool_without_output_size_is_avgpool() -> None:
    assert aten_kind("_adaptive_avg_pool2d", (None,)) == "avgpool"


@pytest.mark.parametrize(
    ("op_type", "kind"),
    [
        ("Conv", "conv"),
        ("ConvTranspose", "conv_transpose"),
        ("BatchNormalization", "batch_norm"),
        ("Clip", "clip"),
        ("Upsample", "resize"),
        ("Resize", "resize"),
        ("GlobalAveragePool", "mean"),
        ("ReduceMean", "mean"),
        ("Max", "maximum"),
        ("Transpose", "permute"),
        ("Gemm", "gemm"),
    ],
)
def test_onnx_kind(op_type: str, kind: str) -> None:
    assert onnx_kind(op_type) == kind
    assert onnx_kind(op_type, "ai.onnx") == kind


@pytest.mark.parametrize("op_type", ["Reshape", "Shape", "Constant", "Identity", "Gather", "conv", "NoSuchOp"])
def test_onnx_ops_without_a_kind(op_type: str) -> None:
    assert onnx_kind(op_type) is None


@pytest.mark.parametrize("domain", ["com.microsoft", "custom", "ai.onnx.ml"])
def test_ops_of_other_domains_have_no_kind(domain: str) -> None:
    assert onnx_kind("Conv", domain) is None
    assert onnx_kind("Relu", domain) is None


def test_every_onnx_kind_has_an_aten_counterpart() -> None:
    transposed = {aten_kind("convolution", _conv_args(True))}
    assert set(ONNX_KINDS.values()) <= set(ATEN_KINDS.values()) | transposed


def test_every_aten_kind_has_an_onnx_counterpart() -> None:
    assert set(ATEN_KINDS.values()) <= set(ONNX_KINDS.values()) | ONLY_DECOMPOSED
    assert not ONLY_DECOMPOSED & set(ONNX_KINDS.values()) and ONLY_DECOMPOSED <= DECOMPOSED_KINDS


class _Recorder(TorchDispatchMode):
    """Records the kind of every aten op a forward pass dispatches, as trtdiff's capture sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kind = aten_kind(func._overloadpacket.__name__, args)
        if kind is not None:
            self.kinds.append(kind)
        return func(*args, **(kwargs or {}))


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.bn = nn.BatchNorm2d(2)
        self.up = nn.ConvTranspose2d(2, 2, 2, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        y = self.up(y).view(1, 2, 8, 8)
        y = self.pool(y).flatten(1)
        return torch.softmax(self.fc(y), dim=1)


def test_real_aten_ops_of_a_tiny_model_map_to_the_onnx_kinds() -> None:
    model = _Tiny().eval()
    recorder = _Recorder()
    with torch.no_grad(), recorder:
        model(torch.ones(1, 1, 4, 4))
    assert recorder.kinds == ["conv", "batch_norm", "relu", "conv_transpose", "mean", "gemm", "softmax"]
    onnx_ops = ["Conv", "BatchNormalization", "Relu", "ConvTranspose", "GlobalAveragePool", "Gemm", "Softmax"]
    assert [onnx_kind(op) for op in onnx_ops] == recorder.kinds


def test_transposed_convolution_of_a_torchscript_module_is_conv_transpose() -> None:
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ConvTranspose2d(2, 1, 2)).eval()
    traced = torch.jit.trace(model, torch.ones(1, 1, 5, 5))
    recorder = _Recorder()
    with torch.no_grad(), recorder:
        traced(torch.ones(1, 1, 5, 5))
    assert recorder.kinds == ["conv", "conv_transpose"]


def test_underscore_convolution_without_transposed_flag_is_conv() -> None:
    assert aten_kind("_convolution", _conv_args(False)) == "conv"
    assert aten_kind("_convolution", _conv_args(True)) == "conv_transpose"
    assert aten_kind("_convolution", _conv_args(1)) == "conv"


def test_a_cast_has_a_kind_only_on_an_integer_path() -> None:
    assert aten_kind("_to_copy", ()) is None  # float16 -> float32: a view of its input, not paired
    assert aten_kind("_to_copy", (), integer=True) == "cast"
    assert aten_kind("reflection_pad2d", ()) == aten_kind("constant_pad_nd", ()) == onnx_kind("Pad") == "pad"
    assert (aten_kind("round", ()), aten_kind("argmin", ())) == (onnx_kind("Round"), onnx_kind("ArgMin"))
