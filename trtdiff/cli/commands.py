"""What each command does once click has parsed its flags: typed options in, one library call, output.

The values arrive keyed by library parameter name (each generated flag stores into the
parameter it sets); `trtdiff.cli.flags.given` reads them with the options' own readers.
Every option is checked before any work starts; errors name parameters, which the group in
app.py renders as flags.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from trtdiff.cli.flags import Given, given
from trtdiff.cli.interrupt import raising_interrupts, writing
from trtdiff.cli.progress import progress_display
from trtdiff.cli.sources import read_options, set_by_file_only
from trtdiff.errors import OptionError, param
from trtdiff.options import DEFAULT_OPSET, CompareOptions, SweepAxes, flag_of
from trtdiff.version import __version__

if TYPE_CHECKING:
    from trtdiff.pipeline.record import Recording
    from trtdiff.render.files import ReportFiles

__all__ = ["progress_display"]  # the display lives in trtdiff.cli.progress; kept here for callers of old


def compare_command(model: str, values: Mapping[str, Any]) -> bool:
    """Compare (or sweep), write the reports, then print the table (or the verdict alone); True when it passed.

    Files first, the terminal last: a reader that leaves early (`| head -1`) or a Ctrl-C while
    the table is printed costs no report.
    """
    from rich.console import Console

    from trtdiff.api import compare
    from trtdiff.render.terminal import render_terminal, render_verdict

    sources = read_options(values)
    read = sources.read
    files = _report_files(read)
    options = _options(read)
    if read.axes.many:
        return _sweep_command(model, options, read.axes, files, read.reports.quiet, sources.origins)
    options = options.with_fields(**_one_combination(read.axes))
    options = _keep_onnx_beside(options, files)
    options.validate()
    with progress_display(read.reports.quiet) as progress, quiet_warnings(read.reports.quiet):
        try:
            report = compare(model, options, progress=progress, name_of=flag_of, origins=sources.origins)
        except OptionError as error:
            raise _onnx_alone(error, model, options) from error
    report = dataclasses.replace(report, options={**report.options, **set_by_file_only(sources, report.options)})
    with writing():
        files.write(report)
    console = Console(highlight=False)
    if read.reports.quiet:
        render_verdict(report, console)
    else:
        render_terminal(report, console, show_all=read.reports.show_all)
    _annotate(report=report)
    return report.passed


def _onnx_alone(error: OptionError, model: str, options: CompareOptions) -> OptionError:
    """What an ONNX file alone needs, where MODEL is one, no --backends was given and fewer than two backends
    could run (the default is PyTorch, which an ONNX file has not, ONNX Runtime, and TensorRT where it runs):
    "MODEL is an ONNX file, which PyTorch cannot run, and only onnxruntime can run here: compare ONNX backends
    alone with --backends onnxruntime,onnx-reference, or ..."; else `error` itself."""
    if options.runtime.backends or "comparing needs two" not in error.template or not _is_onnx_file(model):
        return error
    ran = error.template.split(",", 1)[0]  # "only onnxruntime can run here"
    return OptionError(
        f"MODEL is an ONNX file, which PyTorch cannot run, and {ran}: compare ONNX backends alone with "
        f"{param('backends')} onnxruntime,onnx-reference, or give the PyTorch model as MODEL with {param('onnx')} FILE"
    )


def _is_onnx_file(model: str) -> bool:
    """Whether MODEL names an ONNX file (by extension or by its first byte, as trtdiff.source.loading tells)."""
    from pathlib import Path

    path = Path(model)
    try:
        with path.open("rb") as file:
            return path.suffix.lower() == ".onnx" or file.read(1) == b"\x08"
    except OSError:
        return False


