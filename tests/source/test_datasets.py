"""Inputs and labels from folders of real PNG, JPEG and .npy files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trtdiff.errors import InputError, OptionError
from trtdiff.options.parse import parse_channels
from trtdiff.source.datasets import iter_batches, iter_samples, list_inputs


def _png(path: Path, pixels: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.astype(np.uint8)).save(path)
    return path


def _rgb(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_png_scaled_and_normalised(tmp_path: Path) -> None:
    pixels = _rgb(5, 7)
    _png(tmp_path / "a.png", pixels)
    mean, std = parse_channels("0.485,0.456,0.406", "mean"), parse_channels("0.229, 0.224, 0.225", "std")
    [sample] = list(iter_samples(tmp_path, mean=mean, std=std))
    assert sample.name == "a" and sample.image.shape == (1, 3, 5, 7) and sample.image.dtype == np.float32
    expected = (pixels.transpose(2, 0, 1) / 255.0 - np.array(mean)[:, None, None]) / np.array(std)[:, None, None]
    np.testing.assert_allclose(sample.image[0], expected, atol=1e-6)
    [plain] = list(iter_samples(tmp_path))
    np.testing.assert_array_equal(plain.image[0], pixels.transpose(2, 0, 1).astype(np.float32) / 255.0)
    assert plain.image.min() >= 0.0 and plain.image.max() <= 1.0


def test_sorted_order_grey_rgba_and_jpeg(tmp_path: Path) -> None:
    _png(tmp_path / "c.png", np.full((4, 4, 4), 200))  # RGBA: alpha dropped
    _png(tmp_path / "b.png", np.full((4, 4), 51))  # grey: copied to three channels
    Image.fromarray(np.full((4, 4, 3), 128, np.uint8)).save(tmp_path / "a.jpg", quality=95)
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / ".hidden.png").write_bytes(b"")
    samples = list(iter_samples(tmp_path))
    assert [s.name for s in samples] == ["a", "b", "c"]
    np.testing.assert_allclose(samples[0].image, 128 / 255, atol=2 / 255)  # JPEG is lossy
    np.testing.assert_array_equal(samples[1].image, np.full((1, 3, 4, 4), 51 / 255, np.float32))
    np.testing.assert_array_equal(samples[2].image, np.full((1, 3, 4, 4), 200 / 255, np.float32))


def test_resize_bilinear_images_nearest_labels(tmp_path: Path) -> None:
    left_right = np.zeros((8, 8, 3), np.uint8)
    left_right[:, 4:] = 255
    _png(tmp_path / "img" / "x.png", left_right)
    mask = np.zeros((8, 8), np.uint8)
    mask[:, 4:] = 3
    _png(tmp_path / "lab" / "x.png", mask)
    [sample] = list(iter_samples(tmp_path / "img", labels=tmp_path / "lab", size=(4, 16)))
    assert sample.image.shape == (1, 3, 4, 16) and sample.label is not None and sample.label.shape == (1, 4, 16)
    row = sample.image[0, 0, 0]
    assert row[0] == 0.0 and row[-1] == 1.0 and 0.0 < row[8] < 1.0  # blended at the boundary: bilinear
    np.testing.assert_array_equal(sample.label[0, 0], [0] * 8 + [3] * 8)  # nearest: only classes that exist
    assert sample.label.dtype == np.int64


def test_labels_paired_by_stem_png_palette_and_npy(tmp_path: Path) -> None:
    for name in ("one", "two"):
        _png(tmp_path / "img" / f"{name}.png", _rgb(4, 6))
    palette = Image.fromarray(np.array([[0, 1, 2, 4, 4, 0]] * 4, np.uint8)).convert("P")
    palette.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9] + [0] * 753)
    (tmp_path / "lab").mkdir()
    palette.save(tmp_path / "lab" / "one.png")
    np.save(tmp_path / "lab" / "two.npy", np.full((4, 6), 2, np.int32))
    _png(tmp_path / "lab" / "extra.png", np.zeros((4, 6)))  # a label without an image is not an error
    samples = list(iter_samples(tmp_path / "img", labels=tmp_path / "lab", num_classes=5))
    assert samples[0].label is not None and samples[1].label is not None
    np.testing.assert_array_equal(samples[0].label[0, 0], [0, 1, 2, 4, 4, 0])
    np.testing.assert_array_equal(samples[1].label, np.full((1, 4, 6), 2))
    names, images, labels = next(iter_batches(iter(samples), 8))
    assert names == ["one", "two"] and images.shape == (2, 3, 4, 6) and labels is not None and labels.shape == (2, 4, 6)


def test_ignore_index_and_class_range(tmp_path: Path) -> None:
    _png(tmp_path / "img" / "a.png", _rgb(3, 3))
    _png(tmp_path / "lab" / "a.png", np.array([[0, 1, 255]] * 3))
    [sample] = list(iter_samples(tmp_path / "img", labels=tmp_path / "lab", num_classes=2, ignore_index=255))
    assert sample.label is not None and sample.label.max() == 255
    with pytest.raises(InputError, match=r"labels_dir .*a\.png: holds class 255, outside 0\.\.1.*ignore_index 255"):
        list(iter_samples(tmp_path / "img", labels=tmp_path / "lab", num_classes=2))


def test_npy_and_npz_are_fed_as_saved(tmp_path: Path) -> None:
    data = np.arange(24, dtype=np.float64).reshape(1, 2, 3, 4)
    np.save(tmp_path / "a.npy", data)
    np.savez(tmp_path / "b.npz", x=data.astype(np.float32))
    first, second = list(iter_samples(tmp_path))
    assert first.image.dtype == np.float64 and second.image.dtype == np.float32
    np.testing.assert_array_equal(first.image, data)
    with pytest.raises(OptionError, match="mean/std/size"):
        list(iter_samples(tmp_path, mean=(0.5, 0.5, 0.5)))
    np.savez(tmp_path / "c.npz", x=data, y=data)
    with pytest.raises(InputError, match="holds 2 arrays"):
        list(iter_samples(tmp_path))


def test_samples_are_read_lazily(tmp_path: Path) -> None:
    _png(tmp_path / "a.png", _rgb(2, 2))
    (tmp_path / "b.png").write_bytes(b"\x89PNG broken")
    samples = iter_samples(tmp_path)
    assert next(samples).name == "a"  # the broken file is not touched before it is reached
    with pytest.raises(InputError, match=r"inputs_dir .*b\.png: cannot read it as an image"):
        next(samples)


def _one_line(info: pytest.ExceptionInfo[BaseException]) -> str:
    assert "\n" not in str(info.value)
    return str(info.value)


def test_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such folder") as info:
        list_inputs(tmp_path / "missing")
    _one_line(info)
    (tmp_path / "readme.txt").write_text("x")
    with pytest.raises(InputError, match=r"inputs_dir .*: holds no \.png") as info:
        list(iter_samples(tmp_path))
    _one_line(info)
    _png(tmp_path / "a.png", _rgb(2, 2))
    Image.fromarray(_rgb(2, 2)).save(tmp_path / "a.jpg")
    with pytest.raises(InputError, match="share the stem 'a'"):
        list(iter_samples(tmp_path))


def test_mismatched_sizes_need_size(tmp_path: Path) -> None:
    _png(tmp_path / "a.png", _rgb(4, 4))
    _png(tmp_path / "b.png", _rgb(4, 5))
    with pytest.raises(InputError, match=r"b\.png: size 4x5 differs from 4x4 of a\.png; pass size HxW") as info:
        list(iter_samples(tmp_path))
    _one_line(info)
    assert [s.image.shape for s in iter_samples(tmp_path, size=(3, 3))] == [(1, 3, 3, 3)] * 2


def test_label_errors(tmp_path: Path) -> None:
    _png(tmp_path / "img" / "a.png", _rgb(4, 4))
    _png(tmp_path / "img" / "b.png", _rgb(4, 4))
    _png(tmp_path / "lab" / "a.png", np.zeros((4, 4)))
    with pytest.raises(InputError, match=r"labels_dir .*: no label for b\.png; add b\.png") as info:
        list(iter_samples(tmp_path / "img", labels=tmp_path / "lab"))
    _one_line(info)
    _png(tmp_path / "lab" / "b.png", np.zeros((4, 4, 3)))
    with pytest.raises(InputError, match=r"b\.png: the mask is RGB, not single-channel"):
        list(iter_samples(tmp_path / "img", labels=tmp_path / "lab"))
    _png(tmp_path / "lab" / "b.png", np.zeros((5, 4)))
    with pytest.raises(InputError, match=r"b\.png: mask size 5x4 differs from its image's 4x4; pass size HxW"):
        list(iter_samples(tmp_path / "img", labels=tmp_path / "lab"))
    with pytest.raises(InputError, match=r"labels_dir .*: no such folder"):
        list(iter_samples(tmp_path / "img", labels=tmp_path / "nowhere"))
