"""Compare one candidate tensor with its reference: direction, magnitude, non-finite values.

Cosine similarity alone is blind to a pure scale error and max-abs alone is blind to
magnitude, so a tensor diverges when its direction drifts (cosine below `min_cosine`) or
its error is large against the reference's own magnitude (`rel_err` above `rtol`), or, when
asked, above an absolute bound. Integer and bool tensors must match exactly.

NaN and Inf are compared by position: both sides holding NaN (or the same infinity) at the
same places agree, as a -inf attention mask does in every backend; so does an infinity against
the largest finite value of a float type with its sign (`MASK_VALUES`: the "-inf" an attention
mask is written with where a real infinity is avoided, as Hugging Face's torch.finfo(dtype).min;
the dynamo exporter writes that where PyTorch's fused attention adds -inf); a NaN or Inf where
the other side has anything else diverges. Whether final outputs may hold them at all is the
gate's question (trtdiff.gate.checks), not this one's.

Speed: every figure comes from one pass over the pair, block by block (`Moments`). A
float32 pair, the common case, goes through a compiled kernel (`_kernel.c`, built at install
where a C compiler is) that reads each block once and widens every value to float64. Other
pairs, blocks holding NaN or Inf, and installs without the kernel use numpy: a block is read
as stored (float32, float16, integers) into a small float64 scratch buffer that stays in
cache. Either way the sums, norms and dot product accumulate in float64 as a plain float64
implementation would, without a float64 copy of the whole tensor. On the CPU the blocks are
shared among threads (both the kernel and numpy release the GIL); torch tensors (the PyTorch
reference on a GPU) are compared with torch where they are, and only the figures cross to
the host.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import math
import os
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from trtdiff.backends.store import to_host
from trtdiff.pairing.views import view_compatible
from trtdiff.report import PairMetrics, Reason, Thresholds
from trtdiff.source.inputs import non_finite_counts

if TYPE_CHECKING:
    import torch

BLOCK = 1 << 16
"""Elements per block on the CPU: three float64 scratch buffers of this size stay in a core's L2 cache."""
TORCH_BLOCK = 1 << 24
"""Elements per block with torch (on a GPU): float64 temporaries of 128 MB at most."""
_PARALLEL_FROM = 4 * BLOCK  # smaller tensors are compared on the calling thread
_T = TypeVar("_T")
MASK_VALUES = (*(float(np.finfo(t).max) for t in (np.float16, np.float32, np.float64)), 3.3895313892515355e38)
"""The largest finite magnitude of float16, float32, float64 and bfloat16: against an infinity of the same sign,
the same mask value (module docstring)."""


@dataclass
class Moments:
    """What one pass over a pair (or a block of it) yields; blocks combine by `add`."""

    size: int = 0
    nan_ref: int = 0
    nan_cand: int = 0
    inf_ref: int = 0
    inf_cand: int = 0
    differ: int = 0
    finite: int = 0  # positions finite on both sides: what the figures below are over
    max_abs: float = 0.0
    sum_abs: float = 0.0
    ref_max_abs: float = 0.0
    dot: float = 0.0
    ref_sq: float = 0.0
    cand_sq: float = 0.0

    def add(self, other: Moments) -> None:
        self.size += other.size
        self.nan_ref += other.nan_ref
        self.nan_cand += other.nan_cand
        self.inf_ref += other.inf_ref
        self.inf_cand += other.inf_cand
        self.differ += other.differ
        self.finite += other.finite
        self.max_abs = max(self.max_abs, other.max_abs)
        self.sum_abs += other.sum_abs
        self.ref_max_abs = max(self.ref_max_abs, other.ref_max_abs)
        self.dot += other.dot
        self.ref_sq += other.ref_sq
        self.cand_sq += other.cand_sq


