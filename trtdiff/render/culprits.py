"""The culprit, attribution and drift sentences every renderer shares (render/format.py holds the rest).

A culprit's paragraph (`culprit_text`), its one-line forms (`culprit_brief`, `culprit_quiet`,
`culprits_brief`), what injecting the reference at it recovers (`attribution_text`,
`attribution_summary`), the noise-level culprits grouped apart (`grouped_culprits`,
`noise_text`), and accumulated drift (`drift_text`). Functions that embed names take `code`,
applied to each name (an identity by default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trtdiff.render.format import (
    MAX_CONTRIBUTORS,
    MAX_NOISE_NAMES,
    NOISE_WORDS,
    NOT_AVAILABLE,
    VERDICT_WORDS,
    cosine,
    layer_index,
    miou,
    node_text,
    plural,
    same,
    sci,
)
from trtdiff.report import Attribution, BackendPair, Culprit, Drift, Report


def culprits_of(report: Report) -> tuple[Culprit, ...]:
    """The culprits in topological order (`culprit` alone when a report lists no others)."""
    if report.culprits:
        return report.culprits
    return (report.culprit,) if report.culprit is not None else ()


@dataclass(frozen=True)
class CulpritGroup:
    """One node's culprits, one per backend pair it diverges on (`Report.culprits` lists a node once per pair):
    the views say each node once, naming its pairs."""

    culprits: tuple[Culprit, ...]

    @property
    def first(self) -> Culprit:
        """The culprit of its first pair: its node, op type and module are the group's."""
        return self.culprits[0]

    @property
    def pairs(self) -> tuple[BackendPair, ...]:
        return tuple(c.pair for c in self.culprits)

    @property
    def noise_level(self) -> bool:
        """Whether its local error is rounding noise on every pair (`Culprit.noise_level`)."""
        return all(c.noise_level for c in self.culprits)


def culprit_groups(report: Report) -> tuple[CulpritGroup, ...]:
    """The culprits by node (its tensor), in the order the nodes first appear (topological)."""
    nodes: dict[tuple[str, str], list[Culprit]] = {}
    for culprit in culprits_of(report):
        nodes.setdefault((culprit.tensor, culprit.onnx_node), []).append(culprit)
    return tuple(CulpritGroup(tuple(found)) for found in nodes.values())


def grouped_culprits(report: Report) -> tuple[tuple[CulpritGroup, ...], tuple[CulpritGroup, ...]]:
    """The nodes shown one by one (the first always), and the further ones whose local error is rounding
    noise on every pair (`Culprit.noise_level`), which views name together in one line (`noise_text`)."""
    groups = culprit_groups(report)
    noise = tuple(g for g in groups[1:] if g.noise_level)
    return tuple(g for g in groups if g not in noise), noise


def pairs_text(pairs: Sequence[BackendPair]) -> str:
    """ "torch~onnxruntime", "torch~onnxruntime and torch~openvino", "a, b and c"."""
    names = [str(pair) for pair in pairs]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def per_pair(said: Sequence[tuple[BackendPair, str]]) -> str:
    """What was said of each pair, once where every pair has the same ("local rel-err ..."), else each text
    with the pairs it holds for ("local rel-err 3.0e-02 ... on a and b; local rel-err 1.0e-01 ... on c")."""
    texts: dict[str, list[BackendPair]] = {}
    for pair, text in said:
        texts.setdefault(text, []).append(pair)
    if len(texts) == 1:
        return next(iter(texts))
    return "; ".join(f"{text} on {pairs_text(pairs)}" for text, pairs in texts.items())


def noise_text(
    noise: Sequence[CulpritGroup], code: Callable[[str], str] = same, text: Callable[[str], str] = same
) -> str:
    """ "3 more nodes with noise-level local error (rounding, a few ULP): /a, /b, /c": the first
    `MAX_NOISE_NAMES` named, "…" for the rest (every one is in the JSON report)."""
    names = ", ".join(code(g.first.onnx_node) for g in noise[:MAX_NOISE_NAMES])
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
        return VERDICT_WORDS[culprit.verdict]
    if culprit.verdict == "export":
        why = "the ONNX spec computes the same"
    elif culprit.verdict == "runtime":
        why = f"{culprit.pair.candidate} deviates from the ONNX spec"
    else:
        why = "the ONNX spec agrees with neither side" if culprit.spec is not None else "no ONNX spec evaluation"
    return f"{VERDICT_WORDS[culprit.verdict]} ({why})"


