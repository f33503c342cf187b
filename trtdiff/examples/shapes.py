"""Synthetic shapes segmentation data and the DeepLabV3+ trained on it.

A labelled data set that needs no download: 64x64 RGB images holding a few sharp-edged
circles, squares, triangles and bars on a textured, noisy background, with the class of
every pixel. Sharp edges matter: a change of upsampling (Resize coordinate modes) moves
predictions by a pixel or so, which shows as a drop in mIoU mostly at object edges.

Images are quantised to multiples of 1/255, so writing them as PNG and reading them back
gives the same arrays. `deeplabv3plus_shapes()` returns the model that
examples/train_shapes.py trained on this data, from the weights shipped in data/.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from trtdiff.errors import InputError, ModelLoadError
from trtdiff.examples.deeplabv3plus import DeepLabV3Plus, ResNetBackbone

CLASS_NAMES: tuple[str, ...] = ("background", "circle", "square", "triangle", "bar")
NUM_CLASSES = len(CLASS_NAMES)
IMAGE_SIZE = 64
BACKBONE_WIDTH = 8
ASPP_CHANNELS = 32

DATA_DIR = Path(__file__).resolve().parent / "data"
WEIGHTS_PATH = DATA_DIR / "deeplab_shapes.pt"
EVAL_DIR = DATA_DIR / "shapes_eval"

# Palette of the label PNGs: the pixel values are the class indices, the colours are for people.
_PALETTE: tuple[tuple[int, int, int], ...] = ((0, 0, 0), (230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200))
_MIN_CONTRAST = 0.35  # least mean |colour difference| between a shape and the background
_GAP = 2  # pixels of background kept between shapes and between a shape and the border
_BACKGROUND_TEXTURE = 0.25  # amplitude of the background's gradient and waves
_SHAPE_TEXTURE = 0.12


def make_shapes(n: int, *, seed: int = 0, size: int = IMAGE_SIZE, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`n` images (n, 3, size, size) float32 in [0, 1] and their masks (n, size, size) uint8.

    Image i depends only on (seed, start + i), so a longer set begins with a shorter one and
    sets with different seeds do not overlap.
    """
    if n < 0 or size < 16:
        raise InputError(f"make_shapes: n must be >= 0 and size >= 16, got n={n}, size={size}; ask for a valid set")
    images = np.empty((n, 3, size, size), dtype=np.float32)
    labels = np.empty((n, size, size), dtype=np.uint8)
    for i in range(n):
        rng = np.random.default_rng([seed, start + i])
        images[i], labels[i] = _draw_image(rng, size)
    return images, labels


