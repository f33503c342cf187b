"""The library's face: `compare`, `build`, `run`, `inspect_model` and `sweep`, each one call.

`compare` validates the options, runs one comparison (pipeline.comparison) and, when
`simplify` is asked, compares the simplified ONNX file too (hypotheses.simplify); when an FP16
conversion has culprits, it checks their exclusion list by comparing again (hypotheses.exclusion). The others
are the pipeline's and the hypotheses' own functions, named here so that `trtdiff.build(...)`
reads like `trtdiff.compare(...)`. This module sits at the top: it imports the stages, none
of them imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtdiff.hypotheses.exclusion import with_exclusion_checked
from trtdiff.hypotheses.inspect import inspect_model as inspect_model
from trtdiff.hypotheses.simplify import compare_simplified
from trtdiff.hypotheses.sweep import sweep as sweep
from trtdiff.options import CompareOptions
from trtdiff.options.resolved import CALLER, resolve
from trtdiff.pipeline.build import build as build
from trtdiff.pipeline.record import run as run

if TYPE_CHECKING:
    import torch

    from trtdiff.pipeline.prepare import Progress
    from trtdiff.report import Report

__all__ = ["build", "compare", "inspect_model", "run", "sweep"]


def compare(
    model: str | Path | torch.nn.Module,
    options: CompareOptions | None = None,
    *,
    progress: Progress | None = None,
    name_of: Callable[[str], str] = str,
    origins: Mapping[str, str] | None = None,
    **fields: Any,
) -> Report:
    """Compare `model` layer by layer across PyTorch, ONNX Runtime and TensorRT; return the Report.

    `model` is a model file, a `pkg.mod:factory` spec or an nn.Module (README, "Models").
    Options come as a `CompareOptions`, or field by field, e.g.
    `compare("model.pt", opset=13, input_shapes=["1x3x512x512"], min_cosine=0.999)`
    (every field of trtdiff.options' parts can be named). `progress` is called with a short
    description as each long step starts. A culprit's advice names parameters as `name_of`
    writes them (the parameter itself, "opset 11"; the CLI passes its flags, "--opset 11").
    With `simplify`, the simplified ONNX file is compared too (the report's `simplified`).
    `origins` says where options came from (name -> "command line", a config file's path); the
    report records every option with its source (`Report.options`). Raises a TrtdiffError
    naming the parameter on bad input.
    """
    options = (options or CompareOptions()).with_fields(**fields)
    options.validate()
    report = compare_simplified(model, options, progress=progress, name_of=name_of)
    report = with_exclusion_checked(model, options, report, progress=progress, name_of=name_of)
    return replace(report, options=resolve(options, {**dict.fromkeys(fields, CALLER), **(origins or {})}))
