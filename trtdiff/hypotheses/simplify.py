"""The onnx-simplifier question: does simplifying the ONNX file change the numbers?

`simplify_model` runs onnxslim (the `simplify` extra) on the exact file compared; `compare`
then compares the simplified file too, with the same options, side by side. Pairing
follows the node names the simplifier keeps, never positions.
"""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from trtdiff.errors import BackendError, OptionError, describe_error

if TYPE_CHECKING:
    import onnx
    import torch

    from trtdiff.options import CompareOptions
    from trtdiff.pipeline.prepare import Progress
    from trtdiff.report import Report

EXTRA_HINT = "pip install 'trtdiff[simplify]' (onnxslim)"


def simplify_model(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """The simplified model and what simplified it ("onnxslim 0.1.98: 81 -> 51 nodes")."""
    try:
        import onnxslim
    except ImportError:
        raise OptionError(f"needs onnxslim; {EXTRA_HINT}", parameter="simplify") from None
    try:
        simplified = onnxslim.slim(model)
    except Exception as error:
        raise BackendError(f"onnxslim could not simplify the model: {describe_error(error)}") from error
    version = getattr(onnxslim, "__version__", "?")
    return simplified, f"onnxslim {version}: {len(model.graph.node)} -> {len(simplified.graph.node)} nodes"


def with_simplified(
    model: str | Path | torch.nn.Module,
    options: CompareOptions,
    onnx_model: onnx.ModelProto,
    report: Report,
    stack: ExitStack,
    say: Progress,
) -> Report:
    """The same comparison on the simplified ONNX file, side by side (the report's `simplified`)."""
    import tempfile

    import onnx

    from trtdiff.api import compare

    say("simplifying the ONNX file and comparing it too")
    simplified, how = simplify_model(onnx_model)
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="trtdiff-")))
    onnx.save(simplified, folder / "simplified.onnx")
    export = dataclasses.replace(
        options.export, onnx=str(folder / "simplified.onnx"), simplify=False, save_onnx=None, opset=None
    )
    again = compare(model, dataclasses.replace(options, export=export, force=False))
    again = dataclasses.replace(again, onnx_path=None, notes=(f"simplified with {how}", *again.notes))
    return dataclasses.replace(report, simplified=again, passed=report.passed and again.passed)