def _draw_image(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """One image and mask: textured background, one to four separate whole shapes, then noise.

    Shapes neither touch each other nor the border: a merged or cut silhouette would be
    ambiguous, and the model's errors should come from the model, not from the labels.
    """
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    base = rng.uniform(0.0, 1.0, 3)
    image = _texture(rng, base, xx, yy, size, strength=_BACKGROUND_TEXTURE)
    label = np.zeros((size, size), dtype=np.uint8)
    blocked = np.ones((size, size), dtype=bool)  # where no shape may go: the border ring, then shapes and their margins
    blocked[_GAP:-_GAP, _GAP:-_GAP] = False
    for _ in range(int(rng.integers(2, 5))):
        cls = int(rng.integers(1, NUM_CLASSES))
        for _attempt in range(30):
            mask = _shape_mask(rng, cls, xx, yy, size)
            if mask.sum() >= 12 and not (mask & blocked).any():
                break
        else:
            continue
        blocked |= _dilate(mask, _GAP)
        colour = _contrasting_colour(rng, base)
        image[:, mask] = _texture(rng, colour, xx, yy, size, strength=_SHAPE_TEXTURE)[:, mask]
        label[mask] = cls
    image += rng.normal(0.0, rng.uniform(0.02, 0.07), image.shape)
    image = np.round(np.clip(image, 0.0, 1.0) * 255.0) / 255.0
    return image.astype(np.float32), label


def _dilate(mask: np.ndarray, width: int) -> np.ndarray:
    """`mask` grown by `width` pixels in the 8-neighbourhood."""
    padded = np.pad(mask, width)
    h, w = mask.shape
    grown = np.zeros_like(mask)
    for dy in range(2 * width + 1):
        for dx in range(2 * width + 1):
            grown |= padded[dy : dy + h, dx : dx + w]
    return grown


def _texture(
    rng: np.random.Generator, colour: np.ndarray, xx: np.ndarray, yy: np.ndarray, size: int, strength: float
) -> np.ndarray:
    """A colour field (3, size, size): the colour plus a linear gradient and two soft waves."""
    angle = rng.uniform(0.0, 2 * np.pi)
    ramp = (np.cos(angle) * xx + np.sin(angle) * yy) / size - 0.5
    field = ramp * rng.uniform(-1.0, 1.0)
    for _ in range(2):
        kx, ky = rng.uniform(-0.4, 0.4, 2)
        field = field + 0.5 * np.sin(kx * xx + ky * yy + rng.uniform(0.0, 2 * np.pi))
    tint = rng.uniform(0.5, 1.0, 3)  # the texture is not grey: channels move by different amounts
    image: np.ndarray = colour[:, None, None] + strength * tint[:, None, None] * field[None]
    return image


def _contrasting_colour(rng: np.random.Generator, background: np.ndarray) -> np.ndarray:
    """A random colour that differs from the background enough to be seen through the noise."""
    colour = rng.uniform(0.0, 1.0, 3)
    for _ in range(20):
        if np.abs(colour - background).mean() >= _MIN_CONTRAST:
            break
        colour = rng.uniform(0.0, 1.0, 3)
    else:
        colour = np.where(background > 0.5, background - 0.6, background + 0.6).clip(0.0, 1.0)
    return colour


def _shape_mask(rng: np.random.Generator, cls: int, xx: np.ndarray, yy: np.ndarray, size: int) -> np.ndarray:
    """Boolean mask of one random shape of class `cls` (1 circle, 2 square, 3 triangle, 4 bar).

    The centre is drawn where the shape's bounding circle keeps clear of the border.
    """
    s = size / 64.0  # the sizes below are for 64x64 images
    if cls == 1:
        a = rng.uniform(10.0, 20.0) * s  # radius
        b, extent = a, a
    elif cls == 2:
        a = rng.uniform(9.0, 17.0) * s  # half the side
        b, extent = a, a * np.sqrt(2.0)
    elif cls == 3:
        a = rng.uniform(14.0, 26.0) * s  # circumradius; the sides lie at a / 2 from the centre
        b, extent = a, a
    elif cls == 4:
        a, b = rng.uniform(18.0, 30.0) * s, rng.uniform(3.5, 6.0) * s  # half length, half width
        extent = float(np.hypot(a, b))
    else:
        raise InputError(f"no shape for class {cls}; classes 1..{NUM_CLASSES - 1} are shapes")
    low, high = extent + _GAP, size - 1 - extent - _GAP
    cx, cy = rng.uniform(low, high, 2) if high > low else np.full(2, (size - 1) / 2)
    angle = rng.uniform(0.0, np.pi)
    u = np.cos(angle) * (xx - cx) + np.sin(angle) * (yy - cy)  # coordinates along the shape's axes
    v = -np.sin(angle) * (xx - cx) + np.cos(angle) * (yy - cy)
    if cls == 1:
        inside: np.ndarray = u * u + v * v <= a * a
        return inside
    if cls == 3:
        inside = np.ones_like(u, dtype=bool)  # inside the three half-planes at a / 2 from the centre
        for k in range(3):
            t = angle + k * 2 * np.pi / 3
            inside &= np.cos(t) * (xx - cx) + np.sin(t) * (yy - cy) <= a / 2
        return inside
    box: np.ndarray = (np.abs(u) <= a) & (np.abs(v) <= b)
    return box


def write_eval_set(folder: str | Path, images: np.ndarray, labels: np.ndarray, prefix: str = "shapes") -> list[str]:
    """Write images to FOLDER/images/NAME.png (RGB) and masks to FOLDER/labels/NAME.png.

    Masks are palette PNGs whose pixel values are the class indices (as in Pascal VOC), so
    any reader gets the indices while image viewers show colours. Returns the names.
    """
    from PIL import Image

    images, labels = np.asarray(images), np.asarray(labels)
    if images.ndim != 4 or images.shape[1] != 3 or labels.shape != (images.shape[0], *images.shape[2:]):
        raise InputError(
            f"write_eval_set: images must be (N,3,H,W) and labels (N,H,W), got {images.shape} and {labels.shape}"
        )
    if labels.size and (labels.min() < 0 or labels.max() > 255):
        raise InputError("write_eval_set: label values must lie in 0..255 to fit an 8-bit PNG; remap the classes")
    root = Path(folder)
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "labels").mkdir(parents=True, exist_ok=True)
    palette = [c for rgb in _PALETTE for c in rgb]
    names = [f"{prefix}_{i:03d}" for i in range(len(images))]
    for name, image, label in zip(names, images, labels, strict=True):
        pixels = np.round(np.clip(image, 0.0, 1.0) * 255.0).astype(np.uint8).transpose(1, 2, 0)
        Image.fromarray(np.ascontiguousarray(pixels)).save(root / "images" / f"{name}.png", optimize=True)
        mask = Image.fromarray(label.astype(np.uint8)).convert("P")
        mask.putpalette(palette)
        mask.save(root / "labels" / f"{name}.png", optimize=True)
    return names


