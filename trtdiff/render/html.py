"""One self-contained HTML file of a Report: verdict, plots along the network, checks, every layer.

The file needs no network to view: CSS is inline and the plots are SVG drawn by matplotlib
(non-interactive, imported only when rendering, so importing this module stays cheap) and
embedded in the page. The depth plot shows where along the network the curves leave the
thresholds; hovering a layer's column names it (an SVG <title>).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from trtdiff import outputs
from trtdiff.render.culprits import (
    attribution_of,
    attribution_summary,
    culprit_groups,
    culprit_text,
    culprits_of,
    drift_text,
    exclusion_text,
    inherited_text,
    miou_lost,
    verdict_text,
)
from trtdiff.render.format import (
    NOTHING,
    agreeing_text,
    check_message,
    cosine,
    divergence_figures,
    divergence_node,
    escape_html as esc,
    failed_count_text,
    format_value,
    inputs_text,
    layer_index,
    limit_text,
    miou,
    non_finite_counts_text,
    non_finite_failed,
    non_finite_groups,
    non_finite_text,
    percent,
    plural,
    reasons_text,
    sci,
    shape_text,
    suspects_text,
    thresholds_text,
)
from trtdiff.render.html_plots import depth_svg, samples_svg
from trtdiff.render.judged import DRIFT_LEGEND, Kind, judged_cell, judged_title, kinds_of
from trtdiff.render.runtimes import compiled_runtimes, runtime_lines
from trtdiff.report import Attribution, BackendPair, Culprit, ErrorFigures, Layer, Report, RuntimeSummary

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1f2328;margin:0;
background:#f6f8fa}
main{max-width:1180px;margin:0 auto;padding:20px 24px 40px;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
.verdict{display:inline-block;padding:3px 10px;border-radius:6px;font-weight:700;color:#fff;margin-right:8px}
.mark{font-size:11px;font-weight:700;color:#fff;padding:0 5px;border-radius:4px}
.pass{background:#1a7f37}.fail{background:#cf222e}.screened{background:#9a6700}.culprit{background:#bc4c00}.muted{color:#656d76}
.box{border-left:4px solid #cf222e;background:#fff5f5;padding:8px 12px;margin:12px 0}
.box.ok{border-color:#1a7f37;background:#f3fbf5}.box.find{border-color:#bc4c00;background:#fff8f0}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f0f2f4;padding:0 3px;
border-radius:3px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{padding:3px 8px;border-bottom:1px solid #e6e8eb;text-align:left;vertical-align:top}
th{background:#f6f8fa;position:sticky;top:0}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.div td{background:#ffebe9}tr.first td{background:#ffcecb;font-weight:600}
svg.plot{width:100%;height:auto;display:block}table.wide{width:100%}td code{overflow-wrap:anywhere}
table.checks code{white-space:nowrap}
.scroll{max-height:640px;overflow:auto;border:1px solid #e6e8eb}
dl.env{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:6px 0}dt{color:#656d76}dd{margin:0}
"""


def render_html(report: Report) -> str:
    """The report as one HTML document that opens offline in any browser."""
    title = f"trtdiff {'PASS' if report.passed else 'FAIL'}: {report.model}"
    return html_document(title, html_body(report))


def html_document(title: str, body: str) -> str:
    """A whole page around `body`, with the report's style sheet."""
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{esc(title)}</title>\n'
        f"<style>{CSS}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


def html_body(report: Report) -> str:
    """The report's sections, for a page of its own or a sweep's page."""
    sections = [
        _header(report),
        _non_finite(report),
        _finding(report),
        _divergence(report),
        _section(
            "Along the network",
            depth_svg(report),
            "Per layer in topological order: 1 − cosine and relative "
            "error to the reference (log scale; lower is better). Dashed: thresholds. Red: diverged layers; "
            "hover a column for its layer. Hollow squares on dashed lines: local error (the node alone, on the "
            "reference's inputs); orange lines: culprits.",
        )
        if report.layers
        else "",
        _culprits(report),
        _drift(report),
        _section(
            "Per sample",
            samples_svg(report),
            "Final outputs of every sample, and mIoU agreement when the output is a segmentation.",
        )
        if len(report.samples) > 1
        else "",
        _checks(report),
        _segmentation(report),
        *(_runtime(summary) for summary in compiled_runtimes(report)),
        _layers(report),
        _environment(report),
    ]
    return "\n".join(part for part in sections if part)


def write_html(report: Report, path: str | Path) -> None:
    """Write `render_html(report)` to `path` (UTF-8; a new file renamed over the name, trtdiff.outputs)."""
    outputs.write_text(path, render_html(report))


