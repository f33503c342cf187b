"""The wording and number formats every renderer shares, so a figure reads the same everywhere.

Numbers: cosines with six places (`cosine`), errors in scientific notation with three
significant digits (`sci`), mIoU with four places; `format_value` picks by metric. Words: a
divergence reason (`reason_text`), a threshold check's one-line message (`check_message`)
and its limit (`limit_text`), the inputs line, TensorRT's precision, short backend names,
the pieces of the first-divergence sentence, the culprit, attribution and drift sentences,
and where NaN/Inf first appear (`non_finite_lines`).
Each renderer escapes the text for its own format; functions that embed names take `code`,
applied to each name (an identity by default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from trtdiff.report import (
    Attribution,
    BackendPair,
    Contributor,
    Culprit,
    Drift,
    FirstDivergence,
    NonFinite,
    Reason,
    Report,
    SegmentationSummary,
    TensorRTSummary,
    ThresholdCheck,
    Thresholds,
)
from trtdiff.report.runtime import engines_line as engines_line, precision_text as precision_text
from trtdiff.report.text import html as safe_html

BACKEND_SHORT = {"torch": "pt", "onnxruntime": "ort", "tensorrt": "trt"}
MAX_SUSPECTS = 8
MAX_CONTRIBUTORS = 3
MAX_NOISE_NAMES = 8
NOISE_WORDS = "rounding, a few ULP"
"""What a noise-level local error is (`Culprit.noise_level`, defined in trtdiff.analysis.noise), in words."""
_MINIMUM_METRICS = {"cosine", "miou", "divergence"}
_THRESHOLD_WORDS = {
    "min_cosine": "min-cosine",
    "rtol": "rtol",
    "max_abs": "max-abs",
    "max_quant_steps": "max-quant-steps",
    "max_noise_ratio": "max-noise-ratio",
}
NOTHING = "nothing measurable"
"""A recovery below noise, in a column that says what it measures (HTML's mIoU column)."""
_VERDICT_WORDS = {"export": "export problem", "runtime": "runtime problem", "unknown": "cause unknown"}


def _same(text: str) -> str:
    return text


# Numbers


NOT_AVAILABLE = "n/a"
"""A figure computed over no finite values (None in the report): every format writes it so."""


def sci(value: float | None) -> str:
    """An error figure: three significant digits in scientific notation, e.g. 2.64e-02 (nan, inf as words; n/a)."""
    if value is None:
        return NOT_AVAILABLE
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.2e}"


def cosine(value: float | None) -> str:
    """A cosine similarity: six places, as cosines near 1 need (0.999854); n/a over no finite values."""
    if value is None:
        return NOT_AVAILABLE
    return "nan" if math.isnan(value) else f"{value:.6f}"


def miou(value: float | None) -> str:
    """An mIoU (or mIoU drop): four places."""
    return "nan" if value is None or math.isnan(value) else f"{value:.4f}"


def percent(value: float | None) -> str:
    """A fraction as a percentage with two places (0.001 -> 0.10%); "?" when unknown."""
    return "?" if value is None or math.isnan(value) else f"{100 * value:.2f}%"


def format_value(metric: str, figure: float | None) -> str:
    """A check or reason figure at the precision its metric needs (n/a when there is none)."""
    if figure is None:
        return NOT_AVAILABLE
    if metric in ("cosine", "divergence"):
        return cosine(figure)
    if metric in ("miou", "miou_drop"):
        return miou(figure)
    if metric in ("non_finite", "non_finite_mismatches"):
        return _count(figure)
    return sci(figure)


def shape_text(shape: Iterable[int]) -> str:
    """1x3x64x64."""
    return "x".join(map(str, shape))


def inputs_text(inputs: dict[str, tuple[int, ...]]) -> str:
    """The inputs line: "x 1x3x64x64, mask 1x64x64"."""
    return ", ".join(f"{name} {shape_text(shape)}" for name, shape in inputs.items())


def plural(count: int, word: str) -> str:
    """ "1 check", "3 checks"."""
    return f"{count} {word}{'' if count == 1 else 's'}"


# Backends and precision


def short_backend(name: str) -> str:
    """pt, ort, trt; other backends keep their name."""
    return BACKEND_SHORT.get(name, name)


def short_pair(pair: BackendPair) -> str:
    """pt~ort."""
    return f"{short_backend(pair.reference)}~{short_backend(pair.candidate)}"


