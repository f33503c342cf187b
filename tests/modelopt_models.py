"""The two small models ModelOpt quantizes for the fixtures in tests/fixtures/modelopt (issue 37).

`modelopt_cnn()` and `llm_block()` rebuild, seeded, the exact PyTorch model each fixture came
from; `sample(name, index)` rebuilds any calibration sample. This module imports torch and
numpy only: tests/fixtures/modelopt/make_fixtures.py imports it in ModelOpt's own venv.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

CNN_SHAPE = (1, 3, 32, 32)
CNN_INPUT = "x"
LLM_SHAPE = (1, 16, 64)
LLM_INPUT = "hidden_states"
CALIBRATION_SAMPLES = 16
"""Calibration sample i is np.random.default_rng(i).standard_normal(shape): sample 0 is trtdiff's own
seeded random input (`make_inputs(..., seed=0)`), so min-max calibration saw the compared input."""


class ModeloptCnn(nn.Module):
    """conv1/bn1 stem, a stride-2 conv, one residual block (add, ReLU), global average pool, a linear head.

    The stem is named `conv1`/`bn1` as in torchvision's ResNet: the dynamo exporter folds bn1 into
    conv1 and keeps the name `conv1.weight` for the folded weight.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.conv3 = nn.Conv2d(32, 32, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(32)
        self.conv4 = nn.Conv2d(32, 32, 3, padding=1, bias=False)
        self.bn4 = nn.BatchNorm2d(32)
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.relu(self.bn2(self.conv2(x)))
        y = self.relu(self.bn3(self.conv3(x)))
        x = self.relu(self.bn4(self.conv4(y)) + x)
        return self.fc(torch.flatten(self.pool(x), 1))


class RMSNorm(nn.Module):
    """Written out (pow, mean, add eps, rsqrt, mul): what the exporters write for a Llama-style RMSNorm."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlmBlock(nn.Module):
    """One pre-norm decoder block without embeddings: hidden states (1, 16, 64) in, logits (1, 16, 128) out.

    LayerNorm before causal self-attention (q/k/v/o projections, 4 heads, a -inf upper-triangular
    mask added to the scores, softmax), RMSNorm before a GELU MLP (64 -> 256 -> 64), residual adds,
    a final RMSNorm and an lm_head. fc2's 256 inputs are two INT4 blocks of 128 (eight of 32).
    """

    mask: torch.Tensor  # the causal mask, a buffer

    def __init__(self, dim: int = 64, heads: int = 4, hidden: int = 256, vocab: int = 128, seq: int = 16) -> None:
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(dim // heads)
        self.ln1 = nn.LayerNorm(dim)
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.o_proj = nn.Linear(dim, dim)
        self.norm2 = RMSNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.norm_f = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1), persistent=False)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x = hidden_states
        b, t, d = x.shape
        dh = d // self.heads
        h = self.ln1(x)
        q = self.q_proj(h).reshape(b, t, self.heads, dh).transpose(1, 2)
        k = self.k_proj(h).reshape(b, t, self.heads, dh).transpose(1, 2)
        v = self.v_proj(h).reshape(b, t, self.heads, dh).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale + self.mask
        y = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, t, d)
        x = x + self.o_proj(y)
        x = x + self.fc2(self.act(self.fc1(self.norm2(x))))
        return self.lm_head(self.norm_f(x))


def modelopt_cnn() -> ModeloptCnn:
    """The CNN every cnn_* fixture came from, eval mode, BatchNorm statistics and affine away from defaults."""
    torch.manual_seed(0)
    model = ModeloptCnn()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                n = module.num_features
                module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
                module.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
                module.weight.copy_(torch.rand(n, generator=generator) + 0.5)
                module.bias.copy_(torch.randn(n, generator=generator) * 0.1)
    return model.eval()


def llm_block() -> LlmBlock:
    """The block every llm_* fixture came from, eval mode, norm weights away from 1 and 0."""
    torch.manual_seed(0)
    model = LlmBlock()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for norm in (model.ln1, model.norm2, model.norm_f):
            norm.weight.add_(torch.randn(norm.weight.shape, generator=generator) * 0.2)
        model.ln1.bias.add_(torch.randn(model.ln1.bias.shape, generator=generator) * 0.1)
    return model.eval()


MODELS = {"cnn": (modelopt_cnn, CNN_INPUT, CNN_SHAPE), "llm": (llm_block, LLM_INPUT, LLM_SHAPE)}


def sample(name: str, index: int = 0) -> dict[str, np.ndarray]:
    """Calibration sample `index` of model `name` ("cnn" or "llm"), keyed by its input name; index 0 is
    trtdiff's seeded random input for that shape."""
    _, input_name, shape = MODELS[name]
    return {input_name: np.random.default_rng(index).standard_normal(shape, dtype=np.float32)}


def calibration_data(name: str, samples: int = CALIBRATION_SAMPLES) -> dict[str, np.ndarray]:
    """The calibration set of model `name`: `samples` samples stacked on the batch axis, keyed by input name."""
    _, input_name, _ = MODELS[name]
    return {input_name: np.concatenate([sample(name, i)[input_name] for i in range(samples)])}
