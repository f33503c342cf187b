"""The onnx-simplifier question: does simplifying the ONNX file change the numbers?

`simplify_model` runs onnxslim (the `simplify` extra) on the exact file compared;
`compare_simplified` runs one comparison (pipeline.comparison) and, when `simplify` is asked,
compares the simplified file too, with the same options, side by side. Pairing follows the
node names the simplifier keeps, never positions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from trtdiff.errors import BackendError, OptionError, describe_error
from trtdiff.pipeline.comparison import compare_once
from trtdiff.pipeline.reference import SharedRecording

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


def compare_simplified(
    model: str | Path | torch.nn.Module,
    options: CompareOptions,
    *,
    progress: Progress | None = None,
    name_of: Callable[[str], str] = str,
    shared: SharedRecording | None = None,
) -> Report:
    """One comparison and, with `simplify`, the same on the simplified ONNX file beside it (`simplified`).

    The first comparison's backends are closed before the second opens its own. `shared`:
    a PyTorch recording lent to both (and to a sweep's other comparisons).
    """
    first = compare_once(model, options, progress=progress, name_of=name_of, shared=shared)
    if not options.export.simplify:
        return first.report
    return with_simplified(model, options, first.onnx_model, first.report, progress or _silent, shared)


def with_simplified(
    model: str | Path | torch.nn.Module,
    options: CompareOptions,
    onnx_model: onnx.ModelProto,
    report: Report,
    say: Progress,
    shared: SharedRecording | None = None,
) -> Report:
    """The same comparison on the simplified ONNX file, side by side (the report's `simplified`)."""
    import tempfile

    import onnx

    say("simplifying the ONNX file and comparing it too")
    simplified, how = simplify_model(onnx_model)
    with tempfile.TemporaryDirectory(prefix="trtdiff-") as folder:
        path = Path(folder) / "simplified.onnx"
        onnx.save(simplified, path)
        export = dataclasses.replace(options.export, onnx=str(path), simplify=False, save_onnx=None, opset=None)
        again = compare_once(model, dataclasses.replace(options, export=export, force=False), shared=shared).report
    again = dataclasses.replace(again, onnx_path=None, notes=(f"simplified with {how}", *again.notes))
    return dataclasses.replace(report, simplified=again, passed=report.passed and again.passed)


def _silent(_text: str) -> None:
    """The default progress callback: say nothing."""
