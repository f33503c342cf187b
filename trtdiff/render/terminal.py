"""The terminal view of a Report: a header, a per-layer table, and a closing verdict line.

It stays readable at 80 columns and when piped (rich drops colour when not on a TTY):
names are shortened from the left, where paths are least informative. Names and notes from
the model are printed as plain text, never read as rich markup, with their control characters
(a line break, an ESC sequence) written as visible escapes (`trtdiff.render.safe_text.SafeText`).
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from trtdiff.render.culprits import (
    EXCLUSION_NOTE,
    attribution_summary,
    culprit_brief,
    culprit_quiet,
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
    check_message,
    divergence_figures,
    divergence_head,
    engines_line,
    failure_text,
    inputs_text,
    marking_changed_line,
    non_finite_failed,
    non_finite_lines,
    plural,
    segmentation_parts,
    suspects_text,
)
from trtdiff.render.runtimes import compiled_runtimes, runtime_lines, tensorrt_headline
from trtdiff.render.safe_text import SafeText
from trtdiff.render.table import render_table
from trtdiff.report import BuildReport, PairingSummary, Report, TensorRTSummary, ThresholdCheck


def render_terminal(report: Report, console: Console, *, show_all: bool = False) -> None:
    """Print `report`: with `show_all` every layer and, with several pairs, every pair of each; else up to
    and including the first divergence, each layer with the pair furthest past its limits."""
    _header(report, console)
    layers = list(report.layers)
    shown = layers
    first = report.first_divergence
    if not show_all and first is not None:
        stop = next((i for i, layer in enumerate(layers) if layer.tensor == first.tensor), len(layers) - 1)
        shown = layers[: stop + 1]
    if shown:
        table, after = render_table(report, shown, console.width, every_pair=show_all)
        if table is not None:
            console.print(table)
        for line in after:
            console.print(line)
    hidden = len(layers) - len(shown)
    if hidden:
        console.print(
            SafeText(f"… {hidden} more compared layers after the first divergence (--all shows them)", style="dim")
        )
    _verdict(report, console)


def render_verdict(report: Report, console: Console) -> None:
    """What `--quiet` prints: the verdict line, where NaN/Inf first appear, then each culprit with its fix.

    Without a culprit, the first divergence stands in for it (the culprit step was off, or
    the error is drift that no single node explains).
    """
    failed = bool(report.failed_checks)
    console.print(_verdict_line(report))
    if non_finite_failed(report):  # a CI log's one clue to where the NaN comes from
        for line in non_finite_lines(report):
            console.print(SafeText.assemble(("NON-FINITE", "bold red"), f": {line}"))
    style = "bold red" if failed else "bold yellow"
    culprits, noise = grouped_culprits(report)
    for number, group in enumerate(culprits, start=1):
        label = "CULPRIT" if number == 1 else f"CULPRIT {number}"
        console.print(SafeText.assemble((label, style), f": {culprit_quiet(report, group)}"))
    if noise:
        console.print(SafeText(noise_text(noise), style="dim"))
    if culprits and exclusion_text(report):
        console.print(SafeText(f"{exclusion_text(report)}."))
    first = report.first_divergence
    if not culprits and first is not None:
        console.print(SafeText.assemble(("FIRST DIVERGENCE", style), f": {divergence_head(first)}"))
        if report.drift is not None:
            console.print(SafeText(drift_text(report.drift), style="yellow"))
    if report.simplified is not None:
        console.print(SafeText(simplified_line(report.simplified)))


def _verdict_line(report: Report) -> Text:
    """The verdict in one line: PASS (all tensors agree, or all checks hold) or FAIL with what failed.

    The one line of the terminal that says PASS, and only for a report that passed (`Report.passed`, which
    the simplified file's comparison is part of): a report that failed says FAIL, with its own failed checks
    or the simplified file's (`failure_text`)."""
    if not report.passed or report.failed_checks:
        return SafeText.assemble(("FAIL", "bold red"), f": {failure_text(report)}")
    if report.first_divergence is None:
        pairs = ", ".join(map(str, report.pairs)) or "no pairs"
        allowed = " NaN/Inf allowed, at the same positions." if report.non_finite else ""
        return SafeText.assemble(("PASS", "bold green"), f": {agreeing_text(report, pairs=pairs)}.{allowed}")
    return SafeText.assemble(
        ("PASS", "bold green"),
        f": all {len(report.checks)} checks hold "
        "(layers of the first sample are shown, not gated; the per-layer gate checks them).",
    )


def _onnx_line(opset: int, exporter: str, onnx_path: str | None) -> str:
    return f"ONNX: opset {opset} as written, exporter {exporter}" + (f", {onnx_path}" if onnx_path else "")


def config_lines(report: Report) -> list[str]:
    """ "options from /repo/pyproject.toml: input_shapes, opset": one line per config file that set options."""
    files: dict[str, list[str]] = {}
    for name, option in report.options.items():
        if option.source not in ("default", "command line", "caller"):
            files.setdefault(option.source, []).append(name)
    return [f"options from {source}: {', '.join(names)}" for source, names in files.items()]


def _note(note: str) -> Text:
    return SafeText(f"note: {note}", style="dim")


def _header(report: Report, console: Console) -> None:
    console.print(SafeText.assemble(("trtdiff ", "bold"), f"{report.model}  (inputs: {inputs_text(report.inputs)})"))
    console.print(SafeText(_onnx_line(report.opset, report.exporter, report.onnx_path)))
    env = report.environment
    if report.reference == "torch":
        reference = f"torch {env.get('torch', '?')} (reference)"
    else:
        reference = f"{report.reference} (reference)"
    runners = [env.get(b, b) for b in report.backends if b != "torch"]
    others = [r for r in runners if not r.startswith(report.reference + " ")]
    console.print(SafeText("backends: " + ", ".join([reference, *others])))
    for line in config_lines(report):
        console.print(SafeText(line, style="dim"))
    summary = report.pairing
    if report.reference == "torch":
        console.print(SafeText(pairing_line(summary, len(report.not_compared))))
    for runtime in compiled_runtimes(report):
        if runtime.status == "skipped":
            continue  # the notes say so, with the reason
        for said in runtime_lines(runtime):
            console.print(SafeText(said.text, style="bold red" if said.alarm else ""))
    moved = exclusion_text(report) if culprits_of(report) else ""
    for note in report.notes:
        if not (moved and note.startswith(EXCLUSION_NOTE)):  # said beside the culprits
            console.print(_note(note))


def _tensorrt_lines(trt: TensorRTSummary, console: Console) -> None:
    check = trt.marking_check
    if check is not None and check.status == "changed":
        console.print(SafeText(marking_changed_line(trt), style="bold red"))
    console.print(SafeText(tensorrt_headline(trt)))
    if trt.outputs_mode is not None:
        console.print(SafeText(engines_line(trt)))
    if trt.fused_layers:
        biggest = max(len(layer.onnx_nodes) for layer in trt.fused_layers)
        nodes = sum(len(layer.onnx_nodes) for layer in trt.fused_layers)
        console.print(
            SafeText(
                f"engine fused {nodes} ONNX nodes into {plural(len(trt.fused_layers), 'layer')} "
                f"(largest: {biggest} nodes); source: {trt.fusion_source}"
            )
        )


def _build_engine_lines(trt: TensorRTSummary, console: Console) -> None:
    """The plain engine, the fusions the marked engine splits, precision as built, the marking check."""
    plain = trt.plain_engine
    if plain is not None:
        console.print(
            SafeText(
                f"plain engine (what ships): {plain.plan_bytes:,} bytes"
                + (" (from the engine cache)" if plain.from_cache else f", built in {plain.build_seconds:.2f}s")
                + f"; the marked engine splits {plural(len(trt.fusions_split), 'of its fused layer')}"
                + (f" (source: {trt.fusions_split_source})" if trt.fusions_split_source else "")
            )
        )
        for split in trt.fusions_split[:5]:
            console.print(
                SafeText(
                    f"  split: {_shorten(split.layer, 30)} ({len(split.onnx_nodes)} nodes) "
                    f"into {len(split.split_into)} layers"
                )
            )
        if len(trt.fusions_split) > 5:
            console.print(SafeText(f"  … {len(trt.fusions_split) - 5} more (the JSON report lists them)", style="dim"))
    if trt.layer_precisions or trt.precision_missing:
        console.print(SafeText(precision_line(trt)))
        for row in [r for r in trt.layer_precisions if r.flag][:5]:
            console.print(SafeText(f"  {row.flag}: {_shorten(row.layer, 40)} built {row.built}, asked {row.asked}"))
    check = trt.marking_check
    if check is not None and check.status != "changed":
        why = f": {check.reason}" if check.reason else ""
        console.print(SafeText(f"marking check (plain vs marked outputs): {check.status}{why}"))


def precision_line(trt: TensorRTSummary) -> str:
    """Precision as built: how many layers as asked, lower, higher, unknown; TF32 as built."""
    rows = trt.layer_precisions
    lower = sum(1 for r in rows if r.flag == "lower")
    higher = sum(1 for r in rows if r.flag == "higher")
    unknown = sum(1 for r in rows if r.missing)
    same = len(rows) - lower - higher - unknown
    kinds = sorted({r.built for r in rows if r.built})
    tf32 = {True: "TF32 allowed in the plan", False: "TF32 off in the plan", None: "TF32 in the plan: not read"}[
        trt.tf32_built
    ]
    text = (
        f"precision as built ({trt.precision_source or 'no source'}): {same} layers as asked"
        f" ({', '.join(kinds) or '-'}), {lower} lower, {higher} higher, {unknown} unknown; {tf32}"
    )
    if trt.precision_missing:
        text += f"; missing: {trt.precision_missing}"
    return text


def render_build(report: BuildReport, console: Console) -> None:
    """Print what `trtdiff build` did: the marks and runs, what was not returned and why, fusions, precision."""
    console.print(
        SafeText.assemble(("trtdiff build ", "bold"), f"{report.model}  (inputs: {inputs_text(report.inputs)})")
    )
    console.print(SafeText(_onnx_line(report.opset, report.exporter, report.onnx_path)))
    trt = report.tensorrt
    console.print(SafeText(f"GPU: {trt.gpu or 'none (built on the CPU; this engine cannot be run here)'}"))
    _tensorrt_lines(trt, console)
    reasons: dict[str, list[str]] = {}
    for skipped in trt.not_returned:
        reasons.setdefault(skipped.reason, []).append(skipped.tensor)
    if reasons:
        table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1, 0, 0))
        table.add_column("not returned", justify="right", no_wrap=True)
        table.add_column("why (e.g.)", overflow="fold")
        for reason, tensors in sorted(reasons.items(), key=lambda item: -len(item[1])):
            table.add_row(str(len(tensors)), SafeText(f"{reason} (e.g. {_shorten(tensors[0], 40)})"))
        console.print(table)
    console.print(
        SafeText(
            f"marked engine: {trt.plan_bytes:,} bytes; built in {trt.build_seconds:.2f}s in all"
            + (" (from the engine cache)" if trt.from_cache else "")
            + (f"; saved to {report.saved_engine}" if report.saved_engine else "")
        )
    )
    _build_engine_lines(trt, console)
    console.print(SafeText(f"ONNX-to-TensorRT name map: {len(trt.name_map)} tensors (the JSON report holds it)"))
    for note in (*report.notes, *trt.notes):
        console.print(_note(note))


