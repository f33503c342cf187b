"""The figure each tensor is judged by, the pair a row shows, and the rows a view folds: what the layer
tables of the terminal, Markdown and HTML share.

A tensor is judged in its units (trtdiff.analysis.judge): a quantized tensor (`PairMetrics.quant_steps`) in
quantization steps against `max_quant_steps`, a reduced-precision one (`noise_ratio`) by its noise ratio
against `max_noise_ratio`, any other float tensor by its relative error against `rtol` (and its cosine
against `min_cosine`), an integer one exactly. `judged_cell` writes that figure, `judged_header` the column's
head with its limit ("steps≤8", "ratio≤8", "rel≤1e-3"); a node's local error (`Layer.local`) is judged the
same way against the same limit.

With several backend pairs a row shows the pair furthest past (or nearest to) its limits (`worst_pair`),
and the rows that say nothing a reader needs are folded (`folds`): a tensor that only moves its input's
values (Identity, Reshape, Transpose, Squeeze, Unsqueeze, Flatten: bit for bit its input's, so its figures
are its input's) or a constant, where it agrees; and shape arithmetic, a tensor PyTorch has no value for
that every pair of ONNX backends computes bit for bit alike.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Literal

from trtdiff.render.format import NOT_AVAILABLE, sci
from trtdiff.report import BackendPair, Layer, PairMetrics, Report, Thresholds

Kind = Literal["steps", "ratio", "rel", "exact"]
"""The units a tensor is judged in: quantization steps, noise ratio, relative error, or exactly (integers)."""
MOVES = frozenset({"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Constant"})
"""Ops whose output holds their input's values (or a constant) bit for bit, only arranged otherwise."""
UNITS = {"steps": "st", "ratio": "×", "rel": "", "exact": ""}
"""The unit a cell carries where one column holds figures of several kinds."""
_WORDS = {"steps": "quantization steps", "ratio": "noise ratio", "rel": "rel-err"}


def kind_of(metrics: PairMetrics) -> Kind:
    """The units `metrics` are judged in."""
    if metrics.mismatches is not None or metrics.shape_mismatch:
        return "exact"
    if metrics.quant_steps is not None:
        return "steps"
    if metrics.noise_ratio is not None:
        return "ratio"
    return "rel"


def judged_figure(metrics: PairMetrics) -> float | None:
    """The figure `metrics` are judged by: steps, noise ratio, rel-err, or the count of differing elements."""
    kind = kind_of(metrics)
    if kind == "exact":
        return None if metrics.shape_mismatch else float(metrics.mismatches or 0)
    return {"steps": metrics.quant_steps, "ratio": metrics.noise_ratio, "rel": metrics.rel_err}[kind]


def ratio(figure: float) -> str:
    """A noise ratio or a count of steps: 0.28, 1.46, 41.0, 1024 (three or four figures)."""
    if math.isnan(figure):
        return "nan"
    if math.isinf(figure):
        return "inf"
    return f"{figure:.2f}" if figure < 10 else f"{figure:.1f}" if figure < 1000 else f"{figure:.3g}"


def judged_cell(metrics: PairMetrics, *, unit: bool = False) -> str:
    """The judged figure as a table cell: "1.46", "99.0", "2.64e-02", "exact", "3 differ", "NaN/Inf" (they sit
    elsewhere on the two sides); with `unit`, the kind's unit after it ("99.0st", "1.46×") where a column
    mixes kinds."""
    kind = kind_of(metrics)
    if kind == "exact":
        if metrics.shape_mismatch:
            return "shape"
        return "exact" if not metrics.mismatches else f"{metrics.mismatches} differ"
    if metrics.non_finite_mismatches:  # judged by where NaN/Inf sit, whatever the figure of the rest
        return "NaN/Inf"
    figure = judged_figure(metrics)
    if figure is None:
        return NOT_AVAILABLE
    text = (sci(figure) if kind == "rel" else ratio(figure)) + (UNITS[kind] if unit else "")
    return f"({text})" if metrics.drift else text


DRIFT_LEGEND = (
    "(…): drift, not judged: a quantized graph's error against its float model builds up by design; "
    "each node is judged by its own error (local)"
)
"""What a figure in parentheses means, said under any table that shows one."""


def limit_text(figure: float) -> str:
    """A limit as short as it reads: 8, 0.05, 1e-3 (never longer than `g` would write it)."""
    general = f"{figure:g}"
    if figure <= 0 or not math.isfinite(figure):
        return general
    exponent = math.floor(math.log10(figure))
    mantissa = figure / 10.0**exponent
    short = f"{mantissa:g}e{exponent}" if abs(mantissa - round(mantissa, 1)) < 1e-9 else general
    return short if len(short) < len(general) else general


def limit_of(kind: Kind, thresholds: Thresholds) -> float:
    """The limit a figure of `kind` is held to (0 differing elements for an exact one)."""
    return {
        "steps": thresholds.max_quant_steps,
        "ratio": thresholds.max_noise_ratio,
        "rel": thresholds.rtol,
        "exact": 0.0,
    }[kind]


def kinds_of(metrics: Iterable[PairMetrics]) -> list[Kind]:
    """The float kinds among `metrics`, in the order steps, ratio, rel (exact ones need no header, and a figure
    that is n/a has no units to tell)."""
    found = {kind_of(m) for m in metrics if judged_figure(m) is not None}
    order: tuple[Kind, ...] = ("steps", "ratio", "rel")
    return [kind for kind in order if kind in found]


