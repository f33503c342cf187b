"""--simplify: the file after onnxslim is compared too, side by side, with the same pairing."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

import trtdiff
from trtdiff.cli.app import main
from trtdiff.errors import OptionError
from trtdiff.hypotheses.simplify import simplify_model

FACTORY = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"
SHAPE = "1x3x32x32"


@pytest.mark.slow
@pytest.mark.parametrize(("opset", "culprits"), [(10, ["/decoder/Resize", "/Resize"]), (13, [])])
def test_simplified_file_keeps_the_pairing_and_the_culprit(opset: int, culprits: list[str]) -> None:
    report = trtdiff.compare(FACTORY, input_shapes=[SHAPE], opset=opset, simplify=True)
    simplified = report.simplified
    assert simplified is not None and simplified.simplified is None
    assert [c.onnx_node for c in report.culprits] == culprits == [c.onnx_node for c in simplified.culprits]
    assert (simplified.pairing.float_paired, simplified.pairing.float_tensors) == (51, 51)
    assert simplified.pairing.onnx_tensors < report.pairing.onnx_tensors  # shape arithmetic folded
    assert any(note.startswith("simplified with onnxslim") for note in simplified.notes)
    assert report.passed == (opset != 10) and trtdiff.Report.from_json(report.to_json()).simplified is not None


@pytest.mark.slow
def test_cli_prints_the_simplified_line() -> None:
    result = CliRunner().invoke(main, ["compare", FACTORY, "--input-shape", SHAPE, "--opset", "13", "--simplify"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # lines wrap at 80 columns
    assert "simplified (onnxslim" in text and "nodes): its 4 checks hold; all 51 compared tensors agree" in text


def test_without_onnxslim_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnx

    monkeypatch.setitem(sys.modules, "onnxslim", None)  # as if the extra were not installed
    with pytest.raises(OptionError, match=r"trtdiff\[simplify\]") as caught:
        simplify_model(onnx.ModelProto())
    assert caught.value.parameter == "simplify"
