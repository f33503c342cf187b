"""Model inputs and label masks from folders, one sample at a time.

A folder holds PNG/JPEG images, read as RGB, scaled to [0, 1], optionally resized
(bilinear, as torchvision's Resize does on PIL images) and normalised with `mean`/`std`;
or .npy/.npz files holding ready input tensors, fed as they are. Files are taken in
sorted order and read lazily, so a large folder is never held in memory at once.
Label masks (single-channel PNGs holding the class index per pixel, or .npy arrays) are
paired with the inputs by file stem.

Functions that read a folder take `option`, the name of the parameter the folder was given
as (`inputs_dir`, `labels_dir`), so that their errors name it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.errors import InputError, OptionError, describe_error, param
from trtdiff.source.inputs import refuse_non_finite

if TYPE_CHECKING:
    from PIL.Image import Image as PilImage

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
ARRAY_SUFFIXES = (".npy", ".npz")
LABEL_SUFFIXES = (".png", ".npy")
_MEAN_EXAMPLE = f"e.g. {param('mean')} 0.485,0.456,0.406 {param('std')} 0.229,0.224,0.225"


@dataclass(frozen=True)
class Sample:
    """One input of the data set: its file stem, the (1, 3, H, W) array and its mask if labelled.

    `image` is float32 for image files; arrays from .npy/.npz files keep their shape and
    dtype. `label` is (1, H, W) int64, or None without a labels folder.
    """

    name: str
    image: np.ndarray
    label: np.ndarray | None = None
    path: Path | None = None


def list_inputs(folder: str | Path, option: str = "inputs_dir") -> list[Path]:
    """The image or array files of `folder`, sorted by name; other and hidden files are skipped."""
    root = Path(folder)
    if not root.is_dir():
        what = "no such folder" if not root.exists() else "is a file, not a folder"
        raise InputError(f"{what}; give a folder of images or .npy/.npz files", parameter=option, value=root)
    suffixes = IMAGE_SUFFIXES + ARRAY_SUFFIXES
    files = sorted(
        p for p in root.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in suffixes
    )
    if not files:
        raise InputError(
            f"holds no {', '.join(suffixes)} files; put the inputs there or give another folder",
            parameter=option,
            value=root,
        )
    seen: dict[str, Path] = {}
    for path in files:
        if path.stem in seen:
            raise InputError(
                f"{seen[path.stem].name} and {path.name} share the stem {path.stem!r}, so labels cannot be paired; "
                "keep one",
                parameter=option,
                value=root,
            )
        seen[path.stem] = path
    return files


def iter_samples(
    folder: str | Path,
    *,
    labels: str | Path | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    size: tuple[int, int] | None = None,
    num_classes: int | None = None,
    ignore_index: int | None = None,
    option: str = "inputs_dir",
    labels_option: str = "labels_dir",
) -> Iterator[Sample]:
    """Yield the samples of `folder` in sorted file order, reading each file when it is reached.

    Without `size`, every image must have the size of the first; with it, images are
    resized bilinearly and masks by nearest neighbour. With `num_classes`, label values
    outside 0..num_classes-1 (other than `ignore_index`) are errors naming the file.
    `option` and `labels_option` name the parameters the two folders were given as.
    """
    files = list_inputs(folder, option)
    label_files = _label_index(labels, labels_option) if labels is not None else None
    if label_files is not None:
        _check_labelled(files, label_files, labels, labels_option)
    mean_array = _channels(mean, "mean")
    std_array = _channels(std, "std")
    first_size: tuple[tuple[int, int], str] | None = None
    for path in files:
        if path.suffix.lower() in ARRAY_SUFFIXES:
            if mean is not None or std is not None or size is not None:
                raise OptionError(
                    f".npy/.npz files hold ready input tensors, which {param('mean')}/{param('std')}/{param('size')} "
                    "do not change; drop those options or give images",
                    parameter=option,
                    value=path,
                )
            image = _read_array(path, option)
            refuse_non_finite(image, None, parameter=option, value=path)
        else:
            image = _normalised(_read_image(path, size, option), mean_array, std_array)
        hw = (int(image.shape[-2]), int(image.shape[-1])) if image.ndim >= 2 else (0, 0)
        if first_size is None:
            first_size = (hw, path.name)
        elif size is None and hw != first_size[0]:
            (h0, w0), first = first_size
            raise InputError(
                f"size {hw[0]}x{hw[1]} differs from {h0}x{w0} of {first}; "
                f"pass {param('size')} HxW to resize all images",
                parameter=option,
                value=path,
            )
        label = None
        if label_files is not None:
            mask_path = label_files[path.stem]
            label = _read_label(mask_path, hw, size is not None, num_classes, ignore_index, labels_option)
        yield Sample(name=path.stem, image=image, label=label, path=path)


def _check_labelled(files: list[Path], label_files: dict[str, Path], labels: str | Path | None, option: str) -> None:
    """Every input needs a label of the same stem (labels without an input are fine)."""
    missing = [p.name for p in files if p.stem not in label_files]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise InputError(
            f"no label for {missing[0]}{more}; add {Path(missing[0]).stem}.png there or remove the image",
            parameter=option,
            value=labels,
        )


def _normalised(image: np.ndarray, mean: np.ndarray | None, std: np.ndarray | None) -> np.ndarray:
    """(image - mean) / std where given, as float32."""
    if mean is not None:
        image = image - mean
    if std is not None:
        image = image / std
    return image.astype(np.float32, copy=False)


def iter_batches(
    samples: Iterator[Sample] | Sequence[Sample], batch_size: int
) -> Iterator[tuple[list[str], np.ndarray, np.ndarray | None]]:
    """Group samples into (names, images (B, ...), labels (B, H, W) or None) of at most `batch_size`."""
    if batch_size < 1:
        raise OptionError(f"batch_size {batch_size}: must be at least 1")
    chunk: list[Sample] = []
    for sample in samples:
        chunk.append(sample)
        if len(chunk) == batch_size:
            yield _stack(chunk)
            chunk = []
    if chunk:
        yield _stack(chunk)


def _stack(chunk: list[Sample]) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    images = np.concatenate([s.image for s in chunk])
    labels = np.concatenate([s.label for s in chunk]) if all(s.label is not None for s in chunk) else None
    return [s.name for s in chunk], images, labels


def _channels(values: Sequence[float] | None, option: str) -> np.ndarray | None:
    """(1, 3, 1, 1) float32 array of per-channel values, or None."""
    if values is None:
        return None
    array = np.asarray(values, dtype=np.float32).ravel()
    if array.size == 1:
        array = np.repeat(array, 3)
    if array.size != 3:
        raise OptionError(f"{array.size} values for 3 RGB channels; {_MEAN_EXAMPLE}", parameter=option)
    if option == "std" and (array <= 0).any():
        raise OptionError(f"every std must be positive (it divides); {_MEAN_EXAMPLE}", parameter=option)
    return array.reshape(1, 3, 1, 1)


def _read_image(path: Path, size: tuple[int, int] | None, option: str) -> np.ndarray:
    """(1, 3, H, W) float32 in [0, 1] from a PNG/JPEG (grey and RGBA become RGB; alpha is dropped)."""
    image = _open(path, option, "an image")
    try:
        with image:
            rgb = image.convert("RGB")
            if size is not None and rgb.size != (size[1], size[0]):
                from PIL import Image

                rgb = rgb.resize((size[1], size[0]), Image.Resampling.BILINEAR)
            pixels = np.asarray(rgb, dtype=np.uint8)
    except OSError as e:  # truncated data surfaces only when the pixels are decoded
        raise InputError(
            f"cannot decode the image ({describe_error(e)}); check or re-save the file", parameter=option, value=path
        ) from None
    return (pixels.astype(np.float32) / 255.0).transpose(2, 0, 1)[None]


def _read_array(path: Path, option: str) -> np.ndarray:
    """The one array a .npy file, or a one-array .npz archive, holds, exactly as saved."""
    try:
        if path.suffix.lower() == ".npy":
            array: np.ndarray = np.load(path, allow_pickle=False)
            return array
        with np.load(path, allow_pickle=False) as archive:
            arrays = [archive[k] for k in archive.files]
    except Exception as e:  # noqa: BLE001 -- numpy raises ValueError, OSError, EOFError, zip errors, ...
        raise InputError(
            f"cannot read it as a numpy array ({describe_error(e)}); save it again with np.save",
            parameter=option,
            value=path,
        ) from None
    if len(arrays) != 1:
        raise InputError(
            f"the .npz archive holds {len(arrays)} arrays, not one input; save one array per file",
            parameter=option,
            value=path,
        )
    return np.asarray(arrays[0])


def _label_index(folder: str | Path, option: str) -> dict[str, Path]:
    """Stem -> label file of the labels folder."""
    root = Path(folder)
    if not root.is_dir():
        what = "no such folder" if not root.exists() else "is a file, not a folder"
        raise InputError(
            f"{what}; give the folder of label masks (one PNG per image, same stem)", parameter=option, value=root
        )
    index: dict[str, Path] = {}
    for path in sorted(root.iterdir()):
        if path.is_file() and not path.name.startswith(".") and path.suffix.lower() in LABEL_SUFFIXES:
            if path.stem in index:
                raise InputError(
                    f"{index[path.stem].name} and {path.name} share the stem {path.stem!r}; keep one label per image",
                    parameter=option,
                    value=root,
                )
            index[path.stem] = path
    return index


def _read_label(
    path: Path, hw: tuple[int, int], resize: bool, num_classes: int | None, ignore_index: int | None, option: str
) -> np.ndarray:
    """(1, H, W) int64 class indices, resized by nearest neighbour when `resize`, checked against the image."""
    mask = _read_npy_mask(path, option) if path.suffix.lower() == ".npy" else _read_png_mask(path, hw, resize, option)
    if resize and mask.shape != hw:
        mask = _resize_nearest(mask, hw)
    if mask.shape != hw:
        raise InputError(
            f"mask size {mask.shape[0]}x{mask.shape[1]} differs from its image's {hw[0]}x{hw[1]}; "
            f"pass {param('size')} HxW or fix the mask",
            parameter=option,
            value=path,
        )
    mask = mask.astype(np.int64)
    if num_classes is not None:
        bad = (mask < 0) | (mask >= num_classes)
        if ignore_index is not None:
            bad &= mask != ignore_index
        if bad.any():
            value = int(mask[bad][0])
            hint = f" or {param('ignore_index')} {value}" if ignore_index is None else ""
            raise InputError(
                f"holds class {value}, outside 0..{num_classes - 1}; check num_classes{hint}",
                parameter=option,
                value=path,
            )
    return mask[None]


def _read_npy_mask(path: Path, option: str) -> np.ndarray:
    """An (H, W) integer mask from a .npy file ((1, H, W) is accepted)."""
    try:
        mask = np.load(path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 -- as for input arrays
        raise InputError(
            f"cannot read the label array ({describe_error(e)}); save it again with np.save",
            parameter=option,
            value=path,
        ) from None
    mask = mask[0] if mask.ndim == 3 and mask.shape[0] == 1 else mask
    if mask.ndim != 2 or mask.dtype.kind not in "iu":
        raise InputError(
            f"a label array must be (H, W) integers, got {mask.shape} {mask.dtype}; save the class index per pixel",
            parameter=option,
            value=path,
        )
    return np.asarray(mask)


def _read_png_mask(path: Path, hw: tuple[int, int], resize: bool, option: str) -> np.ndarray:
    """A single-channel mask image, resized by nearest neighbour to `hw` when `resize`."""
    image = _open(path, option, "a label mask")
    try:
        with image:
            if image.mode not in ("L", "P", "I", "I;16", "1"):
                raise InputError(
                    f"the mask is {image.mode}, not single-channel; "
                    "save the class index per pixel as a grey or palette PNG",
                    parameter=option,
                    value=path,
                )
            if resize and image.size != (hw[1], hw[0]):
                from PIL import Image

                image = image.resize((hw[1], hw[0]), Image.Resampling.NEAREST)
            return np.asarray(image)
    except OSError as e:
        raise InputError(
            f"cannot decode the mask ({describe_error(e)}); check or re-save the file", parameter=option, value=path
        ) from None


def _resize_nearest(mask: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize by pixel centres (what PIL's NEAREST does)."""
    rows = np.minimum(((np.arange(hw[0]) + 0.5) * mask.shape[0] / hw[0]).astype(np.int64), mask.shape[0] - 1)
    cols = np.minimum(((np.arange(hw[1]) + 0.5) * mask.shape[1] / hw[1]).astype(np.int64), mask.shape[1] - 1)
    resized: np.ndarray = mask[rows[:, None], cols[None, :]]
    return resized


def _open(path: Path, option: str, what: str) -> PilImage:
    """Open with Pillow, turning a missing Pillow or an unreadable file into one InputError line."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise InputError("reading images needs Pillow; pip install pillow", parameter=option, value=path) from None
    try:
        return Image.open(path)
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise InputError(
            f"cannot read it as {what} ({describe_error(e)}); check or re-save the file", parameter=option, value=path
        ) from None
