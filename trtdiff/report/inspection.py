"""What `inspect` found: the ONNX file as written, its Resize rows, the findings and their advice.

The rules that produce these live in `trtdiff.source.pitfalls`; the culprit pass reads the
same findings for its advice, and the renderers read an `Inspection` and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from trtdiff.errors import render_names
from trtdiff.report.serialization import from_jsonable, to_jsonable
from trtdiff.version import __version__

Severity = Literal["info", "warning", "error"]
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class Finding:
    """One suspect: how bad, which rule (`code`), the ONNX nodes, the PyTorch module, what to do.

    `module` is the module path of the first node ("" for the model itself, None when
    unknown); `source` the line of PyTorch code, where the exporter or the forward kept it.
    """

    severity: Severity
    code: str
    nodes: tuple[str, ...]
    module: str | None
    message: str
    advice: str
    source: str | None = None


@dataclass(frozen=True)
class ResizeInfo:
    """One Resize/Upsample node as written, with its shapes and the PyTorch call it came from.

    Coordinate attributes are None below opset 11 (they do not exist there); from 11 on an
    absent one carries the opset's default. `scales`/`sizes` are None where they are not
    constants (nor foldable from static shapes). `torch_op`/`align_corners`: the PyTorch call's.
    """

    node: str
    op_type: str
    mode: str
    coordinate_transformation_mode: str | None
    nearest_mode: str | None
    cubic_coeff_a: float | None
    exclude_outside: int | None
    scales: tuple[float, ...] | None
    sizes: tuple[int, ...] | None
    input_shape: tuple[int | None, ...] | None
    output_shape: tuple[int | None, ...] | None
    module: str | None
    source: str | None = None
    torch_op: str | None = None
    align_corners: bool | None = None

    def resized_axes(self) -> list[tuple[int, int]]:
        """(input size, output size) of every axis whose size changes, where both are known."""
        if self.input_shape is None or self.output_shape is None or len(self.input_shape) != len(self.output_shape):
            return []
        pairs = zip(self.input_shape, self.output_shape, strict=True)
        return [(i, o) for i, o in pairs if i is not None and o is not None and i != o]

    @property
    def broadcasts(self) -> bool:
        """Every resized axis has one input pixel: every coordinate mode samples it, so all agree."""
        return bool(axes := self.resized_axes()) and all(i == 1 for i, _ in axes)


@dataclass(frozen=True)
class Interpolation:
    """One PyTorch upsampling call, as one forward pass saw it."""

    op: str
    mode: str
    align_corners: bool | None
    output_shape: tuple[int, ...]
    module: str | None
    source: str | None = None


@dataclass(frozen=True)
class Inspection:
    """The file as written (`exporter`: the one trtdiff ran, or "given"), its Resize rows, the findings.

    `worst` is the most severe finding's severity (None without findings). Advice names
    parameters with `param(...)` marks; `named()` writes them as names (or flags).
    """

    model: str
    onnx_path: str | None
    opset: int
    opset_imports: dict[str, int]
    exporter: str
    producer_name: str
    producer_version: str
    inputs: dict[str, str]
    resizes: tuple[ResizeInfo, ...]
    findings: tuple[Finding, ...]
    worst: Severity | None
    notes: tuple[str, ...] = ()
    trtdiff_version: str = __version__

    @property
    def producer(self) -> str:
        """ "pytorch 2.13.0"."""
        return f"{self.producer_name} {self.producer_version}".strip()

    @property
    def clean(self) -> bool:
        """No finding above "info" (the command's exit code 0)."""
        return self.worst is None or SEVERITY_RANK[self.worst] == 0

    def named(self, name_of: Callable[[str], str] = str) -> Inspection:
        """A copy whose messages and advice write each marked parameter as `name_of(parameter)`."""
        findings = tuple(
            replace(f, message=render_names(f.message, name_of), advice=render_names(f.advice, name_of))
            for f in self.findings
        )
        return replace(self, findings=findings, notes=tuple(render_names(n, name_of) for n in self.notes))

    def to_json(self) -> str:
        return json.dumps(to_jsonable(self), indent=2, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Inspection:
        return from_jsonable(cls, json.loads(text))
