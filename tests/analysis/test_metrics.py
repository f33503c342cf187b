"""Metrics and the default divergence rule, on hand-made arrays with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trtdiff.analysis.metrics import compare_tensors
from trtdiff.report import Thresholds

DEFAULT = Thresholds()


def test_identical_tensors_agree_exactly() -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    m = compare_tensors(x, x.copy(), DEFAULT)
    assert m.cosine == pytest.approx(1.0)
    assert m.max_abs == 0.0 and m.mean_abs == 0.0 and m.rel_err == 0.0
    assert not m.diverged and m.reasons == ()


def test_fp32_rounding_noise_does_not_diverge() -> None:
    x = np.random.default_rng(1).standard_normal(10_000).astype(np.float32)
    noisy = x + np.float32(1e-7) * np.sign(x)
    assert not compare_tensors(x, noisy, DEFAULT).diverged


def test_pure_scale_error_is_caught_although_cosine_is_one() -> None:
    x = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    m = compare_tensors(x, x * 1.03, DEFAULT)
    assert m.cosine == pytest.approx(1.0, abs=1e-9)
    assert m.diverged
    assert m.rel_err == pytest.approx(0.03, rel=1e-3)
    assert [r.metric for r in m.reasons] == ["rel_err"]


def test_direction_change_is_caught_by_cosine() -> None:
    x = np.array([1.0, 0.0], dtype=np.float32)
    y = np.array([1.0, 0.1], dtype=np.float32)
    m = compare_tensors(x, y, Thresholds(min_cosine=0.999, rtol=1.0))
    assert m.cosine == pytest.approx(1 / math.sqrt(1.01))
    assert m.diverged and m.reasons[0].metric == "cosine" and m.reasons[0].limit == pytest.approx(0.999)


def test_thresholds_are_strict_inequalities_at_the_boundary() -> None:
    x = np.array([1.0, 2.0, 4.0])
    y = x + np.array([0.0, 0.0, 0.004])  # rel-err exactly 1e-3
    assert not compare_tensors(x, y, Thresholds(min_cosine=0.0, rtol=1e-3)).diverged
    assert compare_tensors(x, y, Thresholds(min_cosine=0.0, rtol=0.99e-3)).diverged
    assert compare_tensors(x, y, Thresholds(min_cosine=0.0, rtol=1.0, max_abs=0.003)).diverged
    assert not compare_tensors(x, y, Thresholds(min_cosine=0.0, rtol=1.0, max_abs=0.004)).diverged


def test_nan_and_inf_are_counted_and_diverge() -> None:
    x = np.ones(4, dtype=np.float32)
    y = np.array([1.0, np.nan, np.inf, 1.0], dtype=np.float32)
    m = compare_tensors(x, y, DEFAULT)
    assert (m.nan_ref, m.nan_cand, m.inf_ref, m.inf_cand) == (0, 1, 0, 1)
    assert m.diverged and m.reasons[-1].metric == "non_finite"


def test_zero_tensors() -> None:
    zeros = np.zeros(3, dtype=np.float32)
    assert not compare_tensors(zeros, zeros, DEFAULT).diverged
    m = compare_tensors(zeros, np.array([0, 0, 1e-3], dtype=np.float32), DEFAULT)
    assert m.diverged and math.isinf(m.rel_err)


def test_integer_and_bool_tensors_compare_exactly() -> None:
    a = np.array([1, 2, 3, 4], dtype=np.int64)
    assert not compare_tensors(a, a.copy(), DEFAULT).diverged
    m = compare_tensors(a, np.array([1, 2, 3, 5], dtype=np.int64), DEFAULT)
    assert m.diverged and m.mismatches == 1 and m.max_abs == 1.0
    b = np.array([True, False])
    assert compare_tensors(b, ~b, DEFAULT).mismatches == 2


def test_shape_mismatch_is_a_divergence_with_both_shapes() -> None:
    m = compare_tensors(np.zeros((1, 2, 4)), np.zeros((1, 2, 5)), DEFAULT)
    assert m.diverged and m.shape_mismatch == "1x2x4 vs 1x2x5"


def test_a_view_of_the_same_values_agrees_and_a_transpose_is_a_shape_mismatch() -> None:
    x = np.random.default_rng(3).standard_normal((6, 4, 5)).astype(np.float32)
    assert not compare_tensors(x, x.reshape(2, 3, 4, 5), DEFAULT).diverged
    swapped = compare_tensors(x.reshape(6, 20), np.ascontiguousarray(x.reshape(6, 20).T), DEFAULT)
    assert swapped.diverged and swapped.shape_mismatch == "6x20 vs 20x6"


def test_nan_and_inf_at_the_same_positions_agree() -> None:
    scores = np.random.default_rng(4).standard_normal((4, 4)).astype(np.float32)
    masked = scores + np.triu(np.full((4, 4), -np.inf, dtype=np.float32), 1)  # a causal attention mask
    m = compare_tensors(masked, masked + np.float32(1e-8), DEFAULT)
    assert (m.inf_ref, m.inf_cand, m.non_finite_mismatches) == (6, 6, 0)
    assert not m.diverged and m.cosine == pytest.approx(1.0)
    nan = np.full(8, np.nan, dtype=np.float32)
    all_nan = compare_tensors(nan, nan.copy(), DEFAULT)
    assert (all_nan.nan_ref, all_nan.nan_cand, all_nan.non_finite_mismatches) == (8, 8, 0)
    assert not all_nan.diverged  # agreeing; whether outputs may be NaN is the gate's question


def test_nan_and_inf_at_different_positions_diverge_though_the_counts_agree() -> None:
    x = np.array([np.nan, 1.0, 2.0, np.inf, 3.0])
    y = np.array([1.0, np.nan, 2.0, -np.inf, 3.0])  # one NaN, one Inf on each side, elsewhere
    m = compare_tensors(x, y, DEFAULT)
    assert (m.nan_ref, m.nan_cand, m.inf_ref, m.inf_cand) == (1, 1, 1, 1)
    assert m.non_finite_mismatches == 3 and m.diverged
    (reason,) = m.reasons
    assert (reason.metric, reason.value, reason.limit, reason.detail) == ("non_finite", 2.0, 2.0, "3 of 5 positions")
    kind = compare_tensors(np.array([np.nan, 1.0]), np.array([np.inf, 1.0]), DEFAULT)  # NaN against +Inf
    assert kind.non_finite_mismatches == 1 and kind.diverged


def test_shape_mismatch_still_counts_non_finite_values() -> None:
    m = compare_tensors(np.array([np.nan, 1.0]), np.array([np.inf, np.inf, 1.0]), DEFAULT)
    assert m.shape_mismatch == "2 vs 3" and (m.nan_ref, m.inf_cand) == (1, 2)


def test_non_finite_counts() -> None:
    from trtdiff.source.inputs import non_finite_counts

    assert non_finite_counts(np.array([np.nan, np.inf, -np.inf, 0.0], dtype=np.float16)) == (1, 2)
    assert non_finite_counts(np.arange(3)) == (0, 0) and non_finite_counts(np.array([True])) == (0, 0)


@pytest.mark.parametrize(
    ("reference", "candidate", "max_abs"),
    [
        ([2**62, -(2**62)], [-(2**62), 2**62], 2.0**63),  # the difference overflows int64
        ([2**63 - 1, -(2**63)], [-(2**63), 2**63 - 1], 2.0**64 - 1),  # the widest int64 difference
        ([2**62 + 1], [2**62], 1.0),  # float64 rounds both sides to the same number
    ],
)
def test_int64_differences_near_2_63_are_exact(reference: list[int], candidate: list[int], max_abs: float) -> None:
    import torch

    ref, cand = np.array(reference, dtype=np.int64), np.array(candidate, dtype=np.int64)
    for metrics in (compare_tensors(ref, cand, DEFAULT), compare_tensors(torch.from_numpy(ref), cand, DEFAULT)):
        assert metrics.diverged and metrics.mismatches == len(reference)
        assert metrics.max_abs == max_abs and metrics.rel_err > 0
    wide = compare_tensors(np.array([2**64 - 1], dtype=np.uint64), np.array([-1], dtype=np.int64), DEFAULT)
    assert wide.max_abs == 2.0**64 and wide.ref_max_abs == 2.0**64 - 1


def test_figures_over_no_finite_value_are_n_a_not_cosine_1_and_error_0() -> None:
    import torch

    nan = np.full(6, np.nan, dtype=np.float32)
    for reference, candidate in ((nan, nan.copy()), (np.full(6, np.inf, dtype=np.float32), nan)):
        for metrics in (
            compare_tensors(reference, candidate, DEFAULT),
            compare_tensors(torch.from_numpy(reference), candidate, DEFAULT),
        ):
            assert (metrics.cosine, metrics.max_abs, metrics.mean_abs, metrics.rel_err) == (None, None, None, None)
            assert all(reason.metric == "non_finite" for reason in metrics.reasons)
    assert not compare_tensors(nan, nan.copy(), DEFAULT).diverged  # NaN at the same positions still agree
    empty = np.zeros(0, dtype=np.float32)  # no values at all: nothing differs
    assert compare_tensors(empty, empty, DEFAULT).cosine == 1.0
    partly = np.array([np.nan, 1.0, 2.0], dtype=np.float32)  # figures over the finite positions, as before
    assert compare_tensors(partly, partly.copy(), DEFAULT).cosine == pytest.approx(1.0)


def test_a_float16_side_is_compared_as_exactly_as_in_float64() -> None:
    """A float64 golden against a float16 candidate goes through the compiled kernel in float32, block by block
    on several threads: the figures are float64's to float32's precision, NaN/Inf counted where they sit."""
    rng = np.random.default_rng(0)
    golden = rng.standard_normal(3_000_000)
    candidate = golden.astype(np.float16)
    candidate[[5, 2_500_000]] = np.nan
    candidate[1_000_000] = np.inf
    widened = compare_tensors(golden, candidate, Thresholds())
    exact = compare_tensors(golden, candidate.astype(np.float64), Thresholds())
    assert (widened.nan_cand, widened.inf_cand, widened.non_finite_mismatches) == (2, 1, 3)
    assert (exact.nan_cand, exact.inf_cand) == (2, 1)
    assert widened.rel_err == pytest.approx(exact.rel_err, rel=1e-3)
    assert widened.cosine == pytest.approx(exact.cosine, abs=1e-7)
    assert widened.max_abs == pytest.approx(exact.max_abs, rel=1e-3)


def _masked_scores() -> np.ndarray:
    scores = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    return scores + np.triu(np.full((64, 64), -np.inf, dtype=np.float32), 1)  # PyTorch's fused attention: -inf


@pytest.mark.parametrize("on", ["numpy", "torch"])
@pytest.mark.parametrize(
    ("dtype", "mask"), [(np.float32, float(np.finfo(np.float32).min)), (np.float16, float(np.finfo(np.float16).min))]
)
def test_an_infinity_against_its_types_largest_finite_value_agrees(on: str, dtype: type, mask: float) -> None:
    """A causal mask written with -inf on one side and finfo.min on the other (the dynamo exporter's
    scaled_dot_product_attention, Hugging Face's masks; a float16 graph's -65504) is the same mask."""
    reference = _masked_scores()
    candidate = np.where(np.isinf(reference), mask, reference).astype(dtype)
    m = compare_tensors(_on(reference, on), candidate, Thresholds(rtol=1e-2))
    assert not m.diverged and m.non_finite_mismatches == 0 and m.inf_ref == 64 * 63 // 2


@pytest.mark.parametrize("on", ["numpy", "torch"])
@pytest.mark.parametrize("value", [-1e30, float(np.finfo(np.float32).max), np.nan])
def test_an_infinity_against_any_other_value_still_diverges(on: str, value: float) -> None:
    reference = _masked_scores()
    candidate = np.where(np.isinf(reference), value, reference).astype(np.float32)
    m = compare_tensors(_on(reference, on), candidate, Thresholds())
    assert m.diverged and m.non_finite_mismatches == 64 * 63 // 2


def test_a_float16_overflow_of_a_finite_reference_still_diverges() -> None:
    """Past float16's range the graph holds inf where the float64 golden holds 70000: an overflow, not a mask."""
    reference = np.array([70000.0, -70000.0, 1.0, 2.0])
    with np.errstate(over="ignore"):
        candidate = reference.astype(np.float16)
    m = compare_tensors(reference, candidate, Thresholds(rtol=1e-2))
    assert m.diverged and m.non_finite_mismatches == 2


