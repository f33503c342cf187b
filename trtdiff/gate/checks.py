"""The CI gate: thresholds over many samples, on final outputs, every layer, and mIoU.

A single comparison gates every layer (the first divergence fails it). Over several samples
(an inputs folder, N random samples) the first sample is still compared layer by layer, for
localization, and every sample's final outputs are gated; `per_layer` gates the layers too.
Final outputs must be finite on both sides: cosine and errors are computed over the finite
positions, so a NaN output would otherwise pass with cosine 1. Each (threshold, backend
pair) is one `ThresholdCheck`; renderers word it.

A figure computed over no finite values (an output that is NaN/Inf everywhere) is n/a (None),
not the cosine 1 and error 0 of an empty sum: a check whose figure is n/a on some sample
fails there, with worst n/a. So `passed` means every check held on finite numbers; the finite
check says why the numbers are missing. (Failing rather than a third "not evaluated" state
keeps the verdict a plain conjunction that CI systems and older readers understand.)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from trtdiff.report import BackendPair, ThresholdCheck

if TYPE_CHECKING:
    from trtdiff.options import GateOptions
    from trtdiff.report import (
        CheckMetric,
        CheckScope,
        Layer,
        PairMetrics,
        QuantizedWeight,
        SampleResult,
        SegmentationSummary,
        Threshold,
        Thresholds,
    )

Figure = tuple[str, float | None]


_OUTPUT_RULES: tuple[tuple[Threshold, CheckMetric, bool], ...] = (
    ("min_cosine", "cosine", True),
    ("rtol", "rel_err", False),
    ("max_abs", "max_abs", False),
)


def output_checks(
    samples: Sequence[SampleResult],
    thresholds: Thresholds,
    pairs: Sequence[BackendPair],
    unquantized: frozenset[str] = frozenset(),
) -> list[ThresholdCheck]:
    """Cosine, relative and (if set) absolute error of every sample's final outputs, and their finiteness, per pair.

    A quantized graph's outputs against the float model (`unquantized`: its sources) are judged by their cosine
    against `quant_min_cosine` alone: quantization moves every value by design, and the direction is what holds."""
    checks: list[ThresholdCheck] = []
    for pair in pairs:
        figures = [
            (s.name, m) for s in samples for per_pair in s.outputs.values() if (m := per_pair.get(pair)) is not None
        ]
        if not figures:
            continue
        if pair.reference in unquantized or pair.candidate in unquantized:
            values = [(name, _value(m, "cosine")) for name, m in figures]
            limit = thresholds.quant_min_cosine
            failing = tuple(dict.fromkeys(name for name, v in values if _breaks(v, limit, True)))
            worst = _worst(values, min)
            checks.append(_check("outputs", "quant_min_cosine", "cosine", pair, limit, worst, failing, len(samples)))
            checks.append(_finite_check(samples, figures, thresholds.allow_nonfinite, pair))
            continue
        floats = [(name, m) for name, m in figures if m.quant_steps is None and m.noise_ratio is None]
        for threshold, metric, is_minimum in _OUTPUT_RULES:
            limit = getattr(thresholds, threshold)
            if limit is None or not floats:
                continue
            values = [(name, _value(m, metric)) for name, m in floats]
            failing = tuple(dict.fromkeys(name for name, v in values if _breaks(v, limit, is_minimum)))
            worst = _worst(values, min if is_minimum else max)
            checks.append(_check("outputs", threshold, metric, pair, limit, worst, failing, len(samples)))
        # outputs a DequantizeLinear makes: in its steps (analysis.quant); reduced-precision outputs in their
        # noise ratio (analysis.reduced); not cosine and rtol
        for threshold, metric in (("max_quant_steps", "quant_steps"), ("max_noise_ratio", "noise_ratio")):
            judged = [(name, value) for name, m in figures if (value := getattr(m, metric)) is not None]
            if judged:
                limit = getattr(thresholds, threshold)
                failing = tuple(dict.fromkeys(name for name, v in judged if _breaks(v, limit, False)))
                worst = _worst(judged, max)
                checks.append(_check("outputs", threshold, metric, pair, limit, worst, failing, len(samples)))
        checks.append(_finite_check(samples, figures, thresholds.allow_nonfinite, pair))
    return checks


def weight_checks(weights: Sequence[QuantizedWeight], thresholds: Thresholds) -> list[ThresholdCheck]:
    """A QDQ file's weights and biases against the PyTorch parameters they quantize, in steps of their
    scale (analysis.quant.quantized_weights), against `max_quant_steps`; none where no weight was compared."""
    compared = [(w.node, w.steps) for w in weights if w.steps is not None]
    if not compared:
        return []
    limit = thresholds.max_quant_steps
    failing = tuple(name for name, steps in compared if _breaks(steps, limit, False))
    worst = _worst(compared, max)
    return [_check("weights", "max_quant_steps", "quant_steps", "torch", limit, worst, failing, len(compared))]


def _finite_check(
    samples: Sequence[SampleResult], figures: Sequence[tuple[str, PairMetrics]], allow: bool, pair: BackendPair
) -> ThresholdCheck:
    """No NaN/Inf in final outputs on either side; with `allow`, only at the same positions on both sides."""
    values: list[tuple[str, float]] = [
        (name, float(m.non_finite_mismatches if allow else m.nan_ref + m.inf_ref + m.nan_cand + m.inf_cand))
        for name, m in figures
    ]
    failing = tuple(dict.fromkeys(name for name, v in values if v > 0))
    metric: CheckMetric = "non_finite_mismatches" if allow else "non_finite"
    return _check("outputs", "finite", metric, pair, 0.0, _worst(values, max), failing, len(samples))


def layer_checks(layers: Sequence[Layer], sample: str, pairs: Sequence[BackendPair]) -> list[ThresholdCheck]:
    """Every compared layer of `sample` agrees, per pair (the single-comparison gate)."""
    checks: list[ThresholdCheck] = []
    for pair in pairs:
        metrics = [m for layer in layers if (m := layer.pairs.get(pair)) is not None]
        if not metrics:
            continue
        diverged = sum(m.diverged for m in metrics)
        cosines = [m.cosine for m in metrics if m.cosine is not None]  # layers NaN/Inf everywhere have none
        worst = min(cosines, key=lambda v: -math.inf if math.isnan(v) else v) if cosines else None
        failing = (sample,) if diverged else ()
        check = _check("layers", "layers", "divergence", pair, 0.0, (sample, worst), failing, len(metrics))
        screened = sum(m.statistics and not m.diverged for m in metrics)
        checks.append(dataclasses.replace(check, failed=diverged, screened=screened))
    return checks


def miou_checks(
    samples: Sequence[SampleResult],
    summary: SegmentationSummary,
    options: GateOptions,
    pairs: Sequence[BackendPair],
    reference: str,
) -> list[ThresholdCheck]:
    """The minimum mIoU against labels (or agreement without them) and the maximum drop, per candidate."""
    checks: list[ThresholdCheck | None] = []
    candidates = [pair for pair in pairs if pair.reference == reference]
    if options.min_miou is not None:
        checks += [_min_miou_check(samples, summary, pair, options.min_miou) for pair in candidates]
    if options.max_miou_drop is not None:
        for backend, drop in summary.miou_drop.items():
            passed = not _breaks(drop, options.max_miou_drop, is_minimum=False)
            check = _check("labels", "max_miou_drop", "miou_drop", backend, options.max_miou_drop, (None, drop), (), 0)
            checks.append(dataclasses.replace(check, passed=passed, compared=len(samples)))
    return [check for check in checks if check is not None]


def _min_miou_check(
    samples: Sequence[SampleResult], summary: SegmentationSummary, pair: BackendPair, limit: float
) -> ThresholdCheck | None:
    labelled = bool(summary.label_miou)
    backend = pair.candidate
    figure = summary.label_miou.get(backend) if labelled else summary.agreement_miou.get(pair)
    if figure is None:
        return None
    per_sample = [(s.name, s.label_miou.get(backend) if labelled else s.agreement_miou.get(pair)) for s in samples]
    known = [(name, v) for name, v in per_sample if v is not None]
    failing = tuple(name for name, v in known if _breaks(v, limit, is_minimum=True))
    worst_name, worst_value = _worst(known, min)
    scope: CheckScope = "labels" if labelled else "agreement"
    check = _check(scope, "min_miou", "miou", backend if labelled else pair, limit, (worst_name, figure), failing, 0)
    passed = not _breaks(figure, limit, is_minimum=True)
    return dataclasses.replace(check, passed=passed, compared=len(samples), worst_sample_value=worst_value)


def _check(
    scope: CheckScope,
    threshold: Threshold,
    metric: CheckMetric,
    subject: BackendPair | str,
    limit: float,
    worst: tuple[str | None, float | None],
    failing: tuple[str, ...],
    compared: int,
) -> ThresholdCheck:
    """One check of `threshold` on a pair (or, against labels, a backend): it fails where samples fail."""
    return ThresholdCheck(
        id=ThresholdCheck.make_id(scope, threshold, subject),
        scope=scope,
        threshold=threshold,
        metric=metric,
        pair=subject if isinstance(subject, BackendPair) else None,
        backend=subject if isinstance(subject, str) else None,
        limit=float(limit),
        worst=worst[1],
        worst_sample=worst[0],
        passed=not failing,
        failing_samples=failing,
        compared=compared,
        failed=len(failing),
    )


def _value(metrics: PairMetrics, metric: CheckMetric) -> float | None:
    """The sample's figure, or None where it is n/a (no finite values to compute it over)."""
    figure = getattr(metrics, metric)
    return None if figure is None else float(figure)


def _breaks(value: float | None, limit: float, is_minimum: bool) -> bool:
    """Whether `value` breaks `limit`: n/a and NaN always do (a threshold holds on numbers only)."""
    if value is None or math.isnan(value):
        return True
    return value < limit if is_minimum else value > limit


def _worst(values: Sequence[Figure], pick: Callable[..., Figure]) -> tuple[str | None, float | None]:
    """The worst (sample, figure): the first n/a, else the first NaN, else `pick` (min or max) of the numbers."""
    if not values:
        return None, float("nan")
    missing = [(n, v) for n, v in values if v is None or math.isnan(v)]
    if missing:
        return next((item for item in missing if item[1] is None), missing[0])
    return pick(values, key=lambda item: item[1])
