"""One comparison per opset and exporter: is it the opset? is it the exporter? in one run.

The thread's advice ("raise the opset to 13", "lower it to 11", "try the dynamo exporter")
becomes a table: each combination that can exist is compared with the same options, and
the sweep fails when any of them does. Combinations no exporter can write are listed as
skipped, with the reason. A combination that fails (an export that breaks, an exporter
that cannot take this model, a backend that refuses the file) is a failing row with its
one-line reason, and the other rows still run. Only an error that cannot be the
combination's (the model, the inputs, an option that is not an axis) and that every row
hit alike stops the sweep, as bad input.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtdiff.errors import (
    InputError,
    ModelLoadError,
    ModelRunError,
    OptionError,
    TrtdiffError,
    describe_error,
)
from trtdiff.options import CompareOptions
from trtdiff.options.exporters import export_problem
from trtdiff.options.resolved import resolve
from trtdiff.report import Report
from trtdiff.report.serialization import from_jsonable, to_jsonable

if TYPE_CHECKING:
    import torch

    from trtdiff.pipeline.prepare import Progress
    from trtdiff.pipeline.reference import SharedRecording


@dataclass(frozen=True)
class SweepEntry:
    """One combination: the opset and exporter asked for, and its report.

    `skipped` says why no exporter writes the combination; `failed` why comparing it failed
    (its export, its exporter, a backend: a failing combination, as a divergence is).
    """

    opset: int
    exporter: str
    report: Report | None = None
    skipped: str | None = None
    failed: str | None = None
    precision: str | None = None

    @property
    def passed(self) -> bool:
        return self.report.passed if self.report is not None else self.failed is None


@dataclass(frozen=True)
class Sweep:
    """Every combination compared, in the order asked for."""

    entries: tuple[SweepEntry, ...]

    @property
    def passed(self) -> bool:
        return all(entry.passed for entry in self.entries)

    @property
    def passing(self) -> tuple[SweepEntry, ...]:
        return tuple(e for e in self.entries if e.report is not None and e.report.passed)

    def to_json(self) -> str:
        return json.dumps({"sweep": to_jsonable(list(self.entries))}, indent=2, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Sweep:
        return cls(tuple(from_jsonable(list[SweepEntry], json.loads(text)["sweep"])))

    def write_json(self, path: str | Path) -> None:
        """Write the sweep as JSON to `path`: a new file renamed over the name (trtdiff.outputs)."""
        from trtdiff import outputs

        outputs.write_text(path, self.to_json() + "\n")


def sweep(
    model: str | Path | torch.nn.Module,
    options: CompareOptions | None = None,
    *,
    opsets: Sequence[int],
    exporters: Sequence[str] = ("auto",),
    precisions: Sequence[str] = (),
    progress: Progress | None = None,
    name_of: Callable[[str], str] = str,
    origins: Mapping[str, str] | None = None,
    **fields: Any,
) -> Sweep:
    """Compare `model` at each opset with each exporter (every combination that can exist).

    `precisions` adds TensorRT precision as an axis: "fp32" (TF32 off), "tf32", "fp16".
    `name_of` writes the parameters the culprits' advice and a failing row's reason name (the CLI passes its flags).
    `origins` says where options came from, as for `compare` (each report records its options and their sources).
    """
    options = (options or CompareOptions()).with_fields(**fields)
    if not opsets:
        raise OptionError("give at least one opset", parameter="opset")
    if options.export.onnx is not None:
        raise OptionError("a given ONNX file has one opset; drop it to sweep opsets and exporters", parameter="onnx")
    for parameter in ("save_onnx", "save_engine", "save_repro"):
        if any(getattr(part, parameter, None) for part in (options.export, options.runtime, options.analysis)):
            raise OptionError(
                "keeps one comparison's file; a sweep makes one per combination: drop it, or compare the "
                "combination you want to keep on its own",
                parameter=parameter,
            )
    unknown = [p for p in precisions if p not in PRECISION_AXIS]
    if unknown:
        raise OptionError(
            f"unknown precision {unknown[0]!r}; choose from {', '.join(PRECISION_AXIS)}",
            parameter="sweep_precision",
            value=",".join(precisions),
        )
    from trtdiff.pipeline.reference import SharedRecording

    entries: list[SweepEntry] = []
    errors: list[Exception] = []
    with SharedRecording() as shared:  # PyTorch recorded once for every combination that records it alike
        for opset in opsets:
            for exporter in exporters:
                for precision in precisions or (None,):
                    entry, error = _entry(
                        model, options, opset, exporter, precision, progress, name_of, origins, shared
                    )
                    entries.append(entry)
                    errors += [error] if error is not None else []
    _raise_shared_input_error(entries, errors)
    return Sweep(tuple(entries))


_AXES = frozenset({"opset", "exporter", "sweep_precision", "precision", "tf32"})


def _raise_shared_input_error(entries: Sequence[SweepEntry], errors: Sequence[Exception]) -> None:
    """Raise the error every row that ran hit, when it is about the model, inputs or options, not the combination.

    A missing model file or a forward that fails fails every combination alike: that is bad
    input (one line, exit code 2 on the command line), not a table of identical rows.
    """
    ran = [e for e in entries if e.skipped is None]
    if not errors or len(errors) != len(ran) or len({str(error) for error in errors}) != 1:
        return
    error = errors[0]
    if isinstance(error, (ModelLoadError, InputError, ModelRunError)) or (
        isinstance(error, OptionError) and error.parameter not in _AXES
    ):
        raise error


PRECISION_AXIS = ("fp32", "tf32", "fp16")


def _entry(
    model: str | Path | torch.nn.Module,
    options: CompareOptions,
    opset: int,
    exporter: str,
    precision: str | None,
    progress: Progress | None,
    name_of: Callable[[str], str],
    origins: Mapping[str, str] | None = None,
    shared: SharedRecording | None = None,
) -> tuple[SweepEntry, Exception | None]:
    """One combination compared, or why it was skipped or failed (and the error it failed with).

    Any error fails the row and the sweep goes on; an interrupt (not an Exception) stops it.
    """
    from trtdiff.hypotheses.simplify import compare_simplified

    reason = why_not(opset, exporter)
    if reason is not None:
        return SweepEntry(opset, exporter, skipped=reason, precision=precision), None
    export = dataclasses.replace(options.export, opset=opset, exporter=exporter)  # type: ignore[arg-type]
    options = dataclasses.replace(options, export=export)
    if precision is not None:  # two options: the engine settings are derived from them when compared
        options = options.with_fields(precision="fp16" if precision == "fp16" else "fp32", tf32=precision == "tf32")
    try:
        report = compare_simplified(model, options, progress=progress, name_of=name_of, shared=shared)
        report = dataclasses.replace(report, options=resolve(options, origins))
    except TrtdiffError as error:
        return SweepEntry(opset, exporter, failed=error.render(name_of), precision=precision), error
    except Exception as error:  # noqa: BLE001 -- a bug in trtdiff or a library: this row fails, the others run
        failed = f"internal error ({describe_error(error)})"
        return SweepEntry(opset, exporter, failed=failed, precision=precision), error
    return SweepEntry(opset, exporter, report=report, precision=precision), None


def why_not(opset: int, exporter: str) -> str | None:
    """Why no exporter writes this combination, or None when one can (the export's own rule)."""
    problem = export_problem(opset, exporter)
    return problem.reason if problem is not None else None