def culprit_marker(culprit: Culprit, index: int | None = None) -> str:
    """ "/decoder/Resize (Resize, export problem)"; with the layer's index, the plot's "culprit: #2 ..."."""
    short = f"{culprit.onnx_node} ({culprit.op_type}, {verdict_text(culprit, short=True)})"
    return short if index is None else f"culprit: #{index} {short}"


def culprits_brief(report: Report) -> str:
    """ "culprit /decoder/Resize (Resize, export problem)", or "culprits a (...), b (...)", each node once;
    "" without culprits."""
    named = list(dict.fromkeys(culprit_marker(g.first) for g in culprit_groups(report)))
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
    """ "fix: re-export at opset 11 or higher (--opset 11): ...", or "fix: as for culprit 1" (culprits numbered by
    node, as the views number them); "" without advice."""
    if not culprit.advice:
        return ""
    for number, group in enumerate(culprit_groups(report), start=1):
        if culprit in group.culprits:
            break
        if any(other.advice == culprit.advice for other in group.culprits):
            return f"fix: as for culprit {number}"
    return f"fix: {culprit.advice}"


def _earlier(report: Report, culprit: Culprit) -> int:
    """How many culprits come before `culprit` on its pair (what its cumulative attribution injects too)."""
    same_pair = [c for c in culprits_of(report) if c.pair == culprit.pair]
    return same_pair.index(culprit) if culprit in same_pair else 0


def culprit_text(
    report: Report, group: CulpritGroup, code: Callable[[str], str] = same, text: Callable[[str], str] = same
) -> str:
    """A node's culprit paragraph, once for every pair it diverges on: node and pairs, local vs accumulated
    error, verdict, what injecting recovers, the fix; a figure that differs between the pairs is said per pair."""
    culprit, culprits = group.first, group.culprits
    parts = [
        f"{node_text(culprit, code, text)} on {text(pairs_text(group.pairs))}: "
        + text(per_pair([(c.pair, local_vs_accumulated(c)) for c in culprits])),
        text(per_pair([(c.pair, verdict_text(c)) for c in culprits])),
    ]
    if group.noise_level:  # a culprit only because the thresholds are tighter than the arithmetic
        parts.insert(1, text(f"noise-level ({NOISE_WORDS}): the thresholds are tighter than the arithmetic"))
    said = [
        (c.pair, attribution_text(report, a, _earlier(report, c)))
        for c in culprits
        if (a := attribution_of(report, c)) is not None
    ]
    if said:
        parts.append(text(per_pair(said)))
    fix = advice_text(report, culprit)
    return "; ".join([*parts, text(fix)] if fix else parts)


