"""A small DeepLabV3+ on a MobileNetV2-style backbone.

Inverted residual blocks bring depthwise convolutions, ReLU6 (exported as Clip) and linear
bottlenecks, each a different place where precision and fusion differ between PyTorch,
ONNX Runtime and TensorRT. The late stages are dilated instead of strided (output stride 8),
as DeepLabV3+ does with this backbone.
"""

from __future__ import annotations

import torch
from torch import nn

from trtdiff.examples.deeplabv3plus import Backbone, DeepLabV3Plus, randomize_batchnorm


def conv_bn_relu6(
    cin: int, cout: int, kernel: int = 3, stride: int = 1, dilation: int = 1, groups: int = 1
) -> nn.Sequential:
    """Conv without bias, BatchNorm, ReLU6: MobileNetV2's basic unit."""
    padding = dilation * (kernel - 1) // 2
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, padding, dilation=dilation, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(inplace=True),
    )


class InvertedResidual(nn.Module):
    """Expand with a 1x1 conv, filter depthwise, project back linearly; skip when shapes match."""

    def __init__(self, cin: int, cout: int, stride: int = 1, expand: int = 4, dilation: int = 1) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(conv_bn_relu6(cin, hidden, kernel=1))
        layers.append(conv_bn_relu6(hidden, hidden, stride=stride, dilation=dilation, groups=hidden))
        layers += [nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.block = nn.Sequential(*layers)
        self.use_residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        result: torch.Tensor = x + out if self.use_residual else out
        return result


def _stage(cin: int, cout: int, blocks: int, stride: int, expand: int, dilation: int = 1) -> nn.Sequential:
    """`blocks` inverted residuals; only the first one changes stride and channels."""
    layers = [InvertedResidual(cin, cout, stride, expand, dilation)]
    layers += [InvertedResidual(cout, cout, 1, expand, dilation) for _ in range(blocks - 1)]
    return nn.Sequential(*layers)


class MobileNetV2Backbone(Backbone):
    """Stem and five stages; low-level features at stride 4, high-level at stride 8 (dilated)."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        w = width
        self.stem = conv_bn_relu6(3, w, stride=2)
        self.stage1 = _stage(w, w, blocks=1, stride=1, expand=1)
        self.stage2 = _stage(w, 12, blocks=2, stride=2, expand=4)
        self.stage3 = _stage(12, 16, blocks=2, stride=2, expand=4)
        self.stage4 = _stage(16, 24, blocks=2, stride=1, expand=4, dilation=2)
        self.stage5 = _stage(24, 32, blocks=1, stride=1, expand=4, dilation=4)
        self.low_level_channels = 12
        self.out_channels = 32

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        low = self.stage2(self.stage1(self.stem(x)))
        return low, self.stage5(self.stage4(self.stage3(low)))


def deeplabv3plus_mobilenetv2(num_classes: int = 5, seed: int = 0) -> DeepLabV3Plus:
    """DeepLabV3+ with the small MobileNetV2-style backbone, in eval mode, seeded weights."""
    torch.manual_seed(seed)
    model = DeepLabV3Plus(MobileNetV2Backbone(), num_classes=num_classes)
    return randomize_batchnorm(model, seed).eval()
