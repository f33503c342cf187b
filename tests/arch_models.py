"""Tiny versions of real architectures, written the way their reference code writes them.

No torchvision, no downloads: a few blocks each, with the layers that matter for pairing, at
sizes where one export and comparison takes about a second.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


def _window_partition(x: torch.Tensor, window: int) -> torch.Tensor:
    b, h, w, c = x.shape
    x = x.view(b, h // window, window, w // window, window, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window * window, c)


def _window_reverse(windows: torch.Tensor, window: int, h: int, w: int) -> torch.Tensor:
    c = windows.shape[-1]
    x = windows.view(-1, h // window, w // window, window, window, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, h, w, c)


class WindowAttention(nn.Module):  # Swin's window attention: fused qkv, relative position bias, shift mask
    def __init__(self, dim: int, heads: int, window: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        relative = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("relative_position_index", relative[..., 0] * (2 * window - 1) + relative[..., 1])
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        attn = attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        if mask is not None:
            windows = mask.shape[0]
            attn = attn.view(-1, windows, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, n, n)
        attn = self.softmax(attn)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


def _mlp(dim: int, hidden: int, act: Callable[[], nn.Module] = nn.GELU) -> nn.Module:
    return nn.Sequential(OrderedDict(fc1=nn.Linear(dim, hidden), act=act(), fc2=nn.Linear(hidden, dim)))


class SwinBlock(nn.Module):
    def __init__(self, dim: int, heads: int, size: int, window: int, shift: int) -> None:
        super().__init__()
        self.size, self.window, self.shift = size, window, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads, window)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = _mlp(dim, 2 * dim)
        self.register_buffer("attn_mask", self._mask() if shift else None)

    def _mask(self) -> torch.Tensor:
        image = torch.zeros(1, self.size, self.size, 1)
        cuts = (slice(0, -self.window), slice(-self.window, -self.shift), slice(-self.shift, None))
        for count, (h, w) in enumerate(itertools.product(cuts, cuts)):
            image[:, h, w, :] = count
        windows = _window_partition(image, self.window).squeeze(-1)
        mask = windows.unsqueeze(1) - windows.unsqueeze(2)
        return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h, w, _ = x.shape
        shortcut = x
        x = self.norm1(x)
        if self.shift:
            x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        windows = self.attn(_window_partition(x, self.window), mask=self.attn_mask)
        x = _window_reverse(windows, self.window, h, w)
        if self.shift:
            x = torch.roll(x, shifts=(self.shift, self.shift), dims=(1, 2))
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class Swin(nn.Module):
    """Patch embedding, a plain and a shifted window block, patch merging, pooled head. Input 1x3x32x32."""

    def __init__(self, dim: int = 16, heads: int = 2, window: int = 4) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, 4, stride=4)
        self.norm0 = nn.LayerNorm(dim)
        self.blocks = nn.Sequential(
            SwinBlock(dim, heads, 8, window, 0),
            SwinBlock(dim, heads, 8, window, window // 2),
        )
        self.merge_norm = nn.LayerNorm(4 * dim)  # timm's patch merging: 2x2 neighbours to channels
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(2 * dim)
        self.head = nn.Linear(2 * dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.norm0(self.patch_embed(x).permute(0, 2, 3, 1)))
        b, h, w, c = x.shape
        x = x.reshape(b, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 4, 2, 5).flatten(3)
        return self.head(self.norm(self.reduction(self.merge_norm(x))).mean(dim=(1, 2)))


class Attention(nn.Module):  # timm's ViT attention: fused qkv, unbind, scaled_dot_product_attention
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


def _layer_scale(dim: int) -> nn.Parameter:
    return nn.Parameter(torch.full((dim,), 0.5) + torch.randn(dim) * 0.1)


class VitBlock(nn.Module):  # pre-norm, layer scale
    def __init__(self, dim: int, heads: int, act: Callable[[], nn.Module]) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.gamma1 = _layer_scale(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = _mlp(dim, 4 * dim, act)
        self.gamma2 = _layer_scale(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.gamma1 * self.attn(self.norm1(x))
        return x + self.gamma2 * self.mlp(self.norm2(x))


class Vit(nn.Module):
    """Patch embedding, class token, position embedding, two blocks (GELU exact, then tanh). Input 1x3x32x32."""

    def __init__(self, dim: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, 8, stride=8)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, 17, dim) * 0.02)
        self.blocks = nn.Sequential(
            VitBlock(dim, heads, nn.GELU),
            VitBlock(dim, heads, lambda: nn.GELU(approximate="tanh")),
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


class MhaBlock(nn.Module):  # nn.MultiheadAttention with pre-norm and a ReLU MLP; input 1x16x32
    def __init__(self, dim: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = _mlp(dim, 2 * dim, nn.ReLU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class LayerNorm2d(nn.LayerNorm):  # ConvNeXt's channels-first LayerNorm: permute, layer_norm, permute back
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = _layer_scale(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.dwconv(x).permute(0, 2, 3, 1)
        x = self.pwconv2(self.act(self.pwconv1(self.norm(x))))
        return shortcut + (self.gamma * x).permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):  # stem (patchify, LayerNorm2d), block, downsampling, block, pooled head; 1x3x32x32
    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim, 4, stride=4), LayerNorm2d(dim, eps=1e-6))
        down = nn.Sequential(LayerNorm2d(dim, eps=1e-6), nn.Conv2d(dim, 2 * dim, 2, stride=2))
        self.stages = nn.Sequential(ConvNeXtBlock(dim), down, ConvNeXtBlock(2 * dim))
        self.norm = nn.LayerNorm(2 * dim, eps=1e-6)
        self.head = nn.Linear(2 * dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.stages(self.stem(x)).mean(dim=(-2, -1))))


class SqueezeExcite(nn.Module):
    def __init__(
        self, channels: int, reduced: int, act: Callable[[], nn.Module], gate: Callable[[], nn.Module]
    ) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.act = act()
        self.expand = nn.Conv2d(reduced, channels, 1)
        self.gate = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.expand(self.act(self.reduce(self.pool(x)))))


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


class InvertedResidual(nn.Module):  # EfficientNet's MBConv, MobileNetV3's block: expand, depthwise, SE, project, skip
    def __init__(self, channels: int, mid: int, kernel: int, acts: tuple[type[nn.Module], ...]) -> None:
        super().__init__()
        act, se_act, gate = acts
        self.expand = nn.Sequential(*_conv_bn(channels, mid, 1), act())
        self.depthwise = nn.Sequential(*_conv_bn(mid, mid, kernel, groups=mid), act())
        self.se = SqueezeExcite(mid, 8, se_act, gate)
        self.project = nn.Sequential(*_conv_bn(mid, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.project(self.se(self.depthwise(self.expand(x))))


class EfficientSelfAttention(nn.Module):  # SegFormer's: keys and values from a reduced map
    def __init__(self, dim: int, heads: int, ratio: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.sr = nn.Conv2d(dim, dim, ratio, stride=ratio)
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        b, n, c = x.shape
        q = self.q(x).reshape(b, n, self.heads, c // self.heads).permute(0, 2, 1, 3)
        reduced = self.sr(x.permute(0, 2, 1).reshape(b, c, h, w)).reshape(b, c, -1).permute(0, 2, 1)
        kv = self.kv(self.norm(reduced)).reshape(b, -1, 2, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        k, v = kv[0], kv[1]
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class MixFFN(nn.Module):  # SegFormer's: Linear, depthwise 3x3 conv on the token map, GELU, Linear
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.dwconv = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        x = self.fc1(x)
        b, _, c = x.shape
        x = self.dwconv(x.transpose(1, 2).view(b, c, h, w)).flatten(2).transpose(1, 2)
        return self.fc2(self.act(x))


class SegFormer(nn.Module):  # overlapping patch embedding, a block, 1x1 head, upsampling; 1x3x32x32 -> 1x4x32x32
    def __init__(self, dim: int = 16, heads: int = 2, ratio: int = 2) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, 7, stride=4, padding=3)
        self.norm0 = nn.LayerNorm(dim)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = EfficientSelfAttention(dim, heads, ratio)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MixFFN(dim, 4 * dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Conv2d(dim, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        b, c, h, w = x.shape
        x = self.norm0(x.flatten(2).transpose(1, 2))
        x = x + self.attn(self.norm1(x), h, w)
        x = self.norm(x + self.mlp(self.norm2(x), h, w)).reshape(b, h, w, c).permute(0, 3, 1, 2)
        return F.interpolate(self.head(x), scale_factor=4.0, mode="bilinear", align_corners=False)


class ConvClassifier(nn.Module):  # EfficientNet and MobileNetV3: stem, blocks, head, pooling, classifier
    def __init__(self, stem: nn.Module, blocks: nn.Module, head: nn.Module, classifier: nn.Module) -> None:
        super().__init__()
        self.stem, self.blocks, self.head, self.classifier = stem, blocks, head, classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.blocks(self.stem(x)))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def efficientnet(channels: int = 16) -> nn.Module:  # SiLU stem, two MBConv, SiLU head conv; 1x3x32x32
    return ConvClassifier(
        nn.Sequential(*_conv_bn(3, channels, 3, 2), nn.SiLU()),
        nn.Sequential(*(InvertedResidual(channels, 4 * channels, 3, (nn.SiLU, nn.SiLU, nn.Sigmoid)) for _ in "ab")),
        nn.Sequential(*_conv_bn(channels, 64, 1), nn.SiLU()),
        nn.Linear(64, 10),
    )


def mobilenet_v3(channels: int = 16) -> nn.Module:  # hardswish stem, two blocks, hardswish head; 1x3x32x32
    return ConvClassifier(
        nn.Sequential(*_conv_bn(3, channels, 3, 2), nn.Hardswish()),
        nn.Sequential(
            *(InvertedResidual(channels, 3 * channels, 5, (nn.Hardswish, nn.ReLU, nn.Hardsigmoid)) for _ in "ab")
        ),
        nn.Identity(),
        nn.Sequential(nn.Linear(channels, 32), nn.Hardswish(), nn.Linear(32, 10)),
    )


class DictOutput(nn.Module):  # a small CNN (Mish, ReLU6) returning {"logits", "features"}; input 1x3x32x32
    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, channels, 3, 2), nn.Mish())
        self.body = nn.Sequential(*_conv_bn(channels, channels, 3), nn.ReLU6())
        self.classifier = nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        features = self.body(self.stem(x))
        logits = self.classifier(features.mean(dim=(2, 3)))
        return {"logits": logits, "features": features}


class BasicBlock(nn.Module):  # torchvision's ResNet block: conv1, bn1, relu, conv2, bn2, downsample, in-place add
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = nn.Sequential(*_conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        if self.downsample is not None:  # run after conv2, written before it in the ONNX graph's order
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):  # torchvision's resnet18 at full width; 1x3x64x64
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
        for i, (cin, cout, stride) in enumerate(widths, start=1):
            self.add_module(f"layer{i}", nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout)))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class ResBlock(nn.Module):  # a diffusion UNet's (diffusers' ResnetBlock2D): GroupNorm, SiLU, Conv twice, residual
    def __init__(self, channels: int = 32, groups: int = 8) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.nonlinearity = nn.SiLU()  # one module, called after each norm
        with torch.no_grad():  # trained scales and shifts, not 1 and 0
            for norm in (self.norm1, self.norm2):
                norm.weight.copy_(torch.rand(channels) + 0.5)
                norm.bias.copy_(torch.randn(channels) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(self.nonlinearity(self.norm1(x)))
        return x + self.conv2(self.nonlinearity(self.norm2(h)))


class RotaryEmbedding(
    nn.Module
):  # Hugging Face's LlamaRotaryEmbedding: (cos, sin), two outputs alike, cast to x's type
    def __init__(self, head_dim: int) -> None:
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions[:, :, None].float() * self.inv_freq[None, None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)


class RMSNorm(nn.Module):  # Llama's: x * rsqrt(mean(x^2) + eps) * weight
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class LlamaLayer(nn.Module):  # a Llama decoder layer on embeddings: RMSNorm, rotary, causal SDPA (bool mask), SwiGLU
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(dim), RMSNorm(dim)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.rotary_emb = RotaryEmbedding(self.head_dim)
        self.gate_proj, self.up_proj = nn.Linear(dim, 64, bias=False), nn.Linear(dim, 64, bias=False)
        self.down_proj = nn.Linear(64, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.input_layernorm(x)
        q, k, v = (
            p(h).view(b, t, self.heads, self.head_dim).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        cos, sin = self.rotary_emb(x, torch.arange(t, device=x.device)[None])
        cos, sin = cos[:, None], sin[:, None]
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=causal).transpose(1, 2).reshape(b, t, d)
        x = x + self.o_proj(attended)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def _randomize(model: nn.Module) -> nn.Module:
    """BatchNorms away from their defaults (folding matters); LayerNorms as built (weight 1, bias 0)."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):
            m.weight.copy_(torch.rand(m.weight.shape, generator=generator) + 0.5)
            m.bias.copy_(torch.randn(m.weight.shape, generator=generator) * 0.1)
            m.running_mean.copy_(torch.randn(m.weight.shape, generator=generator) * 0.1)
            m.running_var.copy_(torch.rand(m.weight.shape, generator=generator) + 0.5)
    return model.eval()


@dataclass(frozen=True)
class Architecture:
    """A test model: how to build it, its input shape and whether it is a transformer (pairing target 0.9)."""

    name: str
    build: Callable[[], nn.Module]
    shape: str
    transformer: bool

    def model(self) -> nn.Module:
        torch.manual_seed(0)
        return _randomize(self.build())


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture("swin", Swin, "1x3x32x32", True),
        Architecture("vit", Vit, "1x3x32x32", True),
        Architecture("mha", MhaBlock, "1x16x32", True),
        Architecture("llama", LlamaLayer, "1x6x32", True),
        Architecture("segformer", SegFormer, "1x3x32x32", True),
        Architecture("convnext", ConvNeXt, "1x3x32x32", False),
        Architecture("efficientnet", efficientnet, "1x3x32x32", False),
        Architecture("mobilenetv3", mobilenet_v3, "1x3x32x32", False),
        Architecture("dict", DictOutput, "1x3x32x32", False),
        Architecture("resnet18", ResNet18, "1x3x64x64", False),
        Architecture("resblock", ResBlock, "1x32x16x16", False),
    )
}
