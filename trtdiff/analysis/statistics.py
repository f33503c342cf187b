"""Per-tensor statistics (`--capture stats`): a tensor summed up where it lives, and what two summaries prove.

A `Summary` of a tensor holds its shape, its NaN, +Inf and -Inf counts, over its finite values
the min, max, sum and sum of squares (in float64), and its values at SAMPLE positions drawn from
its size alone, so every backend samples the same positions. It is made in one pass where the
tensor is (the compiled kernel on the host, torch on a GPU) and is all that is kept of it: a few
kilobytes, whatever the tensor's size.

Two summaries of one tensor bound the figures a full comparison computes, each on its failing
side (`compare_summaries`):
- max-abs error >= the largest difference at the sampled positions, and, where neither side holds
  NaN or Inf, >= |max_r - max_c| and >= |min_r - min_c|;
- mean-abs error >= |mean_r - mean_c| (finite everywhere);
- the sum of squared differences >= that of the samples, (|r| - |c|)^2 and N (mean_r - mean_c)^2,
  which bounds the cosine from above; the reference's largest magnitude is exact, so rel-err is
  bounded from below too; NaN/Inf counts are exact.
So a layer its summaries fail fails a full comparison too: statistics raise no false alarm. A
layer they pass may still fail between the sampled positions: no summary gives the exact
relative error, mean-abs error or cosine, or where an error is. The report marks such figures
(`PairMetrics.statistics`).

A pair is *suspicious* on wider grounds (`suspicious`): its bounds fail, or the estimates from the
sample alone do (its cosine; for a quantized tensor its steps, for a reduced-precision tensor its
noise ratio where no benchmark figure bounds it: see Judge.summaries). The first suspicious layer
is where the full comparison looks (pipeline.coarse).
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from trtdiff.analysis.metrics import BLOCK, TORCH_BLOCK, Moments, compiled, executor, threads, verdict
from trtdiff.backends.store import to_host
from trtdiff.pairing.views import view_compatible
from trtdiff.report import PairMetrics, Reason, Thresholds

SAMPLE = 4096
"""Values kept of each tensor, at positions its size alone decides: one per stratum of size / SAMPLE elements."""

ROUNDING = 1e-12
"""What a bound from sums (of the means, of the norms) gives up, relative to the values' magnitude: float64 sums
of up to 2**40 values round by less, so the bound stays one whatever the order each side summed in."""


@dataclass(frozen=True)
class Summary:
    """What is kept of one tensor: counts, float64 moments of its finite values, and its sampled values."""

    shape: tuple[int, ...]
    is_float: bool
    nan: int
    posinf: int
    neginf: int
    low: float
    """The smallest finite value (+inf when there is none); for integers, the smallest value."""
    high: float
    total: float
    """The sum of the finite values (float64)."""
    squares: float
    """The sum of their squares (float64; 0 for integers, where it is not read)."""
    sample: np.ndarray = dataclasses.field(repr=False, compare=False)
    """The values at `positions(size)`, as float64 (NaN and Inf kept)."""

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def non_finite(self) -> int:
        return self.nan + self.posinf + self.neginf

    @property
    def finite(self) -> int:
        return self.size - self.non_finite

    @property
    def max_abs(self) -> float:
        """The largest finite magnitude (0 with none): exact, as a full comparison has it."""
        return max(abs(self.low), abs(self.high)) if self.finite else 0.0

    @property
    def mean(self) -> float:
        return self.total / self.finite if self.finite else 0.0


@lru_cache(maxsize=256)
def positions(size: int) -> np.ndarray:
    """The sampled flat positions of a tensor of `size` elements: all of them up to SAMPLE, else one drawn
    in each of SAMPLE equal strata (random within it, seeded by `size`: no aliasing with rows or channels)."""
    if size <= SAMPLE:
        return np.arange(size, dtype=np.int64)
    starts = (np.arange(SAMPLE, dtype=np.int64) * size) // SAMPLE
    ends = (np.arange(1, SAMPLE + 1, dtype=np.int64) * size) // SAMPLE
    jitter = np.random.default_rng(size).random(SAMPLE)
    chosen: np.ndarray = starts + (jitter * (ends - starts)).astype(np.int64)
    chosen.setflags(write=False)
    return chosen


def summarize(value: Any) -> Summary:
    """The summary of a numpy array or a torch tensor, made where it is (a GPU tensor with torch, on its GPU)."""
    if _by_torch(value):
        return _torch_summary(value)
    array = to_host(value)  # a CPU tensor as a numpy view of its memory
    shape = tuple(int(d) for d in array.shape)
    flat = array.real.reshape(-1) if np.iscomplexobj(array) else array.reshape(-1)
    sample = np.asarray(flat[positions(flat.size)], dtype=np.float64)
    if not np.issubdtype(flat.dtype, np.floating):
        low = float(flat.min()) if flat.size else math.inf
        high = float(flat.max()) if flat.size else -math.inf
        total = float(flat.sum(dtype=np.float64))
        return Summary(shape, False, 0, 0, 0, low, high, total, 0.0, sample)
    moments = _float_moments(flat)
    return Summary(shape, True, *moments, sample=sample)


def _float_moments(flat: np.ndarray) -> tuple[int, int, int, float, float, float, float]:
    """(nan, +inf, -inf, min, max, sum, sum of squares) of a flat float array, block by block, on threads."""
    size = flat.size
    workers = min(threads(), max(1, size // (4 * BLOCK)))
    blocks = -(-size // BLOCK)
    bounds = [min(size, (blocks * i // workers) * BLOCK) for i in range(workers + 1)]
    parts = list(executor().map(lambda i: _range(flat, bounds[i], bounds[i + 1]), range(workers)))
    nan, posinf, neginf = (sum(p[k] for p in parts) for k in range(3))
    return (
        int(nan),
        int(posinf),
        int(neginf),
        min((p[3] for p in parts), default=math.inf),
        max((p[4] for p in parts), default=-math.inf),
        math.fsum(p[5] for p in parts),
        math.fsum(p[6] for p in parts),
    )


def _range(flat: np.ndarray, start: int, stop: int) -> tuple[int, int, int, float, float, float, float]:
    """The moments of elements [start, stop): the kernel's over blocks it reads (float32), numpy's for the rest."""
    kernel = _kernel() if flat.dtype == np.float32 and flat.flags.c_contiguous else None
    counts = [0, 0, 0]
    out = (ctypes.c_double * 4)(math.inf, -math.inf, 0.0, 0.0)
    begin = start
    while begin < stop:
        if kernel is not None:
            reached = int(kernel(flat.ctypes.data, begin, stop, BLOCK, out))
            if reached == stop:
                break
            begin = reached  # a block holding NaN or Inf: numpy counts them, then the kernel goes on
        end = min(begin + BLOCK, stop)
        block = flat[begin:end].astype(np.float64)
        finite = np.isfinite(block)
        if not finite.all():
            counts[0] += int(np.isnan(block).sum())
            counts[1] += int(np.isposinf(block).sum())
            counts[2] += int(np.isneginf(block).sum())
            block = block[finite]
        if block.size:
            out[0], out[1] = min(out[0], float(block.min())), max(out[1], float(block.max()))
            out[2] += float(block.sum())
            out[3] += float(np.dot(block, block))
        begin = end
    return counts[0], counts[1], counts[2], out[0], out[1], out[2], out[3]


@lru_cache(maxsize=1)
def _kernel() -> Any:
    """The compiled one-pass summary of a float32 range (`_kernel.c`), or None where it was not built."""
    function = compiled("trtdiff_summary_f32")
    if function is not None:
        function.restype = ctypes.c_int64
        function.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
        function.argtypes += [ctypes.POINTER(ctypes.c_double)]
    return function


def _torch_summary(value: Any) -> Summary:
    """The same figures with torch, on the GPU the tensor is on (in blocks: float64 temporaries stay small)."""
    import torch

    tensor = value.detach()
    flat = (tensor.real if tensor.is_complex() else tensor).reshape(-1)
    shape = tuple(int(d) for d in tensor.shape)
    index = torch.from_numpy(positions(flat.numel()).copy()).to(flat.device)
    sample = flat.index_select(0, index).double().cpu().numpy()
    if not flat.is_floating_point():
        if not flat.numel():
            return Summary(shape, False, 0, 0, 0, math.inf, -math.inf, 0.0, 0.0, sample)
        low, high = (float(v) for v in torch.aminmax(flat))
        return Summary(shape, False, 0, 0, 0, low, high, float(flat.double().sum()), 0.0, sample)
    nan = posinf = neginf = 0
    low, high, total, squares = math.inf, -math.inf, 0.0, 0.0
    for block in flat.split(TORCH_BLOCK):
        block = block.double()
        nan += int(torch.isnan(block).sum())
        posinf += int(torch.isposinf(block).sum())
        neginf += int(torch.isneginf(block).sum())
        block = block[torch.isfinite(block)]
        if block.numel():
            low, high = min(low, float(block.min())), max(high, float(block.max()))
            total += float(block.sum())
            squares += float(block.dot(block))
    return Summary(shape, True, nan, posinf, neginf, low, high, total, squares, sample)


def compare_summaries(ref: Summary, cand: Summary, thresholds: Thresholds) -> PairMetrics:
    """The bounds two summaries give of the figures of a full comparison, judged as it judges them (see the
    module docstring): every figure on its failing side, so a pair failed here fails in full too."""
    if ref.size != cand.size or not view_compatible(ref.shape, cand.shape):
        mismatch = f"{'x'.join(map(str, ref.shape))} vs {'x'.join(map(str, cand.shape))}"
        return PairMetrics(
            cosine=float("nan"),
            max_abs=float("inf"),
            mean_abs=float("inf"),
            rel_err=float("inf"),
            ref_max_abs=ref.max_abs,
            shape_mismatch=mismatch,
            diverged=True,
            reasons=(Reason("shape", float("nan"), detail=mismatch),),
            statistics=True,
        )
    if not ref.is_float and not cand.is_float:
        return _exact_bounds(ref, cand)
    r, c = ref.sample, cand.sample
    both = np.isfinite(r) & np.isfinite(c)
    same_kind = both | (np.isnan(r) & np.isnan(c)) | (r == c)  # NaN against NaN, Inf against the same Inf
    differ = max(int((~same_kind).sum()), abs(ref.nan - cand.nan), abs(ref.posinf - cand.posinf))
    differ = max(differ, abs(ref.neginf - cand.neginf))
    gaps = np.abs(r[both] - c[both])
    max_abs = float(gaps.max()) if gaps.size else 0.0
    squared = float(np.dot(gaps, gaps))
    finite = min(ref.finite, cand.finite)
    clean = not ref.non_finite and not cand.non_finite
    magnitude = max(ref.max_abs, cand.max_abs)  # float64 sums round by far less than ROUNDING of it
    mean_gap = max(0.0, abs(ref.mean - cand.mean) - ROUNDING * magnitude) if clean else 0.0
    norm_ref, norm_cand = math.sqrt(ref.squares), math.sqrt(cand.squares)
    if clean and finite:
        max_abs = max(max_abs, abs(ref.high - cand.high), abs(ref.low - cand.low))
        norm_gap = max(0.0, abs(norm_ref - norm_cand) - ROUNDING * max(norm_ref, norm_cand))
        squared = max(squared, norm_gap**2, finite * mean_gap**2)
    moments = Moments(
        size=ref.size,
        nan_ref=ref.nan,
        nan_cand=cand.nan,
        inf_ref=ref.posinf + ref.neginf,
        inf_cand=cand.posinf + cand.neginf,
        differ=differ,
        finite=finite,
        max_abs=max_abs,
        sum_abs=mean_gap * finite,
        ref_max_abs=ref.max_abs,
        dot=(ref.squares + cand.squares - squared) / 2,  # the cosine's upper bound, as verdict() computes it
        ref_sq=ref.squares,
        cand_sq=cand.squares,
    )
    return dataclasses.replace(verdict(moments, thresholds), statistics=True)


def _exact_bounds(ref: Summary, cand: Summary) -> PairMetrics:
    """Integer and bool tensors: the mismatches seen (at least one where min, max or sum differ)."""
    seen = int((ref.sample != cand.sample).sum())
    moved = (ref.low, ref.high, ref.total) != (cand.low, cand.high, cand.total)
    mismatches = max(seen, int(moved))
    gaps = np.abs(ref.sample - cand.sample)
    max_abs = max(float(gaps.max()) if gaps.size else 0.0, abs(ref.low - cand.low), abs(ref.high - cand.high))
    if not ref.size:
        max_abs = 0.0
    return PairMetrics(
        cosine=1.0 if mismatches == 0 else float(1.0 - mismatches / max(ref.size, 1)),
        max_abs=max_abs,
        mean_abs=0.0,
        rel_err=max_abs / ref.max_abs if ref.max_abs else (0.0 if max_abs == 0 else float("inf")),
        ref_max_abs=ref.max_abs,
        mismatches=mismatches,
        diverged=bool(mismatches),
        reasons=(Reason("mismatches", float(mismatches), float(ref.size)),) if mismatches else (),
        statistics=True,
    )


def sampled_cosine(ref: Summary, cand: Summary) -> float:
    """The cosine of the sampled values finite on both sides (an estimate of the tensors' cosine, not a bound)."""
    both = np.isfinite(ref.sample) & np.isfinite(cand.sample)
    r, c = ref.sample[both], cand.sample[both]
    norms = float(np.linalg.norm(r)) * float(np.linalg.norm(c))
    if norms == 0.0:
        return 1.0 if not (r.any() or c.any()) else 0.0
    return float(np.clip(np.dot(r, c) / norms, -1.0, 1.0))


def suspicious(ref: Summary, cand: Summary, metrics: PairMetrics, thresholds: Thresholds) -> bool:
    """Whether the full comparison should look here: the bounds fail, or the sample's own cosine does."""
    if metrics.diverged:
        return True
    return ref.is_float and cand.is_float and sampled_cosine(ref, cand) < thresholds.min_cosine


def _by_torch(value: Any) -> bool:
    """Whether `value` is summed up with torch: a tensor on a GPU, or of a type numpy has not (bfloat16, float8)."""
    if not (type(value).__module__.startswith("torch") and hasattr(value, "device")):
        return False
    return value.device.type != "cpu" or str(value.dtype) == "torch.bfloat16" or "float8" in str(value.dtype)
