"""mIoU tools on hand-made masks whose IoU is known by counting."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trtdiff.analysis.segmentation import (
    SegmentationScore,
    agreement,
    argmax_masks,
    changed_mask,
    confusion_matrix,
    edge_mask,
    iou_per_class,
    mean_iou,
    score,
    share_at_edges,
)
from trtdiff.errors import InputError

# 2x4 masks: class 0 left, class 1 right; the prediction moves one pixel of row 0 to class 1.
TARGET = np.array([[0, 0, 1, 1], [0, 0, 1, 1]])
PRED = np.array([[0, 1, 1, 1], [0, 0, 1, 1]])


def test_confusion_rows_are_targets_columns_predictions() -> None:
    confusion = confusion_matrix(PRED, TARGET, 2)
    np.testing.assert_array_equal(confusion, [[3, 1], [0, 4]])
    assert confusion.dtype == np.int64


def test_iou_known_values() -> None:
    # class 0: TP 3, FN 1 -> 3/4; class 1: TP 4, FP 1 -> 4/5
    ious = iou_per_class(confusion_matrix(PRED, TARGET, 2))
    np.testing.assert_allclose(ious, [0.75, 0.8])
    assert mean_iou(PRED, TARGET, 2) == pytest.approx(0.775)
    result = score(PRED, TARGET, 2)
    assert result == SegmentationScore(
        miou=pytest.approx(0.775), per_class=(0.75, 0.8), pixel_accuracy=7 / 8, changed_pixels=None
    )


def test_absent_class_is_nan_and_left_out_of_the_mean() -> None:
    ious = iou_per_class(confusion_matrix(PRED, TARGET, 4))
    assert math.isnan(ious[2]) and math.isnan(ious[3])
    assert mean_iou(PRED, TARGET, 4) == pytest.approx(0.775)


def test_class_only_in_prediction_scores_zero() -> None:
    pred = np.array([[2, 0, 1, 1], [0, 0, 1, 1]])
    ious = iou_per_class(confusion_matrix(pred, TARGET, 3))
    np.testing.assert_allclose(ious, [0.75, 1.0, 0.0])


def test_ignore_index_drops_pixels_whatever_was_predicted() -> None:
    target = np.array([[0, 255, 1, 1], [0, 0, 1, 1]])
    confusion = confusion_matrix(PRED, target, 2, ignore_index=255)
    np.testing.assert_array_equal(confusion, [[3, 0], [0, 4]])
    assert mean_iou(PRED, target, 2, ignore_index=255) == 1.0


def test_perfect_and_empty() -> None:
    assert mean_iou(TARGET, TARGET, 2) == 1.0
    empty = SegmentationScore.from_confusion(np.zeros((3, 3), np.int64))
    assert math.isnan(empty.miou) and math.isnan(empty.pixel_accuracy)


def test_confusion_adds_up_over_batches() -> None:
    rng = np.random.default_rng(0)
    pred, target = rng.integers(0, 3, (4, 8, 8)), rng.integers(0, 3, (4, 8, 8))
    total = confusion_matrix(pred[:2], target[:2], 3) + confusion_matrix(pred[2:], target[2:], 3)
    np.testing.assert_array_equal(total, confusion_matrix(pred, target, 3))


@pytest.mark.parametrize(
    ("pred", "target", "num_classes", "ignore", "message"),
    [
        (np.zeros((2, 2), int), np.zeros((2, 3), int), 2, None, "differs from label shape"),
        (np.zeros((2, 2), int), np.full((2, 2), 5), 2, None, "label holds class 5.*ignore_index"),
        (np.full((2, 2), 3), np.zeros((2, 2), int), 2, None, "prediction holds class 3"),
        (np.zeros((2, 2), np.float32), np.zeros((2, 2), int), 2, None, "argmax"),
        (np.zeros((2, 2), int), np.zeros((2, 2), int), 0, None, "num_classes"),
    ],
)
def test_confusion_errors(
    pred: np.ndarray, target: np.ndarray, num_classes: int, ignore: int | None, message: str
) -> None:
    with pytest.raises(InputError, match=message) as info:
        confusion_matrix(pred, target, num_classes, ignore)
    assert "\n" not in str(info.value)


def _one_hot_logits(masks: np.ndarray, num_classes: int) -> np.ndarray:
    return np.eye(num_classes, dtype=np.float32)[masks].transpose(0, 3, 1, 2)


def test_agreement_counts_changed_pixels() -> None:
    reference = _one_hot_logits(TARGET[None], 3)
    candidate = _one_hot_logits(PRED[None], 3)
    result = agreement(reference, candidate)
    assert result.changed_pixels == pytest.approx(1 / 8)
    assert result.miou == pytest.approx(0.775)  # class 2 is absent from both: left out
    assert math.isnan(result.per_class[2])
    same = agreement(reference, reference + 0.1)
    assert same.changed_pixels == 0.0 and same.miou == 1.0
    np.testing.assert_array_equal(changed_mask(reference, candidate)[0], PRED != TARGET)


def test_agreement_errors() -> None:
    with pytest.raises(InputError, match="differ in shape"):
        agreement(np.zeros((1, 2, 4, 4)), np.zeros((1, 2, 4, 5)))
    with pytest.raises(InputError, match=r"\(N, C, H, W\)"):
        argmax_masks(np.zeros((2, 4, 4)))


def test_edge_mask_marks_both_sides_of_a_boundary() -> None:
    labels = np.zeros((6, 6), np.int64)
    labels[2:4, 2:4] = 1
    edges = edge_mask(labels)
    expected = np.zeros((6, 6), bool)
    expected[1:5, 1:5] = True  # the 2x2 square and the ring of 8-neighbours around it
    np.testing.assert_array_equal(edges, expected)
    wide = edge_mask(labels, width=2)
    assert wide.all()
    batch = edge_mask(np.stack([labels, np.zeros_like(labels)]))
    np.testing.assert_array_equal(batch[0], expected)
    assert not batch[1].any()


def test_share_at_edges() -> None:
    changed = np.array([[True, True, False, False]])
    edges = np.array([[True, False, False, True]])
    assert share_at_edges(changed, edges) == 0.5
    assert math.isnan(share_at_edges(np.zeros((1, 4), bool), edges))
    with pytest.raises(InputError, match="edge_mask width"):
        edge_mask(np.zeros((3, 3), int), width=0)


def test_scores_holding_nan_have_no_miou_and_fail_the_miou_checks() -> None:
    """argmax of NaN picks a class by accident: a backend whose scores hold NaN/Inf gets no mIoU, never 1.0."""
    from trtdiff.analysis.segmentation import SegmentationTally
    from trtdiff.gate.checks import miou_checks
    from trtdiff.options import GateOptions
    from trtdiff.report import BackendPair, SampleResult

    pair = BackendPair("torch", "onnxruntime")
    label = np.zeros((1, 4, 4), dtype=np.int64)
    scores = np.zeros((1, 2, 4, 4), dtype=np.float32)
    scores[:, 0] = 1.0
    nan = np.full_like(scores, np.nan)
    tally = SegmentationTally(2, ignore_index=None)
    agreement, changed, against = tally.add({"torch": nan, "onnxruntime": nan}, [pair], label)
    assert math.isnan(agreement[pair]) and math.isnan(changed[pair]) and math.isnan(against["onnxruntime"])
    summary = tally.summary("torch")
    assert math.isnan(summary.agreement_miou[pair]) and math.isnan(summary.label_miou["torch"])
    sample = SampleResult("s", {}, agreement_miou=agreement, label_miou=against)
    checks = miou_checks([sample], summary, GateOptions(min_miou=0.5), [pair], "torch")
    assert checks and not any(check.passed for check in checks)
    clean = SegmentationTally(2, ignore_index=None)
    clean.add({"torch": scores, "onnxruntime": scores}, [pair], label)
    assert clean.summary("torch").label_miou["onnxruntime"] == 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int64, np.uint8])
def test_argmax_masks_is_numpys_argmax_with_ties_nan_and_inf(dtype: type) -> None:
    rng = np.random.default_rng(0)
    logits = rng.integers(0, 4, (2, 6, 9, 11)).astype(dtype)  # many ties: the lower class wins
    expected = logits.argmax(axis=1)
    assert np.array_equal(argmax_masks(logits), expected)
    if np.dtype(dtype).kind == "f":
        logits[0, 3, 2, 2] = logits[1, 0, 0, 0] = logits[1, 5, 0, 0] = np.nan  # numpy: the first NaN
        logits[0, 1, 4, 4], logits[0, 0, 5, 5] = np.inf, -np.inf
        assert np.array_equal(argmax_masks(logits), logits.argmax(axis=1))
    assert argmax_masks(logits).dtype == np.int64


def test_the_argmax_of_large_logits_is_numpys_split_into_row_bands() -> None:
    """Over 4M elements the argmax runs in row bands on the comparing threads: ties to the lower class, the
    first NaN the maximum, as numpy's argmax says."""
    logits = np.random.default_rng(0).standard_normal((1, 5, 1100, 1000)).astype(np.float32)
    logits[0, 3, 700, 10] = logits[0, 1, 700, 10] = 9.0  # a tie in a later band
    assert np.array_equal(argmax_masks(logits), logits.argmax(axis=1))
    logits[0, 2, 1099, 999] = np.nan
    assert np.array_equal(argmax_masks(logits), logits.argmax(axis=1))