def _header(report: Report) -> str:
    total = len(report.checks)
    verdict = '<span class="verdict pass">PASS</span>' if report.passed else '<span class="verdict fail">FAIL</span>'
    summary = f"{plural(total, 'check')} passed" if report.passed else failed_count_text(report)
    limits = thresholds_text(report.thresholds)
    facts = [
        f"model <code>{esc(report.model)}</code>",
        f"inputs {esc(inputs_text(report.inputs))}",
        f"ONNX opset {report.opset} ({esc(report.exporter)})",
        f"backends {esc(' → '.join(report.backends))} (reference {esc(report.reference)})",
        plural(len(report.samples), "sample"),
        f"thresholds {esc(limits)}",
    ]
    if report.onnx_path:
        facts.append(f"ONNX file <code>{esc(report.onnx_path)}</code>")
    notes = "".join(f'<div class="muted">note: {esc(note)}</div>' for note in report.notes)
    return (
        f"<h1>{verdict}trtdiff report</h1>\n<p><b>{esc(summary)}</b><br>"
        f'<span class="muted">{" · ".join(facts)}</span></p>\n{notes}'
    )


def _divergence(report: Report) -> str:
    first = report.first_divergence
    if first is None:
        return f'<div class="box ok"><b>No divergence</b>: {esc(agreeing_text(report, "layers"))}.</div>'
    index = layer_index(report, first.tensor)
    link = f' — <a href="#layer-{index}">layer #{index}</a>' if index is not None else ""
    suspects = suspects_text(first, _code, limit=None)
    return (
        f'<div class="box"><b>First divergence</b>: {divergence_node(first, _code, esc)} on {esc(str(first.pair))}'
        f"{link}<br>{esc(divergence_figures(first))}{inherited_text(report, _code)}"
        f"<br>tensor <code>{esc(first.tensor)}</code>"
        + (f"<br>suspects (the node, then nodes feeding it): {suspects}" if suspects else "")
        + "</div>"
    )


def _finding(report: Report) -> str:
    """A box naming the culprits (what introduced the error), or the drift that no culprit explains."""
    groups = culprit_groups(report)
    if groups:
        head = "Culprit" if len(groups) == 1 else "Culprits"
        items = "".join(f"<li>{culprit_text(report, g, _code, esc)}</li>" for g in groups)
        closing = "".join(f"{sentence}.<br>" for sentence in attribution_summary(report, _code, esc))
        exclusion = exclusion_text(report)
        closing += f"{esc(exclusion)}.<br>" if exclusion else ""
        return f'<div class="box find"><b>{head}</b> (where the error is introduced):<ol>{items}</ol>{closing}</div>'
    if report.drift is not None:
        pair = esc(str(report.drift.pair))
        return f'<div class="box find"><b>Drift</b> on {pair}: {drift_text(report.drift, _code)}</div>'
    return ""


def _non_finite(report: Report) -> str:
    """A box on whose outputs hold NaN/Inf and where they first appear (linked to the layer); "" when none do."""
    items = []
    for backends, entry in non_finite_groups(report):
        index = layer_index(report, entry.tensor) if entry.sample == _first_sample(report) else None
        link = f' — <a href="#layer-{index}">layer #{index}</a>' if index is not None else ""
        items.append(
            f"<li>{non_finite_text(report, backends, entry, _code, esc)}{link}"
            f"<br>tensor <code>{esc(entry.tensor)}</code></li>"
        )
    if not items:
        return ""
    css = "box" if non_finite_failed(report) else "box find"
    return f'<div class="{css}"><b>Non-finite values</b> (NaN or Inf):<ul>{"".join(items)}</ul></div>'


def _first_sample(report: Report) -> str | None:
    """The sample compared layer by layer (the layers table shows it)."""
    return report.samples[0].name if report.samples else None


def _figures(figures: ErrorFigures | None) -> str:
    if figures is None:
        return "<td class='num'>—</td>"
    return f"<td class='num'>{esc(cosine(figures.cosine))} / {esc(sci(figures.rel_err))}</td>"


def _culprit_row(report: Report, number: int, culprit: Culprit) -> str:
    index = layer_index(report, culprit.tensor)
    node = f'<a href="#layer-{index}">{_code(culprit.onnx_node)}</a>' if index is not None else _code(culprit.onnx_node)
    subgraph = ", ".join(_code(name) for name in culprit.subgraph)
    cells = [
        f"<td class='num'>{number}</td><td>{node}</td><td>{esc(culprit.op_type)}</td>",
        f"<td>{esc(culprit.module or '')}</td><td>{esc(str(culprit.pair))}</td>",
        f"<td><span class='mark culprit'>{esc(culprit.verdict.upper())}</span> {esc(verdict_text(culprit))}</td>",
        _figures(culprit.local) + _figures(culprit.accumulated) + _figures(culprit.spec),
        f"<td>{subgraph}</td><td>{esc(culprit.advice)}</td>",
    ]
    return "<tr>" + "".join(cells) + "</tr>"