def thresholds_text(thresholds: Thresholds) -> str:
    """min-cosine 0.9999, rtol 0.001 (, max-abs 0.01)."""
    text = f"min-cosine {thresholds.min_cosine:g}, rtol {thresholds.rtol:g}"
    if thresholds.max_abs is not None:
        text += f", max-abs {thresholds.max_abs:g}"
    return text


# Reasons and checks


def reason_text(reason: Reason) -> str:
    """Why a tensor counts as diverged, e.g. "cosine 0.999854 < 0.9999" or "rel-err 2.64e-02 > 0.001"."""
    limit = math.nan if reason.limit is None else reason.limit
    if reason.metric == "cosine":
        return f"cosine {reason.value:.6f} < {limit:g}"
    if reason.metric == "rel_err":
        return f"rel-err {reason.value:.2e} > {limit:g}"
    if reason.metric == "max_abs":
        return f"max-abs {reason.value:.2e} > {limit:g}"
    if reason.metric == "non_finite":
        where = f" differ at {reason.detail}" if reason.detail else ""
        return f"non-finite values{where}: reference {_count(limit)} NaN/Inf, candidate {_count(reason.value)} NaN/Inf"
    if reason.metric == "shape":
        return f"shape {reason.detail or '?'}"
    if reason.metric == "quant_steps":
        return f"{reason.value:.1f} quantization steps > {limit:g} (of {reason.detail or '?'})"
    if reason.metric == "quant_scale":
        return f"unusable quantization scale: {reason.detail or '?'}"
    if reason.metric == "noise_ratio":
        return f"{reason.value:.1f}x the error {reason.detail or 'the precision'} makes here > {limit:g}"
    return f"{_count(reason.value)} of {_count(limit)} elements differ"


def reasons_text(reasons: Iterable[Reason]) -> str:
    """Every reason, joined by "; "."""
    return "; ".join(reason_text(reason) for reason in reasons)


def _count(figure: float | None) -> str:
    return "?" if figure is None or math.isnan(figure) else str(int(figure))


def _general(figure: float | None) -> str:
    """A check's worst figure, six significant digits; n/a over no finite values."""
    return NOT_AVAILABLE if figure is None else f"{figure:.6g}"


def check_message(check: ThresholdCheck, report: Report) -> str:
    """One line on what a check measured, e.g. "min-cosine 0.9999 on final outputs of 3 sample(s): worst ..."."""
    if check.scope == "weights":
        fault = next((w.fault for w in report.weights if w.node == check.worst_sample and w.fault), "")
        return (
            f"max-quant-steps {check.limit:g} on {check.compared} quantized weights against the PyTorch "
            f"parameters: worst {_general(check.worst)} steps ({check.worst_sample}{': ' + fault if fault else ''})"
        )
    if check.threshold in _THRESHOLD_WORDS:
        return (
            f"{_THRESHOLD_WORDS[check.threshold]} {check.limit:g} on final outputs of {check.compared} sample(s): "
            f"worst {check.metric} {_general(check.worst)} ({check.worst_sample})"
        )
    if check.threshold == "finite":
        outputs = f"final outputs of {check.compared} sample(s)"
        if check.metric == "non_finite_mismatches":
            return (
                f"NaN/Inf allowed at the same positions on both sides in {outputs}: "
                f"worst {_count(check.worst)} positions differ ({check.worst_sample})"
            )
        return f"no NaN/Inf in {outputs}: worst {_count(check.worst)} NaN/Inf values ({check.worst_sample})"
    if check.threshold == "layers":
        message = f"{check.failed} of {check.compared} layers diverge; lowest cosine {_general(check.worst)}"
        if check.screened:
            message += f"; {check.screened} only screened by statistics (--capture stats), not compared value by value"
        first = report.first_divergence
        if check.failed and first is not None:
            message += f"; first divergence {first.onnx_node} ({first.op_type})"
        return message
    if check.threshold == "min_miou":
        against = "against labels" if check.scope == "labels" else f"agreement with {report.reference}"
        sample_value = math.nan if check.worst_sample_value is None else check.worst_sample_value
        return (
            f"mIoU {miou(check.worst)} {against} (min {check.limit:g}); "
            f"worst sample {check.worst_sample} {sample_value:.4f}"
        )
    labels = report.segmentation.label_miou if report.segmentation is not None else {}
    before = labels.get(report.reference, math.nan)
    after = labels.get(check.backend or "", math.nan)
    return (
        f"mIoU drop {miou(check.worst)} relative to {report.reference} (max {check.limit:g}): "
        f"{before:.4f} -> {after:.4f}"
    )


