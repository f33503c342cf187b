"""The plots of the HTML report: matplotlib figures rendered to inline SVG.

matplotlib is imported lazily (it is the optional `html` extra); plots are drawn on
`Figure` objects without pyplot, so nothing global changes in the caller's process.
"""

from __future__ import annotations

import io
import math
import re
import sys
from collections.abc import Sequence
from itertools import groupby
from typing import Any

from trtdiff.errors import OptionError
from trtdiff.render.culprits import (
    culprit_marker,
    culprits_of,
)
from trtdiff.render.format import (
    cosine,
    escape_html as esc,
    format_value,
    layer_index,
    miou,
    thresholds_text,
)
from trtdiff.report import Layer, PairMetrics, Report, SampleResult, number
from trtdiff.report.text import plain

FLOOR = 1e-12  # 1 - cosine and relative errors below this are float noise; drawn at the floor
COLORS = ("#0969da", "#bf8700", "#8250df", "#1a7f37", "#57606a")
RED = "#cf222e"
ORANGE = "#bc4c00"  # culprits
MAX_BANDS = 600  # hover columns per axis; beyond this only the upper plot gets them


def depth_svg(report: Report) -> str:
    """1 − cosine and relative error per layer along the network, one line per backend pair, as SVG.

    Beside each pair's accumulated error, its local error (dashed, hollow squares); culprits marked.
    """
    mpl, figure = _matplotlib()
    layers, thresholds = report.layers, report.thresholds
    titles: dict[str, str] = {}
    with mpl.rc_context({**_RC, "svg.hashsalt": "trtdiff-depth"}):
        fig = figure(figsize=(11, 6.6), layout="constrained")
        top, bottom = fig.subplots(2, 1, sharex=True)
        _pair_curves(top, bottom, report)
        _local_curves(top, bottom, report)
        top.axhline(
            max(1.0 - thresholds.min_cosine, FLOOR),
            ls="dashed",
            lw=1.2,
            color=RED,
            alpha=0.7,
            label=f"threshold ({thresholds_text(thresholds)})",
        )
        bottom.axhline(max(thresholds.rtol, FLOOR), ls="dashed", lw=1.2, color=RED, alpha=0.7)
        _scopes(top, bottom, layers)
        _first_divergence(top, bottom, report)
        _culprit_marks(top, bottom, report)
        layer_titles = [_layer_title(layer.index, layer) for layer in layers]
        numbers = [layer.index for layer in layers]
        for axis, ax in enumerate((top, bottom)):
            if axis == 0 or len(layers) <= MAX_BANDS:
                titles.update(_bands(ax, [layer.diverged for layer in layers], layer_titles, f"depth{axis}", numbers))
        _log_axis(
            top, [1.0 - number(m.cosine) for layer in layers for m in _metrics(layer)], 1.0 - thresholds.min_cosine
        )
        _log_axis(bottom, [number(m.rel_err) for layer in layers for m in _metrics(layer)], thresholds.rtol)
        top.plot([], [], "o", mfc="white", mec=RED, mew=1.5, label="diverged layer")
        top.set_ylabel(f"1 − cosine (floor {FLOOR:.0e})")
        bottom.set_ylabel("relative error (max|Δ| / max|ref|)")
        bottom.set_xlabel("layer number (ONNX topological order, from 1)")
        if layers:
            bottom.set_xlim(layers[0].index - 0.5, layers[-1].index + 0.5)
        for ax in (top, bottom):
            ax.grid(True, which="major", axis="y", alpha=0.3)
        fig.legend(loc="outside lower center", ncols=min(4, len(report.pairs) + 2), frameon=False)
        return _svg(fig, titles, "per-layer 1 - cosine and relative error along the network")


def _pair_curves(top: Any, bottom: Any, report: Report) -> None:
    """Per pair, 1 − cosine (top) and relative error (bottom) per layer; diverged layers ringed, nan marked."""
    import numpy as np

    layers, pairs = report.layers, report.pairs
    x = np.array([layer.index for layer in layers])  # each layer at its number
    nan_label: str | None = "nan (drawn at the top)"
    for color, pair in zip(_cycle(len(pairs)), pairs, strict=True):
        have = [i for i, layer in enumerate(layers) if pair in layer.pairs]  # a pair may skip layers
        metrics = [layers[i].pairs[pair] for i in have]
        for ax, values in (
            (top, [1.0 - number(m.cosine) for m in metrics]),
            (bottom, [number(m.rel_err) for m in metrics]),
        ):
            shown = np.clip(np.array(values, dtype=float), FLOOR, None)
            ax.plot(x[have], shown, "o-", color=color, ms=3, lw=1.4, label=str(pair) if ax is top else None)
            hit = [j for j, m in enumerate(metrics) if m.diverged]
            ax.plot(x[have][hit], shown[hit], "o", ms=6, mfc=color, mec=RED, mew=1.5)
            bad = [int(x[have[j]]) for j, figure in enumerate(values) if math.isnan(figure)]
            if bad:  # one legend entry for all pairs
                label = nan_label if ax is top else None
                ax.plot(bad, [0.97] * len(bad), "X", ms=8, color=RED, transform=ax.get_xaxis_transform(), label=label)
                nan_label = nan_label if ax is bottom else None


