"""Issue 30: no name read from a file forges a line a CI or a person trusts.

A real ONNX file whose node names hold a line break and a workflow command, ESC sequences
(colour, an OSC 8 link), rich markup, a carriage return before a Markdown heading, a
Markdown image and an HTML tag is compared for real (ONNX Runtime against the ONNX spec
evaluator, rtol 0 so that every Sigmoid diverges and is named a culprit), on GitHub Actions,
writing every report format; then its saved report is rendered again with `trtdiff report`,
in process and as a process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from trtdiff.cli.app import main

EVIL = (
    "\n::add-mask::secret",
    "\x1b]8;;http://evil\x07click\x1b]8;;\x07",
    "\x1b[31m",
    "[red]x[/red]",
    "\r# heading",
    "![img](http://x)",
    "<script>",
)
ARGS = ("--input-shape", "1x4", "--backends", "onnxruntime,onnx-reference", "--rtol", "0")
ROOT = Path(__file__).resolve().parents[2]


def evil_onnx(path: Path) -> Path:
    """A chain of Sigmoids named n0<EVIL[0]>, n1<EVIL[1]>, ... (IR version 8: every ONNX Runtime reads it)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    names = [f"t{i}" for i in range(len(EVIL) - 1)]
    nodes = [
        helper.make_node("Sigmoid", [source], [target], name=f"n{i}{name}")
        for i, (name, source, target) in enumerate(zip(EVIL, ["x", *names], [*names, "y"], strict=True))
    ]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def forged(output: str) -> list[str]:
    """The lines a GitHub runner would read as workflow commands that are not trtdiff's own annotations.

    The runner splits on CR and LF and trims leading white space before looking for `::`; `##[` counts
    anywhere in a line.
    """
    lines = re.split(r"\r\n|\r|\n", output)
    return [
        line
        for line in lines
        if (line.lstrip().startswith("::") and not line.startswith("::error title=trtdiff")) or "##[" in line
    ]


def assert_safe_terminal(output: str) -> None:
    assert not forged(output), forged(output)
    assert "\x1b" not in output and "\x07" not in output, "no ESC or BEL from a name reaches the terminal"


def assert_safe_files(folder: Path) -> None:
    markdown = (folder / "r.md").read_text()
    lines = re.split(r"\r\n|\r|\n", markdown)
    assert not [line for line in lines if line.lstrip().startswith(("# heading", "!", "::", "[red]"))]
    assert "\r" not in markdown and "\x1b" not in markdown
    prose = re.sub(r"`[^`]*`", "", markdown)  # a code span shows its text as written: outside them, nothing is read
    assert "![img](" not in prose and "<script>" not in prose and "[red]" not in prose
    assert "`n4\\r# heading`" in markdown  # the name, shown escaped
    page = (folder / "r.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page and "\x1b" not in page
    root = ET.parse(folder / "r.xml").getroot()  # ESC in XML 1.0 would not parse
    assert root.tag == "testsuites"
    text = ET.tostring(root, encoding="unicode")
    assert "n0\\n::add-mask::secret" in text and "n2\\x1b[31m" in text
    failures = "\n".join(f.text or "" for f in root.iter("failure"))
    assert not [line for line in failures.splitlines() if line.lstrip().startswith("::")]


def _files(folder: Path) -> list[str]:
    return ["--markdown", str(folder / "r.md"), "--html", str(folder / "r.html"), "--junit", str(folder / "r.xml")]


def test_a_compare_on_github_actions_writes_no_line_a_name_made(tmp_path: Path) -> None:
    model = evil_onnx(tmp_path / "evil.onnx")
    runner = CliRunner(env={"GITHUB_ACTIONS": "true"})
    result = runner.invoke(
        main, ["compare", str(model), *ARGS, "--all", "--json", str(tmp_path / "r.json"), *_files(tmp_path)]
    )
    assert result.exit_code == 1, result.output
    assert_safe_terminal(result.stdout)
    assert_safe_terminal(result.stderr)
    assert "n3[red]x[/red]" in result.stdout, "rich markup in a name is shown as written"
    assert "n1\\x1b]8;;http://evil\\x07click" in result.stdout and "n0\\n::add-mask::secret" in result.stdout
    errors = [line for line in result.stdout.splitlines() if line.startswith("::error title=trtdiff")]
    assert len(errors) == 2 and all("culprit n0\\n::add-mask::secret (Sigmoid" in line for line in errors)
    assert_safe_files(tmp_path)

    quiet = runner.invoke(main, ["compare", str(model), *ARGS, "--quiet"])
    # at --rtol 0 every later Sigmoid's local error is rounding noise: named together, still escaped
    assert quiet.exit_code == 1 and "noise-level local error" in quiet.stdout
    assert "n4\\r#" in quiet.stdout and "n3[red]x[/red]" in quiet.stdout
    assert_safe_terminal(quiet.stdout)
    assert_safe_terminal(quiet.stderr)

    again = tmp_path / "again"
    again.mkdir()
    result = runner.invoke(main, ["report", str(tmp_path / "r.json"), *_files(again)])
    assert result.exit_code == 1 and "CULPRIT: n0\\n::add-mask::secret" in result.stdout
    assert_safe_terminal(result.stdout)
    assert_safe_terminal(result.stderr)
    assert_safe_files(again)


def test_a_wrapped_line_or_a_file_name_cannot_start_a_command(tmp_path: Path) -> None:
    """A name with no line break that rich wraps at a `::`, and an input file named after a command."""
    model = evil_onnx(tmp_path / "evil.onnx")
    named = tmp_path / "long.onnx"
    onnx_model = onnx.load(str(model))
    onnx_model.graph.node[0].name = "w" * 60 + " ::add-mask::wrapped"  # rich breaks the line at the space
    onnx.save(onnx_model, str(named))
    runner = CliRunner(env={"GITHUB_ACTIONS": "true", "COLUMNS": "80"})
    result = runner.invoke(main, ["compare", str(named), *ARGS, "--quiet"])
    assert result.exit_code == 1
    assert "\n\\::add-mask::wrapped" in result.stdout  # wrapped there, and marked by the guard
    assert_safe_terminal(result.stdout)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    bad = inputs / "x\n::add-mask::file.npy"
    bad.write_text("not an array")
    result = runner.invoke(main, ["compare", str(model), *ARGS, "--inputs", str(inputs)])
    assert result.exit_code == 2 and "x\\n::add-mask::file.npy" in result.stderr  # the whole message, one line
    assert len(result.stderr.strip().splitlines()) == 1
    assert_safe_terminal(result.stdout)
    assert_safe_terminal(result.stderr)


@pytest.mark.slow
def test_as_a_process_on_github_actions(tmp_path: Path) -> None:
    model = evil_onnx(tmp_path / "evil.onnx")
    env = {**os.environ, "GITHUB_ACTIONS": "true", "PYTHONPATH": str(ROOT)}
    for args in (
        ["compare", str(model), *ARGS, "--all", "--json", str(tmp_path / "r.json")],
        ["report", str(tmp_path / "r.json"), *_files(tmp_path)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "trtdiff", *args], capture_output=True, env=env, cwd=tmp_path, timeout=300
        )
        assert done.returncode == 1, done.stderr
        for stream in (done.stdout, done.stderr):
            assert_safe_terminal(stream.decode("utf-8"))
        assert done.stdout.decode().count("::error title=trtdiff") == (2 if args[0] == "compare" else 0)
    assert_safe_files(tmp_path)
