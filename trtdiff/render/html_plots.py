"""The plots of the HTML report: matplotlib figures rendered to inline SVG.

matplotlib is imported lazily (it is the optional `html` extra); plots are drawn on
`Figure` objects without pyplot, so nothing global changes in the caller's process.
"""

from __future__ import annotations

import html
import io
import math
import re
import sys
from collections.abc import Sequence
from itertools import groupby
from typing import Any

from trtdiff.errors import OptionError
from trtdiff.render.junit import format_value
from trtdiff.report import Layer, Report, SampleResult

FLOOR = 1e-12  # 1 - cosine and relative errors below this are float noise; drawn at the floor
COLORS = ("#0969da", "#bf8700", "#8250df", "#1a7f37", "#57606a")
RED = "#cf222e"
MAX_BANDS = 600  # hover columns per axis; beyond this only the upper plot gets them


def depth_svg(report: Report) -> str:
    """1 − cosine and relative error per layer along the network, one line per backend pair, as SVG."""
    import numpy as np

    mpl, figure = _matplotlib()
    layers, pairs = report.layers, list(report.pair_keys)
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
        index = layer_index(report, first.tensor) if first else None
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
        lines.append(f"{key}: cosine {cosine_text(m.cosine)}, rel-err {format_value('rel_err', m.rel_err)}"
                     + (" DIVERGED" if m.diverged else ""))
    return "\n".join(lines)


def _sample_title(sample: SampleResult) -> str:
    lines = [sample.name]
    for output, per_pair in sample.outputs.items():
        lines += [f"{output} {key}: cosine {cosine_text(m.cosine)}" for key, m in per_pair.items()]
    lines += [f"mIoU {key}: {miou_text(v)}" for key, v in sample.agreement_miou.items()]
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
    text = re.sub(r'<svg ([^>]*?)width="[^"]*" height="[^"]*"', rf'<svg class="plot" role="img" aria-label="{esc(label)}" \1',
                  text, count=1)

    def title(match: re.Match[str]) -> str:
        found = titles.get(match.group(1))
        return match.group(0) + (f"<title>{esc(found)}</title>" if found else "")

    return re.sub(r'<g id="(trtdiff-[\w-]+)">', title, text)


def layer_index(report: Report, tensor: str) -> int | None:
    return next((i for i, layer in enumerate(report.layers) if layer.tensor == tensor), None)


def cosine_text(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.7f}"


def miou_text(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.4f}"


def esc(text: str) -> str:
    return html.escape(text, quote=True)
