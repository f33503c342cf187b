"""Sweeps: one comparison per opset and exporter, one table, a JSON list of full reports."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from cli_output import without_progress
from click.testing import CliRunner
from rich.console import Console
from torch import nn

from trtdiff.cli.app import main
from trtdiff.errors import OptionError
from trtdiff.hypotheses.sweep import Sweep, sweep, why_not
from trtdiff.render.sweep_text import render_sweep

FACTORY = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"
SHAPE = "1x3x32x32"


@pytest.fixture(scope="module")
def opset_sweep() -> Sweep:
    return sweep(FACTORY, opsets=[10, 13], exporters=["torchscript", "dynamo"], input_shapes=[SHAPE])


@pytest.mark.slow
def test_each_combination_that_can_exist_is_compared(opset_sweep: Sweep) -> None:
    rows = [(e.opset, e.exporter, e.report is not None, e.passed) for e in opset_sweep.entries]
    assert rows == [
        (10, "torchscript", True, False),
        (10, "dynamo", False, True),
        (13, "torchscript", True, True),
        (13, "dynamo", False, True),
    ]
    assert opset_sweep.entries[1].skipped == "the dynamo exporter writes opsets from 18"
    first = opset_sweep.entries[0].report
    assert first is not None and first.culprit is not None and first.culprit.onnx_node == "/decoder/Resize"
    assert not opset_sweep.passed and [e.opset for e in opset_sweep.passing] == [13]


def test_the_table_names_the_culprit_and_the_combinations_that_pass(opset_sweep: Sweep) -> None:
    out = io.StringIO()
    render_sweep(opset_sweep, Console(file=out, width=80, color_system=None))
    text = out.getvalue()
    assert "/decoder/Resize (Resize," in text and "skipped" in text
    assert text.rstrip().splitlines()[-1] == "FAIL: these pass: 13/torchscript."
    assert max(len(line) for line in text.splitlines()) <= 80


def test_json_holds_one_full_report_per_combination(opset_sweep: Sweep, tmp_path: Path) -> None:
    path = tmp_path / "sweep.json"
    opset_sweep.write_json(path)
    data = json.loads(path.read_text())
    assert [(e["opset"], e["exporter"], e["report"] is None) for e in data["sweep"]] == [
        (10, "torchscript", False),
        (10, "dynamo", True),
        (13, "torchscript", False),
        (13, "dynamo", True),
    ]
    assert Sweep.from_json(path.read_text()).to_json() == opset_sweep.to_json()  # NaN != NaN: compare text


@pytest.mark.slow
def test_cli_sweep_exit_code_and_report_files(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    args = ["compare", FACTORY, "--input-shape", SHAPE, "--opset", "10,13", "--json", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert "these pass: 13/torchscript" in result.stdout
    assert CliRunner().invoke(main, args).exit_code == 1  # an earlier sweep JSON may be overwritten
    # A sweep writes every report format too: one document holding every combination (trtdiff.render.sweep_files).
    written = CliRunner().invoke(main, [*args, "--junit", str(tmp_path / "j.xml")])
    assert written.exit_code == 1 and (tmp_path / "j.xml").read_text().count("<testsuite ") == 2
    passing = CliRunner().invoke(main, ["compare", FACTORY, "--input-shape", SHAPE, "--opset", "13,17"])
    assert passing.exit_code == 0 and "PASS: every combination agrees" in passing.stdout


def test_combinations_no_exporter_writes_and_bad_lists() -> None:
    assert why_not(17, "dynamo") == "the dynamo exporter writes opsets from 18"
    assert why_not(21, "torchscript") == "the TorchScript exporter writes opsets 7-20"
    assert why_not(18, "auto") is None
    with pytest.raises(OptionError) as caught:
        sweep(FACTORY, opsets=[13, 17], onnx="model.onnx", input_shapes=[SHAPE])
    assert caught.value.parameter == "onnx"
    bad = CliRunner().invoke(main, ["compare", FACTORY, "--opset", "13,x"])
    assert bad.exit_code == 2 and "--opset 13,x" in bad.stderr


@pytest.mark.slow
def test_precision_is_a_sweep_axis_for_tensorrt() -> None:
    result = sweep(FACTORY, opsets=[13], precisions=["fp32", "tf32", "fp16"], input_shapes=[SHAPE])
    assert [(e.precision, e.report is not None) for e in result.entries] == [
        ("fp32", True),
        ("tf32", True),
        ("fp16", True),
    ]
    reports = [e.report for e in result.entries if e.report is not None]
    trt = [r.tensorrt for r in reports]
    if all(t is not None and t.status == "skipped" for t in trt):  # no GPU: only the row's settings differ
        out = io.StringIO()
        render_sweep(result, Console(file=out, width=80, color_system=None))
        assert "precision rows compare TensorRT, which was skipped here" in out.getvalue()
    with pytest.raises(OptionError) as caught:
        sweep(FACTORY, opsets=[13], precisions=["int8"], input_shapes=[SHAPE])
    assert caught.value.parameter == "sweep_precision"
    refused = CliRunner().invoke(main, ["build", FACTORY, "--input-shape", SHAPE, "--sweep-precision", "fp32,fp16"])
    assert refused.exit_code == 2 and "--sweep-precision" in refused.stderr


def test_a_combination_with_nan_outputs_fails_and_names_where_they_come_from() -> None:
    result = sweep("tests.nonfinite_models:nan_in_the_middle", opsets=[13], input_shapes=["1x3x8x8"])
    (entry,) = result.entries
    assert not entry.passed and not result.passed
    out = io.StringIO()
    render_sweep(result, Console(file=out, width=80, color_system=None))
    assert "NaN/Inf from /root/Sqrt (Sqrt)" in " ".join(out.getvalue().split())


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def test_a_combination_that_cannot_run_is_a_failing_row_and_the_rest_still_run(tmp_path: Path) -> None:
    archive = tmp_path / "tiny.pt"
    torch.jit.save(torch.jit.script(_Tiny().eval()), str(archive))
    out = tmp_path / "sweep.json"
    args = ["compare", str(archive), "--input-shape", "1x3x8x8", "--opset", "17,18", "--exporter", "torchscript,dynamo"]
    result = CliRunner().invoke(main, [*args, "--json", str(out)])
    assert result.exit_code == 1, result.output
    rows = [
        (e["opset"], e["exporter"], e["report"] is not None, e["skipped"], e["failed"])
        for e in json.loads(out.read_text())["sweep"]
    ]
    reason = (
        "--exporter dynamo: the dynamo exporter cannot read a TorchScript archive; use --exporter torchscript "
        "(opsets 7-20), or give the eager model (a factory pkg.module:function) to use dynamo"
    )
    assert rows == [
        (17, "torchscript", True, None, None),
        (17, "dynamo", False, "the dynamo exporter writes opsets from 18", None),
        (18, "torchscript", True, None, None),
        (18, "dynamo", False, None, reason),
    ]
    # The reason folds over lines in its column, beside the other columns' dashes.
    assert "FAILED  --exporter dynamo: the dynamo" in result.stdout and "TorchScript archive; use" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1] == "FAIL: these pass: 17/torchscript, 18/torchscript."


def test_any_error_in_a_row_fails_that_row_but_an_interrupt_stops_the_sweep() -> None:
    exports: list[str] = []

    def progress(text: str) -> None:
        if text.startswith("exporting"):
            exports.append(text)
            if len(exports) == 1:
                raise ValueError("a progress display that broke")

    result = sweep(_Tiny().eval(), opsets=[13, 17], input_shapes=["1x3x8x8"], progress=progress)
    assert [(e.opset, e.failed) for e in result.entries] == [
        (13, "internal error (ValueError: a progress display that broke)"),
        (17, None),
    ]
    assert not result.passed and [e.opset for e in result.passing] == [17]

    def interrupt(text: str) -> None:
        if text.startswith("exporting"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep(_Tiny().eval(), opsets=[13, 17], input_shapes=["1x3x8x8"], progress=interrupt)


def test_an_error_every_row_shares_is_bad_input_not_a_table(tmp_path: Path) -> None:
    missing = CliRunner().invoke(main, ["compare", str(tmp_path / "missing.pt"), "--opset", "13,17"])
    errors = without_progress(missing.stderr)
    assert missing.exit_code == 2 and errors.startswith("Error: ") and "no such file" in errors
    assert len(errors.strip().splitlines()) == 1 and not missing.stdout
    wrong = CliRunner().invoke(main, ["compare", FACTORY, "--input-shape", "1x4x32x32", "--opset", "13,17"])
    assert wrong.exit_code == 2 and "forward raised" in wrong.stderr
    kept = CliRunner().invoke(
        main, ["compare", FACTORY, "--input-shape", SHAPE, "--opset", "13,17", "--save-onnx", str(tmp_path / "m.onnx")]
    )
    assert kept.exit_code == 2 and without_progress(kept.stderr).startswith("Error: --save-onnx: ")


def test_opsets_past_the_newest_any_exporter_writes_are_skipped() -> None:
    import onnx

    newest = onnx.defs.onnx_opset_version()
    assert why_not(newest, "dynamo") is None and why_not(newest, "auto") is None
    assert why_not(newest + 1, "dynamo") == f"no exporter writes it (TorchScript: opsets 7-20, dynamo: 18-{newest})"
    assert why_not(newest + 1, "auto") == f"no exporter writes it (TorchScript: opsets 7-20, dynamo: 18-{newest})"
    assert why_not(6, "auto") is not None


@pytest.mark.slow
def test_a_sweep_records_pytorch_once_and_each_row_has_the_figures_of_its_own_compare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import trtdiff
    from trtdiff.backends.pytorch import capture as capture_module

    recordings: list[int] = []
    original = capture_module.capture
    monkeypatch.setattr(capture_module, "capture", lambda *a, **k: recordings.append(1) or original(*a, **k))
    swept = sweep(FACTORY, opsets=[11, 13, 17], input_shapes=[SHAPE], backends=["torch", "onnxruntime"])
    assert len(recordings) == 1 and swept.passed
    for entry in swept.entries:
        alone = trtdiff.compare(FACTORY, opset=entry.opset, input_shapes=[SHAPE], backends=["torch", "onnxruntime"])
        assert entry.report is not None
        assert [(layer.tensor, layer.pairs) for layer in entry.report.layers] == [
            (layer.tensor, layer.pairs) for layer in alone.layers
        ]
