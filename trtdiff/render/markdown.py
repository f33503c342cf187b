"""A short Markdown summary of a Report, for a pull-request comment or $GITHUB_STEP_SUMMARY.

It answers, in a dozen lines, what a reviewer asks first: did the gate pass, which check
failed and by how much, where the numbers first changed, and what ran it. The full per-layer
detail stays in the HTML or JSON report. Every name from the model is written through
`trtdiff.report.text` (`_code`, `_text`): one line, so it starts no heading, list or quote, and
with `[`, `<` and the like escaped, so it makes no link, image or HTML.
"""

from __future__ import annotations

from pathlib import Path

from trtdiff import outputs
from trtdiff.render.culprits import (
    attribution_summary,
    culprit_text,
    culprits_of,
    drift_text,
    exclusion_text,
    grouped_culprits,
    inherited_text,
    noise_text,
)
from trtdiff.render.format import (
    agreeing_text,
    divergence_figures,
    divergence_node,
    failed_count_text,
    format_value,
    inputs_text,
    limit_text,
    non_finite_lines,
    plural,
    segmentation_parts,
    suspects_text,
)
from trtdiff.render.judged import DRIFT_LEGEND, judged_cell, judged_title, kinds_of, pair_order, worst_pair
from trtdiff.render.runtimes import compiled_runtimes, runtime_lines
from trtdiff.report import BackendPair, Layer, PairMetrics, Report, RuntimeSummary, ThresholdCheck
from trtdiff.report.text import markdown, markdown_code


def render_markdown(report: Report) -> str:
    """The summary as GitHub-flavoured Markdown, ending with a newline."""
    parts = [
        _verdict(report),
        _checks(report.checks, report),
        _non_finite(report),
        _culprits(report),
        _divergence(report),
        _diverged_layers(report),
        _drift(report),
        _segmentation(report),
        *(_runtime(summary) for summary in compiled_runtimes(report)),
        _environment(report),
    ]
    return "\n\n".join(part for part in parts if part) + "\n"


def write_markdown(report: Report, path: str | Path, *, append: bool = False) -> None:
    """Write `render_markdown(report)` to `path`, a new file renamed over the name; `append` adds it after what is
    there instead ($GITHUB_STEP_SUMMARY, which other steps write too), through no symbolic link (trtdiff.outputs)."""
    if append:
        outputs.append_text(path, render_markdown(report), "markdown")
    else:
        outputs.write_text(path, render_markdown(report))


def _verdict(report: Report) -> str:
    total = len(report.checks)
    if report.passed:
        head = f"### trtdiff: ✅ PASS — {plural(total, 'check')} passed"
    else:
        head = f"### trtdiff: ❌ FAIL — {failed_count_text(report)}"
    facts = [
        _code(report.model),
        f"inputs {_text(inputs_text(report.inputs))}",
        f"opset {report.opset} ({_text(report.exporter)})",
        " → ".join(_text(b) for b in report.backends) + f" (reference {_text(report.reference)})",
    ]
    if len(report.samples) > 1:
        facts.append(f"{len(report.samples)} samples")
    return head + "\n" + " · ".join(facts)


def _checks(checks: tuple[ThresholdCheck, ...], report: Report) -> str:
    if not checks:
        return "_No threshold checks were made._"
    rows = ["| | check | worst | limit | worst sample |", "|---|---|---|---|---|"]
    rows += [check_row(check, report) for check in checks]
    return "\n".join(rows)


def check_row(check: ThresholdCheck, report: Report) -> str:
    """One row of the checks table: mark, id, worst figure, limit, worst sample (and how many fail)."""
    sample = _code(check.worst_sample) if check.worst_sample else "—"
    if check.failing_samples and len(report.samples) > 1:
        sample += f" ({len(check.failing_samples)} of {len(report.samples)} fail)"
    worst = format_value(check.metric, check.worst)
    if check.metric == "divergence":
        worst = f"cosine {worst}"
    cells = [
        ("🔎" if check.screened else "✅") if check.passed else "❌",
        _code(check.id),
        worst,
        _text(limit_text(check, report.thresholds, symbols=True)),
        sample,
    ]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _divergence(report: Report) -> str:
    first = report.first_divergence
    if first is None:
        return f"**First divergence:** none — {_text(agreeing_text(report, 'layers'))}."
    line = (
        f"**First divergence:** {divergence_node(first, _code, _text)} on {_text(str(first.pair))} — "
        f"{_text(divergence_figures(first))}{inherited_text(report, _code)}"
    )
    diverged = sum(layer.diverged for layer in report.layers)
    line += f"; {diverged} of {len(report.layers)} layers diverge."
    suspects = suspects_text(first, _code)
    if suspects:
        line += f"\nSuspects (nodes feeding it): {suspects}"
    return line


def _non_finite(report: Report) -> str:
    """ "**Non-finite values:** the outputs of torch ... hold NaN/Inf; they first appear at ..."; "" when none."""
    lines = non_finite_lines(report, _code, _text)
    if not lines:
        return ""
    if len(lines) == 1:
        return f"**Non-finite values:** {lines[0]}"
    return "\n".join(["**Non-finite values:**", *(f"- {line}" for line in lines)])