def agreeing_text(report: Report, noun: str = "tensors", pairs: str = "") -> str:
    """ "all 51 compared tensors agree (PAIRS)", or with screened layers (--capture stats) "no compared tensor
    diverges (PAIRS): 1 agrees in full, 50 only screened by statistics (--capture stats)": screened layers are
    never said to agree."""
    within = f" ({pairs})" if pairs else ""
    screened = len(report.screened)
    if not screened:
        return f"all {len(report.layers)} compared {noun} agree{within}"
    full = len(report.layers) - screened
    return (
        f"no compared {noun[:-1]} diverges{within}: {full} {'agrees' if full == 1 else 'agree'} in full, {screened} "
        "only screened by statistics (--capture stats)"
    )


def limit_text(check: ThresholdCheck, thresholds: Thresholds, *, symbols: bool = False) -> str:
    """The threshold in words, e.g. "cosine >= 0.9999" or "no diverged layer (min-cosine 0.9999, rtol 0.001)".

    With `symbols`, ≥ and ≤ instead of >= and <=.
    """
    if check.metric == "divergence":
        return f"no diverged layer ({thresholds_text(thresholds)})"
    if check.metric == "non_finite":
        return "no NaN/Inf"
    if check.metric == "non_finite_mismatches":
        return "NaN/Inf at the same positions"
    minimum = check.metric in _MINIMUM_METRICS
    sign = ("≥" if minimum else "≤") if symbols else (">=" if minimum else "<=")
    return f"{check.metric} {sign} {check.limit:g}"


# The first divergence


def module_text(module: str | None, code: Callable[[str], str] = _same) -> str:
    """ "module decoder", "the model itself" (top level, module path ""), or "no PyTorch module"."""
    if module is None:
        return "no PyTorch module"
    return f"module {code(module)}" if module else "the model itself"


def node_text(
    node: FirstDivergence | Culprit | Contributor | NonFinite,
    code: Callable[[str], str] = _same,
    text: Callable[[str], str] = _same,
) -> str:
    """ "/decoder/Resize (Resize, module decoder)"; names through `code`, words through `text`."""
    return f"{code(node.onnx_node)} ({text(node.op_type)}, {module_text(node.module, code)})"


def divergence_node(
    first: FirstDivergence, code: Callable[[str], str] = _same, text: Callable[[str], str] = _same
) -> str:
    """ "/decoder/Resize (Resize, module decoder)"; names through `code`, words through `text`."""
    return node_text(first, code, text)


def divergence_head(
    first: FirstDivergence, code: Callable[[str], str] = _same, text: Callable[[str], str] = _same
) -> str:
    """ "/decoder/Resize (Resize, module decoder) on torch~onnxruntime"."""
    return f"{divergence_node(first, code, text)} on {text(str(first.pair))}"


def divergence_figures(first: FirstDivergence) -> str:
    """ "cosine 0.999854, max-abs 1.04e-02, rel-err 2.64e-02" and the reasons in brackets."""
    figures = f"cosine {cosine(first.cosine)}, max-abs {sci(first.max_abs)}, rel-err {sci(first.rel_err)}"
    return figures + (f" ({reasons_text(first.reasons)})" if first.reasons else "")


def suspects_text(first: FirstDivergence, code: Callable[[str], str] = _same, limit: int | None = MAX_SUSPECTS) -> str:
    """ "/decoder/Resize, then /decoder/Concat, /decoder/Div, … 3 more"; "" without other suspects."""
    others = [s for s in first.suspects if s != first.onnx_node]
    if not others:
        return ""
    shown = others if limit is None else others[:limit]
    more = f", … {len(others) - len(shown)} more" if len(others) > len(shown) else ""
    return f"{code(first.onnx_node)}, then {', '.join(code(s) for s in shown)}{more}"


def layer_index(report: Report, tensor: str) -> int | None:
    """The number of `tensor` among the compared layers (`Layer.index`, counted from 1), or None."""
    return next((layer.index for layer in report.layers if layer.tensor == tensor), None)


# Culprits, attribution and drift


def culprits_of(report: Report) -> tuple[Culprit, ...]:
    """The culprits in topological order (`culprit` alone when a report lists no others)."""
    if report.culprits:
        return report.culprits
    return (report.culprit,) if report.culprit is not None else ()


