"""The shapes data set, the shipped trained DeepLabV3+ and its mIoU through real ONNX exports.

The drop at opset 10 is the point of the example: its bilinear Resize has no coordinate
transformation mode, so ONNX Runtime samples like align_corners=False never does and the
masks move at object edges. Opset 13 writes half_pixel and matches PyTorch.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from trtdiff.analysis.segmentation import agreement, argmax_masks, changed_mask, edge_mask, score, share_at_edges
from trtdiff.errors import ModelLoadError
from trtdiff.examples import shapes


def test_generator_is_deterministic_and_prefix_stable() -> None:
    images, labels = shapes.make_shapes(6, seed=3)
    again, again_labels = shapes.make_shapes(6, seed=3)
    np.testing.assert_array_equal(images, again)
    np.testing.assert_array_equal(labels, again_labels)
    tail, tail_labels = shapes.make_shapes(2, seed=3, start=4)
    np.testing.assert_array_equal(images[4:], tail)
    np.testing.assert_array_equal(labels[4:], tail_labels)
    other, _ = shapes.make_shapes(6, seed=4)
    assert not np.array_equal(images, other)


def test_generator_output() -> None:
    images, labels = shapes.make_shapes(40, seed=0)
    assert images.shape == (40, 3, 64, 64) and images.dtype == np.float32
    assert labels.shape == (40, 64, 64) and labels.dtype == np.uint8
    assert images.min() >= 0.0 and images.max() <= 1.0
    np.testing.assert_array_equal(np.round(images * 255) / 255, images)  # exact through 8-bit PNG
    counts = shapes.class_counts(labels)
    assert (counts > 0).all() and counts[0] < 0.95 * labels.size  # every class, not just background
    background = images[0][:, labels[0] == 0]  # (3, pixels)
    assert background.std(axis=1).min() > 0.02  # textured and noisy, not flat


def test_eval_set_round_trips_through_png(tmp_path: Path) -> None:
    images, labels = shapes.make_shapes(3, seed=7)
    names = shapes.write_eval_set(tmp_path, images, labels)
    assert names == ["shapes_000", "shapes_001", "shapes_002"]
    assert sorted(p.name for p in (tmp_path / "labels").iterdir()) == [f"{n}.png" for n in names]
    read_names, read_images, read_labels = shapes.read_eval_set(tmp_path)
    assert read_names == names
    np.testing.assert_array_equal(read_images, images)
    np.testing.assert_array_equal(read_labels, labels)


def test_shipped_eval_set_is_the_generators_seed_1() -> None:
    """Guards the generator: a change to it would silently part the shipped files from the code."""
    names, images, labels = shapes.read_eval_set()
    expected_images, expected_labels = shapes.make_shapes(len(names), seed=1)
    np.testing.assert_array_equal(images, expected_images)
    np.testing.assert_array_equal(labels, expected_labels)


def test_missing_weights_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"train_shapes\.py"):
        shapes.deeplabv3plus_shapes(tmp_path / "none.pt")
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelLoadError, match=r"bad\.pt: cannot load") as info:
        shapes.deeplabv3plus_shapes(tmp_path / "bad.pt")
    assert "\n" not in str(info.value)


@pytest.fixture(scope="module")
def shipped() -> tuple[torch.nn.Module, np.ndarray, np.ndarray, np.ndarray]:
    """The shipped model, the shipped eval images and labels, and the model's PyTorch logits."""
    model = shapes.deeplabv3plus_shapes()
    _, images, labels = shapes.read_eval_set()
    return model, images, labels, shapes.predict(model, images)


def test_shipped_weights_load_as_float32_eval(
    shipped: tuple[torch.nn.Module, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    model, images, _, logits = shipped
    assert not model.training
    assert all(p.dtype == torch.float32 for p in model.state_dict().values() if p.is_floating_point())
    assert shapes.WEIGHTS_PATH.stat().st_size < 600 * 1024
    assert images.shape[0] >= 16 and logits.shape == (images.shape[0], shapes.NUM_CLASSES, 64, 64)


def test_pytorch_miou_on_shipped_eval_set(shipped: tuple[torch.nn.Module, np.ndarray, np.ndarray, np.ndarray]) -> None:
    _, _, labels, logits = shipped
    result = score(argmax_masks(logits), labels, shapes.NUM_CLASSES)
    assert result.miou > 0.95
    assert min(result.per_class) > 0.9


def _ort_logits(model: torch.nn.Module, images: np.ndarray, opset: int, folder: Path) -> np.ndarray:
    path = folder / f"shapes{opset}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.from_numpy(images),), str(path), opset_version=opset, input_names=["x"], dynamo=False
        )
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": images})[0]


@pytest.mark.slow
def test_opset10_resize_drops_miou_opset13_keeps_it(
    shipped: tuple[torch.nn.Module, np.ndarray, np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    model, images, labels, reference = shipped
    torch_miou = score(argmax_masks(reference), labels, shapes.NUM_CLASSES).miou
    opset13, opset10 = (_ort_logits(model, images, opset, tmp_path) for opset in (13, 10))

    miou13 = score(argmax_masks(opset13), labels, shapes.NUM_CLASSES).miou
    assert abs(miou13 - torch_miou) < 0.002
    assert agreement(reference, opset13).changed_pixels < 0.001

    miou10 = score(argmax_masks(opset10), labels, shapes.NUM_CLASSES).miou
    assert torch_miou - miou10 > 0.03
    moved = agreement(reference, opset10)
    assert moved.changed_pixels is not None and moved.changed_pixels > 0.01
    # The change sits at object edges: most changed pixels are within 2 pixels of a boundary.
    assert share_at_edges(changed_mask(reference, opset10), edge_mask(labels, width=2)) > 0.8