@contextmanager
def quiet_warnings(quiet: bool) -> Iterator[None]:
    """With --quiet, no Python warning of the libraries trtdiff runs (torch's, ONNX Runtime's): the terminal
    shows the verdict lines only; what trtdiff finds is in the report and its notes."""
    if not quiet:
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _keep_onnx_beside(options: CompareOptions, files: ReportFiles) -> CompareOptions:
    """With Model Explorer's node data, the exported ONNX file is kept beside it (me.json -> me.onnx).

    Unless --save-onnx names where to keep it, or the ONNX file is given (--onnx, or MODEL). An
    ONNX file already there belongs to earlier trtdiff node data (checked before; no link): it is
    replaced, with or without --force, which does not cover it.
    """
    beside = files.explorer_onnx()
    if beside is None or options.export.save_onnx is not None or options.export.onnx is not None:
        return options
    beside.unlink(missing_ok=True)  # --save-onnx, which it becomes, then finds no file to refuse
    return options.with_fields(save_onnx=str(beside))


def _annotate(report: Any = None, sweep: Any = None) -> None:
    """GitHub Actions annotations for the failed checks, on GitHub Actions only."""
    from trtdiff.cli.annotations import on_github, report_annotations, sweep_annotations
    from trtdiff.cli.guard import workflow_command

    if not on_github():
        return
    lines = report_annotations(report) if report is not None else sweep_annotations(sweep)
    for line in lines:
        workflow_command(line)


def _sweep_command(
    model: str,
    options: CompareOptions,
    axes: SweepAxes,
    files: ReportFiles,
    quiet: bool,
    origins: Mapping[str, str] | None = None,
) -> bool:
    """Compare at each opset, exporter and precision; one table; each report file holds every combination."""
    from rich.console import Console

    from trtdiff.hypotheses.sweep import sweep
    from trtdiff.render.sweep_text import render_sweep

    options.validate()
    with progress_display(quiet) as progress, quiet_warnings(quiet):
        result = sweep(
            model,
            options,
            opsets=axes.opsets or (DEFAULT_OPSET,),
            exporters=axes.exporters or ("auto",),
            precisions=axes.precisions,
            progress=progress,
            name_of=flag_of,
            origins=origins,
        )
    with writing():
        files.write_sweep(result)
    render_sweep(result, Console(highlight=False))
    _annotate(sweep=result)
    return result.passed


def _one_combination(axes: SweepAxes) -> dict[str, Any]:
    """compare's --opset/--exporter when they name one value each: the export options they set."""
    chosen: dict[str, Any] = {}
    if axes.opsets:
        chosen["opset"] = axes.opsets[0]
    if axes.exporters:
        chosen["exporter"] = axes.exporters[0]
    return chosen


def run_command(model: str, values: Mapping[str, Any]) -> Recording:
    """Record one backend's tensors."""
    from trtdiff.pipeline.record import run

    read = read_options(values).read
    options = _options(read)
    options.validate()
    assert read.run.backend is not None and read.run.save is not None  # click requires both
    # written under a temporary name as the backend runs, renamed when whole: an interrupted one is removed
    return run(model, options, backend=read.run.backend, save=read.run.save)


def build_command(model: str, values: Mapping[str, Any]) -> None:
    """Build the engine, print what was built, write the JSON when asked."""
    from rich.console import Console

    from trtdiff import outputs
    from trtdiff.pipeline.build import build
    from trtdiff.render.files import check_json_path
    from trtdiff.render.terminal import render_build

    read = read_options(values).read
    json_path = read.reports.json
    check_json_path(json_path, kind="build")
    options = _options(read)
    options.validate()
    with progress_display(quiet=False) as progress:
        if progress is not None:
            progress("exporting and building the TensorRT engine (this can take minutes)")
        report = build(model, options)
    if json_path:
        with writing():
            outputs.write_text(json_path, report.to_json() + "\n")
    render_build(report, Console(highlight=False))


