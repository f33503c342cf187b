"""`trtdiff demo`: the seed's story on the embedded DeepLabV3+, offline, in seconds.

A sweep over opsets (10 and 13 by default): one table, then for each failing opset the
culprits (which node, export or runtime, what fixing it recovers) and what `inspect` says
about the file. It succeeds when it shows what it promises: below opset 11 the bilinear
Resizes are the culprits and inspect flags them; from 11 on everything agrees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rich.text import Text

from trtdiff.hypotheses.sweep import sweep
from trtdiff.render.culprits import (
    attribution_summary,
    culprit_brief,
    culprit_groups,
    culprit_text,
    culprits_of,
)
from trtdiff.render.sweep_text import render_sweep

if TYPE_CHECKING:
    import torch
    from rich.console import Console

    from trtdiff.report import Report
    from trtdiff.report.inspection import Inspection

EXAMPLES = {
    "resnet": ("trtdiff.examples.deeplabv3plus", "deeplabv3plus_resnet"),
    "mobilenetv2": ("trtdiff.examples.mobilenetv2", "deeplabv3plus_mobilenetv2"),
}
_RESIZE_FINDINGS = ("resize-no-coordinate-mode", "asymmetric-coordinates", "coordinate-mismatch")


def build_example(name: str) -> torch.nn.Module:
    """The embedded example model `name`, in eval mode with seeded weights."""
    import importlib

    module_name, factory = EXAMPLES[name]
    model: torch.nn.Module = getattr(importlib.import_module(module_name), factory)()
    return model


def run_demo(
    example: str,
    input_shape: str,
    opsets: Sequence[int],
    console: Console,
    *,
    show_all: bool = False,
    name_of: Callable[[str], str] = str,
) -> bool:
    """Sweep the example over `opsets`; True when each result is the one the demo expects.

    `show_all` also prints every failing opset's full layer table; `name_of` writes the
    parameters that inspect's advice and failing rows name (the CLI passes its flags).
    """
    from trtdiff.hypotheses.inspect import inspect_model
    from trtdiff.render.terminal import render_terminal

    model = build_example(example)
    result = sweep(model, opsets=list(opsets), input_shapes=[input_shape], name_of=name_of)
    console.rule("sweep")
    render_sweep(result, console)
    ok = True
    for entry in result.entries:
        report = entry.report
        if report is None:
            ok = False
            continue
        if report.passed:
            ok &= entry.opset >= 11
            continue
        console.rule(f"opset {entry.opset}")
        if show_all:
            render_terminal(report, console, show_all=True)
        _culprit_lines(report, console)
        inspection = inspect_model(model, opset=entry.opset, input_shapes=[input_shape], name_of=name_of)
        _inspect_lines(inspection, console)
        ok &= entry.opset < 11 and _resize_story(report, inspection)
    _closing(ok, console)
    return ok


def _culprit_lines(report: Report, console: Console) -> None:
    for number, group in enumerate(culprit_groups(report), start=1):
        text = culprit_text(report, group) if number == 1 else culprit_brief(report, group)
        console.print(Text.assemble((f"CULPRIT{'' if number == 1 else f' {number}'}", "bold red"), f": {text}"))
    for sentence in attribution_summary(report):
        console.print(Text(f"{sentence}."))


def _inspect_lines(inspection: Inspection, console: Console) -> None:
    for finding in inspection.findings:
        if finding.severity == "info":
            continue
        console.print(
            Text.assemble(
                ("inspect ", "bold"),
                (finding.severity.upper(), "bold red"),
                f" {finding.code}: {', '.join(finding.nodes)}",
            )
        )
        console.print(Text(f"    fix: {finding.advice}"))


def _resize_story(report: Report, inspection: Inspection) -> bool:
    """The culprits are Resizes with an export verdict, and inspect flags those same nodes."""
    culprits = culprits_of(report)
    flagged = {node for f in inspection.findings if f.code in _RESIZE_FINDINGS for node in f.nodes}
    return bool(culprits) and all(
        c.op_type == "Resize" and c.verdict == "export" and c.onnx_node in flagged for c in culprits
    )


def _closing(ok: bool, console: Console) -> None:
    if ok:
        console.print(
            "As expected: below opset 11 Resize has no coordinate_transformation_mode, so bilinear upsampling no "
            "longer matches PyTorch; trtdiff names those Resizes as the culprits (an export problem: the ONNX spec "
            "computes the same), and from opset 11 it exports as half_pixel and agrees."
        )
    else:
        console.print(Text("The demo did not show what it should; please report this.", style="bold red"))
