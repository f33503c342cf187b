"""The terminal's layer table: one row per compared tensor, 80 columns with any number of backends.

Columns: the layer's number, its op and module (or ONNX node), with several backend pairs the pair the row
shows (the one furthest past its limits, `judged.worst_pair`; `--all` adds a line per other pair), the
cosine, the figure the verdict judged with its limit in the head ("rel≤1e-3", "ratio≤8", "steps≤8"), the
node's own (local) error in the same units, and the status. Rows that only copy their input, constants and
shape arithmetic the ONNX backends agree on bit for bit are folded into one line (`judged.folds`). Nothing
is cut where the console has room; a name too long for it is shortened from the left, where paths are
least informative. Names from the model are shown as plain text (`SafeText`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from trtdiff.render.culprits import culprits_of
from trtdiff.render.format import cosine, short_backend, short_pair
from trtdiff.render.judged import (
    DRIFT_LEGEND,
    Kind,
    fold_text,
    folds,
    judged_cell,
    judged_header,
    judged_legend,
    kinds_of,
    pair_order,
    worst_pair,
)
from trtdiff.render.safe_text import SafeText
from trtdiff.report import BackendPair, Layer, PairMetrics, Report
from trtdiff.report.text import plain

WIDTH = 80
"""The narrowest console the table is laid out for (CI logs); a wider one gives the names more room."""
NUMBER = 8
"""The width of a figure: 1.000000, 2.64e-02."""
OP_PAD = 8
"""Op types are padded to this many characters in the name cell, so that the names line up (longer ones
run on)."""


@dataclass(frozen=True)
class Line:
    """One line of the table: a layer with the pair it shows (`first`: the line that names the layer)."""

    layer: Layer
    pair: BackendPair
    first: bool = True


def table_lines(report: Report, layers: Sequence[Layer], *, every_pair: bool) -> tuple[list[Line], list[Layer]]:
    """The lines of `layers` (one per layer with the pair it shows; with `every_pair`, one per pair) and the
    layers folded instead (`judged.folds`; never a culprit or where NaN/Inf first appear)."""
    pairs = pair_order(report)
    keep = {c.tensor for c in culprits_of(report)} | {entry.tensor for entry in report.non_finite}
    lines: list[Line] = []
    folded: list[Layer] = []
    for layer in layers:
        if layer.tensor not in keep and folds(layer, report):
            folded.append(layer)
            continue
        shown = worst_pair(layer, pairs, report.thresholds, report.reference)
        if every_pair and len(pairs) > 1:
            have = [pair for pair in pairs if pair in layer.pairs]
            lines += [Line(layer, pair, first=i == 0) for i, pair in enumerate(have)]
        else:
            lines.append(Line(layer, shown))
    return lines, folded


def render_table(
    report: Report, layers: Sequence[Layer], width: int = WIDTH, *, every_pair: bool = False
) -> tuple[Table | None, list[Text]]:
    """The table of `layers` (None when every one is folded) and the lines to print after it: the folded rows'
    count, which pair a row shows, the judged column's limits where it mixes units."""
    lines, folded = table_lines(report, layers, every_pair=every_pair)
    after: list[Text] = []
    if folded:
        after.append(SafeText(f"… {fold_text(folded)} (the JSON and HTML reports list them)", style="dim"))
    if not lines:
        return None, after
    layout = _Layout.of(report, lines, max(width, WIDTH))
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", padding=(0, 1, 0, 0))
    table.add_column("#", justify="right", no_wrap=True)
    name_head = f"{'op':<{layout.pad}} module / ONNX node"
    table.add_column(name_head if len(name_head) <= layout.name else "op", no_wrap=True, max_width=layout.name)
    if layout.many:
        table.add_column("pair", no_wrap=True)
    table.add_column("cos", justify="right", no_wrap=True)
    table.add_column(layout.head, justify="right", no_wrap=True)
    if layout.local:
        table.add_column("local", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for line in lines:
        table.add_row(*_cells(line, layout))
    if any(m.statistics for line in lines for m in line.layer.pairs.values()):
        table.caption = (
            "screened (scr), ~: from statistics alone (--capture stats): cosine at most, errors at least these; "
            "a screened layer passed these bounds but was not compared value by value"
        )
        table.caption_justify = "left"
    legend = judged_legend(layout.kinds, report.thresholds)
    if legend:
        after.append(SafeText(legend, style="dim"))
    if any(m.drift for line in lines for m in _figures(line)):
        after.append(SafeText(DRIFT_LEGEND, style="dim"))
    if layout.many:
        after.append(SafeText(_pair_legend(report, every_pair), style="dim"))
    return table, after


@dataclass(frozen=True)
class _Layout:
    """What every row of one table shares: several pairs or one, the judged column's kinds and head, whether
    there is a local column, the op's padding and the room the name has."""

    many: bool
    kinds: list[Kind]
    head: str
    local: bool
    pad: int
    name: int

    @classmethod
    def of(cls, report: Report, lines: list[Line], width: int) -> _Layout:
        """The layout of `lines` on a console `width` wide: the name takes what the other columns leave."""
        many = len(report.pairs) > 1
        kinds = kinds_of([m for line in lines for m in _figures(line)])
        local = any(_local(line) is not None for line in lines)
        head = judged_header(kinds, report.thresholds)
        unit = len(kinds) > 1
        judged = max([len(head), *(len(judged_cell(m, unit=unit)) for line in lines for m in _figures(line))])
        widths = [max(len(str(line.layer.index)) for line in lines), NUMBER, judged]
        if many:
            widths.append(max(len("pair"), *(len(short_pair(line.pair)) for line in lines)))
        if local:
            widths.append(max(len("local"), judged))
        widths.append(max(len(_status(line, many).plain) for line in lines))
        pad = min(max(len(plain(line.layer.op_type)) for line in lines), OP_PAD)
        room = width - sum(widths) - len(widths)  # one space between columns
        return cls(many, kinds, head, local, pad, max(room, 2))


def _figures(line: Line) -> list[PairMetrics]:
    own = _local(line)
    return [line.layer.pairs[line.pair], *([own] if own is not None else [])]


def _local(line: Line) -> PairMetrics | None:
    return (line.layer.local or {}).get(line.pair)


def _pair_legend(report: Report, every_pair: bool) -> str:
    """ "pair: the worst of 6 pairs, torch's first (pt torch, ...); --all lists each"."""
    names = ", ".join(f"{short_backend(name)} {name}" for name in report.backends if short_backend(name) != name)
    names = f" ({names})" if names else ""
    if every_pair:
        return f"pair: each of the {len(report.pairs)} pairs{names}"
    return f"pair: the worst of {len(report.pairs)} pairs, {report.reference}'s first{names}; --all lists each"


def _name_cell(layer: Layer, pad: int, width: int) -> str:
    """ "Conv     backbone.stem.0": the op padded to `pad`, then the module (or, without one, the ONNX node),
    shortened from the left to fit `width` ("Conv …stem.0"; the op too only where nothing else fits)."""
    name, op_type = plain(layer.module or layer.onnx_node), plain(layer.op_type)
    op = f"{op_type:<{pad}} "
    room = width - len(op)
    if len(op) + len(name) <= width or room < 6:
        return _shorten(op + name, width)
    return op + _shorten(name, room)


def _shorten(name: str, width: int) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1) :]


