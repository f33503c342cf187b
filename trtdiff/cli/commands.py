"""What each command does once click has parsed its flags: typed options in, one library call, output.

The values arrive as click parsed them, keyed by library parameter name (each flag stores
into the parameter it sets); errors name parameters, and cli.py renders them as flags.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from trtdiff.errors import OptionError, param
from trtdiff.version import __version__

if TYPE_CHECKING:
    from trtdiff.options import (
        BackendOptions,
        BuildSettings,
        CompareOptions,
        ExportOptions,
        GateOptions,
        LoadOptions,
    )
    from trtdiff.pipeline.record import Recording
    from trtdiff.render.files import ReportFiles
    from trtdiff.report import Thresholds

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def compare_command(options: dict[str, Any]) -> bool:
    """Compare, print the table (or the verdict alone when quiet), write the reports; True when it passed."""
    from rich.console import Console

    from trtdiff.api import compare
    from trtdiff.render.terminal import render_terminal, render_verdict

    show_all, quiet, model = options.pop("show_all"), options.pop("quiet"), options.pop("model")
    files = _report_files(options)
    files.validate()
    opsets, exporters = opset_list(options["opset"]), exporter_list(options["exporter"])
    precisions = [p.strip() for p in (options.pop("sweep_precision", None) or "").split(",") if p.strip()]
    if len(opsets) > 1 or len(exporters) > 1 or precisions:
        options["opset"], options["exporter"] = None, "auto"
        axes = (opsets or [17], exporters or ["auto"], precisions)
        return _sweep_command(model, _compare_options(options), axes, files, quiet)
    compare_options = _compare_options(options)
    from trtdiff.cli.app import flag_for

    with progress_display(quiet) as progress:
        report = compare(model, compare_options, progress=progress, name_of=flag_for)
    console = Console(highlight=False)
    if quiet:
        render_verdict(report, console)
    else:
        render_terminal(report, console, show_all=show_all)
    files.write(report)
    return report.passed


def _sweep_command(
    model: str, options: CompareOptions, axes: tuple[list[int], list[str], list[str]], files: ReportFiles, quiet: bool
) -> bool:
    """Compare at each opset and exporter; one table; the JSON holds every report."""
    from rich.console import Console

    from trtdiff.cli.app import flag_for
    from trtdiff.hypotheses.sweep import sweep
    from trtdiff.render.sweep_text import render_sweep

    others = [name for name in ("junit", "markdown", "html") if getattr(files, name)]
    if others:
        raise OptionError(
            "writes one comparison's report; a sweep writes JSON (one report per combination)", parameter=others[0]
        )

    with progress_display(quiet) as progress:
        result = sweep(
            model, options, opsets=axes[0], exporters=axes[1], precisions=axes[2], progress=progress, name_of=flag_for
        )
    render_sweep(result, Console(highlight=False))
    if files.json:
        result.write_json(files.json)
    return result.passed


def run_command(options: dict[str, Any]) -> Recording:
    """Record one backend's tensors."""
    from trtdiff.pipeline.record import run

    backend, save, model = options.pop("backend"), options.pop("save"), options.pop("model")
    _no_sweep(options)
    return run(model, _compare_options(options), backend=backend, save=save)


def build_command(options: dict[str, Any]) -> None:
    """Build the engine, print what was built, write the JSON when asked."""
    from pathlib import Path

    from rich.console import Console

    from trtdiff.pipeline.build import build
    from trtdiff.render.files import check_json_path
    from trtdiff.render.terminal import render_build

    json_path, model = options.pop("json"), options.pop("model")
    _no_sweep(options)
    check_json_path(json_path, kind="build")
    with progress_display(quiet=False) as progress:
        if progress is not None:
            progress("exporting and building the TensorRT engine (this can take minutes)")
        report = build(model, _compare_options(options))
    render_build(report, Console(highlight=False))
    if json_path:
        Path(json_path).write_text(report.to_json() + "\n")


def inspect_command(options: dict[str, Any]) -> bool:
    """Inspect the model, print the view, write the JSON when asked; True when nothing is above info."""
    from pathlib import Path

    from rich.console import Console

    from trtdiff.cli.app import flag_for
    from trtdiff.hypotheses.inspect import inspect_model
    from trtdiff.render.files import check_json_path
    from trtdiff.render.inspect_text import render_inspection

    json_path, model = options.pop("json"), options.pop("model")
    check_json_path(json_path, kind="inspection")
    inspection = inspect_model(model, _compare_options(options), name_of=flag_for)
    render_inspection(inspection, Console(highlight=False))
    if json_path:
        Path(json_path).write_text(inspection.to_json() + "\n")
    return inspection.clean