def inspect_command(model: str, values: Mapping[str, Any]) -> bool:
    """Inspect the model, print the view, write the JSON when asked; True when nothing is above info."""
    from rich.console import Console

    from trtdiff import outputs
    from trtdiff.hypotheses.inspect import inspect_model
    from trtdiff.render.files import check_json_path
    from trtdiff.render.inspect_text import render_inspection

    read = read_options(values).read
    json_path = read.reports.json
    check_json_path(json_path, kind="inspection")
    inspection = inspect_model(model, _options(read), name_of=flag_of)
    if json_path:
        with writing():
            outputs.write_text(json_path, inspection.to_json() + "\n")
    render_inspection(inspection, Console(highlight=False))
    return inspection.clean


def demo_command(values: Mapping[str, Any]) -> bool:
    """The demo at each opset; True when it showed what it promises."""
    from rich.console import Console

    from trtdiff.cli.demo import run_demo

    read = given(values)
    demo = read.demo
    return run_demo(
        demo.example,
        demo.demo_shape,
        list(demo.demo_opsets),
        Console(highlight=False),
        show_all=read.reports.show_all,
        name_of=flag_of,
    )


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


def _options(read: Given) -> CompareOptions:
    """The comparison's options: the defaults, with what the command line gave."""
    return CompareOptions().with_fields(**read.compare)


def _report_files(read: Given) -> ReportFiles:
    """The report files asked for, checked before any work (paths, and the extras their formats need)."""
    from trtdiff.render.files import ReportFiles

    reports = read.reports
    files = ReportFiles(
        json=reports.json,
        junit=reports.junit,
        markdown=reports.markdown,
        html=reports.html,
        model_explorer=reports.model_explorer,
        exclude_list=reports.exclude_list,
    )
    files.validate()
    return files


def report_command(path: str, values: Mapping[str, Any]) -> bool:
    """Render a saved report (or sweep) into the files asked for; True when it passed."""
    from rich.console import Console

    from trtdiff.render.saved import read_saved
    from trtdiff.render.sweep_text import render_sweep
    from trtdiff.render.terminal import render_verdict
    from trtdiff.report import Report

    read = given(values)
    files = _report_files(read)
    if not any((files.junit, files.markdown, files.html, files.model_explorer)):
        raise OptionError("nothing to write; give --html, --markdown, --junit or --model-explorer")
    saved = read_saved(path)
    console = Console(highlight=False)
    if not isinstance(saved, Report):  # a sweep (its module imports torch: not for a plain report)
        with writing():
            files.write_sweep(saved)
        render_sweep(saved, console)
        return saved.passed
    with writing():
        files.write(saved, report_path=path)
    render_verdict(saved, console)
    return saved.passed


def view_command(path: str, values: Mapping[str, Any]) -> None:
    """Open Model Explorer on the report's ONNX file with the report's node data."""
    from trtdiff.cli.view import view

    read = given(values)
    with raising_interrupts():  # Model Explorer's server stops on KeyboardInterrupt and returns
        view(path, read.view)


def repro_command(folder: str) -> bool:
    """Run a saved repro again; True when no backend diverges any more."""
    from rich.console import Console
    from rich.text import Text

    from trtdiff.analysis.repro import check_repro
    from trtdiff.render.format import cosine, reasons_text, sci
    from trtdiff.report.text import plain

    notes: list[str] = []
    results = check_repro(folder, notes=notes)
    console = Console(highlight=False)
    for result in results:
        m = result.metrics
        how = "run now" if result.rerun else "as the comparison ran it"
        verdict = f"DIVERGED ({reasons_text(m.reasons)})" if m.diverged else "agrees"
        line = (
            f"{result.backend} ({how}): cosine {cosine(m.cosine)}, max-abs {sci(m.max_abs)}, "
            f"rel-err {sci(m.rel_err)}: {verdict}"
        )
        console.print(Text(plain(line)))  # the backend's name and the reasons come from the bundle: never markup
    for note in notes:  # a runtime that cannot run the subgraph here (its error quotes the bundle's names)
        console.print(Text(plain(f"note: {note}")))
    return not any(result.metrics.diverged for result in results)
