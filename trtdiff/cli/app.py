"""The `trtdiff` command: parse options into typed values and make one library call.

Every TrtdiffError (and a MemoryError: the machine's limit, not a bug) becomes one line and
exit code 2 here, in `_Cli.invoke`, and nowhere else; `--debug` shows the traceback too; an
interrupt is one line and exit code 130. The library names its parameters
(`input_shapes`); `trtdiff.options.flag_of` maps each to the flag that sets it (`--input-shape`).
The flags themselves are generated from the option declarations (`trtdiff.cli.flags`).
"""

from __future__ import annotations

import difflib
import sys
import traceback
from typing import Any

import click
import cloup

from trtdiff.cli.flags import flags
from trtdiff.errors import TrtdiffError
from trtdiff.options import flag_of

EXIT_DIVERGED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


class _UnknownCommand(click.UsageError):
    """A command name that is none of trtdiff's: the closest one, and the commands."""


class _Cli(cloup.Group):
    """A click group that turns library errors into one clear line, naming flags."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as error:
            name = args[0] if args else ""
            if not name or name.startswith("-") or self.get_command(ctx, name) is not None:
                raise
            raise _UnknownCommand(unknown_command(name, sorted(self.commands)), ctx=ctx) from error

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TrtdiffError as error:
            if _debug(ctx):
                traceback.print_exc()
            click.echo(f"Error: {printable(error.render(flag_of))}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except _UnknownCommand as error:
            click.echo(f"Error: {error.format_message()}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except click.UsageError as error:  # a flag click itself refuses (unknown, missing value): one line too
            where = f"trtdiff {error.ctx.info_name}" if error.ctx and error.ctx.parent else "trtdiff"
            click.echo(f"Error: {error.format_message()} ({where} --help lists the options)", err=True)
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


def unknown_command(name: str, commands: list[str]) -> str:
    """The line for a mistyped command: what was given, the closest command if one is close, every command."""
    close = difflib.get_close_matches(name, commands, n=1)
    guess = f" Did you mean '{close[0]}'?" if close else ""
    return (
        f"no command '{printable(name)}'.{guess} The commands are {', '.join(commands)} "
        "(trtdiff --help says what each does)"
    )


def printable(text: str) -> str:
    """`text` with the bytes of a path that is not UTF-8 written as \\xNN (as the shell shows them), one line.

    A line break or control character in it (a file's name holding one) is written as an escape
    (`trtdiff.report.text.plain`): the message stays whole, on one line, and no ESC reaches the terminal.
    """
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte
        raw = text.encode("utf-8", "backslashreplace")
    from trtdiff.report.text import plain

    return plain(raw.decode("utf-8", "backslashreplace").strip())


def _debug(ctx: click.Context) -> bool:
    return bool(ctx.meta.get("trtdiff.debug"))  # meta is shared by the group's and the command's contexts


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta["trtdiff.debug"] = True
    return value


debug_option = cloup.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    callback=_set_debug,
    is_eager=True,
    help="Show the full traceback of an error.",
)


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
    from trtdiff.cli.guard import guarded_output

    click.get_current_context().with_resource(guarded_output())  # until the command's last line is written


@main.command()
@cloup.argument("model")
@flags("compare")
@debug_option
def compare(model: str, **values: Any) -> None:
    """Compare MODEL layer by layer across PyTorch, ONNX Runtime and TensorRT.

    MODEL is a TorchScript archive, an ExportedProgram (.pt2), a torch.save file (a state_dict
    with --model-class, or a pickled module with --trust), a factory spec pkg.module:function,
    or an .onnx file. Exit code 0: every check holds; 1: a divergence or a failed threshold;
    2: bad usage or input.
    """
    from trtdiff.cli.commands import compare_command

    sys.exit(0 if compare_command(model, values) else EXIT_DIVERGED)


@main.command()
@cloup.argument("model")
@flags("run")
@debug_option
def run(model: str, **values: Any) -> None:
    """Run one ONNX backend and record every tensor it produced, for `compare --load`.

    Record on the machine where the backend runs (an edge device without PyTorch, say), then
    compare there or elsewhere: trtdiff compare MODEL --onnx FILE --load BACKEND=FILE.npz
    """
    from trtdiff.cli.commands import run_command

    recording = run_command(model, values)
    click.echo(
        f"recorded {recording.tensors} tensors of {recording.describe} to {recording.path} "
        f"(ONNX sha256 {recording.onnx_sha256[:12]}…); compare with --load {recording.backend}={recording.path}"
    )


@main.command()
@cloup.argument("model")
@flags("build")
@debug_option
def build(model: str, **values: Any) -> None:
    """Build the TensorRT engine for MODEL without running it.

    Prints what was marked, what could not be and why, and which ONNX nodes the engine fused;
    --json adds the ONNX-to-TensorRT name map. Works where TensorRT can build but not run
    (TensorRT-RTX on a CPU-only machine), e.g. to prepare an engine for another machine.
    """
    from trtdiff.cli.commands import build_command

    build_command(model, values)


@main.command()
@cloup.argument("model")
@flags("inspect")
@debug_option
def inspect(model: str, **values: Any) -> None:
    """Check MODEL's ONNX file for known export pitfalls that change numbers, each with its fix.

    No comparison runs: the model is exported (or the ONNX file read), every Resize is listed
    with its modes and the PyTorch code it came from, and the file is checked for Resize
    coordinate modes the opset cannot express, align_corners, nearest rounding, Softmax axes
    before opset 13, FP16 overflow, unfolded BatchNorm, unusual epsilons, GroupNorm patterns
    and Shape chains a simplifier would fold. Exit code 0: nothing above info; 1: findings.
    """
    from trtdiff.cli.commands import inspect_command

    sys.exit(0 if inspect_command(model, values) else EXIT_DIVERGED)


@main.command()
@flags("demo")
@debug_option
def demo(**values: Any) -> None:
    """Run the whole pipeline offline on the embedded DeepLabV3+ at several opsets.

    At opset 10 Resize has no coordinate mode, so bilinear upsampling stops matching
    PyTorch: the report names the first Resize whose output changes. At 13 all agree.
    """
    from trtdiff.cli.commands import demo_command

    sys.exit(0 if demo_command(values) else EXIT_DIVERGED)


@main.command()
@cloup.argument("report_json", metavar="REPORT.json")
@flags("report")
@debug_option
def report(report_json: str, **values: Any) -> None:
    """Render a saved report (compare --json, a sweep's too) as HTML, Markdown, JUnit or Model Explorer node data.

    No model runs: a CI artifact becomes a page later. Reads the current report schema and the
    one before it. Exit code 0: the saved report passed; 1: it failed; 2: the file cannot be read.
    """
    from trtdiff.cli.commands import report_command

    sys.exit(0 if report_command(report_json, values) else EXIT_DIVERGED)


@main.command()
@cloup.argument("report_json", metavar="REPORT.json")
@flags("view")
@debug_option
def view(report_json: str, **values: Any) -> None:
    """Open Google's Model Explorer on the report's ONNX file, each node coloured by its error.

    Serves Model Explorer locally (the explorer extra) with the accumulated error, the local
    error, the cosine and each node's status as node data; Ctrl-C stops it.
    """
    from trtdiff.cli.commands import view_command

    view_command(report_json, values)


@main.command()
@cloup.argument("folder", metavar="DIR")
@debug_option
def repro(folder: str) -> None:
    """Run a culprit's subgraph saved by compare --save-repro again and compare it with the reference.

    DIR is the folder --save-repro wrote (its first culprit) or one culprit's folder in it.
    Exit code 1: the subgraph alone still diverges; 0: it agrees now; 2: DIR is not a repro.
    """
    from trtdiff.cli.commands import repro_command

    sys.exit(0 if repro_command(folder) else EXIT_DIVERGED)


if __name__ == "__main__":
    main()