def grouped_culprits(report: Report) -> tuple[tuple[Culprit, ...], tuple[Culprit, ...]]:
    """The culprits shown one by one (the first always), and the further ones whose local error is rounding
    noise (`Culprit.noise_level`), which views name together in one line (`noise_text`)."""
    culprits = culprits_of(report)
    noise = tuple(c for c in culprits[1:] if c.noise_level)
    return tuple(c for c in culprits if c not in noise), noise


def noise_text(noise: Sequence[Culprit], code: Callable[[str], str] = _same, text: Callable[[str], str] = _same) -> str:
    """ "3 more nodes with noise-level local error (rounding, a few ULP): /a, /b, /c": the first
    `MAX_NOISE_NAMES` named, "…" for the rest (every one is in the JSON report)."""
    names = ", ".join(code(c.onnx_node) for c in noise[:MAX_NOISE_NAMES])
    more = text(" …") if len(noise) > MAX_NOISE_NAMES else ""
    nodes = "node" if len(noise) == 1 else "nodes"
    head = f"{len(noise)} more {nodes} with noise-level local error ({NOISE_WORDS}): "
    return f"{text(head)}{names}{more}"


def local_vs_accumulated(culprit: Culprit, *, with_cosine: bool = True) -> str:
    """ "local rel-err 2.10e-02 vs accumulated 2.10e-02, cosine 0.999730" (the cosine is the local one);
    for a node whose own NaN/Inf differ, "NaN/Inf differ at 2 positions here (accumulated: 2)"."""
    if culprit.local.non_finite_mismatches:
        return (
            f"NaN/Inf differ at {culprit.local.non_finite_mismatches} positions here "
            f"(accumulated: {culprit.accumulated.non_finite_mismatches})"
        )
    if culprit.local.quant_steps is not None:
        return quant_text(culprit)
    if culprit.local.noise_ratio is not None:
        return ratio_text(culprit)
    text = f"local rel-err {sci(culprit.local.rel_err)} vs accumulated {sci(culprit.accumulated.rel_err)}"
    return f"{text}, cosine {cosine(culprit.local.cosine)}" if with_cosine else text


def quant_text(culprit: Culprit) -> str:
    """ "local error 99.7 quantization steps vs accumulated 97.0 (99.9th percentile of |delta| over the scale of
    /x_DequantizeLinear (scale 0.00764, zero point -128, int8)), max-abs 7.92e-01" """
    accumulated = culprit.accumulated.quant_steps
    text = (
        f"local error {_steps(culprit.local.quant_steps)} quantization steps vs accumulated {_steps(accumulated)} "
        f"(99.9th percentile of |delta| over the scale of {culprit.quantization or '?'}), "
        f"max-abs {sci(culprit.local.max_abs)}"
    )
    return text + _exclude_text(culprit)


def ratio_text(culprit: Culprit) -> str:
    """ "local error 41.0x its precision's own vs accumulated 39.2x (rel-err 4.0e-02 ...)" for a culprit of a
    reduced-precision comparison, with the nodes to keep in higher precision."""
    local, accumulated = culprit.local, culprit.accumulated
    text = (
        f"local error {_steps(local.noise_ratio)}x its precision's own vs accumulated "
        f"{_steps(accumulated.noise_ratio)}x (rel-err {sci(local.rel_err)} over what the precision's PyTorch "
        "benchmark makes here)"
    )
    return text + _exclude_text(culprit)


def _exclude_text(culprit: Culprit) -> str:
    """ "; keep in higher precision (ModelOpt nodes_to_exclude, --exclude-list): ^/a\\Z" where the culprit has any."""
    if not culprit.exclude:
        return ""
    return f"; keep in higher precision (ModelOpt nodes_to_exclude, --exclude-list): {' '.join(culprit.exclude)}"


def _steps(figure: float | None) -> str:
    return NOT_AVAILABLE if figure is None else f"{figure:.1f}"


def verdict_text(culprit: Culprit, *, short: bool = False) -> str:
    """ "export problem (the ONNX spec computes the same)", "runtime problem (...)", "cause unknown (...)"."""
    if short:
        return _VERDICT_WORDS[culprit.verdict]
    if culprit.verdict == "export":
        why = "the ONNX spec computes the same"
    elif culprit.verdict == "runtime":
        why = f"{culprit.pair.candidate} deviates from the ONNX spec"
    else:
        why = "the ONNX spec agrees with neither side" if culprit.spec is not None else "no ONNX spec evaluation"
    return f"{_VERDICT_WORDS[culprit.verdict]} ({why})"


