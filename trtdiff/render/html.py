"""One self-contained HTML file of a Report: verdict, plots along the network, checks, every layer.

The file needs no network to view: CSS is inline and the plots are SVG drawn by matplotlib
(non-interactive, imported only when rendering, so importing this module stays cheap) and
embedded in the page. The depth plot shows where along the network the curves leave the
thresholds; hovering a layer's column names it (an SVG <title>).
"""

from __future__ import annotations

import html
import io
import math
import re
import sys
from collections.abc import Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

from trtdiff import __version__
from trtdiff.errors import OptionError
from trtdiff.render.junit import format_value, limit_text
from trtdiff.report import Layer, Report, SampleResult

FLOOR = 1e-12  # 1 - cosine and relative errors below this are float noise; drawn at the floor
COLORS = ("#0969da", "#bf8700", "#8250df", "#1a7f37", "#57606a")
RED = "#cf222e"
MAX_BANDS = 600  # hover columns per axis; beyond this only the upper plot gets them

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1f2328;margin:0;background:#f6f8fa}
main{max-width:1180px;margin:0 auto;padding:20px 24px 40px;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
.verdict{display:inline-block;padding:3px 10px;border-radius:6px;font-weight:700;color:#fff;margin-right:8px}
.mark{font-size:11px;font-weight:700;color:#fff;padding:0 5px;border-radius:4px}.pass{background:#1a7f37}.fail{background:#cf222e}.muted{color:#656d76}
.box{border-left:4px solid #cf222e;background:#fff5f5;padding:8px 12px;margin:12px 0}
.box.ok{border-color:#1a7f37;background:#f3fbf5}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f0f2f4;padding:0 3px;border-radius:3px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}th,td{padding:3px 8px;border-bottom:1px solid #e6e8eb;text-align:left;vertical-align:top}
th{background:#f6f8fa;position:sticky;top:0}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.div td{background:#ffebe9}tr.first td{background:#ffcecb;font-weight:600}
svg.plot{width:100%;height:auto;display:block}table.wide{width:100%}td code{overflow-wrap:anywhere}
table.checks code{white-space:nowrap}
.scroll{max-height:640px;overflow:auto;border:1px solid #e6e8eb}
dl.env{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:6px 0}dt{color:#656d76}dd{margin:0}
"""


def render_html(report: Report) -> str:
    """The report as one HTML document that opens offline in any browser."""
    sections = [
        _header(report),
        _divergence(report),
        _section("Along the network", depth_svg(report), "Per layer in topological order: 1 − cosine and relative "
                 "error to the reference (log scale; lower is better). Dashed: thresholds. Red: diverged layers; "
                 "hover a column for its layer.") if report.layers else "",
        _section("Per sample", samples_svg(report), "Final outputs of every sample, and mIoU agreement when the "
                 "output is a segmentation.") if len(report.samples) > 1 else "",
        _checks(report),
        _segmentation(report),
        _tensorrt(report),
        _layers(report),
        _environment(report),
    ]
    title = f"trtdiff {'PASS' if report.passed else 'FAIL'}: {report.model}"
    body = "\n".join(part for part in sections if part)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{_e(title)}</title>\n'
            f"<style>{CSS}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n")


def write_html(report: Report, path: str | Path) -> None:
    """Write `render_html(report)` to `path` (UTF-8)."""
    Path(path).write_text(render_html(report), encoding="utf-8")


def _header(report: Report) -> str:
    failed, total = len(report.failed_checks), len(report.checks)
    verdict = ('<span class="verdict pass">PASS</span>' if report.passed else '<span class="verdict fail">FAIL</span>')
    summary = f"{total} check{'s' if total != 1 else ''} passed" if report.passed else f"{failed} of {total} checks failed"
    inputs = ", ".join(f"{name} {'x'.join(map(str, shape))}" for name, shape in report.inputs.items())
    thresholds = report.thresholds
    limits = f"min-cosine {thresholds.min_cosine:g}, rtol {thresholds.rtol:g}"
    if thresholds.max_abs is not None:
        limits += f", max-abs {thresholds.max_abs:g}"
    facts = [f"model <code>{_e(report.model)}</code>", f"inputs {_e(inputs)}",
             f"ONNX opset {report.opset} ({_e(report.exporter)})",
             f"backends {_e(' → '.join(report.backends))} (reference {_e(report.reference)})",
             f"{len(report.samples)} sample{'s' if len(report.samples) != 1 else ''}", f"thresholds {_e(limits)}"]
    if report.onnx_path:
        facts.append(f"ONNX file <code>{_e(report.onnx_path)}</code>")
    notes = "".join(f'<div class="muted">note: {_e(note)}</div>' for note in report.notes)
    return (f"<h1>{verdict}trtdiff report</h1>\n<p><b>{_e(summary)}</b><br>"
            f'<span class="muted">{" · ".join(facts)}</span></p>\n{notes}')


def _divergence(report: Report) -> str:
    first = report.first_divergence
    if first is None:
        return f'<div class="box ok"><b>No divergence</b>: all {len(report.layers)} compared layers agree.</div>'
    index = _layer_index(report, first.tensor)
    module = f"module <code>{_e(first.module)}</code>" if first.module else "no PyTorch module"
    link = f' — <a href="#layer-{index}">layer #{index}</a>' if index is not None else ""
    reasons = f" ({_e('; '.join(first.reasons))})" if first.reasons else ""
    suspects = ", ".join(f"<code>{_e(s)}</code>" for s in first.suspects)
    return (f'<div class="box"><b>First divergence</b>: <code>{_e(first.onnx_node)}</code> ({_e(first.op_type)}, '
            f"{module}) on {_e(first.pair)}{link}<br>cosine {_e(format_value('cosine', first.cosine))}, max-abs "
            f"{_e(format_value('max_abs', first.max_abs))}, rel-err {_e(format_value('rel_err', first.rel_err))}"
            f"{reasons}<br>tensor <code>{_e(first.tensor)}</code>"
            + (f"<br>suspects (the node, then nodes feeding it): {suspects}" if suspects else "") + "</div>")


def _section(title: str, svg: str, caption: str) -> str:
    return f'<h2>{_e(title)}</h2>\n<p class="muted">{_e(caption)}</p>\n<figure style="margin:0">{svg}</figure>'


def _checks(report: Report) -> str:
    if not report.checks:
        return "<h2>Checks</h2>\n<p>No threshold checks were made.</p>"
    rows = []
    for check in report.checks:
        mark = '<span class="mark pass">PASS</span>' if check.passed else '<span class="mark fail">FAIL</span>'
        failing = ", ".join(check.failing_samples)
        rows.append(
            f'<tr class="{"" if check.passed else "div"}"><td>{mark}</td><td><code>{_e(check.id)}</code></td>'
            f'<td class="num">{_e(format_value(check.metric, check.worst))}</td>'
            f"<td>{_e(limit_text(check, report).replace('>=', '≥').replace('<=', '≤'))}</td>"
            f"<td>{_e(check.worst_sample or '—')}</td><td>{_e(failing) or '—'}</td><td>{_e(check.message)}</td></tr>")
    head = "<tr><th></th><th>check</th><th>worst</th><th>limit</th><th>worst sample</th><th>failing samples</th><th>detail</th></tr>"
    return f"<h2>Checks</h2>\n<table class='wide checks'>\n{head}\n" + "\n".join(rows) + "\n</table>"


def _segmentation(report: Report) -> str:
    summary = report.segmentation
    if summary is None:
        return ""
    rows = [f"<tr><td>agreement with the reference</td><td>{_e(key)}</td><td class='num'>{_miou(value)}</td>"
            f"<td class='num'>{_percent(summary.changed_pixels.get(key))}</td></tr>"
            for key, value in summary.agreement_miou.items()]
    rows += [f"<tr><td>against labels</td><td>{_e(backend)}</td><td class='num'>{_miou(value)}</td><td></td></tr>"
             for backend, value in summary.label_miou.items()]
    rows += [f"<tr><td>drop vs reference</td><td>{_e(backend)}</td><td class='num'>{_miou(value)}</td><td></td></tr>"
             for backend, value in summary.miou_drop.items()]
    ignore = f", ignore index {summary.ignore_index}" if summary.ignore_index is not None else ""
    return (f"<h2>Segmentation</h2>\n<p class='muted'>{summary.num_classes} classes{_e(ignore)}; mIoU over all "
            "samples.</p>\n<table><tr><th>mIoU</th><th>pair / backend</th><th>value</th><th>pixels changed</th></tr>\n"
            + "\n".join(rows) + "\n</table>")


def _tensorrt(report: Report) -> str:
    trt = report.tensorrt
    if trt is None:
        return ""
    if trt.status == "skipped":
        text = f"skipped: {_e(trt.reason or 'no reason given')}"
    else:
        precision = f"{trt.precision or 'fp32'}{' with TF32' if trt.tf32 else ', TF32 off'}"
        text = (f"{_e(trt.status)}: {_e(trt.version or '?')}, {_e(precision)}, outputs {_e(trt.outputs_mode or '?')}: "
                f"{trt.marked} marked, {len(trt.not_returned)} not returned, {len(trt.fused_layers)} fused layers, "
                f"{trt.engine_layers} engine layers, built in {trt.build_seconds:.2f}s"
                + (" (from the engine cache)" if trt.from_cache else ""))
    notes = "".join(f"<br><span class='muted'>note: {_e(n)}</span>" for n in trt.notes)
    return f"<h2>TensorRT</h2>\n<p>{text}{notes}</p>"


def _layers(report: Report) -> str:
    pairs = _pair_keys(report.layers)
    first = report.first_divergence.tensor if report.first_divergence else None
    head = "<tr><th>#</th><th>op</th><th>module</th><th>ONNX node</th><th>shape</th>"
    head += "".join(f"<th>{_e(k)}<br>cosine</th><th>max |Δ|</th><th>rel-err</th>" for k in pairs) + "<th></th></tr>"
    rows = []
    for index, layer in enumerate(report.layers):
        css = "first" if layer.tensor == first else "div" if layer.diverged else ""
        cells = [f'<td class="num">{index}</td>', f"<td>{_e(layer.op_type)}</td>", f"<td>{_e(layer.module or '')}</td>",
                 f'<td title="tensor {_e(layer.tensor)}"><code>{_e(layer.onnx_node)}</code></td>',
                 f"<td class='num'>{_e('x'.join(map(str, layer.shape)))}</td>"]
        for key in pairs:
            metrics = layer.pairs.get(key)
            if metrics is None:
                cells += ["<td class='num'>—</td>"] * 3
                continue
            title = f' title="{_e("; ".join(metrics.reasons))}"' if metrics.reasons else ""
            cells += [f"<td class='num'{title}>{_e(_cosine(metrics.cosine))}</td>",
                      f"<td class='num'>{_e(format_value('max_abs', metrics.max_abs))}</td>",
                      f"<td class='num'>{_e(format_value('rel_err', metrics.rel_err))}</td>"]
        status = "first divergence" if css == "first" else "diverged" if layer.diverged else "ok"
        cells.append(f"<td>{status}{' (output)' if layer.is_output else ''}</td>")
        rows.append(f'<tr id="layer-{index}" class="{css}">' + "".join(cells) + "</tr>")
    diverged = sum(layer.diverged for layer in report.layers)
    skipped = f"; {len(report.not_compared)} ONNX tensors not compared (constants, shapes)" if report.not_compared else ""
    return (f"<h2>Layers</h2>\n<p class='muted'>{len(report.layers)} compared layers in topological order, "
            f"{diverged} diverged{_e(skipped)}.</p>\n<div class='scroll'><table class='wide'>\n{head}\n" + "\n".join(rows)
            + "\n</table></div>")


def _environment(report: Report) -> str:
    env = dict(report.environment)
    trt = report.tensorrt
    if trt is not None and trt.version and "tensorrt" not in env:
        env["tensorrt"] = trt.version
    env.setdefault("gpu", (trt.gpu if trt is not None and trt.gpu else None) or "none visible")
    env["trtdiff"] = __version__
    order = ["trtdiff", "torch", "onnx", "onnxruntime", "tensorrt", "torch_device", "gpu", "cpu", "python", "platform"]
    keys = [k for k in order if k in env] + [k for k in env if k not in order]
    items = "".join(f"<dt>{_e(k)}</dt><dd>{_e(str(env[k]))}</dd>" for k in keys)
    timings = ", ".join(f"{k} {v:.2f}s" for k, v in report.timings.items())
    return (f"<h2>Environment</h2>\n<dl class='env'>{items}</dl>"
            + (f"\n<p class='muted'>timings: {_e(timings)}</p>" if timings else ""))


def _pair_keys(layers: tuple[Layer, ...]) -> list[str]:
    keys: list[str] = []
    for layer in layers:
        keys += [key for key in layer.pairs if key not in keys]
    return keys


def _layer_index(report: Report, tensor: str) -> int | None:
    return next((i for i, layer in enumerate(report.layers) if layer.tensor == tensor), None)


def _cosine(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.7f}"


def _miou(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.4f}"


def _percent(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{100 * value:.2f}%"


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def depth_svg(report: Report) -> str:
    """1 − cosine and relative error per layer along the network, one line per backend pair, as SVG."""
    import numpy as np

    mpl, figure = _matplotlib()
    layers, pairs = report.layers, _pair_keys(report.layers)
    x = np.arange(len(layers))
    titles: dict[str, str] = {}
    with mpl.rc_context({**_RC, "svg.hashsalt": "trtdiff-depth"}):
        fig = figure(figsize=(11, 6.6), layout="constrained")
        top, bottom = fig.subplots(2, 1, sharex=True)
        nan_label: str | None = "nan (drawn at the top)"
        for color, key in zip(_cycle(len(pairs)), pairs):
            have = [i for i, layer in enumerate(layers) if key in layer.pairs]  # a pair may skip layers
            metrics = [layers[i].pairs[key] for i in have]
            for ax, values in ((top, [1.0 - m.cosine for m in metrics]), (bottom, [m.rel_err for m in metrics])):
                shown = np.clip(np.array(values, dtype=float), FLOOR, None)
                ax.plot(x[have], shown, "o-", color=color, ms=3, lw=1.4, label=key if ax is top else None)
                hit = [j for j, m in enumerate(metrics) if m.diverged]
                ax.plot(x[have][hit], shown[hit], "o", ms=6, mfc=color, mec=RED, mew=1.5)
                bad = [have[j] for j, value in enumerate(values) if math.isnan(value)]
                if bad:  # one legend entry for all pairs
                    ax.plot(bad, [0.97] * len(bad), "X", ms=8, color=RED, transform=ax.get_xaxis_transform(),
                            label=nan_label if ax is top else None)
                    nan_label = nan_label if ax is bottom else None
        thresholds = report.thresholds
        top.axhline(max(1.0 - thresholds.min_cosine, FLOOR), ls="--", lw=1.2, color=RED, alpha=0.7,
                    label=f"threshold (min-cosine {thresholds.min_cosine:g}, rtol {thresholds.rtol:g})")
        bottom.axhline(max(thresholds.rtol, FLOOR), ls="--", lw=1.2, color=RED, alpha=0.7)
        _scopes(top, bottom, layers)
        first = report.first_divergence
        index = _layer_index(report, first.tensor) if first else None
        if first is not None and index is not None:
            for ax in (top, bottom):
                ax.axvline(index, color=RED, lw=1.6, label="first divergence" if ax is top else None)
            right = index > 0.6 * len(layers)
            # Just above the cosine threshold, left of the line, is empty: no earlier layer crosses it.
            top.annotate(f"first divergence: #{index} {first.onnx_node} ({first.op_type})",
                         (index, max(1.0 - thresholds.min_cosine, FLOOR) * 4), xytext=(-6 if right else 6, 0),
                         textcoords="offset points", ha="right" if right else "left", va="center", color=RED,
                         fontsize=9.5, fontweight="bold",
                         bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": RED, "lw": 0.8, "alpha": 0.9})
        for axis, ax in enumerate((top, bottom)):
            if axis == 0 or len(layers) <= MAX_BANDS:
                titles.update(_bands(ax, [layer.diverged for layer in layers], [_layer_title(i, layer) for i, layer in
                                                                               enumerate(layers)], f"depth{axis}"))
        _log_axis(top, [1.0 - m.cosine for layer in layers for m in layer.pairs.values()], 1.0 - thresholds.min_cosine)
        _log_axis(bottom, [m.rel_err for layer in layers for m in layer.pairs.values()], thresholds.rtol)
        top.plot([], [], "o", mfc="white", mec=RED, mew=1.5, label="diverged layer")
        top.set_ylabel(f"1 − cosine (floor {FLOOR:.0e})")
        bottom.set_ylabel("relative error (max|Δ| / max|ref|)")
        bottom.set_xlabel("layer index (ONNX topological order)")
        bottom.set_xlim(-0.5, len(layers) - 0.5)
        for ax in (top, bottom):
            ax.grid(True, which="major", axis="y", alpha=0.3)
        fig.legend(loc="outside lower center", ncols=min(4, len(pairs) + 2), frameon=False)
        return _svg(fig, titles, "per-layer 1 - cosine and relative error along the network")


def samples_svg(report: Report) -> str:
    """Final-output 1 − cosine per sample and, for segmentation, mIoU per sample, as SVG."""
    import numpy as np

    mpl, figure = _matplotlib()
    samples = report.samples
    x = np.arange(len(samples))
    pairs = list(dict.fromkeys(key for s in samples for per_pair in s.outputs.values() for key in per_pair))
    seg = any(s.agreement_miou or s.label_miou for s in samples)
    with mpl.rc_context({**_RC, "svg.hashsalt": "trtdiff-samples"}):
        fig = figure(figsize=(11, 3.6), layout="constrained")
        axes = fig.subplots(1, 2 if seg else 1, squeeze=False)[0]
        figures: list[float] = []
        for color, key in zip(_cycle(len(pairs)), pairs):
            worst = [min((m.cosine for per_pair in s.outputs.values() if (m := per_pair.get(key))), default=math.nan,
                         key=lambda v: -math.inf if math.isnan(v) else v) for s in samples]
            axes[0].plot(x, np.clip(1.0 - np.array(worst), FLOOR, None), "o-", color=color, ms=4, label=key)
            figures += [1.0 - v for v in worst]
        axes[0].axhline(max(1.0 - report.thresholds.min_cosine, FLOOR), ls="--", color=RED, alpha=0.7,
                        label=f"min-cosine {report.thresholds.min_cosine:g}")
        _log_axis(axes[0], figures, 1.0 - report.thresholds.min_cosine)
        axes[0].set_ylabel("1 − cosine, final outputs")
        if seg:
            keys = list(dict.fromkeys(k for s in samples for k in s.agreement_miou))
            for color, key in zip(_cycle(len(keys)), keys):
                axes[1].plot(x, [s.agreement_miou.get(key, math.nan) for s in samples], "o-", color=color, ms=4,
                             label=f"agreement {key}")
            backends = list(dict.fromkeys(b for s in samples for b in s.label_miou))
            for color, backend in zip(_cycle(len(backends)), backends):
                axes[1].plot(x, [s.label_miou.get(backend, math.nan) for s in samples], "s--", color=color, ms=4,
                             label=f"vs labels {backend}")
            for limit in sorted({c.limit for c in report.checks if c.metric == "miou"}):
                axes[1].axhline(limit, ls="--", color=RED, alpha=0.7, label=f"min-miou {limit:g}")
            axes[1].set_ylim(-0.02, 1.02)
            axes[1].set_ylabel("mIoU")
        titles: dict[str, str] = {}
        for axis, ax in enumerate(axes):
            if len(samples) <= 20:
                ax.set_xticks(x, labels=[s.name for s in samples], rotation=30, ha="right")
            ax.set_xlim(-0.5, len(samples) - 0.5)
            ax.set_xlabel("sample")
            ax.grid(True, axis="y", alpha=0.3)
            ax.legend(fontsize=8.5, loc="best")
            titles.update(_bands(ax, [False] * len(samples), [_sample_title(s) for s in samples], f"samples{axis}"))
        return _svg(fig, titles, "final-output agreement per sample")


_RC = {"svg.fonttype": "none", "font.size": 10, "axes.spines.top": False, "axes.spines.right": False,
       "font.family": ["DejaVu Sans", "sans-serif"]}


def _matplotlib() -> tuple[Any, Any]:
    """matplotlib and its Figure, drawn without a GUI; a clear error when it is not installed."""
    try:
        import matplotlib
    except ImportError:
        raise OptionError("--html: needs matplotlib; pip install 'trtdiff[html]'") from None
    if "matplotlib.pyplot" not in sys.modules:  # switching later would close a user's open figures
        matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return matplotlib, Figure


def _log_axis(ax: Any, values: Sequence[float], threshold: float) -> None:
    """A log y axis over whole decades holding the values and the threshold with a decade to spare.

    Labels are plain text like 1e-6: mathtext labels would cost a second to typeset.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    finite = [v for v in (*values, threshold) if math.isfinite(v)]
    low = math.floor(math.log10(max(min(finite, default=FLOOR), FLOOR)))
    # + 1e-6: 1 - 0.9999 is 9.99999e-05 in floating point and must still get its decade above.
    high = max(math.floor(math.log10(max(max(finite, default=1.0), FLOOR)) + 1e-6) + 1, low + 2)
    ax.set_yscale("log")
    ax.set_ylim(10.0 ** low / 2, 10.0 ** high)
    ax.yaxis.set_major_locator(LogLocator(base=10, numticks=8))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:.0e}".replace("e-0", "e-").replace("e+0", "e")))
    ax.yaxis.set_minor_locator(NullLocator())


def _scopes(top: Any, bottom: Any, layers: Sequence[Layer]) -> None:
    """Name the network's top-level parts (backbone, decoder, ...) along the upper axis, with separators."""
    runs: list[tuple[str, int, int]] = []  # (name, first index, last index)
    for name, group in groupby(_scope(layer) for layer in layers):
        start = runs[-1][2] + 1 if runs else 0
        runs.append((name, start, start + len(list(group)) - 1))
    if len(runs) < 2 or len(runs) > 40:
        return
    for _, start, _ in runs[1:]:
        for ax in (top, bottom):
            ax.axvline(start - 0.5, color="#8c959f", lw=0.8, ls=":")
    secondary = top.secondary_xaxis("top")
    secondary.set_xticks([(a + b) / 2 for _, a, b in runs], labels=[n for n, _, _ in runs], fontsize=9, color="#57606a")
    secondary.tick_params(length=0)


def _scope(layer: Layer) -> str:
    parts = layer.onnx_node.strip("/").split("/")
    if len(parts) > 1:
        return parts[0]
    return layer.module.split(".")[0] if layer.module else ""


def _bands(ax: Any, marked: Sequence[bool], titles: Sequence[str], prefix: str) -> dict[str, str]:
    """A column per point, shaded when marked; each gets an id for its hover title."""
    ids: dict[str, str] = {}
    for index, (mark, title) in enumerate(zip(marked, titles)):
        band = ax.axvspan(index - 0.5, index + 0.5, facecolor=RED if mark else "white", alpha=0.09 if mark else 0.004,
                          lw=0, zorder=0)
        band.set_gid(f"trtdiff-{prefix}-{index}")
        ids[f"trtdiff-{prefix}-{index}"] = title
    return ids


def _layer_title(index: int, layer: Layer) -> str:
    lines = [f"#{index} {layer.op_type}  {layer.module or '(no module)'}", layer.onnx_node]
    for key, m in layer.pairs.items():
        lines.append(f"{key}: cosine {_cosine(m.cosine)}, rel-err {format_value('rel_err', m.rel_err)}"
                     + (" DIVERGED" if m.diverged else ""))
    return "\n".join(lines)


def _sample_title(sample: SampleResult) -> str:
    lines = [sample.name]
    for output, per_pair in sample.outputs.items():
        lines += [f"{output} {key}: cosine {_cosine(m.cosine)}" for key, m in per_pair.items()]
    lines += [f"mIoU {key}: {_miou(v)}" for key, v in sample.agreement_miou.items()]
    if sample.failed:
        lines.append("fails: " + ", ".join(sample.failed))
    return "\n".join(lines)


def _cycle(count: int) -> list[str]:
    return [COLORS[i % len(COLORS)] for i in range(count)]


def _svg(fig: Any, titles: dict[str, str], label: str) -> str:
    """The figure as inline SVG: no XML prolog or metadata, scalable, hover titles added by id."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)
    text = re.sub(r'<svg ([^>]*?)width="[^"]*" height="[^"]*"', rf'<svg class="plot" role="img" aria-label="{_e(label)}" \1',
                  text, count=1)

    def title(match: re.Match[str]) -> str:
        found = titles.get(match.group(1))
        return match.group(0) + (f"<title>{_e(found)}</title>" if found else "")

    return re.sub(r'<g id="(trtdiff-[\w-]+)">', title, text)
