"""The terminal view of a Report: a header, a per-layer table, and a closing verdict line.

It stays readable at 80 columns and when piped (rich drops colour when not on a TTY):
names are shortened from the left, where paths are least informative.
"""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table
from rich.text import Text

from trtdiff.report import BuildReport, Layer, Report, TensorRTSummary

NAME_WIDTH = 26


def render_terminal(report: Report, console: Console, *, show_all: bool = False) -> None:
    """Print `report`: every layer with `show_all`, else up to and including the first divergence."""
    _header(report, console)
    pairs = list(report.pair_keys)
    layers = list(report.layers)
    shown = layers
    if not show_all and report.first_divergence is not None:
        stop = next(i for i, layer in enumerate(layers) if layer.tensor == report.first_divergence.tensor)
        shown = layers[: stop + 1]
    if shown:
        console.print(_table(shown, pairs, numbered_from=1))
    hidden = len(layers) - len(shown)
    if hidden:
        console.print(f"[dim]… {hidden} more compared layers after the first divergence (--all shows them)[/dim]")
    _verdict(report, console)


def _header(report: Report, console: Console) -> None:
    inputs = ", ".join(f"{name} {'x'.join(map(str, shape))}" for name, shape in report.inputs.items())
    console.print(Text.assemble(("trtdiff ", "bold"), f"{report.model}  (inputs: {inputs})"))
    console.print(f"ONNX: opset {report.opset} as written, exporter {report.exporter}" + (f", {report.onnx_path}" if report.onnx_path else ""))
    runners = [report.environment.get(b, b) for b in report.backends if b != "torch"]
    reference = f"torch {report.environment.get('torch', '?')} (reference)" if report.reference == "torch" else f"{report.reference} (reference)"
    console.print("backends: " + ", ".join([reference, *[r for r in runners if not r.startswith(report.reference + " ")]]))
    summary = report.pairing
    if report.reference == "torch":
        methods = ", ".join(f"{n} {m}" for m, n in sorted(summary.by_method.items()))
        console.print(
            f"paired {summary.paired_with_torch} of {summary.onnx_tensors} ONNX tensors with PyTorch"
            f" ({summary.float_tensors} float{'; ' + methods if methods else ''}); {len(report.not_compared)} not compared"
        )
    if report.tensorrt is not None and report.tensorrt.status != "skipped":
        _tensorrt_lines(report.tensorrt, console)
    for note in report.notes:
        console.print(f"[dim]note: {note}[/dim]")


def _tensorrt_lines(trt: TensorRTSummary, console: Console) -> None:
    precision = f"{trt.precision or 'fp32'}{' with TF32' if trt.tf32 else ', TF32 off'}"
    console.print(f"TensorRT: {trt.version}, {precision}, outputs {trt.outputs_mode}: {trt.marked} marked, "
                  f"{len(trt.not_returned)} not returned")
    if trt.fused_layers:
        biggest = max(trt.fused_layers, key=lambda layer: len(layer.onnx_nodes))
        console.print(f"engine fused {sum(len(f.onnx_nodes) for f in trt.fused_layers)} ONNX nodes into "
                      f"{len(trt.fused_layers)} layer{'s' if len(trt.fused_layers) != 1 else ''} (largest: {len(biggest.onnx_nodes)} nodes); source: {trt.fusion_source}")


def render_build(report: BuildReport, console: Console) -> None:
    """Print what `trtdiff build` did: the mark plan, what was not returned and why, fusions."""
    inputs = ", ".join(f"{name} {'x'.join(map(str, shape))}" for name, shape in report.inputs.items())
    console.print(Text.assemble(("trtdiff build ", "bold"), f"{report.model}  (inputs: {inputs})"))
    console.print(f"ONNX: opset {report.opset} as written, exporter {report.exporter}" + (f", {report.onnx_path}" if report.onnx_path else ""))
    trt = report.tensorrt
    console.print(f"GPU: {trt.gpu or 'none (built on the CPU; this engine cannot be run here)'}")
    _tensorrt_lines(trt, console)
    reasons: dict[str, list[str]] = {}
    for skipped in trt.not_returned:
        reasons.setdefault(skipped.reason, []).append(skipped.tensor)
    if reasons:
        table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1, 0, 0))
        table.add_column("not returned", justify="right", no_wrap=True)
        table.add_column("why (e.g.)", overflow="fold")
        for reason, tensors in sorted(reasons.items(), key=lambda item: -len(item[1])):
            table.add_row(str(len(tensors)), f"{reason} (e.g. {_shorten(tensors[0], 40)})")
        console.print(table)
    console.print(f"plan: {trt.plan_bytes:,} bytes, built in {trt.build_seconds:.2f}s"
                  + (" (from the engine cache)" if trt.from_cache else "")
                  + (f"; saved to {report.saved_engine}" if report.saved_engine else ""))
    console.print(f"ONNX-to-TensorRT name map: {len(trt.name_map)} tensors (--json writes it)")
    for note in (*report.notes, *trt.notes):
        console.print(f"[dim]note: {note}[/dim]")