def culprit_marker(culprit: Culprit, index: int | None = None) -> str:
    """ "/decoder/Resize (Resize, export problem)"; with the layer's index, the plot's "culprit: #2 ..."."""
    short = f"{culprit.onnx_node} ({culprit.op_type}, {verdict_text(culprit, short=True)})"
    return short if index is None else f"culprit: #{index} {short}"


def culprits_brief(report: Report) -> str:
    """ "culprit /decoder/Resize (Resize, export problem)", or "culprits a (...), b (...)"; "" without culprits."""
    named = [culprit_marker(c) for c in culprits_of(report)]
    return f"culprit{'s' if len(named) > 1 else ''} {', '.join(named)}" if named else ""


def attribution_of(report: Report, culprit: Culprit) -> Attribution | None:
    """The attribution of `culprit`: same pair, same tensor (or, failing that, same node)."""
    found = [a for a in report.attribution if a.pair == culprit.pair and a.onnx_node == culprit.onnx_node]
    return next((a for a in found if a.tensor == culprit.tensor), found[0] if found else None)


def miou_lost(report: Report, attribution: Attribution) -> float | None:
    """The mIoU the candidate lost: the reference's mIoU against labels (1 for agreement) minus its own."""
    if attribution.miou_before is None:
        return None
    labels = report.segmentation.label_miou if report.segmentation is not None else {}
    pair = attribution.pair
    ceiling = labels[pair.reference] if pair.reference in labels and pair.candidate in labels else 1.0
    return ceiling - attribution.miou_before


def _recovers(report: Report, a: Attribution, *, alone: bool) -> str | None:
    """ "0.1450 of 0.1540 mIoU", "nothing measurable", or None without mIoU (or with a NaN one: NaN logits)."""
    recovered = a.miou_recovered_alone if alone else a.miou_recovered
    lost = miou_lost(report, a)
    if recovered is None or lost is None or math.isnan(recovered) or math.isnan(lost):
        return None
    return (
        _nothing(a)
        if (a.measurable_alone if alone else a.measurable) is False
        else f"{miou(recovered)} of {miou(lost)} mIoU"
    )


def _by_miou(a: Attribution) -> bool:
    """Whether the attribution's `measurable` flags judge the mIoU (segmentation), not the output's error."""
    return a.miou_before is not None and a.miou_after is not None and a.miou_pixel_share is not None


def _nothing(a: Attribution) -> str:
    """A recovery below noise, naming what was measured: the mIoU, or the final output's error."""
    return "no measurable mIoU" if _by_miou(a) else "no measurable part of the output's error"


def _error_recovered_alone(report: Report, a: Attribution) -> bool:
    """Whether fixing the culprit alone recovers more than noise of the final output's error (what
    `Attribution.measurable_alone` says without mIoU: rel-err falls by more than the rtol or cosine
    rises by more than 1 - min-cosine), also where that flag judged the mIoU instead."""
    if not _by_miou(a):
        return a.measurable_alone is not False
    thresholds = report.thresholds
    rel_fall = _nan(a.final_rel_err_before) - _nan(a.final_rel_err_after_alone)
    cos_rise = _nan(a.final_cosine_after_alone) - _nan(a.final_cosine_before)
    return rel_fall > thresholds.rtol or cos_rise > 1.0 - thresholds.min_cosine


def _has_alone(a: Attribution) -> bool:
    """Whether the report says what fixing the culprit alone recovers (reports before that field do not)."""
    return a.final_rel_err_after_alone is not None


def attribution_text(report: Report, attribution: Attribution, earlier: int = 0) -> str:
    """ "injecting torch's value recovers 0.1450 of 0.1540 mIoU (final rel-err 7.46e-01 -> 3.10e-02)".

    Without mIoU, the final cosine instead; below noise "recovers no measurable mIoU" (without mIoU:
    "no measurable part of the output's error"; see `Attribution.measurable`). With `earlier`
    culprits on the pair, first what fixing this one alone recovers, then the cumulative figure:
    "torch's values here and at the 1 earlier culprit".
    """
    a = attribution
    values = f"values here and at the {plural(earlier, 'earlier culprit')}" if earlier else "value"
    cumulative = _recovery(
        report, a, f"injecting {a.pair.reference}'s {values}", a.final_rel_err_after, a.final_cosine_after, alone=False
    )
    if not earlier or not _has_alone(a):
        return cumulative
    alone = _recovery(report, a, "fixing it alone", a.final_rel_err_after_alone, a.final_cosine_after_alone, alone=True)
    return f"{alone}; {cumulative}"


