"""Segmentation scores: confusion matrices, IoU per class, mIoU, and agreement between two outputs.

A CI gate on a segmentation model asks two questions: how good the candidate is against
the labels (mIoU), and how far its masks moved from the reference's (mIoU between the two
argmax masks and the share of pixels whose class changed). A change of upsampling mostly
moves object boundaries, so `edge_mask` tells how much of the change lies at edges.

Confusion matrices add up, so large sets can be scored in batches: sum the matrices of the
batches and score the sum with `SegmentationScore.from_confusion`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from trtdiff.errors import InputError
from trtdiff.report import BackendPair, SegmentationSummary


@dataclass(frozen=True)
class SegmentationScore:
    """mIoU, IoU per class (NaN for classes absent from both masks), pixel accuracy, changed share.

    `changed_pixels` is the share of pixels whose class differs from a reference prediction,
    or None when no reference was given (scores against labels).
    """

    miou: float
    per_class: tuple[float, ...]
    pixel_accuracy: float
    changed_pixels: float | None = None

    @classmethod
    def from_confusion(cls, confusion: np.ndarray, changed_pixels: float | None = None) -> SegmentationScore:
        """Score a (C, C) confusion matrix (rows: target, columns: prediction)."""
        confusion = _square(confusion)
        ious = iou_per_class(confusion)
        total = confusion.sum()
        accuracy = float(np.trace(confusion) / total) if total else float("nan")
        return cls(
            miou=_nanmean(ious),
            per_class=tuple(float(v) for v in ious),
            pixel_accuracy=accuracy,
            changed_pixels=changed_pixels,
        )


def confusion_matrix(
    pred: np.ndarray, target: np.ndarray, num_classes: int, ignore_index: int | None = None
) -> np.ndarray:
    """(C, C) int64 counts: entry [t, p] counts pixels of target class t predicted as p.

    Pixels whose target is `ignore_index` are left out. Any other value outside
    0..num_classes-1, in the target or the prediction, is an error rather than dropped:
    it means the labels and the model disagree on the classes.
    """
    pred, target = np.asarray(pred), np.asarray(target)
    if num_classes < 1:
        raise InputError(f"num_classes must be at least 1, got {num_classes}")
    if pred.shape != target.shape:
        raise InputError(
            f"prediction shape {pred.shape} differs from label shape {target.shape}; "
            "give masks of the same size (resize the labels or the images)"
        )
    for what, array in (("prediction", pred), ("label", target)):
        if array.dtype.kind not in "iub":
            raise InputError(
                f"{what} masks must hold integer class indices, not {array.dtype}; take the argmax of the logits first"
            )
    pred, target = np.asarray(pred.ravel(), np.int64), np.asarray(target.ravel(), np.int64)  # no copy of int64
    if ignore_index is not None:
        keep = target != ignore_index
        pred, target = pred[keep], target[keep]
    for what, array in (("label", target), ("prediction", pred)):
        low, high = _extremes(array)
        if low < 0 or high >= num_classes:
            value = low if low < 0 else high
            hint = "" if ignore_index is not None or what == "prediction" else " or set ignore_index for it"
            raise InputError(f"{what} holds class {value}, outside 0..{num_classes - 1}; check num_classes{hint}")
    bins = num_classes * num_classes
    counts = sum(_in_parts(lambda a, b: np.bincount(target[a:b] * num_classes + pred[a:b], minlength=bins), pred.size))
    return np.asarray(counts, dtype=np.int64).reshape(num_classes, num_classes)


_T = TypeVar("_T")


def _extremes(array: np.ndarray) -> tuple[int, int]:
    """The smallest and largest value of a non-empty int64 array, (0, 0) of an empty one."""
    if not array.size:
        return 0, 0
    parts = _in_parts(lambda a, b: (int(array[a:b].min()), int(array[a:b].max())), array.size)
    return min(low for low, _ in parts), max(high for _, high in parts)


def _in_parts(function: Callable[[int, int], _T], size: int) -> list[_T]:
    """metrics.in_parts from _PARALLEL_FROM elements a part (16.7 million pixels took 0.25 s on one thread)."""
    from trtdiff.analysis.metrics import in_parts

    return in_parts(function, size, _PARALLEL_FROM)


def iou_per_class(confusion: np.ndarray) -> np.ndarray:
    """IoU = TP / (TP + FP + FN) per class, float64; NaN where a class is absent from both masks."""
    confusion = _square(confusion).astype(np.float64)
    tp = np.diag(confusion)
    union = confusion.sum(axis=0) + confusion.sum(axis=1) - tp
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, tp / np.where(union > 0, union, 1.0), np.nan)


def mean_iou(pred: np.ndarray, target: np.ndarray, num_classes: int, ignore_index: int | None = None) -> float:
    """Mean IoU over the classes present in the prediction or the target (NaN if none is)."""
    return _nanmean(iou_per_class(confusion_matrix(pred, target, num_classes, ignore_index)))


def score(pred: np.ndarray, target: np.ndarray, num_classes: int, ignore_index: int | None = None) -> SegmentationScore:
    """mIoU, IoU per class and pixel accuracy of predicted masks against label masks."""
    return SegmentationScore.from_confusion(confusion_matrix(pred, target, num_classes, ignore_index))


def argmax_masks(logits: np.ndarray) -> np.ndarray:
    """Class index per pixel, int64, of (N, C, H, W) logits (ties go to the lower class)."""
    logits = np.asarray(logits)
    if logits.ndim != 4:
        raise InputError(
            f"segmentation logits must be (N, C, H, W), got shape {logits.shape}; "
            "the model's output is not a per-pixel class score"
        )
    if logits.shape[1] == 0 or logits.dtype.kind not in "fiu":
        masks: np.ndarray = logits.argmax(axis=1).astype(np.int64)
        return masks
    index = np.zeros((logits.shape[0], *logits.shape[2:]), np.int64)
    rows = logits.shape[2]
    from trtdiff.analysis.metrics import executor, threads

    bands = min(threads(), rows, max(1, logits.size // _PARALLEL_FROM))
    bounds = [rows * i // bands for i in range(bands + 1)]
    found_nan = list(executor().map(lambda i: _argmax_band(logits, index, bounds[i], bounds[i + 1]), range(bands)))
    if any(found_nan):  # numpy's rule: the first NaN is the maximum
        masks = logits.argmax(axis=1).astype(np.int64)
        return masks
    return index


_PARALLEL_FROM = 1 << 22  # logits elements from which the argmax is split into row bands, one per thread


def _all_finite(values: np.ndarray) -> bool:
    """Whether every value is finite, in parts on the comparing threads where there are many."""
    flat = np.asarray(values).reshape(-1)
    if flat.dtype.kind != "f":
        return True
    return all(_in_parts(lambda a, b: bool(np.isfinite(flat[a:b]).all()), flat.size))


def _argmax_band(logits: np.ndarray, index: np.ndarray, start: int, stop: int) -> bool:
    """The argmax over channels of rows [start, stop) into `index`, channel by channel, each pass over contiguous
    memory (numpy's argmax over axis 1 strides across channels, several times slower on large images); a strict
    `>` keeps the first maximum. Whether a NaN was met (then numpy's own argmax decides). Bands run on the
    comparing threads (numpy releases the GIL in these loops)."""
    part = logits[:, :, start:stop]
    best = part[:, 0].copy()
    out = index[:, start:stop]
    larger = np.empty(best.shape, bool)
    for channel in range(1, part.shape[1]):
        np.greater(part[:, channel], best, out=larger)
        np.maximum(best, part[:, channel], out=best)
        np.copyto(out, channel, where=larger)
    return bool(best.dtype.kind == "f" and np.isnan(best).any())


def agreement(reference_logits: np.ndarray, candidate_logits: np.ndarray) -> SegmentationScore:
    """How far the candidate's masks moved: mIoU of its argmax masks against the reference's.

    `changed_pixels` is the share of pixels whose class changed (1 - pixel accuracy).
    """
    ref, cand = np.asarray(reference_logits), np.asarray(candidate_logits)
    if ref.shape != cand.shape:
        raise InputError(
            f"reference logits {ref.shape} and candidate logits {cand.shape} differ in shape; "
            "compare outputs of the same model on the same inputs"
        )
    ref_masks, cand_masks = argmax_masks(ref), argmax_masks(cand)
    confusion = confusion_matrix(cand_masks, ref_masks, ref.shape[1])
    changed = float((ref_masks != cand_masks).mean()) if ref_masks.size else 0.0
    return SegmentationScore.from_confusion(confusion, changed_pixels=changed)


def changed_mask(reference_logits: np.ndarray, candidate_logits: np.ndarray) -> np.ndarray:
    """(N, H, W) bool: pixels whose argmax class differs between the two outputs."""
    changed: np.ndarray = argmax_masks(reference_logits) != argmax_masks(candidate_logits)
    return changed


def edge_mask(labels: np.ndarray, width: int = 1) -> np.ndarray:
    """Bool mask of pixels within `width` pixels (8-neighbourhood) of a pixel of another class.

    Works on one mask (H, W) or a batch (N, H, W); both sides of a boundary are marked.
    """
    labels = np.asarray(labels)
    if labels.ndim < 2:
        raise InputError(f"edge_mask needs masks of shape (H, W) or (N, H, W), got {labels.shape}")
    if width < 1:
        raise InputError(f"edge_mask width must be at least 1 pixel, got {width}")
    h, w = labels.shape[-2:]
    pad = [(0, 0)] * (labels.ndim - 2) + [(width, width), (width, width)]
    padded = np.pad(labels, pad, mode="edge")
    edges = np.zeros(labels.shape, dtype=bool)
    for dy in range(-width, width + 1):
        for dx in range(-width, width + 1):
            if dy or dx:
                shifted = padded[..., width + dy : width + dy + h, width + dx : width + dx + w]
                edges |= shifted != labels
    return edges


def share_at_edges(changed: np.ndarray, edges: np.ndarray) -> float:
    """Share of the changed pixels that lie on edges (NaN when nothing changed)."""
    changed, edges = np.asarray(changed, dtype=bool), np.asarray(edges, dtype=bool)
    if changed.shape != edges.shape:
        raise InputError(
            f"changed mask {changed.shape} and edge mask {edges.shape} differ in shape; build both from the same images"
        )
    total = int(changed.sum())
    return float((changed & edges).sum() / total) if total else float("nan")


def _square(confusion: np.ndarray) -> np.ndarray:
    confusion = np.asarray(confusion)
    if confusion.ndim != 2 or confusion.shape[0] != confusion.shape[1]:
        raise InputError(f"a confusion matrix must be square (C, C), got shape {confusion.shape}")
    return confusion


def _nanmean(values: np.ndarray) -> float:
    present = values[~np.isnan(values)]
    return float(present.mean()) if present.size else float("nan")


def segmentation_output(shape: Sequence[int]) -> bool:
    """Whether an output of this shape is per-pixel class scores (N, C, H, W) with C > 1."""
    return len(shape) == 4 and shape[1] > 1 and 0 not in shape  # an empty output has no pixels


class SegmentationTally:
    """Confusion matrices accumulated over samples: agreement per pair, against labels per backend."""

    def __init__(self, num_classes: int, ignore_index: int | None) -> None:
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        self.agreement: dict[BackendPair, np.ndarray] = {}
        self.labels: dict[str, np.ndarray] = {}
        self.changed: dict[BackendPair, list[int]] = {}
        self.non_finite: set[str] = set()  # backends whose scores held NaN/Inf: their argmax means nothing

    def add(
        self, logits: Mapping[str, np.ndarray], pairs: Sequence[BackendPair], label: np.ndarray | None
    ) -> tuple[dict[BackendPair, float], dict[BackendPair, float], dict[str, float]]:
        """Add one sample's logits per backend; returns its (agreement mIoU, changed share, label mIoU)."""
        masks = {backend: argmax_masks(value) for backend, value in logits.items()}
        broken = {backend for backend, value in logits.items() if not _all_finite(value)}
        self.non_finite |= broken
        agreement: dict[BackendPair, float] = {}
        changed: dict[BackendPair, float] = {}
        for pair in pairs:
            if pair.reference not in masks or pair.candidate not in masks:
                continue
            reference, candidate = masks[pair.reference], masks[pair.candidate]
            confusion = confusion_matrix(candidate, reference, self.num_classes)
            self.agreement[pair] = self.agreement.get(pair, 0) + confusion
            differ = int((candidate != reference).sum())
            total = self.changed.setdefault(pair, [0, 0])
            total[0] += differ
            total[1] += reference.size
            agreement[pair] = SegmentationScore.from_confusion(confusion).miou
            changed[pair] = differ / reference.size if reference.size else 0.0
            if {pair.reference, pair.candidate} & broken:
                agreement[pair] = changed[pair] = float("nan")
        against: dict[str, float] = {}
        if label is not None:
            for backend, mask in masks.items():
                confusion = confusion_matrix(mask, label, self.num_classes, self.ignore_index)
                self.labels[backend] = self.labels.get(backend, 0) + confusion
                against[backend] = (
                    SegmentationScore.from_confusion(confusion).miou if backend not in broken else math.nan
                )
        return agreement, changed, against

    def summary(self, reference: str) -> SegmentationSummary:
        agreement = {k: SegmentationScore.from_confusion(c) for k, c in self.agreement.items()}
        labels = {k: SegmentationScore.from_confusion(c) for k, c in self.labels.items()}
        # A backend whose scores held NaN/Inf on some sample has no mIoU: its masks there are argmax of NaN.
        label_miou = {k: math.nan if k in self.non_finite else s.miou for k, s in labels.items()}
        agreement_miou = {
            k: math.nan if {k.reference, k.candidate} & self.non_finite else s.miou for k, s in agreement.items()
        }
        drop = {b: label_miou[reference] - m for b, m in label_miou.items() if b != reference and reference in labels}
        return SegmentationSummary(
            num_classes=self.num_classes,
            ignore_index=self.ignore_index,
            agreement_miou=agreement_miou,
            agreement_per_class={k: s.per_class for k, s in agreement.items()},
            changed_pixels={k: (d / n if n else 0.0) for k, (d, n) in self.changed.items()},
            label_miou=label_miou,
            label_per_class={k: s.per_class for k, s in labels.items()},
            miou_drop=drop,
        )
