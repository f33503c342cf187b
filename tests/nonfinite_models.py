"""Tiny models whose outputs (or intermediates) hold NaN or Inf, for the non-finite gate tests.

Factories are importable as `tests.nonfinite_models:<name>` from the repository root, so the
CLI tests can give them as MODEL.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IMAGE_SHAPE = "1x3x8x8"
SEQUENCE_SHAPE = "1x6x8"


class Root(nn.Module):
    """A square root, in a module of its own so that the report can name it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(x)


class NanInTheMiddle(nn.Module):
    """conv -> minus 100 -> sqrt (NaN: the conv's outputs lie far below 100) -> conv: every output is NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.root = Root()
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.root(self.conv(x) - 100.0))


class MaskedAttention(nn.Module):
    """Causal attention with a -inf mask: the masked scores hold -inf, the output is finite (a correct model)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.proj(x) @ x.transpose(1, 2)
        mask = torch.full((x.shape[1], x.shape[1]), float("-inf"), device=x.device).triu(1)
        return torch.softmax(scores + mask, dim=-1) @ x


class LogOfInput(nn.Module):
    """log(x) on a standard normal input: NaN where x < 0, at the same positions in every backend."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x) * 2.0


class LogThenMaxPool(nn.Module):
    """log(x), then 2x2 max pooling: PyTorch's MaxPool propagates NaN, ONNX Runtime's mostly skips it.

    So the outputs hold NaN at different positions in the two backends (a real difference of
    the runtimes, measured with torch 2.13 and onnxruntime 1.32: ONNX Runtime's 2-D max pool
    returns NaN only when the window's last value is NaN).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(torch.log(x) * 2.0, 2)


class RootOfInput(nn.Module):
    """A linear layer on sqrt(x): finite for non-negative inputs, NaN for negative ones."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Root()
        self.lin = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.root(x))


class MaskThenRoot(nn.Module):
    """Masked attention (a -inf mask, finite after the softmax), then sqrt(out - 100): NaN from the square root."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = MaskedAttention()
        self.root = Root()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.root(self.attention(x) - 100.0)


def nan_in_the_middle() -> nn.Module:
    torch.manual_seed(0)
    return NanInTheMiddle()


def masked_attention() -> nn.Module:
    torch.manual_seed(0)
    return MaskedAttention()


def log_of_input() -> nn.Module:
    return LogOfInput()


def log_then_max_pool() -> nn.Module:
    return LogThenMaxPool()


def root_of_input() -> nn.Module:
    torch.manual_seed(0)
    return RootOfInput()


def mask_then_root() -> nn.Module:
    torch.manual_seed(0)
    return MaskThenRoot()
