"""What fixing each culprit recovers: alone and cumulative, measured, and "nothing measurable" below noise.

A model of three parallel branches, each with an edited convolution: two reach the output
at full weight, the third at a millionth. Fixing one of the first two alone leaves exactly
what the other one's edit does on its own; fixing the third recovers nothing measurable.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from culprit_models import edited, export, node, scale_initializer
from rich.console import Console
from torch import nn

import trtdiff
from trtdiff.analysis.attribution import pixel_share
from trtdiff.render.culprits import (
    attribution_summary,
)
from trtdiff.render.terminal import render_terminal
from trtdiff.report import Report

SHAPE = "1x3x16x16"
RTOL = 1e-3  # the default
SCALES = {"/a/": 1.05, "/b/": 0.97, "/c/": 1.5}


class Branches(nn.Module):
    """c(x) * 1e-6 + a(x) + b(x): three convolutions side by side, the first barely reaching the output."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.c = nn.Conv2d(3, 4, 3, padding=1)
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 3, padding=1)
        self.register_buffer("faint", torch.full((1, 4, 1, 1), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.c(x) * self.faint + self.a(x) + self.b(x)).flatten(1)  # no (N, C, H, W): no mIoU


def _scaled(*scopes: str) -> object:
    def edit(model: onnx.ModelProto) -> str:
        for scope in scopes:
            scale_initializer(model, node(model, "Conv", scope).input[1], SCALES[scope])
        return ""

    return edit


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, Report]:
    """The model with all three convolutions edited, and with /a/ and /c/ only (what fixing /b/ alone leaves)."""
    folder = tmp_path_factory.mktemp("attribution")
    model = Branches().eval()
    source = export(model, SHAPE, folder / "branches.onnx", 13)
    every, _ = edited(source, folder / "every.onnx", _scaled("/a/", "/b/", "/c/"))  # type: ignore[arg-type]
    without_b, _ = edited(source, folder / "a-c.onnx", _scaled("/a/", "/c/"))  # type: ignore[arg-type]
    return (
        trtdiff.compare(model, onnx=every, input_shapes=[SHAPE]),
        trtdiff.compare(model, onnx=without_b, input_shapes=[SHAPE]),
    )


@pytest.mark.slow
def test_fixing_a_culprit_alone_leaves_what_the_others_do(reports: tuple[Report, Report]) -> None:
    report, without_b = reports
    assert [c.onnx_node for c in report.culprits] == ["/c/Conv", "/a/Conv", "/b/Conv"]
    faint, a, b = report.attribution
    before = faint.final_rel_err_before
    assert before > 10 * RTOL and a.final_rel_err_before == b.final_rel_err_before == before
    # /b/ is fed by no other culprit: fixing it alone is injecting there alone, measured exactly.
    (output,) = without_b.outputs
    assert b.final_rel_err_after_alone == pytest.approx(output.pairs[next(iter(output.pairs))].rel_err, rel=1e-3)
    assert b.final_rel_err_after < 1e-5, "with every culprit before it fixed, nothing is left"
    assert a.final_rel_err_after > 10 * RTOL, "/b/'s edit is left after fixing /c/ and /a/"
    assert RTOL < a.final_rel_err_after_alone < before and RTOL < b.final_rel_err_after_alone < before
    assert a.measurable and a.measurable_alone and b.measurable and b.measurable_alone
    assert a.miou_after_alone is None and a.miou_pixel_share is None, "no segmentation output"


def test_a_culprit_that_barely_reaches_the_output_recovers_nothing_measurable(
    reports: tuple[Report, Report],
) -> None:
    report, _ = reports
    faint = report.attribution[0]
    assert faint.onnx_node == "/c/Conv" and faint.measurable is False and faint.measurable_alone is False
    assert abs(faint.final_rel_err_before - faint.final_rel_err_after) < RTOL  # the raw figures stay in the JSON
    out = io.StringIO()
    render_terminal(report, Console(file=out, width=80, color_system=None))
    text = " ".join(line.strip() for line in out.getvalue().splitlines())
    assert "/c/Conv (Conv, module c) on torch~onnxruntime" in text
    assert "injecting torch's value recovers no measurable part of the output's error (final rel-err" in text
    (closing,) = attribution_summary(report)
    best = max(report.attribution[1:], key=lambda x: x.final_rel_err_before - x.final_rel_err_after_alone)
    share = (best.final_rel_err_before - best.final_rel_err_after_alone) / best.final_rel_err_before
    assert closing == (
        f"{best.onnx_node} alone carries {100 * share:.0f}% of the final output's error "
        f"(rel-err {best.final_rel_err_before:.2e})"
    )
    assert f"{closing}." in text