def _cells(line: Line, layout: _Layout) -> list[Text | str]:
    layer, metrics = line.layer, line.layer.pairs[line.pair]
    style = "red" if metrics.diverged else ""
    unit = len(layout.kinds) > 1
    cells: list[Text | str] = [str(layer.index) if line.first else ""]
    cells.append(SafeText(_name_cell(layer, layout.pad, layout.name)) if line.first else "")
    if layout.many:
        cells.append(short_pair(line.pair))
    cells += [SafeText(cosine(metrics.cosine), style=style), SafeText(judged_cell(metrics, unit=unit), style=style)]
    if layout.local:
        own = _local(line)
        cells.append("-" if own is None else SafeText(judged_cell(own, unit=unit), style="red" if own.diverged else ""))
    cells.append(_status(line, layout.many))
    return cells


def _status(line: Line, many: bool) -> Text:
    """ "ok", "DIVERGED" ("DIV" with several pairs; "~" after it: from statistics), "screened" ("scr"), or
    "NaN"/"Inf" where both sides hold them at the same positions."""
    metrics = line.layer.pairs[line.pair]
    if metrics.diverged:
        text = SafeText("DIV" if many else "DIVERGED", style="bold red")
        return SafeText.assemble(text, ("~", "dim")) if metrics.statistics else text
    if metrics.statistics:  # passed bounds from statistics, not compared value by value: never "ok"
        return SafeText("scr" if many else "screened", style="yellow")
    if metrics.nan_ref or metrics.nan_cand or metrics.inf_ref or metrics.inf_cand:
        return SafeText("NaN" if metrics.nan_ref or metrics.nan_cand else "Inf", style="yellow")
    return SafeText("ok", style="green")