def _recovery(
    report: Report, a: Attribution, head: str, rel_after: float | None, cos_after: float | None, *, alone: bool
) -> str:
    final = f"final rel-err {sci(a.final_rel_err_before)} -> {sci(rel_after)}"
    if a.final_non_finite_before:
        after = a.final_non_finite_after_alone if alone else a.final_non_finite_after
        final += f", final NaN/Inf differing at {a.final_non_finite_before} -> {after} positions"
    recovers = _recovers(report, a, alone=alone)
    if recovers is not None:
        return f"{head} recovers {recovers} ({final})"
    if (a.measurable_alone if alone else a.measurable) is False:
        return f"{head} recovers {_nothing(a)} ({final})"
    return f"{head}: {final}, cosine {cosine(a.final_cosine_before)} -> {cosine(cos_after)}"


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def advice_text(report: Report, culprit: Culprit) -> str:
    """ "fix: re-export at opset 11 or higher (--opset 11): ...", or "fix: as for culprit 1"; "" without advice."""
    if not culprit.advice:
        return ""
    culprits = culprits_of(report)
    for number, other in enumerate(culprits[: culprits.index(culprit)] if culprit in culprits else (), start=1):
        if other.advice == culprit.advice:
            return f"fix: as for culprit {number}"
    return f"fix: {culprit.advice}"


def culprit_text(
    report: Report, culprit: Culprit, code: Callable[[str], str] = _same, text: Callable[[str], str] = _same
) -> str:
    """The culprit sentence: node and pair, local vs accumulated error, verdict, what injecting recovers, the fix."""
    parts = [
        f"{node_text(culprit, code, text)} on {text(str(culprit.pair))}: {text(local_vs_accumulated(culprit))}",
        text(verdict_text(culprit)),
    ]
    if culprit.noise_level:  # a culprit only because the thresholds are tighter than the arithmetic
        parts.insert(1, text(f"noise-level ({NOISE_WORDS}): the thresholds are tighter than the arithmetic"))
    attribution = attribution_of(report, culprit)
    if attribution is not None:
        same_pair = [c for c in culprits_of(report) if c.pair == culprit.pair]
        earlier = same_pair.index(culprit) if culprit in same_pair else 0
        parts.append(text(attribution_text(report, attribution, earlier)))
    fix = advice_text(report, culprit)
    return "; ".join([*parts, text(fix)] if fix else parts)


def culprit_brief(
    report: Report, culprit: Culprit, code: Callable[[str], str] = _same, text: Callable[[str], str] = _same
) -> str:
    """A further culprit in one line: node, local vs accumulated rel-err, verdict, what fixing it alone and
    with the earlier ones recovers, the fix."""
    line = (
        f"{node_text(culprit, code, text)}: {local_vs_accumulated(culprit, with_cosine=False)}, "
        f"{text(verdict_text(culprit, short=True))}"
    )
    if culprit.pair != culprits_of(report)[0].pair:
        line += f" on {text(str(culprit.pair))}"
    a = attribution_of(report, culprit)
    if a is not None:
        if _has_alone(a):
            line += f"; fixing it alone: {_brief_gain(report, a, alone=True)}"
        line += f"; with the earlier ones injected: {_brief_gain(report, a, alone=False)}"
    fix = advice_text(report, culprit)
    return f"{line}; {text(fix)}" if fix else line


def _brief_gain(report: Report, a: Attribution, *, alone: bool) -> str:
    """ "0.1540 of 0.1540 mIoU recovered, final rel-err 2.00e-07" ("no measurable mIoU recovered, ...")."""
    final = f"final rel-err {sci(_nan(a.final_rel_err_after_alone if alone else a.final_rel_err_after))}"
    if a.final_non_finite_before:
        final += f", NaN/Inf differing at {a.final_non_finite_after_alone if alone else a.final_non_finite_after}"
    recovers = _recovers(report, a, alone=alone)
    if recovers is None and (a.measurable_alone if alone else a.measurable) is False:
        recovers = _nothing(a)
    return f"{recovers} recovered, {final}" if recovers is not None else final


