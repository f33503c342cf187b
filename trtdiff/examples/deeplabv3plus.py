"""A small DeepLabV3+: dilated residual backbone, ASPP, decoder with a low-level skip.

The shape of the model in the seed thread, scaled down so that tests run in seconds on a
CPU: bilinear upsampling in ASPP pooling, in the decoder and at the head is exactly where
Resize coordinate modes bite.
"""

from __future__ import annotations

from typing import TypeVar, cast

import torch
import torch.nn.functional as F
from torch import nn


def conv_bn_relu(cin: int, cout: int, kernel: int = 3, stride: int = 1, dilation: int = 1) -> nn.Sequential:
    """Conv without bias, BatchNorm, ReLU: the unit the exporter folds into one Conv."""
    padding = dilation * (kernel - 1) // 2
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, padding, dilation=dilation, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


M = TypeVar("M", bound=nn.Module)


class BasicBlock(nn.Module):
    """A ResNet basic block, optionally dilated instead of strided (output stride 8/16)."""

    def __init__(self, cin: int, cout: int, stride: int = 1, dilation: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, dilation, dilation=dilation, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, dilation, dilation=dilation, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return cast(torch.Tensor, self.relu(out + identity))


class Backbone(nn.Module):
    """A backbone returning (low-level features, high-level features) with these channel counts."""

    low_level_channels: int
    out_channels: int


class ResNetBackbone(Backbone):
    """Stem and four stages; the last two use dilation, as DeepLabV3+ does at output stride 8."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(conv_bn_relu(3, w, stride=2), nn.MaxPool2d(3, 2, 1))
        self.layer1 = BasicBlock(w, w)
        self.layer2 = BasicBlock(w, 2 * w, stride=2)
        self.layer3 = BasicBlock(2 * w, 4 * w, dilation=2)
        self.layer4 = BasicBlock(4 * w, 8 * w, dilation=4)
        self.low_level_channels = w
        self.out_channels = 8 * w

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        low = self.layer1(self.stem(x))
        return low, self.layer4(self.layer3(self.layer2(low)))


class ASPPPooling(nn.Module):
    """Image-level features: global pooling, 1x1 conv, then bilinear upsampling back."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        y = self.relu(self.bn(self.conv(self.pool(x))))
        return F.interpolate(y, size=size, mode="bilinear", align_corners=False)


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling: parallel dilated convs and image pooling."""

    def __init__(self, cin: int, cout: int, rates: tuple[int, ...] = (2, 4, 6)) -> None:
        super().__init__()
        branches: list[nn.Module] = [conv_bn_relu(cin, cout, kernel=1)]
        branches += [conv_bn_relu(cin, cout, dilation=r) for r in rates]
        branches.append(ASPPPooling(cin, cout))
        self.branches = nn.ModuleList(branches)
        self.project = conv_bn_relu(cout * len(branches), cout, kernel=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, self.project(torch.cat([branch(x) for branch in self.branches], dim=1)))


class Decoder(nn.Module):
    """DeepLabV3+ decoder: upsample ASPP features, concatenate the low-level skip, refine."""

    def __init__(self, low_channels: int, aspp_channels: int, num_classes: int) -> None:
        super().__init__()
        self.reduce = conv_bn_relu(low_channels, 12, kernel=1)
        self.refine = nn.Sequential(
            conv_bn_relu(aspp_channels + 12, aspp_channels), conv_bn_relu(aspp_channels, aspp_channels)
        )
        self.classifier = nn.Conv2d(aspp_channels, num_classes, 1)

    def forward(self, features: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
        up = F.interpolate(features, size=low.shape[-2:], mode="bilinear", align_corners=False)
        return cast(torch.Tensor, self.classifier(self.refine(torch.cat([up, self.reduce(low)], dim=1))))


class DeepLabV3Plus(nn.Module):
    """Backbone, ASPP and decoder; the logits are upsampled bilinearly to the input size."""

    def __init__(self, backbone: Backbone, num_classes: int = 5, aspp_channels: int = 32) -> None:
        super().__init__()
        self.backbone = backbone
        self.aspp = ASPP(backbone.out_channels, aspp_channels)
        self.decoder = Decoder(backbone.low_level_channels, aspp_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low, high = self.backbone(x)
        logits = self.decoder(self.aspp(high), low)
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


def randomize_batchnorm(model: M, seed: int = 0) -> M:
    """Give BatchNorm layers non-trivial statistics, as a trained model has, so folding matters."""
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            n = module.num_features
            assert module.running_mean is not None and module.running_var is not None
            module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
            module.running_var.copy_(torch.rand(n, generator=generator) * 0.5 + 0.75)
            module.weight.data.copy_(torch.rand(n, generator=generator) * 0.5 + 0.75)
            module.bias.data.copy_(torch.randn(n, generator=generator) * 0.1)
    return model


def deeplabv3plus_resnet(num_classes: int = 5, seed: int = 0) -> DeepLabV3Plus:
    """The embedded DeepLabV3+ with a small residual backbone, in eval mode, seeded weights."""
    torch.manual_seed(seed)
    model = DeepLabV3Plus(ResNetBackbone(), num_classes=num_classes)
    return randomize_batchnorm(model, seed).eval()