def judged_header(kinds: Sequence[Kind], thresholds: Thresholds) -> str:
    """The judged column's head with its limit, "steps≤8", "ratio≤8", "rel≤1e-3"; "judged" where the column
    holds several kinds (`judged_legend` then says each limit)."""
    if len(kinds) != 1:
        return "judged" if kinds else "rel≤" + limit_text(thresholds.rtol)
    kind = kinds[0]
    return f"{'rel' if kind == 'rel' else kind}≤{limit_text(limit_of(kind, thresholds))}"


def judged_title(kinds: Sequence[Kind], thresholds: Thresholds) -> str:
    """The judged column's head in words, for Markdown and HTML: "rel-err ≤ 1e-3", "noise ratio ≤ 8",
    "quantization steps ≤ 8"; a column of several kinds names each with the unit its cells carry
    ("quantization steps (st) ≤ 8 / rel-err ≤ 1e-3")."""
    shown = list(kinds) or ["rel"]
    units = {kind: f" ({UNITS[kind]})" if len(shown) > 1 and UNITS[kind] else "" for kind in shown}
    return " / ".join(f"{_WORDS[kind]}{units[kind]} ≤ {limit_text(limit_of(kind, thresholds))}" for kind in shown)


def judged_legend(kinds: Sequence[Kind], thresholds: Thresholds) -> str:
    """ "judged: quantization steps (st) ≤ 8, rel-err ≤ 0.001" for a column of several kinds; "" for one."""
    if len(kinds) < 2:
        return ""
    parts = [
        f"{_WORDS[kind]}{f' ({UNITS[kind]})' if UNITS[kind] else ''} ≤ {limit_of(kind, thresholds):g}" for kind in kinds
    ]
    return "judged: " + ", ".join(parts)


def severity(metrics: PairMetrics, thresholds: Thresholds) -> float:
    """How far `metrics` are past their limits, as a multiple of each (1: at the limit); inf where a figure
    is n/a, NaN/Inf sit elsewhere, elements differ or the shapes do; a diverged pair always above 1."""
    if metrics.shape_mismatch or metrics.non_finite_mismatches or metrics.mismatches:
        return math.inf
    kind = kind_of(metrics)
    if kind == "exact":
        return 0.0
    figure = judged_figure(metrics)
    if figure is None or math.isnan(figure):
        return math.inf
    limit = limit_of(kind, thresholds)
    worst = figure / limit if limit > 0 else (math.inf if figure > 0 else 0.0)
    if kind == "rel":
        cos = metrics.cosine
        if cos is None or math.isnan(cos):
            return math.inf
        room = 1.0 - thresholds.min_cosine
        worst = max(worst, (1.0 - cos) / room if room > 0 else (math.inf if cos < 1.0 else 0.0))
    if metrics.diverged:
        worst = max(worst, 1.0 + 1e-9)
    return worst


def pair_order(report: Report) -> list[BackendPair]:
    """The pairs of the report, those with earlier backends first (the reference's before the others)."""
    rank = {name: i for i, name in enumerate(report.backends)}
    return sorted(report.pairs, key=lambda p: (rank.get(p.reference, len(rank)), rank.get(p.candidate, len(rank))))


def worst_pair(layer: Layer, pairs: Sequence[BackendPair], thresholds: Thresholds, reference: str) -> BackendPair:
    """The pair a one-line row of `layer` shows: a diverged one where any is, a pair with the `reference`
    before one of two other backends (its local error is measured), then the one furthest past (or nearest
    to) its limits; the first of `pairs` on a tie."""
    have = [pair for pair in pairs if pair in layer.pairs]

    def rank(item: tuple[int, BackendPair]) -> tuple[bool, bool, float, int]:
        index, pair = item
        metrics = layer.pairs[pair]
        return metrics.diverged, reference == pair.reference, severity(metrics, thresholds), -index

    return max(enumerate(have), key=rank)[1]


def exact(metrics: PairMetrics) -> bool:
    """Whether the two sides are bit for bit alike (no error, no differing element, NaN/Inf alike)."""
    if metrics.shape_mismatch or metrics.non_finite_mismatches or metrics.statistics:
        return False
    if metrics.mismatches is not None:
        return metrics.mismatches == 0
    return metrics.max_abs == 0.0


def folds(layer: Layer, report: Report) -> bool:
    """Whether a view folds `layer` into one line: it agrees, was compared value by value, is no output, and
    either moves its input's values only or is a constant (`MOVES`), or is shape arithmetic (the reference has
    no value for it, and every pair computes it bit for bit alike)."""
    if layer.diverged or layer.screened or layer.is_output or not layer.pairs:
        return False
    if any(m.statistics for m in layer.pairs.values()):
        return False
    if layer.op_type in MOVES:
        return True
    with_reference = any(report.reference in (pair.reference, pair.candidate) for pair in layer.pairs)
    return not with_reference and all(exact(m) for m in layer.pairs.values())


def fold_text(layers: Sequence[Layer]) -> str:
    """ "3 rows folded that copy their input or agree bit for bit in every backend: 2 Constant, 1 Identity"."""
    counts = Counter(layer.op_type for layer in layers)
    ops = ", ".join(f"{n} {op}" for op, n in counts.most_common())
    rows = "1 row" if len(layers) == 1 else f"{len(layers)} rows"
    return f"{rows} folded that copy their input or agree bit for bit in every backend: {ops}"