def compare_tensors(reference: Any, candidate: Any, thresholds: Thresholds) -> PairMetrics:
    """Metrics of `candidate` against `reference`, with the divergence verdict and its reasons.

    Either may be a numpy array or a torch tensor (the PyTorch reference kept on its GPU):
    with a torch tensor on a GPU the comparison runs there, the other side copied to it.
    """
    if _is_torch(reference) or _is_torch(candidate):
        on_host = [_numpy_view(v) for v in (reference, candidate)]
        if on_host[0] is None or on_host[1] is None:
            return _compare_torch(reference, candidate, thresholds)
        reference, candidate = on_host  # tensors on the CPU: read in place, with the threads below
    reference = np.asarray(reference)
    candidate = np.asarray(candidate)
    if reference.shape != candidate.shape:
        if not view_compatible(reference.shape, candidate.shape):
            return _shape_mismatch(reference, candidate)
        candidate = candidate.reshape(reference.shape)
    if not _is_float(reference) and not _is_float(candidate):
        mismatches = int(np.count_nonzero(reference != candidate))
        return _exact(_integer_moments(reference, candidate), mismatches)
    return verdict(_numpy_moments(reference, candidate), thresholds)


def finite_rel_err(reference: Any, candidate: Any) -> float | None:
    """max |reference - candidate| / max |reference| over the positions finite on both sides: the error an FP16
    benchmark makes at one op against its golden (backends.pytorch.benchmark). None where the sizes differ, a side
    is not floating, the candidate is not finite where the reference is, or no position is finite on both.

    Values on the host (CPU tensors read in place) take the one pass of `compare_tensors` (the compiled kernel
    for float32): torch's own isfinite, abs and max over each value of DeepLabV3+ at 1024x1024 took half the
    benchmark on 2 cores. Values on a GPU are reduced by torch there, the figures alone copied to the host
    (numpy on the host, one thread, spent 7.5 s of DeepLabV3 (ResNet-50) at 512x512 there)."""
    ref, cand = _numpy_view(reference), _numpy_view(candidate)
    if ref is None or cand is None:
        return _torch_rel_err(reference, candidate)
    if ref.size != cand.size or not (_is_real_float(ref) and _is_real_float(cand)):
        return None
    return _finite_rel_err(_numpy_moments(ref.reshape(-1), cand.reshape(-1)), ref, cand)


def _finite_rel_err(moments: Moments, reference: Any, candidate: Any) -> float | None:
    """`finite_rel_err` from the pair's moments (their maxima are over the positions finite on both sides); the
    positions are looked at on the host only where the candidate holds NaN or Inf."""
    if moments.nan_cand + moments.inf_cand:
        ref, cand = to_host(reference).reshape(-1), to_host(candidate).reshape(-1)
        if bool(np.any(np.isfinite(ref) & ~np.isfinite(cand))):
            return None
    if not moments.finite:
        return None
    delta, scale = moments.max_abs, moments.ref_max_abs
    return delta / scale if scale > 0 else (0.0 if delta == 0 else None)  # against all zeros: no figure


def verdict(moments: Moments, thresholds: Thresholds) -> PairMetrics:
    """The figures of a float pair, its divergence and the reasons.

    A pair with values but none finite on both sides has no figures: cosine, max-abs, mean-abs
    and relative error are n/a (None), not the cosine 1 and error 0 of empty sums. That alone
    is no reason to diverge (NaN against NaN agrees); the gate fails n/a on final outputs.
    """
    reasons: list[Reason] = []
    if moments.size and not moments.finite:
        cosine: float | None = None
        max_abs: float | None = None
        mean_abs: float | None = None
        rel_err: float | None = None
    else:
        max_abs = moments.max_abs
        mean_abs = moments.sum_abs / moments.finite if moments.finite else 0.0
        rel_err = _relative(max_abs, moments.ref_max_abs)
        cosine = _cosine(moments)
        if cosine < thresholds.min_cosine:
            reasons.append(Reason("cosine", cosine, thresholds.min_cosine))
        if rel_err > thresholds.rtol:
            reasons.append(Reason("rel_err", rel_err, thresholds.rtol))
        if thresholds.max_abs is not None and max_abs > thresholds.max_abs:
            reasons.append(Reason("max_abs", max_abs, thresholds.max_abs))
    if moments.differ:
        where = f"{moments.differ} of {moments.size} positions"
        reasons.append(
            Reason(
                "non_finite",
                float(moments.nan_cand + moments.inf_cand),
                float(moments.nan_ref + moments.inf_ref),
                detail=where,
            )
        )
    return PairMetrics(
        cosine=cosine,
        max_abs=max_abs,
        mean_abs=mean_abs,
        rel_err=rel_err,
        ref_max_abs=moments.ref_max_abs,
        nan_ref=moments.nan_ref,
        nan_cand=moments.nan_cand,
        inf_ref=moments.inf_ref,
        inf_cand=moments.inf_cand,
        diverged=bool(reasons),
        reasons=tuple(reasons),
        non_finite_mismatches=moments.differ,
    )