def test_one_pixel_share_of_the_miou() -> None:
    """1 / (classes averaged x pixels counted): 2 classes present of 3, 10 pixels."""
    confusion = np.array([[4, 1, 0], [2, 3, 0], [0, 0, 0]])
    assert pixel_share(confusion) == pytest.approx(1 / (2 * 10))
    assert pixel_share(np.zeros((3, 3), dtype=np.int64)) is None


def test_reports_without_the_alone_figures_still_read(tmp_path: Path, reports: tuple[Report, Report]) -> None:
    """A report written before these fields: the figures default to None and the closing sentence is left out."""
    report, _ = reports
    data = report.to_dict()
    for row in data["attribution"]:
        for key in [k for k in row if k.endswith("_alone") or k in ("measurable", "miou_pixel_share")]:
            del row[key]
    old = Report.from_dict(data)
    assert all(a.final_rel_err_after_alone is None and a.measurable is None for a in old.attribution)
    assert attribution_summary(old) == []


@pytest.mark.slow
def test_a_feeding_culprit_whose_fix_is_noise_is_credited_nothing() -> None:
    """The demo's case: at 128x128 fixing the decoder Resize alone moves the agreement mIoU by -0.0005 (a
    few pixels the other way); the final Resize alone then carries the whole loss, not more than it."""
    report = trtdiff.compare(
        "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet", input_shapes=["1x3x128x128"], opset=10
    )
    decoder, final = report.attribution
    assert decoder.onnx_node == "/decoder/Resize" and decoder.miou_recovered is not None
    assert decoder.miou_recovered < 0 and decoder.measurable is False and decoder.measurable_alone is False
    assert final.miou_recovered_alone == final.miou_recovered  # not final's minus the decoder's noise
    lost = 1.0 - final.miou_before  # agreement: the reference agrees with itself
    assert attribution_summary(report) == [f"/Resize alone carries 100% of the {lost:.4f} mIoU lost"]
    out = io.StringIO()
    render_terminal(report, Console(file=out, width=80, color_system=None))
    text = " ".join(line.strip() for line in out.getvalue().splitlines())
    assert "injecting torch's value recovers no measurable mIoU" in text and "-0.000" not in text


def test_fixing_nan_positions_is_measurable_even_where_an_mIoU_is_known() -> None:
    """NaN logits leave argmax masks (and so the mIoU) blind to them: fewer differing NaN/Inf positions in the final
    outputs is a recovery in its own right, never "nothing measurable" beside "carries 100% of the positions"."""
    from trtdiff.analysis.attribution import _Figures, _measurable
    from trtdiff.options import Thresholds

    before = _Figures(rel_err=1e-7, cosine=1.0, miou=0.5, non_finite=1312)
    fixed = _Figures(rel_err=0.0, cosine=1.0, miou=0.5, non_finite=0)
    same = _Figures(rel_err=0.0, cosine=1.0, miou=0.5, non_finite=1312)
    assert _measurable(before, fixed, Thresholds(), share=1e-4)
    assert not _measurable(before, same, Thresholds(), share=1e-4)


@pytest.mark.slow
def test_attribution_injects_at_most_five_culprits_a_pair_and_says_so_and_long_steps_say_where_they_are(
    tmp_path: Path,
) -> None:
    """Issue 38 item 4: no step's cost grows with the number of culprits times the graph, and a step that can take
    minutes shows progress. Seven Convs of a deep net edited: seven culprits, five attributed, a note for the rest."""
    from tests.precision_models import DEEP_SHAPE, deep_residual

    model = deep_residual()
    source = export(model, DEEP_SHAPE, tmp_path / "deep.onnx", 17)

    def seven(proto: onnx.ModelProto) -> str:
        convs = [n for n in proto.graph.node if n.op_type == "Conv"][:14:2]
        for conv in convs:
            scale_initializer(proto, conv.input[1], 1.5)
        return convs[0].name

    path, _ = edited(source, tmp_path / "edited.onnx", seven)
    said: list[str] = []
    report = trtdiff.compare(
        model, onnx=str(path), input_shapes=[DEEP_SHAPE], backends=["torch", "onnxruntime"], progress=said.append
    )
    assert len(report.culprits) == 7
    assert len(report.attribution) == 5
    assert any("the first 5 of 7 culprits on torch~onnxruntime were injected" in note for note in report.notes)
    assert sum(line.startswith("the ONNX spec evaluator on ") for line in said) == 7
    injected = [line for line in said if line.startswith("attribution: injected graph ")]
    assert injected and injected[-1].startswith(f"attribution: injected graph {len(injected)} of {len(injected)} ")