def demo_command(example: str, input_shape: str, opsets: str, show_all: bool) -> bool:
    """The demo at each opset; True when it showed what it promises."""
    from rich.console import Console

    from trtdiff.cli.demo import run_demo

    try:
        wanted = [int(o) for o in opsets.split(",") if o.strip()]
    except ValueError:
        raise OptionError("expected comma-separated integers, e.g. 10,13", parameter="opsets", value=opsets) from None
    from trtdiff.cli.app import flag_for

    return run_demo(example, input_shape, wanted, Console(highlight=False), show_all=show_all, name_of=flag_for)


def version_text() -> str:
    """trtdiff's version, the TensorRT it found, the GPU, and whether engines can run here."""
    import platform

    from trtdiff.backends.tensorrt import probe
    from trtdiff.backends.tensorrt.importing import gpu_info

    found = probe()
    trt = found.info.describe() if found.info else "not installed"
    visible = found.gpu or gpu_info()
    gpu = visible.describe() if visible else "none visible to torch"
    runs = "can run engines" if found.can_run else f"cannot run engines: {found.reason}"
    return f"trtdiff {__version__} (Python {platform.python_version()})\nTensorRT: {trt}\nGPU: {gpu}\n{runs}"


def _no_sweep(options: dict[str, Any]) -> None:
    """`run` and `build` make one engine: a precision sweep is for compare."""
    if options.pop("sweep_precision", None):
        raise OptionError("sweeps are for compare; give one precision", parameter="sweep_precision")


def _compare_options(options: dict[str, Any]) -> CompareOptions:
    """The typed options of a command: every part it has flags for, defaults for the others."""
    from trtdiff.options import AnalysisOptions, CompareOptions, GateOptions
    from trtdiff.report import Thresholds

    return CompareOptions(
        load=_load_options(options),
        export=_export_options(options),
        runtime=_backend_options(options),
        thresholds=_thresholds(options) if "min_cosine" in options else Thresholds(),
        gate=_gate_options(options) if "inputs_dir" in options else GateOptions(),
        analysis=AnalysisOptions(culprit=options.pop("culprit", None)),
        force=options.pop("force", False),
    )


def _load_options(options: dict[str, Any]) -> LoadOptions:
    from trtdiff.options import LoadOptions

    return LoadOptions(
        model_class=options.pop("model_class"),
        trust=options.pop("trust"),
        input_shapes=options.pop("input_shapes"),
        input_files=options.pop("input_files"),
        seed=options.pop("seed"),
    )


def _export_options(options: dict[str, Any]) -> ExportOptions:
    from trtdiff.options import ExportOptions

    opsets, exporters = opset_list(options.pop("opset")), exporter_list(options.pop("exporter"))
    for parameter, values in (("opset", opsets), ("exporter", exporters)):
        if len(values) > 1:
            raise OptionError(
                "one value here; sweeps are for compare", parameter=parameter, value=",".join(map(str, values))
            )
    return ExportOptions(
        opset=opsets[0] if opsets else None,
        exporter=exporters[0] if exporters else "auto",  # type: ignore[arg-type]
        onnx=options.pop("onnx"),
        save_onnx=options.pop("save_onnx"),
        simplify=options.pop("simplify", False),
    )


def opset_list(text: str | None) -> list[int]:
    """'11,13,17' -> [11, 13, 17]."""
    if not text:
        return []
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise OptionError(
            "expected an opset or comma-separated opsets, e.g. 13 or 11,13,17", parameter="opset", value=text
        ) from None


def exporter_list(text: str | None) -> list[str]:
    """'torchscript,dynamo' -> ['torchscript', 'dynamo'] (each checked)."""
    from trtdiff.options import EXPORTERS

    names = [part.strip() for part in (text or "").split(",") if part.strip()]
    unknown = [name for name in names if name not in EXPORTERS]
    if unknown:
        raise OptionError(
            f"unknown exporter {unknown[0]!r}; choose from {', '.join(EXPORTERS)}", parameter="exporter", value=text
        )
    return names