def _metrics(layer: Layer) -> list[PairMetrics]:
    """Every figure a layer has: accumulated and local, of every pair."""
    return [*layer.pairs.values(), *(layer.local or {}).values()]


def _local_curves(top: Any, bottom: Any, report: Report) -> None:
    """Per pair, the local error (the node alone, on the reference's inputs): dashed, hollow squares."""
    import numpy as np

    layers, pairs = report.layers, report.pairs
    for color, pair in zip(_cycle(len(pairs)), pairs, strict=True):
        local = [(layer.index, m) for layer in layers if (m := (layer.local or {}).get(pair)) is not None]
        if not local:
            continue
        x = [i for i, _ in local]
        for ax, values in (
            (top, [1.0 - number(m.cosine) for _, m in local]),
            (bottom, [number(m.rel_err) for _, m in local]),
        ):
            shown = np.clip(np.array(values, dtype=float), FLOOR, None)
            label = f"{pair} local" if ax is top else None
            ax.plot(x, shown, "s--", color=color, ms=3.5, mfc="white", lw=0.8, alpha=0.75, label=label)


def _culprit_marks(top: Any, bottom: Any, report: Report) -> None:
    """A dash-dotted line at each culprit, labelled on the lower plot with its node and verdict."""
    placed = 0
    for culprit in culprits_of(report):
        index = layer_index(report, culprit.tensor)
        if index is None:
            continue
        for ax in (top, bottom):
            ax.axvline(index, color=ORANGE, lw=1.5, ls="-.", label="culprit" if ax is top and not placed else None)
        right = index > 0.6 * len(report.layers)
        bottom.annotate(
            plain(culprit_marker(culprit, index)),
            (index, 0.92 - 0.1 * (placed % 8)),
            xycoords=("data", "axes fraction"),
            xytext=(-6 if right else 6, 0),
            textcoords="offset points",
            ha="right" if right else "left",
            va="center",
            color=ORANGE,
            fontsize=9,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": ORANGE, "lw": 0.8, "alpha": 0.9},
            parse_math=False,  # a name's `$` is no TeX
        )
        placed += 1


def _first_divergence(top: Any, bottom: Any, report: Report) -> None:
    """A vertical line at the first diverging layer, labelled with its node."""
    first = report.first_divergence
    index = layer_index(report, first.tensor) if first else None
    if first is None or index is None:
        return
    for ax in (top, bottom):
        ax.axvline(index, color=RED, lw=1.6, label="first divergence" if ax is top else None)
    right = index > 0.6 * len(report.layers)
    # Just above the cosine threshold, left of the line, is empty: no earlier layer crosses it.
    top.annotate(
        plain(f"first divergence: #{index} {first.onnx_node} ({first.op_type})"),
        (index, max(1.0 - report.thresholds.min_cosine, FLOOR) * 4),
        xytext=(-6 if right else 6, 0),
        textcoords="offset points",
        ha="right" if right else "left",
        va="center",
        color=RED,
        fontsize=9.5,
        fontweight="bold",
        bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": RED, "lw": 0.8, "alpha": 0.9},
        parse_math=False,
    )


def samples_svg(report: Report) -> str:
    """The final outputs' figure per sample (the one a failed output check judged, else cosine) and, for
    segmentation, mIoU per sample, as SVG."""
    mpl, figure = _matplotlib()
    samples = report.samples
    seg = any(s.agreement_miou or s.label_miou for s in samples)
    metrics = sample_metrics(report)
    with mpl.rc_context({**_RC, "svg.hashsalt": "trtdiff-samples"}):
        fig = figure(figsize=(11, 3.6), layout="constrained")
        axes = fig.subplots(1, len(metrics) + seg, squeeze=False)[0]
        for ax, metric in zip(axes, metrics, strict=False):
            _sample_figures(ax, report, metric)
        if seg:
            _sample_mious(axes[-1], report)
        titles: dict[str, str] = {}
        for axis, ax in enumerate(axes):
            if len(samples) <= 20:
                ax.set_xticks(range(len(samples)), labels=[s.name for s in samples], rotation=30, ha="right")
            ax.set_xlim(-0.5, len(samples) - 0.5)
            ax.set_xlabel("sample")
            ax.grid(True, axis="y", alpha=0.3)
            ax.legend(fontsize=8.5, loc="best")
            titles.update(
                _bands(ax, [False] * len(samples), [_sample_title(s, metrics) for s in samples], f"samples{axis}")
            )
        return _svg(fig, titles, "final-output " + " and ".join(_SAMPLE_WORDS[m][0] for m in metrics) + " per sample")


