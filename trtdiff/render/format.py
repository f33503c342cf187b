"""The wording and number formats every renderer shares, so a figure reads the same everywhere.

Numbers: cosines with six places (`cosine`), errors in scientific notation with three
significant digits (`sci`), mIoU with four places; `format_value` picks by metric. Words: a
divergence reason (`reason_text`), a threshold check's one-line message (`check_message`)
and its limit (`limit_text`), the inputs line, TensorRT's precision, short backend names,
the pieces of the first-divergence sentence, and where NaN/Inf first appear
(`non_finite_lines`). The culprit, attribution and drift sentences: render/culprits.py.
Each renderer escapes the text for its own format; functions that embed names take `code`,
applied to each name (an identity by default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from trtdiff.report import (
    BackendPair,
    Contributor,
    Culprit,
    FirstDivergence,
    NonFinite,
    Reason,
    Report,
    SegmentationSummary,
    TensorRTSummary,
    ThresholdCheck,
    Thresholds,
)
from trtdiff.report.text import html as safe_html

BACKEND_SHORT = {"torch": "pt", "onnxruntime": "ort", "tensorrt": "trt", "onnx-reference": "ref", "openvino": "ov"}
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
    "max_weight_steps": "max-weight-steps",
    "max_noise_ratio": "max-noise-ratio",
    "quant_min_cosine": "quant-min-cosine",
}
NOTHING = "nothing measurable"
"""A recovery below noise, in a column that says what it measures (HTML's mIoU column)."""
VERDICT_WORDS = {"export": "export problem", "runtime": "runtime problem", "unknown": "cause unknown"}


def same(text: str) -> str:
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
    """pt, ort, trt, ref (onnx-reference), ov (openvino); other backends keep their name."""
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
        kind = "unusable" if reason.limit is None else "too coarse a"
        return f"{kind} quantization scale: {reason.detail or '?'}"
    if reason.metric == "noise_ratio":
        detail = reason.detail or "the precision"
        where = " at the node alone" if detail.endswith("of the node alone") else " here"
        source = detail.removesuffix("of the node alone").removesuffix(", ") or "the precision"
        verb = "explains" if "rounding" in source else "makes"
        return f"{reason.value:.1f}x the error {source} {verb}{where} > {limit:g}"
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
            f"max-weight-steps {check.limit:g} on {check.compared} quantized weights against the float weights "
            f"they quantize: worst {_general(check.worst)} steps ({check.worst_sample}{': ' + fault if fault else ''})"
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


def failed_count_text(report: Report) -> str:
    """The short form for a heading: "3 of 5 checks failed", or "the simplified file's comparison failed
    (4 of 5 checks)" where only that one did (`failure_text`)."""
    failed, total = len(report.failed_checks), len(report.checks)
    simplified = report.simplified
    if not failed and simplified is not None and not simplified.passed:
        return (
            f"the simplified file's comparison failed ({len(simplified.failed_checks)} of "
            f"{plural(len(simplified.checks), 'check')})"
        )
    return f"{failed} of {plural(total, 'check')} failed"


def failure_text(report: Report) -> str:
    """What failed, for a report that did: "3 of 5 checks failed: id, id, id"; where its own checks all hold but
    the simplified file's comparison (`--simplify`) failed, "the simplified file's comparison failed: 4 of 5
    checks failed: ..." (the report's verdict is both). Every renderer's FAIL line says this."""
    failed = report.failed_checks
    if failed:
        return f"{len(failed)} of {len(report.checks)} checks failed: {', '.join(check.id for check in failed)}"
    simplified = report.simplified
    if simplified is not None and not simplified.passed:
        return f"the simplified file's comparison failed: {failure_text(simplified)} (the original's checks hold)"
    return f"the comparison failed, though none of its {plural(len(report.checks), 'check')} did"


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


def module_text(module: str | None, code: Callable[[str], str] = same) -> str:
    """ "module decoder", "the model itself" (top level, module path ""), or "no PyTorch module"."""
    if module is None:
        return "no PyTorch module"
    return f"module {code(module)}" if module else "the model itself"


def node_text(
    node: FirstDivergence | Culprit | Contributor | NonFinite,
    code: Callable[[str], str] = same,
    text: Callable[[str], str] = same,
) -> str:
    """ "/decoder/Resize (Resize, module decoder)"; names through `code`, words through `text`."""
    return f"{code(node.onnx_node)} ({text(node.op_type)}, {module_text(node.module, code)})"


def divergence_node(
    first: FirstDivergence, code: Callable[[str], str] = same, text: Callable[[str], str] = same
) -> str:
    """ "/decoder/Resize (Resize, module decoder)"; names through `code`, words through `text`."""
    return node_text(first, code, text)


def divergence_head(
    first: FirstDivergence, code: Callable[[str], str] = same, text: Callable[[str], str] = same
) -> str:
    """ "/decoder/Resize (Resize, module decoder) on torch~onnxruntime"."""
    return f"{divergence_node(first, code, text)} on {text(str(first.pair))}"


def divergence_figures(first: FirstDivergence) -> str:
    """ "cosine 0.999854, max-abs 1.04e-02, rel-err 2.64e-02" and the reasons in brackets."""
    figures = f"cosine {cosine(first.cosine)}, max-abs {sci(first.max_abs)}, rel-err {sci(first.rel_err)}"
    return figures + (f" ({reasons_text(first.reasons)})" if first.reasons else "")


def suspects_text(first: FirstDivergence, code: Callable[[str], str] = same, limit: int | None = MAX_SUSPECTS) -> str:
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
    code: Callable[[str], str] = same,
    text: Callable[[str], str] = same,
) -> str:
    """ "the outputs of torch and onnxruntime hold NaN/Inf; they first appear at /root/Sqrt (Sqrt, module root):
    256 NaN" (with several samples, "... hold NaN/Inf on sample img3; ...")."""
    who = " and ".join(text(backend) for backend in backends)
    sample = f" on sample {code(entry.sample)}" if len(report.samples) > 1 else ""
    return (
        f"the outputs of {who} hold NaN/Inf{sample}; they first appear at {node_text(entry, code, text)}: "
        f"{text(non_finite_counts_text(entry))}"
    )