def attribution_summary(
    report: Report, code: Callable[[str], str] = _same, text: Callable[[str], str] = _same
) -> list[str]:
    """The closing sentence per pair: which culprit alone carries most of the loss, and how much of it.

    "/Resize alone carries 94% of the 0.1544 mIoU lost" (with mIoU), "/Resize alone carries
    84% of the final output's error (rel-err 7.46e-01)" (without); [] for reports that do not
    say what fixing each culprit alone recovers. Names through `code`, words through `text`.
    """
    found = [(c, a) for c in culprits_of(report) if (a := attribution_of(report, c)) is not None and _has_alone(a)]
    pairs = list(dict.fromkeys(c.pair for c, _ in found))
    sentences = []
    for pair in pairs:
        best, loss = _carries(report, [(c, a) for c, a in found if c.pair == pair])
        where = text(f" on {pair}") if len(pairs) > 1 else ""
        if best is None:
            sentences.append(text(f"no culprit alone recovers a measurable part of {loss}") + where)
        else:
            sentences.append(f"{code(best[0].onnx_node)}{text(f' alone carries {_percent(best[1])} of {loss}')}{where}")
    return sentences


def _percent(share: float) -> str:
    """ "94%"; a share short of the whole is never rounded up to it ("99.5%", "99.9%", not "100%")."""
    whole = f"{100 * share:.0f}%"
    return f"{math.floor(1000 * share) / 10:.1f}%" if whole == "100%" and share < 1.0 else whole


def _carries(report: Report, rows: list[tuple[Culprit, Attribution]]) -> tuple[tuple[Culprit, float] | None, str]:
    """The culprit whose fix alone recovers the largest measurable share of the loss, that share, and the loss."""
    first = rows[0][1]
    lost = miou_lost(report, first)
    if lost is not None and lost > 0 and all(a.miou_recovered_alone is not None for _, a in rows):
        shares = [(c, _nan(a.miou_recovered_alone) / lost) for c, a in rows if a.measurable_alone is not False]
        loss = f"the {miou(lost)} mIoU lost"
    elif first.final_non_finite_before:
        before_nf = first.final_non_finite_before
        shares = [(c, (before_nf - a.final_non_finite_after_alone) / before_nf) for c, a in rows]
        shares = [(c, share) for c, share in shares if share > 0]
        loss = f"the {plural(before_nf, 'final output position')} whose NaN/Inf differ"
    else:
        before = _nan(first.final_rel_err_before)  # n/a: no share (nan, dropped below)
        shares = [
            (c, (before - _nan(a.final_rel_err_after_alone)) / before)
            for c, a in rows
            if before > 0 and _error_recovered_alone(report, a)
        ]
        loss = f"the final output's error (rel-err {sci(first.final_rel_err_before)})"
    shares = [(c, share) for c, share in shares if not math.isnan(share)]
    return max(shares, key=lambda item: item[1], default=None), loss


def culprit_quiet(report: Report, culprit: Culprit) -> str:
    """The culprit line of `--quiet`: node, pair, verdict, and the fix (`advice_text`)."""
    line = f"{node_text(culprit)} on {culprit.pair}, {verdict_text(culprit, short=True)}"
    fix = advice_text(report, culprit)
    return f"{line}; {fix}" if fix else line


def inherited_text(report: Report, code: Callable[[str], str] = _same) -> str:
    """Why the first divergence is no culprit: " (inherited from /decoder/Resize)", an earlier culprit on its pair,
    or " (inherited: local rel-err 1.20e-06 holds)"; "" when it is a culprit, or nothing says more."""
    first, culprits = report.first_divergence, culprits_of(report)
    if first is None or any(c.tensor == first.tensor for c in culprits):
        return ""
    here = layer_index(report, first.tensor)
    at = {c.tensor: layer_index(report, c.tensor) for c in culprits}
    earlier = [c for c in culprits if c.pair == first.pair and (here is None or (at[c.tensor] or 0) < here)]
    if earlier:
        return f" (inherited from {code(earlier[-1].onnx_node)})"
    layer = next((layer for layer in report.layers if layer.tensor == first.tensor), None)
    local = (layer.local or {}).get(first.pair) if layer is not None else None
    return f" (inherited: local rel-err {sci(local.rel_err)} holds)" if local and not local.diverged else ""


