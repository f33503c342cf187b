"""trtdiff.cli.flags: every flag comes from one declaration, and what it parses reaches the library."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from trtdiff.cli.app import main
from trtdiff.cli.flags import ALIAS, default_text, given, help_text
from trtdiff.cli.sources import read_options
from trtdiff.errors import OptionError
from trtdiff.options import CompareOptions, declared_of, for_command

PLUMBING = {"debug", "help", "model", "report_json"}  # --debug, --help and the MODEL / REPORT.json arguments


@pytest.mark.parametrize("command", ["compare", "run", "build", "inspect", "demo", "report", "view"])
def test_a_commands_flags_are_exactly_its_declared_options(command: str) -> None:
    """Each declared option is one flag; an alias (`--fp16` of `--precision`) is one more, named NAME__alias."""
    params = {p.name for p in main.commands[command].params} - PLUMBING
    aliases = {d.name + ALIAS for d in for_command(command) if d.option.alias is not None}
    assert params == {d.name for d in for_command(command)} | aliases
    for param in main.commands[command].params:
        if isinstance(param, click.Option) and param.name not in PLUMBING:
            declared = declared_of((param.name or "").removesuffix(ALIAS))
            assert declared is not None
            flag = declared.option.alias[0] if param.name in aliases and declared.option.alias else declared.flag
            assert flag in param.opts + param.secondary_opts
            assert param.default is None, "every flag defaults to None: what is not None was given"


def test_help_shows_the_declared_help_and_default() -> None:
    memory = declared_of("memory_bytes")
    assert memory is not None and default_text(memory) == "2GB"
    assert (
        help_text(memory)
        == "Memory for the tensors compared: peak memory stays under the runtimes and weights each backend holds + the largest frontier of the ONNX graph (the live tensors between the segments it runs in) + this. Half holds one chunk of the backends' values, half the values being compared and the final outputs; a reference the culprit pass reads is held in half (the rest spilled to disk once). Refused up front where that cannot fit here. [default: 2GB]"
    )
    result = CliRunner().invoke(main, ["compare", "--help"], terminal_width=200)
    assert "--memory-limit SIZE" in result.output and "[default: 2GB]" in result.output


def test_given_reads_each_value_with_its_declaration() -> None:
    read = given(
        {
            "input_shapes": ("1x3x8x8",),
            "precision": "fp16",
            "memory_bytes": "512MB",
            "mean": "0.5",
            "recordings": ("onnxruntime=ort.npz",),
            "opsets": "11,13",
            "json": "r.json",
            "quiet": None,
            "seed": None,
            "compute_capabilities": (),
        }
    )
    assert read.compare == {
        "input_shapes": ("1x3x8x8",),
        "precision": "fp16",
        "memory_bytes": 512 << 20,
        "mean": (0.5, 0.5, 0.5),
        "recordings": {"onnxruntime": "ort.npz"},
    }
    assert read.axes.opsets == (11, 13) and read.axes.many and read.reports.json == "r.json"
    assert read.reports.quiet is False, "not given: the declared default"


def test_options_are_checked_before_any_work(tmp_path) -> None:
    """A bad threshold is named even though the model does not exist: nothing was loaded first."""
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "missing.pt"), "--min-cosine", "2"])
    assert result.exit_code == 2 and result.stderr.startswith("Error: --min-cosine 2.0: must be between -1 and 1")


def test_html_without_matplotlib_is_refused_before_any_work(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "missing.pt"), "--html", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    assert "matplotlib, which is not installed: pip install 'trtdiff[html]'" in result.stderr


def test_a_flag_click_refuses_is_one_line() -> None:
    result = CliRunner().invoke(main, ["compare", "m.pt", "--no-such-flag"])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert (
        result.stderr.startswith("Error: No such option '--no-such-flag'") and "trtdiff compare --help" in result.stderr
    )


def _compare_fields(*argv: str) -> dict[str, object]:
    """What `trtdiff compare m.pt ARGV` gives the comparison, as click parses it and `given` reads it."""
    context = main.commands["compare"].make_context("compare", ["m.pt", *argv])
    return given(context.params).compare


def test_precision_takes_bf16_and_fp16_is_its_alias() -> None:
    assert CompareOptions().with_fields(**_compare_fields("--precision", "bf16")).runtime.precision == "bf16"
    assert CompareOptions().with_fields(**_compare_fields("--fp16")).runtime.precision == "fp16"
    assert _compare_fields("--fp16", "--precision", "fp16") == {"precision": "fp16"}  # agreeing: fine
    assert "precision" not in _compare_fields()
    sources = read_options({"precision": None, "precision" + ALIAS: "fp16", "no_config": True})
    assert sources.read.compare == {"precision": "fp16"} and sources.origins["precision"] == "command line"
    shown = CliRunner().invoke(main, ["compare", "--help"], terminal_width=200).output
    assert "--precision fp32|fp16|bf16" in shown and "--fp16" in shown and "Same as --precision fp16." in shown


def test_the_alias_and_the_flag_disagreeing_is_one_line() -> None:
    with pytest.raises(OptionError) as caught:
        _compare_fields("--fp16", "--precision", "bf16")
    assert caught.value.parameter == "precision"
    result = CliRunner().invoke(main, ["compare", "m.pt", "--precision", "bf16", "--fp16"])
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [
        "Error: --precision bf16: --fp16 means --precision fp16; give one of them"
    ]