def _table(layers: list[Layer], pairs: list[str], *, numbered_from: int) -> Table:
    """One row per layer; with several backend pairs the op joins the name to keep 80 columns."""
    many = len(pairs) > 1
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", padding=(0, 1, 0, 0))
    table.add_column("#", justify="right", no_wrap=True)
    if not many:
        table.add_column("op", no_wrap=True, max_width=10, overflow="ellipsis")
    name_width = NAME_WIDTH if not many else 80 - 9 - 16 * len(pairs)
    table.add_column("module / ONNX node" if not many else "op  module / ONNX node", no_wrap=True, max_width=name_width)
    for key in pairs:
        table.add_column(_short_pair(key) if many else "cos", justify="right", no_wrap=True)
        table.add_column("max|Δ|", justify="right", no_wrap=True)
        if not many:
            table.add_column("rel", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for offset, layer in enumerate(layers):
        name = layer.module or layer.onnx_node
        cells: list[Text | str] = [str(numbered_from + offset)]
        cells += [layer.op_type, _shorten(name, NAME_WIDTH)] if not many else [f"{layer.op_type[:8]} {_shorten(name, name_width - len(layer.op_type[:8]) - 1)}"]
        for key in pairs:
            metrics = layer.pairs.get(key)
            if metrics is None:
                cells += ["-", "-"] + ([] if many else ["-"])
                continue
            style = "red" if metrics.diverged else ""
            cells.append(Text(_cos(metrics.cosine, short=many), style=style))
            cells.append(Text(_sci(metrics.max_abs), style=style))
            if not many:
                cells.append(Text(_sci(metrics.rel_err), style=style))
        label = ("DIVERGED" if not many else "DIV") if layer.diverged else "ok"
        cells.append(Text(label, style="bold red" if layer.diverged else "green"))
        table.add_row(*cells)
    return table


def render_verdict(report: Report, console: Console) -> None:
    """The closing lines alone (--quiet): failed checks, then the first divergence or PASS."""
    _verdict(report, console)


def _checks(report: Report, console: Console) -> None:
    if len(report.samples) > 1 or report.segmentation is not None:
        for check in report.checks:
            mark = "[green]ok[/green]  " if check.passed else "[bold red]FAIL[/bold red]"
            console.print(f"{mark} {check.id}: {check.message}")
    if report.segmentation is not None:
        seg = report.segmentation
        parts = [f"agreement mIoU {k} {v:.4f} ({seg.changed_pixels.get(k, 0.0):.2%} pixels changed)" for k, v in seg.agreement_miou.items()]
        parts += [f"mIoU vs labels {k} {v:.4f}" for k, v in seg.label_miou.items()]
        parts += [f"drop {k} {v:+.4f}" for k, v in seg.miou_drop.items()]
        console.print("segmentation: " + "; ".join(parts))


def _verdict(report: Report, console: Console) -> None:
    _checks(report, console)
    failed = report.failed_checks
    first = report.first_divergence
    if not failed and first is None:
        keys = ", ".join(report.pair_keys) or "no pairs"
        console.print(f"[bold green]PASS[/bold green]: all {len(report.layers)} compared tensors agree ({keys}).")
        return
    if first is not None:
        where = f"module {first.module}" if first.module else "no PyTorch module"
        console.print(Text.assemble(
            ("FIRST DIVERGENCE", "bold red" if failed else "bold yellow"),
            f": {first.onnx_node} ({first.op_type}, {where}) on {first.pair}: "
            f"cosine {_cos(first.cosine)}, max-abs {_sci(first.max_abs)}, rel-err {_sci(first.rel_err)}"
            f" ({'; '.join(first.reasons)})",
        ))
        others = [s for s in first.suspects if s != first.onnx_node]
        if others:
            listed = ", ".join(others[:8]) + (f", … {len(others) - 8} more" if len(others) > 8 else "")
            console.print(f"suspects: {first.onnx_node}, then {listed}")
    if not failed:
        console.print(f"[bold green]PASS[/bold green]: all {len(report.checks)} checks hold "
                      "(layers of the first sample are shown, not gated; --per-layer gates them).")
    elif any(check.scope != "layers" for check in failed):
        console.print(f"[bold red]FAIL[/bold red]: {len(failed)} of {len(report.checks)} checks failed: "
                      + ", ".join(check.id for check in failed))


def _short_pair(key: str) -> str:
    return "~".join({"torch": "pt", "onnxruntime": "ort", "tensorrt": "trt"}.get(p, p) for p in key.split("~"))


def _shorten(name: str, width: int) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1) :]


def _cos(value: float, short: bool = False) -> str:
    if math.isnan(value):
        return "nan"
    return f"{value:.5f}" if short else f"{value:.6f}"


def _sci(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    return f"{value:.1e}"