def _checks(report: Report, console: Console) -> None:
    if len(report.samples) > 1 or report.segmentation is not None:
        for check in report.checks:
            mark = _check_mark(check)
            console.print(SafeText.assemble(mark, f" {check.id}: {check_message(check, report)}"))
    if report.segmentation is not None:
        console.print(SafeText("segmentation: " + "; ".join(segmentation_parts(report.segmentation))))


def _check_mark(check: ThresholdCheck) -> Text:
    """ "ok", "FAIL", or "scr" for a check that passed with layers only screened by statistics."""
    if not check.passed:
        return SafeText("FAIL", style="bold red")
    return SafeText("scr ", style="yellow") if check.screened else SafeText("ok  ", style="green")


def _verdict(report: Report, console: Console) -> None:
    _checks(report, console)
    style = "bold red" if non_finite_failed(report) else "bold yellow"
    for line in non_finite_lines(report):
        console.print(SafeText.assemble(("NON-FINITE", style), f": {line}"))
    failed = report.failed_checks
    if failed or report.first_divergence is not None:
        _findings(report, console, "bold red" if failed else "bold yellow")
    if report.simplified is not None:
        console.print(SafeText(simplified_line(report.simplified)))
    console.print(_verdict_line(report))  # the last line, whatever came before it


def _findings(report: Report, console: Console, style: str) -> None:
    """The culprits (the first in full, the others one short line each), the first divergence, and drift."""
    culprits, noise = grouped_culprits(report)
    for number, group in enumerate(culprits, start=1):
        if number == 1:
            console.print(SafeText.assemble(("CULPRIT", style), f": {culprit_text(report, group)}"))
        else:
            console.print(SafeText.assemble((f"CULPRIT {number}", style), f": {culprit_brief(report, group)}"))
    if noise:
        console.print(SafeText(noise_text(noise), style="dim"))
    for sentence in attribution_summary(report):
        console.print(SafeText(f"{sentence}."))
    if culprits and exclusion_text(report):  # beside the attribution: it measures something else
        console.print(SafeText(f"{exclusion_text(report)}."))
    first = report.first_divergence
    if first is not None:
        console.print(
            SafeText.assemble(
                ("FIRST DIVERGENCE", style),
                f": {divergence_head(first)}: {divergence_figures(first)}{inherited_text(report)}",
            )
        )
        suspects = suspects_text(first)
        if suspects:
            console.print(SafeText(f"suspects: {suspects}"))
    if report.drift is not None and not culprits:
        console.print(SafeText(drift_text(report.drift), style="yellow"))


