"""The example models build, run at small sizes and are deterministic under their seed."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from trtdiff.examples.deeplabv3plus import deeplabv3plus_resnet
from trtdiff.examples.mobilenetv2 import InvertedResidual, deeplabv3plus_mobilenetv2

FACTORIES = [deeplabv3plus_resnet, deeplabv3plus_mobilenetv2]


@pytest.mark.parametrize("factory", FACTORIES)
def test_output_shape_and_eval_mode(factory: Callable[..., nn.Module]) -> None:
    model = factory()
    assert not model.training
    with torch.no_grad():
        out = model(torch.randn(1, 3, 64, 64))
    assert out.shape == (1, 5, 64, 64) and torch.isfinite(out).all()


@pytest.mark.parametrize("factory", FACTORIES)
def test_deterministic_under_seed(factory: Callable[..., nn.Module]) -> None:
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b, c = factory(seed=1)(x), factory(seed=1)(x), factory(seed=2)(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.allclose(a, c)


def test_mobilenetv2_has_depthwise_relu6_and_dilation() -> None:
    model = deeplabv3plus_mobilenetv2(num_classes=3)
    convs = [m for m in model.backbone.modules() if isinstance(m, nn.Conv2d)]
    assert any(c.groups == c.in_channels > 1 for c in convs)
    assert any(c.dilation != (1, 1) for c in convs)
    assert any(isinstance(m, nn.ReLU6) for m in model.modules())
    assert any(isinstance(m, InvertedResidual) and m.use_residual for m in model.modules())
    with torch.no_grad():
        assert model(torch.randn(1, 3, 32, 32)).shape == (1, 3, 32, 32)
