"""Pairs made by kind and order alone are checked against what they read (trtdiff/pairing/flow.py).

A scripted torchvision-shaped resnet18 (`torch.jit.script`): its graph cannot be walked for module
paths (BatchNorm's scripted forward branches on `self.training`), so its Convs pair by kind and
order; its downsample Conv runs after conv2 and is written before it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from arch_models import ARCHITECTURES

import trtdiff
from trtdiff.backends.pytorch.capture import capture
from trtdiff.source.inputs import make_inputs

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("flow") / "resnet18-scripted.pt"
    torch.jit.save(torch.jit.script(ARCHITECTURES["resnet18"].model()), str(path))
    return path


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_scripted_resnet18_pairs_each_conv_with_its_own_batchnorm(scripted: Path, precision: str) -> None:
    """Paired in order, conv2 and the downsample Conv traded BatchNorms: 6 culprits on a correct model."""
    shape = ARCHITECTURES["resnet18"].shape
    assert not capture(torch.jit.load(str(scripted)), make_inputs(["x"], shapes=[shape], seed=0)).recovered_paths
    report = trtdiff.compare(scripted, input_shapes=[shape], precision=precision, culprit=True)
    assert report.passed and not report.culprits, [c.onnx_node for c in report.culprits]
    assert report.pairing.float_paired == report.pairing.float_tensors
    cosines = {layer.onnx_node: [m.cosine for m in layer.pairs.values()] for layer in report.layers}
    for conv in ("/layer2/0/downsample/0/Conv", "/layer2/0/conv2/Conv"):  # each against its own BatchNorm's value
        assert all(cosine is not None and cosine > 0.9999 for cosine in cosines[conv]), (conv, cosines[conv])