def read_eval_set(folder: str | Path = EVAL_DIR) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(names, images (N,3,H,W) float32 in [0,1], labels (N,H,W) int64) from write_eval_set's layout."""
    from trtdiff.source.datasets import iter_samples

    samples = list(iter_samples(Path(folder) / "images", labels=Path(folder) / "labels"))
    names = [s.name for s in samples]
    images = np.concatenate([s.image for s in samples])
    labels = np.concatenate([s.label for s in samples if s.label is not None])
    return names, images, labels


def build_shapes_model(seed: int = 0) -> DeepLabV3Plus:
    """The untrained architecture of the shapes model (what train_shapes.py starts from)."""
    torch.manual_seed(seed)
    return DeepLabV3Plus(ResNetBackbone(width=BACKBONE_WIDTH), num_classes=NUM_CLASSES, aspp_channels=ASPP_CHANNELS)


def save_weights(model: torch.nn.Module, path: str | Path = WEIGHTS_PATH) -> None:
    """Save the state dict with float tensors as float16: a quarter of the file, same predictions."""
    state = {k: (v.half() if v.is_floating_point() else v) for k, v in model.state_dict().items()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)


def deeplabv3plus_shapes(weights: str | Path | None = None) -> DeepLabV3Plus:
    """The DeepLabV3+ trained on the shapes data, in eval mode, float32 (from the shipped weights)."""
    path = Path(weights) if weights is not None else WEIGHTS_PATH
    if not path.is_file():
        raise ModelLoadError(f"{path}: shapes weights not found; run examples/train_shapes.py to make them")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        model = build_shapes_model()
        model.load_state_dict({k: (v.float() if v.is_floating_point() else v) for k, v in state.items()})
    except Exception as e:  # noqa: BLE001 -- a corrupt file, or weights of another architecture
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise ModelLoadError(
            f"{path}: cannot load the shapes weights ({type(e).__name__}: {first}); run examples/train_shapes.py again"
        ) from None
    return model.eval()


def predict(model: torch.nn.Module, images: np.ndarray, batch_size: int = 64) -> np.ndarray:
    """Logits (N, C, H, W) float32 of `model` on `images`, in batches, without gradients."""
    outputs: list[np.ndarray] = []
    with torch.no_grad():
        for i in range(0, len(images), batch_size):
            outputs.append(model(torch.from_numpy(np.ascontiguousarray(images[i : i + batch_size]))).numpy())
    return np.concatenate(outputs) if outputs else np.zeros((0, NUM_CLASSES, *np.shape(images)[2:]), np.float32)


def class_counts(labels: Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
    """Pixels per class over the masks: a quick check that every class is present."""
    return np.bincount(np.asarray(labels).ravel(), minlength=NUM_CLASSES)
