"""Shared fixtures: the example models and their ONNX exports, built once per test session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from trtdiff.examples.deeplabv3plus import deeplabv3plus_resnet
from trtdiff.source.export import export_onnx
from trtdiff.source.inputs import make_inputs
from trtdiff.source.loading import from_module

SHAPE = "1x3x64x64"


@pytest.fixture(scope="session")
def resnet_model() -> torch.nn.Module:
    """The embedded DeepLabV3+ (residual backbone), eval mode, seeded."""
    return deeplabv3plus_resnet()


@pytest.fixture(scope="session")
def example_feeds() -> dict[str, np.ndarray]:
    """The seeded random input trtdiff would make for --input-shape 1x3x64x64."""
    return make_inputs(["x"], shapes=[SHAPE], seed=0)


@pytest.fixture(scope="session")
def export_example(
    resnet_model: torch.nn.Module, example_feeds: dict[str, np.ndarray], tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., Path]:
    """export_example(opset, exporter="torchscript") -> path of a cached ONNX export of the example."""
    cache: dict[tuple[int, str], Path] = {}
    folder = tmp_path_factory.mktemp("exports")

    def export(opset: int, exporter: str = "torchscript") -> Path:
        key = (opset, exporter)
        if key not in cache:
            path = folder / f"deeplab_{exporter}_{opset}.onnx"
            export_onnx(from_module(resnet_model), example_feeds, opset=opset, exporter=exporter, path=path)
            cache[key] = path
        return cache[key]

    return export


@pytest.fixture
def opened_backends(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every backend constructed during the test (the real classes, each wrapped to note its instances).

    A test asserts `all(b.closed for b in opened_backends)`: whatever opened them closed them.
    """
    from trtdiff.backends.onnx_reference import OnnxReferenceBackend
    from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
    from trtdiff.backends.recorded import RecordedBackend

    opened: list = []
    for cls in (OnnxRuntimeBackend, OnnxReferenceBackend, RecordedBackend):
        original = cls.__init__

        def noting(self: object, *args: object, wrapped: Callable[..., None] = original, **kwargs: object) -> None:
            wrapped(self, *args, **kwargs)
            opened.append(self)

        monkeypatch.setattr(cls, "__init__", noting)
    return opened
