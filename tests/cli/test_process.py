"""The `trtdiff` command as a process (trtdiff.cli.main): its exit status, its files, and an exit without teardown."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

TEARDOWN_PROBE = """
import atexit, sys
import trtdiff.cli

class Probe:
    def __del__(self):
        print("torn down", flush=True)

probe = Probe()  # a module global: freed when the interpreter tears its modules down, not before
atexit.register(print, "exit handler ran")
sys.argv = ["trtdiff", *sys.argv[1:]]
trtdiff.cli.main()
"""


def _relu(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    # IR version 8: every ONNX Runtime reads it (1.30 refuses the default of onnx 1.23, 14)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(model, str(path))
    return path


def _trtdiff(
    *arguments: str, cwd: Path, prefix: tuple[str, ...] = ("-m", "trtdiff")
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *prefix, *arguments], cwd=cwd, capture_output=True, text=True, timeout=180, check=False
    )


def test_a_compare_writes_every_report_and_exits_with_its_status(tmp_path: Path) -> None:
    _relu(tmp_path / "m.onnx")
    done = _trtdiff(
        "compare", "m.onnx", "--backends", "onnxruntime,onnx-reference", "--json", "r.json", "--markdown", "r.md",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "r.json").read_text())["passed"] is True
    markdown = (tmp_path / "r.md").read_text()
    assert markdown.startswith("### trtdiff: ✅ PASS") and markdown.rstrip().endswith("</sub>")  # written whole
    assert "PASS" in done.stdout  # stdout flushed before the process ended


def test_bad_input_still_exits_2_with_one_line(tmp_path: Path) -> None:
    done = _trtdiff("compare", "missing.onnx", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("Error: missing.onnx") and len(done.stderr.strip().splitlines()) == 1


def test_exit_handlers_run_but_the_interpreter_is_not_torn_down(tmp_path: Path) -> None:
    done = _trtdiff("--help", cwd=tmp_path, prefix=("-c", TEARDOWN_PROBE))
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout and "exit handler ran" in done.stdout
    assert "torn down" not in done.stdout
    plain = subprocess.run(  # the probe sees a teardown where there is one
        [sys.executable, "-c", TEARDOWN_PROBE.replace("trtdiff.cli.main()", "sys.exit(0)")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "torn down" in plain.stdout


def test_under_a_profiler_the_interpreter_exits_normally_and_the_profile_is_written(tmp_path: Path) -> None:
    done = _trtdiff("--help", cwd=tmp_path, prefix=("-m", "cProfile", "-o", "p.out", "-m", "trtdiff"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "p.out").stat().st_size > 0