def _backend_options(options: dict[str, Any]) -> BackendOptions:
    """The backend part; a command without TensorRT flags (inspect) gets the defaults."""
    from trtdiff.options import DEFAULT_PROVIDER, BackendOptions

    memory = options.pop("memory_bytes", None)
    return BackendOptions(
        backends=_names(options.pop("backends", None)),
        require=_names(options.pop("require", None)) or (),
        ort_provider=options.pop("ort_provider", DEFAULT_PROVIDER),
        torch_device=options.pop("torch_device", "cpu"),
        tf32=options.pop("tf32", False),
        tensorrt=_build_settings(options),
        engine_cache=options.pop("engine_cache", None),
        save_engine=options.pop("save_engine", None),
        recordings=_recordings(options.pop("recordings", ())),
        **({"memory_bytes": parse_size(memory, "memory_bytes")} if memory else {}),
    )


def _build_settings(options: dict[str, Any]) -> BuildSettings:
    from trtdiff.options import BuildSettings

    if "outputs" not in options:
        return BuildSettings()
    return BuildSettings(
        outputs=options.pop("outputs"),
        precision="fp16" if options.pop("fp16") else "fp32",
        precision_constraints=options.pop("precision_constraints"),
        optimization_level=options.pop("optimization_level"),
        workspace_bytes=_size_or_none(options.pop("workspace_bytes"), "workspace_bytes"),
        compute_capabilities=tuple(options.pop("compute_capabilities")),
        mark_budget_bytes=_size_or_none(options.pop("mark_budget_bytes", None), "mark_budget_bytes"),
        bisect_marks=options.pop("bisect_marks", None),
    )


def _thresholds(options: dict[str, Any]) -> Thresholds:
    from trtdiff.report import Thresholds

    defaults = Thresholds()
    min_cosine, rtol = options.pop("min_cosine"), options.pop("rtol")
    return Thresholds(
        min_cosine=defaults.min_cosine if min_cosine is None else min_cosine,
        rtol=defaults.rtol if rtol is None else rtol,
        max_abs=options.pop("max_abs"),
        allow_nonfinite=options.pop("allow_nonfinite"),
    )


def _gate_options(options: dict[str, Any]) -> GateOptions:
    from trtdiff.options import GateOptions
    from trtdiff.source.datasets import parse_channel_values, parse_size as parse_hw

    mean, std, size = options.pop("mean"), options.pop("std"), options.pop("size")
    return GateOptions(
        inputs_dir=options.pop("inputs_dir"),
        labels_dir=options.pop("labels_dir"),
        num_samples=options.pop("num_samples"),
        mean=parse_channel_values(mean, "mean") if mean else None,
        std=parse_channel_values(std, "std") if std else None,
        size=parse_hw(size, "size") if size else None,
        ignore_index=options.pop("ignore_index"),
        min_miou=options.pop("min_miou"),
        max_miou_drop=options.pop("max_miou_drop"),
        per_layer=options.pop("per_layer"),
    )


def _report_files(options: dict[str, Any]) -> ReportFiles:
    from trtdiff.render.files import ReportFiles

    return ReportFiles(
        json=options.pop("json"), junit=options.pop("junit"), markdown=options.pop("markdown"), html=options.pop("html")
    )


def _recordings(values: tuple[str, ...]) -> dict[str, str]:
    recordings: dict[str, str] = {}
    for value in values:
        backend, sep, path = value.partition("=")
        if not sep or not backend or not path:
            raise OptionError(
                f"expected BACKEND=FILE.npz, e.g. {param('recordings')} onnxruntime=ort.npz",
                parameter="recordings",
                value=value,
            )
        recordings[backend] = path
    return recordings


@contextmanager
def progress_display(quiet: bool) -> Iterator[Callable[[str], None] | None]:
    """A spinner on stderr while long steps run, only in a terminal and without --quiet."""
    from rich.console import Console

    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        yield None
        return
    with console.status("starting") as status:
        yield lambda text: status.update(text)


def _names(text: str | None) -> tuple[str, ...] | None:
    return tuple(part.strip() for part in text.split(",") if part.strip()) if text else None


def _size_or_none(text: str | None, parameter: str) -> int | None:
    return parse_size(text, parameter) if text else None


def parse_size(text: str, parameter: str) -> int:
    """'512MB', '2GB', '1.5g' -> bytes."""
    match = _SIZE.match(text)
    if not match:
        raise OptionError("expected a size such as 512MB or 2GB", parameter=parameter, value=text)
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)
