"""What the command writes where a pull request may have planted something: links, hand-written files, folders.

Each report path is checked before any work (one line, exit 2) and written as a new file
renamed over its name; `--force` covers exactly the files its help lists.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from cli_output import without_progress
from click.testing import CliRunner
from onnx import TensorProto, helper

from trtdiff.cli.app import main

ONNX_ONLY = ("--backends", "onnxruntime,onnx-reference", "--quiet")


@pytest.fixture
def relu(tmp_path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(model, str(tmp_path / "relu.onnx"))
    return tmp_path / "relu.onnx"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    lines = [line for line in without_progress(result.stderr).splitlines() if line.strip()]
    return result.exit_code, "\n".join(lines)


@pytest.mark.parametrize(
    ("flag", "name"),
    [
        ("--json", "report.json"),
        ("--junit", "junit.xml"),
        ("--markdown", "summary.md"),
        ("--html", "report.html"),
        ("--exclude-list", "exclude.txt"),
    ],
)
@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "to-nothing"])
def test_a_link_planted_where_a_report_goes_is_refused_before_any_work(
    relu: Path, tmp_path: Path, flag: str, name: str, dangling: bool
) -> None:
    """examples/ci writes reports/*: a pull request can plant reports/summary.md -> a file outside (before:
    overwritten), or a link to a missing file (before: created, which got round --json's earlier-report rule)."""
    victim = tmp_path / "outside.txt"
    if not dangling:
        victim.write_text("the user's")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / name).symlink_to(victim)
    code, stderr = _run("compare", str(relu), *ONNX_ONLY, flag, str(tmp_path / "reports" / name))
    assert code == 2 and stderr.count("\n") == 0 and f"Error: {flag} " in stderr, stderr
    assert "is a symbolic link" in stderr
    assert victim.read_text() == "the user's" if not dangling else not victim.exists()


def test_a_hand_written_exclude_list_is_kept_and_a_list_trtdiff_wrote_is_written_again(
    relu: Path, tmp_path: Path
) -> None:
    """Before: a passing run truncated the user's list to 0 bytes."""
    mine = tmp_path / "nodes_to_exclude.txt"
    mine.write_text("# kept in FP16 by hand\n/head/.*\n")
    code, stderr = _run("compare", str(relu), *ONNX_ONLY, "--exclude-list", str(mine))
    assert code == 2 and "is not a trtdiff exclusion list" in stderr
    assert mine.read_text() == "# kept in FP16 by hand\n/head/.*\n"
    ours = tmp_path / "exclude.txt"
    ours.write_text("^/Add$\n^/decoder/Resize$\n")  # as an earlier failing run wrote it
    assert _run("compare", str(relu), *ONNX_ONLY, "--exclude-list", str(ours))[0] == 0
    assert ours.read_text() == ""  # no culprit: nothing to exclude now


@pytest.mark.parametrize("flag", ["--markdown", "--junit", "--html"])
def test_a_file_that_is_no_earlier_report_is_kept(relu: Path, tmp_path: Path, flag: str) -> None:
    """Before: --markdown, --junit and --html overwrote any file; now the rule --json had."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    code, stderr = _run("compare", str(relu), *ONNX_ONLY, flag, str(notes))
    assert code == 2 and "the file exists and is not a trtdiff" in stderr and notes.read_text() == "my notes\n"


def test_inspect_json_is_never_written_through_a_link(relu: Path, tmp_path: Path) -> None:
    (tmp_path / "inspection.json").symlink_to(tmp_path / "missing.json")
    code, stderr = _run("inspect", str(relu), "--json", str(tmp_path / "inspection.json"))
    assert code == 2 and "is a symbolic link" in stderr and not (tmp_path / "missing.json").exists()


MODEL = ("tests.cli.test_process:small_cnn", "--input-shape", "1x3x8x8", "--backends", "torch,onnxruntime", "-q")


def test_save_onnx_is_never_written_through_a_link(tmp_path: Path) -> None:
    """Before: a link to a missing file was no "existing file" (so no --force was needed) and the export created
    its target; with --force, the export overwrote the file the link points to."""
    (tmp_path / "model.onnx").symlink_to(tmp_path / "created.onnx")
    code, stderr = _run("compare", *MODEL, "--save-onnx", str(tmp_path / "model.onnx"))
    assert code == 2 and "the file exists" in stderr and "--force" in stderr
    assert not (tmp_path / "created.onnx").exists()
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's")
    (tmp_path / "kept.onnx").symlink_to(victim)
    assert _run("compare", *MODEL, "--save-onnx", str(tmp_path / "kept.onnx"), "--force")[0] == 0
    assert victim.read_text() == "the user's" and not (tmp_path / "kept.onnx").is_symlink()
    assert onnx.load(str(tmp_path / "kept.onnx")).graph.node
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.onnx", "model.onnx", "victim.txt"]


def test_run_save_is_never_written_through_a_link(relu: Path, tmp_path: Path) -> None:
    (tmp_path / "new.npz").symlink_to(tmp_path / "created.npz")
    code, stderr = _run("run", str(relu), "--backend", "onnxruntime", "--save", str(tmp_path / "new.npz"))
    assert code == 2 and "the file exists" in stderr and not (tmp_path / "created.npz").exists()
    victim = tmp_path / "victim.npz"
    victim.write_bytes(b"the user's")
    (tmp_path / "rec.npz").symlink_to(victim)
    assert _run("run", str(relu), "--backend", "onnxruntime", "--save", str(tmp_path / "rec.npz"), "--force")[0] == 0
    assert victim.read_bytes() == b"the user's" and not (tmp_path / "rec.npz").is_symlink()
    assert _run("compare", str(relu), *ONNX_ONLY, "--load", f"onnxruntime={tmp_path / 'rec.npz'}")[0] == 0


def test_the_marked_engine_beside_save_engine_needs_force_too(relu: Path, tmp_path: Path) -> None:
    """Before: NAME.marked.engine, written beside --save-engine, was overwritten whatever was there."""
    (tmp_path / "model.marked.engine").write_bytes(b"the user's")
    code, stderr = _run("build", str(relu), "--save-engine", str(tmp_path / "model.engine"))
    assert code == 2 and "model.marked.engine" in stderr and "--force" in stderr, stderr
    assert (tmp_path / "model.marked.engine").read_bytes() == b"the user's"


def test_force_lists_exactly_what_it_covers() -> None:
    """Before: its help named --save-onnx and --save-engine; it also covered run's --save, --save-repro's folder
    and the ONNX file beside --model-explorer."""
    from trtdiff.options.declare import all_declarations
    from trtdiff.options.parts import COMPARE_PARTS

    (force,) = [d for d in all_declarations(COMPARE_PARTS) if d.name == "force"]
    text = force.option.help
    assert all(flag in text for flag in ("--save-onnx", "--save-engine", ".marked.engine", "run's --save"))
    assert "--save-repro" in text.split("Nothing else")[1] and "report files" in text.split("Nothing else")[1]
