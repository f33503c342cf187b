"""Which opsets each ONNX exporter writes, and the one rule that says whether a choice can work.

The TorchScript exporter writes opsets 7-20 and is the only one that reads a TorchScript
archive; the dynamo exporter writes 18 up to the newest opset the installed `onnx` knows.
Below 18 the dynamo exporter would convert its output down, which fails silently (torch 2.13,
asked for 13, writes 18): that choice is refused, as `auto` never makes it. The options are
checked against this rule before any work, the export once the model is loaded, and a sweep
lists the combinations it rules out as skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtdiff.errors import param

TORCHSCRIPT_MIN_OPSET = 7
TORCHSCRIPT_MAX_OPSET = 20
DYNAMO_NATIVE_OPSET = 18


def dynamo_max_opset() -> int:
    """The newest opset the dynamo exporter writes: the newest the installed onnx package converts to."""
    import onnx

    return int(onnx.defs.onnx_opset_version())


@dataclass(frozen=True)
class ExportProblem:
    """Why a choice of opset and exporter cannot work: the parameter to change, the reason, what to try."""

    parameter: str
    reason: str
    advice: str

    @property
    def message(self) -> str:
        return f"{self.reason}; {self.advice}"


def export_problem(opset: int, exporter: str, kind: str | None = None) -> ExportProblem | None:
    """The problem with exporting at `opset` with `exporter` (a model of `kind`, when known), or None.

    `kind` "torchscript" is a TorchScript archive, which only the TorchScript exporter reads.
    """
    ts_range = f"{TORCHSCRIPT_MIN_OPSET}-{TORCHSCRIPT_MAX_OPSET}"
    newest = dynamo_max_opset()
    ts_writes = TORCHSCRIPT_MIN_OPSET <= opset <= TORCHSCRIPT_MAX_OPSET
    if kind == "torchscript" and exporter == "dynamo":
        return ExportProblem(
            "exporter",
            "the dynamo exporter cannot read a TorchScript archive",
            f"use {param('exporter')} torchscript (opsets {ts_range}), or give the eager model (a factory "
            "pkg.module:function) to use dynamo",
        )
    if kind == "torchscript" and not ts_writes:
        return ExportProblem(
            "opset",
            f"a TorchScript archive is exported by the TorchScript exporter, which writes opsets {ts_range}",
            "choose one of those",
        )
    if not TORCHSCRIPT_MIN_OPSET <= opset <= newest:
        return ExportProblem(
            "opset",
            f"no exporter writes it (TorchScript: opsets {ts_range}, dynamo: {DYNAMO_NATIVE_OPSET}-{newest})",
            f"choose one of those ({ts_range} for a TorchScript archive, which only the TorchScript exporter reads; "
            f"ONNX Runtime and TensorRT read opsets from {TORCHSCRIPT_MIN_OPSET} on)",
        )
    if exporter == "dynamo" and opset < DYNAMO_NATIVE_OPSET:
        return ExportProblem(
            "exporter",
            f"the dynamo exporter writes opsets from {DYNAMO_NATIVE_OPSET}",
            f"below, its conversion can silently write {DYNAMO_NATIVE_OPSET}: use {param('exporter')} torchscript "
            f"or auto for opset {opset}",
        )
    if exporter == "torchscript" and not ts_writes:
        return ExportProblem(
            "opset",
            f"the TorchScript exporter writes opsets {ts_range}",
            f"use {param('exporter')} dynamo (opsets {DYNAMO_NATIVE_OPSET}-{newest})",
        )
    return None