def culprit_brief(
    report: Report, group: CulpritGroup, code: Callable[[str], str] = same, text: Callable[[str], str] = same
) -> str:
    """A further node in one line: node, local vs accumulated rel-err, verdict (with its pairs where they are
    not the first node's), what fixing it alone and with the earlier ones recovers, the fix."""
    culprit, culprits = group.first, group.culprits
    line = (
        f"{node_text(culprit, code, text)}: "
        + per_pair([(c.pair, local_vs_accumulated(c, with_cosine=False)) for c in culprits])
        + f", {text(per_pair([(c.pair, verdict_text(c, short=True)) for c in culprits]))}"
    )
    if group.pairs != culprit_groups(report)[0].pairs:
        line += f" on {text(pairs_text(group.pairs))}"
    found = [(c, a) for c in culprits if (a := attribution_of(report, c)) is not None]
    if found:
        if all(_has_alone(a) for _, a in found):
            line += f"; fixing it alone: {per_pair([(c.pair, _brief_gain(report, a, alone=True)) for c, a in found])}"
        gains = per_pair([(c.pair, _brief_gain(report, a, alone=False)) for c, a in found])
        line += f"; with the earlier ones injected: {gains}"
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
    report: Report, code: Callable[[str], str] = same, text: Callable[[str], str] = same
) -> list[str]:
    """The closing sentence: which culprit alone carries most of the loss on each pair, and how much of it, said
    once for the pairs where it is the same.

    "/Resize alone carries 94% of the 0.1544 mIoU lost" (with mIoU), "/Resize alone carries 84% of the final
    output's error (rel-err 7.46e-01)" (without); where none does, what was measured: "injecting torch's value
    at any one culprit alone, the rest of the graph as it ran, recovers no measurable part of ..." (keeping
    nodes in higher precision, the exclusion check, measures something else: `exclusion_text`); [] for reports
    that do not say what fixing each culprit alone recovers. Names through `code`, words through `text`.
    """
    found = [(c, a) for c in culprits_of(report) if (a := attribution_of(report, c)) is not None and _has_alone(a)]
    pairs = list(dict.fromkeys(c.pair for c, _ in found))
    said: dict[tuple[str, str], list[BackendPair]] = {}
    for pair in pairs:
        best, loss = _carries(report, [(c, a) for c, a in found if c.pair == pair])
        if best is None:
            key = ("", f"injecting {pair.reference}'s value at any one culprit alone, the rest of the graph as it "
                   f"ran, recovers no measurable part of {loss}")  # fmt: skip
        else:
            key = (best[0].onnx_node, f" alone carries {_percent(best[1])} of {loss}")
        said.setdefault(key, []).append(pair)
    return [
        f"{code(node) if node else ''}{text(words)}" + (text(f" on {pairs_text(on)}") if len(pairs) > 1 else "")
        for (node, words), on in said.items()
    ]


EXCLUSION_NOTE = "exclusion list checked: "
"""How the note of the exclusion check begins (trtdiff.hypotheses.exclusion writes it)."""


def exclusion_text(report: Report) -> str:
    """The exclusion check's result, saying what it measured, beside the attribution (which injects one
    reference value at a time): "keeping the listed nodes in higher precision, all at once (the exclusion
    list, converted and compared again): with /Mul_1, /Div kept in FP32 ... the final outputs pass every
    check"; "" where no such check was made."""
    note = next((n for n in report.notes if n.startswith(EXCLUSION_NOTE)), None)
    if note is None:
        return ""
    return (
        "keeping the listed nodes in higher precision, all at once (the exclusion list, converted and compared "
        f"again): {note.removeprefix(EXCLUSION_NOTE)}"
    )


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


def culprit_quiet(report: Report, group: CulpritGroup) -> str:
    """The culprit line of `--quiet`: node, pairs, verdict, and the fix (`advice_text`)."""
    verdicts = per_pair([(c.pair, verdict_text(c, short=True)) for c in group.culprits])
    line = f"{node_text(group.first)} on {pairs_text(group.pairs)}, {verdicts}"
    fix = advice_text(report, group.first)
    return f"{line}; {fix}" if fix else line


def inherited_text(report: Report, code: Callable[[str], str] = same) -> str:
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


def drift_text(drift: Drift, code: Callable[[str], str] = same, limit: int | None = MAX_CONTRIBUTORS) -> str:
    """ "accumulated drift, no single culprit; largest local contributors: a (rel-err 4.00e-04), b (3.00e-04)"."""
    contributors = drift.contributors
    shown = contributors if limit is None else contributors[:limit]
    items = [f"{code(c.onnx_node)} ({'rel-err ' if i == 0 else ''}{sci(c.local.rel_err)})" for i, c in enumerate(shown)]
    more = f", … {len(contributors) - len(shown)} more" if len(contributors) > len(shown) else ""
    tail = f"; largest local contributors: {', '.join(items)}{more}" if items else ""
    return "accumulated drift, no single culprit" + tail
