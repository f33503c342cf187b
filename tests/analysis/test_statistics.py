"""Per-tensor statistics: summaries made where a tensor lives, and bounds that never fail what a full comparison passes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from trtdiff.analysis.judge import Judge
from trtdiff.analysis.metrics import compare_tensors
from trtdiff.analysis.statistics import SAMPLE, compare_summaries, positions, sampled_cosine, summarize
from trtdiff.pairing.qdq import Quantization
from trtdiff.report import Thresholds

THRESHOLDS = Thresholds()


def _pairs(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Reference/candidate pairs from equal to far apart, some holding NaN or Inf, in three float types."""
    rng = np.random.default_rng(seed)
    found = []
    for trial in range(120):
        size = int(rng.integers(1, 40_000))
        dtype = (np.float32, np.float64, np.float16)[trial % 3]
        ref = (rng.standard_normal(size) * 10 ** rng.uniform(-3, 3)).astype(dtype)
        where = rng.random(size) < rng.random()  # the share of positions the candidate moves
        noise = rng.standard_normal(size) * 10 ** rng.uniform(-9, 0) * np.abs(ref).max()
        cand = (ref + np.where(where, noise, 0)).astype(dtype)
        if trial % 5 == 0:
            ref[rng.integers(0, size)] = np.nan
            cand[rng.integers(0, size)] = np.inf
        found.append((ref, cand))
    return found


@pytest.mark.parametrize("seed", [0, 1])
def test_statistics_bound_every_figure_on_its_failing_side_so_they_never_fail_what_a_full_comparison_passes(
    seed: int,
) -> None:
    for ref, cand in _pairs(seed):
        full = compare_tensors(ref, cand, THRESHOLDS)
        bounds = compare_summaries(summarize(ref), summarize(cand), THRESHOLDS)
        assert bounds.statistics and not full.statistics
        assert bounds.ref_max_abs == pytest.approx(full.ref_max_abs, rel=1e-12)
        assert (bounds.nan_ref, bounds.nan_cand, bounds.inf_ref, bounds.inf_cand) == (
            full.nan_ref,
            full.nan_cand,
            full.inf_ref,
            full.inf_cand,
        )
        if full.max_abs is not None and bounds.max_abs is not None:
            assert bounds.max_abs <= full.max_abs * (1 + 1e-12)
            assert bounds.rel_err is not None and full.rel_err is not None
            assert bounds.rel_err <= full.rel_err * (1 + 1e-12)
            assert bounds.mean_abs is not None and full.mean_abs is not None
            assert bounds.mean_abs <= full.mean_abs * (1 + 1e-9) + 1e-300
            assert bounds.cosine is not None and full.cosine is not None
            assert bounds.cosine >= full.cosine - 1e-9
        assert bounds.non_finite_mismatches <= full.non_finite_mismatches
        assert not bounds.diverged or full.diverged


def test_an_error_spread_over_a_share_of_the_positions_is_found_and_one_between_the_samples_is_not() -> None:
    rng = np.random.default_rng(3)
    ref = rng.standard_normal(1 << 20).astype(np.float32)
    spread = ref.copy()
    spread[rng.random(ref.size) < 0.01] += 0.5  # 1% of the positions: about 41 of the 4096 sampled
    bounds = compare_summaries(summarize(ref), summarize(spread), THRESHOLDS)
    assert bounds.diverged and bounds.rel_err is not None and bounds.rel_err > THRESHOLDS.rtol

    lone = ref.copy()
    between = int(np.setdiff1d(np.arange(1, 1000), positions(ref.size))[0])  # a position no sample reads
    lone[between] += 0.05  # inside the range: min and max stay, the norms barely move
    assert compare_tensors(ref, lone, THRESHOLDS).diverged
    assert not compare_summaries(summarize(ref), summarize(lone), THRESHOLDS).diverged  # a pass is no proof


def test_a_scale_error_is_bounded_by_the_norms_and_the_extremes_without_any_sample() -> None:
    ref = np.linspace(-1, 1, 1 << 16, dtype=np.float32)
    bounds = compare_summaries(summarize(ref), summarize(ref * np.float32(1.01)), THRESHOLDS)
    assert bounds.max_abs == pytest.approx(0.01, rel=1e-5) and bounds.diverged


def test_positions_are_one_per_stratum_the_same_for_every_tensor_of_a_size() -> None:
    size = 10_000_019
    chosen = positions(size)
    assert chosen.size == SAMPLE and np.all(np.diff(chosen) > 0) and chosen[0] >= 0 and chosen[-1] < size
    starts = (np.arange(SAMPLE + 1) * size) // SAMPLE  # stratum i: [starts[i], starts[i + 1])
    assert np.all(starts[:-1] <= chosen) and np.all(chosen < starts[1:])
    assert np.array_equal(chosen, positions.__wrapped__(size))
    assert np.array_equal(positions(100), np.arange(100))