def _relative(max_abs: float, ref_max_abs: float) -> float:
    """Max-abs error over the reference's largest magnitude (0 or inf against an all-zero reference)."""
    return max_abs / ref_max_abs if ref_max_abs > 0 else (0.0 if max_abs == 0 else float("inf"))


def _cosine(moments: Moments) -> float:
    norm_ref, norm_cand = math.sqrt(moments.ref_sq), math.sqrt(moments.cand_sq)
    if norm_ref == 0.0 and norm_cand == 0.0:
        return 1.0
    if norm_ref == 0.0 or norm_cand == 0.0:
        return 0.0
    return float(min(1.0, max(-1.0, moments.dot / (norm_ref * norm_cand))))


def _exact(moments: Moments, mismatches: int) -> PairMetrics:
    """Integer and bool tensors: equal or not, with the figures of their difference."""
    size = moments.size
    max_abs, ref_max_abs = moments.max_abs, moments.ref_max_abs
    reasons = (Reason("mismatches", float(mismatches), float(size)),) if mismatches else ()
    return PairMetrics(
        cosine=1.0 if mismatches == 0 else float(1.0 - mismatches / max(size, 1)),
        max_abs=max_abs,
        mean_abs=moments.sum_abs / size if size else 0.0,
        rel_err=max_abs / ref_max_abs if ref_max_abs else (0.0 if max_abs == 0 else float("inf")),
        ref_max_abs=ref_max_abs,
        mismatches=mismatches,
        diverged=bool(mismatches),
        reasons=reasons,
    )


def _integer_moments(reference: np.ndarray, candidate: np.ndarray) -> Moments:
    """Max-abs, mean-abs and the reference's magnitude of an integer (or bool) pair, exact where they matter.

    float64 holds integers to 2**53 only and int64 differences overflow (2**62 - -2**62), so
    each difference is taken as uint64 of the larger side minus the smaller, which wraps to the
    exact difference (it is below 2**64), and only that exact figure is rounded to a float: two
    values that differ never give max-abs 0. A pair no 64-bit type holds both of (int64 against
    uint64) is compared in Python integers.
    """
    ref, cand = _flat(np.asarray(reference)), _flat(np.asarray(candidate))
    common = np.promote_types(ref.dtype, cand.dtype)
    if common.kind == "b":
        common = np.dtype(np.int64)
    if common.kind not in "iu":  # int64 with uint64: no 64-bit integer type holds both
        diff = np.abs(ref.astype(object) - cand.astype(object))
        magnitude = np.abs(ref.astype(object))
    else:
        wide = np.dtype(np.int64) if common.kind == "i" else np.dtype(np.uint64)
        r, c = ref.astype(wide), cand.astype(wide)
        diff = np.maximum(r, c).view(np.uint64) - np.minimum(r, c).view(np.uint64)  # wraps to the exact difference
        magnitude = np.where(r < 0, np.uint64(0) - r.view(np.uint64), r.view(np.uint64)) if wide.kind == "i" else r
    size = int(ref.size)
    return Moments(
        size=size,
        finite=size,
        max_abs=float(int(diff.max())) if size else 0.0,
        sum_abs=float(sum(int(v) for v in diff) if diff.dtype == object else diff.astype(np.float64).sum()),
        ref_max_abs=float(int(magnitude.max())) if size else 0.0,
    )