def _attribution_row(report: Report, culprit: Culprit) -> str:
    a = attribution_of(report, culprit)
    if a is None:
        return ""
    mious = f"{miou(a.miou_before)} → {miou(a.miou_after)}" if a.miou_before is not None else "—"
    alone = "<td class='num'>—</td><td class='num'>—</td>"
    if a.final_rel_err_after_alone is not None:
        alone = (
            f"<td class='num'>{sci(a.final_rel_err_before)} → {sci(a.final_rel_err_after_alone)}</td>"
            f"<td class='num'>{esc(_gain(report, a, alone=True))}</td>"
        )
    return (
        f"<tr><td>{_code(culprit.onnx_node)}</td><td>{esc(str(a.pair))}</td>{alone}"
        f"<td class='num'>{sci(a.final_rel_err_before)} → {sci(a.final_rel_err_after)}</td>"
        f"<td class='num'>{cosine(a.final_cosine_before)} → {cosine(a.final_cosine_after)}</td>"
        f"<td class='num'>{mious}</td><td class='num'>{esc(_gain(report, a, alone=False))}</td></tr>"
    )


def _gain(report: Report, a: Attribution, *, alone: bool) -> str:
    """ "0.1450 of 0.1540" (mIoU), "nothing measurable", or "—" without mIoU."""
    if (a.measurable_alone if alone else a.measurable) is False:
        return NOTHING
    recovered, lost = (a.miou_recovered_alone if alone else a.miou_recovered), miou_lost(report, a)
    return f"{miou(recovered)} of {miou(lost)}" if recovered is not None and lost is not None else "—"


def _culprits(report: Report) -> str:
    """Each culprit: verdict, local, accumulated and ONNX-spec figures; then what injecting the reference recovers."""
    culprits = culprits_of(report)
    if not culprits:
        return ""
    head = _head(
        "#", "node", "op", "module", "pair", "verdict", "local", "accumulated", "ONNX spec", "local error over", "fix"
    )
    rows = "\n".join(_culprit_row(report, number, c) for number, c in enumerate(culprits, start=1))
    text = (
        f"<h2>Culprits</h2>\n<p class='muted'>Nodes whose own error breaks the thresholds, run alone on the "
        f"reference's inputs; figures are cosine / rel-err.</p>\n<table class='wide'>\n{head}\n{rows}\n</table>"
    )
    attribution = [row for c in culprits if (row := _attribution_row(report, c))]
    if attribution:
        head = _head(
            "culprit",
            "pair",
            "fixed alone: final rel-err",
            "recovered",
            "with the culprits before it: final rel-err",
            "final cosine",
            "mIoU",
            "recovered",
        )
        closing = "".join(f"<p>{sentence}.</p>" for sentence in attribution_summary(report, _code, esc))
        text += (
            "\n<h3>Attribution</h3>\n<p class='muted'>The candidate run again with the reference's value in place "
            "of culprits' outputs: what fixing each culprit alone recovers (the culprits feeding it credited to "
            "them), and what fixing it with every culprit before it recovers. Below one pixel's share of the mIoU "
            "(or the thresholds' tolerance without one), a recovery is nothing measurable.</p>"
            f"\n<table>\n{head}\n" + "\n".join(attribution) + f"\n</table>\n{closing}"
        )
    return text


def _drift(report: Report) -> str:
    drift = report.drift
    if drift is None or culprits_of(report):
        return ""
    rows = "\n".join(
        f"<tr><td>{_code(c.onnx_node)}</td><td>{esc(c.op_type)}</td><td>{esc(c.module or '')}</td>"
        + _figures(c.local)
        + "</tr>"
        for c in drift.contributors
    )
    return (
        f"<h2>Accumulated drift</h2>\n<p class='muted'>No single node breaks the thresholds on {esc(str(drift.pair))};"
        " the largest local errors (cosine / rel-err):</p>\n<table>\n<tr><th>node</th><th>op</th><th>module</th>"
        f"<th>local</th></tr>\n{rows}\n</table>"
    )


def _head(*columns: str) -> str:
    return "<tr>" + "".join(f"<th>{column}</th>" for column in columns) + "</tr>"


