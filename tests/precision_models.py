"""Small models for the reduced-precision (FP16/BF16) tests, and their FP16 ONNX files.

The transformer block (tests/culprit_models.py) is the clean case: LayerNorm, attention written
out, GELU, every op within FP16's range. `Overflow` squares a tensor whose values reach about
600, past FP16's largest finite value (65504) at the square and nowhere before it, then scales
back into range: the FP32 model is fine, every FP16 run overflows at that one node.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import torch
from torch import nn

from tests.culprit_models import export, transformer_block
from trtdiff.source.fp16 import convert_to_fp16

SHAPE = "1x16x32"
SQUARE = "/Mul_1"
"""The ONNX node of Overflow's square (TorchScript export at opset 17)."""


class Overflow(nn.Module):
    """Linear, x300, square (past 65504 in FP16), /65536, Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.out = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x) * 300.0
        energy = h * h
        return self.out(energy / 65536.0)


def overflow() -> nn.Module:
    torch.manual_seed(0)
    return Overflow().eval()


class Float64Hostile(nn.Module):
    """A forward that runs in float32 only: it casts a weight to float32 and multiplies it with its input."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(32, 32) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, self.weight.to(torch.float32)).relu()


def fp16_file(model: nn.Module, folder: Path, name: str) -> Path:
    """`model` exported at opset 17 and converted to FP16 as trtdiff converts it (inputs and outputs FP32)."""
    fp32 = export(model, SHAPE, folder / f"{name}.onnx", 17)
    path = folder / f"{name}.fp16.onnx"
    onnx.save(convert_to_fp16(onnx.load(str(fp32))).model, str(path))
    return path


class LinearRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


def linear_relu() -> nn.Module:
    torch.manual_seed(0)
    return LinearRelu().eval()


def bf16_file(folder: Path) -> Path:
    """`linear_relu` written by hand as a BF16 ONNX graph (no converter here writes one): Cast in, MatMul, Add,
    Relu in bfloat16, Cast out; inputs and outputs float32, as ModelOpt's AutoCast leaves them."""
    from onnx import TensorProto, helper

    model = linear_relu()
    weight = model.fc.weight.detach().numpy().T
    bias = model.fc.bias.detach().numpy()
    nodes = [
        helper.make_node("Cast", ["x"], ["x_bf16"], to=TensorProto.BFLOAT16, name="/Cast_in"),
        helper.make_node("MatMul", ["x_bf16", "fc.weight"], ["/fc/MatMul_output_0"], name="/fc/MatMul"),
        helper.make_node("Add", ["/fc/MatMul_output_0", "fc.bias"], ["/fc/Add_output_0"], name="/fc/Add"),
        helper.make_node("Relu", ["/fc/Add_output_0"], ["/Relu_output_0"], name="/Relu"),
        helper.make_node("Cast", ["/Relu_output_0"], ["y"], to=TensorProto.FLOAT, name="/Cast_out"),
    ]
    weights = [
        helper.make_tensor(name, TensorProto.BFLOAT16, value.shape, value.flatten().tolist())
        for name, value in (("fc.weight", weight), ("fc.bias", bias))
    ]
    graph = helper.make_graph(
        nodes,
        "linear_relu_bf16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16])],
        weights,
    )
    path = folder / "linear_relu.bf16.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


__all__ = [
    "SHAPE",
    "SQUARE",
    "Float64Hostile",
    "LinearRelu",
    "Overflow",
    "bf16_file",
    "fp16_file",
    "linear_relu",
    "overflow",
    "transformer_block",
]


class _Basic(nn.Module):
    """ResNet's basic block: two 3x3 Conv+BatchNorm, ReLU, and a projected shortcut where the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.down is None else self.down(x)
        return torch.relu(self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))) + shortcut)


class DeepResidual(nn.Module):
    """A stem, six basic blocks over three widths and a 1x1 head: 15 Convs deep; input 1x3x32x32."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1)
        widths = [(16, 16, 1), (16, 16, 1), (16, 32, 2), (32, 32, 1), (32, 64, 2), (64, 64, 1)]
        self.blocks = nn.Sequential(*(_Basic(*w) for w in widths))
        self.head = nn.Conv2d(64, 10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(torch.relu(self.stem(x))))


DEEP_SHAPE = "1x3x32x32"


def deep_residual() -> nn.Module:
    """DeepResidual with random BatchNorm statistics (so that folding them into the Convs matters)."""
    torch.manual_seed(0)
    model = DeepResidual().eval()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    return model
