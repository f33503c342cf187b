"""Real Reports for the renderer tests, made once per session (real torch and ONNX Runtime)."""

from __future__ import annotations

import pytest

import trtdiff
from trtdiff.demo import build_example
from trtdiff.gate import GateOptions
from trtdiff.report import Report

SHAPES = ["1x3x64x64"]


@pytest.fixture(scope="session")
def gated_reports() -> dict[str, Report]:
    """opset 10 (the decoder Resize diverges) and opset 13 (agrees), 3 samples each, gated on mIoU;
    and opset 10 on one input, where the layer, output and mIoU checks fail."""
    model = build_example("resnet")
    gate = GateOptions(num_samples=3, min_miou=0.9)
    return {
        "failing": trtdiff.compare(model, input_shapes=SHAPES, opset=10, gate=gate),
        "passing": trtdiff.compare(model, input_shapes=SHAPES, opset=13, gate=gate),
        "single": trtdiff.compare(model, input_shapes=SHAPES, opset=10, gate=GateOptions(min_miou=0.9)),
    }
