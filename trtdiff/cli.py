"""The `trtdiff` command: parse options into typed values and make one library call.

Every TrtdiffError becomes one line and exit code 2 here, in `_Cli.invoke`, and nowhere
else; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import json
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from trtdiff import __version__
from trtdiff.errors import OptionError, TrtdiffError

EXIT_DIVERGED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


class _Cli(click.Group):
    """A click group that turns library errors into one clear line."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TrtdiffError as error:
            if _debug(ctx):
                traceback.print_exc()
            click.echo(f"Error: {error}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)
        except Exception as error:  # a bug in trtdiff: still one line unless --debug
            if _debug(ctx):
                traceback.print_exc()
            click.echo(f"Error: internal error ({type(error).__name__}: {error}); rerun with --debug and report it", err=True)
            ctx.exit(EXIT_INTERNAL)


def _debug(ctx: click.Context) -> bool:
    return bool(ctx.meta.get("trtdiff.debug"))  # meta is shared by the group's and the command's contexts


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta["trtdiff.debug"] = True
    return value


def _options(*decorators: Callable) -> Callable:
    """Apply a group of click options in the order written."""

    def apply(function: Callable) -> Callable:
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return apply


debug_option = click.option("--debug", is_flag=True, expose_value=False, callback=_set_debug, is_eager=True,
                            help="Show the full traceback of an error.")

model_options = _options(
    click.argument("model"),
    click.option("--opset", type=int, default=None, help="ONNX opset to export at (default 17). The report states the opset actually written."),
    click.option("--exporter", type=click.Choice(["auto", "torchscript", "dynamo"]), default="auto", show_default=True,
                 help="auto picks an exporter that honours --opset (TorchScript below 18, dynamo from 18)."),
    click.option("--onnx", "onnx_file", type=click.Path(dir_okay=False), default=None,
                 help="Use this ONNX file (e.g. after onnxsim) instead of exporting one."),
    click.option("--save-onnx", type=click.Path(dir_okay=False), default=None, help="Keep the exported ONNX file here."),
    click.option("--force", is_flag=True, help="Let --save-onnx / --save-engine overwrite an existing file."),
    click.option("--input-shape", "input_shapes", multiple=True, metavar="[NAME:]SHAPE",
                 help="Random input of this shape, e.g. 1x3x512x512 or image:1x3x512x512. Repeat for several inputs."),
    click.option("--input", "input_files", multiple=True, metavar="[NAME:]FILE",
                 help="Inputs from a .npy, .npz or .pt file. Repeat for several."),
    click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs."),
    click.option("--model-class", default=None, metavar="PKG.MOD:CLASS", help="Class or factory to build the model a state_dict belongs to."),
    click.option("--trust", is_flag=True, help="Allow loading a pickled nn.Module (torch.save(model)): unpickling runs code from the file."),
)

tensorrt_options = _options(
    click.option("--trt-outputs", type=click.Choice(["all", "unfused", "none"]), default="all", show_default=True,
                 help="all: mark every layer output (disables fusion); unfused: keep fusion, read surviving tensors as "
                      "debug tensors; none: final outputs only."),
    click.option("--tf32", is_flag=True, help="Allow TF32 in TensorRT and in the PyTorch reference on CUDA (off: true FP32)."),
    click.option("--fp16", is_flag=True, help="FP16 engine: the builder flag on TensorRT 10, an FP16-converted ONNX file on TensorRT 11/RTX."),
    click.option("--precision-constraints", type=click.Choice(["none", "obey", "prefer"]), default="none", show_default=True,
                 help="TensorRT 10 layer precision constraints with --fp16."),
    click.option("--builder-opt-level", type=click.IntRange(0, 5), default=None, help="TensorRT builder optimization level (0-5)."),
    click.option("--workspace", default=None, metavar="SIZE", help="TensorRT workspace limit, e.g. 2GB."),
    click.option("--trt-compute-capability", "compute_capabilities", multiple=True, metavar="SMxx",
                 help="TensorRT-RTX only: build for this compute capability (e.g. SM86). Repeatable."),
    click.option("--engine-cache", type=click.Path(file_okay=False), default=None, help="Folder of cached engines and the timing cache."),
    click.option("--save-engine", type=click.Path(dir_okay=False), default=None, help="Write the TensorRT engine here."),
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


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show trtdiff's version, the TensorRT it found and the GPU.")
@debug_option
def main() -> None:
    """Find the first layer whose numbers change between PyTorch, ONNX Runtime and TensorRT, and why."""


@main.command()
@model_options
@click.option("--backends", default=None, metavar="LIST",
              help="Comma-separated backends (torch, onnxruntime, tensorrt). Default: all three, TensorRT where it can run.")
@click.option("--require", default=None, metavar="LIST", help="Backends that must run (e.g. tensorrt): exit 2 instead of skipping.")
@click.option("--ort-provider", default="CPUExecutionProvider", show_default=True, help="ONNX Runtime execution provider.")
@click.option("--torch-device", default="cpu", show_default=True, help="Where the PyTorch reference runs: cpu, cuda, cuda:1 …")
@tensorrt_options
@click.option("--min-cosine", type=float, default=None, help="Diverged below this cosine similarity (default 0.9999).")
@click.option("--rtol", type=float, default=None, help="Diverged above this max-abs error relative to the reference's largest magnitude (default 1e-3).")
@click.option("--max-abs", type=float, default=None, help="Diverged above this absolute max error (default: off).")
@click.option("--inputs", "inputs_dir", type=click.Path(), default=None,
              help="Folder of PNG/JPEG images or .npy/.npz input tensors: gate every sample's final outputs.")
@click.option("--labels", "labels_dir", type=click.Path(), default=None,
              help="Folder of label masks (single-channel PNG, class index per pixel, same stem as the image).")
@click.option("--num-samples", type=int, default=None, help="Gate N seeded random inputs (of --input-shape).")
@click.option("--mean", default=None, help="Per-channel mean for images, e.g. 0.485,0.456,0.406.")
@click.option("--std", default=None, help="Per-channel std for images, e.g. 0.229,0.224,0.225.")
@click.option("--size", default=None, metavar="H,W", help="Resize images (bilinear) and masks (nearest) to H,W.")
@click.option("--ignore-index", type=int, default=None, help="Label value that mIoU ignores (e.g. 255).")
@click.option("--min-miou", type=float, default=None,
              help="Fail below this mIoU: against --labels when given, else agreement with the reference's argmax.")
@click.option("--max-miou-drop", type=float, default=None, help="Fail when a backend's mIoU against --labels is this much below PyTorch's.")
@click.option("--per-layer", is_flag=True, help="With several samples, gate every layer of the first sample too.")
@click.option("--load", "loads", multiple=True, metavar="BACKEND=FILE",
              help="Compare a recording from `trtdiff run --save` instead of running that backend.")
@click.option("--all", "show_all", is_flag=True, help="Show every layer, not only those up to the first divergence.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the report as JSON here.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), default=None, help="Write JUnit XML (one test case per check).")
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False), default=None, help="Write a Markdown summary (PR comment, CI step summary).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None, help="Write a self-contained HTML report with plots.")
@click.option("--quiet", "-q", is_flag=True, help="No progress display and no table; the verdict line only.")
@click.option("--memory-limit", default="2GB", show_default=True, help="Reference tensors kept in RAM before spilling to disk.")
@debug_option
def compare(**options: Any) -> None:
    """Compare MODEL layer by layer across PyTorch, ONNX Runtime and TensorRT.

    MODEL is a TorchScript archive, an ExportedProgram (.pt2), a torch.save file (a state_dict
    with --model-class, or a pickled module with --trust), a factory spec pkg.module:function,
    or an .onnx file. Exit code 0: every check holds; 1: a divergence or a failed threshold;
    2: bad usage or input.
    """
    from trtdiff.api import compare as run_compare
    from trtdiff.report import Thresholds


    json_path = options.pop("json_path")
    show_all = options.pop("show_all")
    quiet = options.pop("quiet")
    outputs = {"junit": options.pop("junit_path"), "markdown": options.pop("markdown_path"), "html": options.pop("html_path")}
    _check_json_path(json_path)
    for kind, path in outputs.items():
        _check_output_path(path, f"--{kind}")
    gate = _gate_options(options)
    loads = _loads(options.pop("loads"))
    defaults = Thresholds()
    min_cosine, rtol, max_abs = options.pop("min_cosine"), options.pop("rtol"), options.pop("max_abs")
    thresholds = Thresholds(
        min_cosine=defaults.min_cosine if min_cosine is None else min_cosine,
        rtol=defaults.rtol if rtol is None else rtol,
        max_abs=max_abs,
    )
    with _progress(quiet) as progress:
        report = run_compare(
            thresholds=thresholds,
            gate=gate,
            load=loads,
            progress=progress,
            backends=_names(options.pop("backends")),
            require=_names(options.pop("require")) or (),
            ort_provider=options.pop("ort_provider"),
            torch_device=options.pop("torch_device"),
            memory_bytes=_parse_size(options.pop("memory_limit"), "--memory-limit"),
            **_common(options),
        )
    from rich.console import Console

    from trtdiff.render.terminal import render_terminal, render_verdict

    console = Console(highlight=False)
    if quiet:
        render_verdict(report, console)
    else:
        render_terminal(report, console, show_all=show_all)
    _write_reports(report, json_path, outputs)
    sys.exit(0 if report.passed else EXIT_DIVERGED)


@main.command()
@model_options
@click.option("--backend", type=click.Choice(["onnxruntime", "tensorrt"]), required=True, help="The backend to run and record.")
@click.option("--save", "save_path", type=click.Path(dir_okay=False), required=True, help="The .npz file to write.")
@click.option("--ort-provider", default="CPUExecutionProvider", show_default=True, help="ONNX Runtime execution provider.")
@tensorrt_options
@debug_option
def run(**options: Any) -> None:
    """Run one ONNX backend and record every tensor it produced, for `compare --load`.

    Record on the machine where the backend runs (an edge device without PyTorch, say), then
    compare there or elsewhere: trtdiff compare MODEL --onnx FILE --load BACKEND=FILE.npz
    """
    from trtdiff.run import run as run_backend

    backend, save, provider = options.pop("backend"), options.pop("save_path"), options.pop("ort_provider")
    common = _common(options)
    if common.pop("save_engine"):
        raise OptionError("--save-engine: use `trtdiff build` to keep an engine; `run` records tensors")
    recording = run_backend(backend=backend, save=save, ort_provider=provider, **common)
    click.echo(f"recorded {recording.tensors} tensors of {recording.describe} to {recording.path} "
               f"(ONNX sha256 {recording.onnx_sha256[:12]}…); compare with --load {recording.backend}={recording.path}")


@main.command()
@model_options
@tensorrt_options
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write what was built as JSON (mark plan, skips and reasons, ONNX-to-TensorRT name map).")
@debug_option
def build(**options: Any) -> None:
    """Build the TensorRT engine for MODEL without running it.

    Prints what was marked, what could not be and why, and which ONNX nodes the engine fused;
    --json adds the ONNX-to-TensorRT name map. Works where TensorRT can build but not run
    (TensorRT-RTX on a CPU-only machine), e.g. to prepare an engine for another machine.
    """
    from rich.console import Console

    from trtdiff.build import build as run_build
    from trtdiff.render.terminal import render_build

    json_path = options.pop("json_path")
    _check_json_path(json_path, kind="build")
    with _progress(quiet=False) as progress:
        if progress is not None:
            progress("exporting and building the TensorRT engine (this can take minutes)")
        report = run_build(**_common(options))
    render_build(report, Console(highlight=False))
    if json_path:
        Path(json_path).write_text(report.to_json() + "\n")


@main.command()
@click.option("--model", "example", type=click.Choice(["resnet", "mobilenetv2"]), default="resnet", show_default=True,
              help="Which embedded DeepLabV3+ to run.")
@click.option("--input-shape", default="1x3x128x128", show_default=True, help="Input shape.")
@click.option("--opsets", default="10,13", show_default=True, help="Comma-separated opsets to export at.")
@click.option("--all", "show_all", is_flag=True, help="Show every layer.")
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


def _common(options: dict[str, Any]) -> dict[str, Any]:
    """The model, export and TensorRT options shared by `compare` and `build`, as library arguments."""
    from trtdiff.backends.tensorrt.builder import BuildSettings

    workspace = options.pop("workspace")
    settings = BuildSettings(
        outputs=options.pop("trt_outputs"),
        precision="fp16" if options.pop("fp16") else "fp32",
        precision_constraints=options.pop("precision_constraints"),
        optimization_level=options.pop("builder_opt_level"),
        workspace_bytes=_parse_size(workspace, "--workspace") if workspace else None,
        compute_capabilities=tuple(options.pop("compute_capabilities")),
    )
    return {
        "model": options.pop("model"),
        "opset": options.pop("opset"),
        "exporter": options.pop("exporter"),
        "onnx": options.pop("onnx_file"),
        "save_onnx": options.pop("save_onnx"),
        "force": options.pop("force"),
        "input_shapes": options.pop("input_shapes"),
        "input_files": options.pop("input_files"),
        "seed": options.pop("seed"),
        "model_class": options.pop("model_class"),
        "trust": options.pop("trust"),
        "tensorrt": settings,
        "tf32": options.pop("tf32"),
        "engine_cache": options.pop("engine_cache"),
        "save_engine": options.pop("save_engine"),
        **options,
    }


def _gate_options(options: dict[str, Any]) -> Any:
    from trtdiff.datasets import parse_channel_values, parse_size
    from trtdiff.gate import GateOptions

    mean, std, size = options.pop("mean"), options.pop("std"), options.pop("size")
    return GateOptions(
        inputs_dir=options.pop("inputs_dir"),
        labels_dir=options.pop("labels_dir"),
        num_samples=options.pop("num_samples"),
        mean=parse_channel_values(mean, "--mean") if mean else None,
        std=parse_channel_values(std, "--std") if std else None,
        size=parse_size(size, "--size") if size else None,
        ignore_index=options.pop("ignore_index"),
        min_miou=options.pop("min_miou"),
        max_miou_drop=options.pop("max_miou_drop"),
        per_layer=options.pop("per_layer"),
    )


def _loads(values: tuple[str, ...]) -> dict[str, str]:
    loads: dict[str, str] = {}
    for value in values:
        backend, sep, path = value.partition("=")
        if not sep or not backend or not path:
            raise OptionError(f"--load {value}: expected BACKEND=FILE.npz, e.g. --load onnxruntime=ort.npz")
        loads[backend] = path
    return loads


def _progress(quiet: bool) -> Any:
    """A spinner on stderr while long steps run, only in a terminal and without --quiet."""
    import contextlib

    from rich.console import Console

    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        return contextlib.nullcontext(None)

    @contextlib.contextmanager
    def spinner() -> Any:
        with console.status("starting") as status:
            yield lambda text: status.update(text)

    return spinner()


def _write_reports(report: Any, json_path: str | None, outputs: dict[str, str | None]) -> None:
    if json_path:
        report.write_json(json_path)
    if outputs["junit"]:
        from trtdiff.render.junit import write_junit

        write_junit(report, outputs["junit"])
    if outputs["markdown"]:
        from trtdiff.render.markdown import write_markdown

        write_markdown(report, outputs["markdown"])
    if outputs["html"]:
        from trtdiff.render.html import write_html

        write_html(report, outputs["html"])


def _check_output_path(path: str | None, option: str) -> None:
    """Report files are overwritten (CI reruns), but their folder must exist and they must not be folders."""
    if not path:
        return
    target = Path(path)
    if not target.parent.is_dir():
        raise OptionError(f"{option} {target}: folder {target.parent} does not exist; create it first")
    if target.is_dir():
        raise OptionError(f"{option} {target}: is a folder; give a file path")


def _names(text: str | None) -> list[str] | None:
    return [part.strip() for part in text.split(",") if part.strip()] if text else None


def _check_json_path(json_path: str | None, kind: str = "report") -> None:
    """Refuse to overwrite a file that is not an earlier trtdiff report of this kind."""
    if not json_path:
        return
    path = Path(json_path)
    if not path.parent.is_dir():
        raise OptionError(f"--json {path}: folder {path.parent} does not exist; create it first")
    if path.exists():
        try:
            earlier = json.loads(path.read_text())
            marker = "layers" if kind == "report" else "tensorrt"
            ours = isinstance(earlier, dict) and marker in earlier and "opset" in earlier
        except (OSError, ValueError):
            ours = False
        if not ours:
            raise OptionError(f"--json {path}: the file exists and is not a trtdiff {kind}; choose another path")


def _parse_size(text: str, option: str) -> int:
    match = _SIZE.match(text)
    if not match:
        raise OptionError(f"{option} {text}: expected a size such as 512MB or 2GB")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)


if __name__ == "__main__":
    main()
