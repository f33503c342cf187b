"""trtdiff.analysis.repro: each culprit's subgraph alone, its inputs and outputs, and the commands that show it."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from culprit_models import SmallCNN

import trtdiff
from trtdiff.analysis.repro import MANIFEST, check_repro, check_repro_dir
from trtdiff.cli.app import main
from trtdiff.errors import OptionError, ReportFileError
from trtdiff.hypotheses.sweep import sweep

POLYGRAPHY = shutil.which("polygraphy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def _alone_on_onnxruntime(folder: Path) -> tuple[float, float]:
    """The subgraph run by ONNX Runtime itself, against the saved reference output: cosine and rel-err."""
    session = ort.InferenceSession(str(folder / "subgraph.onnx"), providers=["CPUExecutionProvider"])
    feeds = dict(np.load(folder / "inputs.npz"))
    got = session.run(None, feeds)[0].astype(np.float64).ravel()
    want = np.load(folder / "outputs" / "reference.npy").astype(np.float64).ravel()
    cosine = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
    return cosine, float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.slow
def test_the_culprits_subgraph_diverges_alone(tmp_path: Path) -> None:
    out = tmp_path / "repro"
    report = trtdiff.compare(SmallCNN().eval(), opset=10, input_shapes=["1x3x16x16"], save_repro=str(out))
    assert [c.onnx_node for c in report.culprits] == ["/Resize"]
    folder = out / "1-Resize"
    manifest = json.loads((folder / MANIFEST).read_text())
    assert (
        manifest["nodes"] == ["/Resize"] and manifest["pair"] == "torch~onnxruntime" and manifest["verdict"] == "export"
    )
    model = onnx.load(str(folder / "subgraph.onnx"))
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node if n.op_type != "Constant"] == ["Resize"]
    assert len(model.graph.input) == 1
    cosine, rel_err = _alone_on_onnxruntime(folder)
    accumulated = report.culprits[0].accumulated
    assert cosine < 0.9999 and rel_err > 1e-3  # it diverges alone ...
    assert rel_err == pytest.approx(accumulated.rel_err, rel=1e-3)  # ... by as much as in the whole model
    results = {r.backend: r for r in check_repro(out)}
    assert results["onnxruntime"].metrics.diverged and results["onnx-reference"].metrics.diverged  # export problem
    result = CliRunner().invoke(main, ["repro", str(folder)])
    assert result.exit_code == 1 and "onnxruntime (run now): cosine" in result.stdout and "DIVERGED" in result.stdout
    readme = (folder / "README.md").read_text()
    assert f"trtdiff repro {folder}" in readme and "opset 11" in readme
    assert (importlib.util.find_spec("polygraphy") is not None) == (folder / "polygraphy_reference.json").exists()
    assert any(f"repro of 1 culprit(s) in {out}" in note for note in report.notes)
    again = trtdiff.compare(SmallCNN().eval(), opset=10, input_shapes=["1x3x16x16"], save_repro=str(out))
    assert again.culprits and (out / "1-Resize" / "subgraph.onnx").exists()  # an earlier repro is written anew


@pytest.mark.slow
@pytest.mark.skipif(POLYGRAPHY is None, reason="Polygraphy is not installed")
def test_polygraphy_shows_it_from_its_own_files(tmp_path: Path) -> None:
    out = tmp_path / "repro"
    trtdiff.compare(SmallCNN().eval(), opset=10, input_shapes=["1x3x16x16"], save_repro=str(out))
    folder = out / "1-Resize"
    command = next(line.strip() for line in (folder / "README.md").read_text().splitlines() if "polygraphy run" in line)
    args = [str(POLYGRAPHY), *command.split("&& ", 1)[1].split()[1:]]
    done = subprocess.run(args, cwd=folder, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr
    agreeing = [*args[: args.index("--atol") + 1], "1", "--rtol", "0"]
    assert subprocess.run(agreeing, cwd=folder, capture_output=True, text=True, timeout=120).returncode == 0


@pytest.mark.slow
def test_deeplab_at_opset_10_hands_over_both_resizes(tmp_path: Path) -> None:
    """The issue's example: the DeepLabV3+ at opset 10; each culprit's subgraph diverges alone on ONNX Runtime."""
    out = tmp_path / "repro"
    result = CliRunner().invoke(
        main,
        [
            "compare",
            "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet",
            "--opset",
            "10",
            "--input-shape",
            "1x3x64x64",
            "--save-repro",
            str(out),
            "--quiet",
        ],
    )
    assert result.exit_code == 1
    folders = json.loads((out / MANIFEST).read_text())["culprits"]
    assert folders == ["1-decoder_Resize", "2-Resize"]
    for name in folders:
        cosine, rel_err = _alone_on_onnxruntime(out / name)
        assert cosine < 0.9999 and rel_err > 1e-3


def test_a_folder_trtdiff_did_not_write_is_refused(tmp_path: Path) -> None:
    check_repro_dir(str(tmp_path / "new"))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(OptionError, match="not empty and holds no earlier trtdiff repro"):
        check_repro_dir(str(tmp_path / "mine"))
    with pytest.raises(OptionError, match="is a file"):
        check_repro_dir(str(tmp_path / "mine" / "notes.txt"))
    with pytest.raises(OptionError, match="does not exist; create it first"):
        check_repro_dir(str(tmp_path / "no" / "such"))
    with pytest.raises(ReportFileError, match="no trtdiff repro here"):
        check_repro(tmp_path / "mine")
    result = CliRunner().invoke(main, ["repro", str(tmp_path / "mine")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    with pytest.raises(OptionError) as caught:  # a sweep would write one repro per combination into one folder
        sweep(SmallCNN(), opsets=[10, 13], input_shapes=["1x3x16x16"], save_repro=str(tmp_path / "new"))
    assert caught.value.parameter == "save_repro"


def test_a_quantized_culprit_is_handed_over_whole_where_the_spec_evaluator_cannot_run_it(tmp_path: Path) -> None:
    """Issue 36 item 5. The ONNX reference evaluator has no DequantizeLinear below opset 19: before, its rerun of
    the Q/DQ culprit's subgraph raised, --save-repro exited 2 with no JSON written and half a bundle left, which
    the next run refused. Now that runtime is a note in the bundle, and the comparison ends as it should (1)."""
    from tests.quant_models import quantized, scale_dequantize, small_cnn

    doubled = tmp_path / "doubled.onnx"
    scale_dequantize(quantized(small_cnn(), tmp_path), "/relu_1/Relu_output_0_DequantizeLinear_Output", 2.0, doubled)
    out, report = tmp_path / "bundles" / "repro", tmp_path / "r.json"
    out.parent.mkdir()
    args = ["compare", "tests.quant_models:small_cnn", "--onnx", str(doubled), "--input-shape", "1x3x16x16"]
    args += ["--backends", "torch,onnxruntime", "--save-repro", str(out), "--json", str(report), "--quiet"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.stderr
    assert trtdiff.report.Report.from_json(report.read_text()).culprits
    (folder,) = [out / name for name in json.loads((out / MANIFEST).read_text())["culprits"]]
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["culprit"]["op_type"] == "DequantizeLinear" and set(manifest["outputs"]) == {"onnxruntime"}
    (note,) = manifest["notes"]
    assert note.startswith("onnx-reference cannot run the subgraph alone: ") and "DequantizeLinear" in note
    assert str(out.parent) not in note  # the path it was built at is not quoted
    assert "onnx-reference cannot run the subgraph alone" in (folder / "README.md").read_text()
    assert sorted(p.name for p in out.parent.iterdir()) == ["repro"]  # nothing left beside it
    again = CliRunner().invoke(main, ["repro", str(folder)])
    assert again.exit_code == 1 and "onnxruntime (run now)" in again.stdout and "DIVERGED" in again.stdout
    assert "note: onnx-reference cannot run the subgraph alone" in again.stdout
