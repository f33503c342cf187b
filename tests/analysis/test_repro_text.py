"""Issue 30: a repro bundle's READMEs and `trtdiff repro` write names from the model as text, never as lines.

The README-writing functions are given a culprit whose names hold a line break, a Markdown
heading, an image, a tag and ESC sequences; `trtdiff repro` runs (ONNX Runtime and the spec
evaluator, for real) a bundle whose backend name holds rich markup, a workflow command and ESC.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper

from trtdiff.analysis.repro import MANIFEST, MARKER
from trtdiff.analysis.repro_readme import ReproContext, readme, top_readme
from trtdiff.cli.app import main
from trtdiff.options import Thresholds
from trtdiff.report import BackendPair

NODE = "/Resize\n# heading\r![img](http://x)<script>\x1b[31m"
BACKEND = "[red]x[/red]\n::add-mask::secret\x1b]8;;http://evil\x07click\x1b]8;;\x07"


def _context(tmp_path: Path) -> ReproContext:
    return ReproContext(tmp_path, None, Thresholds(), f"model\n# {NODE}.onnx")  # type: ignore[arg-type]


def _assert_markdown(text: str) -> None:
    lines = re.split(r"\r\n|\r|\n", text)
    assert "\r" not in text and "\x1b" not in text and "\x07" not in text
    assert not [line for line in lines[1:] if line.lstrip().startswith(("#", "!", "::", "<"))]
    prose = re.sub(r"`[^`]*`", "", text)  # a code span shows its text as written
    assert "![img](" not in prose and "<script>" not in prose


def test_the_readmes_write_names_as_markdown_text(tmp_path: Path) -> None:
    folder = tmp_path / "bundle dir" / "1-Resize"
    manifest = {
        "culprit": {"onnx_node": NODE, "op_type": "Resize<b>", "module": None},
        "pair": str(BackendPair("torch", "onnxruntime")),
        "opset": 10,
        "verdict": "export",
        "advice": f"re-export {NODE}",
        "nodes": [NODE],
        "output": NODE,
        "inputs": {NODE: "inputs/0-Resize.npy"},
    }
    reference = np.ones((2, 2), dtype=np.float32)
    text = readme(folder, manifest, reference, {BACKEND: reference * 2}, _context(tmp_path), False)
    _assert_markdown(text)
    assert text.startswith("# /Resize\\\\n# heading\\\\r!\\[img\\](http://x)&lt;script>\\\\x1b\\[31m (Resize&lt;b>)")
    assert f"    trtdiff repro '{folder}'" in text, "the command's path is quoted for the shell"
    top = top_readme(_context(tmp_path), [], [folder])
    _assert_markdown(top)
    assert top.startswith("# trtdiff repro of `model\\n# /Resize\\n# heading")


def _bundle(folder: Path) -> Path:
    """A repro bundle of one Sigmoid, its saved output under a hostile backend name."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(
        helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"], name="s")], "g", [x], [y]),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    model.ir_version = 8
    (folder / "inputs").mkdir(parents=True)
    (folder / "outputs").mkdir()
    onnx.save(model, str(folder / "subgraph.onnx"))
    value = np.linspace(-2, 2, 4, dtype=np.float32).reshape(1, 4)
    np.save(folder / "inputs" / "0-x.npy", value)
    np.save(folder / "outputs" / "reference.npy", 1 / (1 + np.exp(-value)))
    np.save(folder / "outputs" / "evil.npy", value)
    manifest = {
        "kind": MARKER,
        "subgraph": "subgraph.onnx",
        "output": "y",
        "inputs": {"x": "inputs/0-x.npy"},
        "reference": {"backend": "torch", "file": "outputs/reference.npy"},
        "outputs": {BACKEND: "outputs/evil.npy"},
        "thresholds": {"min_cosine": 0.9999, "rtol": 0.001, "max_abs": None},
    }
    (folder / MANIFEST).write_text(json.dumps(manifest))
    return folder


def test_repro_prints_a_bundles_names_as_text(tmp_path: Path) -> None:
    folder = _bundle(tmp_path / "bundle")
    result = CliRunner(env={"GITHUB_ACTIONS": "true"}).invoke(main, ["repro", str(folder)])
    assert result.exit_code == 1, result.output
    assert "[red]x[/red]\\n::add-mask::secret\\x1b]8;;http://evil\\x07click" in result.stdout.replace("\n", "")
    assert "onnxruntime (run now): cosine 1.000000" in result.stdout
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert not [line for line in re.split(r"\r\n|\r|\n", result.stdout) if line.lstrip().startswith("::")]
