"""The terminal view of a sweep: one row per opset and exporter, then which combinations pass."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from trtdiff.render.format import cosine, miou, sci
from trtdiff.render.runtimes import compiled_runtimes
from trtdiff.render.safe_text import SafeText

if TYPE_CHECKING:
    from rich.console import Console

    from trtdiff.hypotheses.sweep import Sweep, SweepEntry
    from trtdiff.report import Report


def render_sweep(sweep: Sweep, console: Console) -> None:
    """The table (fits 80 columns) and the verdict line naming the combinations that pass."""
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, 1, 0, 0))
    table.add_column("opset", justify="right", no_wrap=True)
    table.add_column("exporter", no_wrap=True)
    with_precision = any(entry.precision for entry in sweep.entries)
    if with_precision:
        table.add_column("precision", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("first culprit / divergence", overflow="fold")
    for column in ("out cos", "rel", "mIoU"):
        table.add_column(column, justify="right", no_wrap=True)
    for entry in sweep.entries:
        row = _row(entry)
        table.add_row(*([*row[:2], entry.precision or "-", *row[2:]] if with_precision else row))
    console.print(table)
    skipped = [
        runtime
        for e in sweep.entries
        if e.precision and e.report
        for runtime in compiled_runtimes(e.report)
        if runtime.status == "skipped"
    ]
    for runtime in {r.backend: r for r in skipped}.values():
        console.print(
            SafeText(f"precision rows compare {runtime.title}, which was skipped here: {runtime.reason}", style="dim")
        )
    passing = ", ".join(
        f"{e.report.opset}/{e.report.exporter}" + (f"/{e.precision}" if e.precision else "")
        for e in sweep.passing
        if e.report is not None
    )
    if sweep.passed:
        console.print(SafeText.assemble(("PASS", "bold green"), f": every combination agrees ({passing})."))
    else:
        console.print(
            SafeText.assemble(
                ("FAIL", "bold red"), ": " + (f"these pass: {passing}." if passing else "no combination passes.")
            )
        )


def _row(entry: SweepEntry) -> list[str | Text]:
    report = entry.report
    if report is None:
        label = SafeText("skipped", style="dim") if entry.skipped else SafeText("FAILED", style="bold red")
        why = SafeText(entry.skipped or entry.failed or "")  # an error's text can name a file: never markup
        return [str(entry.opset), SafeText(entry.exporter), label, why, "-", "-", "-"]
    output = _output_metrics(report)
    result = SafeText("PASS", style="green") if report.passed else SafeText("FAIL", style="bold red")
    return [
        str(report.opset),
        SafeText(report.exporter),
        result,
        SafeText(_finding(report)),  # names from the model: never markup
        cosine(output[0]) if output else "-",
        sci(output[1]) if output else "-",
        _miou(report),
    ]


def _finding(report: Report) -> str:
    culprit, first = report.culprit, report.first_divergence
    if culprit is not None:
        return f"{culprit.onnx_node} ({culprit.op_type}, {culprit.verdict})"
    if first is not None:
        return f"{first.onnx_node} ({first.op_type})"
    if report.non_finite:  # NaN/Inf at the same places on both sides: no divergence, but not finite either
        entry = report.non_finite[0]
        return f"NaN/Inf from {entry.onnx_node} ({entry.op_type})"
    return "-"


def _output_metrics(report: Report) -> tuple[float | None, float | None] | None:
    outputs = report.outputs
    pair = report.pairs[0] if report.pairs else None
    if not outputs or pair is None or pair not in outputs[0].pairs:
        return None
    metrics = outputs[0].pairs[pair]
    return metrics.cosine, metrics.rel_err


def _miou(report: Report) -> str:
    seg = report.segmentation
    if seg is None:
        return "-"
    candidate = report.pairs[0].candidate if report.pairs else None
    if seg.label_miou and candidate in seg.label_miou:
        return miou(seg.label_miou[candidate])
    value = seg.agreement_miou.get(report.pairs[0]) if report.pairs else None
    return miou(value) if value is not None else "-"
