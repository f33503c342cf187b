"""A causal self-attention block, as every decoder has one: its scores masked before the Softmax.

Three ways of writing the mask, as models write it: `masked_fill` with -inf (exported as a Where),
an additive -inf buffer (an Add), and `masked_fill` with `torch.finfo(dtype).min` (Hugging Face's
way: finite, -3.4e38). `gain` scales the scores before the mask: 1e5 makes them overflow FP16.
Input 1x8x16 (batch, tokens, features).
"""

from __future__ import annotations

import math

import torch
from torch import nn

TOKENS, DIM, HEADS = 8, 16, 2


class CausalSelfAttention(nn.Module):
    def __init__(self, mask: str = "masked_fill", gain: float = 1.0) -> None:
        super().__init__()
        self.mask, self.gain = mask, gain
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.register_buffer("future", torch.triu(torch.ones(TOKENS, TOKENS, dtype=torch.bool), 1))
        self.register_buffer("additive", torch.triu(torch.full((TOKENS, TOKENS), float("-inf")), 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) * (self.gain / math.sqrt(c // HEADS))
        if self.mask == "additive":
            scores = scores + self.additive[:t, :t]
        else:
            fill = torch.finfo(scores.dtype).min if self.mask == "finfo" else float("-inf")
            scores = scores.masked_fill(self.future[:t, :t], fill)
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c))


class Scaled(nn.Module):
    """x * 1e5: on inputs about 1, values past FP16's 65504, computed."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1e5


def _seeded(mask: str, gain: float = 1.0) -> nn.Module:
    torch.manual_seed(0)
    return CausalSelfAttention(mask, gain).eval()


def masked_fill() -> nn.Module:
    return _seeded("masked_fill")


def additive() -> nn.Module:
    return _seeded("additive")


def finfo() -> nn.Module:
    return _seeded("finfo")


def overflowing_scores() -> nn.Module:
    return _seeded("masked_fill", gain=1e5)


def scaled() -> nn.Module:
    return Scaled().eval()
