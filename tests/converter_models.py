"""Small versions of the models users convert to FP16 (issue 38), for the converter's tests.

Each holds what broke a converter on the real one: PyTorch's own `nn.TransformerEncoderLayer`
(its attention scale is shape arithmetic Cast to float), a decoder step with a KV cache (rotary
angles from int64 `position_ids` through a float Cast, present key/value that are graph outputs
and read again by the attention), a diffusion UNet's skeleton (an int64 timestep Cast to float,
GroupNorm, SiLU, a Resize to a size), a resnet18-shaped classifier, and two Conv+BatchNorm pairs
whose folded biases are equal, so the TorchScript exporter writes the second bias as an
`Identity` of the first (a weight read through an Identity, as in DeepLabV3+ at opset 17).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from trtdiff.source.export import export_onnx
from trtdiff.source.loading import from_module

PATCH_SHAPE = "1x3x32x32"
RESNET_SHAPE = "1x3x64x64"
SHARED_SHAPE = "1x8x8x8"
SHARED_SOURCE = "/c/c.0/Conv"
"""The Conv of SharedBias whose bias the other Conv reads through an Identity (TorchScript, opset 17)."""


class PatchEncoder(nn.Module):
    """A 4x4 patch embedding (flatten, transpose), PyTorch's TransformerEncoderLayer, a Linear head; 1x3x32x32."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, 32, 4, stride=4)
        self.l = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.l(self.patch(x).flatten(2).transpose(1, 2)))


def patch_encoder() -> nn.Module:
    torch.manual_seed(0)
    return PatchEncoder().eval()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class DecoderStep(nn.Module):
    """One Llama-like decoder step: token ids, int64 position ids and the past key/value in; logits and the
    present key/value out. Rotary angles come from `position_ids.float()`, the cache is concatenated before
    the causal attention, and LayerNorm, a SiLU MLP and the residuals follow."""

    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 64), nn.SiLU(), nn.Linear(64, dim))
        self.lm_head = nn.Linear(dim, vocab)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, past_key: torch.Tensor, past_value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.embed(input_ids)
        b, t, d = x.shape
        h = self.norm(x)
        q, k, v = (p(h).view(b, t, self.heads, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos()[:, None], angles.sin()[:, None]
        q = q * cos + _rotate_half(q) * sin
        k = torch.cat([past_key, k * cos + _rotate_half(k) * sin], dim=2)
        v = torch.cat([past_value, v], dim=2)
        s = k.shape[2]
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        causal = torch.ones(t, s, dtype=torch.bool).tril(s - t)
        attended = (scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(attended)
        x = x + self.mlp(self.norm(x))
        return self.lm_head(x), k, v


def decoder_step() -> nn.Module:
    torch.manual_seed(0)
    return DecoderStep().eval()


def decoder_inputs(path: Path) -> Path:
    """Inputs of one step after a 5-token prompt, as an .npz keyed by input name (`--input`)."""
    rng = np.random.default_rng(0)
    np.savez(
        path,
        input_ids=rng.integers(0, 64, (1, 3)),
        position_ids=np.arange(5, 8)[None],
        past_key=rng.standard_normal((1, 4, 5, 8), dtype=np.float32),
        past_value=rng.standard_normal((1, 4, 5, 8), dtype=np.float32),
    )
    return path


class TimestepUNet(nn.Module):
    """A diffusion UNet's skeleton: a sinusoidal embedding of an int64 timestep (a float Cast), GroupNorm,
    SiLU, a strided conv down, F.interpolate to the skip's size (a Resize given sizes), concatenation."""

    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.channels = channels
        self.inp = nn.Conv2d(3, channels, 3, padding=1)
        self.temb = nn.Sequential(nn.Linear(channels, channels), nn.SiLU(), nn.Linear(channels, channels))
        self.norm1, self.conv1 = nn.GroupNorm(4, channels), nn.Conv2d(channels, channels, 3, padding=1)
        self.down = nn.Conv2d(channels, channels, 3, stride=2, padding=1)
        self.norm2, self.conv2 = nn.GroupNorm(4, channels), nn.Conv2d(channels, channels, 3, padding=1)
        self.out = nn.Conv2d(2 * channels, 3, 3, padding=1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        half = self.channels // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
        args = t[:, None].float() * freqs[None]
        emb = self.temb(torch.cat([args.sin(), args.cos()], dim=-1))
        h = self.inp(x)
        h = h + self.conv1(F.silu(self.norm1(h))) + emb[:, :, None, None]
        low = self.conv2(F.silu(self.norm2(self.down(h))))
        return self.out(torch.cat([h, F.interpolate(low, size=h.shape[-2:], mode="nearest")], dim=1))


def timestep_unet() -> nn.Module:
    torch.manual_seed(0)
    return TimestepUNet().eval()


def unet_inputs(path: Path) -> Path:
    """A 1x3x16x16 latent and timestep 7, as an .npz keyed by input name."""
    np.savez(path, x=np.random.default_rng(0).standard_normal((1, 3, 16, 16), dtype=np.float32), t=np.array([7]))
    return path


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + self.downsample(x))


class ResNet18Like(nn.Module):
    """resnet18's layout (7x7/2 stem, max pool, four stages of two BasicBlocks, average pool, fc), 8 channels wide."""

    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], width
        for i, cout in enumerate((width, 2 * width, 4 * width, 8 * width)):
            stages.append(nn.Sequential(BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet18_like() -> nn.Module:
    """Seeded, with BatchNorm statistics away from their defaults (as a trained network's are)."""
    torch.manual_seed(0)
    model = ResNet18Like()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for bn in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):
            bn.weight.copy_(torch.rand(bn.weight.shape, generator=generator) + 0.5)
            bn.bias.copy_(torch.randn(bn.weight.shape, generator=generator) * 0.1)
            bn.running_mean.copy_(torch.randn(bn.weight.shape, generator=generator) * 0.1)
            bn.running_var.copy_(torch.rand(bn.weight.shape, generator=generator) + 0.5)
    return model.eval()


class SharedBias(nn.Module):
    """Conv, ReLU, then two Conv+BatchNorm pairs with BatchNorm at its defaults: folded, both biases are zero,
    and the TorchScript exporter writes the second as an Identity of the first."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(8, 8, 3, padding=1)
        self.c = nn.Sequential(nn.Conv2d(8, 8, 1, bias=False), nn.BatchNorm2d(8))
        self.d = nn.Sequential(nn.Conv2d(8, 8, 1, bias=False), nn.BatchNorm2d(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.d(self.c(torch.relu(self.a(x))))


def shared_bias() -> nn.Module:
    torch.manual_seed(0)
    return SharedBias().eval()


def export_with(
    model: nn.Module, inputs: dict[str, np.ndarray], path: Path, opset: int = 17, exporter: str = "torchscript"
) -> Path:
    """`model` exported for `inputs` (keyed by input name, in the forward's order) as trtdiff exports it."""
    export_onnx(from_module(model), inputs, opset=opset, exporter=exporter, path=path)
    return path


__all__ = [
    "PATCH_SHAPE",
    "RESNET_SHAPE",
    "SHARED_SHAPE",
    "SHARED_SOURCE",
    "DecoderStep",
    "PatchEncoder",
    "ResNet18Like",
    "SharedBias",
    "TimestepUNet",
    "decoder_inputs",
    "decoder_step",
    "export_with",
    "patch_encoder",
    "resnet18_like",
    "shared_bias",
    "timestep_unet",
    "unet_inputs",
]
