"""Compare one candidate tensor with its reference: direction, magnitude, non-finite values.

Cosine similarity alone is blind to a pure scale error and max-abs alone is blind to
magnitude, so a tensor diverges when its direction drifts (cosine below `min_cosine`) or
its error is large against the reference's own magnitude (`rel_err` above `rtol`), or, when
asked, above an absolute bound. Integer and bool tensors must match exactly.

NaN and Inf are compared by position: both sides holding NaN (or the same infinity) at the
same places agree, as a -inf attention mask does in every backend; a NaN or Inf where the
other side has something else diverges. Whether final outputs may hold them at all is the
gate's question (trtdiff.gate.checks), not this one's.
"""

from __future__ import annotations

import numpy as np

from trtdiff.pairing.views import view_compatible
from trtdiff.report import PairMetrics, Reason, Thresholds
from trtdiff.source.inputs import non_finite_counts


def compare_tensors(reference: np.ndarray, candidate: np.ndarray, thresholds: Thresholds) -> PairMetrics:
    """Metrics of `candidate` against `reference`, with the divergence verdict and its reasons."""
    reference = np.asarray(reference)
    candidate = np.asarray(candidate)
    if reference.shape != candidate.shape:
        if view_compatible(reference.shape, candidate.shape):
            candidate = candidate.reshape(reference.shape)
        else:
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
    if not _is_float(reference) and not _is_float(candidate):
        return _exact(reference, candidate)
    ref = reference.astype(np.float64, copy=False).ravel()
    cand = candidate.astype(np.float64, copy=False).ravel()
    nan_r, nan_c, inf_r, inf_c = np.isnan(ref), np.isnan(cand), np.isinf(ref), np.isinf(cand)
    nan_ref, nan_cand = int(np.count_nonzero(nan_r)), int(np.count_nonzero(nan_c))
    inf_ref, inf_cand = int(np.count_nonzero(inf_r)), int(np.count_nonzero(inf_c))
    differ = 0
    if nan_ref or nan_cand or inf_ref or inf_cand:
        # Not the same kind of value: NaN against anything else, or an infinity against a different value.
        differ = int(np.count_nonzero((nan_r != nan_c) | ((inf_r | inf_c) & (ref != cand))))
        finite = ~(nan_r | nan_c | inf_r | inf_c)
        ref, cand = ref[finite], cand[finite]
    del nan_r, nan_c, inf_r, inf_c
    diff = np.abs(ref - cand)
    max_abs = float(diff.max()) if diff.size else 0.0
    mean_abs = float(diff.mean()) if diff.size else 0.0
    ref_max_abs = float(np.abs(ref).max()) if ref.size else 0.0
    rel_err = max_abs / ref_max_abs if ref_max_abs > 0 else (0.0 if max_abs == 0 else float("inf"))
    cosine = _cosine(ref, cand)
    reasons: list[Reason] = []
    if cosine < thresholds.min_cosine:
        reasons.append(Reason("cosine", cosine, thresholds.min_cosine))
    if rel_err > thresholds.rtol:
        reasons.append(Reason("rel_err", rel_err, thresholds.rtol))
    if thresholds.max_abs is not None and max_abs > thresholds.max_abs:
        reasons.append(Reason("max_abs", max_abs, thresholds.max_abs))
    if differ:
        where = f"{differ} of {reference.size} positions"
        reasons.append(Reason("non_finite", float(nan_cand + inf_cand), float(nan_ref + inf_ref), detail=where))
    return PairMetrics(
        cosine=cosine,
        max_abs=max_abs,
        mean_abs=mean_abs,
        rel_err=rel_err,
        ref_max_abs=ref_max_abs,
        nan_ref=nan_ref,
        nan_cand=nan_cand,
        inf_ref=inf_ref,
        inf_cand=inf_cand,
        diverged=bool(reasons),
        reasons=tuple(reasons),
        non_finite_mismatches=differ,
    )


def _cosine(ref: np.ndarray, cand: np.ndarray) -> float:
    norm_ref, norm_cand = float(np.linalg.norm(ref)), float(np.linalg.norm(cand))
    if norm_ref == 0.0 and norm_cand == 0.0:
        return 1.0
    if norm_ref == 0.0 or norm_cand == 0.0:
        return 0.0
    return float(np.clip(np.dot(ref, cand) / (norm_ref * norm_cand), -1.0, 1.0))


def _exact(reference: np.ndarray, candidate: np.ndarray) -> PairMetrics:
    mismatches = int(np.count_nonzero(reference != candidate))
    diff = np.abs(reference.astype(np.float64) - candidate.astype(np.float64)).ravel()
    max_abs = float(diff.max()) if diff.size else 0.0
    ref_max_abs = _finite_max_abs(reference)
    reasons = (Reason("mismatches", float(mismatches), float(reference.size)),) if mismatches else ()
    return PairMetrics(
        cosine=1.0 if mismatches == 0 else float(1.0 - mismatches / max(reference.size, 1)),
        max_abs=max_abs,
        mean_abs=float(diff.mean()) if diff.size else 0.0,
        rel_err=max_abs / ref_max_abs if ref_max_abs else (0.0 if max_abs == 0 else float("inf")),
        ref_max_abs=ref_max_abs,
        mismatches=mismatches,
        diverged=bool(mismatches),
        reasons=reasons,
    )


def _is_float(array: np.ndarray) -> bool:
    return np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.complexfloating)


def _finite_max_abs(array: np.ndarray) -> float:
    values = np.abs(array.astype(np.float64, copy=False))
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else 0.0


def _shape(array: np.ndarray) -> str:
    return "x".join(map(str, array.shape)) or "scalar"
