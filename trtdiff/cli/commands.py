"""What each command does once click has parsed its flags: typed options in, one library call, output.

The values arrive keyed by library parameter name (each generated flag stores into the
parameter it sets); `trtdiff.cli.flags.given` reads them with the options' own readers.
Every option is checked before any work starts; errors name parameters, which the group in
app.py renders as flags.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from trtdiff.cli.flags import Given, given
from trtdiff.errors import OptionError
from trtdiff.options import DEFAULT_OPSET, CompareOptions, SweepAxes, flag_of
from trtdiff.version import __version__

if TYPE_CHECKING:
    from trtdiff.pipeline.record import Recording
    from trtdiff.render.files import ReportFiles


def compare_command(model: str, values: Mapping[str, Any]) -> bool:
    """Compare (or sweep), print the table (or the verdict alone when quiet), write the reports; True when it passed."""
    from rich.console import Console

    from trtdiff.api import compare
    from trtdiff.render.terminal import render_terminal, render_verdict

    read = given(values)
    files = _report_files(read)
    options = _options(read)
    if read.axes.many:
        return _sweep_command(model, options, read.axes, files, read.reports.quiet)
    options = options.with_fields(**_one_combination(read.axes))
    options.validate()
    with progress_display(read.reports.quiet) as progress:
        report = compare(model, options, progress=progress, name_of=flag_of)
    console = Console(highlight=False)
    if read.reports.quiet:
        render_verdict(report, console)
    else:
        render_terminal(report, console, show_all=read.reports.show_all)
    files.write(report)
    return report.passed


def _sweep_command(model: str, options: CompareOptions, axes: SweepAxes, files: ReportFiles, quiet: bool) -> bool:
    """Compare at each opset, exporter and precision; one table; the JSON holds every report."""
    from rich.console import Console

    from trtdiff.hypotheses.sweep import sweep
    from trtdiff.render.sweep_text import render_sweep

    others = [name for name in ("junit", "markdown", "html") if getattr(files, name)]
    if others:
        raise OptionError(
            "writes one comparison's report; a sweep writes JSON (one report per combination)", parameter=others[0]
        )
    options.validate()
    with progress_display(quiet) as progress:
        result = sweep(
            model,
            options,
            opsets=axes.opsets or (DEFAULT_OPSET,),
            exporters=axes.exporters or ("auto",),
            precisions=axes.precisions,
            progress=progress,
            name_of=flag_of,
        )
    render_sweep(result, Console(highlight=False))
    if files.json:
        result.write_json(files.json)
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

    read = given(values)
    options = _options(read)
    options.validate()
    assert read.run.backend is not None and read.run.save is not None  # click requires both
    return run(model, options, backend=read.run.backend, save=read.run.save)


def build_command(model: str, values: Mapping[str, Any]) -> None:
    """Build the engine, print what was built, write the JSON when asked."""
    from pathlib import Path

    from rich.console import Console

    from trtdiff.pipeline.build import build
    from trtdiff.render.files import check_json_path
    from trtdiff.render.terminal import render_build

    read = given(values)
    json_path = read.reports.json
    check_json_path(json_path, kind="build")
    options = _options(read)
    options.validate()
    with progress_display(quiet=False) as progress:
        if progress is not None:
            progress("exporting and building the TensorRT engine (this can take minutes)")
        report = build(model, options)
    render_build(report, Console(highlight=False))
    if json_path:
        Path(json_path).write_text(report.to_json() + "\n")


def inspect_command(model: str, values: Mapping[str, Any]) -> bool:
    """Inspect the model, print the view, write the JSON when asked; True when nothing is above info."""
    from pathlib import Path

    from rich.console import Console

    from trtdiff.hypotheses.inspect import inspect_model
    from trtdiff.render.files import check_json_path
    from trtdiff.render.inspect_text import render_inspection

    read = given(values)
    json_path = read.reports.json
    check_json_path(json_path, kind="inspection")
    inspection = inspect_model(model, _options(read), name_of=flag_of)
    render_inspection(inspection, Console(highlight=False))
    if json_path:
        Path(json_path).write_text(inspection.to_json() + "\n")
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
    files = ReportFiles(json=reports.json, junit=reports.junit, markdown=reports.markdown, html=reports.html)
    files.validate()
    return files


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