def non_finite_lines(report: Report, code: Callable[[str], str] = same, text: Callable[[str], str] = same) -> list[str]:
    """One sentence per group of `non_finite_groups`: whose outputs hold NaN/Inf and where they first appear."""
    return [non_finite_text(report, backends, entry, code, text) for backends, entry in non_finite_groups(report)]


def non_finite_failed(report: Report) -> bool:
    """Whether a check on the finiteness of final outputs failed."""
    return any(check.threshold == "finite" for check in report.failed_checks)


# Segmentation


def segmentation_parts(summary: SegmentationSummary, text: Callable[[str], str] = same) -> list[str]:
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


def precision_text(precision: str | None, tf32: bool) -> str:
    """TensorRT's precision in words: "fp32, TF32 off", "fp32 with TF32", "fp16"."""
    base = precision or "fp32"
    if tf32:
        return f"{base} with TF32"
    return f"{base}, TF32 off" if base == "fp32" else base


def engines_line(trt: TensorRTSummary) -> str:
    """ "1 engine, N runs per sample", the budget and where it came from, and what the engine returns."""
    runs = plural(trt.runs_per_sample, "run")
    budget = ""
    if trt.mark_budget_bytes is not None and trt.outputs_mode != "none":
        source = "given" if trt.budget_source == "given" else "fixed default"
        budget = f" (mark budget {trt.mark_budget_bytes:,} bytes, {source})"
    coverage = ""
    if trt.outputs_mode == "unfused":
        runs = f"at most {runs}"
        if trt.tensors_computed:
            coverage = f"; the engine reports those of the {trt.tensors_computed} tensors computed that survive fusion"
    elif trt.tensors_computed:
        share = 100.0 * trt.tensors_returned / trt.tensors_computed
        coverage = (
            f"; returns {trt.tensors_returned} of {trt.tensors_computed} tensors computed from the inputs "
            f"({share:.0f}%)"
        )
    planned = " planned" if trt.status == "built" else ""
    return f"{trt.engines} engine, {runs} per sample{planned}{budget}{coverage}"


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
