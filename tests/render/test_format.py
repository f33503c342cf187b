"""The shared wording: numbers, reasons, check messages and limits, the divergence pieces."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest

from trtdiff.render import culprits as ctext, format as fmt
from trtdiff.report import BackendPair, Reason, Report, Thresholds


@pytest.mark.parametrize(
    ("figure", "text"),
    [
        (0.0264, "2.64e-02"),
        (1.0, "1.00e+00"),
        (0.0, "0.00e+00"),
        (123456.0, "1.23e+05"),
        (math.nan, "nan"),
        (math.inf, "inf"),
    ],
)
def test_sci_has_one_precision(figure: float, text: str) -> None:
    assert fmt.sci(figure) == text


def test_numbers_by_metric() -> None:
    assert fmt.cosine(0.99985412) == "0.999854" and fmt.cosine(math.nan) == "nan"
    assert fmt.format_value("cosine", 0.9999) == "0.999900"
    assert fmt.format_value("divergence", 0.999225) == "0.999225"
    assert fmt.format_value("miou", 0.49951) == "0.4995"
    assert fmt.format_value("miou_drop", -0.01) == "-0.0100"
    assert fmt.format_value("rel_err", 0.114213) == "1.14e-01"
    assert fmt.format_value("max_abs", math.nan) == "nan"
    assert fmt.percent(0.001) == "0.10%" and fmt.percent(None) == "?"


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        (Reason("cosine", 0.999854, 0.9999), "cosine 0.999854 < 0.9999"),
        (Reason("rel_err", 0.0264, 0.001), "rel-err 2.64e-02 > 0.001"),
        (Reason("max_abs", 0.5, 0.01), "max-abs 5.00e-01 > 0.01"),
        (Reason("non_finite", 3.0, 0.0), "non-finite values: reference 0 NaN/Inf, candidate 3 NaN/Inf"),
        (
            Reason("non_finite", 4.0, 4.0, detail="2 of 64 positions"),
            "non-finite values differ at 2 of 64 positions: reference 4 NaN/Inf, candidate 4 NaN/Inf",
        ),
        (Reason("shape", math.nan, detail="2x3 vs 3x2"), "shape 2x3 vs 3x2"),
        (Reason("mismatches", 7.0, 100.0), "7 of 100 elements differ"),
    ],
)
def test_reason_text(reason: Reason, text: str) -> None:
    assert fmt.reason_text(reason) == text


def test_reasons_join_with_semicolons() -> None:
    reasons = (Reason("cosine", 0.999854, 0.9999), Reason("rel_err", 0.0264, 0.001))
    assert fmt.reasons_text(reasons) == "cosine 0.999854 < 0.9999; rel-err 2.64e-02 > 0.001"
    assert fmt.reasons_text(()) == ""


def test_output_check_messages(passing: Report, build: SimpleNamespace) -> None:
    check = build.output_check("min_cosine", 0.9999, 0.9992248932, failing=("input",))
    assert fmt.check_message(check, passing) == (
        "min-cosine 0.9999 on final outputs of 1 sample(s): worst cosine 0.999225 (input)"
    )
    check = build.output_check("rtol", 0.001, 0.11421279, failing=("a", "b"), compared=3, worst_sample="b")
    assert fmt.check_message(check, passing) == "rtol 0.001 on final outputs of 3 sample(s): worst rel_err 0.114213 (b)"
    check = build.output_check("max_abs", 0.01, 0.5)
    assert (
        fmt.check_message(check, passing) == "max-abs 0.01 on final outputs of 1 sample(s): worst max_abs 0.5 (input)"
    )


def test_layer_check_message_names_the_first_divergence(
    passing: Report, diverged: Report, build: SimpleNamespace
) -> None:
    assert fmt.check_message(build.layer_check(51, 0, 0.99999988), passing) == "0 of 51 layers diverge; lowest cosine 1"
    assert fmt.check_message(build.layer_check(51, 8, 0.9992248932), diverged) == (
        "8 of 51 layers diverge; lowest cosine 0.999225; first divergence /decoder/Resize (Resize)"
    )


def test_miou_check_messages(gated: Report) -> None:
    by_id = {check.id: check for check in gated.checks}
    assert fmt.check_message(by_id["agreement/min-miou/torch~onnxruntime"], gated) == (
        "mIoU 0.8875 agreement with torch (min 0.9); worst sample sample-2 0.8100"
    )
    assert fmt.check_message(by_id["labels/min-miou/onnxruntime"], gated) == (
        "mIoU 0.7000 against labels (min 0.6); worst sample sample-2 0.7100"
    )
    assert fmt.check_message(by_id["labels/max-miou-drop/onnxruntime"], gated) == (
        "mIoU drop 0.1000 relative to torch (max 0.05): 0.8000 -> 0.7000"
    )


def test_limit_text(gated: Report, build: SimpleNamespace) -> None:
    thresholds = Thresholds(max_abs=0.01)
    assert fmt.limit_text(build.layer_check(3, 1, 0.9), thresholds) == (
        "no diverged layer (min-cosine 0.9999, rtol 0.001, max-abs 0.01)"
    )
    cosine, rtol = gated.checks[:2]
    assert fmt.limit_text(cosine, thresholds) == "cosine >= 0.9999"
    assert fmt.limit_text(rtol, thresholds, symbols=True) == "rel_err ≤ 0.001"
    assert fmt.limit_text(gated.checks[-1], thresholds, symbols=True) == "miou_drop ≤ 0.05"


def test_inputs_precision_and_backend_names(build: SimpleNamespace) -> None:
    assert fmt.inputs_text({"x": (1, 3, 64, 64), "mask": (1, 64, 64)}) == "x 1x3x64x64, mask 1x64x64"
    assert fmt.precision_text(None, False) == "fp32, TF32 off"
    assert fmt.precision_text("fp32", True) == "fp32 with TF32"
    assert fmt.precision_text("fp16", False) == "fp16"
    assert fmt.short_pair(build.TORCH_TRT) == "pt~trt"
    assert fmt.short_pair(BackendPair("onnxruntime", "mine")) == "ort~mine"
    assert fmt.plural(1, "check") == "1 check" and fmt.plural(0, "check") == "0 checks"


def test_divergence_pieces(build: SimpleNamespace) -> None:
    first = build.first_divergence()
    assert fmt.divergence_head(first) == "/decoder/Resize (Resize, module decoder) on torch~onnxruntime"
    assert fmt.divergence_head(dataclasses.replace(first, module=None), code=lambda s: f"`{s}`") == (
        "`/decoder/Resize` (Resize, no PyTorch module) on torch~onnxruntime"
    )
    assert fmt.divergence_figures(first) == (
        "cosine 0.999854, max-abs 1.04e-02, rel-err 2.64e-02 (cosine 0.999854 < 0.9999; rel-err 2.64e-02 > 0.001)"
    )
    assert fmt.divergence_figures(dataclasses.replace(first, reasons=())).endswith("rel-err 2.64e-02")


def test_suspects_text_lists_the_node_then_a_few_feeders(build: SimpleNamespace) -> None:
    first = build.first_divergence()
    assert fmt.suspects_text(first, limit=2) == "/decoder/Resize, then /decoder/Concat, /decoder/Div, … 3 more"
    assert fmt.suspects_text(first, limit=None).endswith("/decoder/Slice, /decoder/Shape")
    assert fmt.suspects_text(dataclasses.replace(first, suspects=("/decoder/Resize",))) == ""


def test_segmentation_parts(gated: Report) -> None:
    assert gated.segmentation is not None
    assert fmt.segmentation_parts(gated.segmentation) == [
        "agreement mIoU torch~onnxruntime 0.8875 (0.10% pixels changed)",
        "mIoU vs labels torch 0.8000",
        "mIoU vs labels onnxruntime 0.7000",
        "drop onnxruntime 0.1000",
    ]


def test_layer_index(diverged: Report) -> None:
    assert fmt.layer_index(diverged, "/decoder/Resize_output_0") == 3  # counted from 1, as every renderer prints
    assert fmt.layer_index(diverged, "missing") is None
    assert diverged.layers[2].diverged


def test_verdicts(culprits: Report) -> None:
    export, runtime = culprits.culprits
    assert ctext.verdict_text(export) == "export problem (the ONNX spec computes the same)"
    assert ctext.verdict_text(runtime) == "runtime problem (onnxruntime deviates from the ONNX spec)"
    unknown = dataclasses.replace(export, verdict="unknown")
    assert ctext.verdict_text(unknown) == "cause unknown (the ONNX spec agrees with neither side)"
    assert ctext.verdict_text(dataclasses.replace(unknown, spec=None)) == "cause unknown (no ONNX spec evaluation)"
    assert ctext.verdict_text(runtime, short=True) == "runtime problem"
    assert ctext.culprit_marker(export, 2) == "culprit: #2 /decoder/Resize (Resize, export problem)"


def test_attribution_without_segmentation_and_against_agreement(culprits: Report) -> None:
    first, second = culprits.attribution
    plain = dataclasses.replace(first, miou_before=None, miou_after=None, miou_recovered=None)
    assert ctext.attribution_text(culprits, plain) == (
        "injecting torch's value: final rel-err 1.14e-01 -> 7.10e-03, cosine 0.999225 -> 0.999900"
    )
    assert ctext.attribution_text(culprits, second, earlier=2).startswith(
        "injecting torch's values here and at the 2 earlier culprits recovers 0.1540 of 0.1540 mIoU"
    )
    no_labels = dataclasses.replace(culprits, segmentation=None)
    lost = ctext.miou_lost(no_labels, first)
    assert lost is not None and math.isclose(lost, 1 - 0.804), "without labels the ceiling is full agreement"


def test_culprits_of_and_attribution_of(culprits: Report) -> None:
    only = dataclasses.replace(culprits, culprits=())
    assert ctext.culprits_of(only) == (culprits.culprits[0],)
    assert ctext.culprits_of(dataclasses.replace(only, culprit=None)) == ()
    assert ctext.attribution_of(culprits, culprits.culprits[1]) == culprits.attribution[1]
    assert ctext.attribution_of(dataclasses.replace(culprits, attribution=()), culprits.culprits[1]) is None
    assert ctext.culprits_brief(only) == "culprit /decoder/Resize (Resize, export problem)"


def test_inherited_and_drift_texts(inherited: Report, drift: Report, culprits: Report) -> None:
    assert ctext.inherited_text(inherited, code=lambda s: f"`{s}`") == " (inherited from `/decoder/Resize`)"
    assert ctext.inherited_text(drift) == " (inherited: local rel-err 2.00e-04 holds)"
    assert ctext.inherited_text(culprits) == "", "the first divergence is a culprit"
    assert drift.drift is not None
    assert ctext.drift_text(drift.drift, limit=1) == (
        "accumulated drift, no single culprit; largest local contributors: /backbone/Conv (rel-err 4.00e-04), … 3 more"
    )
    empty = dataclasses.replace(drift.drift, contributors=())
    assert ctext.drift_text(empty) == "accumulated drift, no single culprit"


def test_non_finite_check_and_lines(passing: Report) -> None:
    from nonfinite_reports import allowed_report, nan_report, trt_nan_report

    nan = nan_report(passing)
    finite = nan.checks[-1]
    assert finite.id == "outputs/finite/torch~onnxruntime"
    assert (
        fmt.check_message(finite, nan) == "no NaN/Inf in final outputs of 1 sample(s): worst 256 NaN/Inf values (input)"
    )
    assert fmt.limit_text(finite, nan.thresholds) == "no NaN/Inf"
    assert fmt.format_value(finite.metric, finite.worst) == "256"
    allowed = allowed_report(nan).checks[-1]
    assert fmt.check_message(allowed, nan) == (
        "NaN/Inf allowed at the same positions on both sides in final outputs of 1 sample(s): "
        "worst 0 positions differ (input)"
    )
    assert fmt.limit_text(allowed, nan.thresholds, symbols=True) == "NaN/Inf at the same positions"
    assert fmt.non_finite_lines(nan, code=lambda s: f"`{s}`") == [
        "the outputs of torch and onnxruntime hold NaN/Inf; they first appear at `/root/Sqrt` (Sqrt, module `root`): "
        "256 NaN"
    ]
    assert fmt.non_finite_failed(nan) and not fmt.non_finite_failed(allowed_report(nan))
    trt = trt_nan_report(passing)
    assert fmt.non_finite_lines(trt) == [
        "the outputs of tensorrt hold NaN/Inf; they first appear at /norm/Pow (Pow, module norm): 12 Inf"
    ]
    entry = dataclasses.replace(trt.non_finite[0], nan=2, sample="img3")
    several = dataclasses.replace(trt, non_finite=(entry,), samples=trt.samples * 2)
    assert fmt.non_finite_lines(several) == [
        "the outputs of tensorrt hold NaN/Inf on sample img3; they first appear at /norm/Pow (Pow, module norm): "
        "2 NaN, 12 Inf"
    ]


def test_a_culprit_whose_nan_positions_differ_is_worded_by_them(culprits: Report) -> None:
    """A node that differs only in where NaN/Inf sit has rel-err 0 on its finite values: say what differs."""
    export = culprits.culprits[0]
    nan_local = dataclasses.replace(export.local, non_finite_mismatches=2)
    nan_culprit = dataclasses.replace(export, local=nan_local, accumulated=nan_local)
    assert ctext.local_vs_accumulated(nan_culprit) == "NaN/Inf differ at 2 positions here (accumulated: 2)"
    assert ctext.local_vs_accumulated(export).startswith("local rel-err 2.64e-02 vs accumulated")
    first = culprits.attribution[0]
    plain = dataclasses.replace(
        first,
        miou_before=None,
        miou_after=None,
        miou_recovered=None,
        miou_recovered_alone=None,
        final_non_finite_before=2,
        final_non_finite_after=0,
        final_rel_err_after_alone=first.final_rel_err_before,
    )
    assert "final NaN/Inf differing at 2 -> 0 positions" in ctext.attribution_text(culprits, plain)
    only = dataclasses.replace(
        culprits, culprits=(nan_culprit,), culprit=nan_culprit, attribution=(plain,), segmentation=None
    )
    assert ctext.attribution_summary(only) == [
        "/decoder/Resize alone carries 100% of the 2 final output positions whose NaN/Inf differ"
    ]


def test_a_share_short_of_the_whole_is_never_written_as_all_of_it() -> None:
    from trtdiff.render.culprits import (
        _percent,
    )

    assert [_percent(s) for s in (0.94, 0.995, 0.99996, 1.0, 0.004)] == ["94%", "99.5%", "99.9%", "100%", "0%"]