def test_the_compiled_pass_numpy_and_torch_give_the_same_summary() -> None:
    rng = np.random.default_rng(5)
    values = rng.standard_normal((3, 70_000)).astype(np.float32)
    values[1, 12345] = np.nan
    values[2, 5] = -np.inf
    kernel = summarize(values)  # contiguous float32: the kernel, numpy for the blocks with NaN/Inf
    strided = summarize(np.asfortranarray(values))  # the same values, not contiguous
    widened = summarize(values.astype(np.float64))  # numpy alone
    tensor = summarize(torch.from_numpy(values))
    for other in (strided, widened, tensor):
        assert (other.nan, other.posinf, other.neginf) == (kernel.nan, kernel.posinf, kernel.neginf) == (1, 0, 1)
        assert (other.low, other.high) == (kernel.low, kernel.high)
        assert other.total == pytest.approx(kernel.total, rel=1e-9, abs=1e-9)
        assert other.squares == pytest.approx(kernel.squares, rel=1e-12)
    finite = values[np.isfinite(values)].astype(np.float64)
    assert kernel.total == pytest.approx(math.fsum(finite), abs=1e-8)
    assert np.array_equal(kernel.sample, tensor.sample, equal_nan=True)


def test_integer_tensors_are_equal_or_have_mismatches() -> None:
    ref = np.arange(50_000, dtype=np.int64)
    same = compare_summaries(summarize(ref), summarize(ref.copy()), THRESHOLDS)
    assert not same.diverged and same.mismatches == 0
    moved = ref.copy()
    moved[-1] += 7  # past every sample's position? the max moves either way
    differ = compare_summaries(summarize(ref), summarize(moved), THRESHOLDS)
    assert differ.diverged and differ.mismatches is not None and differ.mismatches >= 1


def test_a_shape_no_view_can_reconcile_diverges() -> None:
    bounds = compare_summaries(summarize(np.zeros((2, 3))), summarize(np.zeros((7,))), THRESHOLDS)
    assert bounds.diverged and bounds.shape_mismatch == "2x3 vs 7"


def test_the_sampled_cosine_estimates_a_direction_change_the_bound_cannot_prove() -> None:
    rng = np.random.default_rng(7)
    ref = rng.standard_normal(1 << 18).astype(np.float32)
    turned = (0.98 * ref + 0.2 * rng.standard_normal(ref.size)).astype(np.float32)
    ours, theirs = summarize(ref), summarize(turned)
    true = compare_tensors(ref, turned, THRESHOLDS).cosine
    assert true is not None and sampled_cosine(ours, theirs) == pytest.approx(true, abs=5e-3)


def test_a_quantized_tensor_is_suspicious_on_its_sampled_steps_never_diverged_by_them() -> None:
    rng = np.random.default_rng(9)
    ref = rng.standard_normal(1 << 16).astype(np.float32)
    cand = ref + np.float32(0.3)  # 30 steps of 0.01 everywhere
    judge = Judge(THRESHOLDS, {"t": Quantization("dq", 0.01, 0, "int8")})
    metrics, suspicious = judge.summaries("t", summarize(ref), summarize(cand))
    assert suspicious and not metrics.diverged and metrics.quant_steps == pytest.approx(30, rel=1e-3)
    clean, quiet = judge.summaries("t", summarize(ref), summarize(ref + np.float32(0.001)))
    assert not quiet and not clean.diverged


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU visible to torch (none here)")
def test_a_tensor_on_a_gpu_is_summed_up_there_as_on_the_host() -> None:
    rng = np.random.default_rng(11)
    values = rng.standard_normal((2, 3, 300, 301)).astype(np.float32)
    values[0, 1, 2, 3] = np.nan
    values[1, 2, 3, 4] = np.inf
    host, device = summarize(values), summarize(torch.from_numpy(values).cuda())
    assert (device.nan, device.posinf, device.neginf, device.low, device.high) == (
        host.nan,
        host.posinf,
        host.neginf,
        host.low,
        host.high,
    )
    assert device.total == pytest.approx(host.total, rel=1e-9) and device.squares == pytest.approx(host.squares)
    assert np.array_equal(device.sample, host.sample, equal_nan=True)
    integers = torch.arange(100_000, device="cuda")
    assert summarize(integers).total == summarize(integers.cpu()).total