def _culprits(report: Report) -> str:
    """ "**Culprit:** ..." for one, a numbered "**Culprits:**" list for several, then which one carries
    most of the loss; "" for none."""
    culprits, noise = grouped_culprits(report)
    closing = "".join(f"\n\n{sentence}." for sentence in attribution_summary(report, _code, _text))
    exclusion = exclusion_text(report)
    closing += f"\n\n{_text(exclusion)}." if exclusion and culprits else ""
    if len(culprits) == 1 and not noise:
        return f"**Culprit:** {culprit_text(report, culprits[0], _code, _text)}{closing}"
    items = [f"{number}. {culprit_text(report, c, _code, _text)}" for number, c in enumerate(culprits, start=1)]
    items += [f"- {noise_text(noise, _code, _text)}"] if noise else []
    return "\n".join(["**Culprits:**", *items]) + closing if items else ""


MAX_LAYER_ROWS = 3
"""The diverged layers the summary lists, from the first divergence on (a PR comment stays short); the HTML
and JSON reports list every layer."""


def _diverged_layers(report: Report) -> str:
    """The diverged layers (the first `MAX_LAYER_ROWS`), each with its worst pair (trtdiff.render.judged): the
    cosine and the figure its verdict used, with the limit in the head ("rel-err ≤ 1e-3", "noise ratio ≤ 8",
    "quantization steps ≤ 8"), and the node's own (local) error in the same units; "" where none diverged."""
    diverged = [layer for layer in report.layers if layer.diverged]
    if not diverged:
        return ""
    pairs = pair_order(report)
    rows = [(layer, worst_pair(layer, pairs, report.thresholds, report.reference)) for layer in diverged]
    rows = rows[:MAX_LAYER_ROWS]
    figures = [m for layer, pair in rows for m in (layer.pairs[pair], _local(layer, pair)) if m is not None]
    kinds = kinds_of(figures)
    many, local = len(pairs) > 1, any(_local(layer, pair) is not None for layer, pair in rows)
    head = ["#", "op", "module / ONNX node", *(["pair"] if many else []), "cosine"]
    head += [_text(judged_title(kinds, report.thresholds)), *(["local"] if local else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for layer, pair in rows:
        metrics, own = layer.pairs[pair], _local(layer, pair)
        cells = [str(layer.index), _text(layer.op_type), _code(layer.module or layer.onnx_node)]
        cells += [_text(str(pair))] if many else []
        cells += [format_value("cosine", metrics.cosine), judged_cell(metrics, unit=len(kinds) > 1)]
        cells += [judged_cell(own, unit=len(kinds) > 1) if own is not None else "—"] if local else []
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    more = len(diverged) - len(rows)
    worst = ", the worst pair of each" if many else ""
    tail = f"; {more} more not listed" if more > 0 else ""
    drift = any(layer.pairs[pair].drift for layer, pair in rows)
    return (
        f"**Diverged layers** ({len(diverged)} of {len(report.layers)}{worst}{tail}; the HTML and JSON reports "
        "list every layer):\n\n" + "\n".join(lines) + (f"\n\n{_text(DRIFT_LEGEND)}" if drift else "")
    )


def _local(layer: Layer, pair: BackendPair) -> PairMetrics | None:
    return (layer.local or {}).get(pair)


def _drift(report: Report) -> str:
    if report.drift is None or culprits_of(report):
        return ""
    return f"**Drift** on {_text(str(report.drift.pair))}: {drift_text(report.drift, _code)}"


def _segmentation(report: Report) -> str:
    summary = report.segmentation
    if summary is None:
        return ""
    items = segmentation_parts(summary, _text)
    if not items:
        return ""
    ignore = f", ignore index {summary.ignore_index}" if summary.ignore_index is not None else ""
    return f"**Segmentation** ({summary.num_classes} classes{ignore}): " + "; ".join(items)


def _runtime(summary: RuntimeSummary) -> str:
    """A compiled runtime's lines (render/runtimes.py), the alarm in bold."""
    lines = [f"**{_text(line.text)}**" if line.alarm else _text(line.text) for line in runtime_lines(summary)]
    return "  \n".join(lines)


def _environment(report: Report) -> str:
    env = report.environment
    parts = [f"trtdiff {_text(report.trtdiff_version)}"]
    parts += [f"{name} {_text(env[name])}" for name in ("torch", "onnx") if name in env]
    parts += [_text(env[name]) for name in report.backends if name != "torch" and name in env]
    runtimes = compiled_runtimes(report)
    for runtime in runtimes:
        version = runtime.version
        if version and runtime.backend not in env:
            parts.append(_text(version if version.startswith(runtime.backend) else f"{runtime.backend} {version}"))
    gpu = env.get("gpu") or next((value for r in runtimes for name, value in r.facts if name == "gpu"), None)
    parts.append(f"GPU {_text(gpu)}" if gpu else f"CPU {_text(env.get('cpu', '?'))}")
    if "python" in env:
        parts.append(f"python {_text(env['python'])}")
    return "<sub>" + " · ".join(parts) + "</sub>"


def _code(text: str) -> str:
    """An inline code span that survives backticks, line breaks and control characters in the text."""
    return markdown_code(text)


def _text(text: str) -> str:
    """Plain text safe in Markdown: one line, no HTML, no accidental emphasis or links (`trtdiff.report.text`)."""
    return markdown(text)
