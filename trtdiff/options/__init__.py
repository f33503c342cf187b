"""Every option of trtdiff, declared once: name, type and default (a dataclass field), help, group
and flag (its `Option`).

`compare`, `build` and `run` take one `CompareOptions` made of small parts; any option of any
part can also be named directly, `compare("m.pt", opset=13, precision="fp16")`. The command
line's flags are generated from these declarations (`trtdiff.cli.flags`), so are the README's
options reference and the reading of a config file; `flag_of` gives the flag that sets a
library parameter, so an error names what the user typed. Nothing here imports torch.
"""

from __future__ import annotations

from functools import cache

from trtdiff.options.declare import Command, Declared, Option, all_declarations, declarations, option
from trtdiff.options.parts import (
    CAPTURES,
    CLI_PARTS,
    COMPARE_PARTS,
    CONSTRAINTS,
    DEFAULT_BACKENDS,
    DEFAULT_CHUNK_BYTES,
    DEFAULT_MARK_BUDGET_BYTES,
    DEFAULT_MEMORY_BYTES,
    DEFAULT_OPENVINO_DEVICE,
    DEFAULT_OPSET,
    DEFAULT_PROVIDER,
    DEFAULT_TORCH_DEVICE,
    DISPLAY_ORDER,
    EXPORTERS,
    KNOWN_BACKENDS,
    ONNX_BACKENDS,
    OUTPUT_MODES,
    PRECISIONS,
    SWEEP_PRECISIONS,
    AnalysisOptions,
    BackendOptions,
    BuildSettings,
    Capture,
    CompareOptions,
    ConfigOptions,
    DemoOptions,
    Exporter,
    ExportOptions,
    GateOptions,
    LoadOptions,
    OutputsMode,
    Precision,
    PrecisionConstraints,
    ReportOptions,
    RunOptions,
    SweepAxes,
    SweepPrecision,
    Thresholds,
    ViewOptions,
)

__all__ = [
    "CAPTURES",
    "CLI_PARTS",
    "COMPARE_PARTS",
    "CONSTRAINTS",
    "DEFAULT_BACKENDS",
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_MARK_BUDGET_BYTES",
    "DEFAULT_MEMORY_BYTES",
    "DEFAULT_OPENVINO_DEVICE",
    "DEFAULT_OPSET",
    "DEFAULT_PROVIDER",
    "DEFAULT_TORCH_DEVICE",
    "EXPORTERS",
    "KNOWN_BACKENDS",
    "ONNX_BACKENDS",
    "OUTPUT_MODES",
    "PRECISIONS",
    "SWEEP_PRECISIONS",
    "AnalysisOptions",
    "BackendOptions",
    "BuildSettings",
    "Capture",
    "Command",
    "CompareOptions",
    "ConfigOptions",
    "Declared",
    "DemoOptions",
    "ExportOptions",
    "Exporter",
    "GateOptions",
    "LoadOptions",
    "Option",
    "OutputsMode",
    "Precision",
    "PrecisionConstraints",
    "ReportOptions",
    "RunOptions",
    "SweepAxes",
    "SweepPrecision",
    "Thresholds",
    "ViewOptions",
    "declarations",
    "declared_of",
    "every_option",
    "flag_of",
    "for_command",
    "option",
]


def every_option() -> tuple[Declared, ...]:
    """Every declared option, of the comparison's parts and of the command line's own, in display order."""
    ordered = list(all_declarations(DISPLAY_ORDER))
    return tuple(sorted(ordered, key=lambda d: d.option.last))  # stable: `last` ones after the rest


@cache  # the declarations are fixed: one table, built on first use
def _by_name() -> dict[str, Declared]:
    return {d.name: d for d in every_option()}


def declared_of(name: str, *, compare_only: bool = False) -> Declared | None:
    """The declaration of option `name` (None when there is none; `compare_only`: among CompareOptions' parts)."""
    declared = _by_name().get(name)
    if declared is None or (compare_only and declared.part not in COMPARE_PARTS):
        return None
    return declared


def for_command(command: Command) -> tuple[Declared, ...]:
    """The options `command` shows, in declaration order."""
    return tuple(d for d in every_option() if command in d.option.commands and d.flag is not None)


def flag_of(name: str) -> str:
    """The flag that sets library parameter `name` (`input_shapes` -> `--input-shape`); the name without one."""
    if name == "model":
        return "MODEL"
    declared = _by_name().get(name)
    return declared.flag if declared is not None and declared.flag is not None else name
