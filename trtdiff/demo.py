"""`trtdiff demo`: the seed's story on the embedded DeepLabV3+, offline, in seconds.

Exports the same model at each opset, compares it with PyTorch, prints each report and a
side-by-side summary. It succeeds when what it shows is what it promises: a divergence at
a Resize at opsets below 11, none at 11 and above.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from trtdiff.api import compare
from trtdiff.render.terminal import render_terminal
from trtdiff.report import BackendPair, Report

if TYPE_CHECKING:
    import torch

EXAMPLES = {
    "resnet": ("trtdiff.examples.deeplabv3plus", "deeplabv3plus_resnet"),
    "mobilenetv2": ("trtdiff.examples.mobilenetv2", "deeplabv3plus_mobilenetv2"),
}


def build_example(name: str) -> torch.nn.Module:
    """The embedded example model `name`, in eval mode with seeded weights."""
    import importlib

    module_name, factory = EXAMPLES[name]
    model: torch.nn.Module = getattr(importlib.import_module(module_name), factory)()
    return model


def run_demo(
    example: str, input_shape: str, opsets: Sequence[int], console: Console, *, show_all: bool = False
) -> bool:
    """Compare the example at each opset; True when each result is the one the demo expects."""
    model = build_example(example)
    reports: list[Report] = []
    for opset in opsets:
        console.rule(f"opset {opset}")
        report = compare(model, input_shapes=[input_shape], opset=opset)
        render_terminal(report, console, show_all=show_all)
        reports.append(report)
    console.rule("summary")
    table = Table(box=None, header_style="bold")
    for column in ("opset", "result", "first divergence", "final output cosine", "max-abs"):
        table.add_column(column)
    ok = True
    for opset, report in zip(opsets, reports, strict=True):
        output = report.outputs[0].pairs.get(BackendPair("torch", "onnxruntime")) if report.outputs else None
        first = report.first_divergence
        table.add_row(
            str(report.opset),
            "PASS" if report.passed else "DIVERGED",
            f"{first.onnx_node} ({first.op_type})" if first else "-",
            f"{output.cosine:.6f}" if output else "-",
            f"{output.max_abs:.1e}" if output else "-",
        )
        expected_divergence = opset < 11
        if expected_divergence:
            ok &= first is not None and first.op_type in ("Resize", "Upsample")
        else:
            ok &= report.passed
    console.print(table)
    if ok:
        console.print(
            "As expected: below opset 11 Resize has no coordinate_transformation_mode, so bilinear "
            "upsampling no longer matches PyTorch; from opset 11 it exports as half_pixel and agrees."
        )
    else:
        console.print("[bold red]The demo did not show what it should; please report this.[/bold red]")
    return ok
