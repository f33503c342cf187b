"""The terminal view of a Report: a header, a per-layer table, and a closing verdict line.

It stays readable at 80 columns and when piped (rich drops colour when not on a TTY):
names are shortened from the left, where paths are least informative. Names and notes from
the model are printed as plain text, never read as rich markup.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from trtdiff.render.format import (
    check_message,
    cosine,
    divergence_figures,
    divergence_head,
    inputs_text,
    plural,
    precision_text,
    sci,
    segmentation_parts,
    short_pair,
    suspects_text,
)
from trtdiff.report import BackendPair, BuildReport, Layer, Report, TensorRTSummary

WIDTH = 80
NAME_WIDTH = 26
# With several pairs: "#" (3) and the verdict "DIV" (3) with padding, and per pair cosine and max|Δ| (8 each).
_FIXED_WIDTH = 8
_PAIR_WIDTH = 18


def render_terminal(report: Report, console: Console, *, show_all: bool = False) -> None:
    """Print `report`: every layer with `show_all`, else up to and including the first divergence."""
    _header(report, console)
    layers = list(report.layers)
    shown = layers
    first = report.first_divergence
    if not show_all and first is not None:
        stop = next((i for i, layer in enumerate(layers) if layer.tensor == first.tensor), len(layers) - 1)
        shown = layers[: stop + 1]
    if shown:
        console.print(_table(shown, list(report.pairs)))
    hidden = len(layers) - len(shown)
    if hidden:
        console.print(
            Text(f"… {hidden} more compared layers after the first divergence (show all to see them)", style="dim")
        )
    _verdict(report, console)


def render_verdict(report: Report, console: Console) -> None:
    """The closing lines alone: failed checks, then the first divergence or PASS."""
    _verdict(report, console)


def _onnx_line(opset: int, exporter: str, onnx_path: str | None) -> str:
    return f"ONNX: opset {opset} as written, exporter {exporter}" + (f", {onnx_path}" if onnx_path else "")


def _note(note: str) -> Text:
    return Text(f"note: {note}", style="dim")


def _header(report: Report, console: Console) -> None:
    console.print(Text.assemble(("trtdiff ", "bold"), f"{report.model}  (inputs: {inputs_text(report.inputs)})"))
    console.print(Text(_onnx_line(report.opset, report.exporter, report.onnx_path)))
    env = report.environment
    if report.reference == "torch":
        reference = f"torch {env.get('torch', '?')} (reference)"
    else:
        reference = f"{report.reference} (reference)"
    runners = [env.get(b, b) for b in report.backends if b != "torch"]
    others = [r for r in runners if not r.startswith(report.reference + " ")]
    console.print(Text("backends: " + ", ".join([reference, *others])))
    summary = report.pairing
    if report.reference == "torch":
        methods = ", ".join(f"{n} {m}" for m, n in sorted(summary.by_method.items()))
        console.print(
            Text(
                f"paired {summary.paired_with_torch} of {summary.onnx_tensors} ONNX tensors with PyTorch"
                f" ({summary.float_tensors} float{'; ' + methods if methods else ''});"
                f" {len(report.not_compared)} not compared"
            )
        )
    if report.tensorrt is not None and report.tensorrt.status != "skipped":
        _tensorrt_lines(report.tensorrt, console)
    for note in report.notes:
        console.print(_note(note))


def _tensorrt_lines(trt: TensorRTSummary, console: Console) -> None:
    console.print(
        Text(
            f"TensorRT: {trt.version}, {precision_text(trt.precision, trt.tf32)}, outputs "
            f"{trt.outputs_mode}: {trt.marked} marked, {len(trt.not_returned)} not returned"
        )
    )
    if trt.fused_layers:
        biggest = max(len(layer.onnx_nodes) for layer in trt.fused_layers)
        nodes = sum(len(layer.onnx_nodes) for layer in trt.fused_layers)
        console.print(
            Text(
                f"engine fused {nodes} ONNX nodes into {plural(len(trt.fused_layers), 'layer')} "
                f"(largest: {biggest} nodes); source: {trt.fusion_source}"
            )
        )


def render_build(report: BuildReport, console: Console) -> None:
    """Print what `trtdiff build` did: the mark plan, what was not returned and why, fusions."""
    console.print(Text.assemble(("trtdiff build ", "bold"), f"{report.model}  (inputs: {inputs_text(report.inputs)})"))
    console.print(Text(_onnx_line(report.opset, report.exporter, report.onnx_path)))
    trt = report.tensorrt
    console.print(Text(f"GPU: {trt.gpu or 'none (built on the CPU; this engine cannot be run here)'}"))
    _tensorrt_lines(trt, console)
    reasons: dict[str, list[str]] = {}
    for skipped in trt.not_returned:
        reasons.setdefault(skipped.reason, []).append(skipped.tensor)
    if reasons:
        table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1, 0, 0))
        table.add_column("not returned", justify="right", no_wrap=True)
        table.add_column("why (e.g.)", overflow="fold")
        for reason, tensors in sorted(reasons.items(), key=lambda item: -len(item[1])):
            table.add_row(str(len(tensors)), Text(f"{reason} (e.g. {_shorten(tensors[0], 40)})"))
        console.print(table)
    console.print(
        Text(
            f"plan: {trt.plan_bytes:,} bytes, built in {trt.build_seconds:.2f}s"
            + (" (from the engine cache)" if trt.from_cache else "")
            + (f"; saved to {report.saved_engine}" if report.saved_engine else "")
        )
    )
    console.print(Text(f"ONNX-to-TensorRT name map: {len(trt.name_map)} tensors (the JSON report holds it)"))
    for note in (*report.notes, *trt.notes):
        console.print(_note(note))


def _table(layers: list[Layer], pairs: list[BackendPair]) -> Table:
    """One row per layer; with several backend pairs the op joins the name to keep 80 columns."""
    many = len(pairs) > 1
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", padding=(0, 1, 0, 0))
    table.add_column("#", justify="right", no_wrap=True)
    if not many:
        table.add_column("op", no_wrap=True, max_width=10, overflow="ellipsis")
    name_width = NAME_WIDTH if not many else max(WIDTH - _FIXED_WIDTH - _PAIR_WIDTH * len(pairs), 12)
    table.add_column("module / ONNX node" if not many else "op  module / node", no_wrap=True, max_width=name_width)
    for pair in pairs:
        table.add_column(short_pair(pair) if many else "cos", justify="right", no_wrap=True)
        table.add_column("max|Δ|", justify="right", no_wrap=True)
        if not many:
            table.add_column("rel", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for number, layer in enumerate(layers, start=1):
        table.add_row(*_row(number, layer, pairs, name_width))
    return table


def _row(number: int, layer: Layer, pairs: list[BackendPair], name_width: int) -> list[Text | str]:
    many = len(pairs) > 1
    name = layer.module or layer.onnx_node
    cells: list[Text | str] = [str(number)]
    if many:
        op = layer.op_type[:8]
        cells.append(Text(f"{op} {_shorten(name, name_width - len(op) - 1)}"))
    else:
        cells += [Text(layer.op_type), Text(_shorten(name, NAME_WIDTH))]
    for pair in pairs:
        metrics = layer.pairs.get(pair)
        if metrics is None:
            cells += ["-", "-"] + ([] if many else ["-"])
            continue
        style = "red" if metrics.diverged else ""
        cells += [Text(cosine(metrics.cosine), style=style), Text(sci(metrics.max_abs), style=style)]
        if not many:
            cells.append(Text(sci(metrics.rel_err), style=style))
    label = ("DIVERGED" if not many else "DIV") if layer.diverged else "ok"
    cells.append(Text(label, style="bold red" if layer.diverged else "green"))
    return cells


def _checks(report: Report, console: Console) -> None:
    if len(report.samples) > 1 or report.segmentation is not None:
        for check in report.checks:
            mark = Text("ok  ", style="green") if check.passed else Text("FAIL", style="bold red")
            console.print(Text.assemble(mark, f" {check.id}: {check_message(check, report)}"))
    if report.segmentation is not None:
        console.print(Text("segmentation: " + "; ".join(segmentation_parts(report.segmentation))))


def _verdict(report: Report, console: Console) -> None:
    _checks(report, console)
    failed = report.failed_checks
    first = report.first_divergence
    if not failed and first is None:
        pairs = ", ".join(map(str, report.pairs)) or "no pairs"
        console.print(
            Text.assemble(("PASS", "bold green"), f": all {len(report.layers)} compared tensors agree ({pairs}).")
        )
        return
    if first is not None:
        console.print(
            Text.assemble(
                ("FIRST DIVERGENCE", "bold red" if failed else "bold yellow"),
                f": {divergence_head(first)}: {divergence_figures(first)}",
            )
        )
        suspects = suspects_text(first)
        if suspects:
            console.print(Text(f"suspects: {suspects}"))
    if not failed:
        console.print(
            Text.assemble(
                ("PASS", "bold green"),
                f": all {len(report.checks)} checks hold "
                "(layers of the first sample are shown, not gated; the per-layer gate checks them).",
            )
        )
    elif any(check.scope != "layers" for check in failed):
        console.print(
            Text.assemble(
                ("FAIL", "bold red"),
                f": {len(failed)} of {len(report.checks)} checks failed: " + ", ".join(check.id for check in failed),
            )
        )


def _shorten(name: str, width: int) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1) :]