def _shorten(name: str, width: int) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1) :]


def pairing_line(summary: PairingSummary, not_compared: int) -> str:
    """'paired 51 of 51 float tensors with PyTorch (21 folded, 30 op); others: 12 constant, 9 shape; ...'."""
    structure = f"; {summary.structure_only} on structure alone" if summary.structure_only else ""
    methods = ", ".join(f"{n} {m}" for m, n in sorted(summary.by_method.items())) + structure
    others = ", ".join(f"{n} {kind}" for kind, n in sorted(summary.other_tensors.items(), key=lambda item: -item[1]))
    return (
        f"paired {summary.float_paired} of {summary.float_tensors} float tensors with PyTorch"
        + (f" ({methods})" if methods else "")
        + (f"; others: {others}" if others else "")
        + f"; {not_compared} not compared"
    )


def simplified_line(simplified: Report) -> str:
    """One line on the simplified file's comparison, beside the original's: its checks in words (never the
    verdict's PASS, which the whole report's line alone says), its finding, its pairing."""
    how = next((n.removeprefix("simplified with ") for n in simplified.notes if n.startswith("simplified with ")), "")
    failed = simplified.failed_checks
    total = len(simplified.checks)
    if failed or not simplified.passed:
        result = f"{len(failed)} of {plural(total, 'check')} {'fails' if len(failed) == 1 else 'fail'}"
    else:
        result = f"its {plural(total, 'check')} {'holds' if total == 1 else 'hold'}"
    culprit, first = simplified.culprit, simplified.first_divergence
    if culprit is not None:
        finding = f"culprit {culprit.onnx_node} ({culprit.op_type}, {culprit.verdict})"
    elif first is not None:
        finding = f"first divergence {first.onnx_node} ({first.op_type})"
    else:
        finding = f"all {len(simplified.layers)} compared tensors agree"
    paired = f"paired {simplified.pairing.float_paired} of {simplified.pairing.float_tensors} float tensors"
    return f"simplified ({how}): {result}; {finding}; {paired}"
