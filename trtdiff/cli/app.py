"""The `trtdiff` command: parse options into typed values and make one library call.

Every TrtdiffError (and a MemoryError: the machine's limit, not a bug) becomes one line and
exit code 2 here, in `_Cli.invoke`, and nowhere else; `--debug` shows the traceback too; an
interrupt is one line and exit code 130. The library names its parameters
(`input_shapes`); `flag_for` maps each to the flag that sets it (`--input-shape`), in one place.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

import click
import cloup

from trtdiff.errors import TrtdiffError

EXIT_DIVERGED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
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
            click.echo(f"Error: {printable(error.render(flag_for))}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)
        except MemoryError as error:  # the machine, not trtdiff: inputs or a model larger than this memory
            if _debug(ctx):
                traceback.print_exc()
            click.echo(
                f"Error: out of memory ({printable(str(error)) or 'MemoryError'}); give smaller inputs with "
                f"--input-shape, a lower --memory-limit, or run on a machine with more memory",
                err=True,
            )
            ctx.exit(EXIT_BAD_INPUT)
        except Exception as error:  # noqa: BLE001 - a bug in trtdiff: still one line unless --debug
            if _debug(ctx):
                traceback.print_exc()
            click.echo(
                f"Error: internal error ({type(error).__name__}: {printable(str(error))}); "
                "rerun with --debug and report it",
                err=True,
            )
            ctx.exit(EXIT_INTERNAL)


def printable(text: str) -> str:
    """`text` with the bytes of a path that is not UTF-8 written as \\xNN (as the shell shows them), one line."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        raw = text.encode("utf-8", "backslashreplace")
    lines = raw.decode("utf-8", "backslashreplace").splitlines()
    return lines[0] if lines else ""


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


# The flags, a few lines each: a table of the flags and the library parameters they set.
# fmt: off
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

_export_files = (
    cloup.option("--onnx", type=click.Path(dir_okay=False), default=None,
                 help="Use this ONNX file (e.g. after onnxsim) instead of exporting one."),
    cloup.option("--save-onnx", type=click.Path(dir_okay=False), default=None, help="Keep the exported ONNX file."),
    cloup.option("--simplify", is_flag=True,
                 help="Also compare the ONNX file after onnxslim, side by side (the simplify extra)."),
    cloup.option("--force", is_flag=True, help="Let --save-onnx / --save-engine overwrite an existing file."),
)
_EXPORTER_HELP = "auto (TorchScript below opset 18, dynamo from 18), torchscript or dynamo"
# compare sweeps lists of opsets and exporters; run, build and inspect take one of each.
export_options = cloup.option_group(
    "Export",
    cloup.option("--opset", default=None, metavar="N[,N...]",
                 help="ONNX opset to export at (default 17); several (e.g. 11,13,17) compare each: a sweep."),
    cloup.option("--exporter", default="auto", show_default=True, metavar="NAME[,NAME...]",
                 help=f"{_EXPORTER_HELP}; several: a sweep."),
    *_export_files,
)
export_options_single = cloup.option_group(
    "Export",
    cloup.option("--opset", default=None, metavar="N", help="ONNX opset to export at (default 17)."),
    cloup.option("--exporter", default="auto", show_default=True, metavar="NAME", help=f"{_EXPORTER_HELP}."),
    *_export_files,
)