_SAMPLE_WORDS = {
    "cosine": ("1 − cosine", "min-cosine"),
    "rel_err": ("relative error", "rtol"),
    "max_abs": ("max |Δ|", "max-abs"),
    "quant_steps": ("quantization steps", "max-quant-steps"),
    "noise_ratio": ("noise ratio", "max-noise-ratio"),
}
"""Per output metric a check judges: its words on the axis, and the threshold's name."""
_FIGURE_WORDS = {"rel_err": "rel-err", "max_abs": "max-abs", "quant_steps": "steps", "noise_ratio": "noise ratio"}


def sample_metrics(report: Report) -> list[str]:
    """The final outputs' figures the per-sample plot shows: those of the output checks that failed (cosine,
    rel-err, max-abs, quantization steps, noise ratio; at most two), else the figure the output checks judge
    (quantization steps or noise ratio where they do), else cosine."""
    checked: list[str] = [c.metric for c in report.checks if c.scope == "outputs" and c.metric in _SAMPLE_WORDS]
    failed: list[str] = [c.metric for c in report.failed_checks if c.scope == "outputs" and c.metric in _SAMPLE_WORDS]
    if failed:
        return list(dict.fromkeys(failed))[:2]
    judged: list[str] = [m for m in ("quant_steps", "noise_ratio") if m in checked]
    return judged[:1] or ["cosine"]


def _sample_value(metrics: PairMetrics, metric: str) -> float:
    """The figure of one output the plot draws: 1 − cosine for cosine, else the figure; NaN where it is n/a."""
    if metric == "cosine":
        return 1.0 - number(metrics.cosine)
    return number(getattr(metrics, metric))


def _sample_figures(ax: Any, report: Report, metric: str) -> None:
    """Per pair, the worst figure of `metric` over each sample's final outputs, with its threshold per check."""
    import numpy as np

    samples = report.samples
    x = np.arange(len(samples))
    pairs = list(dict.fromkeys(pair for s in samples for per_pair in s.outputs.values() for pair in per_pair))
    figures: list[float] = []
    for color, pair in zip(_cycle(len(pairs)), pairs, strict=True):
        worst = [
            max(
                (_sample_value(m, metric) for per_pair in s.outputs.values() if (m := per_pair.get(pair))),
                default=math.nan,
                key=lambda v: math.inf if math.isnan(v) else v,
            )
            for s in samples
        ]
        ax.plot(x, np.clip(np.array(worst), FLOOR, None), "o-", color=color, ms=4, label=str(pair))
        figures += worst
    words, name = _SAMPLE_WORDS[metric]
    limits = sorted({c.limit for c in report.checks if c.scope == "outputs" and c.metric == metric})
    if metric == "cosine" and not limits:
        limits = [report.thresholds.min_cosine]
    shown = [1.0 - limit if metric == "cosine" else limit for limit in limits]
    for limit, line in zip(limits, shown, strict=True):
        ax.axhline(max(line, FLOOR), ls="dashed", color=RED, alpha=0.7, label=f"{name} {limit:g}")
    _log_axis(ax, figures, min(shown, default=FLOOR))
    ax.set_ylabel(f"{words}, final outputs")


def _sample_mious(ax: Any, report: Report) -> None:
    """mIoU of each sample: agreement per pair, against labels per backend, with the min-miou thresholds."""
    samples = report.samples
    x = range(len(samples))
    pairs = list(dict.fromkeys(pair for s in samples for pair in s.agreement_miou))
    for color, pair in zip(_cycle(len(pairs)), pairs, strict=True):
        figures = [s.agreement_miou.get(pair, math.nan) for s in samples]
        ax.plot(x, figures, "o-", color=color, ms=4, label=f"agreement {pair}")
    backends = list(dict.fromkeys(b for s in samples for b in s.label_miou))
    for color, backend in zip(_cycle(len(backends)), backends, strict=True):
        figures = [s.label_miou.get(backend, math.nan) for s in samples]
        ax.plot(x, figures, "s--", color=color, ms=4, label=f"vs labels {backend}")
    for limit in sorted({c.limit for c in report.checks if c.metric == "miou"}):
        ax.axhline(limit, ls="dashed", color=RED, alpha=0.7, label=f"min-miou {limit:g}")
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("mIoU")


_RC = {
    "svg.fonttype": "none",
    "font.size": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.family": ["DejaVu Sans", "sans-serif"],
}


