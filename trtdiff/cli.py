"""The `trtdiff` command: parse options into typed values and make one library call.

Every TrtdiffError becomes one line and exit code 2 here, in `_Cli.invoke`, and nowhere
else; `--debug` shows the traceback instead. The library names its parameters
(`input_shapes`); `flag_for` maps each to the flag that sets it (`--input-shape`), in one place.
"""

from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click
import cloup

from trtdiff import __version__
from trtdiff.errors import OptionError, TrtdiffError

if TYPE_CHECKING:
    from trtdiff.options import BackendOptions, CompareOptions, ExportOptions, GateOptions, LoadOptions
    from trtdiff.outputs import ReportFiles
    from trtdiff.report import Thresholds

EXIT_DIVERGED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
# Library parameters whose flag is not simply the option that stores them.
_FLAG_EXTRAS = {"precision": "--fp16", "model": "MODEL"}


class _Cli(cloup.Group):
    """A click group that turns library errors into one clear line, naming flags."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TrtdiffError as error:
            if _debug(ctx):
                traceback.print_exc()
            click.echo(f"Error: {error.render(flag_for)}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)
        except Exception as error:  # noqa: BLE001 - a bug in trtdiff: still one line unless --debug
            if _debug(ctx):
                traceback.print_exc()
            click.echo(f"Error: internal error ({type(error).__name__}: {error}); rerun with --debug and report it",
                       err=True)
            ctx.exit(EXIT_INTERNAL)


def flag_for(parameter: str) -> str:
    """The command-line flag that sets library parameter `parameter` (the name itself if none does)."""
    if parameter in _FLAG_EXTRAS:
        return _FLAG_EXTRAS[parameter]
    for command in main.commands.values():
        for option in command.params:
            if isinstance(option, click.Option) and option.name == parameter:
                return max(option.opts, key=len)
    return parameter


def _debug(ctx: click.Context) -> bool:
    return bool(ctx.meta.get("trtdiff.debug"))  # meta is shared by the group's and the command's contexts


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta["trtdiff.debug"] = True
    return value


debug_option = cloup.option("--debug", is_flag=True, expose_value=False, callback=_set_debug, is_eager=True,
                            help="Show the full traceback of an error.")

model_options = cloup.option_group(
    "Model and inputs",
    cloup.option("--input-shape", "input_shapes", multiple=True, metavar="[NAME:]SHAPE",
                 help="Random input of this shape, e.g. 1x3x512x512 or image:1x3x512x512. Repeat for several inputs."),
    cloup.option("--input", "input_files", multiple=True, metavar="[NAME:]FILE",
                 help="Inputs from a .npy, .npz or .pt file. Repeat for several."),
    cloup.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs."),
    cloup.option("--model-class", default=None, metavar="PKG.MOD:CLASS",
                 help="Class or factory to build the model a state_dict belongs to."),
    cloup.option("--trust", is_flag=True,
                 help="Allow loading a pickled nn.Module (torch.save(model)): unpickling runs code from the file."),
)

export_options = cloup.option_group(
    "Export",
    cloup.option("--opset", type=int, default=None,
                 help="ONNX opset to export at (default 17). The report states the opset actually written."),
    cloup.option("--exporter", type=click.Choice(["auto", "torchscript", "dynamo"]), default="auto", show_default=True,
                 help="auto picks an exporter that honours --opset (TorchScript below 18, dynamo from 18)."),
    cloup.option("--onnx", type=click.Path(dir_okay=False), default=None,
                 help="Use this ONNX file (e.g. after onnxsim) instead of exporting one."),
    cloup.option("--save-onnx", type=click.Path(dir_okay=False), default=None, help="Keep the exported ONNX file here."),
    cloup.option("--force", is_flag=True, help="Let --save-onnx / --save-engine overwrite an existing file."),
)

tensorrt_options = cloup.option_group(
    "TensorRT",
    cloup.option("--trt-outputs", "outputs", type=click.Choice(["all", "unfused", "none"]), default="all",
                 show_default=True, help="all: mark every layer output (disables fusion); unfused: keep fusion, read "
                 "surviving tensors as debug tensors; none: final outputs only."),
    cloup.option("--tf32", is_flag=True,
                 help="Allow TF32 in TensorRT and in the PyTorch reference on CUDA (off: true FP32)."),
    cloup.option("--fp16", is_flag=True,
                 help="FP16 engine: the builder flag on TensorRT 10, an FP16-converted ONNX file on TensorRT 11/RTX."),
    cloup.option("--precision-constraints", type=click.Choice(["none", "obey", "prefer"]), default="none",
                 show_default=True, help="TensorRT 10 layer precision constraints with --fp16."),
    cloup.option("--builder-opt-level", "optimization_level", type=click.IntRange(0, 5), default=None,
                 help="TensorRT builder optimization level (0-5)."),
    cloup.option("--workspace", "workspace_bytes", default=None, metavar="SIZE",
                 help="TensorRT workspace limit, e.g. 2GB."),
    cloup.option("--trt-compute-capability", "compute_capabilities", multiple=True, metavar="SMxx",
                 help="TensorRT-RTX only: build for this compute capability (e.g. SM86). Repeatable."),
    cloup.option("--engine-cache", type=click.Path(file_okay=False), default=None,
                 help="Folder of cached engines and the timing cache."),
    cloup.option("--save-engine", type=click.Path(dir_okay=False), default=None, help="Write the TensorRT engine here."),
)

ort_provider_option = cloup.option("--ort-provider", default="CPUExecutionProvider", show_default=True,
                                   help="ONNX Runtime execution provider.")

backend_options = cloup.option_group(
    "Backends",
    cloup.option("--backends", default=None, metavar="LIST",
                 help="Comma-separated backends (torch, onnxruntime, tensorrt). Default: all three, TensorRT where it "
                      "can run."),
    cloup.option("--require", default=None, metavar="LIST",
                 help="Backends that must run (e.g. tensorrt): exit 2 instead of skipping."),
    ort_provider_option,
    cloup.option("--torch-device", default="cpu", show_default=True,
                 help="Where the PyTorch reference runs: cpu, cuda, cuda:1 …"),
    cloup.option("--load", "recordings", multiple=True, metavar="BACKEND=FILE",
                 help="Compare a recording from `trtdiff run --save` instead of running that backend."),
    cloup.option("--memory-limit", "memory_bytes", default="2GB", show_default=True,
                 help="Reference tensors kept in RAM before spilling to disk."),
)

threshold_options = cloup.option_group(
    "Thresholds",
    cloup.option("--min-cosine", type=float, default=None, help="Diverged below this cosine similarity (default 0.9999)."),
    cloup.option("--rtol", type=float, default=None,
                 help="Diverged above this max-abs error relative to the reference's largest magnitude (default 1e-3)."),
    cloup.option("--max-abs", type=float, default=None, help="Diverged above this absolute max error (default: off)."),
)

gate_options = cloup.option_group(
    "CI gate over many samples",
    cloup.option("--inputs", "inputs_dir", type=click.Path(), default=None,
                 help="Folder of PNG/JPEG images or .npy/.npz input tensors: gate every sample's final outputs."),
    cloup.option("--labels", "labels_dir", type=click.Path(), default=None,
                 help="Folder of label masks (single-channel PNG, class index per pixel, same stem as the image)."),
    cloup.option("--num-samples", type=int, default=None, help="Gate N seeded random inputs (of --input-shape)."),
    cloup.option("--mean", default=None, help="Per-channel mean for images, e.g. 0.485,0.456,0.406."),
    cloup.option("--std", default=None, help="Per-channel std for images, e.g. 0.229,0.224,0.225."),
    cloup.option("--size", default=None, metavar="H,W", help="Resize images (bilinear) and masks (nearest) to H,W."),
    cloup.option("--ignore-index", type=int, default=None, help="Label value that mIoU ignores (e.g. 255)."),
    cloup.option("--min-miou", type=float, default=None,
                 help="Fail below this mIoU: against --labels when given, else agreement with the reference's argmax."),
    cloup.option("--max-miou-drop", type=float, default=None,
                 help="Fail when a backend's mIoU against --labels is this much below PyTorch's."),
    cloup.option("--per-layer", is_flag=True, help="With several samples, gate every layer of the first sample too."),
)

report_options = cloup.option_group(
    "Reports",
    cloup.option("--all", "show_all", is_flag=True, help="Show every layer, not only those up to the first divergence."),
    cloup.option("--json", type=click.Path(dir_okay=False), default=None, help="Write the report as JSON here."),
    cloup.option("--junit", type=click.Path(dir_okay=False), default=None,
                 help="Write JUnit XML (one test case per check)."),
    cloup.option("--markdown", type=click.Path(dir_okay=False), default=None,
                 help="Write a Markdown summary (PR comment, CI step summary)."),
    cloup.option("--html", type=click.Path(dir_okay=False), default=None,
                 help="Write a self-contained HTML report with plots."),
    cloup.option("--quiet", "-q", is_flag=True, help="No progress display and no table; the verdict line only."),
)


def _version_text() -> str:
    import platform

    from trtdiff.backends.tensorrt import probe
    from trtdiff.backends.tensorrt.importing import gpu_info

    found = probe()
    trt = found.info.describe() if found.info else "not installed"
    visible = found.gpu or gpu_info()
    gpu = visible.describe() if visible else "none visible to torch"
    runs = "can run engines" if found.can_run else f"cannot run engines: {found.reason}"
    return f"trtdiff {__version__} (Python {platform.python_version()})\nTensorRT: {trt}\nGPU: {gpu}\n{runs}"


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(_version_text())
        ctx.exit(0)


@cloup.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@cloup.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show trtdiff's version, the TensorRT it found and the GPU.")
@debug_option
def main() -> None:
    """Find the first layer whose numbers change between PyTorch, ONNX Runtime and TensorRT, and why."""


@main.command()
@cloup.argument("model")
@model_options
@export_options
@backend_options
@tensorrt_options
@threshold_options
@gate_options
@report_options
@debug_option
def compare(**options: Any) -> None:
    """Compare MODEL layer by layer across PyTorch, ONNX Runtime and TensorRT.

    MODEL is a TorchScript archive, an ExportedProgram (.pt2), a torch.save file (a state_dict
    with --model-class, or a pickled module with --trust), a factory spec pkg.module:function,
    or an .onnx file. Exit code 0: every check holds; 1: a divergence or a failed threshold;
    2: bad usage or input.
    """
    from trtdiff.api import compare as run_compare

    show_all, quiet = options.pop("show_all"), options.pop("quiet")
    files = _report_files(options)
    files.validate()
    compare_options = _compare_options(options)
    with _progress(quiet) as progress:
        report = run_compare(options.pop("model"), compare_options, progress=progress)
    from rich.console import Console

    from trtdiff.render.terminal import render_terminal, render_verdict

    console = Console(highlight=False)
    if quiet:
        render_verdict(report, console)
    else:
        render_terminal(report, console, show_all=show_all)
    files.write(report)
    sys.exit(0 if report.passed else EXIT_DIVERGED)


@main.command()
@cloup.argument("model")
@cloup.option_group(
    "Recording",
    cloup.option("--backend", type=click.Choice(["onnxruntime", "tensorrt"]), required=True,
                 help="The backend to run and record."),
    cloup.option("--save", type=click.Path(dir_okay=False), required=True, help="The .npz file to write."),
    ort_provider_option,
)
@model_options
@export_options
@tensorrt_options
@debug_option
def run(**options: Any) -> None:
    """Run one ONNX backend and record every tensor it produced, for `compare --load`.

    Record on the machine where the backend runs (an edge device without PyTorch, say), then
    compare there or elsewhere: trtdiff compare MODEL --onnx FILE --load BACKEND=FILE.npz
    """
    from trtdiff.run import run as run_backend

    backend, save, model = options.pop("backend"), options.pop("save"), options.pop("model")
    recording = run_backend(model, _compare_options(options), backend=backend, save=save)
    click.echo(f"recorded {recording.tensors} tensors of {recording.describe} to {recording.path} "
               f"(ONNX sha256 {recording.onnx_sha256[:12]}…); compare with --load {recording.backend}={recording.path}")


@main.command()
@cloup.argument("model")
@model_options
@export_options
@tensorrt_options
@cloup.option("--json", type=click.Path(dir_okay=False), default=None,
              help="Write what was built as JSON (mark plan, skips and reasons, ONNX-to-TensorRT name map).")
@debug_option
def build(**options: Any) -> None:
    """Build the TensorRT engine for MODEL without running it.

    Prints what was marked, what could not be and why, and which ONNX nodes the engine fused;
    --json adds the ONNX-to-TensorRT name map. Works where TensorRT can build but not run
    (TensorRT-RTX on a CPU-only machine), e.g. to prepare an engine for another machine.
    """
    from pathlib import Path

    from rich.console import Console

    from trtdiff.build import build as run_build
    from trtdiff.outputs import check_json_path
    from trtdiff.render.terminal import render_build

    json_path, model = options.pop("json"), options.pop("model")
    check_json_path(json_path, kind="build")
    with _progress(quiet=False) as progress:
        if progress is not None:
            progress("exporting and building the TensorRT engine (this can take minutes)")
        report = run_build(model, _compare_options(options))
    render_build(report, Console(highlight=False))
    if json_path:
        Path(json_path).write_text(report.to_json() + "\n")


@main.command()
@cloup.option("--model", "example", type=click.Choice(["resnet", "mobilenetv2"]), default="resnet", show_default=True,
              help="Which embedded DeepLabV3+ to run.")
@cloup.option("--input-shape", default="1x3x128x128", show_default=True, help="Input shape.")
@cloup.option("--opsets", default="10,13", show_default=True, help="Comma-separated opsets to export at.")
@cloup.option("--all", "show_all", is_flag=True, help="Show every layer.")
@debug_option
def demo(example: str, input_shape: str, opsets: str, show_all: bool) -> None:
    """Run the whole pipeline offline on the embedded DeepLabV3+ at several opsets.

    At opset 10 Resize has no coordinate mode, so bilinear upsampling stops matching
    PyTorch: the report names the first Resize whose output changes. At 13 all agree.
    """
    from rich.console import Console

    from trtdiff.demo import run_demo

    try:
        wanted = [int(o) for o in opsets.split(",") if o.strip()]
    except ValueError:
        raise OptionError(f"--opsets {opsets}: expected comma-separated integers, e.g. 10,13") from None
    ok = run_demo(example, input_shape, wanted, Console(highlight=False), show_all=show_all)
    sys.exit(0 if ok else EXIT_DIVERGED)


def _compare_options(options: dict[str, Any]) -> CompareOptions:
    """The typed options of a command: every part it has flags for, defaults for the others."""
    from trtdiff.options import CompareOptions, GateOptions
    from trtdiff.report import Thresholds

    return CompareOptions(
        load=_load_options(options),
        export=_export_options(options),
        runtime=_backend_options(options),
        thresholds=_thresholds(options) if "min_cosine" in options else Thresholds(),
        gate=_gate_options(options) if "inputs_dir" in options else GateOptions(),
        force=options.pop("force", False),
    )


def _load_options(options: dict[str, Any]) -> LoadOptions:
    from trtdiff.options import LoadOptions

    return LoadOptions(
        model_class=options.pop("model_class"), trust=options.pop("trust"), input_shapes=options.pop("input_shapes"),
        input_files=options.pop("input_files"), seed=options.pop("seed"),
    )


def _export_options(options: dict[str, Any]) -> ExportOptions:
    from trtdiff.options import ExportOptions

    return ExportOptions(opset=options.pop("opset"), exporter=options.pop("exporter"), onnx=options.pop("onnx"),
                         save_onnx=options.pop("save_onnx"))


def _backend_options(options: dict[str, Any]) -> BackendOptions:
    from trtdiff.options import BackendOptions, BuildSettings

    workspace = options.pop("workspace_bytes")
    settings = BuildSettings(
        outputs=options.pop("outputs"),
        precision="fp16" if options.pop("fp16") else "fp32",
        precision_constraints=options.pop("precision_constraints"),
        optimization_level=options.pop("optimization_level"),
        workspace_bytes=parse_size(workspace, "workspace_bytes") if workspace else None,
        compute_capabilities=tuple(options.pop("compute_capabilities")),
    )
    memory = options.pop("memory_bytes", None)
    return BackendOptions(
        backends=_names(options.pop("backends", None)),
        require=_names(options.pop("require", None)) or (),
        ort_provider=options.pop("ort_provider", "CPUExecutionProvider"),
        torch_device=options.pop("torch_device", "cpu"),
        tf32=options.pop("tf32"),
        tensorrt=settings,
        engine_cache=options.pop("engine_cache"),
        save_engine=options.pop("save_engine"),
        recordings=_recordings(options.pop("recordings", ())),
        **({"memory_bytes": parse_size(memory, "memory_bytes")} if memory else {}),
    )


def _thresholds(options: dict[str, Any]) -> Thresholds:
    from trtdiff.report import Thresholds

    defaults = Thresholds()
    min_cosine, rtol = options.pop("min_cosine"), options.pop("rtol")
    return Thresholds(
        min_cosine=defaults.min_cosine if min_cosine is None else min_cosine,
        rtol=defaults.rtol if rtol is None else rtol,
        max_abs=options.pop("max_abs"),
    )


def _gate_options(options: dict[str, Any]) -> GateOptions:
    from trtdiff.datasets import parse_channel_values, parse_size as parse_hw
    from trtdiff.options import GateOptions

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
    from trtdiff.outputs import ReportFiles

    return ReportFiles(json=options.pop("json"), junit=options.pop("junit"), markdown=options.pop("markdown"),
                       html=options.pop("html"))


def _recordings(values: tuple[str, ...]) -> dict[str, str]:
    recordings: dict[str, str] = {}
    for value in values:
        backend, sep, path = value.partition("=")
        if not sep or not backend or not path:
            raise OptionError(f"--load {value}: expected BACKEND=FILE.npz, e.g. --load onnxruntime=ort.npz")
        recordings[backend] = path
    return recordings


@contextmanager
def _progress(quiet: bool) -> Iterator[Callable[[str], None] | None]:
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


def parse_size(text: str, parameter: str) -> int:
    """'512MB', '2GB', '1.5g' -> bytes."""
    match = _SIZE.match(text)
    if not match:
        raise OptionError("expected a size such as 512MB or 2GB", parameter=parameter, value=text)
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)


if __name__ == "__main__":
    main()
