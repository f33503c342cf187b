"""examples/make_model_files.py writes every format `compare` loads; each one compares cleanly."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import trtdiff

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = importlib.util.spec_from_file_location("make_model_files", ROOT / "examples" / "make_model_files.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    folder = tmp_path_factory.mktemp("model-files")
    module.main(folder)
    return folder


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("deeplab_torchscript.pt", {}),
        ("deeplab.pt2", {}),
        ("deeplab_state_dict.pt", {"model_class": "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"}),
        ("deeplab_pickled.pt", {"trust": True}),
    ],
)
@pytest.mark.slow
def test_every_format_pairs_every_float_tensor_and_agrees_at_opset13(
    model_files: Path, name: str, options: dict
) -> None:
    report = trtdiff.compare(model_files / name, input_shapes=["1x3x128x128"], opset=13, **options)
    assert report.passed and report.opset == 13
    assert report.pairing.paired_with_torch == report.pairing.float_tensors


@pytest.mark.slow
def test_exported_program_at_opset10_still_finds_a_resize(model_files: Path) -> None:
    report = trtdiff.compare(model_files / "deeplab.pt2", input_shapes=["1x3x128x128"], opset=10)
    resizes = [layer for layer in report.layers if layer.op_type == "Resize"]
    # ASPP pooling (from 1x1: agrees), the decoder's x4 (to 32x32: the first wrong one), the final x4.
    assert [layer.shape[-2:] for layer in resizes] == [(16, 16), (32, 32), (128, 128)]
    assert not resizes[0].diverged and resizes[1].diverged
    first = report.first_divergence
    assert first is not None and (first.onnx_node, first.op_type) == (resizes[1].onnx_node, "Resize")
