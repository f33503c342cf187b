"""Export the PyTorch model to ONNX with an exporter that honours the requested opset.

The TorchScript exporter writes opsets 7-20 directly. The dynamo exporter writes 18 and up
natively and converts down otherwise; with torch 2.13, asked for 13, it silently wrote 18
when that conversion failed. So `auto` picks TorchScript below 18, and whatever exporter
ran, the opset actually written is read back and must equal the one asked for.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import torch

from trtdiff.errors import ExportError, OptionError, cause_line, param
from trtdiff.options import EXPORTERS
from trtdiff.source.onnx_graph import opset_of

if TYPE_CHECKING:
    from trtdiff.source.loading import LoadedModel

DYNAMO_NATIVE_OPSET = 18
TORCHSCRIPT_MAX_OPSET = 20
TORCHSCRIPT_MIN_OPSET = 7


@dataclass(frozen=True)
class ExportResult:
    """Where the ONNX file is, which exporter wrote it and which opset it declares."""

    path: Path
    exporter: str
    opset: int


def choose_exporter(exporter: str, opset: int, loaded: LoadedModel) -> str:
    """Resolve `auto` to an exporter that writes `opset` without conversion."""
    if exporter not in EXPORTERS:
        raise OptionError(f"unknown; choose one of {', '.join(EXPORTERS)}", parameter="exporter", value=exporter)
    if exporter != "auto":
        return exporter
    if loaded.kind == "torchscript":
        return "torchscript"
    return "torchscript" if opset < DYNAMO_NATIVE_OPSET else "dynamo"


def export_onnx(
    loaded: LoadedModel, feeds: Mapping[str, np.ndarray], *, opset: int, exporter: str, path: Path
) -> ExportResult:
    """Export `loaded` to `path` and check the opset that was written."""
    chosen = choose_exporter(exporter, opset, loaded)
    if chosen == "torchscript" and opset < TORCHSCRIPT_MIN_OPSET:
        raise OptionError(
            f"the TorchScript exporter writes opsets {TORCHSCRIPT_MIN_OPSET}-{TORCHSCRIPT_MAX_OPSET}; "
            f"choose one of those (ONNX Runtime and TensorRT read opsets from {TORCHSCRIPT_MIN_OPSET} on)",
            parameter="opset",
            value=opset,
        )
    if chosen == "torchscript" and opset > TORCHSCRIPT_MAX_OPSET:
        raise OptionError(
            f"the TorchScript exporter writes opsets 7-{TORCHSCRIPT_MAX_OPSET}; use {param('exporter')} dynamo",
            parameter="opset",
            value=opset,
        )
    if chosen == "dynamo" and loaded.kind == "torchscript":
        raise OptionError(
            f"a TorchScript archive can only be exported with {param('exporter')} torchscript",
            parameter="exporter",
            value="dynamo",
        )
    args = tuple(torch.from_numpy(np.array(v, copy=True, order="C")) for v in feeds.values())
    names = list(feeds)
    log = io.StringIO()
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(log),
            contextlib.redirect_stderr(log),
            _quiet_torch_logs(),
        ):
            warnings.simplefilter("ignore")
            if chosen == "torchscript":
                assert loaded.module is not None
                module = _ModeFixed(loaded.module) if loaded.kind == "exported_program" else loaded.module
                torch.onnx.export(module, args, str(path), opset_version=opset, input_names=names, dynamo=False)
            else:
                target = loaded.exported_program if loaded.exported_program is not None else loaded.module
                assert target is not None
                torch.onnx.export(target, args, str(path), opset_version=opset, input_names=names, dynamo=True)
    except Exception as error:
        raise ExportError(export_failure(error, chosen, opset)) from error
    written = opset_of(onnx.load(str(path), load_external_data=False))
    if written != opset:
        raise ExportError(
            f"the {chosen} exporter was asked for opset {opset} but wrote opset {written} (it converts from "
            f"{DYNAMO_NATIVE_OPSET} and the conversion failed); "
            + (
                f"use {param('exporter')} torchscript"
                if opset <= TORCHSCRIPT_MAX_OPSET
                else f"use {param('opset')} {written}"
            )
        )
    return ExportResult(path=path, exporter=chosen, opset=written)


_UNSUPPORTED = re.compile(r"Unsupported: ONNX export of operator ([\w.]+)(?:, ([^.]*))?")


def export_failure(error: BaseException, exporter: str, opset: int) -> str:
    """One line: what the exporter could not write, where, and a fix that works (never a loop)."""
    text = str(error)
    found = _UNSUPPORTED.search(text)
    if found and "align_corners" in (found.group(2) or "") and opset < 11:
        return (
            f"opset {opset} cannot express bilinear align_corners=True ({found.group(1)}); "
            f"use {param('opset')} 11 or higher"
        )
    if found:
        what = f"{found.group(1)}" + (f" with {found.group(2).strip()}" if found.group(2) else "")
        fix = (
            f"use {param('opset')} {DYNAMO_NATIVE_OPSET} with {param('exporter')} dynamo"
            if exporter == "torchscript"
            else f"use {param('exporter')} torchscript at {param('opset')} 17"
        )
        return f"the {exporter} exporter has no ONNX form of {what} at opset {opset}; {fix}"
    cause = cause_line(error) or type(error).__name__
    other = (
        f"{param('exporter')} dynamo at {param('opset')} {DYNAMO_NATIVE_OPSET}"
        if exporter == "torchscript"
        else f"{param('exporter')} torchscript at {param('opset')} {min(opset, TORCHSCRIPT_MAX_OPSET)}"
    )
    return f"ONNX export with the {exporter} exporter at opset {opset} failed: {cause}; try {other}"


class _ModeFixed(torch.nn.Module):
    """Wraps ExportedProgram.module(), whose mode was fixed at export and refuses train()/eval()."""

    def __init__(self, program_module: torch.nn.Module) -> None:
        super().__init__()
        self.program = program_module

    def forward(self, *args: torch.Tensor) -> object:
        return self.program(*args)

    def train(self, mode: bool = True) -> _ModeFixed:
        return self


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    """The exporters log progress and optional-op notices through `logging`; keep the terminal clean."""
    logger = logging.getLogger("torch")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