_tensorrt_settings = (
    cloup.option("--trt-outputs", "outputs", type=click.Choice(["all", "unfused", "none"]), default="all",
                 show_default=True, help="all: every tensor as a debug tensor of one engine (beside the plain "
                 "engine); unfused: keep fusion, read surviving tensors; none: final outputs only."),
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
    cloup.option("--trt-mark-budget", "mark_budget_bytes", default=None, metavar="SIZE",
                 help="Bytes of debug tensors one run of the one marked engine may copy (default: 1GB); over "
                      "it, a sample takes several runs of the same engine."),
    cloup.option("--trt-bisect/--no-trt-bisect", "bisect_marks", default=None,
                 help="Bisect the marks (a rebuild per step) also when outputs differ at all / never; by "
                      "default when marking changed the answer."),
    cloup.option("--engine-cache", type=click.Path(file_okay=False), default=None,
                 help="Folder of cached engines and the timing cache."),
    cloup.option("--save-engine", type=click.Path(dir_okay=False), default=None,
                 help="Write the TensorRT engine that ships (the marked one beside it as NAME.marked.engine)."),
)
# run and build make one engine: only compare sweeps precisions.
tensorrt_options = cloup.option_group(
    "TensorRT",
    *_tensorrt_settings,
    cloup.option("--sweep-precision", default=None, metavar="LIST",
                 help="Compare TensorRT at each precision: fp32 (TF32 off), tf32, fp16, e.g. fp32,tf32: a sweep."),
)
tensorrt_options_single = cloup.option_group("TensorRT", *_tensorrt_settings)

ort_provider_option = cloup.option("--ort-provider", default="CPUExecutionProvider", show_default=True,
                                   help="ONNX Runtime execution provider.")

backend_options = cloup.option_group(
    "Backends",
    cloup.option("--backends", default=None, metavar="LIST",
                 help="Comma-separated backends (torch, onnxruntime, onnx-reference, tensorrt). Default: torch, "
                      "onnxruntime, and TensorRT where it can run."),
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
    "Thresholds and culprits",
    cloup.option("--culprit/--no-culprit", "culprit", default=None,
                 help="Name the nodes that introduce the error (local error, export or runtime, attribution). "
                      "Default: when a divergence is found."),
    cloup.option("--min-cosine", type=float, default=None, help="Diverged below this cosine (default 0.9999)."),
    cloup.option("--rtol", type=float, default=None,
                 help="Diverged above this max-abs error over the reference's largest magnitude (default 1e-3)."),
    cloup.option("--max-abs", type=float, default=None, help="Diverged above this absolute max error (default: off)."),
    cloup.option("--allow-nonfinite", is_flag=True,
                 help="Let final outputs hold NaN/Inf, at the same positions in every backend (default: any fails)."),
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
    cloup.option("--size", default=None, metavar="HxW",
                 help="Resize images (bilinear) and masks (nearest) to this size, e.g. 512x1024."),
    cloup.option("--ignore-index", type=int, default=None, help="Label value that mIoU ignores (e.g. 255)."),
    cloup.option("--min-miou", type=float, default=None,
                 help="Fail below this mIoU: against --labels when given, else agreement with the reference's argmax."),
    cloup.option("--max-miou-drop", type=float, default=None,
                 help="Fail when a backend's mIoU against --labels is this much below PyTorch's."),
    cloup.option("--per-layer", is_flag=True, help="With several samples, gate every layer of the first sample too."),
)

report_options = cloup.option_group(
    "Reports",
    cloup.option("--all", "show_all", is_flag=True, help="Show every layer, not only those up to the first one."),
    cloup.option("--json", type=click.Path(dir_okay=False), default=None, help="Write the report as JSON here."),
    cloup.option("--junit", type=click.Path(dir_okay=False), default=None,
                 help="Write JUnit XML (one test case per check)."),
    cloup.option("--markdown", type=click.Path(dir_okay=False), default=None,
                 help="Write a Markdown summary (PR comment, CI step summary)."),
    cloup.option("--html", type=click.Path(dir_okay=False), default=None,
                 help="Write a self-contained HTML report with plots."),
    cloup.option("--quiet", "-q", is_flag=True,
                 help="No progress display and no table: the verdict, the culprits and their fixes."),
)
# fmt: on


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from trtdiff.cli.commands import version_text

        click.echo(version_text())
        ctx.exit(0)


