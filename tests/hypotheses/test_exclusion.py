"""The exclusion list (--exclude-list, each culprit's `exclude`) with node names a model can hold: each line
matches its node alone under `re.match` (as ModelOpt reads nodes_to_exclude), is one line of printable text,
and the check that keeps those nodes in higher precision applies the names themselves.

Before: the patterns were "^" + re.escape(name) + "$": a newline in a name split its line in two (the second
line matching an innocent node), ESC went into the file raw, `$` also matched the name followed by a newline,
and the check read the names back from the patterns wrongly ("keeping these nodes is not enough").
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from tests.quant_models import quantized, scale_dequantize, small_cnn
from trtdiff.cli.app import main
from trtdiff.hypotheses.exclusion import excluded_nodes
from trtdiff.pairing.qdq import exclude_pattern, exclusion_patterns, unwritable
from trtdiff.report import Report
from trtdiff.source.onnx_graph import GraphInfo, graph_from_model

NAMES = (
    "/conv2/Conv",
    "/conv2.Conv",
    "/conv2/Conv\n",  # `$` would match it with "/conv2/Conv"'s pattern
    "evil\n/conv2/Conv",
    "\x1b[31m::error::pwned",
    "::error::x",
    "a$^(b)|c*",
    "tab\there\rcr",
    " lead space",
    "sep\u2028arator\u202e",
    "卷积",
    "back\\slash",
)
EVIL = {  # the readers of the DequantizeLinear made wrong below: the nodes its culprit keeps unquantized
    "/conv2/Conv": "/conv2/evil\n/conv3/Conv",
    "/Add": "/\x1b[31m::error::(x.y)$^ z\n",
}


def _graph(names: list[str], tmp_path: Path) -> GraphInfo:
    """x -> Identity (one per name, each its own output) -> the graph's outputs."""
    nodes = [helper.make_node("Identity", ["x"], [f"y{i}"], name=name) for i, name in enumerate(names)]
    outputs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [2]) for i in range(len(names))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])]
    model = helper.make_model(helper.make_graph(nodes, "names", inputs, outputs))
    return graph_from_model(model, tmp_path / "names.onnx")


def _matched(pattern: str, names: list[str]) -> list[str]:
    return [name for name in names if re.match(pattern, name)]


def test_each_pattern_is_one_printable_line_matching_its_node_alone(tmp_path: Path) -> None:
    names = [*NAMES, "dup", "dup", ""]
    graph = _graph(names, tmp_path)
    for name in NAMES:
        pattern = exclude_pattern(name)
        assert pattern.isprintable() and " " not in pattern and pattern.startswith("^"), pattern
        assert _matched(pattern, names) == [name], (name, pattern)
    assert exclude_pattern("evil\n/conv2/Conv") == "^evil\\n/conv2/Conv\\Z"
    assert exclude_pattern("\x1b[31m") == "^\\x1b\\[31m\\Z"
    # a name several nodes share, or none: no line names that node alone
    assert unwritable(graph, "dup") == "2 nodes share the name" and unwritable(graph, "")
    assert unwritable(graph, "Identity_15") == "the file gives the node no name"  # trtdiff's name for it
    assert exclusion_patterns(graph, ["dup", "/conv2.Conv", ""]) == ("^/conv2\\.Conv\\Z",)


@pytest.fixture(scope="module")
def evil_qdq(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tests' INT8 CNN with the DequantizeLinear after conv1 given twice its scale (a culprit whose readers,
    /conv2/Conv and /Add, are to stay unquantized), those two renamed to names with a line break, ESC, `::error`
    and regex syntax."""
    folder = tmp_path_factory.mktemp("evil")
    wrong = folder / "wrong.onnx"
    scale_dequantize(quantized(small_cnn(), folder), "/relu/Relu_output_0_DequantizeLinear_Output", 2.0, wrong)
    model = onnx.load(str(wrong))
    for node in model.graph.node:
        node.name = EVIL.get(node.name, node.name)
    onnx.save(model, str(folder / "evil.onnx"))
    return folder / "evil.onnx"


def test_evil_names_get_one_exact_line_each_and_the_check_applies_them(evil_qdq: Path, tmp_path: Path) -> None:
    excluded, saved = tmp_path / "exclude.txt", tmp_path / "r.json"
    args = ["compare", "--no-config", "tests.quant_models:small_cnn", "--onnx", str(evil_qdq)]
    args += ["--input-shape", "1x3x16x16", "--backends", "torch,onnxruntime"]
    result = CliRunner().invoke(main, [*args, "--exclude-list", str(excluded), "--json", str(saved)])
    assert result.exit_code == 1, result.output
    report = Report.from_json(saved.read_text())
    (culprit,) = report.culprits
    assert culprit.onnx_node == "/relu/Relu_output_0_DequantizeLinear"
    lines = excluded.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 3  # one line per node
    names = [node.name for node in onnx.load(str(evil_qdq)).graph.node]
    for line, name in zip(lines[:-1], EVIL.values(), strict=True):
        assert line.isprintable() and not line.lstrip().startswith("::"), line
        assert _matched(line, names) == [name]  # as ModelOpt applies it: that node, no other
    checked = (
        "exclusion list checked: with the Q/DQ in front of /conv2/evil\n/conv3/Conv, "
        "/\x1b[31m::error::(x.y)$^ z\n removed (their float weights restored where known) the final outputs pass every check"
    )
    assert checked in report.notes and culprit.exclude_nodes == tuple(EVIL.values())
    assert "\x1b" not in result.output and not any(line.lstrip().startswith("::") for line in result.output.split("\n"))
    # a report written before `exclude_nodes` held "^" + re.escape(name) + "$": its names are read back from those
    older = json.loads(saved.read_text())
    for entry in older["culprits"]:
        entry["exclude"] = [f"^{re.escape(name)}$" for name in entry.pop("exclude_nodes")]
    assert excluded_nodes(Report.from_json(json.dumps(older))) == tuple(EVIL.values())


def test_a_node_no_line_can_name_alone_is_left_to_a_note(evil_qdq: Path, tmp_path: Path) -> None:
    """A reader the file gives no name (trtdiff calls it by its op and index): no pattern can match it alone, so it
    is named in a note instead of the list, and the check still keeps it unquantized."""
    model = onnx.load(str(evil_qdq))
    index, add = next((i, node) for i, node in enumerate(model.graph.node) if node.name == EVIL["/Add"])
    add.name = ""
    unnamed = tmp_path / "unnamed.onnx"
    onnx.save(model, str(unnamed))
    excluded, saved = tmp_path / "exclude.txt", tmp_path / "r.json"
    args = ["compare", "--no-config", "tests.quant_models:small_cnn", "--onnx", str(unnamed), "--json", str(saved)]
    args += ["--input-shape", "1x3x16x16", "--backends", "torch,onnxruntime", "--exclude-list", str(excluded)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert excluded.read_text(encoding="utf-8") == exclude_pattern(EVIL["/conv2/Conv"]) + "\n"
    text = " ".join(result.stdout.split())
    assert (
        f"exclusion list: Add_{index} is to be kept in higher precision too, but the file gives the node no name: "
        "no regular expression matches it alone, so it is not in the list; keep it by hand"
    ) in text
    report = Report.from_json(saved.read_text())
    assert any(
        n.endswith(f"Add_{index} removed (their float weights restored where known) the final outputs pass every check")
        for n in report.notes
    ), report.notes