def drift_text(drift: Drift, code: Callable[[str], str] = _same, limit: int | None = MAX_CONTRIBUTORS) -> str:
    """ "accumulated drift, no single culprit; largest local contributors: a (rel-err 4.00e-04), b (3.00e-04)"."""
    contributors = drift.contributors
    shown = contributors if limit is None else contributors[:limit]
    items = [f"{code(c.onnx_node)} ({'rel-err ' if i == 0 else ''}{sci(c.local.rel_err)})" for i, c in enumerate(shown)]
    more = f", … {len(contributors) - len(shown)} more" if len(contributors) > len(shown) else ""
    tail = f"; largest local contributors: {', '.join(items)}{more}" if items else ""
    return "accumulated drift, no single culprit" + tail


# Non-finite values


def non_finite_groups(report: Report) -> list[tuple[tuple[str, ...], NonFinite]]:
    """The report's `non_finite` entries, backends that name the same tensor with the same counts together."""
    groups: dict[tuple[str, int, int, str], tuple[list[str], NonFinite]] = {}
    for entry in report.non_finite:
        key = (entry.tensor, entry.nan, entry.inf, entry.sample)
        groups.setdefault(key, ([], entry))[0].append(entry.backend)
    return [(tuple(backends), entry) for backends, entry in groups.values()]


def non_finite_counts_text(entry: NonFinite) -> str:
    """ "256 NaN", "3 Inf", "2 NaN, 5 Inf"."""
    parts = [f"{count} {kind}" for count, kind in ((entry.nan, "NaN"), (entry.inf, "Inf")) if count]
    return ", ".join(parts) or "no NaN/Inf"


def non_finite_text(
    report: Report,
    backends: tuple[str, ...],
    entry: NonFinite,
    code: Callable[[str], str] = _same,
    text: Callable[[str], str] = _same,
) -> str:
    """ "the outputs of torch and onnxruntime hold NaN/Inf; they first appear at /root/Sqrt (Sqrt, module root):
    256 NaN" (with several samples, "... hold NaN/Inf on sample img3; ...")."""
    who = " and ".join(text(backend) for backend in backends)
    sample = f" on sample {code(entry.sample)}" if len(report.samples) > 1 else ""
    return (
        f"the outputs of {who} hold NaN/Inf{sample}; they first appear at {node_text(entry, code, text)}: "
        f"{text(non_finite_counts_text(entry))}"
    )


def non_finite_lines(
    report: Report, code: Callable[[str], str] = _same, text: Callable[[str], str] = _same
) -> list[str]:
    """One sentence per group of `non_finite_groups`: whose outputs hold NaN/Inf and where they first appear."""
    return [non_finite_text(report, backends, entry, code, text) for backends, entry in non_finite_groups(report)]


def non_finite_failed(report: Report) -> bool:
    """Whether a check on the finiteness of final outputs failed."""
    return any(check.threshold == "finite" for check in report.failed_checks)


# Segmentation


def segmentation_parts(summary: SegmentationSummary, text: Callable[[str], str] = _same) -> list[str]:
    """ "agreement mIoU torch~onnxruntime 0.4995 (0.10% pixels changed)", "mIoU vs labels ...", "drop ..."."""
    parts = [
        f"agreement mIoU {text(str(pair))} {miou(figure)} ({percent(summary.changed_pixels.get(pair))} pixels changed)"
        for pair, figure in summary.agreement_miou.items()
    ]
    parts += [f"mIoU vs labels {text(backend)} {miou(figure)}" for backend, figure in summary.label_miou.items()]
    parts += [f"drop {text(backend)} {miou(figure)}" for backend, figure in summary.miou_drop.items()]
    return parts


def escape_html(text: str) -> str:
    """Text safe inside HTML and SVG, attributes included, with no control character (`trtdiff.report.text.html`)."""
    return safe_html(text)


# TensorRT


def marking_changed_line(trt: TensorRTSummary) -> str:
    """The first thing said when the marked engine's outputs differ from the plain engine's beyond the thresholds."""
    check = trt.marking_check
    if check is None:
        return ""
    figures = f"worst on {check.worst_output}: rel err {sci(check.rel_err)}, cosine {cosine(check.cosine)}"
    named = ""
    if check.bisected:
        more = f" and {len(check.bisected) - 5} more" if len(check.bisected) > 5 else ""
        shown = ", ".join(check.bisected[:5]) + more
        named = f"; marking {shown} changes it (bisected in {check.bisect_builds} builds)"
    elif check.bisect_note:
        named = f"; {check.bisect_note}"
    return f"marking changed the answer: the plain engine's outputs differ from the marked engine's ({figures}){named}"