def _on(values: np.ndarray, where: str) -> object:
    if where == "numpy":
        return values
    torch = pytest.importorskip("torch")
    return torch.from_numpy(values)


_RNG = np.random.default_rng(3)
_GOLDEN = _RNG.standard_normal(300_000).astype(np.float32)  # past one block: the kernel and the threads


def _bench(changes: dict[int, float]) -> np.ndarray:
    bench = _GOLDEN.astype(np.float16).astype(np.float32)
    for position, value in changes.items():
        bench[position] = value
    return bench


@pytest.mark.parametrize(
    ("golden_changes", "bench_changes", "expected"),
    [
        ({}, {}, "figure"),
        ({}, {7: 40.0}, "figure"),  # a large error, at one position
        ({5: math.nan}, {5: math.nan}, "figure"),  # NaN in both: left out
        ({5: math.inf}, {5: 1.0}, "figure"),  # the golden's own infinity: left out
        ({}, {9: math.inf}, None),  # the benchmark overflows where the golden is finite: no figure
        ({}, {9: math.nan}, None),
    ],
)
def test_the_benchmarks_rel_err_is_the_same_on_the_host_and_by_torch(
    golden_changes: dict[int, float], bench_changes: dict[int, float], expected: str | None
) -> None:
    """finite_rel_err: numpy arrays and CPU tensors through the compiled pass, GPU tensors through torch; both
    give one figure over the positions finite on both sides, and none where the benchmark is not finite alone."""
    import torch

    from trtdiff.analysis.metrics import _torch_rel_err, finite_rel_err

    golden, bench = _GOLDEN.copy(), _bench(bench_changes)
    for position, value in golden_changes.items():
        golden[position] = value
    host = finite_rel_err(golden, bench)
    in_place = finite_rel_err(torch.from_numpy(golden), torch.from_numpy(bench))
    by_torch = _torch_rel_err(golden, torch.from_numpy(bench))
    if expected is None:
        assert host is None and in_place is None and by_torch is None
        return
    finite = np.isfinite(golden) & np.isfinite(bench)
    exact = float(np.abs(golden[finite].astype(np.float64) - bench[finite]).max() / np.abs(golden[finite]).max())
    assert host == in_place == pytest.approx(exact, rel=1e-6)
    assert by_torch == pytest.approx(exact, rel=1e-6)
    assert (host > 1.0) == (7 in bench_changes)  # 40 against values of about 4.5: an error past the values


def test_the_benchmarks_rel_err_has_no_figure_for_other_sizes_or_integers() -> None:
    from trtdiff.analysis.metrics import finite_rel_err

    assert finite_rel_err(np.ones(4, np.float32), np.ones(5, np.float32)) is None
    assert finite_rel_err(np.ones(4, np.int64), np.ones(4, np.int64)) is None
    assert finite_rel_err(np.zeros(4, np.float32), np.zeros(4, np.float32)) == 0.0
    assert finite_rel_err(np.zeros(4, np.float32), np.ones(4, np.float32)) is None  # against all zeros: no scale
    assert finite_rel_err(np.ones((2, 3), np.float32), np.ones(6, np.float16)) == 0.0  # a flat view of the same