def _matplotlib() -> tuple[Any, Any]:
    """matplotlib and its Figure, drawn without a GUI; a clear error when it is not installed."""
    try:
        import matplotlib
    except ImportError:
        raise OptionError("needs matplotlib; pip install 'trtdiff[html]'", parameter="html") from None
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
    low, high = min(low, 300), min(high, 302)  # 10**309 is past float64: an rtol of 1e308 still draws
    ax.set_yscale("log")
    ax.set_ylim(10.0**low / 2, 10.0**high)
    ax.yaxis.set_major_locator(LogLocator(base=10, numticks=8))
    ax.yaxis.set_major_formatter(
        FuncFormatter(lambda value, _: f"{value:.0e}".replace("e-0", "e-").replace("e+0", "e"))
    )
    ax.yaxis.set_minor_locator(NullLocator())


def _scopes(top: Any, bottom: Any, layers: Sequence[Layer]) -> None:
    """Name the network's top-level parts (backbone, decoder, ...) along the upper axis, with separators."""
    runs: list[tuple[str, int, int]] = []  # (name, first layer number, last layer number)
    for name, group in groupby(layers, key=_scope):
        members = list(group)
        runs.append((name, members[0].index, members[-1].index))
    if len(runs) < 2 or len(runs) > 40:
        return
    for _, start, _ in runs[1:]:
        for ax in (top, bottom):
            ax.axvline(start - 0.5, color="#8c959f", lw=0.8, ls=":")
    secondary = top.secondary_xaxis("top")
    secondary.set_xticks(
        [(a + b) / 2 for _, a, b in runs],
        labels=[plain(n) for n, _, _ in runs],
        fontsize=9,
        color="#57606a",
        parse_math=False,
    )
    secondary.tick_params(length=0)


def _scope(layer: Layer) -> str:
    parts = layer.onnx_node.strip("/").split("/")
    if len(parts) > 1:
        return parts[0]
    return layer.module.split(".")[0] if layer.module else ""


def _bands(
    ax: Any, marked: Sequence[bool], titles: Sequence[str], prefix: str, positions: Sequence[int] | None = None
) -> dict[str, str]:
    """A column per point (at `positions`, else 0, 1, ...), shaded when marked; each gets an id for its hover title."""
    ids: dict[str, str] = {}
    places = range(len(marked)) if positions is None else positions
    for index, mark, title in zip(places, marked, titles, strict=True):
        band = ax.axvspan(
            index - 0.5, index + 0.5, facecolor=RED if mark else "white", alpha=0.09 if mark else 0.004, lw=0, zorder=0
        )
        band.set_gid(f"trtdiff-{prefix}-{index}")
        ids[f"trtdiff-{prefix}-{index}"] = title
    return ids


def _layer_title(index: int, layer: Layer) -> str:
    lines = [f"#{index} {plain(layer.op_type)}  {plain(layer.module or '(no module)')}", plain(layer.onnx_node)]
    for key, m in layer.pairs.items():
        lines.append(
            f"{key}: cosine {cosine(m.cosine)}, rel-err {format_value('rel_err', m.rel_err)}"
            + (" DIVERGED" if m.diverged else "")
        )
    for key, m in (layer.local or {}).items():
        lines.append(f"{key} local: cosine {cosine(m.cosine)}, rel-err {format_value('rel_err', m.rel_err)}")
    return "\n".join(lines)


def _sample_title(sample: SampleResult, metrics: Sequence[str] = ("cosine",)) -> str:
    lines = [plain(sample.name)]
    for output, per_pair in sample.outputs.items():
        for key, m in per_pair.items():
            figures = [f"cosine {cosine(m.cosine)}"]
            figures += [
                f"{_FIGURE_WORDS[metric]} {format_value(metric, getattr(m, metric))}"
                for metric in metrics
                if metric != "cosine"
            ]
            lines.append(f"{plain(output)} {key}: {', '.join(figures)}")
    lines += [f"mIoU {key}: {miou(v)}" for key, v in sample.agreement_miou.items()]
    if sample.failed:
        lines.append("fails: " + plain(", ".join(sample.failed)))
    return "\n".join(lines)


def _cycle(count: int) -> list[str]:
    return [COLORS[i % len(COLORS)] for i in range(count)]


def _svg(fig: Any, titles: dict[str, str], label: str) -> str:
    """The figure as inline SVG: no XML prolog or metadata, scalable, hover titles added by id."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)
    text = re.sub(
        r'<svg ([^>]*?)width="[^"]*" height="[^"]*"',
        rf'<svg class="plot" role="img" aria-label="{esc(label)}" \1',
        text,
        count=1,
    )

    def title(match: re.Match[str]) -> str:
        found = titles.get(match.group(1))
        lines = "\n".join(esc(line) for line in found.split("\n")) if found else ""  # a line per fact
        return match.group(0) + (f"<title>{lines}</title>" if found else "")

    return re.sub(r'<g id="(trtdiff-[\w-]+)">', title, text)