def _code(text: str) -> str:
    return f"<code>{esc(text)}</code>"


def _section(title: str, svg: str, caption: str) -> str:
    return f'<h2>{esc(title)}</h2>\n<p class="muted">{esc(caption)}</p>\n<figure style="margin:0">{svg}</figure>'


def _checks(report: Report) -> str:
    if not report.checks:
        return "<h2>Checks</h2>\n<p>No threshold checks were made.</p>"
    rows = []
    for check in report.checks:
        mark = '<span class="mark fail">FAIL</span>'
        if check.passed:
            mark = (
                '<span class="mark screened">SCREENED</span>'
                if check.screened
                else '<span class="mark pass">PASS</span>'
            )
        failing = ", ".join(check.failing_samples)
        rows.append(
            f'<tr class="{"" if check.passed else "div"}"><td>{mark}</td><td><code>{esc(check.id)}</code></td>'
            f'<td class="num">{esc(format_value(check.metric, check.worst))}</td>'
            f"<td>{esc(limit_text(check, report.thresholds, symbols=True))}</td>"
            f"<td>{esc(check.worst_sample or '—')}</td><td>{esc(failing) or '—'}</td>"
            f"<td>{esc(check_message(check, report))}</td></tr>"
        )
    head = _head("", "check", "worst", "limit", "worst sample", "failing samples", "detail")
    return f"<h2>Checks</h2>\n<table class='wide checks'>\n{head}\n" + "\n".join(rows) + "\n</table>"


def _segmentation(report: Report) -> str:
    summary = report.segmentation
    if summary is None:
        return ""
    rows = [
        f"<tr><td>agreement with the reference</td><td>{esc(str(pair))}</td><td class='num'>{miou(figure)}</td>"
        f"<td class='num'>{percent(summary.changed_pixels.get(pair))}</td></tr>"
        for pair, figure in summary.agreement_miou.items()
    ]
    rows += [
        f"<tr><td>against labels</td><td>{esc(backend)}</td><td class='num'>{miou(figure)}</td><td></td></tr>"
        for backend, figure in summary.label_miou.items()
    ]
    rows += [
        f"<tr><td>drop vs reference</td><td>{esc(backend)}</td><td class='num'>{miou(figure)}</td><td></td></tr>"
        for backend, figure in summary.miou_drop.items()
    ]
    ignore = f", ignore index {summary.ignore_index}" if summary.ignore_index is not None else ""
    return (
        f"<h2>Segmentation</h2>\n<p class='muted'>{summary.num_classes} classes{esc(ignore)}; mIoU over all "
        "samples.</p>\n<table><tr><th>mIoU</th><th>pair / backend</th><th>value</th><th>pixels changed</th></tr>\n"
        + "\n".join(rows)
        + "\n</table>"
    )


def _runtime(summary: RuntimeSummary) -> str:
    """A compiled runtime's lines (render/runtimes.py), the alarm in red."""
    lines = [
        f"<p class='fail'><b>{esc(line.text)}</b></p>" if line.alarm else f"<p>{esc(line.text)}</p>"
        for line in runtime_lines(summary)
    ]
    return f"<h2>{esc(summary.title)}</h2>\n" + "\n".join(lines)


def _pair_cells(layer: Layer, pair: BackendPair, local: bool, unit: bool) -> list[str]:
    """Cosine, max-abs and the figure the pair is judged by (and, with `local`, the node's own error in the same
    units; with `unit`, each figure with its unit where the column mixes kinds), "—" where none."""
    metrics, own = layer.pairs.get(pair), (layer.local or {}).get(pair)
    if metrics is None:
        cells = ["<td class='num'>—</td>"] * 3
    else:
        title = f' title="{esc(reasons_text(metrics.reasons))}"' if metrics.reasons else ""
        cells = [
            f"<td class='num'{title}>{esc(cosine(metrics.cosine))}</td>",
            f"<td class='num'>{esc(format_value('max_abs', metrics.max_abs))}</td>",
            f"<td class='num' title=\"rel-err {esc(sci(metrics.rel_err))}\">"
            f"{esc(judged_cell(metrics, unit=unit))}</td>",
        ]
    if local:
        title = f' title="local cosine {esc(cosine(own.cosine))}"' if own is not None else ""
        cells.append(f"<td class='num'{title}>{esc(judged_cell(own, unit=unit)) if own is not None else '—'}</td>")
    return cells


