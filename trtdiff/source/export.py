"""Export the PyTorch model to ONNX with an exporter that honours the requested opset.

The TorchScript exporter writes opsets 7-20 directly. The dynamo exporter writes 18 and up
natively and converts down otherwise; with torch 2.13, asked for 13, it silently wrote 18
when that conversion failed. So `auto` picks TorchScript below 18, and whatever exporter
ran, the opset actually written is read back and must equal the one asked for.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import logging
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from trtdiff import outputs
from trtdiff.errors import ExportError, OptionError, cause_line, interrupts_kept, param
from trtdiff.options import EXPORTERS
from trtdiff.options.exporters import (
    DYNAMO_NATIVE_OPSET,
    TORCHSCRIPT_MAX_OPSET,
    TORCHSCRIPT_MIN_OPSET,
    dynamo_max_opset,
    export_problem,
)
from trtdiff.source.loading import LoadedModel, utf8_path
from trtdiff.source.onnx_graph import opset_of


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


def check_writable(opset: int, exporter: str, loaded: LoadedModel) -> None:
    """Refuse, before any work, an opset or exporter that cannot write this model, naming what can."""
    problem = export_problem(opset, exporter, loaded.kind)
    if problem is not None:
        value = opset if problem.parameter == "opset" else exporter
        raise OptionError(problem.message, parameter=problem.parameter, value=value)


def export_onnx(
    loaded: LoadedModel,
    feeds: Mapping[str, np.ndarray],
    *,
    opset: int,
    exporter: str,
    path: Path,
    returned: Callable[[], Any] | None = None,
) -> ExportResult:
    """Export `loaded` to `path` and check the opset that was written.

    A failure is one line: what the exporter could not write, then advice that was tried
    (the other exporter is run once on the failure, so a suggestion never leads back here).
    `returned` gives what the model's forward returns on `feeds` (a recording of it): the
    TorchScript exporter then does not run an archive's forward again (`reads_returned`).
    """
    chosen = choose_exporter(exporter, opset, loaded)
    check_writable(opset, chosen, loaded)
    given = returned if returned is not None and reads_returned(loaded, chosen) else None
    # Exported in a scratch folder, then moved in under `path` whole, as every output is (trtdiff.outputs: a link
    # there is replaced, never followed); under a name of its own where `path`'s is no UTF-8, the only paths
    # the TorchScript exporter's C++ writes to.
    with tempfile.TemporaryDirectory(prefix="trtdiff-") as scratch:
        target = Path(scratch) / (path.name if utf8_path(path.name) else "model.onnx")
        _export_to(loaded, feeds, chosen, opset, target, given)
        weights = [written for written in Path(scratch).iterdir() if written != target]
        if weights and target.name != path.name:
            raise OptionError(
                "the exporter wrote the weights beside the ONNX file, which refers to them by name; "
                "choose a path that is valid UTF-8",
                parameter="save_onnx",
                value=path,
            )
        for written in weights:  # a model over 2 GB: its weights, under the names the file gives them
            outputs.publish(written, path.parent / written.name)
        outputs.publish(target, path)
    return ExportResult(path=path, exporter=chosen, opset=opset)


def reads_returned(loaded: LoadedModel, exporter: str) -> bool:
    """Whether exporting `loaded` with `exporter` runs its forward only to read what it returns.

    So does the TorchScript exporter with an archive (a ScriptModule): it runs the forward once
    for the types and shapes of the outputs (`_get_example_outputs`), which a recording of the
    same inputs already holds. Tracing an eager module, or the dynamo exporter, needs its own run.
    """
    return exporter == "torchscript" and isinstance(loaded.module, torch.jit.ScriptModule) and _exporter() is not None


@functools.cache
def _exporter() -> Any:
    """The module of torch's TorchScript exporter that looks up `_get_example_outputs` (None if this torch has none)."""
    for name in ("torch.onnx._internal.torchscript_exporter.utils", "torch.onnx.utils"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        reads = getattr(module, "_model_to_graph", None)
        if callable(getattr(module, "_get_example_outputs", None)) and getattr(reads, "__globals__", None) is vars(
            module
        ):
            return module
    return None


_PATCHING = threading.Lock()  # one export at a time hands its outputs over (torch's exporter keeps globals anyway)


@contextlib.contextmanager
def _outputs_given(archive: object, returned: Callable[[], Any]) -> Iterator[None]:
    """The TorchScript exporter reads `archive`'s outputs from `returned()` instead of running its forward.

    `_get_example_outputs(model, args)` runs `model(*args)` and wraps what it returns in a
    tuple; for `archive`, this gives the recorded value wrapped the same way, for the duration
    of the export. Any other model (another thread's export) gets torch's own function.
    """
    module = _exporter()
    with _PATCHING:
        original = module._get_example_outputs

        def example_outputs(model: object, args: object) -> Any:
            if model is not archive:
                return original(model, args)
            value = returned()
            if isinstance(value, list):
                return [value]
            return value if isinstance(value, tuple) else (value,)

        module._get_example_outputs = example_outputs
        try:
            yield
        finally:
            module._get_example_outputs = original


def _export_to(
    loaded: LoadedModel,
    feeds: Mapping[str, np.ndarray],
    exporter: str,
    opset: int,
    path: Path,
    returned: Callable[[], Any] | None = None,
) -> None:
    """Export once; on failure, raise the one-line ExportError with advice that was tried."""
    failure = _attempt(loaded, feeds, exporter, opset, path, returned)
    if failure is not None:
        path.unlink(missing_ok=True)
        fix = failure.fix or _other_exporter(loaded, feeds, exporter, opset)
        raise ExportError(f"{failure.what}; {fix}") from failure.error


@dataclass(frozen=True)
class _Failure:
    """An export that failed: what went wrong in one line, a fix known to work (if any), the error."""

    what: str
    fix: str | None = None
    error: BaseException | None = None

    @property
    def cause(self) -> str:
        """The cause alone, to quote inside another message."""
        return short_cause(self.error) if self.error is not None else self.what


def _attempt(
    loaded: LoadedModel,
    feeds: Mapping[str, np.ndarray],
    exporter: str,
    opset: int,
    path: Path,
    returned: Callable[[], Any] | None = None,
) -> _Failure | None:
    """Export once, quietly; None when `path` holds the opset asked for (`returned`: see export_onnx)."""
    args = tuple(torch.from_numpy(np.array(v, copy=True, order="C")) for v in feeds.values())
    names = list(feeds)
    given = _outputs_given(loaded.module, returned) if returned is not None else contextlib.nullcontext()
    try:
        with interrupts_kept(), _quiet_output(), _quiet_torch_logs(), given:
            if exporter == "torchscript":
                assert loaded.module is not None
                module = _ModeFixed(loaded.module) if loaded.kind == "exported_program" else loaded.module
                torch.onnx.export(module, args, str(path), opset_version=opset, input_names=names, dynamo=False)
            else:
                target = loaded.exported_program if loaded.exported_program is not None else loaded.module
                assert target is not None
                torch.onnx.export(target, args, str(path), opset_version=opset, input_names=names, dynamo=True)
    except Exception as error:  # noqa: BLE001 -- the exporters raise anything; its cause is quoted
        what, fix = export_cause(error, exporter, opset)
        return _Failure(what, fix, error)
    written = opset_of(onnx.load(str(path), load_external_data=False))
    if written != opset:
        what = (
            f"the {exporter} exporter was asked for opset {opset} but wrote opset {written} (it converts from "
            f"{DYNAMO_NATIVE_OPSET} and the conversion failed)"
        )
        return _Failure(what, None if opset <= TORCHSCRIPT_MAX_OPSET else f"use {param('opset')} {written}")
    return None


def _other_exporter(loaded: LoadedModel, feeds: Mapping[str, np.ndarray], exporter: str, opset: int) -> str:
    """Advice after a failed export, tried first: the other exporter (or, for an archive, the TorchScript
    exporter's newest opset) exports the model, or it fails too and the model needs changing."""
    if loaded.kind == "torchscript":
        other, other_opset = "torchscript", TORCHSCRIPT_MAX_OPSET
        if opset == TORCHSCRIPT_MAX_OPSET:
            return (
                "only the TorchScript exporter reads a TorchScript archive; give the eager model "
                "(a factory pkg.module:function) to try the dynamo exporter, or change that part of the model"
            )
    elif exporter == "torchscript":
        other, other_opset = "dynamo", min(max(opset, DYNAMO_NATIVE_OPSET), dynamo_max_opset())
    else:
        other, other_opset = "torchscript", min(max(opset, TORCHSCRIPT_MIN_OPSET), TORCHSCRIPT_MAX_OPSET)
    with tempfile.TemporaryDirectory(prefix="trtdiff-") as folder:
        failure = _attempt(loaded, feeds, other, other_opset, Path(folder) / "other.onnx")
    switch = f"{param('exporter')} {other} at " if other != exporter else ""
    if failure is None:
        return f"{switch}{param('opset')} {other_opset} exports it"
    return f"the {other} exporter at opset {other_opset} fails too ({failure.cause}); change that part of the model"


_UNSUPPORTED = re.compile(r"Unsupported: ONNX export of operator ([\w.]+)(?:, ([^.]*))?")
_NOT_SUPPORTED = re.compile(r"Exporting the operator '([\w:.]+)' to ONNX opset version \d+ is not supported")
_NO_FUNCTION = re.compile(r"No ONNX function found for <OpOverload\(op='([\w.]+)'")
_USER_LINE = re.compile(r'The following call raised this error:\s*File "([^"]+)", line (\d+)')


def export_cause(error: BaseException, exporter: str, opset: int) -> tuple[str, str | None]:
    """What the exporter could not write, in one line, and a fix known to work where there is one.

    The dynamo exporter wraps the real error in a banner ("Failed to export the model with
    torch.export. This is step 1/3 ..."): the innermost cause is quoted instead.
    """
    found = _UNSUPPORTED.search(str(error))
    if found and "align_corners" in (found.group(2) or "") and opset < 11:
        what = f"opset {opset} cannot express bilinear align_corners=True ({found.group(1)})"
        return what, f"use {param('opset')} 11 or higher"
    cause = short_cause(error)
    if cause.startswith("no ONNX form of "):
        return f"the {exporter} exporter has {cause} at opset {opset}", None
    return f"ONNX export with the {exporter} exporter at opset {opset} failed: {cause}", None


def short_cause(error: BaseException) -> str:
    """'no ONNX form of OP' when an operator is missing, else the innermost error's cause line (and the user's line)."""
    text = str(error)
    found = _UNSUPPORTED.search(text)
    if found:
        return f"no ONNX form of {found.group(1)}" + (f" with {found.group(2).strip()}" if found.group(2) else "")
    innermost = error
    while innermost.__cause__ is not None:
        innermost = innermost.__cause__
    for pattern in (_NOT_SUPPORTED, _NO_FUNCTION):
        named = pattern.search(text) or pattern.search(str(innermost))
        if named is not None:
            return f"no ONNX form of {named.group(1)}"
    where = _USER_LINE.search(text)
    at = f" (at {Path(where.group(1)).name}:{where.group(2)})" if where else ""
    return (cause_line(innermost) or type(innermost).__name__) + at


def export_failure(error: BaseException, exporter: str, opset: int) -> str:
    """One line: what the exporter could not write, and the fix known to work where there is one."""
    what, fix = export_cause(error, exporter, opset)
    return f"{what}; {fix}" if fix else what


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
def _quiet_output() -> Iterator[None]:
    """Swallow what the exporters print: Python's warnings and prints, and C++'s writes to stdout and stderr.

    The TorchScript exporter prints its whole graph from C++ when it fails ("Torch IR graph
    at exception"); the cause is in the error, and `--debug` shows the traceback.
    """
    log = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        warnings.simplefilter("ignore")
        with _quiet_descriptors():
            yield


@contextlib.contextmanager
def _quiet_descriptors() -> Iterator[None]:
    """File descriptors 1 and 2 point to a scratch file for the block (where both are open).

    With one of them closed (`2>&-`), the copies below would take its number and be written over.
    """
    try:
        os.fstat(1), os.fstat(2)
    except OSError:  # no descriptor 1 or 2 to redirect (a detached process, `2>&-`): leave both alone
        yield
        return
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            _flush_c_streams()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _flush_c_streams() -> None:
    """Flush C's stdio buffers, so nothing written during the block comes out after it."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


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