@cloup.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@cloup.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show trtdiff's version, the TensorRT it found and the GPU.",
)
@debug_option
def main() -> None:
    """Find the first layer whose numbers change between PyTorch, ONNX Runtime and TensorRT, and why."""
    for stream in (sys.stdout, sys.stderr):  # a path that is not UTF-8 is shown escaped, never a crash
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


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
    from trtdiff.cli.commands import compare_command

    sys.exit(0 if compare_command(options) else EXIT_DIVERGED)


@main.command()
@cloup.argument("model")
@cloup.option_group(
    "Recording",
    cloup.option(
        "--backend",
        type=click.Choice(["onnxruntime", "onnx-reference", "tensorrt"]),
        required=True,
        help="The backend to run and record.",
    ),
    cloup.option("--save", type=click.Path(dir_okay=False), required=True, help="The .npz file to write."),
    ort_provider_option,
)
@model_options
@export_options_single
@tensorrt_options_single
@debug_option
def run(**options: Any) -> None:
    """Run one ONNX backend and record every tensor it produced, for `compare --load`.

    Record on the machine where the backend runs (an edge device without PyTorch, say), then
    compare there or elsewhere: trtdiff compare MODEL --onnx FILE --load BACKEND=FILE.npz
    """
    from trtdiff.cli.commands import run_command

    recording = run_command(options)
    click.echo(
        f"recorded {recording.tensors} tensors of {recording.describe} to {recording.path} "
        f"(ONNX sha256 {recording.onnx_sha256[:12]}…); compare with --load {recording.backend}={recording.path}"
    )


@main.command()
@cloup.argument("model")
@model_options
@export_options_single
@tensorrt_options_single
@cloup.option(
    "--json",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write what was built as JSON (mark plan, skips and reasons, ONNX-to-TensorRT name map).",
)
@debug_option
def build(**options: Any) -> None:
    """Build the TensorRT engine for MODEL without running it.

    Prints what was marked, what could not be and why, and which ONNX nodes the engine fused;
    --json adds the ONNX-to-TensorRT name map. Works where TensorRT can build but not run
    (TensorRT-RTX on a CPU-only machine), e.g. to prepare an engine for another machine.
    """
    from trtdiff.cli.commands import build_command

    build_command(options)


@main.command()
@cloup.argument("model")
@model_options
@export_options_single
@cloup.option_group(
    "Reports",
    cloup.option("--json", type=click.Path(dir_okay=False), default=None, help="Write the inspection as JSON here."),
)
@debug_option
def inspect(**options: Any) -> None:
    """List every Resize with its modes and PyTorch origin, and the thread's usual suspects, with advice.

    No comparison runs: the model is exported (or the ONNX file read) and checked for Resize
    coordinate modes the opset cannot express, align_corners, nearest rounding, Softmax axes
    before opset 13, FP16 overflow, unfolded BatchNorm, unusual epsilons, GroupNorm patterns
    and Shape chains a simplifier would fold. Exit code 0: nothing above info; 1: findings.
    """
    from trtdiff.cli.commands import inspect_command

    sys.exit(0 if inspect_command(options) else EXIT_DIVERGED)


@main.command()
@cloup.option(
    "--model",
    "example",
    type=click.Choice(["resnet", "mobilenetv2"]),
    default="resnet",
    show_default=True,
    help="Which embedded DeepLabV3+ to run.",
)
@cloup.option("--input-shape", default="1x3x128x128", show_default=True, help="Input shape.")
@cloup.option("--opsets", default="10,13", show_default=True, help="Comma-separated opsets to export at.")
@cloup.option("--all", "show_all", is_flag=True, help="Show every layer.")
@debug_option
def demo(example: str, input_shape: str, opsets: str, show_all: bool) -> None:
    """Run the whole pipeline offline on the embedded DeepLabV3+ at several opsets.

    At opset 10 Resize has no coordinate mode, so bilinear upsampling stops matching
    PyTorch: the report names the first Resize whose output changes. At 13 all agree.
    """
    from trtdiff.cli.commands import demo_command

    sys.exit(0 if demo_command(example, input_shape, opsets, show_all) else EXIT_DIVERGED)


if __name__ == "__main__":
    main()