def _layers(report: Report) -> str:
    """Every layer with, per pair, cosine, max-abs, the judged figure with its limit in the head (rel-err,
    noise ratio or quantization steps, trtdiff.render.judged) and the node's own (local) error."""
    pairs = list(report.pairs)
    local = any(layer.local for layer in report.layers)
    kinds = {
        pair: kinds_of(
            m
            for layer in report.layers
            for m in (layer.pairs.get(pair), (layer.local or {}).get(pair))
            if m is not None
        )
        for pair in pairs
    }
    head = _layers_head(report, kinds, local)
    culprits = {c.tensor for c in culprits_of(report)}
    rows = [_layer_row(report, layer, kinds, local, culprits) for layer in report.layers]
    diverged = sum(layer.diverged for layer in report.layers)
    skipped = (
        f"; {len(report.not_compared)} ONNX tensors not compared (constants, shapes)" if report.not_compared else ""
    )
    drift = any(m.drift for layer in report.layers for m in layer.pairs.values())
    legend = f"<p class='muted'>{esc(DRIFT_LEGEND)}</p>\n" if drift else ""
    return (
        f"<h2>Layers</h2>\n<p class='muted'>{len(report.layers)} compared layers in topological order, "
        f"{diverged} diverged{esc(skipped)}.</p>\n{legend}<div class='scroll'><table class='wide'>\n{head}\n"
        + "\n".join(rows)
        + "\n</table></div>"
    )


def _layers_head(report: Report, kinds: Mapping[BackendPair, Sequence[Kind]], local: bool) -> str:
    """The layer table's head row: the layer's columns, then per pair its figures' columns."""
    head = "<tr><th>#</th><th>op</th><th>module</th><th>ONNX node</th><th>shape</th>"
    head += "".join(
        f"<th>{esc(str(pair))}<br>cosine</th><th>max |Δ|</th>"
        f"<th>{esc(judged_title(kinds[pair], report.thresholds))}</th>" + ("<th>local</th>" * local)
        for pair in kinds
    )
    return head + "<th></th></tr>"


def _layer_row(
    report: Report, layer: Layer, kinds: Mapping[BackendPair, Sequence[Kind]], local: bool, culprits: set[str]
) -> str:
    """One layer's row: its names and shape, each pair's figures, and its status with its marks."""
    first = report.first_divergence.tensor if report.first_divergence else None
    css = "first" if layer.tensor == first else "div" if layer.diverged else ""
    cells = [
        f'<td class="num">{layer.index}</td>',
        f"<td>{esc(layer.op_type)}</td>",
        f"<td>{esc(layer.module or '')}</td>",
        f'<td title="tensor {esc(layer.tensor)}"><code>{esc(layer.onnx_node)}</code></td>',
        f"<td class='num'>{esc(shape_text(layer.shape))}</td>",
    ]
    for pair, shown in kinds.items():
        cells += _pair_cells(layer, pair, local, len(shown) > 1)
    status = "first divergence" if css == "first" else "diverged" if layer.diverged else "ok"
    if layer.screened:
        status = "screened (passed bounds from statistics, not compared value by value)"
    held = [m for m in layer.pairs.values() if m.nan_ref or m.nan_cand or m.inf_ref or m.inf_cand]
    if held and not layer.diverged:
        status += " (NaN/Inf at the same positions)"
    badge = '<span class="mark culprit">CULPRIT</span> ' if layer.tensor in culprits else ""
    badge += "".join(
        f'<span class="mark fail" title="{esc(non_finite_counts_text(entry))}">'
        f"FIRST NaN/Inf in {esc(entry.backend)}</span> "
        for entry in report.non_finite
        if entry.tensor == layer.tensor and entry.sample == _first_sample(report)
    )
    cells.append(f"<td>{badge}{status}{' (output)' if layer.is_output else ''}</td>")
    return f'<tr id="layer-{layer.index}" class="{css}">' + "".join(cells) + "</tr>"


def _environment(report: Report) -> str:
    env = dict(report.environment)
    for runtime in compiled_runtimes(report):
        if runtime.version:
            env.setdefault(runtime.backend, runtime.version)
        for name, value in runtime.facts:
            if name == "gpu":
                env.setdefault("gpu", value)
    env["trtdiff"] = report.trtdiff_version
    order = ["trtdiff", "torch", "onnx", "onnxruntime", "tensorrt", "torch_device", "gpu", "cpu", "python", "platform"]
    keys = [k for k in order if k in env] + [k for k in env if k not in order]
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(str(env[k]))}</dd>" for k in keys)
    timings = ", ".join(f"{k} {v:.2f}s" for k, v in report.timings.items())
    return f"<h2>Environment</h2>\n<dl class='env'>{items}</dl>" + (
        f"\n<p class='muted'>timings: {esc(timings)}</p>" if timings else ""
    )
