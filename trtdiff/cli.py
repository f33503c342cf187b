"""The `trtdiff` command: parse options into typed values and make one library call.

Every TrtdiffError becomes one line and exit code 2 here, in `_Cli.invoke`, and nowhere
else; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import json
import re
import sys
import traceback
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
    return bool(ctx.meta.get("trtdiff.debug")) or "--debug" in sys.argv


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta["trtdiff.debug"] = True
    return value


debug_option = click.option("--debug", is_flag=True, expose_value=False, callback=_set_debug, is_eager=True,
                            help="Show the full traceback of an error.")


def _version_text() -> str:
    import platform

    return f"trtdiff {__version__} (Python {platform.python_version()}; TensorRT: not used by this version)"


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", message=_version_text())
@debug_option
def main() -> None:
    """Find the first layer whose numbers change between PyTorch and ONNX Runtime, and why."""


@main.command()
@click.argument("model")
@click.option("--opset", type=int, default=None, help="ONNX opset to export at (default 17). The report states the opset actually written.")
@click.option("--exporter", type=click.Choice(["auto", "torchscript", "dynamo"]), default="auto", show_default=True,
              help="auto picks an exporter that honours --opset (TorchScript below 18, dynamo from 18).")
@click.option("--onnx", "onnx_file", type=click.Path(dir_okay=False), default=None,
              help="Compare against this ONNX file (e.g. after onnxsim) instead of exporting one.")
@click.option("--save-onnx", type=click.Path(dir_okay=False), default=None, help="Keep the exported ONNX file here.")
@click.option("--force", is_flag=True, help="Let --save-onnx overwrite an existing file.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="[NAME:]SHAPE",
              help="Random input of this shape, e.g. 1x3x512x512 or image:1x3x512x512. Repeat for several inputs.")
@click.option("--input", "input_files", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="Inputs from a .npy, .npz or .pt file. Repeat for several.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--model-class", default=None, metavar="PKG.MOD:CLASS", help="Class or factory to build the model a state_dict belongs to.")
@click.option("--trust", is_flag=True, help="Allow loading a pickled nn.Module (torch.save(model)): unpickling runs code from the file.")
@click.option("--backends", default="torch,onnxruntime", show_default=True, help="Comma-separated backends to compare.")
@click.option("--ort-provider", default="CPUExecutionProvider", show_default=True, help="ONNX Runtime execution provider.")
@click.option("--torch-device", default="cpu", show_default=True, help="Where the PyTorch reference runs: cpu, cuda, cuda:1 …")
@click.option("--tf32", is_flag=True, help="Allow TF32 in the PyTorch reference on CUDA (off: true FP32).")
@click.option("--min-cosine", type=float, default=None, help="Diverged below this cosine similarity (default 0.9999).")
@click.option("--rtol", type=float, default=None, help="Diverged above this max-abs error relative to the reference's largest magnitude (default 1e-3).")
@click.option("--max-abs", type=float, default=None, help="Diverged above this absolute max error (default: off).")
@click.option("--all", "show_all", is_flag=True, help="Show every layer, not only those up to the first divergence.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the report as JSON here.")
@click.option("--memory-limit", default="2GB", show_default=True, help="Reference tensors kept in RAM before spilling to disk.")
@debug_option
def compare(model: str, opset: int | None, exporter: str, onnx_file: str | None, save_onnx: str | None, force: bool,
            input_shapes: tuple[str, ...], input_files: tuple[str, ...], seed: int, model_class: str | None, trust: bool,
            backends: str, ort_provider: str, torch_device: str, tf32: bool, min_cosine: float | None, rtol: float | None, max_abs: float | None,
            show_all: bool, json_path: str | None, memory_limit: str) -> None:
    """Compare MODEL layer by layer across PyTorch and ONNX Runtime.

    MODEL is a TorchScript archive, an ExportedProgram (.pt2), a torch.save file (a state_dict
    with --model-class, or a pickled module with --trust), a factory spec pkg.module:function,
    or an .onnx file. Exit code 0: all agree; 1: a divergence; 2: bad usage or input.
    """
    from trtdiff.api import compare as run_compare
    from trtdiff.report import Thresholds

    _check_json_path(json_path)
    defaults = Thresholds()
    thresholds = Thresholds(
        min_cosine=defaults.min_cosine if min_cosine is None else min_cosine,
        rtol=defaults.rtol if rtol is None else rtol,
        max_abs=max_abs,
    )
    report = run_compare(
        model, input_shapes=input_shapes, input_files=input_files, seed=seed, opset=opset, exporter=exporter,
        onnx=onnx_file, save_onnx=save_onnx, force=force, backends=backends.split(","), ort_provider=ort_provider,
        torch_device=torch_device, tf32=tf32,
        thresholds=thresholds, model_class=model_class, trust=trust, memory_bytes=_parse_size(memory_limit, "--memory-limit"),
    )
    _emit(report, show_all=show_all, json_path=json_path)
    sys.exit(0 if report.passed else EXIT_DIVERGED)


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


def _emit(report: Any, *, show_all: bool, json_path: str | None) -> None:
    from rich.console import Console

    from trtdiff.render.terminal import render_terminal

    render_terminal(report, Console(highlight=False), show_all=show_all)
    if json_path:
        report.write_json(json_path)


def _check_json_path(json_path: str | None) -> None:
    """Refuse to overwrite a file that is not an earlier trtdiff report."""
    if not json_path:
        return
    path = Path(json_path)
    if not path.parent.is_dir():
        raise OptionError(f"--json {path}: folder {path.parent} does not exist; create it first")
    if path.exists():
        try:
            earlier = json.loads(path.read_text())
            is_report = isinstance(earlier, dict) and "schema_version" in earlier and "layers" in earlier
        except (OSError, ValueError):
            is_report = False
        if not is_report:
            raise OptionError(f"--json {path}: the file exists and is not a trtdiff report; choose another path")


def _parse_size(text: str, option: str) -> int:
    match = _SIZE.match(text)
    if not match:
        raise OptionError(f"{option} {text}: expected a size such as 512MB or 2GB")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)


if __name__ == "__main__":
    main()