def _shape_mismatch(reference: np.ndarray, candidate: np.ndarray) -> PairMetrics:
    mismatch = f"{_shape(reference)} vs {_shape(candidate)}"
    nan_ref, inf_ref = non_finite_counts(reference)
    nan_cand, inf_cand = non_finite_counts(candidate)
    return PairMetrics(
        cosine=float("nan"),
        max_abs=float("inf"),
        mean_abs=float("inf"),
        rel_err=float("inf"),
        ref_max_abs=_finite_max_abs(reference),
        nan_ref=nan_ref,
        nan_cand=nan_cand,
        inf_ref=inf_ref,
        inf_cand=inf_cand,
        shape_mismatch=mismatch,
        diverged=True,
        reasons=(Reason("shape", float("nan"), detail=mismatch),),
    )


# --- numpy, on the CPU ------------------------------------------------------------------------------------------


def _numpy_moments(reference: np.ndarray, candidate: np.ndarray) -> Moments:
    """One pass over the pair, in blocks, on several threads when it is large.

    A float16 side is widened to float32 with the other, block by block on each thread, so that the compiled
    kernel reads both: casting a float64 value to float32 moves it by 6e-8 of itself, under a ten-thousandth
    of the error float16 is judged against (numpy's own path took 7.5 s of an FP16 DeepLabV3 (ResNet-50)
    compare at 512x512 on the H200 host)."""
    ref, cand = _flat(reference), _flat(candidate)
    widen = np.float16 in (ref.dtype, cand.dtype) and ref.dtype.kind == cand.dtype.kind == "f"
    over = _widened_range if widen else _numpy_range
    size = ref.size
    workers = min(threads(), max(1, size // _PARALLEL_FROM))
    if workers <= 1:
        total = over(ref, cand, 0, size)
    else:
        blocks = -(-size // BLOCK)
        bounds = [min(size, (blocks * i // workers) * BLOCK) for i in range(workers + 1)]
        total = Moments()
        for part in executor().map(lambda i: over(ref, cand, bounds[i], bounds[i + 1]), range(workers)):
            total.add(part)
    if total.finite and not (math.isfinite(total.ref_sq) and math.isfinite(total.cand_sq)):
        total.dot, total.ref_sq, total.cand_sq = _scaled_products(ref, cand)
    return total


def _scaled_products(ref: np.ndarray, cand: np.ndarray) -> tuple[float, float, float]:
    """Dot product and squared norms of values whose squares pass float64 (over 1e154), scaled as np.linalg.norm does.

    The products are of the scaled values: the cosine, their only use, is the same.
    """
    r, c = ref.astype(np.float64), cand.astype(np.float64)  # only float64 values get this large: no wider copy
    finite = np.isfinite(r) & np.isfinite(c)
    r, c = r[finite], c[finite]
    scale = float(max(np.abs(r).max(), np.abs(c).max()))
    r, c = r / scale, c / scale
    return float(_dot(r, c)), float(_dot(r, r)), float(_dot(c, c))


def _flat(array: np.ndarray) -> np.ndarray:
    """The array as one dimension, without a copy where it is contiguous; complex values by their real part."""
    if np.iscomplexobj(array):
        array = array.real
    return array.reshape(-1)


def _widened_range(ref: np.ndarray, cand: np.ndarray, start: int, stop: int) -> Moments:
    """`_numpy_range` of elements [start, stop) of a pair with a float16 side, 16 blocks at a time in float32."""
    total = Moments()
    for begin in range(start, stop, 16 * BLOCK):
        end = min(stop, begin + 16 * BLOCK)
        r, c = (_as_float32(side[begin:end]) for side in (ref, cand))
        total.add(_numpy_range(r, c, 0, end - begin))
    return total


def _as_float32(values: np.ndarray) -> np.ndarray:
    """A block as contiguous float32 for the kernel: float16 by `half_cast`, anything else by numpy."""
    if values.dtype == np.float16:  # on a comparing thread: not split again
        return np.ascontiguousarray(half_cast(values, np.dtype(np.float32), split=False))
    return np.ascontiguousarray(values, dtype=np.float32)


def _numpy_range(ref: np.ndarray, cand: np.ndarray, start: int, stop: int) -> Moments:
    """The moments of elements [start, stop), block by block: the kernel's where it reads them, else numpy's."""
    length = min(BLOCK, max(stop - start, 0))
    scratch = np.empty((3, length), dtype=np.float64)
    total = Moments()
    contiguous = ref.flags.c_contiguous and cand.flags.c_contiguous
    kernel = _kernel() if contiguous and ref.dtype == cand.dtype == np.float32 else None
    begin = start
    with np.errstate(over="ignore", invalid="ignore"):  # squares past float64 are caught after the sum
        while begin < stop:
            if kernel is not None:
                reached = kernel(ref, cand, begin, stop, total)
                if reached == stop:
                    break
                begin = reached  # a block holding NaN or Inf: numpy counts them, then the kernel goes on
            end = min(begin + BLOCK, stop)
            total.add(_numpy_block(ref[begin:end], cand[begin:end], scratch))
            begin = end
    return total


def _numpy_block(ref: np.ndarray, cand: np.ndarray, scratch: np.ndarray) -> Moments:
    n = ref.size
    r, c, d = scratch[0, :n], scratch[1, :n], scratch[2, :n]
    np.copyto(r, ref, casting="unsafe")
    np.copyto(c, cand, casting="unsafe")
    ref_sq, cand_sq = float(_dot(r, r)), float(_dot(c, c))
    if not (math.isfinite(ref_sq) and math.isfinite(cand_sq)):  # NaN or Inf in the block (or squares past float64)
        return _numpy_block_non_finite(r, c)
    np.abs(r, out=d)
    ref_max_abs = float(d.max()) if n else 0.0
    np.subtract(r, c, out=d)
    np.abs(d, out=d)
    return Moments(
        size=n,
        finite=n,
        max_abs=float(d.max()) if n else 0.0,
        sum_abs=float(d.sum()),
        ref_max_abs=ref_max_abs,
        dot=float(_dot(r, c)),
        ref_sq=ref_sq,
        cand_sq=cand_sq,
    )


def _numpy_block_non_finite(r: np.ndarray, c: np.ndarray) -> Moments:
    """A block holding NaN or Inf: count them, and compute the figures over the positions finite on both sides."""
    nan_r, nan_c, inf_r, inf_c = np.isnan(r), np.isnan(c), np.isinf(r), np.isinf(c)
    infinite = inf_r | inf_c
    masked = infinite & (np.sign(r) == np.sign(c)) & _infinite_like(r) & _infinite_like(c)
    differ = int(np.count_nonzero((nan_r != nan_c) | (infinite & (r != c) & ~masked)))
    finite = ~(nan_r | nan_c | infinite)
    rf, cf = r[finite], c[finite]
    diff = np.abs(rf - cf)
    return Moments(
        size=r.size,
        nan_ref=int(np.count_nonzero(nan_r)),
        nan_cand=int(np.count_nonzero(nan_c)),
        inf_ref=int(np.count_nonzero(inf_r)),
        inf_cand=int(np.count_nonzero(inf_c)),
        differ=differ,
        finite=int(rf.size),
        max_abs=float(diff.max()) if diff.size else 0.0,
        sum_abs=float(diff.sum()),
        ref_max_abs=float(np.abs(rf).max()) if rf.size else 0.0,
        dot=float(_dot(rf, cf)),
        ref_sq=float(_dot(rf, rf)),
        cand_sq=float(_dot(cf, cf)),
    )


def _infinite_like(values: np.ndarray) -> np.ndarray:
    """Where `values` (float64) is an infinity or a float type's largest finite magnitude (`MASK_VALUES`)."""
    like: np.ndarray = np.isinf(values) | np.isin(np.abs(values), MASK_VALUES)
    return like


_Kernel = Callable[[np.ndarray, np.ndarray, int, int, Moments], int]


@cache
def compiled(name: str) -> Any:
    """The function `name` of the compiled kernel (`_kernel.c`), or None where it was not built (or lacks it).

    Loaded with ctypes.CDLL, not PyDLL: the GIL is released while it runs, so threads run it side by side.
    """
    here = Path(__file__).parent
    found = [here / f"_kernel{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES]
    path = next((p for p in found if p.is_file()), None)
    if path is None:
        return None
    try:
        return getattr(ctypes.CDLL(str(path)), name)
    except (OSError, AttributeError):  # built for another platform, or without the function
        return None


@cache
def _kernel() -> _Kernel | None:
    """The compiled pass over a float32 pair (`_kernel.c`), or None where it was not built.

    `kernel(ref, cand, start, stop, total)` adds the moments of the finite blocks from `start`
    to `total` and returns where it stopped: `stop`, or the start of a block holding NaN or Inf.
    Both arrays are one-dimensional and contiguous.
    """
    function = compiled("trtdiff_moments_f32")
    if function is None:
        return None
    function.restype = ctypes.c_int64
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    function.argtypes += [ctypes.POINTER(ctypes.c_double)]

    def kernel(ref: np.ndarray, cand: np.ndarray, start: int, stop: int, total: Moments) -> int:
        out = (ctypes.c_double * 6)()
        reached = int(function(ref.ctypes.data, cand.ctypes.data, start, stop, BLOCK, out))
        if reached > start:
            total.add(
                Moments(
                    size=reached - start,
                    finite=reached - start,
                    max_abs=out[0],
                    sum_abs=out[1],
                    ref_max_abs=out[2],
                    dot=out[3],
                    ref_sq=out[4],
                    cand_sq=out[5],
                )
            )
        return reached

    return kernel


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Sum of products in float64, on this thread (np.dot would hand small blocks to BLAS's own threads)."""
    return float(np.einsum("i,i->", a, b))


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


MAX_THREADS = 4
"""Comparing threads at most: a pass is bound by memory bandwidth, which four threads already use up. Measured
on one 33-million-value pair: 2 cores, 2 threads 0.09 s (4: 0.11 s); the 16-core H200 machine, 1 thread
0.25 s, 4 threads 0.11 s, 8 threads 0.11 s, 16 threads 0.25 s."""


def threads() -> int:
    """The comparing threads: the processors this process may run on, MAX_THREADS at most."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_THREADS))


def in_parts(function: Callable[[int, int], _T], size: int, smallest: int) -> list[_T]:
    """`function(start, stop)` over consecutive parts of `size` elements, one per comparing thread but none under
    `smallest` elements (a single part, on the calling thread, where `size` is smaller). For numpy loops that
    release the GIL (casts, reductions, bincount); `function` must not wait on these threads itself."""
    parts = min(threads(), max(1, size // smallest))
    if parts == 1:
        return [function(0, size)]
    bounds = [size * i // parts for i in range(parts + 1)]
    return list(executor().map(lambda i: function(bounds[i], bounds[i + 1]), range(parts)))


_HALF_FROM = 1 << 14
"""Elements from which `half_cast` narrows through torch: below, numpy's call costs less than torch's."""


def half_cast(value: np.ndarray, dtype: np.dtype, *, split: bool = True) -> np.ndarray:
    """float32 `value` as float16, or float16 as float32, bit for bit as numpy casts it (to nearest, ties to
    even; past 65504 to inf; NaN stays NaN), at a cost that does not depend on the values.

    numpy converts value by value, with a slow path for what float16 holds as a subnormal or cannot
    hold: 5 ns a value after a ReLU, 36-62 ns past 65504 or under 6e-5 (2 cores), which is much of a
    MobileNetV3 activation: torchvision's LRASPP at 512x512 spent 0.9 s of its 1.9 s FP16 local check
    casting its feeds. Widening reads each value's float32 from a table of all 65536 float16 values
    (numpy's own conversions; 1.4 ns a value on one thread), a large array in parts on the comparing
    threads (`split`; from those threads themselves, split=False). Narrowing a large array goes through
    torch's conversion (F16C or a branchless one, 0.6 ns a value on torch's own threads): call it from
    one thread, not from the comparing threads, whose every call would start a team of torch's threads
    of its own. Tested on random bit patterns, ties and the range's edges (tests/analysis/test_shadow.py)."""
    if dtype == np.float32:
        return _widened(value, split)
    if value.size < _HALF_FROM:
        return value.astype(dtype)
    import torch

    source = value if value.flags.c_contiguous else np.ascontiguousarray(value)
    with warnings.catch_warnings():  # a read-only array (a spilled value's memmap) is only read here
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.from_numpy(source)
    narrowed: np.ndarray = tensor.to(torch.float16).numpy()
    return narrowed


def _widened(value: np.ndarray, split: bool) -> np.ndarray:
    """float16 `value` as float32 by `_half_table`, in parts on the comparing threads where large and `split`."""
    table, bits = _half_table(), value.view(np.uint16)
    if not split or value.size < _PARALLEL_FROM:
        whole: np.ndarray = np.take(table, bits)
        return whole
    out = np.empty(value.shape, dtype=np.float32)
    flat, into = bits.reshape(-1), out.reshape(-1)
    in_parts(lambda start, stop: np.take(table, flat[start:stop], out=into[start:stop]), value.size, _PARALLEL_FROM)
    return out


@cache
def _half_table() -> np.ndarray:
    """Every float16 value as float32, indexed by its bits (256 KB: it stays in a core's cache)."""
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def executor() -> ThreadPoolExecutor:
    """One pool of comparing threads for the process, made on first use."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=threads(), thread_name_prefix="trtdiff-metrics")
        return _pool


# --- torch, where the tensors are (a GPU) ---------------------------------------------------------------------------


def _compare_torch(reference: Any, candidate: Any, thresholds: Thresholds) -> PairMetrics:
    """The same figures with torch, on the device of whichever side is a torch tensor (the other copied there)."""
    import torch

    device = next(v.device for v in (reference, candidate) if isinstance(v, torch.Tensor))
    ref, cand = _as_torch(reference, device), _as_torch(candidate, device)
    if ref.shape != cand.shape:
        if not view_compatible(tuple(ref.shape), tuple(cand.shape)):
            return _shape_mismatch(to_host(ref), to_host(cand))
        cand = cand.reshape(ref.shape)
    if not ref.is_floating_point() and not cand.is_floating_point() and not ref.is_complex() and not cand.is_complex():
        mismatches = int((ref != cand).sum())
        return _exact(_integer_moments(to_host(ref), to_host(cand)), mismatches)
    return verdict(_torch_moments(ref, cand), thresholds)


def _torch_moments(reference: torch.Tensor, candidate: torch.Tensor) -> Moments:
    """One pass over the pair with torch, in float64 blocks; one copy of the figures to the host at the end."""
    import torch

    ref, cand = reference.reshape(-1), candidate.reshape(-1)
    if ref.is_complex():
        ref = ref.real
    if cand.is_complex():
        cand = cand.real
    sums: list[torch.Tensor] = []
    maxima: list[torch.Tensor] = []
    for begin in range(0, ref.numel(), TORCH_BLOCK):
        r = ref[begin : begin + TORCH_BLOCK].to(torch.float64)
        c = cand[begin : begin + TORCH_BLOCK].to(torch.float64)
        nan_r, nan_c, inf_r, inf_c = torch.isnan(r), torch.isnan(c), torch.isinf(r), torch.isinf(c)
        bad = nan_r | nan_c | inf_r | inf_c
        differ = (nan_r != nan_c) | ((inf_r | inf_c) & (r != c))
        r, c = r.masked_fill(bad, 0.0), c.masked_fill(bad, 0.0)  # zeros add nothing to the sums and maxima
        diff = (r - c).abs_()
        counts = torch.stack([nan_r.sum(), nan_c.sum(), inf_r.sum(), inf_c.sum(), differ.sum(), (~bad).sum()])
        sums.append(torch.cat([counts.to(torch.float64), torch.stack([diff.sum(), r @ c, r @ r, c @ c])]))
        maxima.append(torch.stack([diff.max(), r.abs().max()]))
    total = Moments(size=ref.numel())
    if not sums:
        return total
    summed = torch.stack(sums).sum(0).tolist()
    largest = torch.stack(maxima).amax(0).tolist()
    total.nan_ref, total.nan_cand, total.inf_ref, total.inf_cand, total.differ, total.finite = map(int, summed[:6])
    total.sum_abs, total.dot, total.ref_sq, total.cand_sq = summed[6:]
    total.max_abs, total.ref_max_abs = largest
    # Values past 1e154 (numpy scales them), or NaN/Inf that differ, where an infinity against a mask value of its
    # sign agrees (module docstring): rare, so the host's pass, one rule in one place, decides.
    if total.differ or not (math.isfinite(total.ref_sq) and math.isfinite(total.cand_sq)):
        return _numpy_moments(to_host(reference), to_host(candidate))
    return total


def _torch_rel_err(reference: Any, candidate: Any) -> float | None:
    """`finite_rel_err` by `_torch_moments` on the candidate's device (the reference copied there)."""
    import torch

    device = next(v.device for v in (candidate, reference) if isinstance(v, torch.Tensor))
    with warnings.catch_warnings():  # a value spilled to disk is a read-only memmap: only read here
        warnings.simplefilter("ignore", UserWarning)
        g, b = _as_torch(reference, device).detach(), _as_torch(candidate, device).detach()
    if g.numel() != b.numel() or not g.is_floating_point() or not b.is_floating_point():
        return None
    return _finite_rel_err(_torch_moments(g, b), g, b)


def _as_torch(value: Any, device: torch.device) -> torch.Tensor:
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    array = np.asarray(value)
    if array.dtype.kind == "V" or array.dtype.name.startswith(("bfloat16", "float8")):  # ml_dtypes
        array = array.astype(np.float32)
    return torch.from_numpy(np.ascontiguousarray(array)).to(device)


def _numpy_view(value: Any) -> np.ndarray | None:
    """`value` as a numpy array without a copy: an array as it is, a CPU tensor of a numpy dtype; else None."""
    if not _is_torch(value):
        return np.asarray(value)
    if value.device.type != "cpu" or str(value.dtype) in ("torch.bfloat16",) or "float8" in str(value.dtype):
        return None
    view: np.ndarray = value.detach().resolve_conj().resolve_neg().numpy()
    return view


def _is_torch(value: Any) -> bool:
    """Whether `value` is a torch tensor (without importing torch when it is not loaded)."""
    return type(value).__module__.startswith("torch") and hasattr(value, "device")


def _is_real_float(array: np.ndarray) -> bool:
    return array.dtype.kind == "f"


def _is_float(array: np.ndarray) -> bool:
    return np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.complexfloating)


def _finite_max_abs(array: np.ndarray) -> float:
    values = np.abs(array.astype(np.float64, copy=False))
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else 0.0


def _shape(array: np.ndarray) -> str:
    return "x".join(map(str, array.shape)) or "scalar"
