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


__all__ = ["SHAPE", "SQUARE", "Float64Hostile", "Overflow", "fp16_file", "overflow", "transformer_block"]
